#include "worker/memory_plan.h"

#include <algorithm>
#include <cstdio>

namespace millipede {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
// cuBLASLt and split-KV workspaces, the sampling sort buffers and allocator rounding: measured
// well under this on an H200 for every model the tests and benchmarks run.
constexpr int64_t kFixedReserve = 256 * kMiB;

int64_t StepBytesPerToken(const ModelConfig& c) {
  const int64_t q_width = c.num_attention_heads * c.head_dim;
  // hidden, q, o_acc and lse_acc in F32; positions (I64) and ids (I32).
  return 4 * (c.hidden_size + 2 * q_width + c.num_attention_heads) + 8 + 4;
}

int64_t ScratchBytes(const ModelConfig& c, int64_t chunk, int64_t attention_rows) {
  const int64_t kv_width = c.num_key_value_heads * c.head_dim;
  const int64_t q_width = c.num_attention_heads * c.head_dim;
  const int64_t widest = std::max(c.hidden_size, c.intermediate_size);
  // normed, k, v, gate, up in F32, a 2-byte silu(gate) * up for GPU GEMMs, plus a 2-byte copy of
  // the widest GEMM input.
  const int64_t per_chunk_row =
      4 * (c.hidden_size + 2 * kv_width + 2 * c.intermediate_size) + 2 * c.intermediate_size +
      2 * widest;
  // o_part and lse_part per attention query row.
  const int64_t per_attention_row = 4 * (q_width + c.num_attention_heads);
  return chunk * per_chunk_row + attention_rows * per_attention_row +
         4 * (q_width + 2 * kv_width) +  // a decode step's q | k | v
         4 * c.vocab_size;               // logits
}

}  // namespace

std::string FormatBytes(int64_t bytes) {
  char buf[64];
  if (bytes >= (int64_t{1} << 30))
    std::snprintf(buf, sizeof(buf), "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
  else if (bytes >= kMiB)
    std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(bytes) / kMiB);
  else
    std::snprintf(buf, sizeof(buf), "%lld B", static_cast<long long>(bytes));
  return buf;
}

std::string SequenceMemoryPlan::ToString() const {
  return FormatBytes(total()) + " (KV " + FormatBytes(kv_bytes) + ", step buffers " +
         FormatBytes(step_bytes) + ", chunk scratch " + FormatBytes(scratch_bytes) +
         ", ring buffers " + FormatBytes(ring_bytes) + ", reserve " + FormatBytes(reserve_bytes) +
         (selection_bytes > 0 ? ", selection buffers " + FormatBytes(selection_bytes)
                              : std::string()) +
         (head_group_bytes > 0 ? ", head-group buffers " + FormatBytes(head_group_bytes)
                               : std::string()) +
         (index_bytes > 0 ? ", sparse prefill scratch " + FormatBytes(index_bytes)
                          : std::string()) +
         (fp8_bytes > 0 ? ", fp8 attention operands " + FormatBytes(fp8_bytes) : std::string()) +
         (workspace_held_bytes > 0
              ? ", less step buffers already held " + FormatBytes(workspace_held_bytes)
              : std::string()) +
         (index_held_bytes > 0
              ? ", less sparse scratch already held " + FormatBytes(index_held_bytes)
              : std::string()) +
         ")" +
         (host_kv_bytes > 0 ? "; host tier " + FormatBytes(host_kv_bytes) + " of pinned memory"
                            : std::string());
}

SequenceMemoryPlan PlanSequenceMemory(const ModelConfig& c, const MemoryPlanShape& shape,
                                      int64_t capacity, int64_t step_tokens, int64_t ring_rows) {
  const int64_t kv_width = c.num_key_value_heads * c.head_dim;
  const int64_t kv_elem = static_cast<int64_t>(DTypeSize(shape.kv_dtype));
  const int64_t step = std::max<int64_t>(step_tokens, 1);
  SequenceMemoryPlan plan;
  plan.kv_bytes = capacity * 2 * c.num_hidden_layers * kv_width * kv_elem;
  plan.step_bytes = step * StepBytesPerToken(c);
  plan.scratch_bytes = ScratchBytes(c, std::min(step, shape.prefill_chunk),
                                    std::min(step, std::max(shape.attention_chunk,
                                                            shape.prefill_chunk)));
  // Two K and two V blocks of the widest rank's rows.
  plan.ring_bytes = shape.num_ranks > 1 ? 4 * ring_rows * kv_width * kv_elem : 0;
  plan.reserve_bytes = kFixedReserve;
  return plan;
}

int64_t MaxSequencePositions(const ModelConfig& c, const MemoryPlanShape& shape,
                             int64_t free_bytes) {
  // The plan grows with n: double until it no longer fits, then bisect.
  auto fits = [&](int64_t n) {
    return PlanSequenceMemory(c, shape, n, n, n).total() <= free_bytes;
  };
  if (!fits(1)) return 0;
  int64_t lo = 1, hi = 2;
  while (fits(hi)) {
    lo = hi;
    if (hi > (int64_t{1} << 40)) return hi;  // beyond any real context
    hi *= 2;
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

}  // namespace millipede
