// cuda_emu_coverage.cpp -> build/test/test_emu_coverage: runs cuda/emu/coverage.cu (the kernel that
// touches every emulated device feature, and that test_cuda_nvcc.sh compiles with nvcc) and checks
// each output slot against values worked out by hand from the CUDA semantics, under all schedules.
#include "testlib.h"

#include "../cuda/emu/coverage.cu"

#include <vector>

static void run(beagle_emu::Schedule s, bool poison) {
    beagle_emu::set_schedule(s, 11);
    beagle_emu::set_poison(poison);
    std::vector<float> out(kCovSlots + 512, -999.0f), fin(129);
    fin[0] = 0.75f;
    for (int i = 1; i < 129; i++) fin[i] = (float)((i * 5) % 17 - 8) / 8.0f;  // exact in tf32
    const __half hin[2] = {__float2half(1.5f), __float2half(-0.5f)};
    const __nv_bfloat16 bin[2] = {__float2bfloat16(3.0f), __float2bfloat16(0.375f)};
    CoverageAtomics at{};
    at.imin = 1 << 30;
    coverage_launch(out.data(), &at, hin, bin, fin.data(), 0);
    beagle_emu::set_schedule(beagle_emu::Schedule::Forward);
    beagle_emu::set_poison(false);
    CHECK(cudaGetLastError() == cudaSuccess, "launch: %s", beagle_emu::last_error_detail().c_str());

    // Thread 33 = lane 1 of warp 1 wrote the slots.
    const float want[] = {37, 35, 32, 35, 37, 16.5f, 32, 34, 32, (float)0xAAAAAAAAu, 1, 1, 1, (float)0xFFFFFFFFu, 255,
                          (float)0xFFFFFFFFu, 1, 496, 1, 0, 240, 15, 0, 16, 1, 1, 30, 60, 96};
    for (int k = 0; k < (int)(sizeof want / sizeof want[0]); k++)
        CHECK(out[k] == want[k], "schedule %d poison %d slot %d: got %g want %g", (int)s, poison, k, out[k], want[k]);
    CHECK(out[kCovMath] == 29.75f + fin[0], "math %g", out[kCovMath]);
    CHECK(out[kCovHalf] == (1.0f + 1.0f + (-0.75f + 1.5f) + 0.25f), "half %g", out[kCovHalf]);
    CHECK(out[kCovBf16] == 3.0f * 0.375f + 2.0f, "bf16 %g", out[kCovBf16]);
    CHECK(out[kCovBits] == 46.0f, "bits %g", out[kCovBits]);
    CHECK(out[kCovWmmaH] == 16 * 1.5f * 1.5f && out[kCovWmmaB] == 16 * 9.0f, "wmma %g %g", out[kCovWmmaH], out[kCovWmmaB]);
    CHECK(out[kCovWmma32x8] == 36.0f && out[kCovWmma8x32] == 36.0f, "wmma %g %g", out[kCovWmma32x8], out[kCovWmma8x32]);
    int bad = 0;
    for (int w = 0; w < 2; w++)
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 16; j++) {
                double r = 0;
                for (int k = 0; k < 8; k++) r += (double)fin[1 + i * 8 + k] * fin[1 + k * 16 + j];
                bad += out[kCovSlots + 256 * w + i * 16 + j] != (float)r;  // multiples of 1/64: exact
            }
    CHECK(bad == 0, "tf32 mma: %d wrong", bad);
    CHECK(at.i == 64 && at.u == 64 && at.ull == 192 && at.f == 32.0f && at.d == 16.0, "atomics %d %u %llu %g %g", at.i,
          at.u, at.ull, at.f, at.d);
    CHECK(__half2float(at.h) == 64.0f && __bfloat162float(at.b) == 64.0f, "half/bf16 atomics");
    CHECK(at.imax == 63 && at.imin == -63 && at.llmax == (63ll << 40) && at.cas >= 1 && at.cas <= 64 && at.exch == 7,
          "max/min/cas/exch %d %d %d %d", at.imax, at.imin, at.cas, at.exch);
    CHECK(at.inc == 64 && at.bits == 0xFFFFFFFFu, "inc %u bits %08x", at.inc, at.bits);
}

int main() {
    beagle_emu::set_check_pointers(false);  // these kernels run on host vectors (legal in the emulator only)
    for (auto s : {beagle_emu::Schedule::Forward, beagle_emu::Schedule::Reverse, beagle_emu::Schedule::Random})
        for (bool poison : {false, true}) run(s, poison);
    return test_summary("test_emu_coverage");
}
