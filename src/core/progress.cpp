// progress.cpp: the progress reporter of progress.h (a bar with rate and ETA on a terminal, plain
// lines otherwise), used by datagen, train and bench-sd.
#include "progress.h"

#include <unistd.h>

#include <cstdio>

#include "common.h"

namespace beagle {

Progress::Progress(const std::string& what, int64_t total, const std::string& unit)
    : what_(what), unit_(unit), total_(total), start_(now_seconds()), tty_(isatty(2)) {}

static std::string hms(double s) {
    if (s < 0 || s > 1e7) return "?";
    int t = (int)(s + 0.5);
    return t >= 3600 ? strfmt("%d:%02d:%02d", t / 3600, t / 60 % 60, t % 60) : strfmt("%d:%02d", t / 60, t % 60);
}

void Progress::print(bool final, const std::string& extra) {
    double el = now_seconds() - start_;
    double rate = el > 0 ? (done_ - resumed_) / el : 0;
    double eta = rate > 0 && total_ > 0 ? (total_ - done_) / rate : -1;
    if (tty_) {
        int width = 30, fill = total_ > 0 ? (int)(width * (double)done_ / total_) : 0;
        if (fill > width) fill = width;
        std::string bar(fill, '#');
        bar += std::string(width - fill, '.');
        fprintf(stderr, "\r%s [%s] %lld/%lld %s  %.1f %s/s  elapsed %s  eta %s  %s\033[K", what_.c_str(), bar.c_str(),
                (long long)done_, (long long)total_, unit_.c_str(), rate, unit_.c_str(), hms(el).c_str(),
                final ? "0:00" : hms(eta).c_str(), extra.c_str());
        if (final) fprintf(stderr, "\n");
    } else {
        fprintf(stderr, "%s: %lld/%lld %s, %.1f %s/s, elapsed %s, eta %s%s%s\n", what_.c_str(), (long long)done_,
                (long long)total_, unit_.c_str(), rate, unit_.c_str(), hms(el).c_str(), final ? "0:00" : hms(eta).c_str(),
                extra.empty() ? "" : ", ", extra.c_str());
    }
    fflush(stderr);
}

void Progress::update(int64_t done, const std::string& extra) {
    done_ = done;
    double now = now_seconds();
    if (now - last_print_ < (tty_ ? 0.2 : 5.0)) return;
    last_print_ = now;
    print(false, extra);
}

void Progress::resumed(int64_t done) {
    resumed_ = done;
    update(done, "resumed");
}

void Progress::finish(const std::string& extra) { print(true, extra); }

}  // namespace beagle
