#include "worker/attention/decode/omnikv_decode.h"

#include <algorithm>

#include "worker/attention/scratch_buffer.h"
#include "worker/kv/offloaded_kv_store.h"

namespace millipede {
namespace {

// The token's attention over `rows` ([n, kv_heads, head_dim] each, every row visible).
Status AttendRows(AttentionEnv& env, const DecodeInput& in, ConstKvRows rows, TensorView o,
                  TensorView lse) {
  AttentionArgs a;
  a.q = in.q;
  a.k = rows.k;
  a.v = rows.v;
  a.q_offset = in.position;
  a.mask = AttentionMask::kNone;
  a.o = o;
  a.lse = lse;
  return env.backend.Attention(a);
}

// The token's attention over the first `length` ([1] I64, read on the device) of `rows`: a
// recorded step's call, whose views span the rows it may see.
Status AttendRecorded(AttentionEnv& env, const DecodeInput& in, ConstKvRows rows,
                      ConstTensorView length, TensorView o, TensorView lse) {
  BatchDecodeAttentionArgs a;
  a.q = in.q;
  a.k = {&rows.k, 1};
  a.v = {&rows.v, 1};
  a.o = o;
  a.lse = lse;
  a.lengths = length;
  return env.backend.BatchDecodeAttention(a);
}

}  // namespace

Status FilterDecode::Partial(AttentionEnv& env, const DecodeInput& in, TensorView o,
                             TensorView lse) {
  if (in.recorded_rows > 0) {
    MP_ASSIGN_OR_RETURN(const KvRows fixed, in.store->FixedRows(in.recorded_rows));
    return AttendRecorded(env, in, {AsConst(fixed.k), AsConst(fixed.v)}, in.recorded_length, o,
                          lse);
  }
  MP_ASSIGN_OR_RETURN(const ConstKvRows rows, in.store->Rows(in.step_rows));
  return AttendRows(env, in, rows, o, lse);
}

Status FilterDecode::BatchParts(AttentionEnv& env, const DecodeInput& in,
                                std::vector<DecodePart>* parts) {
  return AppendEveryRow(in, parts);
}

Status FilterDecode::ChooseOnDevice(AttentionEnv& env, ConstTensorView scores) {
  const int64_t groups = scores.dim(0), slots = std::min(params_.top_k, scores.dim(1));
  MP_ASSIGN_OR_RETURN(TensorView chosen, selection_->ChosenBuffer(env, slots));
  if (slots == 0) return OkStatus();
  MP_ASSIGN_OR_RETURN(TensorView value,
                      ScratchBuffer(env.backend, &top_value_, DType::kF32, Shape{groups, slots}));
  // Column order is position order: the index the selection gathers by, no sort needed.
  return env.backend.TopK({scores, slots, chosen, value, TopKOrder::kColumn});
}

Status FilterDecode::ChooseAcrossRanks(AttentionEnv& env, std::span<const TokenRange> held,
                                       ConstTensorView scores) {
  // Each rank offers its best k per KV head; k is the same on every rank (the budget, or the
  // whole context when that is smaller: no rank holds more rows than the context).
  const int64_t groups = scores.dim(0), n = scores.dim(1);
  const int64_t k = std::min(params_.top_k, selection_->context_end());
  // With no budget (or no context) no rank joins the exchange.
  if (k == 0) return selection_->ChosenBuffer(env, 0).status();
  // The context rows' positions, as runs (a rank holds two of the prompt).
  ranges_.clear();
  for (const TokenRange& r : held) {
    const int64_t end = std::min(r.end, selection_->context_end());
    if (end > r.begin) ranges_.push_back({r.begin, end});
  }
  MP_REQUIRE(ranges_.size() <= kTopKKeysMaxRanges, "filter layer: the context rows form ",
             ranges_.size(), " runs of positions, at most ", kTopKKeysMaxRanges);
  MP_ASSIGN_OR_RETURN(TensorView index,
                      ScratchBuffer(env.backend, &top_index_, DType::kI32, Shape{groups, k}));
  MP_ASSIGN_OR_RETURN(TensorView value,
                      ScratchBuffer(env.backend, &top_value_, DType::kF32, Shape{groups, k}));
  MP_ASSIGN_OR_RETURN(TensorView keys,
                      ScratchBuffer(env.backend, &keys_, DType::kI64, Shape{groups, k}));
  MP_ASSIGN_OR_RETURN(TensorView all, ScratchBuffer(env.backend, &all_keys_, DType::kI64,
                                                    Shape{env.comm.size(), groups, k}));
  // Column order: the share this rank keeps comes out in row order, as the gather wants it.
  MP_RETURN_IF_ERROR(env.backend.TopK({scores, k, index, value, TopKOrder::kColumn}));
  MP_RETURN_IF_ERROR(env.backend.TopKKeys({AsConst(index), AsConst(value), ranges_, keys}));
  // Only each rank's best k per KV head cross ranks, and every rank cuts alike.
  MP_RETURN_IF_ERROR(env.comm.AllGather(AsConst(keys), all));
  MP_ASSIGN_OR_RETURN(TensorView chosen, selection_->ChosenBuffer(env, std::min(k, n)));
  return env.backend.TopKCut({AsConst(all), AsConst(index), env.comm.rank(), chosen});
}

StatusOr<int64_t> FilterDecode::ContextRows(const DecodeInput& in) const {
  MP_ASSERT(selection_->context_end() >= 0, "the sequence began decoding");
  // The context rows are a prefix of the store's rows (rows are in position order); they do not
  // change once decoding began.
  int64_t n = 0;
  for (const TokenRange& r : in.store->held_ranges())
    n += std::clamp<int64_t>(selection_->context_end() - r.begin, 0, r.size());
  return n;
}

Status FilterDecode::AfterMerge(AttentionEnv& env, const DecodeInput& in, ConstTensorView lse) {
  const ModelConfig& c = env.config;
  TokenSelection& selection = *selection_;
  std::span<const TokenRange> held = in.store->held_ranges();
  MP_ASSIGN_OR_RETURN(const int64_t n, ContextRows(in));
  MP_RETURN_IF_ERROR(env.profiler.Mark(&env.stats.attention_s));
  MP_ASSIGN_OR_RETURN(TensorView scores, ScratchBuffer(env.backend, &scores_, DType::kF32,
                                                       Shape{c.num_key_value_heads, n}));
  if (n > 0) {
    MP_ASSIGN_OR_RETURN(const ConstKvRows rows, in.store->Rows(0));
    MP_ASSIGN_OR_RETURN(ConstTensorView q, Reshape(in.q, Shape{c.num_attention_heads, c.head_dim}));
    MP_ASSIGN_OR_RETURN(ConstTensorView lse1, Reshape(lse, Shape{c.num_attention_heads}));
    MP_RETURN_IF_ERROR(env.backend.TokenScores({q, SliceRows(rows.k, 0, n), lse1, 0.0f, scores}));
  }
  if (env.comm.size() == 1) {
    MP_RETURN_IF_ERROR(ChooseOnDevice(env, AsConst(scores)));
  } else {
    MP_RETURN_IF_ERROR(ChooseAcrossRanks(env, held, AsConst(scores)));
  }
  MP_RETURN_IF_ERROR(selection.Choose(env, n, in.position));
  return env.profiler.Mark(&env.stats.omnikv_select_s);
}

bool FilterDecode::AfterMergeBatchesWith(const DecodeStrategy& other) const {
  const auto* filter = dynamic_cast<const FilterDecode*>(&other);
  return filter != nullptr && filter->params_.top_k == params_.top_k;
}

Status FilterDecode::AfterMergeBatch(AttentionEnv& env, std::span<DecodeStrategy* const> strategies,
                                     std::span<const DecodeInput> inputs, ConstTensorView q,
                                     ConstTensorView lse, std::span<const int32_t> rows) {
  const int64_t k = params_.top_k, kv_heads = env.config.num_key_value_heads;
  const auto filter = [&](size_t i) -> FilterDecode& {
    return static_cast<FilterDecode&>(*strategies[i]);
  };
  const bool one_rank = env.comm.size() == 1;
  together_.clear();
  int64_t widest = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    MP_ASSIGN_OR_RETURN(const int64_t n, filter(i).ContextRows(inputs[i]));
    // One rank: the tokens whose context rows hold the budget (each head keeps exactly k).
    // Several: the tokens whose context over every rank holds it — the same tokens on every rank,
    // so that they exchange their keys in one all-gather — each rank offering its best k (or all
    // its rows) of its own.
    const int64_t context = one_rank ? n : filter(i).selection_->context_end();
    if (k > 0 && context >= k) {
      together_.push_back(i);
      widest = std::max(widest, n);
    } else {
      MP_RETURN_IF_ERROR(filter(i).AfterMerge(env, inputs[i], SliceRows(lse, rows[i], 1)));
    }
  }
  if (together_.size() < 2) {
    for (const size_t i : together_)
      MP_RETURN_IF_ERROR(filter(i).AfterMerge(env, inputs[i], SliceRows(lse, rows[i], 1)));
    return OkStatus();
  }
  MP_RETURN_IF_ERROR(env.profiler.Mark(&env.stats.attention_s));
  batch_keys_.clear();
  batch_rows_.clear();
  for (const size_t i : together_) {
    MP_ASSIGN_OR_RETURN(const ConstKvRows held, inputs[i].store->Rows(0));
    MP_ASSIGN_OR_RETURN(const int64_t n, filter(i).ContextRows(inputs[i]));
    batch_keys_.push_back(SliceRows(held.k, 0, n));
    batch_rows_.push_back(rows[i]);
  }
  // Every token's scores over its own context rows, NaN past them, then every KV head of every
  // token cut to its best k in one TopK (column order: each head's rows in position order).
  const int64_t m = static_cast<int64_t>(together_.size());
  MP_ASSIGN_OR_RETURN(TensorView scores, ScratchBuffer(env.backend, &scores_, DType::kF32,
                                                       Shape{m, kv_heads, widest}));
  MP_RETURN_IF_ERROR(
      env.backend.BatchTokenScores({q, lse, batch_keys_, batch_rows_, 0.0f, scores}));
  MP_ASSIGN_OR_RETURN(const ConstTensorView table,
                      Reshape(AsConst(scores), Shape{m * kv_heads, widest}));
  MP_ASSIGN_OR_RETURN(TensorView index,
                      ScratchBuffer(env.backend, &top_index_, DType::kI32, Shape{m * kv_heads, k}));
  MP_ASSIGN_OR_RETURN(TensorView value,
                      ScratchBuffer(env.backend, &top_value_, DType::kF32, Shape{m * kv_heads, k}));
  MP_RETURN_IF_ERROR(env.backend.TopK({table, k, index, value, TopKOrder::kColumn}));
  if (one_rank) {
    for (int64_t t = 0; t < m; ++t) {
      const size_t i = together_[static_cast<size_t>(t)];
      MP_RETURN_IF_ERROR(filter(i).selection_->ChooseFrom(
          env, AsConst(SliceRows(index, t * kv_heads, kv_heads)),
          batch_keys_[static_cast<size_t>(t)].dim(0), inputs[i].position));
    }
  } else {
    MP_RETURN_IF_ERROR(CutAcrossRanks(env, strategies, inputs, AsConst(index), AsConst(value)));
  }
  return env.profiler.Mark(&env.stats.omnikv_select_s);
}

