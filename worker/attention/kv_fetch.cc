#include "worker/attention/kv_fetch.h"

#include <algorithm>
#include <array>

#include "worker/attention/scratch_buffer.h"

namespace millipede {

int64_t KvFetch::NumBytes() const {
  return static_cast<int64_t>(k_.NumBytes() + v_.NumBytes() + send_k_.NumBytes() +
                              send_v_.NumBytes() + index_.NumBytes());
}

std::vector<TokenRange> IntersectRanges(std::span<const TokenRange> a,
                                        std::span<const TokenRange> b) {
  std::vector<TokenRange> out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const int64_t lo = std::max(a[i].begin, b[j].begin), hi = std::min(a[i].end, b[j].end);
    if (lo < hi) AppendRange(&out, {lo, hi});
    (a[i].end < b[j].end ? i : j)++;
  }
  return out;
}

std::vector<TokenRange> SubtractRanges(std::span<const TokenRange> a,
                                       std::span<const TokenRange> b) {
  std::vector<TokenRange> out;
  size_t j = 0;
  for (TokenRange r : a) {
    while (j < b.size() && b[j].end <= r.begin) ++j;
    for (size_t k = j; k < b.size() && b[k].begin < r.end; ++k) {
      if (b[k].begin > r.begin) AppendRange(&out, {r.begin, b[k].begin});
      r.begin = std::max(r.begin, b[k].end);
    }
    if (r.begin < r.end) AppendRange(&out, r);
  }
  return out;
}

std::vector<TokenRange> NormalizeRanges(std::vector<TokenRange> ranges) {
  std::sort(ranges.begin(), ranges.end(),
            [](const TokenRange& x, const TokenRange& y) { return x.begin < y.begin; });
  std::vector<TokenRange> out;
  for (const TokenRange& r : ranges) {
    if (r.empty()) continue;
    if (!out.empty() && r.begin <= out.back().end)
      out.back().end = std::max(out.back().end, r.end);
    else
      out.push_back(r);
  }
  return out;
}

namespace {

// Every rank's requests: requests[r] lists (owner, begin, end) triples rank r asks for.
StatusOr<std::vector<std::vector<int64_t>>> ExchangeRequests(Communicator& comm,
                                                             const std::vector<int64_t>& mine) {
  const int n = comm.size();
  const int64_t count = static_cast<int64_t>(mine.size());
  std::vector<int64_t> counts(static_cast<size_t>(n));
  MP_RETURN_IF_ERROR(comm.HostAllGather(&count, counts.data(), sizeof(int64_t)));
  const int64_t width = *std::max_element(counts.begin(), counts.end());
  std::vector<int64_t> padded(static_cast<size_t>(width), -1), all(static_cast<size_t>(width * n));
  std::copy(mine.begin(), mine.end(), padded.begin());
  if (width > 0)
    MP_RETURN_IF_ERROR(comm.HostAllGather(padded.data(), all.data(),
                                          static_cast<size_t>(width) * sizeof(int64_t)));
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r)
    out[r].assign(all.begin() + r * width, all.begin() + r * width + counts[r]);
  return out;
}

// The ranges of `requests` (owner, begin, end triples) owned by `owner`.
std::vector<TokenRange> RangesFrom(const std::vector<int64_t>& requests, int owner) {
  std::vector<TokenRange> out;
  for (size_t i = 0; i + 2 < requests.size(); i += 3)
    if (requests[i] == owner) out.push_back({requests[i + 1], requests[i + 2]});
  return out;
}

// Rows of a block holding positions `block` for the positions `wanted` (a subset), in order.
void AppendRows(std::span<const TokenRange> block, std::span<const TokenRange> wanted,
                std::vector<int64_t>* rows) {
  int64_t row0 = 0;
  size_t j = 0;
  for (const TokenRange& b : block) {
    for (; j < wanted.size() && wanted[j].begin < b.end; ++j) {
      const int64_t lo = std::max(wanted[j].begin, b.begin), hi = std::min(wanted[j].end, b.end);
      for (int64_t p = lo; p < hi; ++p) rows->push_back(row0 + p - b.begin);
      if (wanted[j].end > b.end) break;  // continues in the next block range
    }
    row0 += b.size();
  }
}

}  // namespace

