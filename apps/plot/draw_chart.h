// Draws a ChartSpec as a line chart in a 900x560 PNG: the title on top, a
// legend under it, then the axes (ticks, grid, labels) and each series in
// its own colour and marker.
#pragma once

#include <string>

#include "plot/chart_spec.h"

namespace uroce::plotapp {

// False with `error` if the PNG cannot be written.
bool draw_chart(const ChartSpec& spec, const std::string& path, std::string& error);

}  // namespace uroce::plotapp
