#include "worker/engine.h"

#include <algorithm>

#include "common/file_util.h"

namespace millipede {
namespace {

// Most ranges a rank's share of one sharded step may have (a zig-zag prompt shard has two).
constexpr int kMaxStepRanges = 8;

int64_t TotalSize(std::span<const TokenRange> ranges) {
  int64_t n = 0;
  for (const TokenRange& r : ranges) n += r.size();
  return n;
}

}  // namespace

StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options,
                                                 std::unique_ptr<Communicator> comm) {
  auto e = std::unique_ptr<Engine>(new Engine());
  e->options_ = options;
  e->comm_ = comm ? std::move(comm) : CreateLocalCommunicator();
  MP_REQUIRE(options.prefill_chunk > 0, "prefill chunk must be positive, got ",
             options.prefill_chunk);
  MP_ASSIGN_OR_RETURN(e->backend_, CreateBackend(options.backend, options.device));
  if (!options.model_dir.empty()) {
    MP_ASSIGN_OR_RETURN(e->config_,
                        LoadModelConfig(JoinPath(options.model_dir, "config.json")));
    MP_ASSIGN_OR_RETURN(e->weights_,
                        ModelWeights::Load(options.model_dir, e->config_, *e->backend_));
  } else {
    e->config_ = options.random_config;
    MP_RETURN_IF_ERROR(ValidateModelConfig(e->config_));
    MP_ASSIGN_OR_RETURN(e->weights_, ModelWeights::Random(e->config_, options.random_weights,
                                                          *e->backend_));
  }
  e->policy_ = DensePolicy(e->config_.num_hidden_layers, e->config_.num_key_value_heads);
  if (!options.policy_file.empty()) {
    MP_ASSIGN_OR_RETURN(AttentionPolicy policy,
                        LoadAttentionPolicy(options.policy_file, e->config_.num_hidden_layers,
                                            e->config_.num_key_value_heads));
    MP_RETURN_IF_ERROR(e->SetPolicy(std::move(policy)));
  }
  MP_ASSIGN_OR_RETURN(e->logits_,
                      e->backend_->Allocate(DType::kF32, Shape{1, e->config_.vocab_size}));
  return e;
}

int64_t Engine::max_context() const {
  int64_t limit = config_.max_position_embeddings;
  // Dynamic NTK scaling exists to run past the trained length: up to `factor` times it.
  // (max_position_embeddings <= 2^34 and factor <= 1024: the product fits.)
  if (config_.rope_scaling.type == RopeScalingType::kDynamic)
    limit = static_cast<int64_t>(static_cast<double>(limit) * config_.rope_scaling.factor);
  if (config_.sliding_window > 0) limit = std::min(limit, config_.sliding_window);
  return limit;
}

Status Engine::SetPolicy(AttentionPolicy policy) {
  const ModelConfig& c = config_;
  MP_REQUIRE(static_cast<int64_t>(policy.layers.size()) == c.num_hidden_layers,
             "attention policy: ", policy.layers.size(), " layers for a model of ",
             c.num_hidden_layers);
  for (size_t l = 0; l < policy.layers.size(); ++l) {
    const LayerPolicy& layer = policy.layers[l];
    MP_REQUIRE(static_cast<int64_t>(layer.prefill.size()) == c.num_key_value_heads,
               "attention policy: layer ", l, " has ", layer.prefill.size(),
               " prefill patterns for ", c.num_key_value_heads, " KV heads");
    for (size_t h = 0; h < layer.prefill.size(); ++h) {
      if (layer.prefill[h] != PrefillPattern::kDense)
        return UnimplementedError(
            std::string("attention policy: prefill pattern \"") +
            PrefillPatternName(layer.prefill[h]) + "\" (layer " + std::to_string(l) +
            ", KV head " + std::to_string(h) +
            ") is not available yet in this engine; available: dense");
    }
    if (layer.decode != DecodeRole::kFull)
      return UnimplementedError(std::string("attention policy: decode role \"") +
                                DecodeRoleName(layer.decode) + "\" (layer " + std::to_string(l) +
                                ") is not available yet in this engine; available: full");
  }
  policy_ = std::move(policy);
  return OkStatus();
}

StatusOr<AttentionPolicy> Engine::ParsePolicy(std::string_view json) const {
  MP_ASSIGN_OR_RETURN(AttentionPolicy policy,
                      ParseAttentionPolicy(json, config_.num_hidden_layers,
                                           config_.num_key_value_heads));
  // Check that it could run, on a copy of this engine's state.
  Engine probe;
  probe.config_ = config_;
  MP_RETURN_IF_ERROR(probe.SetPolicy(policy));
  return policy;
}

MemoryPlanShape Engine::memory_shape() const {
  return MemoryPlanShape{options_.kv_dtype, options_.prefill_chunk, attention_chunk(),
                         comm_->size()};
}

int64_t Engine::attention_chunk() const {
  return options_.attention_chunk > 0 ? options_.attention_chunk : options_.prefill_chunk;
}

SequenceMemoryPlan Engine::PlanSequence(int64_t capacity, int64_t step_tokens,
                                        int64_t ring_rows) const {
  return PlanSequenceMemory(config_, memory_shape(), capacity, step_tokens, ring_rows);
}

