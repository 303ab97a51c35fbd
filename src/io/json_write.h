// json_write.h: how Beagle writes JSON (bench, bench-sd, generate --json, tokenize --jsonl, the
// training summary):
// nlohmann::ordered_json (Debian nlohmann-json3-dev, header-only; keys stay in insertion order),
// numbers rounded to the precision they carry. Reading JSON is json.h's strict parser.
#pragma once
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace beagle {

using Json = nlohmann::ordered_json;

// x rounded to `decimals` decimal places, exactly the value printf's %.Nf shows (a report says
// 1.6812, not 1.6811999999999998); NaN and infinities (not JSON numbers) become null.
inline Json rounded(double x, int decimals) {
    if (!std::isfinite(x)) return nullptr;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, x);
    return std::strtod(buf, nullptr);
}

// Each element of v rounded as above.
inline Json rounded(const std::vector<double>& v, int decimals) {
    Json a = Json::array();
    for (double x : v) a.push_back(rounded(x, decimals));
    return a;
}

// j as text: one line (indent < 0) or indented by `indent` spaces per level. Strings that are not
// valid UTF-8 get U+FFFD for each bad byte instead of an exception.
// Any nlohmann value: Json (ordered keys) or nlohmann::json (sorted keys, the server's objects).
template <class J>
std::string json_text(const J& j, int indent = -1) {
    return j.dump(indent, ' ', false, J::error_handler_t::replace);
}

}  // namespace beagle
