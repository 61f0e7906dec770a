#include "policy/pattern_table.h"

namespace millipede {
namespace {

// The parameter `kField` of the parameter set `kSet` of `Owner`.
template <typename Owner, auto kSet, auto kField>
PolicyParam<Owner> Param(const char* name) {
  return {name, [](const Owner& o) { return (o.*kSet).*kField; },
          [](Owner& o) -> int64_t& { return (o.*kSet).*kField; }};
}

using H = HeadPrefillPolicy;
using P = AttentionPolicy;

const std::vector<PrefillPatternFacts>& Patterns() {
  static const auto* table = new std::vector<PrefillPatternFacts>{
      {.pattern = PrefillPattern::kDense, .name = "dense", .code = 'D'},
      {.pattern = PrefillPattern::kAShape,
       .name = "a-shape",
       .alias = "streaming",
       .code = 'A',
       .params_key = "a_shape",
       .params = {Param<H, &H::a_shape, &AShapeParams::sink_tokens>("sink_tokens"),
                  Param<H, &H::a_shape, &AShapeParams::window_tokens>("window_tokens")},
       .key_budget = [](const H& h) { return h.a_shape.sink_tokens + h.a_shape.window_tokens; }},
      {.pattern = PrefillPattern::kVerticalSlash,
       .name = "vertical-slash",
       .code = 'V',
       .dynamic_sparse = true,
       .params_key = "vertical_slash",
       .params = {Param<H, &H::vertical_slash, &VerticalSlashParams::last_queries>("last_queries"),
                  Param<H, &H::vertical_slash, &VerticalSlashParams::vertical>("vertical"),
                  Param<H, &H::vertical_slash, &VerticalSlashParams::slash>("slash")},
       .key_budget = [](const H& h) { return h.vertical_slash.vertical + h.vertical_slash.slash; }},
      {.pattern = PrefillPattern::kBlockSparse,
       .name = "block-sparse",
       .code = 'B',
       .dynamic_sparse = true,
       .params_key = "block_sparse",
       .params = {Param<H, &H::block_sparse, &BlockSparseParams::block>("block"),
                  Param<H, &H::block_sparse, &BlockSparseParams::top_blocks>("top_blocks")},
       .key_budget = [](const H& h) { return h.block_sparse.top_blocks * h.block_sparse.block; }},
      {.pattern = PrefillPattern::kAntidiagonal,
       .name = "antidiagonal",
       .alias = "xattention",
       .code = 'X',
       .dynamic_sparse = true,
       .params_key = "antidiagonal",
       .params = {Param<H, &H::antidiagonal, &AntidiagonalParams::block>("block"),
                  Param<H, &H::antidiagonal, &AntidiagonalParams::stride>("stride"),
                  Param<H, &H::antidiagonal, &AntidiagonalParams::mass_permille>("mass_permille")}},
  };
  return *table;
}

const std::vector<DecodeRoleFacts>& Roles() {
  static const auto* table = new std::vector<DecodeRoleFacts>{
      {.role = DecodeRole::kFull, .name = "full", .code = 'F'},
      {.role = DecodeRole::kFilter,
       .name = "filter",
       .code = 'L',
       .layer_wide = true,
       .params_key = "filter",
       .params = {Param<P, &P::filter, &FilterParams::top_k>("top_k")}},
      {.role = DecodeRole::kSelected, .name = "selected", .code = 'O', .layer_wide = true},
      {.role = DecodeRole::kStreamingHead,
       .name = "streaming-head",
       .code = 'S',
       .params_key = "streaming_head",
       .params = {Param<P, &P::streaming_head, &AShapeParams::sink_tokens>("sink_tokens"),
                  Param<P, &P::streaming_head, &AShapeParams::window_tokens>("window_tokens")}},
      {.role = DecodeRole::kStaticEviction,
       .name = "static-eviction",
       .alias = "h2o",
       .code = 'E',
       .layer_wide = true,
       .params_key = "static_eviction",
       .params = {Param<P, &P::static_eviction, &StaticEvictionParams::keep_tokens>("keep_tokens"),
                  Param<P, &P::static_eviction, &StaticEvictionParams::recent_tokens>(
                      "recent_tokens"),
                  Param<P, &P::static_eviction, &StaticEvictionParams::observed_queries>(
                      "observed_queries")}},
  };
  return *table;
}

}  // namespace

std::span<const PrefillPatternFacts> PrefillPatternTable() { return Patterns(); }

std::span<const DecodeRoleFacts> DecodeRoleTable() { return Roles(); }

const PrefillPatternFacts* FindPatternFacts(PrefillPattern p) {
  const size_t i = static_cast<size_t>(p);
  return i < Patterns().size() ? &Patterns()[i] : nullptr;
}

const DecodeRoleFacts* FindRoleFacts(DecodeRole r) {
  const size_t i = static_cast<size_t>(r);
  return i < Roles().size() ? &Roles()[i] : nullptr;
}

}  // namespace millipede
