// tool_line_chart.cpp: draws a line chart (src/io/plot.h) from a JSON description, for scripts that chart
// what they compute (scripts/draft_scaling.py). Usage: tool_line_chart IN.json OUT.png, IN.json:
//   {"title", "xlabel", "ylabel", "log_x": bool, "log_y": bool, "legend_bottom": bool, "vlines": [[x, "label"], ...],
//    "series": [{"label", "x": [...], "y": [...] (null: a gap), "rgb": "#rrggbb", "width": pixels}, ...]}
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "core/common.h"
#include "io/plot.h"

using namespace beagle;

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s IN.json OUT.png\n", argv[0]);
        return 1;
    }
    try {
        nlohmann::json j = nlohmann::json::parse(read_file(argv[1]));
        LineChart c;
        c.title = j.value("title", "");
        c.xlabel = j.value("xlabel", "");
        c.ylabel = j.value("ylabel", "");
        c.log_x = j.value("log_x", false);
        c.log_y = j.value("log_y", false);
        c.legend_bottom = j.value("legend_bottom", false);
        for (auto& v : j.value("vlines", nlohmann::json::array())) c.vlines.emplace_back(v.at(0).get<double>(), v.at(1).get<std::string>());
        for (auto& s : j.at("series")) {
            LineSeries ls;
            ls.label = s.value("label", "");
            for (auto& x : s.at("x")) ls.x.push_back(x.get<double>());
            for (auto& y : s.at("y")) ls.y.push_back(y.is_null() ? NAN : y.get<double>());
            if (ls.x.size() != ls.y.size()) fail("series '%s': %zu x values, %zu y values", ls.label.c_str(), ls.x.size(), ls.y.size());
            const std::string rgb = s.value("rgb", "#1f77b4");
            if (rgb.size() != 7 || rgb[0] != '#') fail("series '%s': rgb '%s', expected #rrggbb", ls.label.c_str(), rgb.c_str());
            ls.rgb = (uint32_t)std::stoul(rgb.substr(1), nullptr, 16);
            ls.width = s.value("width", 2);
            c.series.push_back(ls);
        }
        write_line_chart(argv[2], c);
    } catch (const std::exception& e) {
        fprintf(stderr, "tool_line_chart: %s: %s\n", argv[1], e.what());
        return 1;
    }
    return 0;
}