Status FilterDecode::CutAcrossRanks(AttentionEnv& env, std::span<DecodeStrategy* const> strategies,
                                    std::span<const DecodeInput> inputs, ConstTensorView index,
                                    ConstTensorView value) {
  const int64_t k = params_.top_k, kv_heads = env.config.num_key_value_heads;
  const int64_t m = static_cast<int64_t>(together_.size()), ranks = env.comm.size();
  // Each token's offers as keys of its own positions, every token's in one all-gather.
  MP_ASSIGN_OR_RETURN(TensorView keys,
                      ScratchBuffer(env.backend, &keys_, DType::kI64, Shape{m * kv_heads, k}));
  for (int64_t t = 0; t < m; ++t) {
    const size_t i = together_[static_cast<size_t>(t)];
    const FilterDecode& f = static_cast<const FilterDecode&>(*strategies[i]);
    ranges_.clear();
    for (const TokenRange& r : inputs[i].store->held_ranges()) {
      const int64_t end = std::min(r.end, f.selection_->context_end());
      if (end > r.begin) ranges_.push_back({r.begin, end});
    }
    MP_REQUIRE(ranges_.size() <= kTopKKeysMaxRanges, "filter layer: the context rows form ",
               ranges_.size(), " runs of positions, at most ", kTopKKeysMaxRanges);
    const int64_t first = t * kv_heads;
    MP_RETURN_IF_ERROR(
        env.backend.TopKKeys({SliceRows(index, first, kv_heads), SliceRows(value, first, kv_heads),
                              ranges_, SliceRows(keys, first, kv_heads)}));
  }
  MP_ASSIGN_OR_RETURN(TensorView all, ScratchBuffer(env.backend, &all_keys_, DType::kI64,
                                                    Shape{ranks, m * kv_heads, k}));
  MP_RETURN_IF_ERROR(env.comm.AllGather(AsConst(keys), all));
  // Each token's share of its own cut, from its rows of every rank's block.
  for (int64_t t = 0; t < m; ++t) {
    const size_t i = together_[static_cast<size_t>(t)];
    TokenSelection& selection = *static_cast<FilterDecode&>(*strategies[i]).selection_;
    const int64_t n = batch_keys_[static_cast<size_t>(t)].dim(0);
    MP_ASSIGN_OR_RETURN(TensorView chosen, selection.ChosenBuffer(env, std::min(k, n)));
    const ConstTensorView token_keys{static_cast<const int64_t*>(all.data) + t * kv_heads * k,
                                     DType::kI64, Shape{ranks, kv_heads, k}};
    MP_RETURN_IF_ERROR(env.backend.TopKCut({token_keys, SliceRows(index, t * kv_heads, kv_heads),
                                            env.comm.rank(), chosen, m * kv_heads * k}));
    MP_RETURN_IF_ERROR(selection.Choose(env, n, inputs[i].position));
  }
  return OkStatus();
}

