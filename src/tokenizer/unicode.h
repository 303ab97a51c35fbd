// unicode.h: the Unicode the tokenizers need: UTF-8 decode/encode of one code point, and the
// character classes of the pre-tokenizer regexes (\p{L}, \p{N}, \s). Used by bpe.cpp and spm.cpp;
// the range tables are generated into unicode_tables.cpp by scripts/gen_unicode_tables.py.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace beagle {

// Decode the code point starting at s[i] (s must be valid UTF-8, see utf8_valid in common.h);
// *len gets its byte length (1..4).
uint32_t utf8_decode(const std::string& s, size_t i, int* len);
// Byte length of the UTF-8 sequence whose lead byte is c (1 for stray continuation bytes).
int utf8_len(unsigned char c);
// Append the UTF-8 encoding of code point cp to out.
void utf8_append(std::string& out, uint32_t cp);

bool is_letter(uint32_t cp);  // \p{L}: general category Lu, Ll, Lt, Lm or Lo
bool is_number(uint32_t cp);  // \p{N}: general category Nd, Nl or No
bool is_space(uint32_t cp);   // \s: the Unicode White_Space property (as Oniguruma and llama.cpp use it)

// Generated tables (unicode_tables.cpp): sorted inclusive ranges.
extern const uint32_t kLetterRanges[][2];
extern const int kLetterRanges_count;
extern const uint32_t kNumberRanges[][2];
extern const int kNumberRanges_count;

}  // namespace beagle
