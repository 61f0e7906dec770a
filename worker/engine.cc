#include "worker/engine.h"

#include <algorithm>

#include "common/file_util.h"
#include "common/logging.h"

namespace millipede {

StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options) {
  auto e = std::unique_ptr<Engine>(new Engine());
  e->options_ = options;
  MP_REQUIRE(options.prefill_chunk > 0, "prefill chunk must be positive, got ",
             options.prefill_chunk);
  MP_ASSIGN_OR_RETURN(e->backend_, CreateBackend(options.backend));
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
  MP_ASSIGN_OR_RETURN(e->logits_, e->backend_->Allocate(DType::kF32, Shape{1, e->config_.vocab_size}));
  return e;
}

int64_t Engine::max_context() const {
  int64_t limit = config_.max_position_embeddings;
  if (config_.sliding_window > 0) limit = std::min(limit, config_.sliding_window);
  return limit;
}

Status Engine::StartSequence(int64_t capacity) {
  kv_.reset();
  MP_REQUIRE(capacity > 0 && capacity <= max_context(), "sequence capacity ", capacity,
             " outside [1, ", max_context(), "]");
  MP_ASSIGN_OR_RETURN(KvCache cache,
                      KvCache::Create(*backend_, config_.num_hidden_layers,
                                      config_.num_key_value_heads, config_.head_dim, capacity,
                                      options_.kv_dtype));
  kv_ = std::make_unique<KvCache>(std::move(cache));
  return OkStatus();
}

void Engine::EndSequence() {
  kv_.reset();
  hidden_ = BackendTensor();
  q_ = BackendTensor();
}

Status Engine::EnsureScratch(int64_t chunk) {
  if (chunk <= scratch_rows_) return OkStatus();
  const ModelConfig& c = config_;
  const int64_t kv_width = c.num_key_value_heads * c.head_dim;
  const int64_t q_width = c.num_attention_heads * c.head_dim;
  Backend& b = *backend_;
  MP_ASSIGN_OR_RETURN(normed_, b.Allocate(DType::kF32, Shape{chunk, c.hidden_size}));
  MP_ASSIGN_OR_RETURN(k_, b.Allocate(DType::kF32, Shape{chunk, kv_width}));
  MP_ASSIGN_OR_RETURN(v_, b.Allocate(DType::kF32, Shape{chunk, kv_width}));
  MP_ASSIGN_OR_RETURN(attn_, b.Allocate(DType::kF32, Shape{chunk, q_width}));
  MP_ASSIGN_OR_RETURN(gate_, b.Allocate(DType::kF32, Shape{chunk, c.intermediate_size}));
  MP_ASSIGN_OR_RETURN(up_, b.Allocate(DType::kF32, Shape{chunk, c.intermediate_size}));
  MP_ASSIGN_OR_RETURN(positions_, b.Allocate(DType::kI64, Shape{chunk}));
  MP_ASSIGN_OR_RETURN(ids_, b.Allocate(DType::kI32, Shape{chunk}));
  scratch_rows_ = chunk;
  return OkStatus();
}

