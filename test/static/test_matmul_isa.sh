#!/usr/bin/env bash
# test_matmul_isa.sh: static proof that the AVX2 path cannot execute AVX-512 code (the binary must run on
# CPUs without AVX-512). Two facts together give it:
#  1. no object except *_avx512.o contains an AVX-512 instruction (zmm or k registers, xmm/ymm16-31,
#     EVEX masking/broadcast syntax);
#  2. matmul_avx512.o defines no weak/COMDAT symbol, so the linker can never pick its AVX-512-compiled
#     copy of an inline or template function shared with other files; its only global symbol is
#     matmul_rows_avx512, which matmul.cpp calls after cpu_has_avx512_vnni().
set -u
cd "${BEAGLE_ROOT:-$(dirname "$0")/../..}"
BUILD=$(dirname "${BEAGLE_BIN:-build/beagle}")
fail=0
objs=$(find "$BUILD/obj" -name '*.o' ! -name '*_avx512.o' | sort)
[ -n "$objs" ] || { echo "FAIL: no objects under $BUILD/obj (run make)"; exit 1; }
n=0
for o in $objs; do
  n=$((n+1))
  hits=$(objdump -d --no-show-raw-insn "$o" | grep -E '%zmm|%k[0-7]\b|%[xy]mm(1[6-9]|2[0-9]|3[01])\b|\{1to|\{%k' | head -3)
  if [ -n "$hits" ]; then echo "FAIL: $o contains AVX-512 instructions:"; echo "$hits"; fail=1; fi
done
echo "checked $n non-AVX-512 objects for AVX-512 instructions"
a512="$BUILD/obj/src/backend/cpu/matmul_avx512.o"
[ -f "$a512" ] || { echo "FAIL: $a512 missing"; exit 1; }
weak=$(nm -C "$a512" | grep -E ' [WwVvu] ' | head -5)
if [ -n "$weak" ]; then echo "FAIL: $a512 defines weak/COMDAT symbols:"; echo "$weak"; fail=1; fi
globals=$(nm -C --defined-only "$a512" | grep -E ' [TDBR] ' | sed 's/^[0-9a-f]* . //')
if [ "$globals" != "beagle::matmul_rows_avx512(beagle::MatmulJob const&, long, long, float*)" ]; then
  echo "FAIL: unexpected global symbols in $a512:"; echo "$globals"; fail=1
fi
# the guard: matmul.cpp reaches the AVX-512 kernels only through the ISA chosen by cpu_has_avx512_vnni()
grep -q '__builtin_cpu_supports("avx512vnni")' src/backend/cpu/matmul.cpp || { echo "FAIL: runtime check missing"; fail=1; }
[ $fail -eq 0 ] && echo "test_matmul_isa: ok"
exit $fail
