// Engine: creation, policies, and the parts that run sequences and steps wired together.
#include "worker/engine/engine.h"

#include <utility>

#include "worker/attention/attention_registry.h"
#include "worker/backend/backend_factory.h"

namespace millipede {

StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options,
                                                 std::unique_ptr<Communicator> comm,
                                                 std::unique_ptr<Backend> backend) {
  auto e = std::unique_ptr<Engine>(new Engine());
  e->ctx_.options = options;
  e->ctx_.comm = comm ? std::move(comm) : CreateLocalCommunicator();
  MP_REQUIRE(options.prefill_chunk > 0, "prefill chunk must be positive, got ",
             options.prefill_chunk);
  if (backend) {
    MP_REQUIRE(backend->kind() == options.backend, "engine: a ", BackendKindName(backend->kind()),
               " backend for options naming ", BackendKindName(options.backend));
    e->ctx_.backend = std::move(backend);
  } else {
    MP_ASSIGN_OR_RETURN(e->ctx_.backend, CreateBackend(options.backend, options.device));
  }
  ModelSource source;
  source.model_path = options.model_path;
  source.gguf_weight_dtype = options.gguf_weight_dtype.value_or(
      options.backend == BackendKind::kCpu ? DType::kF32 : DType::kBF16);
  source.random_config = options.random_config;
  source.random_weights = options.random_weights;
  MP_REQUIRE(options.kv_scales.empty() || options.kv_dtype == DType::kF8E4M3,
             "KV scales apply to an FP8 cache (--kv-dtype fp8), not ", DTypeName(options.kv_dtype));
  source.kv_scales = options.kv_scales;
  MP_ASSIGN_OR_RETURN(e->ctx_.model,
                      Model::Load(source, *e->ctx_.backend, options.fuse_projections));
  const ModelConfig& c = e->ctx_.model->config();
  WorkspaceShape shape;
  shape.prefill_chunk = options.prefill_chunk;
  shape.attention_chunk = e->ctx_.attention_chunk();
  shape.kv_dtype = options.kv_dtype;
  shape.gemm_input_dtype = e->ctx_.model->gemm_input_dtype();
  e->ctx_.workspace = std::make_unique<Workspace>(*e->ctx_.backend, c, shape);
  e->policy_ = DensePolicy(c.num_hidden_layers, c.num_key_value_heads);
  if (!options.policy_file.empty()) {
    MP_ASSIGN_OR_RETURN(AttentionPolicy policy,
                        LoadAttentionPolicy(options.policy_file, c.num_hidden_layers,
                                            c.num_key_value_heads));
    MP_RETURN_IF_ERROR(e->SetPolicy(std::move(policy)));
  }
  return e;
}

PolicyCapabilities Engine::capabilities() const {
  PolicyCapabilities c = RegisteredCapabilities();
  c.fp8_attention = ctx_.backend->RunsFp8Attention(config().head_dim);
  return c;
}

Status Engine::CheckPolicy(const AttentionPolicy& policy) const {
  const ModelConfig& c = config();
  MP_RETURN_IF_ERROR(
      ValidateAttentionPolicy(policy, c.num_hidden_layers, c.num_key_value_heads));
  return CheckPolicyRunnable(policy, capabilities());
}

Status Engine::SetPolicy(AttentionPolicy policy) {
  MP_RETURN_IF_ERROR(CheckPolicy(policy));
  policy_ = std::move(policy);
  return OkStatus();
}

const Sequence* Engine::sequence(SequenceId id) const { return sequences_.Find(id); }

Status Engine::StartSequence(SequenceId id, SequenceOptions options,
                             const std::optional<CachedPrefix>& prefix) {
  const Status checked = CheckPolicy(options.policy);
  return sequences_.Start(id, std::move(options), checked, prefix);
}

void Engine::EndSequence(SequenceId id) {
  // Recordings point into the sequences' stores (a later sequence may get the same addresses).
  if (sequences_.End(id)) graphs_.Clear();
}

Status Engine::KeepSequence(SequenceId id) {
  MP_RETURN_IF_ERROR(sequences_.Keep(id));
  graphs_.Clear();
  return OkStatus();
}

Status Engine::DemoteCached(SequenceId id) {
  // Recordings point into the cached sequence's stores, freed once saved.
  graphs_.Clear();
  return sequences_.Demote(id);
}

void Engine::DropCached(SequenceId id) {
  if (sequences_.DropCached(id)) graphs_.Clear();
}

StatusOr<StepOutput> Engine::RunStep(const StepPlan& plan, const LayerCallback& after_layer) {
  MP_ASSIGN_OR_RETURN(std::vector<RankEntry> entries, preparer_.Prepare(plan));
  ctx_.model->BeginStep();
  int64_t rows = 0;
  bool prefill = false, decode = false;
  for (RankEntry& e : entries) {
    rows += e.rows;
    (e.prefill() ? prefill : decode) = true;
    if (!e.prefill()) e.seq->BeginDecode();
    MP_ASSIGN_OR_RETURN(e.inv_freq, ctx_.model->InvFreq(e.length_after));
  }
  if (graphs_.Recordable(entries)) {
    MP_RETURN_IF_ERROR(graphs_.Run(entries));
    return loop_.FinishStep(entries, false);
  }
  StepProfiler profiler(*ctx_.backend, ctx_.options.profile);
  MP_RETURN_IF_ERROR(profiler.Mark(nullptr));
  MP_RETURN_IF_ERROR(loop_.Embed(entries, rows));
  MP_RETURN_IF_ERROR(profiler.Mark(&ctx_.stats.embed_s));
  const int64_t layers = config().num_hidden_layers;
  for (int64_t layer = 0; layer < layers; ++layer) {
    MP_RETURN_IF_ERROR(loop_.RunLayer(layer, entries, rows, profiler));
    if (prefill) ++ctx_.stats.prefill_layers;
    if (decode) ++ctx_.stats.decode_layers;
    if (after_layer && prefill)
      MP_RETURN_IF_ERROR(ctx_.AgreeToContinue(after_layer(layer + 1, layers)));
  }
  MP_RETURN_IF_ERROR(loop_.ComputeLogits(entries));
  MP_RETURN_IF_ERROR(profiler.Mark(&ctx_.stats.logits_s));
  return loop_.FinishStep(entries, prefill);
}

}  // namespace millipede
