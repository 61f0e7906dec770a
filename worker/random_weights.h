// Random weights for any model shape: what `millipede-mkmodel` writes and what benchmarks load
// without a checkpoint. Deterministic: the same (config, dtype, seed) gives the same bits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/checkpoint/model_config.h"
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
};

struct NamedHostTensor {
  std::string name;
  HostTensor tensor;
};

// Every weight of ExpectedModelTensors(config), in that order. Element i of tensor `name` is a
// pure function of (seed, name, i), so tensors can be generated in any order or in parallel.
StatusOr<std::vector<NamedHostTensor>> GenerateRandomWeights(const ModelConfig& config,
                                                             const RandomWeightsOptions& options);

// Fills one tensor the way GenerateRandomWeights fills the tensor called `name`.
Status FillRandomWeight(const std::string& name, const RandomWeightsOptions& options,
                        TensorView out);

}  // namespace millipede
