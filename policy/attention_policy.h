// Attention policies: which attention each layer and KV head uses. A policy file (JSON) gives
// every KV head of every layer a prefill pattern with its parameters and a decode role; the
// engine runs each head by them. Parsing and validation live here. What a build can run is the
// worker's to say (PolicyCapabilities, reported by the worker itself); CheckPolicyRunnable
// compares a policy with it.
//
// File format (every field but "version" optional):
//   {
//     "version": 1,
//     "dense_below_tokens": 8192,     // prompts shorter than this use dense for every head
//     "fp8_attention": true,          // dense heads' prefill attention on E4M3 operands (opt-in)
//     // Pattern parameters every head starts from:
//     "a_shape": {"sink_tokens": 128, "window_tokens": 4096},
//     "vertical_slash": {"last_queries": 64, "vertical": 1000, "slash": 6096},
//     "block_sparse": {"block": 64, "top_blocks": 100},
//     "antidiagonal": {"block": 128, "stride": 8, "mass_permille": 900},
//     // Decode role parameters, model-wide:
//     "filter": {"top_k": 4096},
//     "streaming_head": {"sink_tokens": 128, "window_tokens": 1024},
//     "static_eviction": {"keep_tokens": 4096, "recent_tokens": 256, "observed_queries": 32},
//     // Layers not listed take "default": a layer entry without "layer".
//     "default": {"prefill": "dense", "decode": "full"},
//     "layers": [
//       {"layer": 0, "prefill": "dense", "decode": "full"},
//       {"layer": 5, "prefill": ["dense", "vertical-slash", "a-shape", "a-shape"],
//        "vertical_slash": [null, {"vertical": 500, "slash": 3000}, null, null],
//        "a_shape": {"window_tokens": 1024},
//        "decode": ["full", "streaming-head", "streaming-head", "full"]}
//     ]
//   }
// In a layer entry (and "default"):
//  - "prefill": a pattern for every KV head, or a list with one per KV head;
//  - "decode": a role for every KV head, or a list with one per KV head;
//  - "a_shape", "vertical_slash", "block_sparse", "antidiagonal": one object for every KV head
//    of the layer, or a list with one per KV head where null keeps the head's parameters as they
//    were. An object names only the fields it changes. In a list, an object for a head whose
//    pattern does not use it is an error (it would be ignored).
// Parameters are inherited top-level -> "default" -> the layer entry; a listed layer starts from
// "default" and changes what its entry names.
// Pattern names: dense, a-shape (alias streaming), vertical-slash, block-sparse, antidiagonal
// (alias xattention: XAttention's adaptive block-sparse selection). Decode roles:
// full, filter, selected (OmniKV), streaming-head (DuoAttention: sinks + a recent window), and
// the static-eviction baseline (alias h2o; H2O-style: after prefill each KV head keeps the
// keep_tokens keys the last observed_queries prompt queries attended to most; decode sees those
// plus the recent_tokens most recent positions).
// Rules (InvalidArgument naming the layer and KV head): per-head lists have one entry per KV
// head; filter, selected and static-eviction are layer-wide (every head of the layer has the
// role), while full and streaming-head may mix within a layer; the a-shape heads of one layer
// share sink_tokens (one attention call takes one sink count; windows may differ); a selected
// layer has a filter layer before it (whose choice it reads); every parameter is positive.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace millipede {

enum class PrefillPattern : uint8_t {
  kDense,
  kAShape,
  kVerticalSlash,
  kBlockSparse,
  kAntidiagonal
};
enum class DecodeRole : uint8_t { kFull, kFilter, kSelected, kStreamingHead, kStaticEviction };
// How many of each there are (the enumerators run 0..count-1).
inline constexpr int kNumPrefillPatterns = 5;
inline constexpr int kNumDecodeRoles = 5;

const char* PrefillPatternName(PrefillPattern p);  // "dense", "a-shape", ...
// Vertical-slash, block-sparse and antidiagonal: patterns whose index is built from the prompt at
// run time (policy/pattern_table.h says which).
bool IsDynamicSparse(PrefillPattern p);
const char* DecodeRoleName(DecodeRole r);          // "full", "filter", ...
StatusOr<PrefillPattern> ParsePrefillPattern(std::string_view name);
StatusOr<DecodeRole> ParseDecodeRole(std::string_view name);

struct AShapeParams {
  int64_t sink_tokens = 128;
  int64_t window_tokens = 4096;
  bool operator==(const AShapeParams&) const = default;
};
struct VerticalSlashParams {
  int64_t last_queries = 64;  // queries whose scores pick the columns and diagonals
  int64_t vertical = 1000;    // columns kept
  int64_t slash = 6096;       // diagonals kept
  bool operator==(const VerticalSlashParams&) const = default;
};
struct BlockSparseParams {
  int64_t block = 64;
  int64_t top_blocks = 100;   // key blocks kept per query block
  bool operator==(const BlockSparseParams&) const = default;
};
// XAttention's adaptive block-sparse selection (kernels/sparse_index/antidiagonal_select.h):
// every query block scores the key blocks by strided anti-diagonal sums and keeps the fewest
// that hold mass_permille / 1000 of its attention mass (with the first and diagonal blocks).
struct AntidiagonalParams {
  int64_t block = 128;          // positions per block: 64 or 128
  int64_t stride = 8;           // anti-diagonal stride: block / stride is 1, 2, 4, 8 or 16
  int64_t mass_permille = 900;  // the mass threshold in thousandths, 1..1000 (1000: every block)
  bool operator==(const AntidiagonalParams&) const = default;
};
struct FilterParams {
  int64_t top_k = 4096;       // tokens the filter layer selects for the following layers
  bool operator==(const FilterParams&) const = default;
};
struct StaticEvictionParams {
  int64_t keep_tokens = 4096;      // heavy hitters kept per KV head (over all ranks)
  int64_t recent_tokens = 256;     // the most recent positions, always visible
  int64_t observed_queries = 32;   // last prompt queries whose attention ranks the keys
  bool operator==(const StaticEvictionParams&) const = default;
};

