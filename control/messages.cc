#include "control/messages.h"

#include "control/wire.h"

namespace millipede::control {

std::vector<char> Encode(const JobDescriptor& m) {
  ByteWriter w;
  w.Put(m.job_id);
  w.PutVector(m.prompt_ids);
  w.Put(m.max_new_tokens);
  w.Put(m.temperature);
  w.Put(m.top_k);
  w.Put(m.top_p);
  w.Put(m.seed);
  w.PutVector(m.stop_ids);
  w.Put<uint8_t>(m.ignore_eos ? 1 : 0);
  w.PutString(m.policy_json);
  return w.Take();
}

Status Decode(const std::vector<char>& bytes, JobDescriptor* m) {
  ByteReader r(bytes);
  uint8_t ignore_eos = 0;
  MP_RETURN_IF_ERROR(r.Get(&m->job_id));
  MP_RETURN_IF_ERROR(r.GetVector(&m->prompt_ids));
  MP_RETURN_IF_ERROR(r.Get(&m->max_new_tokens));
  MP_RETURN_IF_ERROR(r.Get(&m->temperature));
  MP_RETURN_IF_ERROR(r.Get(&m->top_k));
  MP_RETURN_IF_ERROR(r.Get(&m->top_p));
  MP_RETURN_IF_ERROR(r.Get(&m->seed));
  MP_RETURN_IF_ERROR(r.GetVector(&m->stop_ids));
  MP_RETURN_IF_ERROR(r.Get(&ignore_eos));
  m->ignore_eos = ignore_eos != 0;
  MP_RETURN_IF_ERROR(r.GetString(&m->policy_json));
  return r.ExpectEnd();
}

std::vector<char> Encode(const JobCancel& m) {
  ByteWriter w;
  w.Put(m.job_id);
  return w.Take();
}

Status Decode(const std::vector<char>& bytes, JobCancel* m) {
  ByteReader r(bytes);
  MP_RETURN_IF_ERROR(r.Get(&m->job_id));
  return r.ExpectEnd();
}

std::vector<char> Encode(const WorkerHello& m) {
  ByteWriter w;
  w.Put(m.rank);
  w.Put(m.status_code);
  w.PutString(m.error);
  w.Put(m.vocab_size);
  w.Put(m.max_context);
  w.Put(m.kv_capacity_tokens);
  w.PutVector(m.eos_ids);
  w.PutString(m.backend);
  w.Put(m.num_layers);
  w.Put(m.num_kv_heads);
  return w.Take();
}

Status Decode(const std::vector<char>& bytes, WorkerHello* m) {
  ByteReader r(bytes);
  MP_RETURN_IF_ERROR(r.Get(&m->rank));
  MP_RETURN_IF_ERROR(r.Get(&m->status_code));
  MP_RETURN_IF_ERROR(r.GetString(&m->error));
  MP_RETURN_IF_ERROR(r.Get(&m->vocab_size));
  MP_RETURN_IF_ERROR(r.Get(&m->max_context));
  MP_RETURN_IF_ERROR(r.Get(&m->kv_capacity_tokens));
  MP_RETURN_IF_ERROR(r.GetVector(&m->eos_ids));
  MP_RETURN_IF_ERROR(r.GetString(&m->backend));
  MP_RETURN_IF_ERROR(r.Get(&m->num_layers));
  MP_RETURN_IF_ERROR(r.Get(&m->num_kv_heads));
  return r.ExpectEnd();
}

std::vector<char> Encode(const JobEvent& m) {
  ByteWriter w;
  w.Put(static_cast<uint8_t>(m.kind));
  w.Put(m.job_id);
  w.Put(m.tokens_done);
  w.Put(m.tokens_total);
  w.Put(m.token);
  w.Put<uint8_t>(m.finished_by_stop ? 1 : 0);
  w.Put(m.ttft_s);
  w.Put(m.decode_s);
  w.Put(m.status_code);
  w.PutString(m.message);
  return w.Take();
}

Status Decode(const std::vector<char>& bytes, JobEvent* m) {
  ByteReader r(bytes);
  uint8_t kind = 0, by_stop = 0;
  MP_RETURN_IF_ERROR(r.Get(&kind));
  MP_REQUIRE(kind >= 1 && kind <= 4, "control message: unknown job event kind ", int{kind});
  m->kind = static_cast<JobEventKind>(kind);
  MP_RETURN_IF_ERROR(r.Get(&m->job_id));
  MP_RETURN_IF_ERROR(r.Get(&m->tokens_done));
  MP_RETURN_IF_ERROR(r.Get(&m->tokens_total));
  MP_RETURN_IF_ERROR(r.Get(&m->token));
  MP_RETURN_IF_ERROR(r.Get(&by_stop));
  m->finished_by_stop = by_stop != 0;
  MP_RETURN_IF_ERROR(r.Get(&m->ttft_s));
  MP_RETURN_IF_ERROR(r.Get(&m->decode_s));
  MP_RETURN_IF_ERROR(r.Get(&m->status_code));
  MP_RETURN_IF_ERROR(r.GetString(&m->message));
  return r.ExpectEnd();
}

std::vector<char> Encode(const WorkerStats& m) {
  ByteWriter w;
  w.Put(m.rank);
  w.Put(m.kv_bytes_gpu);
  w.Put(m.kv_bytes_host);
  w.Put(m.attention_s);
  w.Put(m.comm_s);
  w.Put(m.comm_bytes);
  w.Put(m.jobs_run);
  w.Put(m.running_job);
  return w.Take();
}

Status Decode(const std::vector<char>& bytes, WorkerStats* m) {
  ByteReader r(bytes);
  MP_RETURN_IF_ERROR(r.Get(&m->rank));
  MP_RETURN_IF_ERROR(r.Get(&m->kv_bytes_gpu));
  MP_RETURN_IF_ERROR(r.Get(&m->kv_bytes_host));
  MP_RETURN_IF_ERROR(r.Get(&m->attention_s));
  MP_RETURN_IF_ERROR(r.Get(&m->comm_s));
  MP_RETURN_IF_ERROR(r.Get(&m->comm_bytes));
  MP_RETURN_IF_ERROR(r.Get(&m->jobs_run));
  MP_RETURN_IF_ERROR(r.Get(&m->running_job));
  return r.ExpectEnd();
}

}  // namespace millipede::control
