// json_write.h: how Beagle writes JSON (bench, bench-sd, generate --json, tokenize --jsonl):
// nlohmann::ordered_json (Debian nlohmann-json3-dev, header-only; keys stay in insertion order),
// numbers rounded to the precision they carry. Reading JSON is json.h's strict parser.
#pragma once
#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

namespace beagle {

using Json = nlohmann::ordered_json;

// x rounded to `decimals` decimal places: a report says 1.6812, not 1.6811999999999998.
inline double rounded(double x, int decimals) {
    const double scale = std::pow(10.0, decimals);
    return std::round(x * scale) / scale;
}

// j as text: one line (indent < 0) or indented by `indent` spaces per level. Strings that are not
// valid UTF-8 get U+FFFD for each bad byte instead of an exception.
inline std::string json_text(const Json& j, int indent = -1) {
    return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

}  // namespace beagle
