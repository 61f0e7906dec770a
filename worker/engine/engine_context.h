// What every part of the engine shares: its options, backend, ranks, model, step buffers and
// counters. The Engine owns one; its parts (SequenceTable, StepPreparer, LayerLoop,
// DecodeGraphRunner) hold a reference.
#pragma once

#include <cstdint>
#include <memory>

#include "worker/attention/attention_env.h"
#include "worker/backend/backend.h"
#include "worker/dist/communicator.h"
#include "worker/engine/engine_options.h"
#include "worker/engine/model.h"
#include "worker/engine/workspace.h"
#include "worker/memory_plan.h"

namespace millipede {

struct EngineContext {
  EngineOptions options;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<Model> model;
  std::unique_ptr<Workspace> workspace;
  EngineStats stats;

  const ModelConfig& config() const { return model->config(); }
  int64_t max_context() const { return model->max_context(); }
  // Rows per attention call: EngineOptions::attention_chunk, else the prefill chunk.
  int64_t attention_chunk() const {
    return options.attention_chunk > 0 ? options.attention_chunk : options.prefill_chunk;
  }
  // The shape the memory plan counts with (KV dtype, chunks, ranks).
  MemoryPlanShape memory_shape() const;
  // The ring rows a step forced to pass-Q (EngineOptions::prefill_exchange) reserves for up to
  // `query_rows` queries per rank: rounds of at most one attention call's rows. 0 otherwise.
  int64_t ForcedPassQRingRows(int64_t query_rows) const;
  // What the attention strategies run with during one step.
  AttentionEnv Env(StepProfiler& profiler);
  // Cancelled on every rank if any rank passes false (a host all-gather with several ranks).
  Status AgreeToContinue(bool go_on);
};

}  // namespace millipede
