// args.cpp: the command-line parser of args.h (flag declarations, typed values, --help text, errors
// for unknown flags and bad values), used by every subcommand in src/cli/.
#include "args.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "../core/common.h"

namespace beagle {

Args::Args(std::string command, std::string usage_line, std::string description)
    : command_(std::move(command)), usage_(std::move(usage_line)), description_(std::move(description)) {}

void Args::add(const char* names, int kind, void* out, const char* help) {
    Opt o;
    std::string s = names;
    size_t p = 0;
    while (p <= s.size()) {
        size_t c = s.find(',', p);
        if (c == std::string::npos) c = s.size();
        o.names.push_back(s.substr(p, c - p));
        p = c + 1;
    }
    o.kind = kind;
    o.out = out;
    o.help = help;
    opts_.push_back(o);
}

void Args::str(const char* n, std::string* o, const char* h) { add(n, 0, o, h); }
void Args::integer(const char* n, long* o, const char* h) { add(n, 1, o, h); }
void Args::number(const char* n, double* o, const char* h) { add(n, 2, o, h); }
void Args::flag(const char* n, bool* o, const char* h) { add(n, 3, o, h); }

void Args::print_help() const {
    printf("usage: beagle %s %s\n\n%s\n\noptions:\n", command_.c_str(), usage_.c_str(), description_.c_str());
    for (const Opt& o : opts_) {
        std::string n;
        for (size_t i = 0; i < o.names.size(); i++) n += (i ? ", " : "") + o.names[i];
        const char* v = o.kind == 0 ? " S" : o.kind == 1 ? " N" : o.kind == 2 ? " X" : "";
        std::string def;
        if (o.kind == 0 && !((std::string*)o.out)->empty()) def = " (default: " + *(std::string*)o.out + ")";
        if (o.kind == 1) def = strfmt(" (default: %ld)", *(long*)o.out);
        if (o.kind == 2) def = strfmt(" (default: %g)", *(double*)o.out);
        printf("  %-28s %s%s\n", (n + v).c_str(), o.help.c_str(), def.c_str());
    }
    printf("  %-28s %s\n", "-h, --help", "show this help");
}

bool Args::parse(int argc, char** argv) {
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "-h" || a == "--help") {
            print_help();
            return false;
        }
        if (a.size() < 2 || a[0] != '-' || (a[1] >= '0' && a[1] <= '9')) {
            positional.push_back(a);
            continue;
        }
        std::string val;
        bool has_eq = false;
        size_t eq = a.find('=');
        if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
            val = a.substr(eq + 1);
            a = a.substr(0, eq);
            has_eq = true;
        }
        const Opt* opt = nullptr;
        for (const Opt& o : opts_)
            for (const auto& n : o.names)
                if (n == a) opt = &o;
        if (!opt) fail("beagle %s: unknown option '%s' (see 'beagle %s --help')", command_.c_str(), a.c_str(), command_.c_str());
        if (opt->kind == 3) {
            if (has_eq) fail("beagle %s: option '%s' takes no value", command_.c_str(), a.c_str());
            *(bool*)opt->out = true;
            continue;
        }
        if (!has_eq) {
            if (i + 1 >= argc) fail("beagle %s: option '%s' expects a value", command_.c_str(), a.c_str());
            val = argv[++i];
        }
        if (opt->kind == 0) {
            *(std::string*)opt->out = val;
        } else if (opt->kind == 1) {
            errno = 0;
            char* end = nullptr;
            long v = strtol(val.c_str(), &end, 10);
            if (val.empty() || *end || errno)
                fail("beagle %s: option '%s' expects an integer, got '%s'", command_.c_str(), a.c_str(), val.c_str());
            *(long*)opt->out = v;
        } else {
            errno = 0;
            char* end = nullptr;
            double v = strtod(val.c_str(), &end);
            if (val.empty() || *end || errno || !std::isfinite(v))
                fail("beagle %s: option '%s' expects a number, got '%s'", command_.c_str(), a.c_str(), val.c_str());
            *(double*)opt->out = v;
        }
    }
    return true;
}

long auto_or_integer(const std::string& v, long lo, long hi, const char* what) {
    if (v == "auto") return 0;
    char* end = nullptr;
    errno = 0;
    long n = strtol(v.c_str(), &end, 10);
    if (v.empty() || *end || errno || n < lo || n > hi)
        fail("%s must be 'auto' or an integer in %ld..%ld, got '%s'", what, lo, hi, v.c_str());
    return n;
}

}  // namespace beagle
