#include "worker/engine/model.h"

#include <algorithm>

#include "checkpoint/gguf_model.h"
#include "common/file_util.h"
#include "kernels/layer/rope.h"

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

StatusOr<std::unique_ptr<Model>> Model::Load(const ModelSource& source, Backend& backend,
                                             bool fuse_projections) {
  auto m = std::unique_ptr<Model>(new Model(backend));
  m->fuse_projections_ = fuse_projections;
  if (IsGgufFile(source.model_path)) {
    MP_ASSIGN_OR_RETURN(GgufFile file, GgufFile::Open(source.model_path));
    MP_ASSIGN_OR_RETURN(m->config_, ModelConfigFromGguf(file));
    MP_ASSIGN_OR_RETURN(std::vector<NamedHostTensor> tensors,
                        LoadGgufWeights(file, m->config_, source.gguf_weight_dtype));
    MP_ASSIGN_OR_RETURN(m->weights_, ModelWeights::FromHost(m->config_, std::move(tensors), backend,
                                                            source.kv_scales));
  } else if (!source.model_path.empty()) {
    MP_ASSIGN_OR_RETURN(m->config_, LoadModelConfigAt(source.model_path));
    MP_ASSIGN_OR_RETURN(
        m->weights_, ModelWeights::Load(source.model_path, m->config_, backend, source.kv_scales));
  } else {
    m->config_ = source.random_config;
    MP_RETURN_IF_ERROR(ValidateModelConfig(m->config_));
    MP_ASSIGN_OR_RETURN(m->weights_, ModelWeights::Random(m->config_, source.random_weights,
                                                          backend, source.kv_scales));
  }
  m->gemm_input_dtype_ = backend.GemmInputDType(SharedGemmWeightDType(*m->weights_));
  return m;
}

int64_t Model::max_context() const {
  int64_t limit = config_.max_position_embeddings;
  // Dynamic NTK scaling exists to run past the trained length: up to `factor` times it.
  // (max_position_embeddings <= 2^34 and factor <= 1024: the product fits.)
  if (config_.rope_scaling.type == RopeScalingType::kDynamic)
    limit = static_cast<int64_t>(static_cast<double>(limit) * config_.rope_scaling.factor);
  if (config_.sliding_window > 0) limit = std::min(limit, config_.sliding_window);
  return limit;
}

StatusOr<ConstTensorView> Model::InvFreq(int64_t seq_len) {
  const ModelConfig& c = config_;
  // Dynamic NTK scaling depends on the longest position in this pass, as in transformers.
  const bool depends_on_length = c.rope_scaling.type == RopeScalingType::kDynamic;
  const int64_t key = depends_on_length ? seq_len : 0;
  auto it = inv_freq_.find(key);
  if (it != inv_freq_.end()) return it->second.cview();
  MP_ASSIGN_OR_RETURN(std::vector<float> host,
                      RopeInvFreq(c.head_dim, c.rope_theta, c.rope_scaling,
                                  c.max_position_embeddings, seq_len));
  MP_ASSIGN_OR_RETURN(BackendTensor t, backend_.Allocate(DType::kF32, Shape{c.head_dim / 2}));
  MP_RETURN_IF_ERROR(backend_.CopyFromHost(
      ConstTensorView{host.data(), DType::kF32, Shape{c.head_dim / 2}}, t.view()));
  return inv_freq_.emplace(key, std::move(t)).first->second.cview();
}

void Model::BeginStep() {
  // A handful of lengths is what one step of a few sequences needs.
  if (config_.rope_scaling.type == RopeScalingType::kDynamic && inv_freq_.size() > 16)
    inv_freq_.clear();
}

bool Model::UseFused(ConstTensorView fused, ConstTensorView part_bias,
                     ConstTensorView fused_bias) const {
  return fuse_projections_ && fused.data != nullptr &&
         (part_bias.data == nullptr || fused_bias.data != nullptr);
}

bool Model::CanFuseQkv(int64_t layer) const {
  const LayerWeights& w = weights_->layers[static_cast<size_t>(layer)];
  return UseFused(w.qkv_proj, w.q_bias, w.qkv_bias);
}

