// chat_template.h: the chat template families Beagle knows (ChatML, Llama-2, Llama-3, Mistral, Gemma,
// Phi-3, Zephyr): recognising one from a file's Jinja text (we recognise, not execute, templates), the
// names `--chat-template NAME` takes, and the prompt text each family's own template renders.
#pragma once
#include <string>
#include <vector>

namespace beagle {

struct TokenizerSpec;

struct ChatMessage {
    std::string role, content;
};

enum class ChatFamily { CHATML, LLAMA2, LLAMA3, MISTRAL, GEMMA, PHI3, ZEPHYR };

// "chatml", "llama2", "llama3", "mistral", "gemma", "phi3", "zephyr".
const char* chat_family_name(ChatFamily f);
// The names above, comma separated (for help and error texts).
std::string chat_family_names();
// Name -> family; false for a name not in the list.
bool chat_family_from_name(const std::string& name, ChatFamily* f);
// The family of a Jinja template by its marker strings (as llama.cpp recognises templates):
// "<|im_start|>" ChatML; "<|start_header_id|>" Llama-3; "[INST]" with "<<SYS>>" Llama-2, without it
// Mistral; "<start_of_turn>" Gemma; "<|user|>" with "<|end|>" Phi-3, with "eos_token" or "</s>" Zephyr.
// False when none matches.
bool detect_chat_family(const std::string& tmpl, ChatFamily* f);
// Throws Error (expected the names, found `name`, where: --chat-template) unless name is "" or listed.
void check_chat_template_name(const std::string& name);

// The family a tokenizer's chat prompts use. The rule: spec.chat_template_name (`--chat-template NAME`)
// if set; else the file's template (GGUF tokenizer.chat_template or tokenizer_config.json chat_template)
// when it is recognised, and an error naming --chat-template when it is not; a file with no template
// uses ChatML when the vocabulary has <|im_start|> and <|im_end|>, else an error naming --chat-template.
ChatFamily resolve_chat_family(const TokenizerSpec& spec);

// What a rendering needs besides the messages: the tokenizer's bos_token and eos_token texts, and the
// system text a ChatML template inserts when the conversation has none (SmolLM2's; "" for none).
struct ChatTokens {
    std::string bos, eos, default_system;
};
// The system text a ChatML template inserts when the conversation has none, read from its literal, e.g.
// SmolLM2's "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, ...<|im_end|>\n' }}";
// "" when the template has no such literal.
std::string chatml_default_system(const std::string& tmpl);
// The conversation as the family's own Jinja template renders it (HF apply_chat_template: trim_blocks,
// lstrip_blocks), bos_token text included where the template writes it. Throws Error where the template
// raises (roles that do not alternate user/assistant; a system message where the family has none).
std::string render_chat(ChatFamily f, const std::vector<ChatMessage>& messages, const ChatTokens& t,
                        bool add_generation_prompt);
// True for the families whose template starts the text with bos_token (Llama-2, Llama-3, Mistral, Gemma).
bool chat_family_writes_bos(ChatFamily f);

}  // namespace beagle
