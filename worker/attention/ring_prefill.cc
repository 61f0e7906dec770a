#include "worker/attention/ring_prefill.h"

#include <algorithm>

#include "worker/attention/attended_pairs.h"

namespace millipede {

bool HeadWindows::AllWindowed() const {
  return !window.empty() &&
         std::all_of(window.begin(), window.end(), [](int64_t w) { return w > 0; });
}

int64_t HeadWindows::Pairs(std::span<const TokenRange> queries, int64_t heads) const {
  int64_t pairs = 0;
  for (int64_t g = 0; g < heads; ++g) {
    const int64_t w = window.empty() ? 0 : window[static_cast<size_t>(g)];
    pairs += w > 0 ? WindowPairs(queries, sink, w) : CausalPairs(queries);
  }
  return pairs;
}

int64_t HeadWindows::MaxWindow() const {
  return window.empty() ? 0 : *std::max_element(window.begin(), window.end());
}

Status RingPrefill::AttendBlock(AttentionEnv& env, const PrefillInput& in, ConstKvRows block,
                                std::span<const TokenRange> ranges,
                                const HeadWindows& windows) const {
  const ModelConfig& c = env.config;
  Backend& b = env.backend;
  const int64_t heads = in.q.dim(1) / c.head_dim;  // a subset of the model's, in a mixed layer
  const int64_t rows_per_call =
      std::min(env.scratch.attention_rows, env.scratch.o_part.shape.dims[0]);
  const bool skip_far = windows.AllWindowed();
  int64_t q_row = 0;
  for (const TokenRange& qr : in.q_ranges) {
    for (int64_t s = 0; s < qr.size(); s += rows_per_call) {
      const int64_t m = std::min(rows_per_call, qr.size() - s);
      const int64_t q_first = qr.begin + s, q_last = q_first + m - 1;
      MP_ASSIGN_OR_RETURN(ConstTensorView q, Reshape(SliceRows(in.q, q_row + s, m),
                                                     Shape{m, heads, c.head_dim}));
      // Views over the scratch: a mixed layer's ring serves fewer heads than it is sized for.
      MP_ASSIGN_OR_RETURN(TensorView o_part,
                          SubView(env.scratch.o_part, 0, Shape{m, heads, c.head_dim}));
      MP_ASSIGN_OR_RETURN(TensorView lse_part, SubView(env.scratch.lse_part, 0, Shape{m, heads}));
      MP_ASSIGN_OR_RETURN(TensorView o_acc, Reshape(SliceRows(in.o_acc, q_row + s, m),
                                                    Shape{m, heads, c.head_dim}));
      TensorView lse_acc = SliceRows(in.lse_acc, q_row + s, m);
      // One call per key range, except that consecutive ranges every query of the chunk sees
      // whole (dense heads, keys up to the chunk's first query) go in one unmasked call: a
      // block of many short ranges (chunked prefill's zig-zag shares) costs a few calls.
      auto attend = [&](int64_t k_row, int64_t rows, int64_t k_offset,
                        AttentionMask mask) -> Status {
        AttentionArgs a;
        a.q = q;
        a.k = SliceRows(block.k, k_row, rows);
        a.v = SliceRows(block.v, k_row, rows);
        a.q_offset = q_first;
        a.k_offset = k_offset;
        a.mask = mask;
        a.o = o_part;
        a.lse = lse_part;
        a.kv_head_window = windows.data();
        a.sink_tokens = windows.sink;
        MP_RETURN_IF_ERROR(fp8_ && windows.window.empty() ? b.AttentionFp8(a) : b.Attention(a));
        return b.MergeStateInPlace(o_acc, lse_acc, AsConst(o_part), AsConst(lse_part));
      };
      const bool dense = windows.window.empty();
      int64_t k_row = 0, run_row = 0, run_rows = 0, run_begin = 0;
      for (const TokenRange& kr : ranges) {
        if (dense && kr.end - 1 <= q_first) {
          if (run_rows == 0) {
            run_row = k_row;
            run_begin = kr.begin;
          }
          run_rows += kr.size();
          k_row += kr.size();
          continue;
        }
        if (run_rows > 0)
          MP_RETURN_IF_ERROR(attend(run_row, run_rows, run_begin, AttentionMask::kNone));
        run_rows = 0;
        // Keys after the chunk's last query are masked for all of it; with every head windowed,
        // so are keys that are neither sinks nor inside any head's window of the first query.
        const bool visible =
            kr.begin <= q_last &&
            (!skip_far || kr.begin < windows.sink || q_first - (kr.end - 1) < windows.MaxWindow());
        if (visible)
          MP_RETURN_IF_ERROR(attend(k_row, kr.size(), kr.begin, AttentionMask::kCausal));
        k_row += kr.size();
      }
      if (run_rows > 0)
        MP_RETURN_IF_ERROR(attend(run_row, run_rows, run_begin, AttentionMask::kNone));
    }
    q_row += qr.size();
  }
  return OkStatus();
}

Status RingPrefill::Run(AttentionEnv& env, const PrefillInput& in) {
  MP_ASSIGN_OR_RETURN(const ConstKvRows mine, in.store->Rows(in.step_rows));
  return RunOn(env, in, mine);
}

Status RingPrefill::RunOn(AttentionEnv& env, const PrefillInput& in, ConstKvRows mine) {
  static const HeadWindows kDense;
  const HeadWindows& windows = in.length >= windowed_from_ ? windows_ : kDense;
  const int64_t n = in.q.shape.dims[0];
  if (in.pairs != nullptr) in.pairs->host += windows.Pairs(in.q_ranges, mine.k.dim(1));
  MP_RETURN_IF_ERROR(
      env.backend.ClearState(SliceRows(in.o_acc, 0, n), SliceRows(in.lse_acc, 0, n)));
  const int num_ranks = env.comm.size();
  if (num_ranks == 1) return RunPassKv(env, in, mine, windows);
  MP_REQUIRE(in.rank_queries.size() == static_cast<size_t>(num_ranks) &&
                 in.rank_blocks.size() == static_cast<size_t>(num_ranks),
             "ring prefill: queries of ", in.rank_queries.size(), " and blocks of ",
             in.rank_blocks.size(), " ranks for ", num_ranks);
  std::vector<int64_t> block_rows, query_rows;
  for (int r = 0; r < num_ranks; ++r) {
    block_rows.push_back(TotalSize(in.rank_blocks[static_cast<size_t>(r)]));
    query_rows.push_back(TotalSize(in.rank_queries[static_cast<size_t>(r)]));
  }
  const int64_t heads = in.q.dim(1) / env.config.head_dim;
  ExchangeSizes sizes;
  sizes.block_rows = block_rows;
  sizes.query_rows = query_rows;
  // From the shapes, not the byte counts: a rank may hold no rows or no queries, and every rank
  // must reach the same choice.
  sizes.kv_row_bytes = 2 * mine.k.dim(1) * mine.k.dim(2) *
                       static_cast<int64_t>(DTypeSize(mine.k.dtype));
  sizes.q_row_bytes = in.q.dim(1) * static_cast<int64_t>(DTypeSize(in.q.dtype));
  sizes.part_row_bytes = heads * (env.config.head_dim + 1) * static_cast<int64_t>(sizeof(float));
  const int64_t buffer_bytes = static_cast<int64_t>(std::min(
      {env.scratch.ring_k[0].NumBytes(), env.scratch.ring_k[1].NumBytes(),
       env.scratch.ring_v[0].NumBytes()}));
  // A round is at most one attention call's queries per rank.
  const int64_t round_rows =
      std::min(PassQRoundRows(buffer_bytes, num_ranks, sizes.part_row_bytes),
               std::max<int64_t>(env.scratch.attention_rows, 1));
  if (ChooseExchange(env.prefill_exchange, sizes, round_rows) == PrefillExchange::kPassQ)
    return RunPassQ(env, in, mine, windows, query_rows, round_rows);
  return RunPassKv(env, in, mine, windows);
}

Status RingPrefill::RunPassKv(AttentionEnv& env, const PrefillInput& in, ConstKvRows mine,
                              const HeadWindows& windows) {
  Communicator& comm = env.comm;
  const int num_ranks = comm.size(), rank = comm.rank();
  const int64_t n = in.q.shape.dims[0];
  const int64_t row_bytes = static_cast<int64_t>(mine.k.NumBytes() + mine.v.NumBytes()) /
                            std::max<int64_t>(mine.k.shape.dims[0], 1);
  // At ring step t this rank holds the block of rank (rank - t) mod N and passes it on while
  // receiving the next one.
  ConstKvRows block = mine;
  std::span<const TokenRange> block_ranges = in.rank_blocks[static_cast<size_t>(rank)];
  for (int t = 0; t < num_ranks; ++t) {
    const bool pass_on = t + 1 < num_ranks;
    const int next_origin = ((rank - t - 1) % num_ranks + num_ranks) % num_ranks;
    ConstKvRows incoming;
    std::span<const TokenRange> incoming_ranges;
    if (pass_on) {
      incoming_ranges = in.rank_blocks[static_cast<size_t>(next_origin)];
      const int64_t in_rows = TotalSize(incoming_ranges);
      const Shape in_shape{in_rows, mine.k.dim(1), mine.k.dim(2)};
      MP_ASSIGN_OR_RETURN(const TensorView recv_k, SubView(env.scratch.ring_k[t % 2], 0, in_shape));
      MP_ASSIGN_OR_RETURN(const TensorView recv_v, SubView(env.scratch.ring_v[t % 2], 0, in_shape));
      incoming = {AsConst(recv_k), AsConst(recv_v)};
      const int next = (rank + 1) % num_ranks, prev = (rank + num_ranks - 1) % num_ranks;
      MP_RETURN_IF_ERROR(comm.StartSendRecv(block.k, next, recv_k, prev));
      MP_RETURN_IF_ERROR(comm.StartSendRecv(block.v, next, recv_v, prev));
      env.stats.comm_bytes += block.k.shape.dims[0] * row_bytes;
    }
    if (n > 0) MP_RETURN_IF_ERROR(AttendBlock(env, in, block, block_ranges, windows));
    MP_RETURN_IF_ERROR(env.profiler.Mark(&env.stats.attention_s));
    if (pass_on) {
      MP_RETURN_IF_ERROR(comm.WaitAll());
      block = incoming;
      block_ranges = incoming_ranges;
      MP_RETURN_IF_ERROR(env.profiler.Mark(&env.stats.comm_wait_s));
    }
  }
  return OkStatus();
}

}  // namespace millipede
