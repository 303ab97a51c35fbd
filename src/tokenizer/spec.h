// spec.h: everything needed to build a tokenizer, as read from a GGUF file's tokenizer.ggml.*
// metadata, a llama2.c tokenizer.bin, a SentencePiece tokenizer.model or an HF tokenizer.json.
#pragma once
#include <string>
#include <vector>

namespace beagle {

struct TokenizerSpec {
    enum Kind { NONE, BPE_BYTELEVEL, SPM };
    Kind kind = NONE;
    std::vector<std::string> tokens;   // piece text as stored (byte-level: GPT-2 unicode map; SPM: "▁" for space)
    std::vector<float> scores;         // SPM merge scores (empty for byte-level BPE)
    std::vector<int> types;            // GGUF token types: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
    std::vector<std::string> merges;   // byte-level BPE merges "left right", by rank
    std::string pre;                   // pre-tokenizer name (GGUF tokenizer.ggml.pre: "gpt2", "smollm", "llama-bpe", ...)
    int bos = -1, eos = -1, unk = -1, pad = -1, eot = -1;
    bool add_bos = false;
    bool add_space_prefix = false;     // SPM dummy prefix
    bool llama2c_spaces = false;       // llama2.c tokenizer.bin: pieces hold ' ' not "▁"
    std::string chat_template;         // Jinja text from the file, if any (we recognise, not execute, it)
    std::string chat_template_name;    // --chat-template NAME: the family to use instead of the file's
    std::string source;                // where it came from, for messages

    // A prompt's tokens start with BOS (llama2.c models always begin a text with it).
    bool prompt_bos() const { return add_bos || llama2c_spaces; }
};

}  // namespace beagle
