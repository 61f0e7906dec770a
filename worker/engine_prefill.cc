// Engine::ForwardShard: a sharded step (prefill) with ring attention across the ranks.
#include <algorithm>

#include "worker/engine.h"

namespace millipede {
namespace {

// Most ranges a rank's share of one sharded step may have (a zig-zag prompt shard has two).
constexpr int kMaxStepRanges = 8;

int64_t TotalSize(std::span<const TokenRange> ranges) {
  int64_t n = 0;
  for (const TokenRange& r : ranges) n += r.size();
  return n;
}

}  // namespace
Status Engine::CheckShard(std::span<const TokenRange> ranges,
                          std::span<const int32_t> ids) const {
  const int64_t n = static_cast<int64_t>(ids.size());
  MP_REQUIRE(TotalSize(ranges) == n, "forward: ", n, " ids for ranges of ", TotalSize(ranges),
             " positions");
  MP_REQUIRE(static_cast<int>(ranges.size()) <= kMaxStepRanges, "forward: more than ",
             kMaxStepRanges, " ranges");
  for (size_t i = 0; i < ranges.size(); ++i)
    MP_REQUIRE(ranges[i].size() > 0 && (i == 0 || ranges[i].begin >= ranges[i - 1].end),
               "forward: ranges must be non-empty and increasing");
  MP_REQUIRE(comm_->size() == 1 || global_length_ == 0,
             "forward: a sharded step across ranks must be the sequence's first step");
  for (int64_t i = 0; i < n; ++i)
    MP_REQUIRE(ids[i] >= 0 && ids[i] < config_.vocab_size, "token id ", ids[i], " at position ",
               i, " is outside the vocabulary [0, ", config_.vocab_size, ")");
  MP_REQUIRE(kv_->rows() + n <= kv_->capacity(), "forward: ", kv_->rows() + n,
             " tokens exceed the sequence capacity of ", kv_->capacity());
  std::vector<TokenRange> after = kv_->ranges();
  for (const TokenRange& r : ranges) AppendRange(&after, r);
  MP_REQUIRE(static_cast<int>(after.size()) <= kMaxStepRanges,
             "forward: the cache would hold more than ", kMaxStepRanges, " ranges");
  return OkStatus();
}

Status Engine::AgreeToContinue(bool go_on) {
  int32_t flag = go_on ? 1 : 0;
  if (comm_->size() > 1) {
    std::vector<int32_t> flags(static_cast<size_t>(comm_->size()));
    MP_RETURN_IF_ERROR(comm_->HostAllGather(&flag, flags.data(), sizeof(flag)));
    for (int32_t f : flags) flag = std::min(flag, f);
  }
  if (flag == 0) return CancelledError("the step was cancelled");
  return OkStatus();
}

struct Engine::Block {
  ConstTensorView k, v;  // [rows, kv_heads, head_dim] per layer-independent buffer
  std::vector<TokenRange> ranges;
};

StatusOr<std::optional<ConstTensorView>> Engine::ForwardShard(
    std::span<const TokenRange> ranges, std::span<const int32_t> ids,
    const LayerCallback& after_layer) {
  MP_REQUIRE(kv_ != nullptr, "forward: no sequence started");
  const ModelConfig& c = config_;
  Backend& b = *backend_;
  Communicator& comm = *comm_;
  const int num_ranks = comm.size(), rank = comm.rank();
  const int64_t n = static_cast<int64_t>(ids.size());
  // Checks of this rank's own share: their outcome is exchanged with the step's metadata, so that
  // a rank that fails does not leave the others waiting in a collective.
  const Status local = CheckShard(ranges, ids);
  const int64_t rows0 = kv_->rows();
  // Every rank learns every rank's K/V ranges after this step: they describe the ring blocks.
  std::vector<TokenRange> after = kv_->ranges();
  if (local.ok())
    for (const TokenRange& r : ranges) AppendRange(&after, r);
  if (static_cast<int>(after.size()) > kMaxStepRanges) after.clear();
  constexpr int kMetaWidth = 1 + 2 * kMaxStepRanges + 2;
  std::vector<int64_t> meta(kMetaWidth, 0), all_meta(kMetaWidth * static_cast<size_t>(num_ranks));
  meta[0] = static_cast<int64_t>(after.size());
  for (size_t i = 0; i < after.size(); ++i) {
    meta[1 + 2 * i] = after[i].begin;
    meta[2 + 2 * i] = after[i].end;
  }
  meta[kMetaWidth - 2] = local.ok() ? n : 0;
  meta[kMetaWidth - 1] = local.ok() ? 1 : 0;
  MP_RETURN_IF_ERROR(
      comm.HostAllGather(meta.data(), all_meta.data(), sizeof(int64_t) * kMetaWidth));
  MP_RETURN_IF_ERROR(local);
  for (int r = 0; r < num_ranks; ++r)
    MP_REQUIRE(all_meta[static_cast<size_t>(r) * kMetaWidth + kMetaWidth - 1] == 1,
               "forward: rank ",
               r, " refused its share of the step (its log says why)");
  std::vector<std::vector<TokenRange>> rank_ranges(static_cast<size_t>(num_ranks));
  std::vector<TokenRange> new_ranges;
  int64_t total = 0, max_rows = 0;
  for (int r = 0; r < num_ranks; ++r) {
    const int64_t* m = &all_meta[static_cast<size_t>(r) * kMetaWidth];
    int64_t rows = 0;
    for (int64_t i = 0; i < m[0]; ++i) {
      rank_ranges[r].push_back({m[1 + 2 * i], m[2 + 2 * i]});
      rows += m[2 + 2 * i] - m[1 + 2 * i];
    }
    total += m[kMetaWidth - 2];
    max_rows = std::max(max_rows, rows);
  }
  // The new positions of all ranks together must be exactly [length, length + total).
  for (int r = 0; r < num_ranks; ++r)
    for (const TokenRange& x : rank_ranges[r])
      if (x.end > global_length_) new_ranges.push_back({std::max(x.begin, global_length_), x.end});
  std::sort(new_ranges.begin(), new_ranges.end(),
            [](const TokenRange& a, const TokenRange& b) { return a.begin < b.begin; });
  int64_t expect = global_length_;
  for (const TokenRange& x : new_ranges) {
    MP_REQUIRE(x.begin == expect, "forward: the ranks' new positions do not tile [",
               global_length_, ", ", global_length_ + total, ") (gap or overlap at ", expect, ")");
    expect = x.end;
  }
  MP_REQUIRE(expect == global_length_ + total && total > 0,
             "forward: the ranks' new positions do not tile the step");
  const int64_t global_end = global_length_ + total;
  MP_REQUIRE(global_end <= max_context(), "forward: ", global_end,
             " positions exceed the context limit of ", max_context());

  // Buffers come from StartSequence; they grow here only for steps larger than it planned.
  MP_RETURN_IF_ERROR(EnsureStepBuffers(n));
  MP_RETURN_IF_ERROR(EnsureScratch(std::min(std::max<int64_t>(n, 1), options_.prefill_chunk)));
  if (num_ranks > 1) MP_RETURN_IF_ERROR(EnsureRingBuffers(max_rows));
  MP_RETURN_IF_ERROR(Mark(nullptr));
  MP_ASSIGN_OR_RETURN(ConstTensorView inv_freq, InvFreq(global_end));
  // Host uploads happen here, once per step: nothing inside a layer waits for the host.
  if (n > 0) {
    std::vector<int64_t> positions;
    positions.reserve(static_cast<size_t>(n));
    for (const TokenRange& r : ranges)
      for (int64_t p = r.begin; p < r.end; ++p) positions.push_back(p);
    MP_RETURN_IF_ERROR(b.CopyFromHost(ConstTensorView{positions.data(), DType::kI64, Shape{n}},
                                      SliceRows(positions_.view(), 0, n)));
    MP_RETURN_IF_ERROR(b.CopyFromHost(ConstTensorView{ids.data(), DType::kI32, Shape{n}},
                                      SliceRows(ids_.view(), 0, n)));
    MP_RETURN_IF_ERROR(b.Embedding({SliceRows(ids_.cview(), 0, n), weights_->embed_tokens,
                                    SliceRows(hidden_.view(), 0, n)}));
  }
  MP_RETURN_IF_ERROR(Mark(&stats_.embed_s));
  const std::vector<TokenRange> q_ranges(ranges.begin(), ranges.end());
  const int64_t chunk = options_.prefill_chunk;
  const int64_t local_rows = rows0 + n;
  const int64_t kv_row_bytes =
      c.num_key_value_heads * c.head_dim * static_cast<int64_t>(DTypeSize(options_.kv_dtype));
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    // Phase 1: this rank's queries, and its keys and values into the cache.
    for (int64_t s = 0; s < n; s += chunk)
      MP_RETURN_IF_ERROR(ProjectQkv(layer, s, std::min(n, s + chunk), rows0 + s,
                                    /*store_kv=*/true, inv_freq));
    MP_RETURN_IF_ERROR(Mark(&stats_.qkv_s));
    // Phase 2: attention by the layer's policy: dense heads see every earlier key, A-shape heads
    // their sinks and window (short prompts are dense under any policy; SetPolicy refuses what
    // this engine cannot run).
    const HeadWindows windows = PrefillWindows(layer, total);
    // Ring attention: at step t this rank holds the block of rank (rank - t) mod N and passes it
    // on while receiving the next one.
    MP_RETURN_IF_ERROR(b.ClearState(SliceRows(o_acc_.view(), 0, n),
                                    SliceRows(lse_acc_.view(), 0, n)));
    Block block{kv_->Keys(layer, local_rows), kv_->Values(layer, local_rows), after};
    for (int t = 0; t < num_ranks; ++t) {
      const bool pass_on = t + 1 < num_ranks;
      const int next_origin = ((rank - t - 1) % num_ranks + num_ranks) % num_ranks;
      Block incoming;
      if (pass_on) {
        const std::vector<TokenRange>& in_ranges = rank_ranges[next_origin];
        const int64_t in_rows = TotalSize(in_ranges);
        incoming = {SliceRows(ring_k_[t % 2].cview(), 0, in_rows),
                    SliceRows(ring_v_[t % 2].cview(), 0, in_rows), in_ranges};
        const int next = (rank + 1) % num_ranks, prev = (rank + num_ranks - 1) % num_ranks;
        MP_RETURN_IF_ERROR(comm.StartSendRecv(block.k, next,
                                              SliceRows(ring_k_[t % 2].view(), 0, in_rows), prev));
        MP_RETURN_IF_ERROR(comm.StartSendRecv(block.v, next,
                                              SliceRows(ring_v_[t % 2].view(), 0, in_rows), prev));
        stats_.comm_bytes += 2 * block.k.shape.dims[0] * kv_row_bytes;
      }
      if (n > 0) MP_RETURN_IF_ERROR(AttendBlock(layer, q_ranges, block.k, block.v, block.ranges,
                                                windows));
      MP_RETURN_IF_ERROR(Mark(&stats_.attention_s));
      if (pass_on) {
        MP_RETURN_IF_ERROR(comm.WaitAll());
        block = std::move(incoming);
        MP_RETURN_IF_ERROR(Mark(&stats_.comm_wait_s));
      }
    }
    if (policy().layers[static_cast<size_t>(layer)].LayerDecode() == DecodeRole::kStaticEviction)
      MP_RETURN_IF_ERROR(SelectHeavyHitters(layer, q_ranges, after, local_rows, global_end));
    // Phase 3: output projection and MLP, chunk by chunk.
    for (int64_t s = 0; s < n; s += chunk)
      MP_RETURN_IF_ERROR(OutputAndMlp(layer, s, std::min(n, s + chunk), o_acc_.cview()));
    MP_RETURN_IF_ERROR(Mark(&stats_.mlp_s));
    ++stats_.prefill_layers;
    if (after_layer) MP_RETURN_IF_ERROR(AgreeToContinue(after_layer(layer + 1,
                                                                    c.num_hidden_layers)));
  }
  for (const TokenRange& r : ranges) MP_RETURN_IF_ERROR(kv_->Commit(r));
  global_length_ = global_end;

  // Logits on the rank holding the step's last position only.
  int64_t row = 0;
  for (const TokenRange& r : ranges) {
    if (r.end == global_end) {
      MP_RETURN_IF_ERROR(Logits(row + r.size() - 1));
      MP_RETURN_IF_ERROR(Mark(&stats_.logits_s));
      MP_ASSIGN_OR_RETURN(ConstTensorView logits, Reshape(logits_.cview(), Shape{c.vocab_size}));
      return std::optional<ConstTensorView>(logits);
    }
    row += r.size();
  }
  return std::optional<ConstTensorView>();
}
}  // namespace millipede
