#include "worker/attention/decode/full_decode.h"

namespace millipede {

Status FullDecode::Partial(AttentionEnv& env, const DecodeInput& in, TensorView o,
                           TensorView lse) {
  // Every key precedes (or is) the token, so no mask is needed; a rank without keys contributes
  // the empty state (the attention op writes o = 0, lse = -inf for it).
  MP_ASSIGN_OR_RETURN(const ConstKvRows rows, in.store->Rows(in.step_rows));
  AttentionArgs a;
  a.q = in.q;
  a.k = rows.k;
  a.v = rows.v;
  a.q_offset = in.position;
  a.mask = AttentionMask::kNone;
  a.o = o;
  a.lse = lse;
  return env.backend.Attention(a);
}

Status FullDecode::BatchParts(AttentionEnv& env, const DecodeInput& in,
                              std::vector<DecodePart>* parts) {
  return AppendEveryRow(in, parts);
}

StatusOr<DecodeRoleStrategy> BuildFullDecode(const DecodeRoleContext& context) {
  return DecodeRoleStrategy{std::make_unique<FullDecode>(), nullptr};
}

StatusOr<DecodeRoleStrategy> BuildStreamingHeadDecode(const DecodeRoleContext& context) {
  return DecodeRoleStrategy{std::make_unique<FullDecode>("streaming-head"), nullptr};
}

KvRetention StreamingHeadLayerRetention(const AttentionPolicy& policy) {
  return {policy.streaming_head.sink_tokens, policy.streaming_head.window_tokens};
}

}  // namespace millipede