Status Model::ProjectQkv(Workspace& ws, int64_t layer, int64_t begin, int64_t end) const {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_->layers[static_cast<size_t>(layer)];
  Backend& b = backend_;
  const int64_t m = end - begin;
  TensorView normed = SliceRows(ws.normed.view(), 0, m);
  MP_RETURN_IF_ERROR(b.RmsNorm({AsConst(SliceRows(ws.hidden.view(), begin, m)), w.input_norm,
                                TensorView{}, normed, static_cast<float>(c.rms_norm_eps)}));
  MP_RETURN_IF_ERROR(b.Gemm({AsConst(normed), w.q_proj, w.q_bias,
                             SliceRows(ws.q.view(), begin, m)}));
  MP_RETURN_IF_ERROR(b.Gemm({AsConst(normed), w.k_proj, w.k_bias, SliceRows(ws.k.view(), 0, m)}));
  return b.Gemm({AsConst(normed), w.v_proj, w.v_bias, SliceRows(ws.v.view(), 0, m)});
}

Status Model::ProjectQkvFused(Workspace& ws, int64_t layer) const {
  const LayerWeights& w = weights_->layers[static_cast<size_t>(layer)];
  Backend& b = backend_;
  TensorView normed = SliceRows(ws.normed.view(), 0, 1);
  MP_RETURN_IF_ERROR(b.RmsNorm({AsConst(SliceRows(ws.hidden.view(), 0, 1)), w.input_norm,
                                TensorView{}, normed, static_cast<float>(config_.rms_norm_eps)}));
  // For one token the output row of a GEMM over q_proj | k_proj | v_proj is q | k | v.
  return b.Gemm({AsConst(normed), w.qkv_proj, w.qkv_bias, SliceRows(ws.qkv.view(), 0, 1)});
}

Status Model::OutputAndNorm(Workspace& ws, int64_t layer, int64_t begin, int64_t end,
                            ConstTensorView attention_out) const {
  const LayerWeights& w = weights_->layers[static_cast<size_t>(layer)];
  Backend& b = backend_;
  const int64_t m = end - begin;
  TensorView hidden = SliceRows(ws.hidden.view(), begin, m);
  // hidden += o_proj(attention)
  MP_RETURN_IF_ERROR(b.Gemm({SliceRows(attention_out, begin, m), w.o_proj, w.o_bias, hidden,
                             /*accumulate=*/true}));
  return b.RmsNorm({AsConst(hidden), w.post_attention_norm, TensorView{},
                    SliceRows(ws.normed.view(), 0, m), static_cast<float>(config_.rms_norm_eps)});
}

Status Model::OutputAndMlp(Workspace& ws, int64_t layer, int64_t begin, int64_t end,
                           ConstTensorView attention_out) const {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_->layers[static_cast<size_t>(layer)];
  Backend& b = backend_;
  const int64_t m = end - begin;
  TensorView hidden = SliceRows(ws.hidden.view(), begin, m);
  MP_RETURN_IF_ERROR(OutputAndNorm(ws, layer, begin, end, attention_out));
  // hidden += down(silu(gate(norm(hidden))) * up(norm(hidden)))
  const int64_t inter = c.intermediate_size;
  TensorView normed = SliceRows(ws.normed.view(), 0, m);
  TensorView gate, up;
  if (m == 1 && UseFused(w.gate_up_proj, w.gate_bias, w.gate_up_bias)) {
    // One GEMM over gate_proj | up_proj: for one token its output row is gate | up.
    MP_ASSIGN_OR_RETURN(TensorView gate_up, SubView(ws.gate_up.view(), 0, Shape{1, 2 * inter}));
    MP_RETURN_IF_ERROR(b.Gemm({AsConst(normed), w.gate_up_proj, w.gate_up_bias, gate_up}));
    MP_ASSIGN_OR_RETURN(gate, SubView(gate_up, 0, Shape{1, inter}));
    MP_ASSIGN_OR_RETURN(up, SubView(gate_up, inter, Shape{1, inter}));
  } else {
    // Separate GEMMs (over several tokens a fused output's rows would interleave gate and up).
    MP_ASSIGN_OR_RETURN(gate, SubView(ws.gate_up.view(), 0, Shape{m, inter}));
    MP_ASSIGN_OR_RETURN(up, SubView(ws.gate_up.view(), ws.scratch_rows() * inter,
                                    Shape{m, inter}));
    MP_RETURN_IF_ERROR(b.Gemm({AsConst(normed), w.gate_proj, w.gate_bias, gate}));
    MP_RETURN_IF_ERROR(b.Gemm({AsConst(normed), w.up_proj, w.up_bias, up}));
  }
  const TensorView activated =
      gemm_input_dtype_ == DType::kF32 ? gate : SliceRows(ws.silu_out.view(), 0, m);
  MP_RETURN_IF_ERROR(b.SiluMul({AsConst(gate), AsConst(up), activated}));
  return b.Gemm({AsConst(activated), w.down_proj, w.down_bias, hidden, /*accumulate=*/true});
}

