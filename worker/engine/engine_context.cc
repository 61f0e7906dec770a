#include "worker/engine/engine_context.h"

#include <algorithm>
#include <vector>

#include "worker/attention/prefill_exchange.h"

namespace millipede {

MemoryPlanShape EngineContext::memory_shape() const {
  return MemoryPlanShape{options.kv_dtype, options.prefill_chunk, attention_chunk(),
                         comm->size()};
}

int64_t EngineContext::ForcedPassQRingRows(int64_t query_rows) const {
  if (options.prefill_exchange != PrefillExchange::kPassQ || comm->size() <= 1) return 0;
  const ModelConfig& c = config();
  const int64_t attention_rows = std::max<int64_t>(1, memory_shape().attention_chunk);
  return PassQBufferRows(
      std::min(query_rows, attention_rows), comm->size(),
      c.num_attention_heads * (c.head_dim + 1) * static_cast<int64_t>(sizeof(float)),
      c.num_key_value_heads * c.head_dim * static_cast<int64_t>(DTypeSize(options.kv_dtype)));
}

AttentionEnv EngineContext::Env(StepProfiler& profiler) {
  return AttentionEnv{*backend, *comm,    config(),          workspace->Scratch(),
                      stats,    profiler, workspace->sparse, options.prefill_exchange};
}

Status EngineContext::AgreeToContinue(bool go_on) {
  int32_t flag = go_on ? 1 : 0;
  if (comm->size() > 1) {
    std::vector<int32_t> flags(static_cast<size_t>(comm->size()));
    MP_RETURN_IF_ERROR(comm->HostAllGather(&flag, flags.data(), sizeof(flag)));
    for (int32_t f : flags) flag = std::min(flag, f);
  }
  if (flag == 0) return CancelledError("the step was cancelled");
  return OkStatus();
}

}  // namespace millipede