Status KvFetch::Run(AttentionEnv& env, std::span<const TokenRange> needed,
                    std::span<const std::vector<TokenRange>> rank_ranges, ConstKvRows mine,
                    bool keys_only) {
  Communicator& comm = env.comm;
  Backend& b = env.backend;
  const int n = comm.size(), me = comm.rank();
  std::vector<int64_t> request;  // (owner, begin, end) triples
  std::vector<std::vector<TokenRange>> from(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    from[r] = IntersectRanges(needed, rank_ranges[r]);
    for (const TokenRange& t : from[r]) request.insert(request.end(), {r, t.begin, t.end});
  }
  MP_ASSIGN_OR_RETURN(std::vector<std::vector<int64_t>> requests, ExchangeRequests(comm, request));
  // What this rank sends, by destination: rows of its block, packed in destination order.
  std::vector<int64_t> send_rows, send_offset = {0};
  for (int t = 1; t < n; ++t) {
    const int dst = (me + t) % n;
    AppendRows(rank_ranges[me], RangesFrom(requests[dst], me), &send_rows);
    send_offset.push_back(static_cast<int64_t>(send_rows.size()));
  }
  int64_t recv_total = 0;
  for (int r = 0; r < n; ++r) recv_total += TotalSize(from[r]);
  const int64_t kv_heads = mine.k.dim(1), d = mine.k.dim(2);
  const int64_t sends = static_cast<int64_t>(send_rows.size());
  MP_ASSIGN_OR_RETURN(TensorView k,
                      ScratchBuffer(b, &k_, mine.k.dtype, Shape{recv_total, kv_heads, d}));
  const int64_t v_rows = keys_only ? 0 : recv_total, v_sends = keys_only ? 0 : sends;
  MP_ASSIGN_OR_RETURN(TensorView v,
                      ScratchBuffer(b, &v_, mine.v.dtype, Shape{v_rows, kv_heads, d}));
  MP_ASSIGN_OR_RETURN(TensorView send_k,
                      ScratchBuffer(b, &send_k_, mine.k.dtype, Shape{sends, kv_heads, d}));
  MP_ASSIGN_OR_RETURN(TensorView send_v,
                      ScratchBuffer(b, &send_v_, mine.v.dtype, Shape{v_sends, kv_heads, d}));
  if (sends > 0) {
    MP_ASSIGN_OR_RETURN(TensorView index, UploadI64(b, &index_, send_rows));
    MP_RETURN_IF_ERROR(b.GatherRows({mine.k, AsConst(index), send_k}));
    if (!keys_only) MP_RETURN_IF_ERROR(b.GatherRows({mine.v, AsConst(index), send_v}));
  }
  runs_.clear();
  int64_t recv_row = 0;
  for (int t = 1; t < n; ++t) {
    const int dst = (me + t) % n, src = (me - t + n) % n;
    const int64_t s0 = send_offset[t - 1], s1 = send_offset[t];
    const int64_t r1 = recv_row + TotalSize(from[src]);
    const bool send = s1 > s0, recv = r1 > recv_row;
    if (send || recv) {
      MP_RETURN_IF_ERROR(comm.StartSendRecv(AsConst(SliceRows(send_k, s0, s1 - s0)),
                                            send ? dst : -1, SliceRows(k, recv_row, r1 - recv_row),
                                            recv ? src : -1));
      if (!keys_only)
        MP_RETURN_IF_ERROR(
            comm.StartSendRecv(AsConst(SliceRows(send_v, s0, s1 - s0)), send ? dst : -1,
                               SliceRows(v, recv_row, r1 - recv_row), recv ? src : -1));
    }
    for (const TokenRange& r : from[src]) {
      runs_.insert(runs_.end(), {r.begin, r.end, recv_row});
      recv_row += r.size();
    }
  }
  env.stats.comm_bytes += static_cast<int64_t>(send_k.NumBytes() + send_v.NumBytes());
  MP_RETURN_IF_ERROR(comm.WaitAll());
  // The key layout wants runs sorted by position.
  std::vector<std::array<int64_t, 3>> sorted;
  for (size_t i = 0; i < runs_.size(); i += 3)
    sorted.push_back({runs_[i], runs_[i + 1], runs_[i + 2]});
  std::sort(sorted.begin(), sorted.end());
  runs_.clear();
  for (const auto& r : sorted) runs_.insert(runs_.end(), r.begin(), r.end());
  rows_ = {AsConst(k), AsConst(v)};
  fetched_ = recv_total;
  return OkStatus();
}

}  // namespace millipede
