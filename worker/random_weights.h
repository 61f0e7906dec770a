// Random weights for any model shape: what `millipede-mkmodel` writes and what benchmarks load
// without a checkpoint. Deterministic: the same (config, dtype, seed) gives the same bits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/model_config.h"
#include "checkpoint/model_tensors.h"
#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

struct RandomWeightsOptions {
  DType dtype = DType::kBF16;  // F32, BF16 or F16
  uint64_t seed = 0;
  // Projection and embedding weights are uniform with this standard deviation
  // (transformers' initializer_range default). Norm gains are 1 + uniform(+-0.1), biases
  // uniform(+-std), so that every weight matters to the output.
  double std = 0.02;
  // Local attention, as trained models have it (0: none; benchmarks of sparse attention use it,
  // since plain random weights attend almost uniformly and give sparse patterns nothing to find).
  // Every token embedding gets a shared direction twice as large as its random part, and the Q
  // and K projections map that direction onto the same vector in every head, so q.k / sqrt(d)
  // gains about `locality` at distance 0, fading with distance as RoPE's rotations lose phase.
  double locality = 0;
  int64_t head_dim = 0;  // the model's head_dim: needed when locality > 0
};

// Every weight of ExpectedModelTensors(config), in that order. Element i of tensor `name` is a
// pure function of (seed, name, i), so tensors can be generated in any order or in parallel.
StatusOr<std::vector<NamedHostTensor>> GenerateRandomWeights(const ModelConfig& config,
                                                             const RandomWeightsOptions& options);

// Fills one tensor the way GenerateRandomWeights fills the tensor called `name`.
Status FillRandomWeight(const std::string& name, const RandomWeightsOptions& options,
                        TensorView out);

}  // namespace millipede