StatusOr<int64_t> Engine::MaxSequencePositionsNow() {
  MP_ASSIGN_OR_RETURN(BackendMemory memory, backend_->Memory());
  // The current sequence's memory would be freed first.
  int64_t held = 0;
  if (kv_) held += PlanSequence(kv_->capacity(), step_rows_, ring_rows_).total();
  return MaxSequencePositions(config_, memory_shape(), memory.free_bytes + held);
}

Status Engine::StartSequence(int64_t capacity, int64_t step_tokens) {
  EndSequence();
  if (step_tokens <= 0) step_tokens = capacity;
  Status local;
  if (capacity <= 0 || capacity > max_context())
    local = InvalidArgumentError("sequence capacity " + std::to_string(capacity) +
                                 " outside [1, " + std::to_string(max_context()) + "]");
  // Every rank learns every rank's step size (the ring blocks' rows), need and free memory.
  const int num_ranks = comm_->size();
  int64_t mine[3] = {step_tokens, 0, 0};
  BackendMemory memory;
  if (local.ok()) {
    StatusOr<BackendMemory> m = backend_->Memory();
    if (m.ok()) memory = *m; else local = m.status();
  }
  std::vector<int64_t> all(3 * static_cast<size_t>(num_ranks));
  int64_t ring_rows = step_tokens;
  if (num_ranks > 1) {
    MP_RETURN_IF_ERROR(comm_->HostAllGather(mine, all.data(), sizeof(int64_t)));
    for (int r = 0; r < num_ranks; ++r) ring_rows = std::max(ring_rows, all[r]);
  }
  const SequenceMemoryPlan plan = PlanSequence(std::max<int64_t>(capacity, 1), step_tokens,
                                               ring_rows);
  mine[0] = local.ok() ? 1 : 0;
  mine[1] = plan.total();
  mine[2] = memory.free_bytes;
  if (num_ranks > 1) {
    MP_RETURN_IF_ERROR(comm_->HostAllGather(mine, all.data(), sizeof(mine)));
  } else {
    std::copy(mine, mine + 3, all.begin());
  }
  MP_RETURN_IF_ERROR(local);
  for (int r = 0; r < num_ranks; ++r) {
    const int64_t* m = &all[3 * static_cast<size_t>(r)];
    MP_REQUIRE(m[0] == 1, "rank ", r, " refused the sequence (its log says why)");
    if (m[1] > m[2]) {
      const std::string where = backend_->kind() == BackendKind::kCuda ? "GPU" : "host";
      return ResourceExhaustedError(
          "the sequence does not fit: rank " + std::to_string(r) + " needs " +
          FormatBytes(m[1]) + " for " + std::to_string(capacity) + " positions" +
          (r == comm_->rank() ? " = " + plan.ToString() : "") + " but its " + where + " has " +
          FormatBytes(m[2]) + " free (weights already loaded); use more ranks or a shorter "
          "prompt");
    }
  }
  MP_ASSIGN_OR_RETURN(KvCache cache,
                      KvCache::Create(*backend_, config_.num_hidden_layers,
                                      config_.num_key_value_heads, config_.head_dim, capacity,
                                      options_.kv_dtype));
  kv_ = std::make_unique<KvCache>(std::move(cache));
  MP_RETURN_IF_ERROR(EnsureStepBuffers(step_tokens));
  MP_RETURN_IF_ERROR(EnsureScratch(std::min(step_tokens, options_.prefill_chunk)));
  if (num_ranks > 1) MP_RETURN_IF_ERROR(EnsureRingBuffers(ring_rows));
  return OkStatus();
}

Status Engine::StartSyntheticSequence(int64_t length, int64_t decode_positions) {
  const int num_ranks = comm_->size(), rank = comm_->rank();
  MP_REQUIRE(decode_positions >= 0, "synthetic sequence: negative decode positions");
  MP_ASSIGN_OR_RETURN(ShardPlan plan, ShardPlan::Create(length, num_ranks));
  const int64_t mine = plan.RankPromptTokens(rank);
  const int64_t capacity =
      std::max<int64_t>(1, mine + (decode_positions + num_ranks - 1) / num_ranks);
  MP_RETURN_IF_ERROR(StartSequence(capacity, 1));
  const ModelConfig& c = config_;
  const int64_t rows = std::min<int64_t>(std::max<int64_t>(mine, 1), 16384);
  const Shape shape{rows, c.num_key_value_heads, c.head_dim};
  std::vector<float> host_zeros(static_cast<size_t>(shape.NumElements()), 0.0f);
  MP_ASSIGN_OR_RETURN(BackendTensor zeros, backend_->Allocate(DType::kF32, shape));
  MP_RETURN_IF_ERROR(backend_->CopyFromHost(
      ConstTensorView{host_zeros.data(), DType::kF32, shape}, zeros.view()));
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    for (int64_t row = 0; row < mine; row += rows) {
      const int64_t m = std::min(rows, mine - row);
      ConstTensorView z = SliceRows(zeros.cview(), 0, m);
      MP_RETURN_IF_ERROR(kv_->Write(*backend_, layer, row, z, z));
    }
  }
  for (const TokenRange& r : plan.RankPromptRanges(rank))
    if (!r.empty()) MP_RETURN_IF_ERROR(kv_->Commit(r));
  global_length_ = length;
  return backend_->Synchronize();
}

