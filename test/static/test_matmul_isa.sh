#!/usr/bin/env bash
# test_matmul_isa.sh: static proof that the AVX2 path cannot execute AVX-512 code (the binary must run on
# CPUs without AVX-512). Two facts together give it:
#  1. no object except *_avx512.o contains an AVX-512 instruction (zmm or k registers, xmm/ymm16-31,
#     EVEX masking/broadcast syntax);
#  2. no *_avx512.o defines a weak/COMDAT symbol, so the linker can never pick an AVX-512-compiled copy
#     of an inline or template function shared with other files; their global symbols are the entry points
#     named *_avx512 (matmul_rows_avx512, matmul_groups_avx512, the matmul_f32_*_tile_avx512), which the
#     CPU backend calls only on the AVX-512 path, chosen after cpu_has_avx512_vnni().
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
a512s=$(find "$BUILD/obj/src" -name '*_avx512.o' | sort)
[ -n "$a512s" ] || { echo "FAIL: no *_avx512.o under $BUILD/obj/src"; exit 1; }
for a512 in $a512s; do
  weak=$(nm -C "$a512" | grep -E ' [WwVvu] ' | head -5)
  if [ -n "$weak" ]; then echo "FAIL: $a512 defines weak/COMDAT symbols:"; echo "$weak"; fail=1; fi
  other=$(nm -C --defined-only "$a512" | grep -E ' [TDBR] ' | sed 's/^[0-9a-f]* . //' | grep -v -E '^beagle::[a-z0-9_]+_avx512\(')
  if [ -n "$other" ]; then echo "FAIL: global symbols in $a512 not named *_avx512:"; echo "$other"; fail=1; fi
done
echo "checked $(echo "$a512s" | wc -l) AVX-512 objects: no weak symbols, entry points *_avx512 only"
# the guard: matmul.cpp reaches the AVX-512 kernels only through the ISA chosen by cpu_has_avx512_vnni()
grep -q '__builtin_cpu_supports("avx512vnni")' src/backend/cpu/matmul.cpp || { echo "FAIL: runtime check missing"; fail=1; }
[ $fail -eq 0 ] && echo "test_matmul_isa: ok"
exit $fail
