// One sequence at a time on an Engine, for tests and test tools: one-entry step plans over a
// fixed sequence id (kSingleSequence), run by Engine::RunStep. Generate (worker/generate.h) is
// the product's way to run one request; these calls drive the engine a step at a time, as the
// tests that compare logits need.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "common/status.h"
#include "worker/engine/engine.h"

namespace millipede::testing {

// The sequence the calls below use. Job ids start at 1 (BatchRunner), so Generate never takes it.
inline constexpr SequenceId kSingleSequence = 0;

// Starts the single sequence (freeing the previous one) with room for `capacity` positions on
// this rank, under `policy` or else the engine's; `step_tokens` and `decode_rows` as
// SequenceOptions has them.
Status StartSequence(Engine& engine, int64_t capacity, int64_t step_tokens = 0,
                     std::optional<AttentionPolicy> policy = std::nullopt,
                     int64_t decode_rows = -1);
// Starts the single sequence (freeing the previous one) as Engine::StartSyntheticSequence does.
Status StartSyntheticSequence(Engine& engine, int64_t length, int64_t decode_positions);
void EndSequence(Engine& engine);
bool HasSequence(const Engine& engine);
// Positions of the single sequence over all ranks (0 without one).
int64_t SequenceLength(const Engine& engine);

// A prefill entry: this rank runs `ids` at the global positions `ranges` (increasing; over all
// ranks the ranges tile [length, length + n)). Returns the logits of the step's last position
// ([vocab] F32, backend memory, valid until the next step) on the rank that holds it; `density`,
// when set, gets the sequence's prefill attention pairs after the step (every rank).
StatusOr<std::optional<ConstTensorView>> ForwardShard(Engine& engine,
                                                      std::span<const TokenRange> ranges,
                                                      std::span<const int32_t> ids,
                                                      const LayerCallback& after_layer = {},
                                                      PrefillDensity* density = nullptr);
// A decode entry: the same token on every rank, its logits on every rank.
StatusOr<ConstTensorView> ForwardDecode(Engine& engine, int32_t id);
// One rank: a prefill entry over [length, length + n).
StatusOr<ConstTensorView> Forward(Engine& engine, std::span<const int32_t> ids,
                                  PrefillDensity* density = nullptr);
// Forward, then the logits copied to the host ([vocab]).
Status ForwardToHost(Engine& engine, std::span<const int32_t> ids, std::vector<float>* logits,
                     PrefillDensity* density = nullptr);

}  // namespace millipede::testing
