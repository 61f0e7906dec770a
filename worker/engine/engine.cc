// Engine: creation, policies, sequences and the memory plan checked on every rank before a
// sequence starts.
#include "worker/engine/engine.h"

#include <algorithm>

namespace millipede {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

// What pinned memory (a host tier) may take: the host's available memory less a reserve for the
// system and the process's own allocations, since page-locked memory is never swapped out: the
// larger of 4 GiB and a tenth of the host's memory.
int64_t PinnableHostBytes(const BackendMemory& host) {
  return std::max<int64_t>(0, host.free_bytes - std::max(4 * kGiB, host.total_bytes / 10));
}

}  // namespace

StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options,
                                                 std::unique_ptr<Communicator> comm,
                                                 std::unique_ptr<Backend> backend) {
  auto e = std::unique_ptr<Engine>(new Engine());
  e->options_ = options;
  e->comm_ = comm ? std::move(comm) : CreateLocalCommunicator();
  MP_REQUIRE(options.prefill_chunk > 0, "prefill chunk must be positive, got ",
             options.prefill_chunk);
  if (backend) {
    MP_REQUIRE(backend->kind() == options.backend, "engine: a ", BackendKindName(backend->kind()),
               " backend for options naming ", BackendKindName(options.backend));
    e->backend_ = std::move(backend);
  } else {
    MP_ASSIGN_OR_RETURN(e->backend_, CreateBackend(options.backend, options.device));
  }
  MP_ASSIGN_OR_RETURN(e->model_,
                      Model::Load({options.model_dir, options.random_config,
                                   options.random_weights},
                                  *e->backend_, options.fuse_projections));
  const ModelConfig& c = e->model_->config();
  WorkspaceShape shape;
  shape.prefill_chunk = options.prefill_chunk;
  shape.attention_chunk =
      options.attention_chunk > 0 ? options.attention_chunk : options.prefill_chunk;
  shape.kv_dtype = options.kv_dtype;
  shape.gemm_input_dtype = e->model_->gemm_input_dtype();
  e->workspace_ = std::make_unique<Workspace>(*e->backend_, e->model_->config(), shape);
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
  const std::vector<DecodeRole> decode = {DecodeRole::kFull, DecodeRole::kFilter,
                                          DecodeRole::kSelected, DecodeRole::kStreamingHead,
                                          DecodeRole::kStaticEviction};
  return {{PrefillPattern::kDense, PrefillPattern::kAShape, PrefillPattern::kVerticalSlash,
           PrefillPattern::kBlockSparse},
          decode,
          /*mixed_decode_layers=*/true};
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

const Sequence* Engine::sequence(SequenceId id) const {
  auto it = sequences_.find(id);
  return it == sequences_.end() ? nullptr : it->second.get();
}

Sequence* Engine::mutable_sequence(SequenceId id) {
  auto it = sequences_.find(id);
  return it == sequences_.end() ? nullptr : it->second.get();
}

int64_t Engine::KvBytes() const {
  int64_t bytes = 0;
  for (const auto& [id, s] : sequences_) bytes += s->KvBytes();
  return bytes;
}

int64_t Engine::HostKvBytes() const {
  int64_t bytes = 0;
  for (const auto& [id, s] : sequences_) bytes += s->HostKvBytes();
  return bytes;
}

MemoryPlanShape Engine::memory_shape() const {
  return MemoryPlanShape{options_.kv_dtype, options_.prefill_chunk,
                         options_.attention_chunk > 0 ? options_.attention_chunk
                                                      : options_.prefill_chunk,
                         comm_->size()};
}

StatusOr<SequenceMemoryPlan> Engine::PlanSequence(const SequenceOptions& options,
                                                  int64_t ring_rows) const {
  const int64_t step = options.step_tokens > 0 ? options.step_tokens : options.capacity;
  SequenceMemoryPlan plan = PlanSequenceMemory(config(), memory_shape(),
                                               std::max<int64_t>(options.capacity, 1), step,
                                               ring_rows);
  MP_RETURN_IF_ERROR(Sequence::PlanStores(config(), options_.kv_dtype, options, &plan));
  plan.workspace_held_bytes = workspace_->NumBytes();
  return plan;
}

StatusOr<int64_t> Engine::MaxSequencePositionsNow() {
  MP_ASSIGN_OR_RETURN(BackendMemory memory, backend_->Memory());
  // What the sequences and the step buffers hold would be freed first.
  const int64_t held = KvBytes() + workspace_->NumBytes();
  return MaxSequencePositions(config(), memory_shape(), memory.free_bytes + held);
}

Status Engine::PlanLocal(SequenceOptions* options, int64_t ring_rows, SequenceMemoryPlan* plan,
                         int64_t need_free[4]) {
  MP_ASSIGN_OR_RETURN(const BackendMemory device, backend_->Memory());
  // On the CPU backend the host tier is the backend's own memory.
  const bool one_memory = backend_->kind() == BackendKind::kCpu;
  BackendMemory host = device;
  if (!one_memory) {
    MP_ASSIGN_OR_RETURN(host, HostMemory());
  }
  if (options->selected_kv == SelectedKvTier::kAuto) options->selected_kv = options_.selected_kv;
  if (options->selected_kv == SelectedKvTier::kAuto) {
    // The device while it holds everything; else the host tier for the fewest selected layers
    // that let it hold the rest (every candidate when none does: the refusal shows that plan).
    options->selected_kv = SelectedKvTier::kDevice;
    MP_ASSIGN_OR_RETURN(*plan, PlanSequence(*options, ring_rows));
    const int64_t candidates =
        static_cast<int64_t>(Sequence::HostTierCandidates(options->policy).size());
    if (!one_memory && candidates > 0 && plan->total() > device.free_bytes) {
      options->selected_kv = SelectedKvTier::kHost;
      for (options->host_tier_layers = 1; options->host_tier_layers < candidates;
           ++options->host_tier_layers) {
        MP_ASSIGN_OR_RETURN(*plan, PlanSequence(*options, ring_rows));
        if (plan->total() <= device.free_bytes) break;
      }
    }
  }
  MP_ASSIGN_OR_RETURN(*plan, PlanSequence(*options, ring_rows));
  need_free[0] = plan->total() + (one_memory ? plan->host_kv_bytes : 0);
  need_free[1] = device.free_bytes;
  need_free[2] = one_memory ? 0 : plan->host_kv_bytes;
  need_free[3] = one_memory ? 0 : PinnableHostBytes(host);
  return OkStatus();
}

StatusOr<bool> ParseSplitKvHeads(std::string_view value) {
  if (value == "on") return true;
  if (value == "off") return false;
  return InvalidArgumentError("--split-kv-heads takes on or off, got \"" + std::string(value) +
                              "\"");
}

StatusOr<bool> ParseDecodeMlp(std::string_view value) {
  if (value == "split") return true;
  if (value == "whole") return false;
  return InvalidArgumentError("--decode-mlp takes split or whole, got \"" + std::string(value) +
                              "\"");
}

Status Engine::StartSequence(SequenceId id, SequenceOptions options) {
  if (options.step_tokens <= 0) options.step_tokens = options.capacity;
  options.split_kv_heads = options.split_kv_heads && options_.split_kv_heads;
  options.ranks = comm_->size();
  Status local;
  if (options.capacity <= 0 || options.capacity > max_context())
    local = InvalidArgumentError("sequence capacity " + std::to_string(options.capacity) +
                                 " outside [1, " + std::to_string(max_context()) + "]");
  else if (sequence(id) != nullptr)
    local = FailedPreconditionError("sequence " + std::to_string(id) + " is already running");
  if (local.ok()) local = CheckPolicy(options.policy);
  // Every rank learns every rank's capacity (the most rows its ring block can reach: the rows it
  // holds and a step's, as chunked prefill grows them), needs and free memory.
  const int num_ranks = comm_->size();
  constexpr size_t kFields = 5;  // ok, device need, device free, host need, host free
  int64_t mine[kFields] = {std::max(options.capacity, options.step_tokens), 0, 0, 0, 0};
  std::vector<int64_t> all(kFields * static_cast<size_t>(num_ranks));
  int64_t ring_rows = mine[0];
  if (num_ranks > 1) {
    MP_RETURN_IF_ERROR(comm_->HostAllGather(mine, all.data(), sizeof(int64_t)));
    for (int r = 0; r < num_ranks; ++r) ring_rows = std::max(ring_rows, all[r]);
    // Steps forced to pass-Q borrow the ring blocks for their queries and partials.
    ring_rows = std::max(ring_rows, ForcedPassQRingRows(ring_rows));
  }
  SequenceMemoryPlan plan;
  if (local.ok()) local = PlanLocal(&options, ring_rows, &plan, mine + 1);
  mine[0] = local.ok() ? 1 : 0;
  if (num_ranks > 1) {
    MP_RETURN_IF_ERROR(comm_->HostAllGather(mine, all.data(), sizeof(mine)));
  } else {
    std::copy(mine, mine + kFields, all.begin());
  }
  MP_RETURN_IF_ERROR(local);
  for (int r = 0; r < num_ranks; ++r) {
    const int64_t* m = &all[kFields * static_cast<size_t>(r)];
    MP_REQUIRE(m[0] == 1, "rank ", r, " refused the sequence (its log says why)");
    const std::string plan_text = r == comm_->rank() ? " = " + plan.ToString() : "";
    if (m[1] > m[2]) {
      const std::string where = backend_->kind() == BackendKind::kCuda ? "GPU" : "host";
      return ResourceExhaustedError(
          "the sequence does not fit: rank " + std::to_string(r) + " needs " +
          FormatBytes(m[1]) + " for " + std::to_string(options.capacity) + " positions" +
          plan_text + " but its " + where + " has " + FormatBytes(m[2]) +
          " free (weights already loaded); use more ranks or a shorter prompt");
    }
    if (m[3] > m[4])
      return ResourceExhaustedError(
          "the sequence does not fit: rank " + std::to_string(r) + " needs " +
          FormatBytes(m[3]) + " of pinned host memory for the context rows of its host-tier "
          "layers" + plan_text + " but its host can pin " + FormatBytes(m[4]) +
          " (its available memory less a reserve of max(4 GiB, 10% of its memory)); use more "
          "ranks (nodes), a shorter prompt or fewer host-tier layers");
  }
  // The plan fitted everywhere; an allocation can still fail on one rank, and then no rank may
  // keep the sequence (the others would wait for it in the next step's collectives).
  Status made = workspace_->Reserve(options.step_tokens, ring_rows, num_ranks, 1);
  std::unique_ptr<Sequence> sequence;
  if (made.ok()) {
    StatusOr<std::unique_ptr<Sequence>> s =
        Sequence::Create(id, *backend_, config(), options_.kv_dtype, std::move(options));
    if (s.ok()) sequence = std::move(s).value(); else made = s.status();
  }
  const Status agreed = AgreeToContinue(made.ok());
  if (!made.ok() || !agreed.ok()) {
    if (sequences_.empty()) workspace_->Release();
    MP_RETURN_IF_ERROR(made);
    return FailedPreconditionError("another rank could not allocate the sequence (its log says "
                                   "why)");
  }
  sequences_[id] = std::move(sequence);
  return OkStatus();
}

void Engine::EndSequence(SequenceId id) {
  // Recordings point into the sequences' stores (a later sequence may get the same addresses).
  if (sequences_.erase(id) > 0) graphs_.Clear();
  if (sequences_.empty()) workspace_->Release();
}

}  // namespace millipede