// One KV head's prefill. Every head carries every parameter set; only its pattern's is used.
struct HeadPrefillPolicy {
  PrefillPattern pattern = PrefillPattern::kDense;
  AShapeParams a_shape;                // used when pattern == kAShape
  VerticalSlashParams vertical_slash;  // kVerticalSlash
  BlockSparseParams block_sparse;      // kBlockSparse
  AntidiagonalParams antidiagonal;     // kAntidiagonal
  bool operator==(const HeadPrefillPolicy&) const = default;
};

struct LayerPolicy {
  std::vector<HeadPrefillPolicy> prefill;  // [num_kv_heads]
  std::vector<DecodeRole> decode;          // [num_kv_heads]

  // True when the layer's KV heads differ in decode role (validation allows that only between
  // full and streaming-head): such a layer runs one decode strategy per group of heads with the
  // same role, read from decode[h].
  bool MixedDecode() const;
  // The role every KV head of the layer has. Meaningful only when !MixedDecode(); for a mixed
  // layer it answers kFull (its full heads keep every key), never a role some head lacks the
  // data for. Filter, selected and static-eviction are always layer-wide, so asking whether a
  // layer has one of them is always answered right.
  DecodeRole LayerDecode() const;
  bool operator==(const LayerPolicy&) const = default;
};

struct AttentionPolicy {
  std::vector<LayerPolicy> layers;  // [num_layers]
  int64_t dense_below_tokens = 0;
  FilterParams filter;                     // layer-wide (OmniKV)
  AShapeParams streaming_head{128, 1024};  // DuoAttention streaming heads' sink + recent
  StaticEvictionParams static_eviction;
  // FP8 attention in prefill (kernels/attention/attention_fp8.h), opt-in: the attention calls of
  // dense heads (a dense layer's, and those beside sparse patterns or in DuoAttention's full
  // group) run on E4M3 operands. A-shape heads, dense heads sharing a layer's attention call
  // with them (one call takes every ring head; the FP8 kernel takes no windows), sparse patterns
  // and decode stay exact.
  bool fp8_attention = false;

  // True when every head is dense in prefill and full in decode.
  bool IsDense() const;
  // "dense/full", or KV heads counted over all layers:
  // "prefill a-shape 56, dense 200; decode filter 8, full 248".
  std::string Summary() const;
  bool operator==(const AttentionPolicy&) const = default;
};

// The decode strategy the jobs of `policy` run, for reports that group jobs by it: "omnikv" (a
// filter or selected layer), "static-eviction", "duoattention" (streaming heads) or "full". A
// policy that mixes them is named by the first of that order it has.
const char* DecodeStrategyName(const AttentionPolicy& policy);
// Every name DecodeStrategyName gives, in that order.
inline constexpr const char* kDecodeStrategies[] = {"omnikv", "static-eviction", "duoattention",
                                                    "full"};

// Every head dense and full.
AttentionPolicy DensePolicy(int64_t num_layers, int64_t num_kv_heads);

// Checks a policy however it was made (parsed, decoded from a message, built in code) for a
// model of `num_layers` x `num_kv_heads`: the shape, the rules in the file format above,
// dense_below_tokens >= 0. InvalidArgument naming `what`, the layer and the KV head.
Status ValidateAttentionPolicy(const AttentionPolicy& policy, int64_t num_layers,
                               int64_t num_kv_heads, const std::string& what = "attention policy");

// Parses and validates a policy for a model of `num_layers` x `num_kv_heads` (unknown fields,
// names, out-of-range layers, a layer listed twice, a per-head list of the wrong length and
// everything ValidateAttentionPolicy checks are InvalidArgument errors naming the place).
// `what` names the source.
StatusOr<AttentionPolicy> ParseAttentionPolicy(std::string_view json, int64_t num_layers,
                                               int64_t num_kv_heads,
                                               const std::string& what = "attention policy");
StatusOr<AttentionPolicy> LoadAttentionPolicy(const std::string& path, int64_t num_layers,
                                              int64_t num_kv_heads);

// What a worker can run: reported by the worker itself when it joins (hello), never inferred
// from a backend name.
struct PolicyCapabilities {
  std::vector<PrefillPattern> prefill;  // patterns it runs
  std::vector<DecodeRole> decode;       // roles it runs
  // Whether it runs layers whose KV heads have different decode roles (full and streaming-head
  // heads in one layer, as DuoAttention assigns them).
  bool mixed_decode_layers = false;
  // Whether it runs FP8 attention in prefill (AttentionPolicy::fp8_attention) for the model it
  // serves: every CPU worker; a GPU worker on Hopper with head_dim 64 or 128.
  bool fp8_attention = false;

  bool Runs(PrefillPattern p) const;
  bool Runs(DecodeRole r) const;
  bool operator==(const PolicyCapabilities&) const = default;
};

// What both `a` and `b` run (a job runs on every worker, so the service can run what all can).
PolicyCapabilities IntersectCapabilities(const PolicyCapabilities& a, const PolicyCapabilities& b);

// Unimplemented naming the first pattern/role (layer, head) that `capabilities` lacks, and what
// it has; or FP8 attention, when the policy asks for it and the workers lack it.
Status CheckPolicyRunnable(const AttentionPolicy& policy, const PolicyCapabilities& capabilities);

}  // namespace millipede
