#include "policy/xattention_import.h"

#include <cmath>
#include <string>

namespace millipede {

StatusOr<PolicyImport> ImportXAttention(const ModelConfig& model,
                                        const XAttentionImportOptions& options) {
  const int64_t layers = model.num_hidden_layers, kv_heads = model.num_key_value_heads;
  MP_REQUIRE(std::isfinite(options.threshold) && options.threshold > 0 && options.threshold <= 1,
             "xattention: threshold ", options.threshold, " must lie in (0, 1]");
  MP_REQUIRE(options.block > 0 && (options.block % 64 == 0 || 64 % options.block == 0),
             "xattention: block_size ", options.block, " must divide or be a multiple of 64");
  const int64_t rows = options.stride > 0 ? options.block / options.stride : 0;
  MP_REQUIRE(options.stride > 0 && options.block % options.stride == 0 && rows <= 16 &&
                 (rows & (rows - 1)) == 0,
             "xattention: stride ", options.stride, " must divide block_size ", options.block,
             " into a power of two of at most 16 rows");
  MP_REQUIRE(options.starting_layer >= 0 && options.starting_layer <= layers,
             "xattention: starting layer ", options.starting_layer, " outside the model's [0, ",
             layers, "]");
  MP_REQUIRE(options.dense_below_tokens >= 0, "xattention: --dense-below ",
             options.dense_below_tokens, " is negative");
  PolicyImport out;
  const int64_t permille = std::llround(options.threshold * 1000);
  MP_REQUIRE(permille >= 1, "xattention: threshold ", options.threshold,
             " rounds to 0 per mille (at least 0.0005)");
  if (std::fabs(options.threshold * 1000 - static_cast<double>(permille)) > 1e-9)
    out.notes.push_back("threshold " + std::to_string(options.threshold) + " rounded to " +
                        std::to_string(permille) + " per mille");
  out.policy = DensePolicy(layers, kv_heads);
  out.policy.dense_below_tokens = options.dense_below_tokens;
  HeadPrefillPolicy head;
  head.pattern = PrefillPattern::kAntidiagonal;
  head.antidiagonal = {options.block, options.stride, permille};
  for (int64_t l = options.starting_layer; l < layers; ++l)
    out.policy.layers[static_cast<size_t>(l)].prefill.assign(static_cast<size_t>(kv_heads), head);
  MP_RETURN_IF_ERROR(ValidateAttentionPolicy(out.policy, layers, kv_heads));
  return out;
}

}  // namespace millipede
