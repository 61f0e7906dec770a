#include "worker/engine/step_preparer.h"

#include <algorithm>
#include <set>
#include <string>

namespace millipede {
namespace {

void PutRanges(std::vector<int64_t>* out, std::span<const TokenRange> ranges) {
  out->push_back(static_cast<int64_t>(ranges.size()));
  for (const TokenRange& r : ranges) {
    out->push_back(r.begin);
    out->push_back(r.end);
  }
}

// Reads what PutRanges wrote at `*at`.
Status GetRanges(const std::vector<int64_t>& in, size_t* at, std::vector<TokenRange>* ranges) {
  MP_ASSERT(*at < in.size(), "step metadata is complete");
  const int64_t n = in[(*at)++];
  MP_ASSERT(n >= 0 && *at + 2 * static_cast<size_t>(n) <= in.size(), "step metadata is complete");
  ranges->clear();
  for (int64_t i = 0; i < n; ++i, *at += 2) ranges->push_back({in[*at], in[*at + 1]});
  return OkStatus();
}

// Every rank's vector (of any length) in rank order: lengths first, then the padded contents.
StatusOr<std::vector<std::vector<int64_t>>> AllGatherVectors(Communicator& comm,
                                                             const std::vector<int64_t>& mine) {
  const int n = comm.size();
  if (n == 1) return std::vector<std::vector<int64_t>>{mine};
  const int64_t size = static_cast<int64_t>(mine.size());
  std::vector<int64_t> sizes(static_cast<size_t>(n));
  MP_RETURN_IF_ERROR(comm.HostAllGather(&size, sizes.data(), sizeof(size)));
  const int64_t width = *std::max_element(sizes.begin(), sizes.end());
  std::vector<int64_t> padded(mine), all(static_cast<size_t>(width * n));
  padded.resize(static_cast<size_t>(width), 0);
  MP_RETURN_IF_ERROR(comm.HostAllGather(padded.data(), all.data(),
                                        static_cast<size_t>(width) * sizeof(int64_t)));
  std::vector<std::vector<int64_t>> out;
  for (int r = 0; r < n; ++r)
    out.emplace_back(all.begin() + r * width, all.begin() + r * width + sizes[r]);
  return out;
}

}  // namespace

Status StepPreparer::CheckEntry(const SequenceStep& step, RankEntry* entry) const {
  const ModelConfig& c = ctx_.config();
  const Sequence* s = entry->seq;
  MP_REQUIRE(s != nullptr, "step: no sequence ", step.sequence, " on this rank");
  entry->length_before = s->length();
  for (size_t i = 0; i < step.ids.size(); ++i)
    MP_REQUIRE(step.ids[i] >= 0 && step.ids[i] < c.vocab_size, "token id ", step.ids[i],
               " at position ", i, " is outside the vocabulary [0, ", c.vocab_size, ")");
  if (step.kind == StepKind::kDecode) {
    MP_REQUIRE(step.ids.size() == 1, "decode: one token per step, got ", step.ids.size());
    const int64_t position = s->length();
    MP_REQUIRE(position + 1 <= ctx_.max_context(), "decode: position ", position,
               " is beyond the context limit of ", ctx_.max_context());
    if (ShardPlan::DecodeOwner(position, ctx_.comm->size()) == ctx_.comm->rank()) {
      entry->ranges = {{position, position + 1}};
      entry->fits = s->stored_rows() + 1 <= s->options().capacity;
    }
    return OkStatus();
  }
  const int64_t n = static_cast<int64_t>(step.ids.size());
  MP_REQUIRE(TotalSize(step.ranges) == n, "forward: ", n, " ids for ranges of ",
             TotalSize(step.ranges), " positions");
  for (size_t i = 0; i < step.ranges.size(); ++i)
    MP_REQUIRE(step.ranges[i].size() > 0 &&
                   (i == 0 ? step.ranges[i].begin >= s->length()
                           : step.ranges[i].begin >= step.ranges[i - 1].end),
               "forward: ranges must be non-empty, increasing and after the sequence's ",
               s->length(), " positions");
  MP_REQUIRE(s->stored_rows() + n <= s->options().capacity, "forward: ", s->stored_rows() + n,
             " tokens exceed the sequence capacity of ", s->options().capacity);
  MP_REQUIRE(n <= s->MaxStepRows(), "forward: a step of ", n, " tokens exceeds the ",
             s->MaxStepRows(), " this sequence's streaming stores were sized for");
  entry->ranges = step.ranges;
  return OkStatus();
}

Status StepPreparer::ExchangeEntries(std::vector<RankEntry>* entries, const Status& local) {
  std::vector<int64_t> mine = {local.ok() ? 1 : 0};
  if (local.ok()) {
    mine.push_back(static_cast<int64_t>(entries->size()));
    for (const RankEntry& e : *entries) {
      mine.insert(mine.end(), {e.step->sequence, static_cast<int64_t>(e.step->kind),
                               e.length_before, e.fits ? 1 : 0});
      if (e.prefill()) {
        PutRanges(&mine, e.seq->stored());
        PutRanges(&mine, e.ranges);
      }
    }
  }
  MP_ASSIGN_OR_RETURN(std::vector<std::vector<int64_t>> all, AllGatherVectors(*ctx_.comm, mine));
  MP_RETURN_IF_ERROR(local);
  const int num_ranks = ctx_.comm->size();
  for (RankEntry& e : *entries) {
    e.rank_stored.assign(static_cast<size_t>(num_ranks), {});
    e.rank_step.assign(static_cast<size_t>(num_ranks), {});
  }
  for (int r = 0; r < num_ranks; ++r) {
    const std::vector<int64_t>& m = all[static_cast<size_t>(r)];
    MP_REQUIRE(m[0] == 1, "forward: rank ", r, " refused its share of the step (its log says why)");
    MP_REQUIRE(m[1] == static_cast<int64_t>(entries->size()), "step: rank ", r, " runs ", m[1],
               " entries, this rank ", entries->size(), ": the ranks' plans differ");
    size_t at = 2;
    for (RankEntry& e : *entries) {
      MP_REQUIRE(m[at] == e.step->sequence && m[at + 1] == static_cast<int64_t>(e.step->kind) &&
                     m[at + 2] == e.length_before,
                 "step: rank ", r, "'s plan differs from this rank's at sequence ",
                 e.step->sequence);
      MP_REQUIRE(m[at + 3] == 1, "decode: the sequence capacity on rank ", r, " is full");
      at += 4;
      if (e.prefill()) {
        MP_RETURN_IF_ERROR(GetRanges(m, &at, &e.rank_stored[static_cast<size_t>(r)]));
        MP_RETURN_IF_ERROR(GetRanges(m, &at, &e.rank_step[static_cast<size_t>(r)]));
      }
    }
  }
  return OkStatus();
}

Status StepPreparer::ResolveEntries(std::vector<RankEntry>* entries, int64_t* ring_rows) {
  int64_t row = 0, logit_row = 0;
  *ring_rows = 0;
  for (RankEntry& e : *entries) {
    e.row0 = row;
    if (!e.prefill()) {
      e.rows = 1;
      e.length_after = e.length_before + 1;
      e.logit_row = logit_row++;
      e.logits_step_row = row;
      row += 1;
      continue;
    }
    MP_RETURN_IF_ERROR(ResolvePrefill(&e, ring_rows));
    e.rows = TotalSize(e.ranges);
    if (!e.ranges.empty() && e.ranges.back().end == e.length_after) {
      e.logit_row = logit_row++;
      e.logits_step_row = row + e.rows - 1;
    }
    row += e.rows;
  }
  return OkStatus();
}

Status StepPreparer::ResolvePrefill(RankEntry* e, int64_t* ring_rows) {
  // The new positions of all ranks together must be exactly [length, length + total).
  std::vector<TokenRange> all;
  for (const auto& r : e->rank_step) all.insert(all.end(), r.begin(), r.end());
  std::sort(all.begin(), all.end(),
            [](const TokenRange& a, const TokenRange& b) { return a.begin < b.begin; });
  int64_t expect = e->length_before;
  for (const TokenRange& x : all) {
    MP_REQUIRE(x.begin == expect, "forward: the ranks' new positions do not tile [",
               e->length_before, ", ...) (gap or overlap at ", expect, ")");
    expect = x.end;
  }
  MP_REQUIRE(expect > e->length_before, "forward: the ranks' new positions do not tile the step");
  e->length_after = expect;
  MP_REQUIRE(e->length_after <= ctx_.max_context(), "forward: ", e->length_after,
             " positions exceed the context limit of ", ctx_.max_context());
  // Ring blocks: each rank's rows of a layer as its store keeps them, once per kind of store.
  for (int64_t l = 0; l < ctx_.config().num_hidden_layers; ++l) {
    const KvRetention& ret = e->seq->attention(l).retention;
    auto [it, added] = e->blocks.try_emplace({ret.sink_tokens, ret.window_tokens});
    if (!added) continue;
    for (size_t r = 0; r < e->rank_step.size(); ++r) {
      it->second.push_back(Sequence::BlockRanges(ret, e->rank_stored[r], e->length_before,
                                                 e->rank_step[r]));
      *ring_rows = std::max(*ring_rows, TotalSize(it->second.back()));
    }
  }
  int64_t most = 0;
  for (const auto& r : e->rank_step) most = std::max(most, TotalSize(r));
  *ring_rows = std::max(*ring_rows, ctx_.ForcedPassQRingRows(most));
  return OkStatus();
}

StatusOr<std::vector<RankEntry>> StepPreparer::Prepare(const StepPlan& plan) {
  MP_REQUIRE(!plan.steps.empty(), "step: the plan is empty");
  std::vector<RankEntry> entries(plan.steps.size());
  Status local;
  std::set<SequenceId> seen;
  for (size_t i = 0; i < plan.steps.size() && local.ok(); ++i) {
    const SequenceStep& step = plan.steps[i];
    entries[i].step = &step;
    entries[i].seq = sequences_.FindMutable(step.sequence);
    if (!seen.insert(step.sequence).second)
      local = InvalidArgumentError("step: sequence " + std::to_string(step.sequence) +
                                   " appears twice in the plan");
    else
      local = CheckEntry(step, &entries[i]);
  }
  MP_RETURN_IF_ERROR(ExchangeEntries(&entries, local));
  int64_t ring_rows = 0;
  MP_RETURN_IF_ERROR(ResolveEntries(&entries, &ring_rows));
  int64_t rows = 0, logit_rows = 0;
  for (const RankEntry& e : entries) {
    rows += e.rows;
    if (e.logit_row >= 0) ++logit_rows;
  }
  // Buffers come from StartSequence; they grow here only for steps larger than it planned.
  MP_RETURN_IF_ERROR(ctx_.workspace->Reserve(rows, ring_rows, ctx_.comm->size(), logit_rows));
  return entries;
}

}  // namespace millipede
