// prompts.h: reads prompt sets in the formats of data/: ShareGPT JSON (first human turn),
// JSONL with "turns" (MT-Bench, Spec-Bench), "question" (GSM8K), "instruction" (+ first instance's
// input; self-instruct), "prompt" or "text"; or plain text, one prompt per line.
#pragma once
#include <string>
#include <vector>

namespace beagle {

struct Prompt {
    std::string text;
    std::string category;  // Spec-Bench / MT-Bench category if given
    std::string id;
};

// Throws Error on unreadable files, bad JSON, or records with no usable prompt field.
// Empty prompts are skipped (ShareGPT has some).
std::vector<Prompt> load_prompts(const std::string& path);

}  // namespace beagle
