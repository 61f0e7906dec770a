// LayerLoop: one pass over the layers for every entry of a step plan. Per layer:
//  1. Q/K/V projections over all the step's rows, chunk by chunk; RoPE, and each entry's new K/V
//     into its sequence's store for the layer;
//  2. attention per entry by the layer's strategy: a prefill entry's ring (or other pattern) over
//     every rank's K/V, a decode entry's partial on each rank merged by log-sum-exp across ranks
//     (decode_attention.cc);
//  3. the output projection and the MLP over all the step's rows, chunk by chunk.
// Activations beyond the residual stream, the queries and the accumulators are O(chunk x
// intermediate). No host synchronisation inside a layer: ids and positions are uploaded once per
// step, ring transfers are ordered against compute by events.
#include "worker/engine/layer_loop.h"

#include <algorithm>

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

Status LayerLoop::Embed(const std::vector<RankEntry>& entries, int64_t rows) {
  if (rows == 0) return OkStatus();
  MP_RETURN_IF_ERROR(UploadIds(entries, rows));
  return EmbedUploaded(rows);
}

Status LayerLoop::EmbedUploaded(int64_t rows) {
  Workspace& ws = *ctx_.workspace;
  return ctx_.backend->Embedding({SliceRows(ws.ids.cview(), 0, rows), ctx_.model->weights().embed_tokens,
                              SliceRows(ws.hidden.view(), 0, rows)});
}

Status LayerLoop::UploadIds(const std::vector<RankEntry>& entries, int64_t rows) {
  std::vector<int64_t> positions;
  std::vector<int32_t> ids;
  positions.reserve(static_cast<size_t>(rows));
  for (const RankEntry& e : entries) {
    if (e.prefill()) {
      for (const TokenRange& r : e.ranges)
        for (int64_t p = r.begin; p < r.end; ++p) positions.push_back(p);
    } else {
      positions.push_back(e.length_before);
    }
    ids.insert(ids.end(), e.step->ids.begin(), e.step->ids.end());
  }
  Workspace& ws = *ctx_.workspace;
  Backend& b = *ctx_.backend;
  MP_RETURN_IF_ERROR(b.CopyFromHost(ConstTensorView{positions.data(), DType::kI64, Shape{rows}},
                                    SliceRows(ws.positions.view(), 0, rows)));
  return b.CopyFromHost(ConstTensorView{ids.data(), DType::kI32, Shape{rows}},
                        SliceRows(ws.ids.view(), 0, rows));
}