void Engine::EndSequence() {
  kv_.reset();
  global_length_ = 0;
  step_rows_ = 0;
  hidden_ = BackendTensor();
  q_ = BackendTensor();
  o_acc_ = BackendTensor();
  lse_acc_ = BackendTensor();
  for (int i = 0; i < 2; ++i) {
    ring_k_[i] = BackendTensor();
    ring_v_[i] = BackendTensor();
  }
  ring_rows_ = 0;
  positions_ = BackendTensor();
  ids_ = BackendTensor();
  o_part_ = BackendTensor();
  lse_part_ = BackendTensor();
  scratch_rows_ = 0;
}

Status Engine::EnsureScratch(int64_t chunk) {
  chunk = std::max<int64_t>(chunk, 1);
  if (chunk <= scratch_rows_) return OkStatus();
  const ModelConfig& c = config_;
  const int64_t kv_width = c.num_key_value_heads * c.head_dim;
  const int64_t q_width = c.num_attention_heads * c.head_dim;
  Backend& b = *backend_;
  MP_ASSIGN_OR_RETURN(normed_, b.Allocate(DType::kF32, Shape{chunk, c.hidden_size}));
  MP_ASSIGN_OR_RETURN(k_, b.Allocate(DType::kF32, Shape{chunk, kv_width}));
  MP_ASSIGN_OR_RETURN(v_, b.Allocate(DType::kF32, Shape{chunk, kv_width}));
  // Attention partials: as many query rows as one attention call takes (at least a chunk).
  const int64_t attention_rows = std::max(chunk, std::min(attention_chunk(), step_rows_));
  MP_ASSIGN_OR_RETURN(o_part_, b.Allocate(DType::kF32, Shape{attention_rows, q_width}));
  MP_ASSIGN_OR_RETURN(lse_part_,
                      b.Allocate(DType::kF32, Shape{attention_rows, c.num_attention_heads}));
  MP_ASSIGN_OR_RETURN(gate_, b.Allocate(DType::kF32, Shape{chunk, c.intermediate_size}));
  MP_ASSIGN_OR_RETURN(up_, b.Allocate(DType::kF32, Shape{chunk, c.intermediate_size}));
  scratch_rows_ = chunk;
  return OkStatus();
}

Status Engine::EnsureStepBuffers(int64_t n) {
  n = std::max<int64_t>(n, 1);
  if (n <= step_rows_) return OkStatus();
  const ModelConfig& c = config_;
  const int64_t q_width = c.num_attention_heads * c.head_dim;
  Backend& b = *backend_;
  MP_ASSIGN_OR_RETURN(hidden_, b.Allocate(DType::kF32, Shape{n, c.hidden_size}));
  MP_ASSIGN_OR_RETURN(q_, b.Allocate(DType::kF32, Shape{n, q_width}));
  MP_ASSIGN_OR_RETURN(o_acc_, b.Allocate(DType::kF32, Shape{n, q_width}));
  MP_ASSIGN_OR_RETURN(lse_acc_, b.Allocate(DType::kF32, Shape{n, c.num_attention_heads}));
  MP_ASSIGN_OR_RETURN(positions_, b.Allocate(DType::kI64, Shape{n}));
  MP_ASSIGN_OR_RETURN(ids_, b.Allocate(DType::kI32, Shape{n}));
  step_rows_ = n;
  // The attention partials follow the step size (up to attention_chunk rows).
  scratch_rows_ = 0;
  return OkStatus();
}

Status Engine::EnsureRingBuffers(int64_t rows) {
  if (rows <= ring_rows_) return OkStatus();
  const Shape shape{rows, config_.num_key_value_heads, config_.head_dim};
  for (int i = 0; i < 2; ++i) {
    MP_ASSIGN_OR_RETURN(ring_k_[i], backend_->Allocate(options_.kv_dtype, shape));
    MP_ASSIGN_OR_RETURN(ring_v_[i], backend_->Allocate(options_.kv_dtype, shape));
  }
  ring_rows_ = rows;
  return OkStatus();
}

Status Engine::Mark(double* bucket) {
  if (!options_.profile) return OkStatus();
  MP_RETURN_IF_ERROR(backend_->Synchronize());
  const auto now = std::chrono::steady_clock::now();
  if (bucket != nullptr) *bucket += std::chrono::duration<double>(now - mark_).count();
  mark_ = now;
  return OkStatus();
}

StatusOr<ConstTensorView> Engine::InvFreq(int64_t seq_len) {
  const ModelConfig& c = config_;
  const bool depends_on_length = c.rope_scaling.type == RopeScalingType::kDynamic;
  if (inv_freq_len_ >= 0 && (!depends_on_length || inv_freq_len_ == seq_len))
    return inv_freq_.cview();
  // Dynamic NTK scaling depends on the longest position in this pass, as in transformers.
  MP_ASSIGN_OR_RETURN(std::vector<float> host,
                      RopeInvFreq(c.head_dim, c.rope_theta, c.rope_scaling,
                                  c.max_position_embeddings, seq_len));
  if (inv_freq_.view().data == nullptr) {
    MP_ASSIGN_OR_RETURN(inv_freq_, backend_->Allocate(DType::kF32, Shape{c.head_dim / 2}));
  }
  MP_RETURN_IF_ERROR(backend_->CopyFromHost(
      ConstTensorView{host.data(), DType::kF32, Shape{c.head_dim / 2}}, inv_freq_.view()));
  inv_freq_len_ = seq_len;
  return inv_freq_.cview();
}

