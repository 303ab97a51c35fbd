// datagen.h: self-distillation data for the draft (`beagle datagen`). The target answers prompts
// (chat template for instruct models; or prompts it wrote itself, Magpie style: --self-prompts) or, for
// a base model, samples texts from BOS. The prompts and answers are kept as token ids (beagle train computes
// the target's states from them); --keep-states also keeps every position's true state (f16). Many sequences
// share each target pass (Llama::forward_multi): decode of one sequence is memory-bound, a batch
// costs little more. Shards are written atomically; a killed
// run resumes at the first missing shard, and per-sequence seeds make the result independent of
// where it was interrupted.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace beagle {

struct DatagenOptions {
    std::string model, tokenizer, prompts, out_dir;
    long sample = 0;          // base models: number of texts sampled from BOS (instead of prompts)
    long self_prompts = 0;    // instruct models: number of user turns the target writes itself (Magpie)
    double prompt_temp = 1.0; // --self-prompts: sampling of the user turns
    double prompt_top_p = 0.95;
    long skip = 0;            // prompts: skip the first `skip` (keep train/eval disjoint)
    long limit = 0;           // prompts: use at most this many (0 = all)
    long max_new = 256;       // generated tokens per sequence
    long max_prompt = 512;    // longer prompts are cut to their first max_prompt tokens (self_prompts: turn limit)
    double temperature = -1;  // -1: 0 (greedy) for prompts, 1.0 for --sample
    double top_p = 0.9;
    long seed = 1234;
    long batch = 16;          // sequences decoded together
    long threads = 0;         // 0 = all cores
    long shard_seqs = 64;     // sequences per shard
    bool chat = true;         // wrap prompts in the chat template when the file has one (or chat_template is set)
    std::string chat_template;  // --chat-template NAME: the chat family instead of the file's
    bool f32_weights = false; // compute with weights dequantized to f32 (float-accurate target)
    bool keep_states = false; // also keep the target's states (f16): a cache, dim x 2 bytes a token
    std::vector<int> state_layers;  // also keep the residual stream after these layers (SeqData::extras; keep_states)
};

void run_datagen(const DatagenOptions& o);

}  // namespace beagle