Status LayerLoop::ProjectLayer(int64_t layer, std::vector<RankEntry>& entries, int64_t rows) {
  const ModelConfig& c = ctx_.config();
  Workspace& ws = *ctx_.workspace;
  Backend& b = *ctx_.backend;
  const Shape q1{1, c.num_attention_heads, c.head_dim};
  if (entries.size() == 1 && !entries[0].prefill() && ctx_.model->CanFuseQkv(layer)) {
    // One decode token: one GEMM over the fused Q/K/V weights; its queries stay in ws.qkv.
    RankEntry& e = entries[0];
    MP_RETURN_IF_ERROR(ctx_.model->ProjectQkvFused(ws, layer));
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
  const int64_t chunk = ctx_.options.prefill_chunk;
  for (int64_t s = 0; s < rows; s += chunk) {
    const int64_t end = std::min(rows, s + chunk);
    MP_RETURN_IF_ERROR(ctx_.model->ProjectQkv(ws, layer, s, end));
    for (size_t i = 0; i < entries.size(); ++i) {
      RankEntry& e = entries[i];
      const int64_t begin = std::max(s, e.row0), stop = std::min(end, e.row0 + e.rows);
      if (stop <= begin) continue;
      // Decode tokens side by side with the same RoPE table: one op for all of them.
      size_t j = i + 1;
      while (!e.prefill() && j < entries.size() && !entries[j].prefill() &&
             entries[j].row0 < end && entries[j].inv_freq.data == e.inv_freq.data)
        ++j;
      if (j - i > 1 || e.graph_rows > 0) {
        MP_RETURN_IF_ERROR(RopeAndStoreDecode(layer, std::span<RankEntry>(entries).subspan(i, j - i),
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
  for (RankEntry& e : entries) {
    const ConstTensorView rows_q = SliceRows(ws.q.cview(), e.row0, e.rows);
    if (e.prefill()) {
      e.q = rows_q;
    } else {
      MP_ASSIGN_OR_RETURN(e.q, Reshape(rows_q, q1));
    }
  }
  return OkStatus();
}

Status LayerLoop::RopeAndStoreDecode(int64_t layer, std::span<RankEntry> run, int64_t chunk_begin) {
  const ModelConfig& c = ctx_.config();
  Workspace& ws = *ctx_.workspace;
  const int64_t n = static_cast<int64_t>(run.size()), row0 = run.front().row0;
  std::vector<TensorView> k_rows, v_rows;
  for (RankEntry& e : run) {
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
  return ctx_.backend->RopeKv(a);
}

Status LayerLoop::RunLayer(int64_t layer, std::vector<RankEntry>& entries, int64_t rows,
                        StepProfiler& profiler) {
  MP_RETURN_IF_ERROR(ProjectLayer(layer, entries, rows));
  // Stores that stage a step's rows move them into place before attention reads them.
  for (RankEntry& e : entries)
    if (e.stored_rows() > 0 && e.graph_rows == 0)
      MP_RETURN_IF_ERROR(e.seq->kv(layer).EndWrites(e.stored_rows()));
  MP_RETURN_IF_ERROR(profiler.Mark(&ctx_.stats.qkv_s));
  AttentionEnv env = ctx_.Env(profiler);
  Workspace& ws = *ctx_.workspace;
  // Decode tokens of consecutive entries with batchable strategies (and equal windows) attend in
  // one call, whatever their strategies; a merge across ranks takes as many as its buffers hold.
  const size_t max_run =
      ctx_.comm->size() == 1 ? entries.size() : static_cast<size_t>(env.scratch.gather_rows);
  auto batchable = [&](const RankEntry& e) {
    if (e.prefill()) return false;
    const DecodeStrategy& decode = *e.seq->attention(layer).decode;
    return e.graph_rows > 0 ? decode.batches_recorded() : decode.batchable();
  };
  for (size_t i = 0; i < entries.size();) {
    RankEntry& e = entries[i];
    if (!e.prefill()) {
      size_t j = i + 1;
      const DecodeStrategy& decode = *e.seq->attention(layer).decode;
      if (batchable(e)) {
        const DecodeStrategy::Windows windows = decode.batch_windows();
        while (j < entries.size() && j - i < max_run && batchable(entries[j]) &&
               entries[j].seq->attention(layer).decode->batch_windows() == windows)
          ++j;
      } else if (e.graph_rows == 0) {
        // Strategies that batch with their own kind (DecodeStrategy::BatchesWith).
        while (j < entries.size() && j - i < max_run && !entries[j].prefill() &&
               entries[j].graph_rows == 0 &&
               decode.BatchesWith(*entries[j].seq->attention(layer).decode))
          ++j;
      }
      MP_RETURN_IF_ERROR(AttendDecode(layer, std::span<RankEntry>(entries).subspan(i, j - i), env));
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
  if (ctx_.options.attention_observer)
    ctx_.options.attention_observer(layer, SliceRows(ws.o_acc.cview(), 0, rows));
  MP_RETURN_IF_ERROR(RunMlp(layer, entries, profiler));
  return profiler.Mark(&ctx_.stats.mlp_s);
}

Status LayerLoop::RunMlp(int64_t layer, std::span<const RankEntry> entries, StepProfiler& profiler) {
  Workspace& ws = *ctx_.workspace;
  const int64_t chunk = ctx_.options.prefill_chunk;
  const bool split = ctx_.options.split_decode_mlp && ctx_.comm->size() > 1;
  // Runs of consecutive entries (their rows follow each other) that are all shared decode tokens
  // or all not. The runs are the same on every rank: a prefill entry splits them whether or not
  // it has rows on this rank.
  auto shared = [&](const RankEntry& e) { return split && !e.prefill(); };
  for (size_t i = 0; i < entries.size();) {
    size_t j = i + 1;
    while (j < entries.size() && shared(entries[j]) == shared(entries[i])) ++j;
    const int64_t begin = entries[i].row0, end = entries[j - 1].row0 + entries[j - 1].rows;
    if (shared(entries[i])) {
      MP_RETURN_IF_ERROR(SplitMlp(layer, begin, end, profiler));
    } else {
      for (int64_t s = begin; s < end; s += chunk)
        MP_RETURN_IF_ERROR(
            ctx_.model->OutputAndMlp(ws, layer, s, std::min(end, s + chunk), ws.o_acc.cview()));
    }
    i = j;
  }
  return OkStatus();
}

Status LayerLoop::SplitMlp(int64_t layer, int64_t begin, int64_t end, StepProfiler& profiler) {
  Workspace& ws = *ctx_.workspace;
  const AttentionScratch scratch = ws.Scratch();
  const int64_t hidden = ctx_.config().hidden_size;
  const int ranks = ctx_.comm->size();
  const MlpSlice slice = ctx_.model->MlpSliceOf(ctx_.comm->rank(), ranks);
  // The gather buffers hold gather_rows rows of partials (Workspace::ReserveGather).
  const int64_t chunk =
      std::min({ctx_.options.prefill_chunk, ws.scratch_rows(), scratch.gather_rows});
  MP_REQUIRE(chunk > 0, "split MLP: no gather buffers for ", end - begin, " decode rows");
  for (int64_t s = begin; s < end; s += chunk) {
    const int64_t m = std::min(end, s + chunk) - s;
    MP_ASSIGN_OR_RETURN(TensorView partial, SubView(scratch.partials, 0, Shape{m, hidden}));
    MP_RETURN_IF_ERROR(
        ctx_.model->OutputAndMlpSlice(ws, layer, s, s + m, ws.o_acc.cview(), slice, partial));
    MP_RETURN_IF_ERROR(profiler.Mark(&ctx_.stats.mlp_s));
    MP_ASSIGN_OR_RETURN(const TensorView parts,
                        SubView(scratch.gathered, 0, Shape{ranks, m, hidden}));
    MP_RETURN_IF_ERROR(ctx_.comm->AllGather(AsConst(partial), parts));
    ctx_.stats.comm_bytes += static_cast<int64_t>(partial.NumBytes());
    MP_RETURN_IF_ERROR(profiler.Mark(&ctx_.stats.comm_wait_s));
    MP_RETURN_IF_ERROR(
        ctx_.backend->AddParts({AsConst(parts), 0, SliceRows(ws.hidden.view(), s, m)}));
    ++ctx_.stats.split_mlp_passes;
  }
  return OkStatus();
}

}  // namespace millipede
