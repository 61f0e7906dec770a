// Engine: creation, policies and the per-layer pieces (projections, attention of one block,
// MLP, logits) that the steps in engine_prefill.cc and engine_decode.cc are made of.
#include "worker/engine.h"

#include <algorithm>

#include "common/file_util.h"

namespace millipede {

namespace {

// The dtype every GEMM weight (projections and LM head) has, or F32 when they differ.
DType SharedGemmWeightDType(const ModelWeights& w) {
  const DType dtype = w.lm_head.dtype;
  for (const LayerWeights& l : w.layers)
    for (const ConstTensorView* t : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj,
                                     &l.up_proj, &l.down_proj})
      if (t->dtype != dtype) return DType::kF32;
  return dtype;
}

}  // namespace

StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options,
                                                 std::unique_ptr<Communicator> comm,
                                                 std::unique_ptr<Backend> backend) {
  auto e = std::unique_ptr<Engine>(new Engine());
  e->options_ = options;
  e->comm_ = comm ? std::move(comm) : CreateLocalCommunicator();
  MP_REQUIRE(options.prefill_chunk > 0, "prefill chunk must be positive, got ",
             options.prefill_chunk);
  if (backend) {
    MP_REQUIRE(backend->kind() == options.backend, "engine: a ", BackendKindName(backend->kind()),
               " backend for options naming ", BackendKindName(options.backend));
    e->backend_ = std::move(backend);
  } else {
    MP_ASSIGN_OR_RETURN(e->backend_, CreateBackend(options.backend, options.device));
  }
  if (!options.model_dir.empty()) {
    MP_ASSIGN_OR_RETURN(e->config_,
                        LoadModelConfig(JoinPath(options.model_dir, "config.json")));
    MP_ASSIGN_OR_RETURN(e->weights_,
                        ModelWeights::Load(options.model_dir, e->config_, *e->backend_));
  } else {
    e->config_ = options.random_config;
    MP_RETURN_IF_ERROR(ValidateModelConfig(e->config_));
    MP_ASSIGN_OR_RETURN(e->weights_, ModelWeights::Random(e->config_, options.random_weights,
                                                          *e->backend_));
  }
  e->gemm_input_dtype_ = e->backend_->GemmInputDType(SharedGemmWeightDType(*e->weights_));
  e->policy_ = DensePolicy(e->config_.num_hidden_layers, e->config_.num_key_value_heads);
  if (!options.policy_file.empty()) {
    MP_ASSIGN_OR_RETURN(AttentionPolicy policy,
                        LoadAttentionPolicy(options.policy_file, e->config_.num_hidden_layers,
                                            e->config_.num_key_value_heads));
    MP_RETURN_IF_ERROR(e->SetPolicy(std::move(policy)));
  }
  MP_ASSIGN_OR_RETURN(e->logits_,
                      e->backend_->Allocate(DType::kF32, Shape{1, e->config_.vocab_size}));
  return e;
}

int64_t Engine::max_context() const {
  int64_t limit = config_.max_position_embeddings;
  // Dynamic NTK scaling exists to run past the trained length: up to `factor` times it.
  // (max_position_embeddings <= 2^34 and factor <= 1024: the product fits.)
  if (config_.rope_scaling.type == RopeScalingType::kDynamic)
    limit = static_cast<int64_t>(static_cast<double>(limit) * config_.rope_scaling.factor);
  if (config_.sliding_window > 0) limit = std::min(limit, config_.sliding_window);
  return limit;
}

PolicyCapabilities Engine::capabilities() const {
  if (options_.backend == BackendKind::kCpu)
    return {{PrefillPattern::kDense, PrefillPattern::kAShape},
            {DecodeRole::kFull, DecodeRole::kStreamingHead, DecodeRole::kStaticEviction}};
  return {{PrefillPattern::kDense}, {DecodeRole::kFull, DecodeRole::kStreamingHead}};
}

