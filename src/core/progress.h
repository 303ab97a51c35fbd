// progress.h: progress for long work: a bar with rate and ETA when stderr is a terminal, plain
// lines (at most one every few seconds) otherwise.
#pragma once
#include <cstdint>
#include <string>

namespace beagle {

class Progress {
public:
    Progress(const std::string& what, int64_t total, const std::string& unit);
    // Report `done` units finished; `extra` is appended (e.g. "loss 2.31").
    void update(int64_t done, const std::string& extra = "");
    // Units finished by an earlier run (a resumed job): counted as done, left out of the rate and ETA.
    void resumed(int64_t done);
    void finish(const std::string& extra = "");

private:
    std::string what_, unit_;
    int64_t total_, done_ = 0, resumed_ = 0;
    double start_, last_print_ = 0;
    bool tty_;
    void print(bool final, const std::string& extra);
};

}  // namespace beagle