Status Engine::ProjectQkv(int64_t layer, int64_t begin, int64_t end, int64_t cache_row,
                          bool store_kv, ConstTensorView inv_freq) {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_->layers[static_cast<size_t>(layer)];
  Backend& b = *backend_;
  const int64_t m = end - begin;
  TensorView normed = SliceRows(normed_.view(), 0, m);
  TensorView q = SliceRows(q_.view(), begin, m);
  TensorView k = SliceRows(k_.view(), 0, m);
  TensorView v = SliceRows(v_.view(), 0, m);
  MP_RETURN_IF_ERROR(b.RmsNorm({AsConst(SliceRows(hidden_.view(), begin, m)), w.input_norm,
                                TensorView{}, normed, static_cast<float>(c.rms_norm_eps)}));
  MP_RETURN_IF_ERROR(b.Gemm({AsConst(normed), w.q_proj, w.q_bias, q}));
  MP_RETURN_IF_ERROR(b.Gemm({AsConst(normed), w.k_proj, w.k_bias, k}));
  MP_RETURN_IF_ERROR(b.Gemm({AsConst(normed), w.v_proj, w.v_bias, v}));
  ConstTensorView pos = SliceRows(positions_.cview(), begin, m);
  MP_ASSIGN_OR_RETURN(TensorView q3, Reshape(q, Shape{m, c.num_attention_heads, c.head_dim}));
  MP_ASSIGN_OR_RETURN(TensorView k3, Reshape(k, Shape{m, c.num_key_value_heads, c.head_dim}));
  MP_ASSIGN_OR_RETURN(TensorView v3, Reshape(v, Shape{m, c.num_key_value_heads, c.head_dim}));
  MP_RETURN_IF_ERROR(b.Rope({q3, pos, inv_freq}));
  if (!store_kv) return OkStatus();
  MP_RETURN_IF_ERROR(b.Rope({k3, pos, inv_freq}));
  return kv_->Write(b, layer, cache_row, AsConst(k3), AsConst(v3));
}

Status Engine::AttendBlock(int64_t layer, const std::vector<TokenRange>& q_ranges,
                           ConstTensorView block_k, ConstTensorView block_v,
                           const std::vector<TokenRange>& block_ranges) {
  const ModelConfig& c = config_;
  Backend& b = *backend_;
  const int64_t heads = c.num_attention_heads;
  const int64_t rows_per_call = std::min(attention_chunk(), o_part_.view().shape.dims[0]);
  int64_t q_row = 0;
  for (const TokenRange& qr : q_ranges) {
    for (int64_t s = 0; s < qr.size(); s += rows_per_call) {
      const int64_t m = std::min(rows_per_call, qr.size() - s);
      const int64_t q_first = qr.begin + s, q_last = q_first + m - 1;
      MP_ASSIGN_OR_RETURN(ConstTensorView q, Reshape(SliceRows(q_.cview(), q_row + s, m),
                                                     Shape{m, heads, c.head_dim}));
      MP_ASSIGN_OR_RETURN(TensorView o_part, Reshape(SliceRows(o_part_.view(), 0, m),
                                                     Shape{m, heads, c.head_dim}));
      TensorView lse_part = SliceRows(lse_part_.view(), 0, m);
      MP_ASSIGN_OR_RETURN(TensorView o_acc, Reshape(SliceRows(o_acc_.view(), q_row + s, m),
                                                    Shape{m, heads, c.head_dim}));
      TensorView lse_acc = SliceRows(lse_acc_.view(), q_row + s, m);
      int64_t k_row = 0;
      for (const TokenRange& kr : block_ranges) {
        // Keys after the chunk's last query are masked for all of it: nothing to compute.
        if (kr.begin <= q_last) {
          AttentionArgs a;
          a.q = q;
          a.k = SliceRows(block_k, k_row, kr.size());
          a.v = SliceRows(block_v, k_row, kr.size());
          a.q_offset = q_first;
          a.k_offset = kr.begin;
          a.mask = AttentionMask::kCausal;
          a.o = o_part;
          a.lse = lse_part;
          MP_RETURN_IF_ERROR(b.Attention(a));
          MP_RETURN_IF_ERROR(b.MergeStateInPlace(o_acc, lse_acc, AsConst(o_part),
                                                 AsConst(lse_part)));
        }
        k_row += kr.size();
      }
    }
    q_row += qr.size();
  }
  return OkStatus();
}