StatusOr<SelectedDecode::Rows> SelectedDecode::ChosenAndGenerated(AttentionEnv& env,
                                                                  const DecodeInput& in) {
  TokenSelection& selection = *selection_;
  const int64_t context = selection.context_rows();
  const bool any_chosen = selection.slots() > 0;
  Rows out;
  if (in.store->tier() == KvTier::kHost) {
    const auto* store = dynamic_cast<const OffloadedKvStore*>(in.store);
    MP_ASSERT(store != nullptr && store->context_rows() == context,
              "a selected layer's host store holds its filter layer's context rows");
    if (any_chosen) {
      MP_ASSIGN_OR_RETURN(out.chosen, selection.Loaded(env, in.layer));
    }
    MP_ASSIGN_OR_RETURN(out.generated, store->GeneratedRows(in.step_rows));
    return out;
  }
  MP_ASSIGN_OR_RETURN(const ConstKvRows all, in.store->Rows(in.step_rows));
  const int64_t rows = all.k.dim(0);
  MP_ASSERT(rows >= context, "the store holds the context rows");
  if (any_chosen) {
    MP_ASSIGN_OR_RETURN(out.chosen, selection.Gather(env, {SliceRows(all.k, 0, context),
                                                           SliceRows(all.v, 0, context)}));
  }
  out.generated = {SliceRows(all.k, context, rows - context),
                   SliceRows(all.v, context, rows - context)};
  return out;
}