Status Engine::CheckPolicy(const AttentionPolicy& policy) const {
  MP_RETURN_IF_ERROR(
      ValidateAttentionPolicy(policy, config_.num_hidden_layers, config_.num_key_value_heads));
  MP_RETURN_IF_ERROR(CheckPolicyRunnable(policy, capabilities()));
  for (size_t l = 0; l < policy.layers.size(); ++l)
    if (policy.layers[l].MixedDecode())
      return UnimplementedError("attention policy: layer " + std::to_string(l) +
                                " mixes decode roles per KV head; this engine runs one decode "
                                "role per layer");
  return OkStatus();
}

Status Engine::SetPolicy(AttentionPolicy policy) {
  MP_RETURN_IF_ERROR(CheckPolicy(policy));
  policy_ = std::move(policy);
  return OkStatus();
}

Status Engine::Mark(double* bucket) {
  if (!options_.profile) return OkStatus();
  MP_RETURN_IF_ERROR(backend_->Synchronize());
  const auto now = std::chrono::steady_clock::now();
  if (bucket != nullptr) *bucket += std::chrono::duration<double>(now - mark_).count();
  mark_ = now;
  return OkStatus();
}

StatusOr<ConstTensorView> Engine::InvFreq(int64_t seq_len) {
  const ModelConfig& c = config_;
  const bool depends_on_length = c.rope_scaling.type == RopeScalingType::kDynamic;
  if (inv_freq_len_ >= 0 && (!depends_on_length || inv_freq_len_ == seq_len))
    return inv_freq_.cview();
  // Dynamic NTK scaling depends on the longest position in this pass, as in transformers.
  MP_ASSIGN_OR_RETURN(std::vector<float> host,
                      RopeInvFreq(c.head_dim, c.rope_theta, c.rope_scaling,
                                  c.max_position_embeddings, seq_len));
  if (inv_freq_.view().data == nullptr) {
    MP_ASSIGN_OR_RETURN(inv_freq_, backend_->Allocate(DType::kF32, Shape{c.head_dim / 2}));
  }
  MP_RETURN_IF_ERROR(backend_->CopyFromHost(
      ConstTensorView{host.data(), DType::kF32, Shape{c.head_dim / 2}}, inv_freq_.view()));
  inv_freq_len_ = seq_len;
  return inv_freq_.cview();
}

bool Engine::UseFused(ConstTensorView fused, ConstTensorView part_bias,
                      ConstTensorView fused_bias) const {
  return options_.fuse_projections && fused.data != nullptr &&
         (part_bias.data == nullptr || fused_bias.data != nullptr);
}

Status Engine::RopeAndStore(int64_t layer, TensorView q, ConstTensorView k, ConstTensorView v,
                            ConstTensorView positions, int64_t cache_row, bool store_kv,
                            ConstTensorView inv_freq) {
  if (!store_kv) return backend_->Rope({q, positions, inv_freq});
  MP_ASSIGN_OR_RETURN(KvCache::Rows rows, kv_->MutableRows(layer, cache_row, q.dim(0)));
  return backend_->RopeKv({q, k, v, positions, inv_freq, rows.k, rows.v});
}

Status Engine::ProjectQkv(int64_t layer, int64_t begin, int64_t end, int64_t cache_row,
                          bool store_kv, ConstTensorView inv_freq) {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_->layers[static_cast<size_t>(layer)];
  Backend& b = *backend_;
  const int64_t m = end - begin;
  TensorView normed = SliceRows(normed_.view(), 0, m);
  TensorView q = SliceRows(q_.view(), begin, m);
  TensorView k = SliceRows(k_.view(), 0, m);
  TensorView v = SliceRows(v_.view(), 0, m);
  MP_RETURN_IF_ERROR(b.RmsNorm({AsConst(SliceRows(hidden_.view(), begin, m)), w.input_norm,
                                TensorView{}, normed, static_cast<float>(c.rms_norm_eps)}));
  MP_RETURN_IF_ERROR(b.Gemm({AsConst(normed), w.q_proj, w.q_bias, q}));
  MP_RETURN_IF_ERROR(b.Gemm({AsConst(normed), w.k_proj, w.k_bias, k}));
  MP_RETURN_IF_ERROR(b.Gemm({AsConst(normed), w.v_proj, w.v_bias, v}));
  MP_ASSIGN_OR_RETURN(TensorView q3, Reshape(q, Shape{m, c.num_attention_heads, c.head_dim}));
  MP_ASSIGN_OR_RETURN(TensorView k3, Reshape(k, Shape{m, c.num_key_value_heads, c.head_dim}));
  MP_ASSIGN_OR_RETURN(TensorView v3, Reshape(v, Shape{m, c.num_key_value_heads, c.head_dim}));
  return RopeAndStore(layer, q3, AsConst(k3), AsConst(v3),
                      SliceRows(positions_.cview(), begin, m), cache_row, store_kv, inv_freq);
}

