#include "worker/attention/attention_registry.h"

#include "worker/attention/decode/full_decode.h"
#include "worker/attention/decode/omnikv_decode.h"
#include "worker/attention/decode/static_eviction.h"
#include "worker/attention/patterns/a_shape_pattern.h"
#include "worker/attention/patterns/antidiagonal_pattern.h"
#include "worker/attention/patterns/block_sparse_pattern.h"
#include "worker/attention/patterns/dense_pattern.h"
#include "worker/attention/patterns/vertical_slash_pattern.h"

namespace millipede {

std::span<const PrefillPatternVariant* const> RegisteredPrefillPatterns() {
  static const PrefillPatternVariant* const patterns[] = {
      &DensePattern(),
      &AShapePattern(),
      &VerticalSlashPattern(),
      &BlockSparsePattern(),
      &AntidiagonalPattern(),
  };
  return patterns;
}

std::span<const DecodeRoleRegistration> RegisteredDecodeRoles() {
  static const DecodeRoleRegistration roles[] = {
      {DecodeRole::kFull, &BuildFullDecode},
      {DecodeRole::kFilter, &BuildFilterDecode},
      {DecodeRole::kSelected, &BuildSelectedDecode},
      {DecodeRole::kStreamingHead, &BuildStreamingHeadDecode, &StreamingHeadLayerRetention},
      {DecodeRole::kStaticEviction, &BuildStaticEvictionDecode},
  };
  return roles;
}

const PrefillPatternVariant* FindPrefillPattern(PrefillPattern pattern) {
  for (const PrefillPatternVariant* v : RegisteredPrefillPatterns())
    if (v->pattern() == pattern) return v;
  return nullptr;
}

const DecodeRoleRegistration* FindDecodeRole(DecodeRole role) {
  for (const DecodeRoleRegistration& r : RegisteredDecodeRoles())
    if (r.role == role) return &r;
  return nullptr;
}

PolicyCapabilities RegisteredCapabilities() {
  PolicyCapabilities c;
  for (const PrefillPatternVariant* v : RegisteredPrefillPatterns())
    c.prefill.push_back(v->pattern());
  for (const DecodeRoleRegistration& r : RegisteredDecodeRoles()) c.decode.push_back(r.role);
  // StreamingHeadsDecode (one store) and HeadGroupDecode (a store per group) run the layers that
  // mix these two roles.
  c.mixed_decode_layers = FindDecodeRole(DecodeRole::kFull) != nullptr &&
                          FindDecodeRole(DecodeRole::kStreamingHead) != nullptr;
  return c;
}

}  // namespace millipede
