// Attention policies: which attention each layer and KV head uses. A policy file (JSON) gives
// every layer a prefill pattern per KV head and a decode role; the engine runs each head by its
// pattern. Parsing and validation live here; which names a build can run is the engine's
// business (it refuses the others with a clear error before a job starts).
//
// File format (every field but "version" optional):
//   {
//     "version": 1,
//     "default": {"prefill": "dense", "decode": "full"},
//     "dense_below_tokens": 8192,     // prompts shorter than this use dense for every head
//     "a_shape": {"sink_tokens": 128, "window_tokens": 4096},
//     "vertical_slash": {"last_queries": 64, "vertical": 1000, "slash": 6096},
//     "block_sparse": {"block": 64, "top_blocks": 100},
//     "filter": {"top_k": 4096},
//     "streaming_head": {"sink_tokens": 128, "window_tokens": 1024},
//     "static_eviction": {"keep_tokens": 4096, "recent_tokens": 256, "observed_queries": 32},
//     "layers": [
//       {"layer": 0, "prefill": "dense", "decode": "full"},
//       {"layer": 5, "prefill": ["dense", "a-shape", ...one per KV head], "decode": "filter"}
//     ]
//   }
// Layers not listed take "default". Pattern names: dense, a-shape (alias streaming),
// vertical-slash, block-sparse. Decode roles: full, filter, selected, streaming-head, and the
// static-eviction baseline (H2O-style: after prefill each KV head keeps the keep_tokens keys the
// last observed_queries prompt queries attended to most; decode sees those plus the
// recent_tokens most recent positions).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace millipede {

enum class PrefillPattern { kDense, kAShape, kVerticalSlash, kBlockSparse };
enum class DecodeRole { kFull, kFilter, kSelected, kStreamingHead, kStaticEviction };

const char* PrefillPatternName(PrefillPattern p);  // "dense", "a-shape", ...
const char* DecodeRoleName(DecodeRole r);          // "full", "filter", ...
StatusOr<PrefillPattern> ParsePrefillPattern(std::string_view name);
StatusOr<DecodeRole> ParseDecodeRole(std::string_view name);

struct AShapeParams {
  int64_t sink_tokens = 128;
  int64_t window_tokens = 4096;
};
struct VerticalSlashParams {
  int64_t last_queries = 64;  // queries whose scores pick the columns and diagonals
  int64_t vertical = 1000;    // columns kept
  int64_t slash = 6096;       // diagonals kept
};
struct BlockSparseParams {
  int64_t block = 64;
  int64_t top_blocks = 100;   // key blocks kept per query block
};
struct FilterParams {
  int64_t top_k = 4096;       // tokens the filter layer selects for the following layers
};

struct StaticEvictionParams {
  int64_t keep_tokens = 4096;      // heavy hitters kept per KV head (over all ranks)
  int64_t recent_tokens = 256;     // the most recent positions, always visible
  int64_t observed_queries = 32;   // last prompt queries whose attention ranks the keys
};

struct LayerPolicy {
  std::vector<PrefillPattern> prefill;  // [num_kv_heads]
  DecodeRole decode = DecodeRole::kFull;
};

struct AttentionPolicy {
  std::vector<LayerPolicy> layers;  // [num_layers]
  int64_t dense_below_tokens = 0;
  AShapeParams a_shape;
  VerticalSlashParams vertical_slash;
  BlockSparseParams block_sparse;
  FilterParams filter;
  AShapeParams streaming_head{128, 1024};
  StaticEvictionParams static_eviction;

  // True when every head is dense in prefill and every layer full in decode.
  bool IsDense() const;
  // "dense/full", or counts: "prefill dense 200, a-shape 56; decode full 30, filter 2".
  std::string Summary() const;
};

// Every layer dense and full.
AttentionPolicy DensePolicy(int64_t num_layers, int64_t num_kv_heads);

// Parses and validates a policy for a model of `num_layers` x `num_kv_heads` (unknown fields,
// names, out-of-range layers, a layer listed twice, a per-head list of the wrong length and
// non-positive parameters are InvalidArgument errors naming the place). `what` names the source.
StatusOr<AttentionPolicy> ParseAttentionPolicy(std::string_view json, int64_t num_layers,
                                               int64_t num_kv_heads,
                                               const std::string& what = "attention policy");
StatusOr<AttentionPolicy> LoadAttentionPolicy(const std::string& path, int64_t num_layers,
                                              int64_t num_kv_heads);

// What the engine can run today: dense prefill and full decode on every backend; a-shape
// prefill heads and streaming-head / static-eviction decode layers on the CPU backend only.
// Unimplemented naming the first pattern or role that cannot run (with its layer and head).
// The engine (SetPolicy) and the service's admission both ask this one function.
Status CheckPolicyRunnable(const AttentionPolicy& policy, bool cpu_backend);

}  // namespace millipede
