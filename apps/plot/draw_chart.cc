#include "plot/draw_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "plot/axis.h"
#include "sim/png.h"

namespace uroce::plotapp {
namespace {

using simapp::Canvas;
using simapp::Rgb;

constexpr int kWidth = 900, kHeight = 560;
constexpr int kMargin = 16;
// Data stay this far inside the frame, so markers at the ends show whole.
constexpr int kInset = 10;
constexpr Rgb kBlack{0, 0, 0}, kDark{70, 70, 70}, kGrid{222, 222, 222}, kMinorGrid{242, 242, 242};
constexpr Rgb kColours[] = {{31, 119, 180}, {214, 39, 40}, {44, 160, 44}, {255, 127, 14},
                            {148, 103, 189}, {140, 86, 75}, {227, 119, 194}, {23, 190, 207}};
constexpr int kColourCount = sizeof kColours / sizeof kColours[0];
constexpr int kMarkerCount = 6;

// Two pixels wide, so a series reads on top of the grid.
void thick_line(Canvas& cv, int x0, int y0, int x1, int y1, Rgb c) {
  cv.line(x0, y0, x1, y1, c);
  if (std::abs(x1 - x0) >= std::abs(y1 - y0)) {
    cv.line(x0, y0 + 1, x1, y1 + 1, c);
  } else {
    cv.line(x0 + 1, y0, x1 + 1, y1, c);
  }
}

// Shape by series index, so series stay apart without colour too:
// circle, square, triangle, diamond, down triangle, cross.
void marker(Canvas& cv, int x, int y, int shape, Rgb c) {
  constexpr int r = 4;
  if (shape == 5) {
    for (int d = -r; d <= r; ++d) {
      cv.fill(x + d, y + d, x + d + 1, y + d, c);
      cv.fill(x + d, y - d, x + d + 1, y - d, c);
    }
    return;
  }
  for (int dy = -r; dy <= r; ++dy) {
    for (int dx = -r; dx <= r; ++dx) {
      bool in = false;
      switch (shape) {
        case 0: in = dx * dx + dy * dy <= r * r + r; break;
        case 1: in = std::abs(dx) < r && std::abs(dy) < r; break;
        case 2: in = 2 * std::abs(dx) <= dy + r + 1; break;
        case 3: in = std::abs(dx) + std::abs(dy) <= r + 1; break;
        default: in = 2 * std::abs(dx) <= r + 1 - dy; break;
      }
      if (in) cv.pixel(x + dx, y + dy, c);
    }
  }
}

// Sizes and counts are powers of two; their axis is labelled 8, 64, 1K.
bool powers_of_two(const ChartSpec& spec, bool x) {
  for (const Series& s : spec.series) {
    for (const Point& p : s.points) {
      int e;
      if (std::frexp(x ? p.x : p.y, &e) != 0.5) return false;
    }
  }
  return true;
}

// `s` in lines no wider than `width` at `scale`, broken at spaces (a word
// too long for a line of its own is cut).
std::vector<std::string> wrap(const std::string& s, int scale, int width) {
  const std::size_t per_line = static_cast<std::size_t>(std::max(1, (width + scale) / (6 * scale)));
  std::vector<std::string> lines;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && s[i] == ' ') ++i;
    std::size_t end = std::min(s.size(), i + per_line);
    if (end < s.size() && s[end] != ' ') {
      const std::size_t space = s.rfind(' ', end);
      if (space != std::string::npos && space > i) end = space;
    }
    if (end > i) lines.push_back(s.substr(i, end - i));
    i = end;
  }
  return lines;
}

// `s` cut to `width` pixels, with "..." where it was cut.
std::string fit(const std::string& s, int width) {
  if (Canvas::text_width(s) <= width) return s;
  std::string cut = s;
  while (!cut.empty() && Canvas::text_width(cut + "...") > width) cut.pop_back();
  return cut + "...";
}

struct LegendEntry {
  int x, y;
  std::size_t series;
  std::string name;  // cut to the width of the canvas
};

// The legend's entries in rows, each row centred; returns the bottom.
// `out` gets one entry per series, in order.
int lay_out_legend(const ChartSpec& spec, int top, std::vector<LegendEntry>& out) {
  constexpr int kSample = 30, kGap = 24;
  const int th = Canvas::text_height();
  auto entry_width = [&](std::size_t i) { return kSample + 6 + Canvas::text_width(out[i].name); };
  for (std::size_t i = 0; i < spec.series.size(); ++i) {
    out.push_back({0, 0, i, fit(spec.series[i].name, kWidth - 2 * kMargin - kSample - 6)});
  }
  int y = top;
  for (std::size_t first = 0; first < spec.series.size(); y += th + 8) {
    std::size_t end = first;
    int w = 0;
    while (end < spec.series.size() && (end == first || w + kGap + entry_width(end) <= kWidth - 2 * kMargin)) {
      w += (end == first ? 0 : kGap) + entry_width(end);
      ++end;
    }
    int x = (kWidth - w) / 2;
    for (; first < end; ++first) {
      out[first].x = x;
      out[first].y = y;
      x += entry_width(first) + kGap;
    }
  }
  return y - 8;
}

}  // namespace