StatusOr<ConstTensorView> Engine::Forward(std::span<const int32_t> ids) {
  MP_REQUIRE(kv_ != nullptr, "Forward: no sequence started");
  const ModelConfig& c = config_;
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t position0 = kv_->length();
  MP_REQUIRE(n > 0, "Forward: no tokens");
  MP_REQUIRE(position0 + n <= kv_->capacity(), "Forward: ", position0 + n,
             " tokens exceed the sequence capacity of ", kv_->capacity());
  for (int64_t i = 0; i < n; ++i)
    MP_REQUIRE(ids[i] >= 0 && ids[i] < c.vocab_size, "token id ", ids[i], " at position ", i,
               " is outside the vocabulary [0, ", c.vocab_size, ")");
  Backend& b = *backend_;
  const int64_t chunk = std::min(n, options_.prefill_chunk);
  MP_RETURN_IF_ERROR(EnsureScratch(chunk));
  const int64_t q_width = c.num_attention_heads * c.head_dim;
  if (hidden_.view().data == nullptr || hidden_.view().dim(0) < n) {
    MP_ASSIGN_OR_RETURN(hidden_, b.Allocate(DType::kF32, Shape{n, c.hidden_size}));
    MP_ASSIGN_OR_RETURN(q_, b.Allocate(DType::kF32, Shape{n, q_width}));
  }
  TensorView hidden = SliceRows(hidden_.view(), 0, n);

  // Dynamic NTK scaling depends on the longest position in this pass, as in transformers.
  MP_ASSIGN_OR_RETURN(std::vector<float> inv_freq_host,
                      RopeInvFreq(c.head_dim, c.rope_theta, c.rope_scaling,
                                  c.max_position_embeddings, position0 + n));
  MP_ASSIGN_OR_RETURN(BackendTensor inv_freq,
                      b.Allocate(DType::kF32, Shape{c.head_dim / 2}));
  MP_RETURN_IF_ERROR(b.CopyFromHost(
      ConstTensorView{inv_freq_host.data(), DType::kF32, Shape{c.head_dim / 2}}, inv_freq.view()));

  for (int64_t s = 0; s < n; s += chunk) {
    const int64_t e = std::min(n, s + chunk);
    TensorView ids_dev = SliceRows(ids_.view(), 0, e - s);
    MP_RETURN_IF_ERROR(b.CopyFromHost(
        ConstTensorView{ids.data() + s, DType::kI32, Shape{e - s}}, ids_dev));
    MP_RETURN_IF_ERROR(b.Embedding({AsConst(ids_dev), weights_->embed_tokens,
                                    SliceRows(hidden, s, e - s)}));
  }

  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const LayerWeights& w = weights_->layers[static_cast<size_t>(layer)];
    // Phase 1: queries, keys and values of every token from the layer's input, so that the
    // cache holds this layer's K/V for the whole pass before any attention reads it.
    for (int64_t s = 0; s < n; s += chunk) {
      const int64_t e = std::min(n, s + chunk), m = e - s;
      TensorView normed = SliceRows(normed_.view(), 0, m);
      TensorView q = SliceRows(q_.view(), s, m);
      TensorView k = SliceRows(k_.view(), 0, m);
      TensorView v = SliceRows(v_.view(), 0, m);
      MP_RETURN_IF_ERROR(b.RmsNorm({AsConst(SliceRows(hidden, s, m)), w.input_norm, TensorView{},
                                    normed, static_cast<float>(c.rms_norm_eps)}));
      MP_RETURN_IF_ERROR(b.Gemm({AsConst(normed), w.q_proj, w.q_bias, q}));
      MP_RETURN_IF_ERROR(b.Gemm({AsConst(normed), w.k_proj, w.k_bias, k}));
      MP_RETURN_IF_ERROR(b.Gemm({AsConst(normed), w.v_proj, w.v_bias, v}));
      std::vector<int64_t> pos(static_cast<size_t>(m));
      for (int64_t i = 0; i < m; ++i) pos[i] = position0 + s + i;
      TensorView positions = SliceRows(positions_.view(), 0, m);
      MP_RETURN_IF_ERROR(
          b.CopyFromHost(ConstTensorView{pos.data(), DType::kI64, Shape{m}}, positions));
      MP_ASSIGN_OR_RETURN(TensorView q3, Reshape(q, Shape{m, c.num_attention_heads, c.head_dim}));
      MP_ASSIGN_OR_RETURN(TensorView k3, Reshape(k, Shape{m, c.num_key_value_heads, c.head_dim}));
      MP_ASSIGN_OR_RETURN(TensorView v3, Reshape(v, Shape{m, c.num_key_value_heads, c.head_dim}));
      MP_RETURN_IF_ERROR(b.Rope({q3, AsConst(positions), inv_freq.cview()}));
      MP_RETURN_IF_ERROR(b.Rope({k3, AsConst(positions), inv_freq.cview()}));
      MP_RETURN_IF_ERROR(kv_->Write(b, layer, position0 + s, AsConst(k3), AsConst(v3)));
    }
    // Phase 2: attention, output projection into the residual, then the MLP, chunk by chunk.
    for (int64_t s = 0; s < n; s += chunk) {
      const int64_t e = std::min(n, s + chunk);
      MP_RETURN_IF_ERROR(AttentionBlock(layer, s, e, position0));
    }
  }
  MP_RETURN_IF_ERROR(kv_->SetLength(position0 + n));

  // Logits for the last position only.
  TensorView normed = SliceRows(normed_.view(), 0, 1);
  MP_RETURN_IF_ERROR(b.RmsNorm({AsConst(SliceRows(hidden, n - 1, 1)), weights_->final_norm,
                                TensorView{}, normed, static_cast<float>(c.rms_norm_eps)}));
  MP_RETURN_IF_ERROR(b.Gemm({AsConst(normed), weights_->lm_head, ConstTensorView{},
                             logits_.view()}));
  MP_ASSIGN_OR_RETURN(ConstTensorView logits, Reshape(logits_.cview(), Shape{c.vocab_size}));
  return logits;
}