Status Engine::OutputAndMlp(int64_t layer, int64_t begin, int64_t end,
                            ConstTensorView attention_out) {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_->layers[static_cast<size_t>(layer)];
  Backend& b = *backend_;
  const int64_t m = end - begin;
  TensorView hidden = SliceRows(hidden_.view(), begin, m);
  // hidden += o_proj(attention)
  MP_RETURN_IF_ERROR(b.Gemm({SliceRows(attention_out, begin, m), w.o_proj, w.o_bias, hidden,
                             /*accumulate=*/true}));
  // hidden += down(silu(gate(norm(hidden))) * up(norm(hidden)))
  TensorView normed = SliceRows(normed_.view(), 0, m);
  TensorView gate = SliceRows(gate_.view(), 0, m);
  TensorView up = SliceRows(up_.view(), 0, m);
  MP_RETURN_IF_ERROR(b.RmsNorm({AsConst(hidden), w.post_attention_norm, TensorView{}, normed,
                                static_cast<float>(c.rms_norm_eps)}));
  MP_RETURN_IF_ERROR(b.Gemm({AsConst(normed), w.gate_proj, w.gate_bias, gate}));
  MP_RETURN_IF_ERROR(b.Gemm({AsConst(normed), w.up_proj, w.up_bias, up}));
  MP_RETURN_IF_ERROR(b.SiluMul({AsConst(gate), AsConst(up), gate}));
  return b.Gemm({AsConst(gate), w.down_proj, w.down_bias, hidden, /*accumulate=*/true});
}

Status Engine::Logits(int64_t row) {
  Backend& b = *backend_;
  TensorView normed = SliceRows(normed_.view(), 0, 1);
  MP_RETURN_IF_ERROR(b.RmsNorm({AsConst(SliceRows(hidden_.view(), row, 1)), weights_->final_norm,
                                TensorView{}, normed, static_cast<float>(config_.rms_norm_eps)}));
  return b.Gemm({AsConst(normed), weights_->lm_head, ConstTensorView{}, logits_.view()});
}

Status Engine::CheckShard(std::span<const TokenRange> ranges,
                          std::span<const int32_t> ids) const {
  const int64_t n = static_cast<int64_t>(ids.size());
  MP_REQUIRE(TotalSize(ranges) == n, "forward: ", n, " ids for ranges of ", TotalSize(ranges),
             " positions");
  MP_REQUIRE(static_cast<int>(ranges.size()) <= kMaxStepRanges, "forward: more than ",
             kMaxStepRanges, " ranges");
  for (size_t i = 0; i < ranges.size(); ++i)
    MP_REQUIRE(ranges[i].size() > 0 && (i == 0 || ranges[i].begin >= ranges[i - 1].end),
               "forward: ranges must be non-empty and increasing");
  MP_REQUIRE(comm_->size() == 1 || global_length_ == 0,
             "forward: a sharded step across ranks must be the sequence's first step");
  for (int64_t i = 0; i < n; ++i)
    MP_REQUIRE(ids[i] >= 0 && ids[i] < config_.vocab_size, "token id ", ids[i], " at position ",
               i, " is outside the vocabulary [0, ", config_.vocab_size, ")");
  MP_REQUIRE(kv_->rows() + n <= kv_->capacity(), "forward: ", kv_->rows() + n,
             " tokens exceed the sequence capacity of ", kv_->capacity());
  std::vector<TokenRange> after = kv_->ranges();
  for (const TokenRange& r : ranges) AppendRange(&after, r);
  MP_REQUIRE(static_cast<int>(after.size()) <= kMaxStepRanges,
             "forward: the cache would hold more than ", kMaxStepRanges, " ranges");
  return OkStatus();
}

Status Engine::AgreeToContinue(bool go_on) {
  int32_t flag = go_on ? 1 : 0;
  if (comm_->size() > 1) {
    std::vector<int32_t> flags(static_cast<size_t>(comm_->size()));
    MP_RETURN_IF_ERROR(comm_->HostAllGather(&flag, flags.data(), sizeof(flag)));
    for (int32_t f : flags) flag = std::min(flag, f);
  }
  if (flag == 0) return CancelledError("the step was cancelled");
  return OkStatus();
}

struct Engine::Block {
  ConstTensorView k, v;  // [rows, kv_heads, head_dim] per layer-independent buffer
  std::vector<TokenRange> ranges;
};

