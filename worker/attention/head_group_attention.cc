#include "worker/attention/head_group_attention.h"

#include <algorithm>

#include "common/shard_plan.h"
#include "worker/attention/scratch_buffer.h"

namespace millipede {
namespace {

StatusOr<HeadGroupKvStore*> GroupStore(KvStore* store, const char* what) {
  auto* groups = dynamic_cast<HeadGroupKvStore*>(store);
  MP_REQUIRE(groups != nullptr, what, ": the layer's store does not keep its heads in groups");
  return groups;
}

// Scratch q, o [n, packed, d] and lse [n, packed] F32 for the larger group.
struct PackBuffers {
  TensorView q, o, lse;
};
StatusOr<PackBuffers> PackScratch(Backend& b, HeadPackScratch& s, int64_t n, int64_t packed,
                                  int64_t d) {
  PackBuffers p;
  MP_ASSIGN_OR_RETURN(p.q, ScratchBuffer(b, &s.q, DType::kF32, Shape{n, packed, d}));
  MP_ASSIGN_OR_RETURN(p.o, ScratchBuffer(b, &s.o, DType::kF32, Shape{n, packed, d}));
  MP_ASSIGN_OR_RETURN(p.lse, ScratchBuffer(b, &s.lse, DType::kF32, Shape{n, packed}));
  return p;
}

}  // namespace

HeadPack::HeadPack(const std::vector<int32_t>& kv_heads, int64_t group) {
  for (int32_t g : kv_heads)
    for (int64_t j = 0; j < group; ++j) {
      slots_.push_back(static_cast<int32_t>(q_heads_.size()));
      q_heads_.push_back(static_cast<int32_t>(g * group + j));
    }
}

Status HeadPack::Pack(Backend& b, ConstTensorView q, TensorView packed) const {
  return b.CopyHeads({q, packed, q_heads_, slots_});
}

Status HeadPack::Unpack(Backend& b, ConstTensorView o, ConstTensorView lse, TensorView out_o,
                        TensorView out_lse) const {
  MP_RETURN_IF_ERROR(b.CopyHeads({o, out_o, slots_, q_heads_}));
  const int64_t n = lse.dim(0);
  MP_ASSIGN_OR_RETURN(ConstTensorView lse3, Reshape(lse, Shape{n, packed(), 1}));
  MP_ASSIGN_OR_RETURN(TensorView out3, Reshape(out_lse, Shape{n, out_lse.dim(1), 1}));
  return b.CopyHeads({lse3, out3, slots_, q_heads_});
}

HeadWindows GroupWindows(const HeadWindows& layer, const std::vector<int32_t>& kv_heads) {
  HeadWindows w;
  if (layer.window.empty()) return w;
  bool any = false;
  for (int32_t g : kv_heads) {
    w.window.push_back(layer.window[static_cast<size_t>(g)]);
    any = any || w.window.back() > 0;
  }
  if (!any) return HeadWindows{};
  w.sink = layer.sink;
  return w;
}

HeadGroupPrefill::HeadGroupPrefill(const KvHeadGroups& groups, int64_t group,
                                   const HeadWindows& windows, const KvRetention& streaming,
                                   int64_t windowed_from, std::shared_ptr<HeadPackScratch> scratch,
                                   bool fp8)
    : streaming_(streaming),
      packs_{HeadPack(groups.full, group), HeadPack(groups.streaming, group)},
      rings_{RingPrefill(GroupWindows(windows, groups.full), windowed_from, fp8),
             RingPrefill(GroupWindows(windows, groups.streaming), windowed_from, fp8)},
      scratch_(std::move(scratch)) {}

Status HeadGroupPrefill::Run(AttentionEnv& env, const PrefillInput& in) {
  Backend& b = env.backend;
  MP_ASSIGN_OR_RETURN(HeadGroupKvStore* store, GroupStore(in.store, "head-group prefill"));
  const int64_t n = in.q.dim(0), d = env.config.head_dim;
  const int64_t widest = std::max(packs_[0].packed(), packs_[1].packed());
  MP_ASSIGN_OR_RETURN(const PackBuffers buf, PackScratch(b, *scratch_, n, widest, d));
  MP_ASSIGN_OR_RETURN(const ConstTensorView q_all,
                      Reshape(in.q, Shape{n, env.config.num_attention_heads, d}));
  MP_ASSIGN_OR_RETURN(const TensorView o_all,
                      Reshape(in.o_acc, Shape{n, env.config.num_attention_heads, d}));
  // The streaming heads' ring blocks: what each rank's streaming store kept at the step's start,
  // then the step's rows (in.rank_blocks holds every stored row: the full heads').
  std::vector<std::vector<TokenRange>> kept;
  for (const std::vector<TokenRange>& blocks : in.rank_blocks)
    kept.push_back(streaming_.Kept(blocks, in.step_begin));
  for (int g = 0; g < 2; ++g) {
    const HeadPack& pack = packs_[g];
    const int64_t p = pack.packed();
    MP_ASSIGN_OR_RETURN(const TensorView q, SubView(buf.q, 0, Shape{n, p, d}));
    MP_ASSIGN_OR_RETURN(const TensorView o, SubView(buf.o, 0, Shape{n, p * d}));
    MP_ASSIGN_OR_RETURN(const TensorView lse, SubView(buf.lse, 0, Shape{n, p}));
    MP_RETURN_IF_ERROR(pack.Pack(b, q_all, q));
    PrefillInput group_in = in;
    MP_ASSIGN_OR_RETURN(group_in.q, Reshape(AsConst(q), Shape{n, p * d}));
    group_in.o_acc = o;
    group_in.lse_acc = lse;
    if (g == HeadGroupKvStore::kStreaming) group_in.rank_blocks = kept;
    MP_ASSIGN_OR_RETURN(
        const ConstKvRows rows,
        store->group(static_cast<HeadGroupKvStore::Group>(g)).Rows(in.step_rows));
    MP_RETURN_IF_ERROR(rings_[g].RunOn(env, group_in, rows));
    MP_ASSIGN_OR_RETURN(const ConstTensorView o3, Reshape(AsConst(o), Shape{n, p, d}));
    MP_RETURN_IF_ERROR(pack.Unpack(b, o3, AsConst(lse), o_all, in.lse_acc));
  }
  return OkStatus();
}

namespace {

std::vector<int32_t> Concat(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  std::vector<int32_t> out = a;
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

}  // namespace

HeadGroupDecode::HeadGroupDecode(const KvHeadGroups& groups, int64_t group,
                                 const KvRetention& streaming,
                                 std::shared_ptr<HeadPackScratch> scratch)
    : kv_heads_{groups.full, groups.streaming},
      groups_{HeadPack(groups.full, group), HeadPack(groups.streaming, group)},
      sink_(streaming.sink_tokens),
      window_(streaming.window_tokens),
      pack_(Concat(groups.full, groups.streaming), group),
      full_heads_(static_cast<int64_t>(groups.full.size()) * group),
      streaming_(std::vector<int64_t>(groups.streaming.size(), streaming.window_tokens),
                 streaming.sink_tokens, /*batchable=*/false),
      keep_all_below_(streaming.keep_all_below),
      scratch_(std::move(scratch)) {}

Status HeadGroupDecode::Partial(AttentionEnv& env, const DecodeInput& in, TensorView o,
                                TensorView lse) {
  Backend& b = env.backend;
  MP_ASSIGN_OR_RETURN(HeadGroupKvStore* store, GroupStore(in.store, "head-group decode"));
  const int64_t d = env.config.head_dim, heads = pack_.packed();
  // One token: the full heads' queries, then the streaming heads', each group contiguous.
  MP_ASSIGN_OR_RETURN(const PackBuffers buf, PackScratch(b, *scratch_, 1, heads, d));
  MP_RETURN_IF_ERROR(pack_.Pack(b, in.q, buf.q));
  for (int g = 0; g < 2; ++g) {
    const int64_t first = g == HeadGroupKvStore::kFull ? 0 : full_heads_;
    const int64_t p = g == HeadGroupKvStore::kFull ? full_heads_ : heads - full_heads_;
    DecodeInput group_in = in;
    group_in.store = &store->group(static_cast<HeadGroupKvStore::Group>(g));
    MP_ASSIGN_OR_RETURN(group_in.q, SubView(AsConst(buf.q), first * d, Shape{1, p, d}));
    MP_ASSIGN_OR_RETURN(const TensorView go, SubView(buf.o, first * d, Shape{1, p, d}));
    MP_ASSIGN_OR_RETURN(const TensorView glse, SubView(buf.lse, first, Shape{1, p}));
    // The full heads over every row. The streaming heads' store holds exactly the sinks and the
    // window the token sees once it drops rows (one call over them all); before, every row, to
    // which the windows apply run by run.
    if (g == HeadGroupKvStore::kFull || in.position >= keep_all_below_) {
      MP_RETURN_IF_ERROR(full_.Partial(env, group_in, go, glse));
    } else {
      MP_RETURN_IF_ERROR(streaming_.Partial(env, group_in, go, glse));
    }
  }
  return pack_.Unpack(b, AsConst(buf.o), AsConst(buf.lse), o, lse);
}

bool HeadGroupDecode::BatchesWith(const DecodeStrategy& other) const {
  const auto* o = dynamic_cast<const HeadGroupDecode*>(&other);
  return o != nullptr && o->kv_heads_[0] == kv_heads_[0] && o->kv_heads_[1] == kv_heads_[1] &&
         o->sink_ == sink_ && o->window_ == window_ && o->keep_all_below_ == keep_all_below_;
}

Status HeadGroupDecode::GroupPartials(AttentionEnv& env, int group,
                                      std::span<DecodeStrategy* const> strategies,
                                      std::span<const DecodeInput> inputs, ConstTensorView q,
                                      TensorView o, TensorView lse) {
  const size_t n = inputs.size();
  const bool streaming = group == HeadGroupKvStore::kStreaming;
  // Under context parallelism a store that keeps every row holds runs of positions the windows
  // of a batched call cannot place: those tokens run alone.
  bool batched = true;
  if (streaming && env.comm.size() > 1)
    for (const DecodeInput& in : inputs) batched = batched && in.position >= keep_all_below_;
  std::vector<ConstTensorView> k, v;
  for (size_t i = 0; i < n; ++i) {
    MP_ASSIGN_OR_RETURN(HeadGroupKvStore * store, GroupStore(inputs[i].store, "head-group decode"));
    DecodeInput group_in = inputs[i];
    group_in.store = &store->group(static_cast<HeadGroupKvStore::Group>(group));
    if (batched) {
      MP_ASSIGN_OR_RETURN(const ConstKvRows rows, group_in.store->Rows(group_in.step_rows));
      k.push_back(rows.k);
      v.push_back(rows.v);
      continue;
    }
    const int64_t row = static_cast<int64_t>(i);
    group_in.q = SliceRows(q, row, 1);
    auto& self = static_cast<HeadGroupDecode&>(*strategies[i]);
    DecodeStrategy& one = group_in.position >= keep_all_below_
                              ? static_cast<DecodeStrategy&>(self.full_)
                              : static_cast<DecodeStrategy&>(self.streaming_);
    MP_RETURN_IF_ERROR(one.Partial(env, group_in, SliceRows(o, row, 1), SliceRows(lse, row, 1)));
  }
  if (!batched) return OkStatus();
  BatchDecodeAttentionArgs a;
  a.q = q;
  a.k = k;
  a.v = v;
  a.o = o;
  a.lse = lse;
  const std::vector<int64_t> windows(kv_heads_[1].size(), window_);
  if (streaming && env.comm.size() == 1) {
    a.kv_head_window = windows.data();
    a.sink_tokens = sink_;
  }
  return env.backend.BatchDecodeAttention(a);
}

Status HeadGroupDecode::BatchPartials(AttentionEnv& env,
                                      std::span<DecodeStrategy* const> strategies,
                                      std::span<const DecodeInput> inputs, ConstTensorView q,
                                      TensorView o, TensorView lse) {
  Backend& b = env.backend;
  const int64_t n = static_cast<int64_t>(inputs.size()), d = env.config.head_dim;
  const int64_t widest = std::max(groups_[0].packed(), groups_[1].packed());
  MP_ASSIGN_OR_RETURN(const PackBuffers buf, PackScratch(b, *scratch_, n, widest, d));
  for (int g = 0; g < 2; ++g) {
    const HeadPack& pack = groups_[g];
    const int64_t p = pack.packed();
    if (p == 0) continue;
    MP_ASSIGN_OR_RETURN(const TensorView gq, SubView(buf.q, 0, Shape{n, p, d}));
    MP_ASSIGN_OR_RETURN(const TensorView go, SubView(buf.o, 0, Shape{n, p, d}));
    MP_ASSIGN_OR_RETURN(const TensorView glse, SubView(buf.lse, 0, Shape{n, p}));
    MP_RETURN_IF_ERROR(pack.Pack(b, q, gq));
    MP_RETURN_IF_ERROR(GroupPartials(env, g, strategies, inputs, AsConst(gq), go, glse));
    MP_RETURN_IF_ERROR(pack.Unpack(b, AsConst(go), AsConst(glse), o, lse));
  }
  return OkStatus();
}

}  // namespace millipede
