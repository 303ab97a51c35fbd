// args.h: the small command-line parser every subcommand uses: declared flags with short and long
// names, typed values, --help text, and clear errors for unknown flags or bad values.
#pragma once
#include <string>
#include <vector>

namespace beagle {

class Args {
public:
    Args(std::string command, std::string usage_line, std::string description);
    // Declare options before parse(). `names` like "-m,--model"; help text for --help.
    void str(const char* names, std::string* out, const char* help);
    void integer(const char* names, long* out, const char* help);
    void number(const char* names, double* out, const char* help);
    void flag(const char* names, bool* out, const char* help);
    // Parse argv (argv[0] is the subcommand). Returns false if --help was printed (exit 0).
    // Throws Error for unknown flags, missing values, or values that do not parse.
    bool parse(int argc, char** argv);
    std::vector<std::string> positional;
    void print_help() const;

private:
    struct Opt {
        std::vector<std::string> names;
        int kind;  // 0 str, 1 int, 2 double, 3 flag
        void* out;
        std::string help;
    };
    std::string command_, usage_, description_;
    std::vector<Opt> opts_;
    void add(const char* names, int kind, void* out, const char* help);
};

// A value that is "auto" (returns 0) or an integer in lo..hi; otherwise throws
// "<what> must be 'auto' or an integer in lo..hi, got '<v>'" (what: e.g. "beagle generate: --total-tokens").
long auto_or_integer(const std::string& v, long lo, long hi, const char* what);

}  // namespace beagle
