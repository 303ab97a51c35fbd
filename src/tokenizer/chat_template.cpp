// chat_template.cpp: chat template families (chat_template.h): recognition by marker strings, the
// --chat-template names, the resolution rule, and each family's rendering written out by hand to match
// the Jinja template it stands for (test/oracles/test_chat_templates.py renders those with jinja2).
#include "chat_template.h"

#include "../core/common.h"
#include "spec.h"

namespace beagle {

namespace {

struct FamilyName {
    ChatFamily f;
    const char* name;
};
const FamilyName kFamilies[] = {
    {ChatFamily::CHATML, "chatml"}, {ChatFamily::LLAMA2, "llama2"}, {ChatFamily::LLAMA3, "llama3"},
    {ChatFamily::MISTRAL, "mistral"}, {ChatFamily::GEMMA, "gemma"}, {ChatFamily::PHI3, "phi3"},
    {ChatFamily::ZEPHYR, "zephyr"},
};

bool has(const std::string& s, const char* what) {
    return s.find(what) != std::string::npos;
}

// Jinja's trim filter and Python's str.strip(): leading and trailing whitespace off.
std::string trim(const std::string& s) {
    const char* ws = " \t\n\r\f\v";
    size_t a = s.find_first_not_of(ws);
    if (a == std::string::npos) return "";
    size_t b = s.find_last_not_of(ws);
    return s.substr(a, b - a + 1);
}

// The templates of Llama-2, Mistral and Gemma raise unless roles go user, assistant, user, ...
// (after a leading system message where the family takes one).
void check_alternating(const std::vector<ChatMessage>& m, size_t first, const char* family) {
    for (size_t i = first; i < m.size(); i++) {
        bool user = m[i].role == "user";
        if (user != ((i - first) % 2 == 0))
            fail("chat template %s: message %zu has role '%s'; expected roles to alternate user/assistant/user/... "
                 "(found '%s' where '%s' belongs)",
                 family, i, m[i].role.c_str(), m[i].role.c_str(), (i - first) % 2 == 0 ? "user" : "assistant");
    }
}

void no_system(const std::vector<ChatMessage>& m, const char* family) {
    if (!m.empty() && m[0].role == "system")
        fail("chat template %s: expected no system message (the %s template has no system role), found one in "
             "message 0; drop --system or pick another --chat-template",
             family, family);
}

// ChatML: "<|im_start|>ROLE\nCONTENT<|im_end|>\n" per message; SmolLM2's template first writes its
// default system turn when messages[0] is not a system message.
std::string chatml(const std::vector<ChatMessage>& m, const ChatTokens& t, bool gen) {
    std::string out;
    if (!t.default_system.empty() && (m.empty() || m[0].role != "system"))
        out += "<|im_start|>system\n" + t.default_system + "<|im_end|>\n";
    for (const ChatMessage& x : m) out += "<|im_start|>" + x.role + "\n" + x.content + "<|im_end|>\n";
    if (gen) out += "<|im_start|>assistant\n";
    return out;
}

// Llama-2-chat: bos "[INST] " (system folded into the first user turn in <<SYS>> markers) user " [/INST]",
// then " " assistant " " eos; contents stripped. The template has no generation prompt.
std::string llama2(const std::vector<ChatMessage>& m, const ChatTokens& t) {
    size_t first = 0;
    std::string system;
    bool has_system = !m.empty() && m[0].role == "system";
    if (has_system) {
        system = m[0].content;
        first = 1;
    }
    check_alternating(m, first, "llama2");
    std::string out;
    for (size_t i = first; i < m.size(); i++) {
        std::string content = m[i].content;
        if (i == first && has_system) content = "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + content;
        if (m[i].role == "user") out += t.bos + "[INST] " + trim(content) + " [/INST]";
        else if (m[i].role == "assistant") out += " " + trim(content) + " " + t.eos;
    }
    return out;
}

// Llama-3-Instruct: bos, then "<|start_header_id|>ROLE<|end_header_id|>\n\n" CONTENT|trim "<|eot_id|>".
std::string llama3(const std::vector<ChatMessage>& m, const ChatTokens& t, bool gen) {
    std::string out;
    for (size_t i = 0; i < m.size(); i++) {
        if (i == 0) out += t.bos;
        out += "<|start_header_id|>" + m[i].role + "<|end_header_id|>\n\n" + trim(m[i].content) + "<|eot_id|>";
    }
    if (gen) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
    return out;
}

// Mistral-7B-Instruct: bos, "[INST] " user " [/INST]", assistant eos; no system role, no generation prompt.
std::string mistral(const std::vector<ChatMessage>& m, const ChatTokens& t) {
    no_system(m, "mistral");
    check_alternating(m, 0, "mistral");
    std::string out = t.bos;
    for (const ChatMessage& x : m) {
        if (x.role == "user") out += "[INST] " + x.content + " [/INST]";
        else out += x.content + t.eos;
    }
    return out;
}

// Gemma-it: bos, "<start_of_turn>ROLE\n" CONTENT|trim "<end_of_turn>\n" with assistant named "model";
// no system role; generation prompt "<start_of_turn>model\n".
std::string gemma(const std::vector<ChatMessage>& m, const ChatTokens& t, bool gen) {
    no_system(m, "gemma");
    check_alternating(m, 0, "gemma");
    std::string out = t.bos;
    for (const ChatMessage& x : m) {
        std::string role = x.role == "assistant" ? "model" : x.role;
        out += "<start_of_turn>" + role + "\n" + trim(x.content) + "<end_of_turn>\n";
    }
    if (gen) out += "<start_of_turn>model\n";
    return out;
}

// Phi-3-instruct: "<|ROLE|>\nCONTENT<|end|>\n"; generation prompt "<|assistant|>\n", else eos.
std::string phi3(const std::vector<ChatMessage>& m, const ChatTokens& t, bool gen) {
    std::string out;
    for (const ChatMessage& x : m)
        if (x.role == "system" || x.role == "user" || x.role == "assistant")
            out += "<|" + x.role + "|>\n" + x.content + "<|end|>\n";
    out += gen ? "<|assistant|>\n" : t.eos;
    return out;
}

// Zephyr: "<|ROLE|>\nCONTENT" eos "\n"; generation prompt "<|assistant|>\n" (the template's line breaks
// after each expression stay; trim_blocks removes those after block tags).
std::string zephyr(const std::vector<ChatMessage>& m, const ChatTokens& t, bool gen) {
    std::string out;
    for (const ChatMessage& x : m)
        if (x.role == "system" || x.role == "user" || x.role == "assistant")
            out += "<|" + x.role + "|>\n" + x.content + t.eos + "\n";
    if (gen && !m.empty()) out += "<|assistant|>\n";
    return out;
}

}  // namespace

// The system text a ChatML template inserts when the conversation has none, e.g. SmolLM2's
// "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, ...<|im_end|>\n' }}".
// Returns "" when the template has no such literal (the system turn then comes from a variable).
std::string chatml_default_system(const std::string& tmpl) {
    const std::string start = "<|im_start|>system";
    size_t p = tmpl.find(start);
    while (p != std::string::npos) {
        size_t q = p + start.size();
        if (tmpl.compare(q, 1, "\n") == 0) q += 1;
        else if (tmpl.compare(q, 2, "\\n") == 0) q += 2;
        else q = std::string::npos;
        if (q != std::string::npos) {
            size_t e = tmpl.find("<|im_end|>", q);
            if (e != std::string::npos) {
                std::string text = tmpl.substr(q, e - q);
                if (!text.empty() && text.find_first_of("'\"{}+") == std::string::npos) return text;
            }
        }
        p = tmpl.find(start, p + 1);
    }
    return "";
}

const char* chat_family_name(ChatFamily f) {
    for (const FamilyName& n : kFamilies)
        if (n.f == f) return n.name;
    return "?";
}

std::string chat_family_names() {
    std::string s;
    for (const FamilyName& n : kFamilies) s += std::string(s.empty() ? "" : ", ") + n.name;
    return s;
}

bool chat_family_from_name(const std::string& name, ChatFamily* f) {
    for (const FamilyName& n : kFamilies)
        if (name == n.name) {
            *f = n.f;
            return true;
        }
    return false;
}

bool detect_chat_family(const std::string& tmpl, ChatFamily* f) {
    if (has(tmpl, "<|im_start|>")) *f = ChatFamily::CHATML;
    else if (has(tmpl, "<|start_header_id|>")) *f = ChatFamily::LLAMA3;
    else if (has(tmpl, "[INST]")) *f = has(tmpl, "<<SYS>>") ? ChatFamily::LLAMA2 : ChatFamily::MISTRAL;
    else if (has(tmpl, "<start_of_turn>")) *f = ChatFamily::GEMMA;
    else if (has(tmpl, "<|user|>") && has(tmpl, "<|end|>")) *f = ChatFamily::PHI3;
    else if (has(tmpl, "<|user|>") && (has(tmpl, "eos_token") || has(tmpl, "</s>"))) *f = ChatFamily::ZEPHYR;
    else return false;
    return true;
}

void check_chat_template_name(const std::string& name) {
    ChatFamily f;
    if (!name.empty() && !chat_family_from_name(name, &f))
        fail("--chat-template: expected one of %s, found '%s'", chat_family_names().c_str(), name.c_str());
}

ChatFamily resolve_chat_family(const TokenizerSpec& spec) {
    const char* where = spec.source.empty() ? "tokenizer" : spec.source.c_str();
    ChatFamily f = ChatFamily::CHATML;
    if (!spec.chat_template_name.empty()) {
        if (!chat_family_from_name(spec.chat_template_name, &f))
            fail("--chat-template: expected one of %s, found '%s'", chat_family_names().c_str(),
                 spec.chat_template_name.c_str());
        return f;
    }
    if (!spec.chat_template.empty()) {
        if (detect_chat_family(spec.chat_template, &f)) return f;
        std::string head = spec.chat_template.substr(0, 60);
        for (char& c : head)
            if (c == '\n' || c == '\r') c = ' ';
        fail("%s: chat template not recognised (expected one of the families %s; found a template starting "
             "\"%s\"); name its family with --chat-template NAME",
             where, chat_family_names().c_str(), head.c_str());
    }
    bool has_start = false, has_end = false;
    for (const std::string& t : spec.tokens) {
        if (t == "<|im_start|>") has_start = true;
        if (t == "<|im_end|>") has_end = true;
    }
    if (!has_start || !has_end)
        fail("%s: no chat template in the file and no ChatML tokens <|im_start|> and <|im_end|> in the vocabulary "
             "(expected one or the other); name the template with --chat-template NAME (%s)",
             where, chat_family_names().c_str());
    return ChatFamily::CHATML;
}

bool chat_family_writes_bos(ChatFamily f) {
    return f == ChatFamily::LLAMA2 || f == ChatFamily::LLAMA3 || f == ChatFamily::MISTRAL || f == ChatFamily::GEMMA;
}

std::string render_chat(ChatFamily f, const std::vector<ChatMessage>& m, const ChatTokens& t, bool gen) {
    switch (f) {
        case ChatFamily::CHATML: return chatml(m, t, gen);
        case ChatFamily::LLAMA2: return llama2(m, t);
        case ChatFamily::LLAMA3: return llama3(m, t, gen);
        case ChatFamily::MISTRAL: return mistral(m, t);
        case ChatFamily::GEMMA: return gemma(m, t, gen);
        case ChatFamily::PHI3: return phi3(m, t, gen);
        case ChatFamily::ZEPHYR: return zephyr(m, t, gen);
    }
    return "";
}

}  // namespace beagle
