// Prefill patterns as variants of two kernel families, one implementation per pattern
// (worker/attention/patterns/), registered in attention_registry.cc. As FlashInfer's masks are
// variants of one kernel family with plan() then run(), a pattern here says only what differs:
//  - ring patterns (dense, a-shape) are a mask of exact ring attention (ring_prefill.h): causal,
//    or the sinks and a recent window per KV head (RingHeadMask); the pairs they attend are
//    fixed by their parameters and counted in closed form (attended_pairs.h);
//  - sparse patterns (vertical-slash, block-sparse) build, at every prefill step, a CSR index
//    (kernels/sparse_index/sparse_index.h) by an index op of their own, which the sparse
//    attention op (kernels/attention/sparse_attention.h) consumes: Plan() observes the step and
//    selects (every rank at once), then the index is built per chunk of query tiles and key
//    buffer (BuildPass, through SparseIndexBuilder); the pairs they attend are the index's,
//    counted on the backend (SparseIndexPairs).
// SparsePrefill (sparse_prefill.h) runs a layer's sparse patterns and its ring heads together.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/sparse_index/sparse_index.h"
#include "policy/attention_policy.h"
#include "worker/attention/attention_strategy.h"

namespace millipede {

// The kernel family that attends a pattern's heads.
enum class PrefillKernel : uint8_t { kRing, kSparse };

// A ring pattern's mask for one KV head: window 0 attends every causal key; else the keys at
// positions < sink and those within `window` of the query (q - k < window).
struct RingHeadMask {
  int64_t window = 0;
  int64_t sink = 0;
};

class SparseIndexBuilder;

// One layer's KV heads of one sparse pattern, in one sequence (made by the pattern's variant,
// kept by the layer's SparsePrefill). At every prefill step every rank calls Plan, then (several
// ranks) Needs, then the index is built per chunk of query tiles and per key buffer. The index
// covers every KV head of the layer; the heads of other patterns have empty items.
class SparsePatternIndex {
 public:
  virtual ~SparsePatternIndex() = default;
  // Query tiles of this pattern's index may not cross a multiple of grid() in position: a
  // divisor of kSparseTileRows (the layer cuts its tiles at the gcd of its patterns').
  virtual int64_t grid() const { return kSparseTileRows; }
  // The step's observation and selection, by every rank of the sequence at once (it may exchange
  // data with the others): `mine` [rows, kv_heads, head_dim] is this rank's rows of the layer,
  // at positions `mine_ranges`.
  virtual Status Plan(AttentionEnv& env, const PrefillInput& in, ConstKvRows mine,
                      std::span<const TokenRange> mine_ranges) = 0;
  // The positions (increasing or not, may overlap) that this rank's queries, cut into `tiles`
  // (flattened query tiles of in.q_ranges, sparse_index.h), need under the plan: the keys to
  // fetch from the ranks that hold them (kv_fetch.h). `builder` may build the index over a
  // layout of positions to find them.
  virtual StatusOr<std::vector<TokenRange>> Needs(AttentionEnv& env, const PrefillInput& in,
                                                  const std::vector<int64_t>& tiles,
                                                  SparseIndexBuilder& builder) = 0;
  // One pass of the pattern's index op over query tiles `tiles` [n_tiles, 3] I64 and the key
  // layout `runs` [n_runs, 3] I64 (sparse_index.h) into `out`, positions no run holds skipped
  // (the keys lie in several buffers): the count pass (`fill` false, out without ranges and
  // columns), or the fill pass, which directly follows its count pass with the same inputs (so
  // the CUDA index ops may reuse the count pass's selection: inputs_unchanged_since_count).
  virtual Status BuildPass(AttentionEnv& env, ConstTensorView tiles, ConstTensorView runs,
                           const SparseIndexOut& out, bool fill) = 0;
};

// What the policy's patterns are to the worker: one variant per PrefillPattern.
class PrefillPatternVariant {
 public:
  virtual ~PrefillPatternVariant() = default;
  virtual PrefillPattern pattern() const = 0;
  virtual PrefillKernel kernel() const = 0;
  // kRing: the mask of a KV head with this pattern.
  virtual RingHeadMask RingMask(const HeadPrefillPolicy& head) const { return {}; }
  // kSparse: InvalidArgument or Unimplemented, naming the layer and KV head, when the heads of
  // this pattern in layer `layer` (`heads`: every KV head of it) cannot run together.
  virtual Status CheckLayer(std::span<const HeadPrefillPolicy> heads, int64_t layer) const {
    return OkStatus();
  }
  // kSparse: the index state of the layer's heads of this pattern (`heads`: every KV head of
  // the layer, which passed CheckLayer). Null for ring patterns.
  virtual std::unique_ptr<SparsePatternIndex> MakeIndex(
      std::span<const HeadPrefillPolicy> heads) const {
    return nullptr;
  }
};

// Builds a sparse pattern's index (count pass, sizes read back, fill pass) and uploads the tiles
// and key layouts it is built over, into buffers it keeps from one build to the next. One per
// engine (sparse_prefill_scratch.h), shared by the sparse patterns of every layer (they build
// one after another).
class SparseIndexBuilder {
 public:
  // Flattened triples uploaded into the builder's tiles (runs) buffer: a view [n, 3] I64.
  StatusOr<ConstTensorView> UploadTiles(Backend& b, const std::vector<int64_t>& tiles);
  StatusOr<ConstTensorView> UploadRuns(Backend& b, const std::vector<int64_t>& runs);
  // `pattern`'s index of `tiles` over the key layout `runs`, valid until the next Build.
  StatusOr<SparseIndexView> Build(AttentionEnv& env, SparsePatternIndex& pattern,
                                  ConstTensorView tiles, ConstTensorView runs);
  // Device bytes held now.
  int64_t NumBytes() const;

 private:
  BackendTensor tiles_, runs_, range_offsets_, ranges_, column_offsets_, columns_;
};

// The key positions that `pattern`'s index of `tiles` (flattened query tiles) covers: the index
// built over a layout where rows are positions ([0, in.length) from row 0) and read back. The
// Needs of patterns whose selection is made in Plan (block-sparse, antidiagonal).
StatusOr<std::vector<TokenRange>> IndexedPositions(AttentionEnv& env, const PrefillInput& in,
                                                   const std::vector<int64_t>& tiles,
                                                   SparseIndexBuilder& builder,
                                                   SparsePatternIndex& pattern);

// Query tiles (sparse_index.h) of queries at `ranges` (rows in order): runs cut at multiples of
// `grid` positions. Flattened (q_row_begin, q_row_end, pos_begin) triples.
std::vector<int64_t> SparseQueryTiles(std::span<const TokenRange> ranges, int64_t grid);

// The key layout (sparse_index.h) of rows holding `ranges` in order: flattened (pos_begin,
// pos_end, row_begin) triples.
std::vector<int64_t> SparseKeyRuns(std::span<const TokenRange> ranges);

}  // namespace millipede