Status Engine::AttendBlock(int64_t layer, const std::vector<TokenRange>& q_ranges,
                           ConstTensorView block_k, ConstTensorView block_v,
                           const std::vector<TokenRange>& block_ranges,
                           const HeadWindows& windows) {
  const ModelConfig& c = config_;
  Backend& b = *backend_;
  const int64_t heads = c.num_attention_heads;
  const int64_t rows_per_call = std::min(attention_chunk(), o_part_.view().shape.dims[0]);
  int64_t q_row = 0;
  for (const TokenRange& qr : q_ranges) {
    for (int64_t s = 0; s < qr.size(); s += rows_per_call) {
      const int64_t m = std::min(rows_per_call, qr.size() - s);
      const int64_t q_first = qr.begin + s, q_last = q_first + m - 1;
      MP_ASSIGN_OR_RETURN(ConstTensorView q, Reshape(SliceRows(q_.cview(), q_row + s, m),
                                                     Shape{m, heads, c.head_dim}));
      MP_ASSIGN_OR_RETURN(TensorView o_part, Reshape(SliceRows(o_part_.view(), 0, m),
                                                     Shape{m, heads, c.head_dim}));
      TensorView lse_part = SliceRows(lse_part_.view(), 0, m);
      MP_ASSIGN_OR_RETURN(TensorView o_acc, Reshape(SliceRows(o_acc_.view(), q_row + s, m),
                                                    Shape{m, heads, c.head_dim}));
      TensorView lse_acc = SliceRows(lse_acc_.view(), q_row + s, m);
      int64_t k_row = 0;
      for (const TokenRange& kr : block_ranges) {
        // Keys after the chunk's last query are masked for all of it: nothing to compute.
        if (kr.begin <= q_last) {
          AttentionArgs a;
          a.q = q;
          a.k = SliceRows(block_k, k_row, kr.size());
          a.v = SliceRows(block_v, k_row, kr.size());
          a.q_offset = q_first;
          a.k_offset = kr.begin;
          a.mask = AttentionMask::kCausal;
          a.o = o_part;
          a.lse = lse_part;
          a.kv_head_window = windows.data();
          a.sink_tokens = windows.sink;
          MP_RETURN_IF_ERROR(b.Attention(a));
          MP_RETURN_IF_ERROR(b.MergeStateInPlace(o_acc, lse_acc, AsConst(o_part),
                                                 AsConst(lse_part)));
        }
        k_row += kr.size();
      }
    }
    q_row += qr.size();
  }
  return OkStatus();
}

Engine::HeadWindows Engine::PrefillWindows(int64_t layer, int64_t total) const {
  HeadWindows w;
  if (total < policy().dense_below_tokens) return w;
  const LayerPolicy& lp = policy().layers[static_cast<size_t>(layer)];
  for (size_t h = 0; h < lp.prefill.size(); ++h) {
    if (lp.prefill[h].pattern != PrefillPattern::kAShape) continue;
    if (w.window.empty()) w.window.assign(lp.prefill.size(), 0);
    w.window[h] = lp.prefill[h].a_shape.window_tokens;
    // Validation gives the a-shape heads of a layer one sink count.
    w.sink = lp.prefill[h].a_shape.sink_tokens;
  }
  return w;
}

