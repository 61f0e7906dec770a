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

#include "worker/attention/attended_pairs.h"
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

// A store's whole fixed storage, where a recorded step writes its token at the row it uploads.
StatusOr<KvRows> WholeStore(const KvStore& store) {
  return store.FixedRows(store.fixed_capacity());
}

}  // namespace

AttentionEnv Engine::Env(StepProfiler& profiler) {
  return AttentionEnv{*backend_, *comm_,  config(), workspace_->Scratch(),
                      stats_,    profiler, options_.prefill_exchange};
}

Status Engine::Embed(const std::vector<Entry>& entries, int64_t rows) {
  if (rows == 0) return OkStatus();
  MP_RETURN_IF_ERROR(UploadIds(entries, rows));
  return EmbedUploaded(rows);
}

Status Engine::EmbedUploaded(int64_t rows) {
  Workspace& ws = *workspace_;
  return backend_->Embedding({SliceRows(ws.ids.cview(), 0, rows), model_->weights().embed_tokens,
                              SliceRows(ws.hidden.view(), 0, rows)});
}

Status Engine::UploadIds(const std::vector<Entry>& entries, int64_t rows) {
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
  return b.CopyFromHost(ConstTensorView{ids.data(), DType::kI32, Shape{rows}},
                        SliceRows(ws.ids.view(), 0, rows));
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
    const ConstTensorView positions = SliceRows(ws.positions.cview(), 0, 1);
    if (e.graph_rows > 0) {
      MP_ASSIGN_OR_RETURN(const KvRows whole, WholeStore(*store));
      RopeKvArgs a;
      a.q = q;
      a.k = k;
      a.v = v;
      a.positions = positions;
      a.inv_freq = e.inv_freq;
      a.k_rows = {&whole.k, 1};
      a.v_rows = {&whole.v, 1};
      a.cache_rows = ws.decode_rows(0, 1);
      MP_RETURN_IF_ERROR(b.RopeKv(a));
    } else {
      MP_RETURN_IF_ERROR(RopeAndStore(b, store, 0, q, k, v, positions, e.inv_freq));
    }
    e.q = AsConst(q);
    return OkStatus();
  }
  const int64_t chunk = options_.prefill_chunk;
  for (int64_t s = 0; s < rows; s += chunk) {
    const int64_t end = std::min(rows, s + chunk);
    MP_RETURN_IF_ERROR(model_->ProjectQkv(ws, layer, s, end));
    for (size_t i = 0; i < entries.size(); ++i) {
      Entry& e = entries[i];
      const int64_t begin = std::max(s, e.row0), stop = std::min(end, e.row0 + e.rows);
      if (stop <= begin) continue;
      // Decode tokens side by side with the same RoPE table: one op for all of them.
      size_t j = i + 1;
      while (!e.prefill() && j < entries.size() && !entries[j].prefill() &&
             entries[j].row0 < end && entries[j].inv_freq.data == e.inv_freq.data)
        ++j;
      if (j - i > 1 || e.graph_rows > 0) {
        MP_RETURN_IF_ERROR(RopeAndStoreDecode(layer, std::span<Entry>(entries).subspan(i, j - i),
                                              s));
        i = j - 1;
        continue;
      }
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

Status Engine::RopeAndStoreDecode(int64_t layer, std::span<Entry> run, int64_t chunk_begin) {
  const ModelConfig& c = config();
  Workspace& ws = *workspace_;
  const int64_t n = static_cast<int64_t>(run.size()), row0 = run.front().row0;
  std::vector<TensorView> k_rows, v_rows;
  for (Entry& e : run) {
    // Only the rank that owns a token stores it; the others rotate its query alone.
    KvRows rows;
    if (e.graph_rows > 0) {
      MP_ASSIGN_OR_RETURN(rows, WholeStore(e.seq->kv(layer)));
    } else if (e.stored_rows() > 0) {
      MP_ASSIGN_OR_RETURN(rows, e.seq->kv(layer).StepRows(0, 1));
    }
    k_rows.push_back(rows.k);
    v_rows.push_back(rows.v);
  }
  const Shape kv_shape{n, c.num_key_value_heads, c.head_dim};
  RopeKvArgs a;
  MP_ASSIGN_OR_RETURN(a.q, Reshape(SliceRows(ws.q.view(), row0, n),
                                   Shape{n, c.num_attention_heads, c.head_dim}));
  MP_ASSIGN_OR_RETURN(a.k, Reshape(SliceRows(ws.k.cview(), row0 - chunk_begin, n), kv_shape));
  MP_ASSIGN_OR_RETURN(a.v, Reshape(SliceRows(ws.v.cview(), row0 - chunk_begin, n), kv_shape));
  a.positions = SliceRows(ws.positions.cview(), row0, n);
  a.inv_freq = run.front().inv_freq;
  a.k_rows = k_rows;
  a.v_rows = v_rows;
  if (run.front().graph_rows > 0) a.cache_rows = ws.decode_rows(row0, n);
  return backend_->RopeKv(a);
}

Status Engine::DecodePartials(std::span<Entry> run, std::span<const DecodeInput> inputs,
                              AttentionEnv& env, TensorView o, TensorView lse) {
  const int64_t layer = inputs.front().layer;
  const bool recorded = run.front().graph_rows > 0;
  // One token alone runs its strategy (a recorded one reads its lengths from the inputs), unless
  // a recorded step batches it (BatchDecodeAttention's lengths).
  const bool batchable = run[0].seq->attention(layer).decode->batchable();
  if (run.size() == 1 && (!recorded || !batchable))
    return run[0].seq->attention(layer).decode->Partial(env, inputs[0], o, lse);
  // Batchable strategies: every token of the run in one call; the run's queries are consecutive
  // rows of the step's buffer. A recorded step reads the same rows (BatchRows: the store's held
  // rows and the token's) through views of its bucket and the lengths it uploaded.
  const ModelConfig& c = config();
  const int64_t n = static_cast<int64_t>(run.size());
  std::vector<ConstTensorView> k, v;
  k.reserve(run.size());
  v.reserve(run.size());
  for (size_t i = 0; i < run.size(); ++i) {
    ConstKvRows rows;
    if (recorded) {
      MP_ASSIGN_OR_RETURN(const KvRows fixed, inputs[i].store->FixedRows(run[i].graph_rows));
      rows = {AsConst(fixed.k), AsConst(fixed.v)};
    } else {
      MP_ASSIGN_OR_RETURN(rows, run[i].seq->attention(layer).decode->BatchRows(inputs[i]));
    }
    k.push_back(rows.k);
    v.push_back(rows.v);
  }
  BatchDecodeAttentionArgs a;
  // One token's queries may lie elsewhere (the fused Q/K/V output).
  if (n == 1) {
    a.q = inputs[0].q;
  } else {
    MP_ASSIGN_OR_RETURN(a.q, Reshape(SliceRows(workspace_->q.cview(), run.front().row0, n),
                                     Shape{n, c.num_attention_heads, c.head_dim}));
  }
  a.k = k;
  a.v = v;
  a.o = o;
  a.lse = lse;
  const DecodeStrategy::Windows windows = run[0].seq->attention(layer).decode->batch_windows();
  if (windows.window != nullptr) {
    a.kv_head_window = windows.window->data();
    a.sink_tokens = windows.sink;
  }
  if (recorded) a.lengths = workspace_->decode_lengths(run.front().row0, n);
  return env.backend.BatchDecodeAttention(a);
}

Status Engine::AttendDecode(int64_t layer, std::span<Entry> run, AttentionEnv& env) {
  const ModelConfig& c = config();
  Workspace& ws = *workspace_;
  const int64_t n = static_cast<int64_t>(run.size()), row0 = run.front().row0;
  const Shape o_shape{n, c.num_attention_heads, c.head_dim};
  std::vector<DecodeInput> inputs;
  for (Entry& e : run) {
    inputs.push_back({layer, &e.seq->kv(layer), e.stored_rows(), e.q, e.length_before});
    if (e.graph_rows > 0) {
      const int64_t i = e.row0;
      inputs.back().recorded_rows = e.graph_rows;
      inputs.back().recorded_length = ws.decode_lengths(i, 1);
      inputs.back().recorded_generated = ws.decode_generated(i, 1);
    }
  }
  MP_ASSIGN_OR_RETURN(TensorView o_out, Reshape(SliceRows(ws.o_acc.view(), row0, n), o_shape));
  TensorView lse_out = SliceRows(ws.lse_acc.view(), row0, n);
  if (comm_->size() == 1) {
    MP_RETURN_IF_ERROR(DecodePartials(run, inputs, env, o_out, lse_out));
  } else {
    // This rank's partials as o then lse in one buffer, so that one all-gather moves both.
    const int64_t ranks = comm_->size(), heads = c.num_attention_heads;
    const int64_t o_size = n * heads * c.head_dim, per_rank = o_size + n * heads;
    MP_ASSIGN_OR_RETURN(const TensorView send, SubView(env.scratch.partials, 0, Shape{per_rank}));
    MP_ASSIGN_OR_RETURN(const TensorView o_part, SubView(send, 0, o_shape));
    MP_ASSIGN_OR_RETURN(const TensorView lse_part, SubView(send, o_size, Shape{n, heads}));
    MP_RETURN_IF_ERROR(DecodePartials(run, inputs, env, o_part, lse_part));
    MP_RETURN_IF_ERROR(env.profiler.Mark(&stats_.attention_s));
    // Only O(tokens x heads x head_dim) values per rank cross the wire, merged by log-sum-exp
    // where they arrive (each rank's o and lse one buffer apart).
    MP_ASSIGN_OR_RETURN(const TensorView recv,
                        SubView(env.scratch.gathered, 0, Shape{ranks, per_rank}));
    MP_RETURN_IF_ERROR(comm_->AllGather(AsConst(send), recv));
    const float* gathered = recv.as<const float>();
    MergeStateArgs merge{{gathered, DType::kF32, Shape{ranks, n, heads, c.head_dim}},
                         {gathered + o_size, DType::kF32, Shape{ranks, n, heads}},
                         o_out,
                         lse_out,
                         per_rank};
    MP_RETURN_IF_ERROR(backend_->MergeState(merge));
    stats_.comm_bytes += static_cast<int64_t>(send.NumBytes());
    MP_RETURN_IF_ERROR(env.profiler.Mark(&stats_.comm_wait_s));
  }
  for (size_t i = 0; i < run.size(); ++i)
    MP_RETURN_IF_ERROR(run[i].seq->attention(layer).decode->AfterMerge(
        env, inputs[i], AsConst(SliceRows(lse_out, static_cast<int64_t>(i), 1))));
  return env.profiler.Mark(&stats_.attention_s);
}

Status Engine::RunLayer(int64_t layer, std::vector<Entry>& entries, int64_t rows,
                        StepProfiler& profiler) {
  MP_RETURN_IF_ERROR(ProjectLayer(layer, entries, rows));
  // Stores that stage a step's rows move them into place before attention reads them.
  for (Entry& e : entries)
    if (e.stored_rows() > 0 && e.graph_rows == 0)
      MP_RETURN_IF_ERROR(e.seq->kv(layer).EndWrites(e.stored_rows()));
  MP_RETURN_IF_ERROR(profiler.Mark(&stats_.qkv_s));
  AttentionEnv env = Env(profiler);
  Workspace& ws = *workspace_;
  // Decode tokens of consecutive entries with batchable strategies (and equal windows) attend in
  // one call; a merge across ranks takes as many as its buffers hold.
  const size_t max_run =
      comm_->size() == 1 ? entries.size() : static_cast<size_t>(env.scratch.gather_rows);
  auto batchable = [&](const Entry& e) {
    return !e.prefill() && e.seq->attention(layer).decode->batchable();
  };
  for (size_t i = 0; i < entries.size();) {
    Entry& e = entries[i];
    if (!e.prefill()) {
      size_t j = i + 1;
      if (batchable(e)) {
        const DecodeStrategy::Windows windows = e.seq->attention(layer).decode->batch_windows();
        while (j < entries.size() && j - i < max_run && batchable(entries[j]) &&
               entries[j].seq->attention(layer).decode->batch_windows() == windows)
          ++j;
      }
      MP_RETURN_IF_ERROR(AttendDecode(layer, std::span<Entry>(entries).subspan(i, j - i), env));
      i = j;
      continue;
    }
    ++i;
    LayerAttention& la = e.seq->attention(layer);
    PrefillInput in;
    in.layer = layer;
    in.store = &e.seq->kv(layer);
    in.step_rows = e.rows;
    in.q = e.q;
    in.q_ranges = e.ranges;
    in.rank_blocks = e.Blocks(la.retention);
    in.rank_queries = e.rank_step;
    in.length = e.length_after;
    in.step_begin = e.length_before;
    in.o_acc = SliceRows(ws.o_acc.view(), e.row0, e.rows);
    in.lse_acc = SliceRows(ws.lse_acc.view(), e.row0, e.rows);
    in.pairs = &e.seq->prefill_pairs();
    MP_RETURN_IF_ERROR(la.prefill->Run(env, in));
    MP_RETURN_IF_ERROR(la.decode->AfterPrefill(env, in));
  }
  if (options_.attention_observer)
    options_.attention_observer(layer, SliceRows(ws.o_acc.cview(), 0, rows));
  MP_RETURN_IF_ERROR(RunMlp(layer, entries, profiler));
  return profiler.Mark(&stats_.mlp_s);
}

Status Engine::RunMlp(int64_t layer, std::span<const Entry> entries, StepProfiler& profiler) {
  Workspace& ws = *workspace_;
  const int64_t chunk = options_.prefill_chunk;
  const bool split = options_.split_decode_mlp && comm_->size() > 1;
  // Runs of consecutive entries (their rows follow each other) that are all shared decode tokens
  // or all not. The runs are the same on every rank: a prefill entry splits them whether or not
  // it has rows on this rank.
  auto shared = [&](const Entry& e) { return split && !e.prefill(); };
  for (size_t i = 0; i < entries.size();) {
    size_t j = i + 1;
    while (j < entries.size() && shared(entries[j]) == shared(entries[i])) ++j;
    const int64_t begin = entries[i].row0, end = entries[j - 1].row0 + entries[j - 1].rows;
    if (shared(entries[i])) {
      MP_RETURN_IF_ERROR(SplitMlp(layer, begin, end, profiler));
    } else {
      for (int64_t s = begin; s < end; s += chunk)
        MP_RETURN_IF_ERROR(
            model_->OutputAndMlp(ws, layer, s, std::min(end, s + chunk), ws.o_acc.cview()));
    }
    i = j;
  }
  return OkStatus();
}

Status Engine::SplitMlp(int64_t layer, int64_t begin, int64_t end, StepProfiler& profiler) {
  Workspace& ws = *workspace_;
  const AttentionScratch scratch = ws.Scratch();
  const int64_t hidden = config().hidden_size;
  const int ranks = comm_->size();
  const MlpSlice slice = model_->MlpSliceOf(comm_->rank(), ranks);
  // The gather buffers hold gather_rows rows of partials (Workspace::ReserveGather).
  const int64_t chunk =
      std::min({options_.prefill_chunk, ws.scratch_rows(), scratch.gather_rows});
  MP_REQUIRE(chunk > 0, "split MLP: no gather buffers for ", end - begin, " decode rows");
  for (int64_t s = begin; s < end; s += chunk) {
    const int64_t m = std::min(end, s + chunk) - s;
    MP_ASSIGN_OR_RETURN(TensorView partial, SubView(scratch.partials, 0, Shape{m, hidden}));
    MP_RETURN_IF_ERROR(
        model_->OutputAndMlpSlice(ws, layer, s, s + m, ws.o_acc.cview(), slice, partial));
    MP_RETURN_IF_ERROR(profiler.Mark(&stats_.mlp_s));
    MP_ASSIGN_OR_RETURN(const TensorView parts,
                        SubView(scratch.gathered, 0, Shape{ranks, m, hidden}));
    MP_RETURN_IF_ERROR(comm_->AllGather(AsConst(partial), parts));
    stats_.comm_bytes += static_cast<int64_t>(partial.NumBytes());
    MP_RETURN_IF_ERROR(profiler.Mark(&stats_.comm_wait_s));
    MP_RETURN_IF_ERROR(
        backend_->AddParts({AsConst(parts), 0, SliceRows(ws.hidden.view(), s, m)}));
    ++stats_.split_mlp_passes;
  }
  return OkStatus();
}

StatusOr<StepOutput> Engine::RunStep(const StepPlan& plan, const LayerCallback& after_layer) {
  MP_ASSIGN_OR_RETURN(std::vector<Entry> entries, PrepareStep(plan));
  model_->BeginStep();
  int64_t rows = 0;
  bool prefill = false, decode = false;
  for (Entry& e : entries) {
    rows += e.rows;
    (e.prefill() ? prefill : decode) = true;
    if (!e.prefill()) e.seq->BeginDecode();
    MP_ASSIGN_OR_RETURN(e.inv_freq, model_->InvFreq(e.length_after));
  }
  if (Recordable(entries)) {
    MP_RETURN_IF_ERROR(RunRecordable(entries));
    return FinishStep(entries, false);
  }
  StepProfiler profiler(*backend_, options_.profile);
  MP_RETURN_IF_ERROR(profiler.Mark(nullptr));
  MP_RETURN_IF_ERROR(Embed(entries, rows));
  MP_RETURN_IF_ERROR(profiler.Mark(&stats_.embed_s));
  const int64_t layers = config().num_hidden_layers;
  for (int64_t layer = 0; layer < layers; ++layer) {
    MP_RETURN_IF_ERROR(RunLayer(layer, entries, rows, profiler));
    if (prefill) ++stats_.prefill_layers;
    if (decode) ++stats_.decode_layers;
    if (after_layer && prefill) MP_RETURN_IF_ERROR(AgreeToContinue(after_layer(layer + 1, layers)));
  }
  MP_RETURN_IF_ERROR(ComputeLogits(entries));
  MP_RETURN_IF_ERROR(profiler.Mark(&stats_.logits_s));
  return FinishStep(entries, prefill);
}

Status Engine::ComputeLogits(const std::vector<Entry>& entries) {
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
  return OkStatus();
}

StatusOr<StepOutput> Engine::FinishStep(std::vector<Entry>& entries, bool prefill) {
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
  if (prefill) {
    MP_ASSIGN_OR_RETURN(out.prefill, PrefillDensities(entries));
  } else {
    out.prefill.resize(entries.size());
  }
  return out;
}

StatusOr<std::vector<PrefillDensity>> Engine::PrefillDensities(std::vector<Entry>& entries) {
  const ModelConfig& c = config();
  std::vector<int64_t> local(entries.size(), 0);
  for (size_t i = 0; i < entries.size(); ++i) {
    Entry& e = entries[i];
    if (!e.prefill()) continue;
    const TokenRange step{e.length_before, e.length_after};
    e.seq->causal_pairs +=
        c.num_hidden_layers * c.num_key_value_heads * CausalPairs(std::span(&step, 1));
    MP_ASSIGN_OR_RETURN(local[i], e.seq->AttendedPairs(*backend_));
  }
  // Each rank counted its own queries.
  std::vector<int64_t> total = local;
  if (comm_->size() > 1) {
    std::vector<int64_t> all(local.size() * static_cast<size_t>(comm_->size()));
    MP_RETURN_IF_ERROR(
        comm_->HostAllGather(local.data(), all.data(), local.size() * sizeof(int64_t)));
    for (size_t i = 0; i < local.size(); ++i) {
      total[i] = 0;
      for (int r = 0; r < comm_->size(); ++r) total[i] += all[r * local.size() + i];
    }
  }
  std::vector<PrefillDensity> out(entries.size());
  for (size_t i = 0; i < entries.size(); ++i)
    if (entries[i].prefill()) out[i] = {total[i], entries[i].seq->causal_pairs};
  return out;
}

}  // namespace millipede
