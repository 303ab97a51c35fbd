// dataset.h: the draft's training data on disk: a directory with meta.txt and shard-NNNNN.bin
// files, each holding whole sequences (tokens, the target's true states in f16, prompt length),
// written atomically by `beagle datagen` and memory-mapped by `beagle train`.
//
// Shard layout (a container, src/io/container.h; little-endian):
//   0 "BEAGLEDS"  8 u32 version (1)  12 u32 dim  16 u32 vocab  20 u32 n_seqs  24 u64 n_tokens
//   32 u64 tokenizer_hash  40 u64 file_size  48 sequence table: n_seqs x {u64 first_token, u32 len,
//   u32 n_prompt}; then (64-aligned) tokens i32[n_tokens]; then (64-aligned) states
//   f16[n_tokens x dim]; last 4 bytes: CRC-32 of everything before.
// With state layers (`datagen --state-layers`, EAGLE-3-style fused features): magic "BEAGLEDX", the same
// header plus 48 u32 E (1..8) and 52 u32 layers[8] (unused: 0), the sequence table at 96, and after the
// states (64-aligned) extras f16[n_tokens x E x dim] (row t: the residual streams after each layer).
// Tokens only (the default of `beagle datagen`: the target's states are one prefill away, computed by
// `beagle train`): magic "BEAGLETK", the "BEAGLEDS" header and sequence table, the tokens, no states.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../core/common.h"
#include "../io/container.h"

namespace beagle {

struct SeqData {
    std::vector<int32_t> tokens;
    std::vector<uint16_t> states;  // f16, tokens.size() x dim
    std::vector<uint16_t> extras;  // f16, tokens.size() x E x dim (state layers; empty: none)
    int n_prompt = 0;              // tokens[0..n_prompt) came from the prompt
};

// Write one shard atomically (temp file + rename).
void write_shard(const std::string& path, int dim, int vocab, uint64_t tokenizer_hash, const std::vector<SeqData>& seqs,
                 const std::vector<int>& state_layers = {});
// The same, tokens only ("BEAGLETK"; the sequences' states are not read). dim: the target's width.
void write_token_shard(const std::string& path, int dim, int vocab, uint64_t tokenizer_hash, const std::vector<SeqData>& seqs);

struct SeqView {
    const int32_t* tokens;
    const uint16_t* states;  // f16 (null: tokens-only data)
    const uint16_t* extras;  // f16, len x E x dim (null without state layers)
    int len, n_prompt;
};

class Dataset {
public:
    // Opens every shard-*.bin in dir (sorted), validating headers, sizes and checksums.
    explicit Dataset(const std::string& dir);
    const std::string& dir() const { return dir_; }
    int dim() const { return dim_; }
    // The shards keep the target's states (false: tokens only, every SeqView::states null; the same in every shard).
    bool has_states() const { return has_states_; }
    int vocab() const { return vocab_; }
    const std::vector<int>& state_layers() const { return state_layers_; }  // the same in every shard
    // Where each of `layers` sits among state_layers() (its block of SeqView::extras); throws a clear Error
    // for a layer this data does not keep. Tokens-only data: 0, 1, .. (the trainer computes those layers).
    std::vector<size_t> layer_columns(const std::vector<int>& layers) const;
    uint64_t tokenizer_hash() const { return tok_hash_; }
    size_t n_seqs() const { return seqs_.size(); }
    int64_t n_tokens() const { return n_tokens_; }
    SeqView seq(size_t i) const { return seqs_[i]; }
    int longest_seq() const;  // tokens of the longest sequence (at least 1)
    // The shard files in name order: shard k holds sequences [shard_first(k), shard_first(k + 1)).
    size_t n_shards() const { return shard_names_.size(); }
    const std::string& shard_name(size_t k) const { return shard_names_[k]; }
    size_t shard_first(size_t k) const { return k < shard_first_.size() ? shard_first_[k] : seqs_.size(); }
    // The meta.txt value for key ("" if absent).
    std::string meta(const std::string& key) const;
    // Throws a clear Error if this data was not made by a target with these dims/vocabulary.
    void check_fits(int dim, int vocab, uint64_t tokenizer_hash, const std::string& model_path) const;

private:
    void check_complete(const std::vector<std::string>& shard_names) const;  // throws if datagen did not finish
    std::string dir_;
    int dim_ = 0, vocab_ = 0;
    bool has_states_ = true;
    std::vector<int> state_layers_;
    uint64_t tok_hash_ = 0;
    int64_t n_tokens_ = 0;
    std::vector<std::unique_ptr<ContainerReader>> files_;  // mapped shards: seqs_ point into them
    std::vector<SeqView> seqs_;
    std::vector<std::string> shard_names_;
    std::vector<size_t> shard_first_;
    std::vector<std::pair<std::string, std::string>> meta_;
};

// meta.txt: "key value" lines.
std::vector<std::pair<std::string, std::string>> read_meta(const std::string& path);
void write_meta(const std::string& path, const std::vector<std::pair<std::string, std::string>>& kv);
// A data directory for writing: created if need be, its meta.txt written, or compared with meta when it is
// there (a resumed run: the same settings, else a clear error); half-written shards removed.
void open_data_dir(const std::string& dir, const std::vector<std::pair<std::string, std::string>>& meta);

}  // namespace beagle
