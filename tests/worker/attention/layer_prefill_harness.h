// One layer's prefill strategy run alone over random queries, keys and values (CPU backend, one
// rank), and its dense-math reference: softmax attention in double over an explicit mask per KV
// head. The masks come from the heads' pattern variants (attention_registry.h): a ring
// pattern's RingHeadMask, or the CSR index a sparse pattern's variant builds for the same step.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "policy/attention_policy.h"
#include "worker/attention/attention_strategy.h"
#include "worker/attention/sparse_prefill_scratch.h"
#include "worker/dist/communicator.h"
#include "worker/kv/device_kv_store.h"

namespace millipede::testing {

struct LayerOutput {
  std::vector<float> o;    // [length, heads * head_dim]
  std::vector<float> lse;  // [length, heads], natural log
  int64_t pairs = 0;       // query-key pairs counted (over the KV heads)
};

// Per KV head, [length * length] query-major: whether query p attends key k (causal).
using HeadMasks = std::vector<std::vector<uint8_t>>;

// Every attended pair of `masks`.
int64_t MaskPairs(const HeadMasks& masks);

class LayerPrefillRun {
 public:
  // A layer of `kv_heads` KV heads (2 query heads each, head_dim 16) prefilling positions
  // [0, length) in one step, with data drawn from `seed`.
  LayerPrefillRun(int64_t kv_heads, int64_t length, uint32_t seed);
  // Whether the set-up succeeded (a test failure otherwise).
  bool Ready() const { return ready_; }
  // The layer's prefill strategy built from `policy` (one layer, BuildLayerAttention), run.
  LayerOutput Attend(const AttentionPolicy& policy);
  // Each KV head's mask under `heads` (the layer's prefill): ring patterns by their RingHeadMask,
  // sparse ones by a fresh index of their variant, planned and built over the same step.
  HeadMasks Masks(const std::vector<HeadPrefillPolicy>& heads);
  // Softmax attention in double over `masks` (pairs: MaskPairs).
  LayerOutput Reference(const HeadMasks& masks) const;

 private:
  Status SetUp(uint32_t seed);
  PrefillInput Input();
  AttentionEnv Env();
  Status SparseMasks(const std::vector<HeadPrefillPolicy>& heads, PrefillPattern pattern,
                     HeadMasks* masks);

  int64_t length_ = 0;
  ModelConfig config_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<DeviceKvStore> store_;
  BackendTensor q_, o_, lse_, o_part_, lse_part_, pairs_;
  std::vector<float> host_q_, host_k_, host_v_;
  std::vector<TokenRange> ranges_;
  std::vector<std::vector<TokenRange>> blocks_;
  EngineStats stats_;
  SparsePrefillScratch sparse_;
  std::unique_ptr<StepProfiler> profiler_;
  PrefillPairs pairs_counted_;
  bool ready_ = false;
};

}  // namespace millipede::testing
