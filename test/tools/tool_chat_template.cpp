// tool_chat_template.cpp: a driver for test/oracles/test_chat_templates.py: each stdin line
// {"template", "name", "bos", "eos", "messages", "add_generation_prompt"} -> one line {"family", "text"}
// (or {"error"}): the family Beagle resolves for that template (or --chat-template name) and its rendering.
#include <iostream>
#include <string>

#include "core/common.h"
#include "io/json_write.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/spec.h"

using namespace beagle;

int main() {
    std::string line;
    while (std::getline(std::cin, line)) {
        nlohmann::json in = nlohmann::json::parse(line), out;
        try {
            TokenizerSpec spec;
            spec.chat_template = in.value("template", "");
            spec.chat_template_name = in.value("name", "");
            spec.tokens = {"<|im_start|>", "<|im_end|>"};
            ChatFamily f = resolve_chat_family(spec);
            ChatTokens t{in.value("bos", ""), in.value("eos", ""),
                         f == ChatFamily::CHATML ? chatml_default_system(spec.chat_template) : ""};
            std::vector<ChatMessage> m;
            for (const auto& x : in["messages"]) m.push_back({x["role"].get<std::string>(), x["content"].get<std::string>()});
            out["family"] = chat_family_name(f);
            out["text"] = render_chat(f, m, t, in.value("add_generation_prompt", true));
        } catch (const Error& e) {
            out["error"] = e.what();
        }
        std::cout << json_text(out) << "\n" << std::flush;
    }
    return 0;
}