StatusOr<std::optional<ConstTensorView>> Engine::ForwardShard(
    std::span<const TokenRange> ranges, std::span<const int32_t> ids,
    const LayerCallback& after_layer) {
  MP_REQUIRE(kv_ != nullptr, "forward: no sequence started");
  const ModelConfig& c = config_;
  Backend& b = *backend_;
  Communicator& comm = *comm_;
  const int num_ranks = comm.size(), rank = comm.rank();
  const int64_t n = static_cast<int64_t>(ids.size());
  // Checks of this rank's own share: their outcome is exchanged with the step's metadata, so that
  // a rank that fails does not leave the others waiting in a collective.
  const Status local = CheckShard(ranges, ids);
  const int64_t rows0 = kv_->rows();
  // Every rank learns every rank's K/V ranges after this step: they describe the ring blocks.
  std::vector<TokenRange> after = kv_->ranges();
  if (local.ok())
    for (const TokenRange& r : ranges) AppendRange(&after, r);
  if (static_cast<int>(after.size()) > kMaxStepRanges) after.clear();
  constexpr int kMetaWidth = 1 + 2 * kMaxStepRanges + 2;
  std::vector<int64_t> meta(kMetaWidth, 0), all_meta(kMetaWidth * static_cast<size_t>(num_ranks));
  meta[0] = static_cast<int64_t>(after.size());
  for (size_t i = 0; i < after.size(); ++i) {
    meta[1 + 2 * i] = after[i].begin;
    meta[2 + 2 * i] = after[i].end;
  }
  meta[kMetaWidth - 2] = local.ok() ? n : 0;
  meta[kMetaWidth - 1] = local.ok() ? 1 : 0;
  MP_RETURN_IF_ERROR(
      comm.HostAllGather(meta.data(), all_meta.data(), sizeof(int64_t) * kMetaWidth));
  MP_RETURN_IF_ERROR(local);
  for (int r = 0; r < num_ranks; ++r)
    MP_REQUIRE(all_meta[static_cast<size_t>(r) * kMetaWidth + kMetaWidth - 1] == 1, "forward: rank ",
               r, " refused its share of the step (its log says why)");
  std::vector<std::vector<TokenRange>> rank_ranges(static_cast<size_t>(num_ranks));
  std::vector<TokenRange> new_ranges;
  int64_t total = 0, max_rows = 0;
  for (int r = 0; r < num_ranks; ++r) {
    const int64_t* m = &all_meta[static_cast<size_t>(r) * kMetaWidth];
    int64_t rows = 0;
    for (int64_t i = 0; i < m[0]; ++i) {
      rank_ranges[r].push_back({m[1 + 2 * i], m[2 + 2 * i]});
      rows += m[2 + 2 * i] - m[1 + 2 * i];
    }
    total += m[kMetaWidth - 2];
    max_rows = std::max(max_rows, rows);
  }
  // The new positions of all ranks together must be exactly [length, length + total).
  for (int r = 0; r < num_ranks; ++r)
    for (const TokenRange& x : rank_ranges[r])
      if (x.end > global_length_) new_ranges.push_back({std::max(x.begin, global_length_), x.end});
  std::sort(new_ranges.begin(), new_ranges.end(),
            [](const TokenRange& a, const TokenRange& b) { return a.begin < b.begin; });
  int64_t expect = global_length_;
  for (const TokenRange& x : new_ranges) {
    MP_REQUIRE(x.begin == expect, "forward: the ranks' new positions do not tile [",
               global_length_, ", ", global_length_ + total, ") (gap or overlap at ", expect, ")");
    expect = x.end;
  }
  MP_REQUIRE(expect == global_length_ + total && total > 0,
             "forward: the ranks' new positions do not tile the step");
  const int64_t global_end = global_length_ + total;
  MP_REQUIRE(global_end <= max_context(), "forward: ", global_end,
             " positions exceed the context limit of ", max_context());

  // Buffers come from StartSequence; they grow here only for steps larger than it planned.
  MP_RETURN_IF_ERROR(EnsureStepBuffers(n));
  MP_RETURN_IF_ERROR(EnsureScratch(std::min(std::max<int64_t>(n, 1), options_.prefill_chunk)));
  if (num_ranks > 1) MP_RETURN_IF_ERROR(EnsureRingBuffers(max_rows));
  MP_RETURN_IF_ERROR(Mark(nullptr));
  MP_ASSIGN_OR_RETURN(ConstTensorView inv_freq, InvFreq(global_end));
  // Host uploads happen here, once per step: nothing inside a layer waits for the host.
  if (n > 0) {
    std::vector<int64_t> positions;
    positions.reserve(static_cast<size_t>(n));
    for (const TokenRange& r : ranges)
      for (int64_t p = r.begin; p < r.end; ++p) positions.push_back(p);
    MP_RETURN_IF_ERROR(b.CopyFromHost(ConstTensorView{positions.data(), DType::kI64, Shape{n}},
                                      SliceRows(positions_.view(), 0, n)));
    MP_RETURN_IF_ERROR(b.CopyFromHost(ConstTensorView{ids.data(), DType::kI32, Shape{n}},
                                      SliceRows(ids_.view(), 0, n)));
    MP_RETURN_IF_ERROR(b.Embedding({SliceRows(ids_.cview(), 0, n), weights_->embed_tokens,
                                    SliceRows(hidden_.view(), 0, n)}));
  }
  MP_RETURN_IF_ERROR(Mark(&stats_.embed_s));
  const std::vector<TokenRange> q_ranges(ranges.begin(), ranges.end());
  const int64_t chunk = options_.prefill_chunk;
  const int64_t local_rows = rows0 + n;
  const int64_t kv_row_bytes =
      c.num_key_value_heads * c.head_dim * static_cast<int64_t>(DTypeSize(options_.kv_dtype));
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    // Phase 1: this rank's queries, and its keys and values into the cache.
    for (int64_t s = 0; s < n; s += chunk)
      MP_RETURN_IF_ERROR(ProjectQkv(layer, s, std::min(n, s + chunk), rows0 + s,
                                    /*store_kv=*/true, inv_freq));
    MP_RETURN_IF_ERROR(Mark(&stats_.qkv_s));
    // Phase 2: attention by the layer's policy. Every head this engine runs is dense (SetPolicy
    // refuses the others), and short prompts are dense under any policy.
    const LayerPolicy& layer_policy = policy_.layers[static_cast<size_t>(layer)];
    for (PrefillPattern p : layer_policy.prefill)
      MP_ASSERT(p == PrefillPattern::kDense || total < policy_.dense_below_tokens,
                "only dense prefill heads reach the ring");
    // Dense heads: ring attention. At step t this rank holds the block of rank (rank - t) mod N
    // and passes it on while receiving the next one.
    MP_RETURN_IF_ERROR(b.ClearState(SliceRows(o_acc_.view(), 0, n),
                                    SliceRows(lse_acc_.view(), 0, n)));
    Block block{kv_->Keys(layer, local_rows), kv_->Values(layer, local_rows), after};
    for (int t = 0; t < num_ranks; ++t) {
      const bool pass_on = t + 1 < num_ranks;
      const int next_origin = ((rank - t - 1) % num_ranks + num_ranks) % num_ranks;
      Block incoming;
      if (pass_on) {
        const std::vector<TokenRange>& in_ranges = rank_ranges[next_origin];
        const int64_t in_rows = TotalSize(in_ranges);
        incoming = {SliceRows(ring_k_[t % 2].cview(), 0, in_rows),
                    SliceRows(ring_v_[t % 2].cview(), 0, in_rows), in_ranges};
        const int next = (rank + 1) % num_ranks, prev = (rank + num_ranks - 1) % num_ranks;
        MP_RETURN_IF_ERROR(comm.StartSendRecv(block.k, next,
                                              SliceRows(ring_k_[t % 2].view(), 0, in_rows), prev));
        MP_RETURN_IF_ERROR(comm.StartSendRecv(block.v, next,
                                              SliceRows(ring_v_[t % 2].view(), 0, in_rows), prev));
        stats_.comm_bytes += 2 * block.k.shape.dims[0] * kv_row_bytes;
      }
      if (n > 0) MP_RETURN_IF_ERROR(AttendBlock(layer, q_ranges, block.k, block.v, block.ranges));
      MP_RETURN_IF_ERROR(Mark(&stats_.attention_s));
      if (pass_on) {
        MP_RETURN_IF_ERROR(comm.WaitAll());
        block = std::move(incoming);
        MP_RETURN_IF_ERROR(Mark(&stats_.comm_wait_s));
      }
    }
    // Phase 3: output projection and MLP, chunk by chunk.
    for (int64_t s = 0; s < n; s += chunk)
      MP_RETURN_IF_ERROR(OutputAndMlp(layer, s, std::min(n, s + chunk), o_acc_.cview()));
    MP_RETURN_IF_ERROR(Mark(&stats_.mlp_s));
    ++stats_.prefill_layers;
    if (after_layer) MP_RETURN_IF_ERROR(AgreeToContinue(after_layer(layer + 1,
                                                                    c.num_hidden_layers)));
  }
  for (const TokenRange& r : ranges) MP_RETURN_IF_ERROR(kv_->Commit(r));
  global_length_ = global_end;

  // Logits on the rank holding the step's last position only.
  int64_t row = 0;
  for (const TokenRange& r : ranges) {
    if (r.end == global_end) {
      MP_RETURN_IF_ERROR(Logits(row + r.size() - 1));
      MP_RETURN_IF_ERROR(Mark(&stats_.logits_s));
      MP_ASSIGN_OR_RETURN(ConstTensorView logits, Reshape(logits_.cview(), Shape{c.vocab_size}));
      return std::optional<ConstTensorView>(logits);
    }
    row += r.size();
  }
  return std::optional<ConstTensorView>();
}

