#include "engines/generate/generator.h"

#include <algorithm>

#include "engines/generate/single_sequence.h"
#include "util/clock.h"

namespace gk {

Result<GenerateStats> Generate(ModelRunner& model, const std::vector<int32_t>& prompt, const GenerateOptions& o,
                               const std::function<bool(int32_t)>& on_token) {
  if (prompt.empty()) return Result<GenerateStats>::Error("empty prompt");
  const ModelConfig& c = model.config();
  const int64_t context = o.context > 0 ? o.context : int64_t(prompt.size()) + o.max_tokens;
  if (c.max_position_embeddings > 0 && int64_t(prompt.size()) > c.max_position_embeddings) {
    return Result<GenerateStats>::Error(StrCat("prompt of ", prompt.size(), " tokens is longer than the model's context of ",
                                               c.max_position_embeddings, " tokens"));
  }
  if (int64_t(prompt.size()) > context) {
    return Result<GenerateStats>::Error(StrCat("prompt of ", prompt.size(), " tokens is longer than the context of ",
                                               context, " tokens"));
  }
  GK_ASSIGN_OR_RETURN(SingleSequence seq, SingleSequence::Create(model, context));
  std::vector<float> logits(size_t(c.vocab_size));
  Sampler sampler(o.sampling);
  // The next token after `tokens`: picked by the runner where the logits are (a GPU), else
  // sampled here from the row.
  auto next_after = [&](std::span<const int32_t> tokens) -> Result<int32_t> {
    if (model.picks_tokens()) {
      const TokenPick pick = sampler.NextPick();
      GK_RETURN_IF_ERROR(seq.Forward(tokens, LogitsMode::kLast, logits.data(), &pick));
      return model.picked_tokens()[0];
    }
    GK_RETURN_IF_ERROR(seq.Forward(tokens, LogitsMode::kLast, logits.data()));
    return sampler.Sample(logits.data(), c.vocab_size);
  };
  GenerateStats st;
  st.prompt_tokens = int64_t(prompt.size());
  double t0 = NowSeconds();
  GK_ASSIGN_OR_RETURN(int32_t next, next_after(prompt));
  st.prefill_seconds = NowSeconds() - t0;
  t0 = NowSeconds();
  for (int i = 0; i < o.max_tokens; ++i) {
    ++st.generated_tokens;
    if (std::find(o.stop_ids.begin(), o.stop_ids.end(), next) != o.stop_ids.end()) {
      st.stopped_by_stop_id = true;
      break;
    }
    if (!on_token(next)) break;
    if (i + 1 == o.max_tokens || seq.num_tokens() >= context) break;
    GK_ASSIGN_OR_RETURN(next, next_after(std::span<const int32_t>(&next, 1)));
    ++st.decode_steps;
  }
  st.decode_seconds = NowSeconds() - t0;
  return st;
}

}  // namespace gk
