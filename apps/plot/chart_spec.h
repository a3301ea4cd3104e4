// What uroce-plot draws, as read from its JSON input:
//
//   {"title": "...", "x_label": "...", "y_label": "...",
//    "x_log": true, "y_log": false,
//    "series": [{"name": "...", "points": [[x, y], ...]}, ...]}
//
// Only "series" is required; a series without a name is called "series N".
#pragma once

#include <string>
#include <vector>

namespace uroce::plotapp {

struct Point {
  double x, y;
};

struct Series {
  std::string name;
  std::vector<Point> points;  // drawn in this order
};

struct ChartSpec {
  std::string title, x_label, y_label;
  bool x_log = false, y_log = false;
  std::vector<Series> series;
};

// Reads `text` into `spec`. False with a one-line `error` when it is not
// JSON ("bad JSON at offset N: ..."), not of the shape above (an unknown
// key, a wrong type, a point that is not [x, y]; with its offset), has no
// series or a series without points, or has a value <= 0 on a log axis.
bool parse_chart_spec(const std::string& text, ChartSpec& spec, std::string& error);

}  // namespace uroce::plotapp
