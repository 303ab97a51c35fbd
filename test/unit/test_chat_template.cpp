// test_chat_template.cpp: chat template families (src/tokenizer/chat_template.h): each family recognised
// from its model's real Jinja template (test/data/chat_templates.json, shared with the jinja2 oracle
// test/oracles/test_chat_templates.py), a two-turn conversation rendered exactly, and the resolution rule.
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/common.h"
#include "io/json.h"
#include "testlib.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/spec.h"

using namespace beagle;

struct Case {
    const char* name;
    ChatTokens tokens;
    bool system;  // the family has a system role
    const char* want;
};

static const Case kCases[] = {
    {"chatml", {"<|im_start|>", "<|im_end|>", ""}, true,
     "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
     "Hello.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"},
    {"llama2", {"<s>", "</s>", ""}, true,
     "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi there [/INST] Hello. </s><s>[INST] What is 2+2? [/INST]"},
    {"llama3", {"<|begin_of_text|>", "<|eot_id|>", ""}, true,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
     "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
     "Hello.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
     "<|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"mistral", {"<s>", "</s>", ""}, false, "<s>[INST] Hi there [/INST]Hello.</s>[INST] What is 2+2? [/INST]"},
    {"gemma", {"<bos>", "<eos>", ""}, false,
     "<bos><start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
     "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n"},
    {"phi3", {"<s>", "<|endoftext|>", ""}, true,
     "<|system|>\nYou are terse.<|end|>\n<|user|>\nHi there<|end|>\n<|assistant|>\nHello.<|end|>\n<|user|>\n"
     "What is 2+2?<|end|>\n<|assistant|>\n"},
    {"zephyr", {"<s>", "</s>", ""}, true,
     "<|system|>\nYou are terse.</s>\n<|user|>\nHi there</s>\n<|assistant|>\nHello.</s>\n<|user|>\nWhat is 2+2?</s>\n"
     "<|assistant|>\n"},
};

static std::vector<ChatMessage> conversation(bool system) {
    std::vector<ChatMessage> m;
    if (system) m.push_back({"system", "You are terse."});
    m.push_back({"user", "Hi there"});
    m.push_back({"assistant", "Hello."});
    m.push_back({"user", "What is 2+2?"});
    return m;
}

int main() {
    const char* root = getenv("BEAGLE_ROOT");
    JsonValue templates = json_parse_file(std::string(root ? root : ".") + "/test/data/chat_templates.json");
    for (const Case& c : kCases) {
        ChatFamily f;
        CHECK(chat_family_from_name(c.name, &f) && std::string(chat_family_name(f)) == c.name, "%s: name", c.name);
        const JsonValue* t = templates.find(c.name);
        CHECK(t && t->is_string(), "%s: template in chat_templates.json", c.name);
        if (!t) continue;
        ChatFamily d = ChatFamily::CHATML;
        CHECK(detect_chat_family(t->str, &d) && d == f, "%s: detected as %s", c.name, chat_family_name(d));
        std::string got = render_chat(f, conversation(c.system), c.tokens, true);
        CHECK(got == c.want, "%s: rendered\n%s\nwant\n%s", c.name, got.c_str(), c.want);
        if (!c.system) CHECK_THROWS(render_chat(f, conversation(true), c.tokens, true), "no system");
        // the resolution rule: the file's template, named by --chat-template
        TokenizerSpec spec;
        spec.chat_template = t->str;
        CHECK(resolve_chat_family(spec) == f, "%s: resolved from the file", c.name);
    }
    // SmolLM2's default system turn comes from its template's literal.
    std::string smol = templates.find("chatml")->str;
    CHECK(chatml_default_system(smol) == "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
    ChatTokens ct{"<|im_start|>", "<|im_end|>", chatml_default_system(smol)};
    CHECK(render_chat(ChatFamily::CHATML, {{"user", "Hi"}}, ct, true) ==
          "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
          "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    // Roles that do not alternate: the Llama-2, Mistral and Gemma templates raise.
    CHECK_THROWS(render_chat(ChatFamily::LLAMA2, {{"user", "a"}, {"user", "b"}}, ChatTokens{}, true), "alternate");
    CHECK_THROWS(render_chat(ChatFamily::GEMMA, {{"assistant", "a"}}, ChatTokens{}, true), "alternate");
    // Llama-2 and Llama-3 trim contents as their templates do.
    CHECK(render_chat(ChatFamily::LLAMA3, {{"user", "  hi \n"}}, ChatTokens{"B", "E", ""}, false) ==
          "B<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>");
    // The rule when no family is recognised or named.
    TokenizerSpec unknown;
    unknown.source = "model.gguf";
    unknown.chat_template = "{% for m in messages %}### {{ m['role'] }}: {{ m['content'] }}{% endfor %}";
    CHECK_THROWS(resolve_chat_family(unknown), "--chat-template");
    CHECK_THROWS(resolve_chat_family(unknown), "not recognised");
    unknown.chat_template_name = "gemma";
    CHECK(resolve_chat_family(unknown) == ChatFamily::GEMMA, "--chat-template overrides the file");
    unknown.chat_template_name = "vicuna";
    CHECK_THROWS(resolve_chat_family(unknown), "expected one of chatml, llama2, llama3, mistral, gemma, phi3, zephyr");
    CHECK_THROWS(check_chat_template_name("ChatML"), "found 'ChatML'");
    TokenizerSpec none;
    none.tokens = {"<s>", "</s>", "a"};
    CHECK_THROWS(resolve_chat_family(none), "--chat-template");
    none.tokens.push_back("<|im_start|>");
    none.tokens.push_back("<|im_end|>");
    CHECK(resolve_chat_family(none) == ChatFamily::CHATML, "no template, ChatML vocabulary: ChatML");
    return test_summary("test_chat_template");
}
