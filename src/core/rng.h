// rng.h: deterministic random numbers (splitmix64 + Box-Muller), the same on
// every platform and backend: Gaussian noise on the input true states, window offsets, random init.
#pragma once
#include <cmath>
#include <cstdint>

namespace beagle {

struct TrainRng {
    uint64_t s;
    explicit TrainRng(uint64_t seed) : s(seed) {}
    uint64_t next() {
        uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        return z ^ (z >> 31);
    }
    double uniform() { return (next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
    int below(int n) { return (int)(uniform() * n); }                          // [0, n)
    double normal() {                                                          // N(0, 1)
        if (have_spare) {
            have_spare = false;
            return spare;
        }
        double u1 = uniform(), u2 = uniform();
        if (u1 < 1e-300) u1 = 1e-300;
        double r = std::sqrt(-2.0 * std::log(u1)), th = 6.283185307179586 * u2;
        spare = r * std::sin(th);
        have_spare = true;
        return r * std::cos(th);
    }

private:
    double spare = 0;
    bool have_spare = false;
};

}  // namespace beagle
