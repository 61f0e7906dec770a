#include "tests/worker/engine/single_sequence.h"

#include <utility>

namespace millipede::testing {

Status StartSequence(Engine& engine, int64_t capacity, int64_t step_tokens,
                     std::optional<AttentionPolicy> policy, int64_t decode_rows) {
  engine.EndSequence(kSingleSequence);
  return engine.StartSequence(
      kSingleSequence, SequenceOptions{capacity, step_tokens,
                                       policy ? std::move(*policy) : engine.policy(), decode_rows});
}

Status StartSyntheticSequence(Engine& engine, int64_t length, int64_t decode_positions) {
  engine.EndSequence(kSingleSequence);
  return engine.StartSyntheticSequence(kSingleSequence, length, decode_positions);
}

void EndSequence(Engine& engine) { engine.EndSequence(kSingleSequence); }

bool HasSequence(const Engine& engine) { return engine.sequence(kSingleSequence) != nullptr; }

int64_t SequenceLength(const Engine& engine) {
  const Sequence* s = engine.sequence(kSingleSequence);
  return s == nullptr ? 0 : s->length();
}

StatusOr<std::optional<ConstTensorView>> ForwardShard(Engine& engine,
                                                      std::span<const TokenRange> ranges,
                                                      std::span<const int32_t> ids,
                                                      const LayerCallback& after_layer,
                                                      PrefillDensity* density) {
  StepPlan plan;
  SequenceStep& step = plan.steps.emplace_back();
  step.sequence = kSingleSequence;
  step.kind = StepKind::kPrefill;
  step.ranges.assign(ranges.begin(), ranges.end());
  step.ids.assign(ids.begin(), ids.end());
  MP_ASSIGN_OR_RETURN(StepOutput out, engine.RunStep(plan, after_layer));
  if (density != nullptr) *density = out.prefill[0];
  return out.logits[0];
}

StatusOr<ConstTensorView> ForwardDecode(Engine& engine, int32_t id) {
  MP_ASSIGN_OR_RETURN(StepOutput out, engine.RunStep(StepPlan{{DecodeStep(kSingleSequence, id)}}));
  MP_ASSERT(out.logits[0].has_value(), "every rank has a decode token's logits");
  return *out.logits[0];
}

StatusOr<ConstTensorView> Forward(Engine& engine, std::span<const int32_t> ids,
                                  PrefillDensity* density) {
  MP_REQUIRE(engine.comm().size() == 1, "Forward(ids) is for a single rank; use ForwardShard");
  MP_REQUIRE(!ids.empty(), "forward: no tokens");
  const int64_t length = SequenceLength(engine);
  const TokenRange range{length, length + static_cast<int64_t>(ids.size())};
  MP_ASSIGN_OR_RETURN(
      std::optional<ConstTensorView> logits,
      ForwardShard(engine, std::span<const TokenRange>(&range, 1), ids, {}, density));
  MP_ASSERT(logits.has_value(), "a single rank holds the last position");
  return *logits;
}

Status ForwardToHost(Engine& engine, std::span<const int32_t> ids, std::vector<float>* logits,
                     PrefillDensity* density) {
  MP_ASSIGN_OR_RETURN(ConstTensorView dev, Forward(engine, ids, density));
  logits->resize(static_cast<size_t>(engine.config().vocab_size));
  return engine.backend().CopyToHost(dev, TensorView{logits->data(), DType::kF32, dev.shape});
}

}  // namespace millipede::testing