Status SelectedDecode::BatchParts(AttentionEnv& env, const DecodeInput& in,
                                  std::vector<DecodePart>* parts) {
  TokenSelection& selection = *selection_;
  MP_RETURN_IF_ERROR(selection.CheckFresh(in.position, in.layer));
  const ModelConfig& c = env.config;
  // Over a device store, where the batched kernel reads rows through an index, the chosen rows
  // are read in place rather than gathered first.
  if (in.store->tier() == KvTier::kDevice) {
    MP_ASSIGN_OR_RETURN(const ConstKvRows all, in.store->Rows(in.step_rows));
    if (!env.backend.DecodeTakesLengths(c.head_dim, c.num_attention_heads / c.num_key_value_heads,
                                        all.k.dtype))
      return GatheredParts(env, in, parts);
    const int64_t context = selection.context_rows(), rows = all.k.dim(0);
    MP_ASSERT(rows >= context, "the store holds the context rows");
    if (selection.slots() > 0) {
      MP_ASSIGN_OR_RETURN(const ConstTensorView index, selection.RowIndex(env));
      parts->push_back({{SliceRows(all.k, 0, context), SliceRows(all.v, 0, context)},
                        selection.counts(env),
                        index});
    }
    if (rows > context)
      parts->push_back(
          {{SliceRows(all.k, context, rows - context), SliceRows(all.v, context, rows - context)}});
    return OkStatus();
  }
  return GatheredParts(env, in, parts);
}

