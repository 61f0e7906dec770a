// LayerLoop's end of a step: the logits of the entries that have them, the step committed, and
// each prefill entry's attention pairs over every rank.
#include "worker/attention/attended_pairs.h"
#include "worker/engine/layer_loop.h"

namespace millipede {

Status LayerLoop::ComputeLogits(const std::vector<RankEntry>& entries) {
  // Logits of runs of entries whose rows follow each other (a batch of decode tokens) in one
  // LM-head GEMM each.
  for (size_t i = 0; i < entries.size();) {
    if (entries[i].logit_row < 0) {
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < entries.size() && entries[j].logit_row == entries[j - 1].logit_row + 1 &&
           entries[j].logits_step_row == entries[j - 1].logits_step_row + 1)
      ++j;
    MP_RETURN_IF_ERROR(ctx_.model->Logits(*ctx_.workspace, entries[i].logits_step_row,
                                      entries[i].logit_row, static_cast<int64_t>(j - i)));
    i = j;
  }
  return OkStatus();
}

StatusOr<StepOutput> LayerLoop::FinishStep(std::vector<RankEntry>& entries, bool prefill) {
  StepOutput out;
  for (RankEntry& e : entries) {
    MP_RETURN_IF_ERROR(e.seq->Commit(e.ranges, e.length_after));
    std::optional<ConstTensorView> logits;
    if (e.logit_row >= 0) {
      MP_ASSIGN_OR_RETURN(logits, Reshape(SliceRows(ctx_.workspace->logits.cview(), e.logit_row, 1),
                                          Shape{ctx_.config().vocab_size}));
    }
    out.logits.push_back(logits);
  }
  if (prefill) {
    MP_ASSIGN_OR_RETURN(out.prefill, PrefillDensities(entries));
  } else {
    out.prefill.resize(entries.size());
  }
  return out;
}

StatusOr<std::vector<PrefillDensity>> LayerLoop::PrefillDensities(std::vector<RankEntry>& entries) {
  const ModelConfig& c = ctx_.config();
  std::vector<int64_t> local(entries.size(), 0);
  for (size_t i = 0; i < entries.size(); ++i) {
    RankEntry& e = entries[i];
    if (!e.prefill()) continue;
    const TokenRange step{e.length_before, e.length_after};
    e.seq->causal_pairs +=
        c.num_hidden_layers * c.num_key_value_heads * CausalPairs(std::span(&step, 1));
    MP_ASSIGN_OR_RETURN(local[i], e.seq->AttendedPairs(*ctx_.backend));
  }
  // Each rank counted its own queries.
  std::vector<int64_t> total = local;
  if (ctx_.comm->size() > 1) {
    std::vector<int64_t> all(local.size() * static_cast<size_t>(ctx_.comm->size()));
    MP_RETURN_IF_ERROR(
        ctx_.comm->HostAllGather(local.data(), all.data(), local.size() * sizeof(int64_t)));
    for (size_t i = 0; i < local.size(); ++i) {
      total[i] = 0;
      for (int r = 0; r < ctx_.comm->size(); ++r) total[i] += all[r * local.size() + i];
    }
  }
  std::vector<PrefillDensity> out(entries.size());
  for (size_t i = 0; i < entries.size(); ++i)
    if (entries[i].prefill()) out[i] = {total[i], entries[i].seq->causal_pairs};
  return out;
}

}  // namespace millipede
