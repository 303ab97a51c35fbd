// model_drafter.h: drafting with an independent draft model (Leviathan et al.; Chen et al.; llama.cpp's
// -md): any smaller model the loaders read, with the target's vocabulary, drafts a chain or an EAGLE-2
// style tree from its own KV cache, which is rolled back to the accepted path after every round.
#pragma once
#include <memory>
#include <string>

#include "../io/model_file.h"
#include "../tokenizer/tokenizer.h"
#include "beagle_drafter.h"
#include "drafter.h"
#include "round_policy.h"
#include "session.h"

namespace beagle {

// The draft must speak the target's vocabulary: the same number of tokens and, where the draft file
// carries its tokenizer, the same text for every id. Throws Error naming the first difference and both files.
void check_draft_vocab(const ModelFile& draft, const Tokenizer& target, const std::string& target_path);

// A drafter over `draft` (checked with check_draft_vocab), on the session's backend and thread pool, with
// the settings of BeagleDraftParams that apply to a draft model: tree (false: a chain of gamma tokens),
// depth, topk and total_tokens (the EAGLE-2 tree over the draft's log-probabilities), verify_cost (cost-
// aware trees: the candidates worth their verify cost, the depth chosen among 1, 2 and depth by the round
// policy), auto_draft_cost. policy / owner: as make_beagle_drafter (null: its own policy).
std::unique_ptr<Drafter> make_model_drafter(std::shared_ptr<const ModelFile> draft, Session& s,
                                            const BeagleDraftParams& p, std::shared_ptr<RoundPolicy> policy = nullptr,
                                            bool owner = true);

}  // namespace beagle
