// Engine::RunStep: one pass over the layers for every entry of a step plan. Per layer:
//  1. Q/K/V projections over all the step's rows, chunk by chunk; RoPE, and each entry's new K/V
//     into its sequence's store for the layer;
//  2. attention per entry by the layer's strategy: a prefill entry's ring (or other pattern) over
//     every rank's K/V, a decode entry's partial on each rank merged by log-sum-exp across ranks;
//  3. the output projection and the MLP over all the step's rows, chunk by chunk.
// Activations beyond the residual stream, the queries and the accumulators are O(chunk x
// intermediate). No host synchronisation inside a layer: ids and positions are uploaded once per
// step, ring transfers are ordered against compute by events.
#include <algorithm>

#include "worker/engine/engine_entry.h"

namespace millipede {
namespace {

// RoPE of queries `q` [m, heads, head_dim] (in place) and, with a store, of keys `k` stored with
// values `v` ([m, kv_heads, head_dim]) into the step's rows [offset, offset + m): one op.
Status RopeAndStore(Backend& b, KvStore* store, int64_t offset, TensorView q, ConstTensorView k,
                    ConstTensorView v, ConstTensorView positions, ConstTensorView inv_freq) {
  if (store == nullptr) return b.Rope({q, positions, inv_freq});
  MP_ASSIGN_OR_RETURN(KvRows rows, store->StepRows(offset, q.dim(0)));
  return b.RopeKv({q, k, v, positions, inv_freq, rows.k, rows.v});
}

}  // namespace

AttentionEnv Engine::Env(StepProfiler& profiler) {
  return AttentionEnv{*backend_, *comm_, config(), workspace_->Scratch(), stats_, profiler};
}

Status Engine::Embed(const std::vector<Entry>& entries, int64_t rows) {
  if (rows == 0) return OkStatus();
  std::vector<int64_t> positions;
  std::vector<int32_t> ids;
  positions.reserve(static_cast<size_t>(rows));
  for (const Entry& e : entries) {
    if (e.prefill()) {
      for (const TokenRange& r : e.ranges)
        for (int64_t p = r.begin; p < r.end; ++p) positions.push_back(p);
    } else {
      positions.push_back(e.length_before);
    }
    ids.insert(ids.end(), e.step->ids.begin(), e.step->ids.end());
  }
  Workspace& ws = *workspace_;
  Backend& b = *backend_;
  MP_RETURN_IF_ERROR(b.CopyFromHost(ConstTensorView{positions.data(), DType::kI64, Shape{rows}},
                                    SliceRows(ws.positions.view(), 0, rows)));
  MP_RETURN_IF_ERROR(b.CopyFromHost(ConstTensorView{ids.data(), DType::kI32, Shape{rows}},
                                    SliceRows(ws.ids.view(), 0, rows)));
  return b.Embedding({SliceRows(ws.ids.cview(), 0, rows), model_->weights().embed_tokens,
                      SliceRows(ws.hidden.view(), 0, rows)});
}

Status Engine::ProjectLayer(int64_t layer, std::vector<Entry>& entries, int64_t rows) {
  const ModelConfig& c = config();
  Workspace& ws = *workspace_;
  Backend& b = *backend_;
  const Shape q1{1, c.num_attention_heads, c.head_dim};
  if (entries.size() == 1 && !entries[0].prefill() && model_->CanFuseQkv(layer)) {
    // One decode token: one GEMM over the fused Q/K/V weights; its queries stay in ws.qkv.
    Entry& e = entries[0];
    MP_RETURN_IF_ERROR(model_->ProjectQkvFused(ws, layer));
    const int64_t q_width = c.num_attention_heads * c.head_dim;
    const int64_t kv_width = c.num_key_value_heads * c.head_dim;
    const Shape kv1{1, c.num_key_value_heads, c.head_dim};
    TensorView qkv = SliceRows(ws.qkv.view(), 0, 1);
    MP_ASSIGN_OR_RETURN(TensorView q, SubView(qkv, 0, q1));
    MP_ASSIGN_OR_RETURN(ConstTensorView k, SubView(AsConst(qkv), q_width, kv1));
    MP_ASSIGN_OR_RETURN(ConstTensorView v, SubView(AsConst(qkv), q_width + kv_width, kv1));
    KvStore* store = e.stored_rows() > 0 ? &e.seq->kv(layer) : nullptr;
    MP_RETURN_IF_ERROR(RopeAndStore(b, store, 0, q, k, v, SliceRows(ws.positions.cview(), 0, 1),
                                    e.inv_freq));
    e.q = AsConst(q);
    return OkStatus();
  }
  const int64_t chunk = options_.prefill_chunk;
  for (int64_t s = 0; s < rows; s += chunk) {
    const int64_t end = std::min(rows, s + chunk);
    MP_RETURN_IF_ERROR(model_->ProjectQkv(ws, layer, s, end));
    for (Entry& e : entries) {
      const int64_t begin = std::max(s, e.row0), stop = std::min(end, e.row0 + e.rows);
      if (stop <= begin) continue;
      const int64_t m = stop - begin;
      MP_ASSIGN_OR_RETURN(TensorView q, Reshape(SliceRows(ws.q.view(), begin, m),
                                                Shape{m, c.num_attention_heads, c.head_dim}));
      const Shape kv_shape{m, c.num_key_value_heads, c.head_dim};
      MP_ASSIGN_OR_RETURN(ConstTensorView k, Reshape(SliceRows(ws.k.cview(), begin - s, m),
                                                     kv_shape));
      MP_ASSIGN_OR_RETURN(ConstTensorView v, Reshape(SliceRows(ws.v.cview(), begin - s, m),
                                                     kv_shape));
      KvStore* store = e.stored_rows() > 0 ? &e.seq->kv(layer) : nullptr;
      MP_RETURN_IF_ERROR(RopeAndStore(b, store, begin - e.row0, q, k, v,
                                      SliceRows(ws.positions.cview(), begin, m), e.inv_freq));
    }
  }
  for (Entry& e : entries) {
    const ConstTensorView rows_q = SliceRows(ws.q.cview(), e.row0, e.rows);
    if (e.prefill()) {
      e.q = rows_q;
    } else {
      MP_ASSIGN_OR_RETURN(e.q, Reshape(rows_q, q1));
    }
  }
  return OkStatus();
}

Status Engine::AttendDecode(int64_t layer, Entry& e, AttentionEnv& env) {
  const ModelConfig& c = config();
  Workspace& ws = *workspace_;
  const Shape o_shape{1, c.num_attention_heads, c.head_dim};
  DecodeInput in{layer, &e.seq->kv(layer), e.stored_rows(), e.q, e.length_before};
  DecodeStrategy& strategy = *e.seq->attention(layer).decode;
  MP_ASSIGN_OR_RETURN(TensorView o_out, Reshape(SliceRows(ws.o_acc.view(), e.row0, 1), o_shape));
  TensorView lse_out = SliceRows(ws.lse_acc.view(), e.row0, 1);
  if (comm_->size() == 1) {
    MP_RETURN_IF_ERROR(strategy.Partial(env, in, o_out, lse_out));
    MP_RETURN_IF_ERROR(strategy.AfterMerge(env, in, AsConst(lse_out)));
    return env.profiler.Mark(&stats_.attention_s);
  }
  MP_ASSIGN_OR_RETURN(TensorView o_part, Reshape(SliceRows(ws.o_part.view(), 0, 1), o_shape));
  TensorView lse_part = SliceRows(ws.lse_part.view(), 0, 1);
  MP_RETURN_IF_ERROR(strategy.Partial(env, in, o_part, lse_part));
  MP_RETURN_IF_ERROR(env.profiler.Mark(&stats_.attention_s));
  // Only O(heads x head_dim) values per rank cross the wire, merged by log-sum-exp.
  MP_RETURN_IF_ERROR(comm_->AllGather(AsConst(o_part), env.scratch.gathered_o));
  MP_RETURN_IF_ERROR(comm_->AllGather(AsConst(lse_part), env.scratch.gathered_lse));
  MP_RETURN_IF_ERROR(backend_->MergeState({AsConst(env.scratch.gathered_o),
                                           AsConst(env.scratch.gathered_lse), o_out, lse_out}));
  stats_.comm_bytes += static_cast<int64_t>(o_part.NumBytes() + lse_part.NumBytes());
  MP_RETURN_IF_ERROR(env.profiler.Mark(&stats_.comm_wait_s));
  MP_RETURN_IF_ERROR(strategy.AfterMerge(env, in, AsConst(lse_out)));
  return env.profiler.Mark(&stats_.attention_s);
}

Status Engine::RunLayer(int64_t layer, std::vector<Entry>& entries, int64_t rows,
                        StepProfiler& profiler) {
  MP_RETURN_IF_ERROR(ProjectLayer(layer, entries, rows));
  MP_RETURN_IF_ERROR(profiler.Mark(&stats_.qkv_s));
  AttentionEnv env = Env(profiler);
  Workspace& ws = *workspace_;
  for (Entry& e : entries) {
    if (!e.prefill()) {
      MP_RETURN_IF_ERROR(AttendDecode(layer, e, env));
      continue;
    }
    LayerAttention& la = e.seq->attention(layer);
    PrefillInput in;
    in.layer = layer;
    in.store = &e.seq->kv(layer);
    in.step_rows = e.rows;
    in.q = e.q;
    in.q_ranges = e.ranges;
    in.rank_blocks = e.Blocks(la.retention);
    in.length = e.length_after;
    in.step_begin = e.length_before;
    in.o_acc = SliceRows(ws.o_acc.view(), e.row0, e.rows);
    in.lse_acc = SliceRows(ws.lse_acc.view(), e.row0, e.rows);
    MP_RETURN_IF_ERROR(la.prefill->Run(env, in));
    MP_RETURN_IF_ERROR(la.decode->AfterPrefill(env, in));
  }
  const int64_t chunk = options_.prefill_chunk;
  for (int64_t s = 0; s < rows; s += chunk)
    MP_RETURN_IF_ERROR(
        model_->OutputAndMlp(ws, layer, s, std::min(rows, s + chunk), ws.o_acc.cview()));
  return profiler.Mark(&stats_.mlp_s);
}

StatusOr<StepOutput> Engine::RunStep(const StepPlan& plan, const LayerCallback& after_layer) {
  MP_ASSIGN_OR_RETURN(std::vector<Entry> entries, PrepareStep(plan));
  StepProfiler profiler(*backend_, options_.profile);
  MP_RETURN_IF_ERROR(profiler.Mark(nullptr));
  model_->BeginStep();
  int64_t rows = 0;
  bool prefill = false, decode = false;
  for (Entry& e : entries) {
    rows += e.rows;
    (e.prefill() ? prefill : decode) = true;
    if (!e.prefill()) e.seq->BeginDecode();
    MP_ASSIGN_OR_RETURN(e.inv_freq, model_->InvFreq(e.length_after));
  }
  MP_RETURN_IF_ERROR(Embed(entries, rows));
  MP_RETURN_IF_ERROR(profiler.Mark(&stats_.embed_s));
  const int64_t layers = config().num_hidden_layers;
  for (int64_t layer = 0; layer < layers; ++layer) {
    MP_RETURN_IF_ERROR(RunLayer(layer, entries, rows, profiler));
    if (prefill) ++stats_.prefill_layers;
    if (decode) ++stats_.decode_layers;
    if (after_layer && prefill) MP_RETURN_IF_ERROR(AgreeToContinue(after_layer(layer + 1, layers)));
  }
  // Logits of runs of entries whose rows follow each other (a batch of decode tokens) in one
  // LM-head GEMM each.
  for (size_t i = 0; i < entries.size();) {
    if (entries[i].logit_row < 0) {
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < entries.size() && entries[j].logit_row == entries[j - 1].logit_row + 1 &&
           entries[j].logits_step_row == entries[j - 1].logits_step_row + 1)
      ++j;
    MP_RETURN_IF_ERROR(model_->Logits(*workspace_, entries[i].logits_step_row,
                                      entries[i].logit_row, static_cast<int64_t>(j - i)));
    i = j;
  }
  MP_RETURN_IF_ERROR(profiler.Mark(&stats_.logits_s));
  StepOutput out;
  for (Entry& e : entries) {
    MP_RETURN_IF_ERROR(e.seq->Commit(e.ranges, e.length_after));
    std::optional<ConstTensorView> logits;
    if (e.logit_row >= 0) {
      MP_ASSIGN_OR_RETURN(logits, Reshape(SliceRows(workspace_->logits.cview(), e.logit_row, 1),
                                          Shape{config().vocab_size}));
    }
    out.logits.push_back(logits);
  }
  return out;
}

}  // namespace millipede
