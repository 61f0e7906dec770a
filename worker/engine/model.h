// The model: its config, its weights on a backend and the stateless pieces of a decoder layer
// (projections, output projection + MLP, logits) run over rows of the engine's workspace. It
// holds no sequence state: any number of sequences run through one Model.
#pragma once

#include <cstdint>
#include <map>
#include <memory>

#include "checkpoint/model_config.h"
#include "worker/backend/backend.h"
#include "worker/engine/workspace.h"
#include "worker/model_weights.h"
#include "worker/random_weights.h"

namespace millipede {

// The intermediate columns [begin, end) of the MLP one rank computes when ranks split a decode
// token's MLP (Model::OutputAndMlpSlice); the down projection's bias belongs to one slice.
struct MlpSlice {
  int64_t begin = 0, end = 0;
  bool with_down_bias = false;
};

struct ModelSource {
  // A Hugging Face directory or a GGUF file; empty: random weights for `random_config`.
  std::string model_path;
  // The dtype a GGUF file's weights are dequantised into (a directory's keep their own).
  DType gguf_weight_dtype = DType::kBF16;
  ModelConfig random_config;
  RandomWeightsOptions random_weights;
  // Per-layer FP8 KV cache scales folded into the attention weights (kv_scales.h); empty: none.
  KvScales kv_scales;
};

class Model {
 public:
  // `fuse_projections`: for one token, one GEMM over q|k|v and one over gate|up where the
  // weights lie back to back (see ModelWeights).
  static StatusOr<std::unique_ptr<Model>> Load(const ModelSource& source, Backend& backend,
                                               bool fuse_projections);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return *weights_; }
  // The dtype RMSNorm and SiLU-mul write GEMM inputs in.
  DType gemm_input_dtype() const { return gemm_input_dtype_; }
  // Tokens the model may see at once (config max_position_embeddings, times the factor for
  // dynamic NTK scaling, further limited by a sliding window, which is not implemented).
  int64_t max_context() const;
  // RoPE frequencies [head_dim / 2] F32 for a pass whose longest position is seq_len - 1,
  // uploaded only when they change (dynamic NTK scaling depends on seq_len, so each length of
  // a step gets its own; views stay valid until the next BeginStep).
  StatusOr<ConstTensorView> InvFreq(int64_t seq_len);
  // Drops cached frequencies of earlier steps' lengths (dynamic NTK scaling only).
  void BeginStep();

  // RMSNorm and Q/K/V projections of step rows [begin, end): queries into ws.q rows
  // [begin, end), keys and values into ws.k / ws.v rows [0, end - begin) (before RoPE).
  Status ProjectQkv(Workspace& ws, int64_t layer, int64_t begin, int64_t end) const;
  // The same for a step of one token with one GEMM over the fused weights, into ws.qkv (q | k | v);
  // false when the fused weights are not usable (then call ProjectQkv).
  bool CanFuseQkv(int64_t layer) const;
  Status ProjectQkvFused(Workspace& ws, int64_t layer) const;
  // Output projection of `attention_out` rows [begin, end) into the residual stream, then the
  // MLP, for step rows [begin, end).
  Status OutputAndMlp(Workspace& ws, int64_t layer, int64_t begin, int64_t end,
                      ConstTensorView attention_out) const;
  // Slice `rank` of `ranks` of the intermediate columns: consecutive, covering them all, the
  // down bias with slice 0.
  MlpSlice MlpSliceOf(int rank, int ranks) const;
  // OutputAndMlp for rows every rank holds (decode tokens under context parallelism), with the
  // MLP split by intermediate columns: the output projection and norm into hidden rows
  // [begin, end) as OutputAndMlp, then `partial` [end - begin, hidden] F32 =
  // down[:, slice](silu(gate[slice](x)) * up[slice](x)) (+ down's bias for the slice that has
  // it), x the normed rows. hidden += the sum of every slice's partial is OutputAndMlp's MLP
  // (up to fp32 summation order). The slice's gate and up rows are contiguous in the weights; its
  // down columns are read with the weight's row stride.
  Status OutputAndMlpSlice(Workspace& ws, int64_t layer, int64_t begin, int64_t end,
                           ConstTensorView attention_out, const MlpSlice& slice,
                           TensorView partial) const;
  // Final norm and LM head of step rows [row, row + count) into ws.logits rows
  // [logit_row, logit_row + count): one GEMM per scratch chunk, so a batch of decode tokens
  // reads the LM head once.
  Status Logits(Workspace& ws, int64_t row, int64_t logit_row, int64_t count = 1) const;

 private:
  Model(Backend& backend) : backend_(backend) {}
  // hidden rows [begin, end) += o_proj(attention_out rows); ws.normed rows [0, end - begin) =
  // their post-attention norm.
  Status OutputAndNorm(Workspace& ws, int64_t layer, int64_t begin, int64_t end,
                       ConstTensorView attention_out) const;
  bool UseFused(ConstTensorView fused, ConstTensorView part_bias,
                ConstTensorView fused_bias) const;

  Backend& backend_;
  ModelConfig config_;
  std::unique_ptr<ModelWeights> weights_;
  DType gemm_input_dtype_ = DType::kF32;
  bool fuse_projections_ = true;
  // By the seq_len they were computed for (one entry, key 0, without dynamic scaling).
  std::map<int64_t, BackendTensor> inv_freq_;
};

}  // namespace millipede
