// tokenizer.h: text <-> token ids. Two algorithms behind one class: byte-level BPE (GPT-2 style:
// SmolLM2, Llama-3) and SentencePiece-style BPE (Llama-2, llama2.c). Built from a TokenizerSpec.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "spec.h"

namespace beagle {

class Tokenizer {
public:
    virtual ~Tokenizer() = default;
    // Throws Error if the spec is inconsistent (sizes, missing merges, unknown kind).
    static std::unique_ptr<Tokenizer> create(const TokenizerSpec& spec);

    // Encode UTF-8 text (throws Error on invalid UTF-8, naming the byte offset).
    // add_bos: prepend BOS when the spec has one. parse_special: "<|im_start|>"-style special and
    // control tokens written in the text become their ids (else they are encoded as plain text).
    virtual std::vector<int> encode(const std::string& text, bool add_bos, bool parse_special) const = 0;
    // Bytes of one token as it should be printed when it follows `prev` (-1: none). For SPM this
    // applies the llama2.c rule (a leading space after BOS is dropped) and <0xXX> byte pieces.
    // Control tokens decode to "" unless render_special.
    virtual std::string decode_token(int prev, int id, bool render_special = false) const = 0;
    // Concatenation of decode_token over the ids (may be invalid UTF-8 if cut mid-character).
    std::string decode(const std::vector<int>& ids, bool render_special = false) const;

    const TokenizerSpec& spec() const { return spec_; }
    int vocab_size() const { return (int)spec_.tokens.size(); }
    int bos() const { return spec_.bos; }
    int eos() const { return spec_.eos; }
    // End of generation: eos, eot, or (for ChatML) <|im_end|>.
    bool is_eog(int id) const;

protected:
    TokenizerSpec spec_;
    std::vector<int> eog_ids_;
};

// ChatML prompt for one user turn (SmolLM2 and others whose template uses <|im_start|>):
// system line (default SmolLM2's when `system` is empty and the template inserts one), user turn,
// then "<|im_start|>assistant\n". Throws Error if the tokenizer has no ChatML tokens.
std::string apply_chat_template(const Tokenizer& tok, const std::string& user, const std::string& system = "");
// The same for a conversation: messages in order (role "system", "user" or "assistant"), the default
// system line first when the conversation has no system message of its own.
struct ChatMessage {
    std::string role, content;
};
std::string apply_chat_template(const Tokenizer& tok, const std::vector<ChatMessage>& messages);
// What apply_chat_template(tok, user) writes before the user's words: the default system turn (if the
// template inserts one) and "<|im_start|>user\n" (beagle datagen --self-prompts lets the model go on from it).
std::string chat_user_prefix(const Tokenizer& tok);

}  // namespace beagle