MlpSlice Model::MlpSliceOf(int rank, int ranks) const {
  // Boundaries on multiples of 8 columns keep 16-bit weight rows 16-byte aligned.
  const int64_t inter = config_.intermediate_size;
  auto boundary = [&](int r) {
    const int64_t even = inter * r / ranks;
    return r == ranks ? inter : std::min(inter, (even + 7) / 8 * 8);
  };
  return MlpSlice{boundary(rank), boundary(rank + 1), rank == 0};
}

Status Model::OutputAndMlpSlice(Workspace& ws, int64_t layer, int64_t begin, int64_t end,
                                ConstTensorView attention_out, const MlpSlice& slice,
                                TensorView partial) const {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_->layers[static_cast<size_t>(layer)];
  Backend& b = backend_;
  const int64_t m = end - begin, inter = c.intermediate_size;
  const int64_t width = slice.end - slice.begin;
  MP_REQUIRE(0 <= slice.begin && slice.begin <= slice.end && slice.end <= inter,
             "MLP slice [", slice.begin, ", ", slice.end, ") of ", inter, " columns");
  MP_RETURN_IF_ERROR(CheckTensor(partial, "MLP partial", DType::kF32, Shape{m, c.hidden_size}));
  MP_RETURN_IF_ERROR(OutputAndNorm(ws, layer, begin, end, attention_out));
  const ConstTensorView normed = SliceRows(ws.normed.cview(), 0, m);
  auto bias = [&](ConstTensorView full) {
    return full.data == nullptr ? full : SliceRows(full, slice.begin, width);
  };
  MP_ASSIGN_OR_RETURN(TensorView gate, SubView(ws.gate_up.view(), 0, Shape{m, width}));
  MP_ASSIGN_OR_RETURN(TensorView up, SubView(ws.gate_up.view(), ws.scratch_rows() * inter,
                                             Shape{m, width}));
  MP_RETURN_IF_ERROR(b.Gemm({normed, SliceRows(w.gate_proj, slice.begin, width),
                             bias(w.gate_bias), gate}));
  MP_RETURN_IF_ERROR(
      b.Gemm({normed, SliceRows(w.up_proj, slice.begin, width), bias(w.up_bias), up}));
  TensorView activated = gate;
  if (gemm_input_dtype_ != DType::kF32) {
    MP_ASSIGN_OR_RETURN(activated, SubView(ws.silu_out.view(), 0, Shape{m, width}));
  }
  MP_RETURN_IF_ERROR(b.SiluMul({AsConst(gate), AsConst(up), activated}));
  // down_proj [hidden, inter] restricted to the slice's columns: rows `inter` elements apart.
  const ConstTensorView& down = w.down_proj;
  const ConstTensorView columns{
      static_cast<const char*>(down.data) + slice.begin * DTypeSize(down.dtype), down.dtype,
      Shape{c.hidden_size, width}};
  return b.Gemm({AsConst(activated), columns,
                 slice.with_down_bias ? w.down_bias : ConstTensorView{}, partial,
                 /*accumulate=*/false, /*b_row_stride=*/inter});
}

Status Model::Logits(Workspace& ws, int64_t row, int64_t logit_row, int64_t count) const {
  Backend& b = backend_;
  const int64_t chunk = std::max<int64_t>(ws.scratch_rows(), 1);
  for (int64_t done = 0; done < count; done += chunk) {
    const int64_t n = std::min(chunk, count - done);
    TensorView normed = SliceRows(ws.normed.view(), 0, n);
    MP_RETURN_IF_ERROR(b.RmsNorm({AsConst(SliceRows(ws.hidden.view(), row + done, n)),
                                  weights_->final_norm, TensorView{}, normed,
                                  static_cast<float>(config_.rms_norm_eps)}));
    MP_RETURN_IF_ERROR(b.Gemm({AsConst(normed), weights_->lm_head, ConstTensorView{},
                               SliceRows(ws.logits.view(), logit_row + done, n)}));
  }
  return OkStatus();
}

}  // namespace millipede
