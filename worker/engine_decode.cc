// Engine::ForwardDecode: a replicated step, each rank attending to its own KV shard and the
// (o, lse) partials merged across ranks by log-sum-exp.
#include <algorithm>

#include "worker/engine.h"

namespace millipede {

StatusOr<ConstTensorView> Engine::ProjectQkvDecode(int64_t layer, int64_t cache_row,
                                                   bool store_kv, ConstTensorView inv_freq) {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_->layers[static_cast<size_t>(layer)];
  const Shape q_shape{1, c.num_attention_heads, c.head_dim};
  if (!UseFused(w.qkv_proj, w.q_bias, w.qkv_bias)) {
    MP_RETURN_IF_ERROR(ProjectQkv(layer, 0, 1, cache_row, store_kv, inv_freq));
    return Reshape(SliceRows(q_.cview(), 0, 1), q_shape);
  }
  Backend& b = *backend_;
  TensorView normed = SliceRows(normed_.view(), 0, 1);
  MP_RETURN_IF_ERROR(b.RmsNorm({AsConst(SliceRows(hidden_.view(), 0, 1)), w.input_norm,
                                TensorView{}, normed, static_cast<float>(c.rms_norm_eps)}));
  // One GEMM over q_proj | k_proj | v_proj: for one token its output row is q | k | v.
  TensorView qkv = SliceRows(qkv_.view(), 0, 1);
  MP_RETURN_IF_ERROR(b.Gemm({AsConst(normed), w.qkv_proj, w.qkv_bias, qkv}));
  const Shape kv_shape{1, c.num_key_value_heads, c.head_dim};
  const int64_t q_width = c.num_attention_heads * c.head_dim;
  const int64_t kv_width = c.num_key_value_heads * c.head_dim;
  MP_ASSIGN_OR_RETURN(TensorView q, SubView(qkv, 0, q_shape));
  MP_ASSIGN_OR_RETURN(ConstTensorView k, SubView(AsConst(qkv), q_width, kv_shape));
  MP_ASSIGN_OR_RETURN(ConstTensorView v, SubView(AsConst(qkv), q_width + kv_width, kv_shape));
  MP_RETURN_IF_ERROR(RopeAndStore(layer, q, k, v, SliceRows(positions_.cview(), 0, 1), cache_row,
                                  store_kv, inv_freq));
  return AsConst(q);
}

Status Engine::AttendDecode(int64_t layer, ConstTensorView q, int64_t position,
                            int64_t visible) {
  const ModelConfig& c = config_;
  Backend& b = *backend_;
  const Shape q_shape{1, c.num_attention_heads, c.head_dim};
  // Rows [begin, end) of this rank's cache to attend to. Every key precedes (or is) this token,
  // so no mask is needed; a rank without keys contributes the empty state.
  std::vector<std::pair<int64_t, int64_t>> parts = {{0, visible}};
  std::vector<uint8_t> row_visible;  // static eviction: [visible, kv_heads]
  // One role per layer (CheckPolicy refuses layers that mix roles per KV head).
  const DecodeRole role = policy().layers[static_cast<size_t>(layer)].LayerDecode();
  if (role == DecodeRole::kStreamingHead) {
    // Rows are in increasing position order (committed ranges, then this token's row if this
    // rank stores it), so the sinks are a prefix and the window a suffix of the rows.
    auto rows_before = [&](int64_t pos) {
      int64_t n = 0;
      for (const TokenRange& r : kv_->ranges())
        n += std::clamp<int64_t>(pos - r.begin, 0, r.size());
      if (visible > kv_->rows() && position < pos) ++n;
      return n;
    };
    const int64_t sinks = rows_before(policy().streaming_head.sink_tokens);
    const int64_t window_begin = rows_before(position - policy().streaming_head.window_tokens + 1);
    if (sinks < window_begin) parts = {{0, sinks}, {window_begin, visible}};
  } else if (role == DecodeRole::kStaticEviction) {
    // Heavy hitters chosen after prefill, plus the most recent positions.
    const int64_t kv_heads = c.num_key_value_heads;
    // Without a prefill that chose them (a policy set afterwards) no key is a heavy hitter.
    static const std::vector<uint8_t> kNone;
    const std::vector<uint8_t>& heavy =
        static_cast<size_t>(layer) < heavy_.size() ? heavy_[static_cast<size_t>(layer)] : kNone;
    row_visible.assign(static_cast<size_t>(std::max<int64_t>(visible, 1) * kv_heads), 0);
    const int64_t recent_from = position - policy().static_eviction.recent_tokens + 1;
    int64_t row = 0;
    std::vector<TokenRange> ranges = kv_->ranges();
    if (visible > kv_->rows()) ranges.push_back({position, position + 1});
    for (const TokenRange& r : ranges)
      for (int64_t p = r.begin; p < r.end; ++p, ++row)
        for (int64_t g = 0; g < kv_heads; ++g) {
          const size_t i = static_cast<size_t>(row * kv_heads + g);
          row_visible[i] = (p >= recent_from || (i < heavy.size() && heavy[i] != 0)) ? 1 : 0;
        }
  } else {
    MP_ASSERT(role == DecodeRole::kFull,
              "decode roles this engine does not run are refused by CheckPolicy");
  }
  MP_ASSIGN_OR_RETURN(TensorView o_part, Reshape(SliceRows(o_part_.view(), 0, 1), q_shape));
  TensorView lse_part = SliceRows(lse_part_.view(), 0, 1);
  MP_ASSIGN_OR_RETURN(TensorView o_tmp, Reshape(SliceRows(o_acc_.view(), 0, 1), q_shape));
  TensorView lse_tmp = SliceRows(lse_acc_.view(), 0, 1);
  for (size_t i = 0; i < parts.size(); ++i) {
    const auto [begin, end] = parts[i];
    if (i > 0 && end <= begin) continue;
    AttentionArgs a;
    a.q = q;
    a.k = SliceRows(kv_->Keys(layer, visible), begin, end - begin);
    a.v = SliceRows(kv_->Values(layer, visible), begin, end - begin);
    a.q_offset = position;
    a.mask = AttentionMask::kNone;
    if (!row_visible.empty()) a.kv_row_visible = row_visible.data();
    a.o = i == 0 ? o_part : o_tmp;
    a.lse = i == 0 ? lse_part : lse_tmp;
    MP_RETURN_IF_ERROR(b.Attention(a));
    if (i > 0) MP_RETURN_IF_ERROR(b.MergeStateInPlace(o_part, lse_part, AsConst(o_tmp),
                                                      AsConst(lse_tmp)));
  }
  return OkStatus();
}

StatusOr<ConstTensorView> Engine::ForwardDecode(int32_t id) {
  MP_REQUIRE(kv_ != nullptr, "decode: no sequence started");
  const ModelConfig& c = config_;
  Backend& b = *backend_;
  Communicator& comm = *comm_;
  const int num_ranks = comm.size();
  MP_REQUIRE(id >= 0 && id < c.vocab_size, "token id ", id, " is outside the vocabulary [0, ",
             c.vocab_size, ")");
  const int64_t position = global_length_;
  MP_REQUIRE(position + 1 <= max_context(), "decode: position ", position,
             " is beyond the context limit of ", max_context());
  const bool owner = ShardPlan::DecodeOwner(position, num_ranks) == comm.rank();
  const int64_t rows0 = kv_->rows();
  const bool fits = !owner || rows0 + 1 <= kv_->capacity();
  if (num_ranks > 1) {
    // Only the owner can tell whether its shard has room; all ranks must stop together if not.
    int32_t flag = fits ? 1 : 0;
    std::vector<int32_t> flags(static_cast<size_t>(num_ranks));
    MP_RETURN_IF_ERROR(comm.HostAllGather(&flag, flags.data(), sizeof(flag)));
    for (int r = 0; r < num_ranks; ++r)
      MP_REQUIRE(flags[r] == 1, "decode: the sequence capacity on rank ", r, " is full");
  }
  MP_REQUIRE(fits, "decode: the sequence capacity of ", kv_->capacity(),
             " positions on this rank is full");
  MP_RETURN_IF_ERROR(EnsureStepBuffers(1));
  MP_RETURN_IF_ERROR(EnsureScratch(1));
  if (num_ranks > 1 && gathered_o_.view().data == nullptr) {
    MP_ASSIGN_OR_RETURN(gathered_o_, b.Allocate(DType::kF32, Shape{num_ranks, 1,
                                                                   c.num_attention_heads,
                                                                   c.head_dim}));
    MP_ASSIGN_OR_RETURN(gathered_lse_,
                        b.Allocate(DType::kF32, Shape{num_ranks, 1, c.num_attention_heads}));
  }
  MP_RETURN_IF_ERROR(Mark(nullptr));
  MP_ASSIGN_OR_RETURN(ConstTensorView inv_freq, InvFreq(position + 1));
  // The step's only host uploads: its token and position.
  TensorView ids_dev = SliceRows(ids_.view(), 0, 1);
  MP_RETURN_IF_ERROR(b.CopyFromHost(ConstTensorView{&id, DType::kI32, Shape{1}}, ids_dev));
  MP_RETURN_IF_ERROR(b.CopyFromHost(ConstTensorView{&position, DType::kI64, Shape{1}},
                                    SliceRows(positions_.view(), 0, 1)));
  MP_RETURN_IF_ERROR(
      b.Embedding({AsConst(ids_dev), weights_->embed_tokens, SliceRows(hidden_.view(), 0, 1)}));
  MP_RETURN_IF_ERROR(Mark(&stats_.embed_s));
  const int64_t visible = rows0 + (owner ? 1 : 0);
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    MP_ASSIGN_OR_RETURN(ConstTensorView q, ProjectQkvDecode(layer, rows0, owner, inv_freq));
    MP_RETURN_IF_ERROR(Mark(&stats_.qkv_s));
    MP_RETURN_IF_ERROR(AttendDecode(layer, q, position, visible));
    MP_ASSIGN_OR_RETURN(TensorView o_part, Reshape(SliceRows(o_part_.view(), 0, 1),
                                                   Shape{1, c.num_attention_heads, c.head_dim}));
    TensorView lse_part = SliceRows(lse_part_.view(), 0, 1);
    MP_RETURN_IF_ERROR(Mark(&stats_.attention_s));
    ConstTensorView attention_out = SliceRows(o_part_.cview(), 0, 1);
    if (num_ranks > 1) {
      // Only O(heads x head_dim) values per rank cross the wire, merged by log-sum-exp.
      MP_RETURN_IF_ERROR(comm.AllGather(AsConst(o_part), gathered_o_.view()));
      MP_RETURN_IF_ERROR(comm.AllGather(AsConst(lse_part), gathered_lse_.view()));
      MP_ASSIGN_OR_RETURN(TensorView o_acc, Reshape(SliceRows(o_acc_.view(), 0, 1),
                                                    Shape{1, c.num_attention_heads, c.head_dim}));
      MP_RETURN_IF_ERROR(b.MergeState({gathered_o_.cview(), gathered_lse_.cview(), o_acc,
                                       SliceRows(lse_acc_.view(), 0, 1)}));
      attention_out = SliceRows(o_acc_.cview(), 0, 1);
      stats_.comm_bytes += static_cast<int64_t>(o_part.NumBytes() + lse_part.NumBytes());
      MP_RETURN_IF_ERROR(Mark(&stats_.comm_wait_s));
    }
    MP_RETURN_IF_ERROR(OutputAndMlp(layer, 0, 1, attention_out));
    MP_RETURN_IF_ERROR(Mark(&stats_.mlp_s));
    ++stats_.decode_layers;
  }
  if (owner) MP_RETURN_IF_ERROR(kv_->Commit({position, position + 1}));
  global_length_ = position + 1;
  MP_RETURN_IF_ERROR(Logits(0));
  MP_RETURN_IF_ERROR(Mark(&stats_.logits_s));
  return Reshape(logits_.cview(), Shape{c.vocab_size});
}
}  // namespace millipede