Status Engine::AttentionBlock(int64_t layer, int64_t begin, int64_t end, int64_t position0) {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_->layers[static_cast<size_t>(layer)];
  Backend& b = *backend_;
  const int64_t m = end - begin;
  TensorView hidden = SliceRows(hidden_.view(), begin, m);
  // Causal: this chunk's queries see every key up to their own position.
  const int64_t visible = position0 + end;
  MP_ASSIGN_OR_RETURN(ConstTensorView q,
                      Reshape(SliceRows(q_.cview(), begin, m),
                              Shape{m, c.num_attention_heads, c.head_dim}));
  MP_ASSIGN_OR_RETURN(TensorView o, Reshape(SliceRows(attn_.view(), 0, m),
                                            Shape{m, c.num_attention_heads, c.head_dim}));
  AttentionArgs attention;
  attention.q = q;
  attention.k = kv_->Keys(layer, visible);
  attention.v = kv_->Values(layer, visible);
  attention.q_offset = position0 + begin;
  attention.k_offset = 0;
  attention.mask = AttentionMask::kCausal;
  attention.o = o;
  MP_RETURN_IF_ERROR(b.Attention(attention));
  // hidden += o_proj(attention)
  MP_RETURN_IF_ERROR(b.Gemm({AsConst(SliceRows(attn_.view(), 0, m)), w.o_proj, w.o_bias, hidden,
                             /*accumulate=*/true}));
  // hidden += down(silu(gate(norm(hidden))) * up(norm(hidden)))
  TensorView normed = SliceRows(normed_.view(), 0, m);
  TensorView gate = SliceRows(gate_.view(), 0, m);
  TensorView up = SliceRows(up_.view(), 0, m);
  MP_RETURN_IF_ERROR(b.RmsNorm({AsConst(hidden), w.post_attention_norm, TensorView{}, normed,
                                static_cast<float>(c.rms_norm_eps)}));
  MP_RETURN_IF_ERROR(b.Gemm({AsConst(normed), w.gate_proj, w.gate_bias, gate}));
  MP_RETURN_IF_ERROR(b.Gemm({AsConst(normed), w.up_proj, w.up_bias, up}));
  MP_RETURN_IF_ERROR(b.SiluMul({AsConst(gate), AsConst(up), gate}));
  MP_RETURN_IF_ERROR(
      b.Gemm({AsConst(gate), w.down_proj, w.down_bias, hidden, /*accumulate=*/true}));
  return OkStatus();
}

Status Engine::ForwardToHost(std::span<const int32_t> ids, std::vector<float>* logits) {
  MP_ASSIGN_OR_RETURN(ConstTensorView dev, Forward(ids));
  logits->resize(static_cast<size_t>(config_.vocab_size));
  return backend_->CopyToHost(dev, TensorView{logits->data(), DType::kF32, dev.shape});
}

}  // namespace millipede