Status Engine::OutputAndMlp(int64_t layer, int64_t begin, int64_t end,
                            ConstTensorView attention_out) {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_->layers[static_cast<size_t>(layer)];
  Backend& b = *backend_;
  const int64_t m = end - begin;
  TensorView hidden = SliceRows(hidden_.view(), begin, m);
  // hidden += o_proj(attention)
  MP_RETURN_IF_ERROR(b.Gemm({SliceRows(attention_out, begin, m), w.o_proj, w.o_bias, hidden,
                             /*accumulate=*/true}));
  // hidden += down(silu(gate(norm(hidden))) * up(norm(hidden)))
  const int64_t inter = c.intermediate_size;
  TensorView normed = SliceRows(normed_.view(), 0, m);
  MP_RETURN_IF_ERROR(b.RmsNorm({AsConst(hidden), w.post_attention_norm, TensorView{}, normed,
                                static_cast<float>(c.rms_norm_eps)}));
  TensorView gate, up;
  if (m == 1 && UseFused(w.gate_up_proj, w.gate_bias, w.gate_up_bias)) {
    // One GEMM over gate_proj | up_proj: for one token its output row is gate | up.
    MP_ASSIGN_OR_RETURN(TensorView gate_up, SubView(gate_up_.view(), 0, Shape{1, 2 * inter}));
    MP_RETURN_IF_ERROR(b.Gemm({AsConst(normed), w.gate_up_proj, w.gate_up_bias, gate_up}));
    MP_ASSIGN_OR_RETURN(gate, SubView(gate_up, 0, Shape{1, inter}));
    MP_ASSIGN_OR_RETURN(up, SubView(gate_up, inter, Shape{1, inter}));
  } else {
    // Separate GEMMs (over several tokens a fused output's rows would interleave gate and up).
    MP_ASSIGN_OR_RETURN(gate, SubView(gate_up_.view(), 0, Shape{m, inter}));
    MP_ASSIGN_OR_RETURN(up, SubView(gate_up_.view(), scratch_rows_ * inter, Shape{m, inter}));
    MP_RETURN_IF_ERROR(b.Gemm({AsConst(normed), w.gate_proj, w.gate_bias, gate}));
    MP_RETURN_IF_ERROR(b.Gemm({AsConst(normed), w.up_proj, w.up_bias, up}));
  }
  const TensorView activated =
      gemm_input_dtype_ == DType::kF32 ? gate : SliceRows(silu_out_.view(), 0, m);
  MP_RETURN_IF_ERROR(b.SiluMul({AsConst(gate), AsConst(up), activated}));
  return b.Gemm({AsConst(activated), w.down_proj, w.down_bias, hidden, /*accumulate=*/true});
}

Status Engine::Logits(int64_t row) {
  Backend& b = *backend_;
  TensorView normed = SliceRows(normed_.view(), 0, 1);
  MP_RETURN_IF_ERROR(b.RmsNorm({AsConst(SliceRows(hidden_.view(), row, 1)), weights_->final_norm,
                                TensorView{}, normed, static_cast<float>(config_.rms_norm_eps)}));
  return b.Gemm({AsConst(normed), weights_->lm_head, ConstTensorView{}, logits_.view()});
}

StatusOr<ConstTensorView> Engine::Forward(std::span<const int32_t> ids) {
  MP_REQUIRE(comm_->size() == 1, "Forward(ids) is for a single rank; use ForwardShard");
  const TokenRange range{global_length_, global_length_ + static_cast<int64_t>(ids.size())};
  MP_REQUIRE(!ids.empty(), "forward: no tokens");
  MP_ASSIGN_OR_RETURN(std::optional<ConstTensorView> logits,
                      ForwardShard(std::span<const TokenRange>(&range, 1), ids));
  MP_ASSERT(logits.has_value(), "a single rank holds the last position");
  return *logits;
}

Status Engine::ForwardToHost(std::span<const int32_t> ids, std::vector<float>* logits) {
  MP_ASSIGN_OR_RETURN(ConstTensorView dev, Forward(ids));
  logits->resize(static_cast<size_t>(config_.vocab_size));
  return backend_->CopyToHost(dev, TensorView{logits->data(), DType::kF32, dev.shape});
}

}  // namespace millipede
