// Prefill of a layer with sparse heads (vertical-slash, block-sparse: the variants whose kernel
// is PrefillKernel::kSparse, prefill_pattern_variant.h) under context parallelism. Every rank
// computes its own queries' sparse attention over an index that is the same as a one-process
// run's: each of the layer's sparse patterns plans the step (its observation and selection, the
// same on every rank), then each rank fetches only the keys its queries need from the ranks that
// hold them (kv_fetch.h) and, per chunk of query tiles, builds each pattern's index over its own
// rows and over the fetched ones and runs the sparse attention op on it, merging every partial
// by log-sum-exp. Prompts shorter than dense_below_tokens run dense (ring).
//
// The layer's ring heads (dense and A-shape) keep exact ring attention: their queries and keys
// are packed apart (ring_prefill.h's RunOn) and only their K/V travels the ring; their result is
// merged into the sparse heads' output (the sparse indices leave them empty).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "worker/attention/kv_fetch.h"
#include "worker/attention/prefill_pattern_variant.h"
#include "worker/attention/ring_prefill.h"

namespace millipede {

class SparsePrefill final : public PrefillStrategy {
 public:
  // `ring_heads`: the layer's KV heads attended by ring attention, with `ring_windows` one
  // window per ring head (0: dense); `patterns`: the index state of each sparse pattern the
  // layer has, in registry order (the order their partials merge in); `dense_below`: shorter
  // prompts run dense.
  SparsePrefill(std::vector<int64_t> ring_heads, HeadWindows ring_windows,
                std::vector<std::unique_ptr<SparsePatternIndex>> patterns, int64_t dense_below,
                bool fp8 = false);
  const char* name() const override { return "sparse"; }
  Status Run(AttentionEnv& env, const PrefillInput& in) override;

 private:
  struct Buffer {
    ConstKvRows rows;
    std::vector<int64_t> runs;
  };
  // Fetches the keys of other ranks that this rank's `tiles` need under every pattern's plan.
  Status FetchNeeded(AttentionEnv& env, const PrefillInput& in, const std::vector<int64_t>& tiles,
                     ConstKvRows mine, std::span<const TokenRange> mine_ranges);
  // The dense and A-shape heads by ring attention, merged into the output.
  Status RunRingHeads(AttentionEnv& env, const PrefillInput& in, ConstKvRows mine);
  // Attends the tiles' queries (rows q_row0...) over one buffer, one index per pattern, and
  // merges into the output.
  Status AttendChunk(AttentionEnv& env, const PrefillInput& in, int64_t q_row0, int64_t rows,
                     const std::vector<int64_t>& tiles, const Buffer& buffer);

  int64_t dense_below_ = 0;
  RingPrefill dense_;
  std::vector<int64_t> ring_heads_;    // KV heads that are dense or A-shape
  std::unique_ptr<RingPrefill> ring_;  // over those heads, packed
  std::vector<std::unique_ptr<SparsePatternIndex>> patterns_;
  int64_t grid_ = kSparseTileRows;  // query tiles are cut at multiples of it
  // Its buffers (packed ring heads, fetched rows, the index, partials) are the engine's
  // SparsePrefillScratch (env.sparse), shared by every layer.
};

}  // namespace millipede
