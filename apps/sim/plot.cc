#include "sim/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "sim/png.h"

namespace uroce::simapp {
namespace {

// The smallest of 1, 2, 2.5, 5 times a power of ten that is >= x.
double nice_ceil(double x) {
  if (x <= 0) return 1;
  const double p = std::pow(10, std::floor(std::log10(x)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (m * p >= x * (1 - 1e-9)) return m * p;
  }
  return 10 * p;
}

std::string number(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

}  // namespace

bool draw_plot(const PlotSpec& spec, const std::vector<const std::vector<double>*>& rates, const std::vector<double>& queue,
               const std::vector<double>& paused, const std::string& path, std::string& err) {
  const std::string& title = spec.title;
  const bool pauses = !paused.empty();
  Canvas cv(1000, pauses ? 760 : 640, {255, 255, 255});
  const Rgb grey{215, 215, 215}, black{0, 0, 0}, red{214, 39, 40}, dim{120, 120, 120};
  const Rgb colours[] = {{31, 119, 180}, {255, 127, 14}, {44, 160, 44}, {148, 103, 189},
                         {140, 86, 75}, {227, 119, 194}, {127, 127, 127}, {23, 190, 207}};
  const int th = Canvas::text_height();
  // Title on the left, the legend right-aligned; a second line if they meet.
  const int left = 80, right = 980;
  cv.text(left, 8, title, black);
  // A named last flow (the victim) in black, drawn last, over the others.
  const bool named_last = !spec.last_flow_name.empty();
  auto colour = [&](std::size_t f) { return named_last && f + 1 == rates.size() ? black : colours[f % 8]; };
  // At most 8 flows named (colours repeat past 8), then how many more.
  auto name = [&](std::size_t f) -> std::string {
    if (f + 1 == rates.size() && !spec.last_flow_name.empty()) return spec.last_flow_name;
    char b[24];
    std::snprintf(b, sizeof b, "flow %zu", f);
    return b;
  };
  std::vector<std::size_t> named;
  for (std::size_t f = 0; f < rates.size() && named.size() < 8; ++f) named.push_back(f);
  if (rates.size() > 8 && !spec.last_flow_name.empty()) named.back() = rates.size() - 1;
  char more_text[32] = "";
  if (rates.size() > named.size()) std::snprintf(more_text, sizeof more_text, "+%zu more", rates.size() - named.size());
  const std::string more = more_text;
  int legend_w = more.empty() ? 0 : Canvas::text_width(more);
  for (std::size_t f : named) legend_w += 18 + Canvas::text_width(name(f)) + 14;
  int lx = right - legend_w, ly = 8;
  if (lx < left + Canvas::text_width(title) + 20) {
    lx = std::max(left, right - legend_w);
    ly = 8 + th + 8;
  }
  for (std::size_t f : named) {
    cv.fill(lx, ly + 2, lx + 12, ly + th - 3, colour(f));
    cv.text(lx + 18, ly, name(f), black);
    lx += 18 + Canvas::text_width(name(f)) + 14;
  }
  if (!more.empty()) cv.text(lx, ly, more, dim);
  const int top1 = ly + th + 16, bottom1 = 380, top2 = 410, bottom2 = 580, top3 = 610, bottom3 = 700;
  const int axis = pauses ? bottom3 : bottom2;  // the time axis under the lowest panel
  const std::size_t samples = queue.size();
  const double span_ms = static_cast<double>(samples * spec.sample_us) / 1000;
  auto xpos = [&](double ms) { return left + static_cast<int>(ms / std::max(span_ms, 1e-9) * (right - left)); };
  auto xs = [&](std::size_t i) { return xpos(static_cast<double>((i + 1) * spec.sample_us) / 1000); };

  // Time ticks and grid.
  const double step_ms = nice_ceil(span_ms / 6);
  for (double t = 0; t <= span_ms + 1e-9; t += step_ms) {
    const int x = xpos(t);
    cv.line(x, top1 + 1, x, bottom1 - 1, grey);
    cv.line(x, top2 + 1, x, bottom2 - 1, grey);
    if (pauses) cv.line(x, top3 + 1, x, bottom3 - 1, grey);
    cv.line(x, axis, x, axis + 5, black);
    const std::string label = number(t);
    cv.text(x - Canvas::text_width(label) / 2, axis + 9, label, black);
  }
  cv.text(right - Canvas::text_width("time (ms)"), axis + 9 + th + 8, "time (ms)", black);

  // Rates, 0 to the link rate in quarters.
  const double link = spec.gbps * 1e9;
  auto yrate = [&](double r) { return bottom1 - static_cast<int>(std::min(r / link, 1.05) * (bottom1 - top1) / 1.05); };
  for (int k = 0; k <= 4; ++k) {
    const int y = yrate(link * k / 4);
    if (k > 0) cv.line(left + 1, y, right - 1, y, grey);
    const std::string label = number(spec.gbps * k / 4);
    cv.text(left - 8 - Canvas::text_width(label), y - th / 2, label, black);
  }
  // Each sample holds whole packets (a 4 KiB packet is 0.66 Gb/s of a
  // 50 us sample): the lines are the mean over the last 0.5 ms.
  const std::size_t window = std::max<std::uint64_t>(1, 500 / spec.sample_us);
  cv.text(left + 6, top1 + 6, window > 1 ? "rate (Gb/s, mean over 0.5 ms)" : "rate (Gb/s)", dim);
  for (std::size_t f = 0; f < rates.size(); ++f) {
    const std::vector<double>& r = *rates[f];
    double sum = 0, prev = 0;
    for (std::size_t i = 0; i < r.size(); ++i) {
      sum += r[i] - (i >= window ? r[i - window] : 0);
      const double mean = sum / static_cast<double>(std::min(i + 1, window));
      if (i > 0) cv.line(xs(i - 1), yrate(prev), xs(i), yrate(mean), colour(f));
      prev = mean;
    }
  }
  cv.rect(left, top1, right, bottom1, black);

  // Queue, 0 to a round figure above its peak and Kmax.
  double peak = static_cast<double>(spec.kmax_bytes);
  for (double q : queue) peak = std::max(peak, q);
  const double qtop = nice_ceil(peak * 1.1);
  auto yq = [&](double q) { return bottom2 - static_cast<int>(std::min(q / qtop, 1.0) * (bottom2 - top2)); };
  for (int k = 0; k <= 2; ++k) {
    const int y = yq(qtop * k / 2);
    if (k > 0) cv.line(left + 1, y, right - 1, y, grey);
    const std::string label = number(qtop * k / 2 / 1000);
    cv.text(left - 8 - Canvas::text_width(label), y - th / 2, label, black);
  }
  cv.text(left + 6, top2 + 6, "queue (KB)", dim);
  for (std::size_t i = 1; i < samples; ++i) cv.line(xs(i - 1), yq(queue[i - 1]), xs(i), yq(queue[i]), black);
  const int kmax_y = yq(static_cast<double>(spec.kmax_bytes));
  cv.line(left + 1, kmax_y, right - 1, kmax_y, red);
  cv.text(right - 6 - Canvas::text_width("Kmax"), kmax_y + 4 + th < bottom2 ? kmax_y + 4 : kmax_y - th - 3, "Kmax", red);
  const auto buffer = static_cast<double>(spec.buffer_bytes);
  if (buffer <= qtop) {
    const int y = yq(buffer);
    for (int x = left + 1; x < right; x += 8) cv.line(x, y, std::min(x + 4, right - 1), y, dim);
    cv.text(right - 6 - Canvas::text_width("buffer"), y - th - 3, "buffer", dim);
  }
  cv.rect(left, top2, right, bottom2, black);

  // Pauses: the share of the senders' time paused in each sample, 0-100%.
  if (pauses) {
    auto yp = [&](double share) { return bottom3 - static_cast<int>(std::clamp(share, 0.0, 1.0) * (bottom3 - top3)); };
    for (int k = 0; k <= 2; ++k) {
      const int y = yp(k / 2.0);
      if (k > 0) cv.line(left + 1, y, right - 1, y, grey);
      const std::string label = number(50.0 * k);
      cv.text(left - 8 - Canvas::text_width(label), y - th / 2, label, black);
    }
    cv.text(left + 6, top3 + 6, "senders paused (PFC, % of time)", dim);
    for (std::size_t i = 1; i < paused.size(); ++i) cv.line(xs(i - 1), yp(paused[i - 1]), xs(i), yp(paused[i]), red);
    cv.rect(left, top3, right, bottom3, black);
  }
  return cv.write_png(path, err);
}

}  // namespace uroce::simapp
