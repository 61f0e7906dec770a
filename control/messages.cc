#include "control/messages.h"

#include "control/wire.h"

namespace millipede::control {
namespace {

// Each message's fields, in wire order, for both ByteWriter and ByteReader (control/wire.h).
// Parts come before the messages that hold them (unqualified calls inside a template see only
// what is declared above it).

template <class Io, MessageOf<AShapeParams> P>
void Fields(Io& io, P& p) {
  io.Field(p.sink_tokens);
  io.Field(p.window_tokens);
}

template <class Io, MessageOf<VerticalSlashParams> P>
void Fields(Io& io, P& p) {
  io.Field(p.last_queries);
  io.Field(p.vertical);
  io.Field(p.slash);
}

template <class Io, MessageOf<BlockSparseParams> P>
void Fields(Io& io, P& p) {
  io.Field(p.block);
  io.Field(p.top_blocks);
}

template <class Io, MessageOf<AntidiagonalParams> P>
void Fields(Io& io, P& p) {
  io.Field(p.block);
  io.Field(p.stride);
  io.Field(p.mass_permille);
}

template <class Io, MessageOf<FilterParams> P>
void Fields(Io& io, P& p) {
  io.Field(p.top_k);
}

template <class Io, MessageOf<StaticEvictionParams> P>
void Fields(Io& io, P& p) {
  io.Field(p.keep_tokens);
  io.Field(p.recent_tokens);
  io.Field(p.observed_queries);
}

template <class Io, class E>
void PatternOrRole(Io& io, E& value) {
  if constexpr (std::is_same_v<std::remove_const_t<E>, PrefillPattern>) {
    io.Enum(value, PrefillPattern{0}, static_cast<PrefillPattern>(kNumPrefillPatterns - 1));
  } else {
    static_assert(std::is_same_v<std::remove_const_t<E>, DecodeRole>);
    io.Enum(value, DecodeRole{0}, static_cast<DecodeRole>(kNumDecodeRoles - 1));
  }
}

template <class Io, MessageOf<HeadPrefillPolicy> H>
void Fields(Io& io, H& h) {
  PatternOrRole(io, h.pattern);
  Fields(io, h.a_shape);
  Fields(io, h.vertical_slash);
  Fields(io, h.block_sparse);
  Fields(io, h.antidiagonal);
}

template <class Io, MessageOf<LayerPolicy> L>
void Fields(Io& io, L& l) {
  io.List(l.prefill, [&](auto& head) { Fields(io, head); });
  io.List(l.decode, [&](auto& role) { PatternOrRole(io, role); });
}

template <class Io, MessageOf<AttentionPolicy> P>
void Fields(Io& io, P& p) {
  io.List(p.layers, [&](auto& layer) { Fields(io, layer); });
  io.Field(p.dense_below_tokens);
  io.Field(p.fp8_attention);
  Fields(io, p.filter);
  Fields(io, p.streaming_head);
  Fields(io, p.static_eviction);
}

template <class Io, MessageOf<PolicyCapabilities> C>
void Fields(Io& io, C& c) {
  io.List(c.prefill, [&](auto& pattern) { PatternOrRole(io, pattern); });
  io.List(c.decode, [&](auto& role) { PatternOrRole(io, role); });
  io.Field(c.mixed_decode_layers);
  io.Field(c.fp8_attention);
}

template <class Io, MessageOf<SamplingParams> P>
void Fields(Io& io, P& p) {
  io.Field(p.temperature);
  io.Field(p.top_k);
  io.Field(p.top_p);
  io.Field(p.seed);
  io.Field(p.repetition_penalty);
  io.Field(p.presence_penalty);
  io.Field(p.frequency_penalty);
  io.Field(p.min_p);
  io.Field(p.logit_bias);
  io.Field(p.logprobs);
}

template <class Io, MessageOf<JobDescriptor> M>
void Fields(Io& io, M& m) {
  io.Field(m.job_id);
  io.Field(m.prompt_ids);
  io.Field(m.max_new_tokens);
  Fields(io, m.sampling);
  io.Field(m.stop_ids);
  io.Field(m.ignore_eos);
  io.Optional(m.policy, [&](auto& policy) { Fields(io, policy); });
}

template <class Io, MessageOf<JobCancel> M>
void Fields(Io& io, M& m) {
  io.Field(m.job_id);
}

template <class Io, MessageOf<CacheEntryFacts> M>
void Fields(Io& io, M& m) {
  io.Field(m.entry);
  io.Field(m.key);
  io.Field(m.model_key);
  io.Field(m.tokens);
  io.Field(m.every_length);
  io.Field(m.lengths);
  io.Field(m.length);
  io.Field(m.stored);
}

template <class Io, MessageOf<WorkerHello> M>
void Fields(Io& io, M& m) {
  io.Field(m.rank);
  io.Field(m.status_code);
  io.Field(m.error);
  io.Field(m.vocab_size);
  io.Field(m.max_context);
  io.Field(m.kv_capacity_tokens);
  io.Field(m.eos_ids);
  io.Field(m.backend);
  io.Field(m.num_layers);
  io.Field(m.num_kv_heads);
  Fields(io, m.default_policy);
  io.Field(m.kv_dtype);
  io.Field(m.selected_kv_host);
  io.Field(m.kv_position_bytes);
  io.Field(m.kv_share_unit_rows);
  io.Field(m.cache_host_bytes);
  io.Field(m.cache_disk_bytes);
  io.List(m.disk_entries, [&](auto& e) { Fields(io, e); });
  io.Field(m.weights_fingerprint);
  Fields(io, m.capabilities);
}

template <class Io, MessageOf<StepStart> M>
void Fields(Io& io, M& m) {
  Fields(io, m.job);
  io.Field(m.capacity_per_rank);
  io.Field(m.step_tokens);
  io.Field(m.prefix_from);
  io.Field(m.prefix_tokens);
  io.Field(m.keep);
  io.Field(m.prefix_take);
  io.Field(m.prefix_share);
}

template <class Io, MessageOf<StepEntry> M>
void Fields(Io& io, M& m) {
  io.Field(m.job_id);
  io.Enum(m.kind, StepEntryKind::kPrefill, StepEntryKind::kDecode);
  io.Field(m.begin);
  io.Field(m.count);
}

template <class Io, MessageOf<StepPlan> M>
void Fields(Io& io, M& m) {
  io.Field(m.step_id);
  io.Field(m.demotes);
  io.List(m.spills, [&](auto& e) { Fields(io, e); });
  io.Field(m.drops);
  io.Field(m.ends);
  io.Field(m.keeps);
  io.List(m.starts, [&](auto& start) { Fields(io, start); });
  io.List(m.entries, [&](auto& entry) { Fields(io, entry); });
  io.Field(m.promotes);
}

template <class Io, MessageOf<JobProgress> M>
void Fields(Io& io, M& m) {
  io.Field(m.job_id);
  io.Field(m.tokens_done);
  io.Field(m.tokens_total);
}

template <class Io, MessageOf<StepJobResult> M>
void Fields(Io& io, M& m) {
  io.Field(m.job_id);
  io.Enum(m.outcome, StepOutcome::kPrefilled, StepOutcome::kFailed);
  io.Field(m.token);
  io.Field(m.logprob);
  io.Field(m.top_ids);
  io.Field(m.top_logprobs);
  io.Field(m.finished);
  io.Field(m.finished_by_stop);
  io.Field(m.status_code);
  io.Field(m.message);
  io.Field(m.prefill_attended_pairs);
  io.Field(m.prefill_causal_pairs);
}

template <class Io, MessageOf<StepDone> M>
void Fields(Io& io, M& m) {
  io.Field(m.step_id);
  io.Field(m.status_code);
  io.Field(m.message);
  io.List(m.jobs, [&](auto& job) { Fields(io, job); });
  io.Field(m.seconds);
}

template <class Io, MessageOf<WorkerStats> M>
void Fields(Io& io, M& m) {
  io.Field(m.rank);
  io.Field(m.kv_bytes_gpu);
  io.Field(m.kv_bytes_host);
  io.Field(m.attention_s);
  io.Field(m.comm_s);
  io.Field(m.comm_bytes);
  io.Field(m.steps_run);
  io.Field(m.running_jobs);
  io.Field(m.cache_bytes_gpu);
  io.Field(m.cache_bytes_host);
  io.Field(m.cache_bytes_disk);
  io.Field(m.cache_save_s);
  io.Field(m.cache_write_s);
  io.Field(m.cache_load_s);
  io.Field(m.promoted);
  io.Field(m.promote_failed);
}

template <class M>
std::vector<char> EncodeFields(const M& m) {
  ByteWriter w;
  Fields(w, m);
  return w.Take();
}

template <class M>
Status DecodeFields(const std::vector<char>& bytes, M* m) {
  ByteReader r(bytes);
  Fields(r, *m);
  return r.Finish();
}

// The checks a starting job's descriptor gets beyond its bytes.
Status CheckDescriptor(const JobDescriptor& m) {
  Status sampling = CheckSamplingParams(m.sampling);
  if (!sampling.ok()) return InvalidArgumentError("control message: " + sampling.message());
  if (!m.policy) return OkStatus();
  // The coordinator checked it against the model; here only that it is whole and keeps the
  // rules (the worker checks the shape against its own model before running it).
  const AttentionPolicy& p = *m.policy;
  const int64_t heads = p.layers.empty() ? 0 : static_cast<int64_t>(p.layers[0].prefill.size());
  return ValidateAttentionPolicy(p, static_cast<int64_t>(p.layers.size()), heads,
                                 "control message: the job's attention policy");
}

}  // namespace

std::vector<char> Encode(const JobDescriptor& m) { return EncodeFields(m); }
std::vector<char> Encode(const StepPlan& m) { return EncodeFields(m); }
std::vector<char> Encode(const JobCancel& m) { return EncodeFields(m); }
std::vector<char> Encode(const WorkerHello& m) { return EncodeFields(m); }
std::vector<char> Encode(const JobProgress& m) { return EncodeFields(m); }
std::vector<char> Encode(const StepDone& m) { return EncodeFields(m); }
std::vector<char> Encode(const WorkerStats& m) { return EncodeFields(m); }

Status Decode(const std::vector<char>& bytes, JobDescriptor* m) {
  MP_RETURN_IF_ERROR(DecodeFields(bytes, m));
  return CheckDescriptor(*m);
}

Status Decode(const std::vector<char>& bytes, StepPlan* m) {
  MP_RETURN_IF_ERROR(DecodeFields(bytes, m));
  for (const StepStart& start : m->starts) MP_RETURN_IF_ERROR(CheckDescriptor(start.job));
  return OkStatus();
}

Status Decode(const std::vector<char>& bytes, JobCancel* m) { return DecodeFields(bytes, m); }
Status Decode(const std::vector<char>& bytes, WorkerHello* m) { return DecodeFields(bytes, m); }
Status Decode(const std::vector<char>& bytes, JobProgress* m) { return DecodeFields(bytes, m); }
Status Decode(const std::vector<char>& bytes, StepDone* m) {
  MP_RETURN_IF_ERROR(DecodeFields(bytes, m));
  for (const StepJobResult& j : m->jobs) {
    MP_REQUIRE(j.prefill_attended_pairs >= 0 && j.prefill_causal_pairs >= 0,
               "control message: job ", j.job_id, "'s prefill pairs are negative");
    MP_REQUIRE(j.top_ids.size() == j.top_logprobs.size() &&
                   j.top_ids.size() <= static_cast<size_t>(kMaxTopLogprobs),
               "control message: job ", j.job_id, "'s token has ", j.top_ids.size(),
               " top ids and ", j.top_logprobs.size(), " top logprobs (at most ", kMaxTopLogprobs,
               ")");
  }
  return OkStatus();
}
Status Decode(const std::vector<char>& bytes, WorkerStats* m) { return DecodeFields(bytes, m); }

}  // namespace millipede::control
