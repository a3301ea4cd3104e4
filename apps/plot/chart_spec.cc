#include "plot/chart_spec.h"

#include <cmath>
#include <cstdio>

#include "plot/json.h"

namespace uroce::plotapp {
namespace {

using Kind = JsonValue::Kind;

bool wrong(const JsonValue& v, const std::string& what, std::string& error) {
  error = what + " at offset " + std::to_string(v.offset);
  return false;
}

bool expect(const JsonValue& v, Kind kind, const std::string& what, std::string& error) {
  if (v.kind == kind) return true;
  return wrong(v, what + " should be " + json_kind_name(kind) + ", not " + json_kind_name(v.kind), error);
}

// The canvas font is ASCII: a micro sign becomes 'u' (as in "us"), any
// other multi-byte character '?'.
std::string ascii(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      out += c < 0x20 ? ' ' : static_cast<char>(c);
      continue;
    }
    const bool micro = s.compare(i, 2, "\xc2\xb5") == 0 || s.compare(i, 2, "\xce\xbc") == 0;
    out += micro ? 'u' : '?';
    while (i + 1 < s.size() && (static_cast<unsigned char>(s[i + 1]) & 0xc0) == 0x80) ++i;
  }
  return out;
}

bool read_series(const JsonValue& v, std::size_t index, Series& s, std::string& error) {
  const std::string where = "series " + std::to_string(index + 1);
  if (!expect(v, Kind::kObject, where, error)) return false;
  s.name = where;
  const JsonValue* points = nullptr;
  for (const auto& [key, m] : v.members) {
    if (key == "name") {
      if (!expect(m, Kind::kString, where + " \"name\"", error)) return false;
      s.name = ascii(m.string);
    } else if (key == "points") {
      points = &m;
    } else {
      return wrong(m, where + ": unknown key \"" + key + "\"", error);
    }
  }
  if (points == nullptr) return wrong(v, where + " has no \"points\"", error);
  if (!expect(*points, Kind::kArray, where + " \"points\"", error)) return false;
  if (points->items.empty()) return wrong(*points, where + " has no points", error);
  for (const JsonValue& p : points->items) {
    const bool pair = p.kind == Kind::kArray && p.items.size() == 2 && p.items[0].kind == Kind::kNumber &&
                      p.items[1].kind == Kind::kNumber;
    if (!pair) return wrong(p, where + ": a point should be [x, y] (two numbers)", error);
    const Point pt{p.items[0].number, p.items[1].number};
    if (!std::isfinite(pt.x) || !std::isfinite(pt.y)) return wrong(p, where + ": a number out of range", error);
    s.points.push_back(pt);
  }
  return true;
}

// A log axis has no place for 0 or below.
bool check_log(const ChartSpec& spec, std::string& error) {
  for (const Series& s : spec.series) {
    for (const Point& p : s.points) {
      const char* axis = spec.x_log && p.x <= 0 ? "x" : spec.y_log && p.y <= 0 ? "y" : nullptr;
      if (axis == nullptr) continue;
      char b[160];
      std::snprintf(b, sizeof b, "\"%s\" has the point [%g, %g], but %s_log cannot show %s <= 0", s.name.c_str(),
                    p.x, p.y, axis, axis);
      error = b;
      return false;
    }
  }
  return true;
}

}  // namespace

bool parse_chart_spec(const std::string& text, ChartSpec& spec, std::string& error) {
  JsonValue doc;
  if (!parse_json(text, doc, error)) return false;
  if (!expect(doc, Kind::kObject, "the document", error)) return false;
  spec = ChartSpec{};
  const JsonValue* series = nullptr;
  for (const auto& [key, v] : doc.members) {
    const std::string what = "\"" + key + "\"";
    if (key == "title" || key == "x_label" || key == "y_label") {
      if (!expect(v, Kind::kString, what, error)) return false;
      (key == "title" ? spec.title : key == "x_label" ? spec.x_label : spec.y_label) = ascii(v.string);
    } else if (key == "x_log" || key == "y_log") {
      if (!expect(v, Kind::kBool, what, error)) return false;
      (key == "x_log" ? spec.x_log : spec.y_log) = v.boolean;
    } else if (key == "series") {
      if (!expect(v, Kind::kArray, what, error)) return false;
      series = &v;
    } else {
      return wrong(v, "unknown key " + what, error);
    }
  }
  if (series == nullptr || series->items.empty()) {
    error = "no series: \"series\" should be a non-empty array";
    return false;
  }
  spec.series.resize(series->items.size());
  for (std::size_t i = 0; i < spec.series.size(); ++i) {
    if (!read_series(series->items[i], i, spec.series[i], error)) return false;
  }
  return check_log(spec, error);
}

}  // namespace uroce::plotapp