bool draw_chart(const ChartSpec& spec, const std::string& path, std::string& error) {
  Canvas cv(kWidth, kHeight, {255, 255, 255});
  const int th = Canvas::text_height();

  // Title, legend and the y label above the frame; tick labels and the x
  // label below it.
  int y = kMargin;
  if (!spec.title.empty()) {
    // Large on one line if it fits, else smaller on as many as it needs.
    const int scale = Canvas::text_width(spec.title, 3) <= kWidth - 2 * kMargin ? 3 : 2;
    for (const std::string& line : wrap(spec.title, scale, kWidth - 2 * kMargin)) {
      cv.text((kWidth - Canvas::text_width(line, scale)) / 2, y, line, kBlack, scale);
      y += Canvas::text_height(scale) + 6;
    }
    y += 8;
  }
  std::vector<LegendEntry> legend;
  y = lay_out_legend(spec, y, legend) + 14;
  const int y_label_top = y;
  if (!spec.y_label.empty()) y += th + 8;
  const int top = y;
  const int bottom = kHeight - kMargin - th - 10 - (spec.x_label.empty() ? 0 : th + 10);

  double x_lo = HUGE_VAL, x_hi = -HUGE_VAL, y_lo = HUGE_VAL, y_hi = -HUGE_VAL;
  for (const Series& s : spec.series) {
    for (const Point& p : s.points) {
      x_lo = std::min(x_lo, p.x);
      x_hi = std::max(x_hi, p.x);
      y_lo = std::min(y_lo, p.y);
      y_hi = std::max(y_hi, p.y);
    }
  }
  const Axis ya = Axis::fit(y_lo, y_hi, spec.y_log, true, spec.y_log && powers_of_two(spec, false),
                            bottom - top - 2 * kInset, 3 * th);
  int y_tick_w = 0;
  for (const Tick& t : ya.ticks()) y_tick_w = std::max(y_tick_w, Canvas::text_width(t.label));
  const int left = kMargin + y_tick_w + 10, right = kWidth - 30;
  const Axis xa = Axis::fit(x_lo, x_hi, spec.x_log, false, spec.x_log && powers_of_two(spec, true),
                            right - left - 2 * kInset, 90);
  auto px = [&](double v) { return left + kInset + static_cast<int>(std::lround(xa.fraction(v) * (right - left - 2 * kInset))); };
  auto py = [&](double v) { return bottom - kInset - static_cast<int>(std::lround(ya.fraction(v) * (bottom - top - 2 * kInset))); };

  // Grid, minor lines first so the major ones stay whole.
  for (bool major : {false, true}) {
    for (const Tick& t : xa.ticks()) {
      if (t.label.empty() != major) cv.line(px(t.value), top + 1, px(t.value), bottom - 1, major ? kGrid : kMinorGrid);
    }
    for (const Tick& t : ya.ticks()) {
      if (t.label.empty() != major) cv.line(left + 1, py(t.value), right - 1, py(t.value), major ? kGrid : kMinorGrid);
    }
  }
  cv.rect(left, top, right, bottom, kDark);
  for (const Tick& t : xa.ticks()) {
    const int x = px(t.value);
    cv.line(x, bottom, x, bottom + (t.label.empty() ? 3 : 6), kDark);
    cv.text(x - Canvas::text_width(t.label) / 2, bottom + 10, t.label, kBlack);
  }
  for (const Tick& t : ya.ticks()) {
    const int v = py(t.value);
    cv.line(left - (t.label.empty() ? 3 : 6), v, left, v, kDark);
    cv.text(left - 10 - Canvas::text_width(t.label), v - th / 2, t.label, kBlack);
  }
  if (!spec.x_label.empty()) {
    cv.text((left + right - Canvas::text_width(spec.x_label)) / 2, bottom + 10 + th + 10, spec.x_label, kBlack);
  }
  if (!spec.y_label.empty()) cv.text(kMargin, y_label_top, spec.y_label, kBlack);

  for (std::size_t i = 0; i < spec.series.size(); ++i) {
    const Series& s = spec.series[i];
    const Rgb c = kColours[i % kColourCount];
    for (std::size_t j = 1; j < s.points.size(); ++j) {
      thick_line(cv, px(s.points[j - 1].x), py(s.points[j - 1].y), px(s.points[j].x), py(s.points[j].y), c);
    }
    for (const Point& p : s.points) marker(cv, px(p.x), py(p.y), static_cast<int>(i % kMarkerCount), c);
  }
  for (const LegendEntry& e : legend) {
    const Rgb c = kColours[e.series % kColourCount];
    const int mid = e.y + th / 2;
    thick_line(cv, e.x, mid, e.x + 30, mid, c);
    marker(cv, e.x + 15, mid, static_cast<int>(e.series % kMarkerCount), c);
    cv.text(e.x + 36, e.y, e.name, kBlack);
  }
  return cv.write_png(path, error);
}

}  // namespace uroce::plotapp