Status SelectedDecode::GatheredParts(AttentionEnv& env, const DecodeInput& in,
                                     std::vector<DecodePart>* parts) {
  MP_ASSIGN_OR_RETURN(const Rows rows, ChosenAndGenerated(env, in));
  if (selection_->slots() > 0) parts->push_back({rows.chosen, selection_->counts(env)});
  if (rows.generated.k.dim(0) > 0) parts->push_back({rows.generated});
  return OkStatus();
}

Status SelectedDecode::Partial(AttentionEnv& env, const DecodeInput& in, TensorView o,
                               TensorView lse) {
  TokenSelection& selection = *selection_;
  MP_RETURN_IF_ERROR(selection.CheckFresh(in.position, in.layer));
  const int64_t context = selection.context_rows();
  const bool any_chosen = selection.slots() > 0;
  if (in.recorded_rows > 0) {
    // A recorded step spans its bucket of rows; the generated ones it sees are counted on the
    // device (recorded_generated). The token's own row is among them: never empty.
    MP_ASSERT(in.store->tier() == KvTier::kDevice,
              "a recorded selected layer decodes over a device store");
    MP_ASSIGN_OR_RETURN(const KvRows fixed, in.store->FixedRows(in.recorded_rows));
    const ConstKvRows all{AsConst(fixed.k), AsConst(fixed.v)};
    const int64_t rows = all.k.dim(0);
    MP_ASSERT(rows > context, "the store holds the context rows and the token's");
    const ConstKvRows generated{SliceRows(all.k, context, rows - context),
                                SliceRows(all.v, context, rows - context)};
    if (!any_chosen) return AttendRecorded(env, in, generated, in.recorded_generated, o, lse);
    MP_ASSIGN_OR_RETURN(
        const ConstKvRows chosen,
        selection.Gather(env, {SliceRows(all.k, 0, context), SliceRows(all.v, 0, context)}));
    MP_RETURN_IF_ERROR(selection.Attend(env, in.q, chosen, in.position, o, lse));
    MP_ASSIGN_OR_RETURN(TensorView tmp_o,
                        ScratchBuffer(env.backend, &tmp_o_, DType::kF32, o.shape));
    MP_ASSIGN_OR_RETURN(TensorView tmp_lse,
                        ScratchBuffer(env.backend, &tmp_lse_, DType::kF32, lse.shape));
    MP_RETURN_IF_ERROR(
        AttendRecorded(env, in, generated, in.recorded_generated, tmp_o, tmp_lse));
    return env.backend.MergeStateInPlace(o, lse, AsConst(tmp_o), AsConst(tmp_lse));
  }
  MP_ASSIGN_OR_RETURN(const Rows rows, ChosenAndGenerated(env, in));
  const bool any_generated = rows.generated.k.dim(0) > 0;
  if (!any_chosen)
    return any_generated ? AttendRows(env, in, rows.generated, o, lse)
                         : env.backend.ClearState(o, lse);
  MP_RETURN_IF_ERROR(selection.Attend(env, in.q, rows.chosen, in.position, o, lse));
  if (!any_generated) return OkStatus();
  MP_ASSIGN_OR_RETURN(TensorView tmp_o, ScratchBuffer(env.backend, &tmp_o_, DType::kF32, o.shape));
  MP_ASSIGN_OR_RETURN(TensorView tmp_lse,
                      ScratchBuffer(env.backend, &tmp_lse_, DType::kF32, lse.shape));
  MP_RETURN_IF_ERROR(AttendRows(env, in, rows.generated, tmp_o, tmp_lse));
  return env.backend.MergeStateInPlace(o, lse, AsConst(tmp_o), AsConst(tmp_lse));
}

StatusOr<DecodeRoleStrategy> BuildFilterDecode(const DecodeRoleContext& context) {
  *context.selection = std::make_shared<TokenSelection>(context.layer);
  return DecodeRoleStrategy{
      std::make_unique<FilterDecode>(context.policy.filter, *context.selection),
      *context.selection};
}

StatusOr<DecodeRoleStrategy> BuildSelectedDecode(const DecodeRoleContext& context) {
  const std::shared_ptr<TokenSelection>& selection = *context.selection;
  MP_REQUIRE(selection != nullptr, "attention policy: layer ", context.layer,
             " is \"selected\" but no \"filter\" layer comes before it");
  return DecodeRoleStrategy{std::make_unique<SelectedDecode>(selection), selection};
}

}  // namespace millipede
