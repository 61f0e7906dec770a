// Named model shapes for `millipede-mkmodel --preset` and benchmarks.
#pragma once

#include <string>
#include <vector>

#include "checkpoint/model_config.h"
#include "common/status.h"

namespace millipede {

// "tiny": a 2-layer llama (hidden 64, 4 query heads, 2 KV heads, head_dim 16) for tests and the
// quick start; vocab_size is set from the tokenizer it is written with.
// "llama3-8b": Llama-3-8B's shape (32 layers, hidden 4096, 32/8 heads, head_dim 128, MLP 14336,
// vocab 128256, rope_theta 500000 with llama3 scaling) with a 4M-token position limit
// (so that 1M- and 2M-token prompts plus their answers fit).
// "retrieval": the shape of the constructed retrieval model (models/retrieval_model.h): 3 layers,
// hidden 512, 8 query heads over 2 KV heads of head_dim 64, rope_theta 1e18, 1M positions; its
// weights only make sense as BuildRetrievalWeights sets them.
StatusOr<ModelConfig> ModelPreset(const std::string& name);
std::vector<std::string> ModelPresetNames();

}  // namespace millipede
