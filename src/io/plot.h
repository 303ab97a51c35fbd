// plot.h: small PNG charts (line charts and grouped bar charts) drawn into an RGB raster and
// written with stb_image_write (text: stb_easy_font). Used by the training loop (loss curve,
// acceptance by depth; src/train/) and bench-sd (speedups; src/cli/bench_sd.cpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace beagle {

struct LineSeries {
    std::string label;
    std::vector<double> x, y;
    uint32_t rgb = 0x1f77b4;  // 0xRRGGBB
    int width = 2;            // line width in pixels
};

struct LineChart {
    std::string title, xlabel, ylabel;
    std::vector<LineSeries> series;
    std::vector<std::pair<double, std::string>> vlines;  // dashed vertical markers at x, with a label
    bool log_y = false;
    bool log_x = false;  // x on a log10 axis (every x > 0)
    bool legend_bottom = false;  // the legend in the bottom right corner (default: top right)
};

struct BarGroup {            // one bar per category, in one colour
    std::string label;
    std::vector<double> values;
    uint32_t rgb = 0x1f77b4;
};

struct BarChart {
    std::string title, xlabel, ylabel;
    std::vector<std::string> categories;
    std::vector<BarGroup> groups;
    double ymax = 0;         // 0: from the data
    bool value_labels = true;
};

// Throw Error if the PNG cannot be written; the file is replaced atomically.
void write_line_chart(const std::string& path, const LineChart& c, int width = 900, int height = 540);
void write_bar_chart(const std::string& path, const BarChart& c, int width = 900, int height = 540);

}  // namespace beagle
