// tool_plot_bench_serve.cpp: draws `make bench-serve`'s PNG from build/bench-serve.json
// (scripts/bench_serve.py): summed tokens/s and per-token latency p50 against concurrent clients,
// one line per mode. Usage: tool_plot_bench_serve IN.json OUT.png
#include <cstdio>
#include <fstream>
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
        LineChart tps, lat;
        tps.title = "beagle serve: summed tokens/s vs concurrent clients";
        tps.xlabel = "clients";
        tps.ylabel = "tokens/s (all clients)";
        lat.title = "beagle serve: per-token latency p50 vs concurrent clients";
        lat.xlabel = "clients";
        lat.ylabel = "ms per token (p50)";
        const uint32_t colours[] = {0x7f7f7f, 0x1f77b4, 0xd62728, 0x2ca02c};
        int i = 0;
        for (auto& [mode, e] : j.at("modes").items()) {
            LineSeries a, b;
            a.label = b.label = mode;
            a.rgb = b.rgb = colours[i++ % 4];
            for (auto& r : e.at("levels")) {
                a.x.push_back(r.at("clients").get<double>());
                a.y.push_back(r.at("tok_s").get<double>());
                b.x.push_back(r.at("clients").get<double>());
                b.y.push_back(r.at("token_ms_p50").get<double>());
            }
            tps.series.push_back(a);
            lat.series.push_back(b);
        }
        std::string out = argv[2];
        write_line_chart(out, tps);
        write_line_chart(out.substr(0, out.size() - 4) + "-latency.png", lat);
        printf("wrote %s and %s-latency.png\n", out.c_str(), out.substr(0, out.size() - 4).c_str());
    } catch (const std::exception& e) {
        fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
