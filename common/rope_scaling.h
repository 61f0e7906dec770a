// Rotary position embedding scaling settings, as Hugging Face config.json spells them.
#pragma once

#include <cstdint>

namespace millipede {

enum class RopeScalingType { kNone, kLinear, kDynamic, kLlama3 };

// `rope_scaling` of config.json. Fields not used by a type keep their defaults.
struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;                        // linear, dynamic, llama3
  double low_freq_factor = 1.0;               // llama3
  double high_freq_factor = 4.0;              // llama3
  int64_t original_max_position_embeddings = 0;  // llama3; dynamic uses max_position_embeddings
};

}  // namespace millipede