StatusOr<ConstTensorView> Engine::ForwardDecode(int32_t id) {
  MP_REQUIRE(kv_ != nullptr, "decode: no sequence started");
  const ModelConfig& c = config_;
  Backend& b = *backend_;
  Communicator& comm = *comm_;
  const int num_ranks = comm.size();
  MP_REQUIRE(id >= 0 && id < c.vocab_size, "token id ", id, " is outside the vocabulary [0, ",
             c.vocab_size, ")");
  const int64_t position = global_length_;
  MP_REQUIRE(position + 1 <= max_context(), "decode: position ", position,
             " is beyond the context limit of ", max_context());
  const bool owner = ShardPlan::DecodeOwner(position, num_ranks) == comm.rank();
  const int64_t rows0 = kv_->rows();
  const bool fits = !owner || rows0 + 1 <= kv_->capacity();
  if (num_ranks > 1) {
    // Only the owner can tell whether its shard has room; all ranks must stop together if not.
    int32_t flag = fits ? 1 : 0;
    std::vector<int32_t> flags(static_cast<size_t>(num_ranks));
    MP_RETURN_IF_ERROR(comm.HostAllGather(&flag, flags.data(), sizeof(flag)));
    for (int r = 0; r < num_ranks; ++r)
      MP_REQUIRE(flags[r] == 1, "decode: the sequence capacity on rank ", r, " is full");
  }
  MP_REQUIRE(fits, "decode: the sequence capacity of ", kv_->capacity(),
             " positions on this rank is full");
  MP_RETURN_IF_ERROR(EnsureStepBuffers(1));
  MP_RETURN_IF_ERROR(EnsureScratch(1));
  if (num_ranks > 1 && gathered_o_.view().data == nullptr) {
    MP_ASSIGN_OR_RETURN(gathered_o_, b.Allocate(DType::kF32, Shape{num_ranks, 1,
                                                                   c.num_attention_heads,
                                                                   c.head_dim}));
    MP_ASSIGN_OR_RETURN(gathered_lse_,
                        b.Allocate(DType::kF32, Shape{num_ranks, 1, c.num_attention_heads}));
  }
  MP_RETURN_IF_ERROR(Mark(nullptr));
  MP_ASSIGN_OR_RETURN(ConstTensorView inv_freq, InvFreq(position + 1));
  // The step's only host uploads: its token and position.
  TensorView ids_dev = SliceRows(ids_.view(), 0, 1);
  MP_RETURN_IF_ERROR(b.CopyFromHost(ConstTensorView{&id, DType::kI32, Shape{1}}, ids_dev));
  MP_RETURN_IF_ERROR(b.CopyFromHost(ConstTensorView{&position, DType::kI64, Shape{1}},
                                    SliceRows(positions_.view(), 0, 1)));
  MP_RETURN_IF_ERROR(
      b.Embedding({AsConst(ids_dev), weights_->embed_tokens, SliceRows(hidden_.view(), 0, 1)}));
  MP_RETURN_IF_ERROR(Mark(&stats_.embed_s));
  const int64_t visible = rows0 + (owner ? 1 : 0);
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    MP_ASSERT(policy_.layers[static_cast<size_t>(layer)].decode == DecodeRole::kFull,
              "only full decode layers are run");
    MP_RETURN_IF_ERROR(ProjectQkv(layer, 0, 1, rows0, owner, inv_freq));
    MP_RETURN_IF_ERROR(Mark(&stats_.qkv_s));
    // Every key of the sequence precedes (or is) this token, so no mask is needed; a rank
    // without keys contributes the empty state.
    MP_ASSIGN_OR_RETURN(ConstTensorView q, Reshape(SliceRows(q_.cview(), 0, 1),
                                                   Shape{1, c.num_attention_heads, c.head_dim}));
    MP_ASSIGN_OR_RETURN(TensorView o_part, Reshape(SliceRows(o_part_.view(), 0, 1),
                                                   Shape{1, c.num_attention_heads, c.head_dim}));
    TensorView lse_part = SliceRows(lse_part_.view(), 0, 1);
    AttentionArgs a;
    a.q = q;
    a.k = kv_->Keys(layer, visible);
    a.v = kv_->Values(layer, visible);
    a.q_offset = position;
    a.mask = AttentionMask::kNone;
    a.o = o_part;
    a.lse = lse_part;
    MP_RETURN_IF_ERROR(b.Attention(a));
    MP_RETURN_IF_ERROR(Mark(&stats_.attention_s));
    ConstTensorView attention_out = SliceRows(o_part_.cview(), 0, 1);
    if (num_ranks > 1) {
      // Only O(heads x head_dim) values per rank cross the wire, merged by log-sum-exp.
      MP_RETURN_IF_ERROR(comm.AllGather(AsConst(o_part), gathered_o_.view()));
      MP_RETURN_IF_ERROR(comm.AllGather(AsConst(lse_part), gathered_lse_.view()));
      MP_ASSIGN_OR_RETURN(TensorView o_acc, Reshape(SliceRows(o_acc_.view(), 0, 1),
                                                    Shape{1, c.num_attention_heads, c.head_dim}));
      MP_RETURN_IF_ERROR(b.MergeState({gathered_o_.cview(), gathered_lse_.cview(), o_acc,
                                       SliceRows(lse_acc_.view(), 0, 1)}));
      attention_out = SliceRows(o_acc_.cview(), 0, 1);
      stats_.comm_bytes += static_cast<int64_t>(o_part.NumBytes() + lse_part.NumBytes());
      MP_RETURN_IF_ERROR(Mark(&stats_.comm_wait_s));
    }
    MP_RETURN_IF_ERROR(OutputAndMlp(layer, 0, 1, attention_out));
    MP_RETURN_IF_ERROR(Mark(&stats_.mlp_s));
    ++stats_.decode_layers;
  }
  if (owner) MP_RETURN_IF_ERROR(kv_->Commit({position, position + 1}));
  global_length_ = position + 1;
  MP_RETURN_IF_ERROR(Logits(0));
  MP_RETURN_IF_ERROR(Mark(&stats_.logits_s));
  return Reshape(logits_.cview(), Shape{c.vocab_size});
}

StatusOr<ConstTensorView> Engine::Forward(std::span<const int32_t> ids) {
  MP_REQUIRE(comm_->size() == 1, "Forward(ids) is for a single rank; use ForwardShard");
  const TokenRange range{global_length_, global_length_ + static_cast<int64_t>(ids.size())};
  MP_REQUIRE(!ids.empty(), "forward: no tokens");
  MP_ASSIGN_OR_RETURN(std::optional<ConstTensorView> logits,
                      ForwardShard(std::span<const TokenRange>(&range, 1), ids));
  MP_ASSERT(logits.has_value(), "a single rank holds the last position");
  return *logits;
}

Status Engine::ForwardToHost(std::span<const int32_t> ids, std::vector<float>* logits) {
  MP_ASSIGN_OR_RETURN(ConstTensorView dev, Forward(ids));
  logits->resize(static_cast<size_t>(config_.vocab_size));
  return backend_->CopyToHost(dev, TensorView{logits->data(), DType::kF32, dev.shape});
}

}  // namespace millipede
