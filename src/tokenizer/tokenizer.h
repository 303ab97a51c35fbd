// tokenizer.h: text <-> token ids. Two algorithms behind one class: byte-level BPE (GPT-2 style:
// SmolLM2, Llama-3) and SentencePiece-style BPE (Llama-2, llama2.c). Built from a TokenizerSpec.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "chat_template.h"
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
    // End of generation: eos, eot, or a chat family's end-of-turn token (<|im_end|>, <|eot_id|>, ...).
    bool is_eog(int id) const;
    // The chat template family by name (`--chat-template NAME`), overriding the file's template; "" keeps
    // the file's. Throws Error naming --chat-template for a name not in chat_family_names().
    void set_chat_template(const std::string& name);

protected:
    TokenizerSpec spec_;
    std::vector<int> eog_ids_;
};

// Chat prompt for one user turn in the tokenizer's chat family (resolve_chat_family: --chat-template,
// else the file's template, else ChatML when the vocabulary has its tokens): system turn (the template's
// default when `system` is empty and the template inserts one), user turn, generation prompt. Throws
// Error naming --chat-template when no family applies.
std::string apply_chat_template(const Tokenizer& tok, const std::string& user, const std::string& system = "");
// The same for a conversation: messages in order (role "system", "user" or "assistant").
// BOS: the Llama-2, Llama-3, Mistral and Gemma templates begin with bos_token; when the tokenizer adds
// BOS itself (spec.prompt_bos(), as encode(add_bos) does) that leading bos_token text is left out here,
// so that the encoded prompt has one BOS, not two. Encode the result with parse_special.
std::string apply_chat_template(const Tokenizer& tok, const std::vector<ChatMessage>& messages);
// What apply_chat_template(tok, user) writes before the user's words: the default system turn (if the
// template inserts one) and the user turn's opening (beagle datagen --self-prompts lets the model go on from it).
std::string chat_user_prefix(const Tokenizer& tok);

}  // namespace beagle
