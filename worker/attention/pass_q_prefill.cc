// RingPrefill's pass-Q exchange (prefill_exchange.h). Per round of up to R query rows per rank:
//  1. each rank sends its round's queries to every other rank (one pairwise exchange per shift t:
//     to rank + t, from rank - t);
//  2. it attends every received block of queries to its own K/V block, each into a partial
//     (o [m, heads, head_dim] then lse [m, heads], F32, one message), and sends the partial back
//     to the queries' rank as soon as it is made;
//  3. it merges the partials of its own queries into (o_acc, lse_acc) by log-sum-exp.
// Its own queries attend to its own block before the first round's queries arrive. Buffers:
// ring_k[0] (queries received), ring_k[1] (partials sent), ring_v[0] (partials received), each
// (ranks - 1) x R rows.
#include <algorithm>
#include <vector>

#include "worker/attention/ring_prefill.h"

namespace millipede {
namespace {

// A partial of `rows` query rows of `heads` heads at `base` (F32): o then lse.
struct PartialView {
  TensorView o, lse;  // [rows, heads * head_dim], [rows, heads]
};

PartialView Partial(float* base, int64_t rows, int64_t heads, int64_t head_dim) {
  return {TensorView{base, DType::kF32, Shape{rows, heads * head_dim}},
          TensorView{base + rows * heads * head_dim, DType::kF32, Shape{rows, heads}}};
}

// The partial as one message.
TensorView Message(const PartialView& p) {
  return TensorView{p.o.data, DType::kF32, Shape{p.o.NumElements() + p.lse.NumElements()}};
}

}  // namespace

Status RingPrefill::RunPassQ(AttentionEnv& env, const PrefillInput& in, ConstKvRows mine,
                             const HeadWindows& windows, std::span<const int64_t> queries,
                             int64_t round_rows) {
  Backend& b = env.backend;
  Communicator& comm = env.comm;
  const int num_ranks = comm.size(), rank = comm.rank();
  const int64_t d = env.config.head_dim, heads = in.q.dim(1) / d, q_width = heads * d;
  const int64_t part_width = heads * (d + 1);
  const int64_t n = queries[static_cast<size_t>(rank)];
  MP_REQUIRE(n == in.q.dim(0), "pass-Q prefill: ", in.q.dim(0), " query rows for ", n,
             " positions");
  const int64_t most = *std::max_element(queries.begin(), queries.end());
  const std::span<const TokenRange> my_block = in.rank_blocks[static_cast<size_t>(rank)];
  float* q_in = static_cast<float*>(env.scratch.ring_k[0].data);
  float* part_out = static_cast<float*>(env.scratch.ring_k[1].data);
  float* part_in = static_cast<float*>(env.scratch.ring_v[0].data);
  ++env.stats.pass_q_passes;
  for (int64_t a = 0; a < most; a += round_rows) {
    auto rows_of = [&](int r) {
      return std::clamp<int64_t>(queries[static_cast<size_t>(r)] - a, 0, round_rows);
    };
    const int64_t m = rows_of(rank);
    // 1. This round's queries out, every other rank's in.
    for (int t = 1; t < num_ranks; ++t) {
      const int to = (rank + t) % num_ranks, from = (rank - t + num_ranks) % num_ranks;
      const TensorView recv{q_in + (t - 1) * round_rows * q_width, DType::kF32,
                            Shape{rows_of(from), q_width}};
      MP_RETURN_IF_ERROR(comm.StartSendRecv(SliceRows(in.q, a, m), to, recv, from));
      env.stats.comm_bytes += m * q_width * static_cast<int64_t>(sizeof(float));
    }
    if (a == 0 && n > 0) MP_RETURN_IF_ERROR(AttendBlock(env, in, mine, my_block, windows));
    MP_RETURN_IF_ERROR(env.profiler.Mark(&env.stats.attention_s));
    MP_RETURN_IF_ERROR(comm.WaitAll());
    MP_RETURN_IF_ERROR(env.profiler.Mark(&env.stats.comm_wait_s));
    // 2. Their partials over this rank's block, each sent back once made; this rank's queries'
    //    partials in.
    for (int t = 1; t < num_ranks; ++t) {
      const int to = (rank + t) % num_ranks, from = (rank - t + num_ranks) % num_ranks;
      const int64_t rows = rows_of(from);
      const std::vector<TokenRange> ranges =
          SliceRangeRows(in.rank_queries[static_cast<size_t>(from)], a, rows);
      const PartialView out = Partial(part_out + (t - 1) * round_rows * part_width, rows, heads, d);
      if (rows > 0) {
        MP_RETURN_IF_ERROR(b.ClearState(out.o, out.lse));
        PrefillInput theirs = in;
        theirs.q = ConstTensorView{q_in + (t - 1) * round_rows * q_width, DType::kF32,
                                   Shape{rows, q_width}};
        theirs.q_ranges = ranges;
        theirs.o_acc = out.o;
        theirs.lse_acc = out.lse;
        MP_RETURN_IF_ERROR(AttendBlock(env, theirs, mine, my_block, windows));
      }
      const PartialView back = Partial(part_in + (t - 1) * round_rows * part_width, m, heads, d);
      // The partial of rank `from`'s queries goes back to it; this rank's come from rank `to`.
      MP_RETURN_IF_ERROR(comm.StartSendRecv(AsConst(Message(out)), from, Message(back), to));
      env.stats.comm_bytes += rows * part_width * static_cast<int64_t>(sizeof(float));
    }
    MP_RETURN_IF_ERROR(env.profiler.Mark(&env.stats.attention_s));
    MP_RETURN_IF_ERROR(comm.WaitAll());
    MP_RETURN_IF_ERROR(env.profiler.Mark(&env.stats.comm_wait_s));
    // 3. Merge them into this rank's rows of the round.
    if (m == 0) continue;
    MP_ASSIGN_OR_RETURN(const TensorView o_acc,
                        Reshape(SliceRows(in.o_acc, a, m), Shape{m, heads, d}));
    const TensorView lse_acc = SliceRows(in.lse_acc, a, m);
    for (int t = 1; t < num_ranks; ++t) {
      const PartialView back = Partial(part_in + (t - 1) * round_rows * part_width, m, heads, d);
      MP_ASSIGN_OR_RETURN(const ConstTensorView o_part,
                          Reshape(AsConst(back.o), Shape{m, heads, d}));
      MP_RETURN_IF_ERROR(b.MergeStateInPlace(o_acc, lse_acc, o_part, AsConst(back.lse)));
    }
    MP_RETURN_IF_ERROR(env.profiler.Mark(&env.stats.attention_s));
  }
  return OkStatus();
}

}  // namespace millipede
