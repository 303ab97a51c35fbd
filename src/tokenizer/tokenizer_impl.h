// tokenizer_impl.h: internals shared by the two tokenizer algorithms (bpe.cpp, spm.cpp) and
// tokenizer.cpp: the pre-tokenizer splitters, special-token matching, and the factories that
// Tokenizer::create calls. `beagle tokenize --pieces` also uses pre_split (src/cli/tokenize.cpp).
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer.h"

namespace beagle {

// The pre-tokenizer regexes, each implemented by hand in bpe.cpp:
//   GPT2   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   SMOLLM every \p{N} isolated first (HF Digits(individual_digits)), then GPT2 on the rest
//   LLAMA3 (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   QWEN2  as LLAMA3 with \p{N} in place of \p{N}{1,3}
enum class PreSplit { GPT2, SMOLLM, LLAMA3, QWEN2 };

// Map a GGUF tokenizer.ggml.pre name ("gpt2", "smollm", "llama-bpe", ...) to its splitter.
// Throws Error naming `source` for a name we do not implement.
PreSplit pre_split_kind(const std::string& pre, const std::string& source);

// Append to *out the pre-tokens of text[begin, end) as byte ranges [first, second).
// text must be valid UTF-8.
void pre_split(PreSplit kind, const std::string& text, size_t begin, size_t end,
               std::vector<std::pair<size_t, size_t>>* out);

// Special tokens written in the text. Control tokens (type 3) match only when parse_special;
// user-defined tokens (type 4) always match, as in HF tokenizers and llama.cpp. Matching is
// leftmost, then longest.
struct SpecialTokens {
    struct Entry {
        std::string text;
        int id;
        bool always;  // user-defined: matched even without parse_special
    };
    std::vector<Entry> entries;                 // longest first
    std::vector<std::vector<int>> by_first;     // 256 lists of entry indices, by first byte
    void build(const TokenizerSpec& spec);
    // A piece of the input: a special token (id >= 0) or plain text [begin, end) (id == -1).
    struct Fragment {
        size_t begin, end;
        int id;
    };
    void split(const std::string& text, bool parse_special, std::vector<Fragment>* out) const;
};

// Throws Error naming the byte offset when text is not valid UTF-8.
void check_utf8(const std::string& text);

std::unique_ptr<Tokenizer> make_bpe_tokenizer(const TokenizerSpec& spec);
std::unique_ptr<Tokenizer> make_spm_tokenizer(const TokenizerSpec& spec);

}  // namespace beagle
