#include "kernels/cpu/attention_cpu_block.h"

#include <cblas.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "kernels/attention/attention_state.h"
#include "kernels/cpu/attention_cpu.h"
#include "kernels/cpu/vector_math.h"

namespace millipede::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The keys one query position may see within an item's key range [k_begin, k_end), as local key
// indices: the sinks [k_begin, sink_end) and the window [window_begin, end). Without a window (or
// when the two meet) the sinks are empty and the window is every key up to the causal limit.
struct KeySpan {
  int64_t sink_end, window_begin, end;

  bool Sees(int64_t j) const { return j < sink_end || (j >= window_begin && j < end); }
  // Whether the tile [j0, j1) holds a visible key, and whether every key of it is visible
  // (j0 is never below the item's k_begin).
  bool Any(int64_t j0, int64_t j1) const {
    return j0 < sink_end || std::max(j0, window_begin) < std::min(j1, end);
  }
  bool All(int64_t j0, int64_t j1) const {
    return j1 <= sink_end || (j0 >= window_begin && j1 <= end);
  }
};

// AttentionRef's mask for query row t of KV head g, as spans (positions are global).
KeySpan SpanOf(const AttentionCpuShape& s, int64_t g, int64_t t, int64_t k_begin, int64_t k_end) {
  const AttentionArgs& a = *s.args;
  const int64_t query = a.q_offset + t;
  int64_t limit = a.mask == AttentionMask::kCausal ? query - a.k_offset + 1 : s.n_kv;
  if (a.kv_head_rows.data != nullptr)
    limit = std::min<int64_t>(limit, a.kv_head_rows.as<const int32_t>()[g]);
  const int64_t end = std::clamp(limit, k_begin, k_end);
  const int64_t window = a.kv_head_window != nullptr ? a.kv_head_window[g] : 0;
  if (window <= 0) return {k_begin, k_begin, end};
  // A key at position p is seen when p < sink_tokens or query - p < window.
  const int64_t sink_end = std::clamp(a.sink_tokens - a.k_offset, k_begin, end);
  const int64_t window_begin = std::clamp(query - window + 1 - a.k_offset, k_begin, end);
  if (window_begin <= sink_end) return {k_begin, k_begin, end};
  return {sink_end, window_begin, end};
}

// Per-thread buffers, kept between items.
struct Scratch {
  std::vector<float> q, scores, o, k, v;
  std::vector<AttentionState> state;
  std::vector<KeySpan> spans;
  std::vector<uint8_t> seen;
};

// Rows [j0, j1) of K or V for KV head g as F32 rows: in place for F32 (row stride
// num_kv_heads * head_dim), widened into buf otherwise (stride head_dim).
const float* KvTile(const AttentionCpuShape& s, const ConstTensorView& t, int64_t g, int64_t j0,
                    int64_t j1, std::vector<float>& buf, int64_t* stride) {
  const int64_t d = s.head_dim, row = s.num_kv_heads * d;
  if (t.dtype == DType::kF32) {
    *stride = row;
    return t.as<const float>() + j0 * row + g * d;
  }
  buf.resize(static_cast<size_t>((j1 - j0) * d));
  for (int64_t j = j0; j < j1; ++j)
    WidenRow(t.data, t.dtype, j * row + g * d, d, &buf[(j - j0) * d]);
  *stride = d;
  return buf.data();
}

// Sets the scores of keys a row may not see to -inf (a tile only partly visible).
void MaskTile(const AttentionCpuShape& s, Scratch& sc, int64_t rows, int64_t j0, int64_t j1,
              bool hidden_keys) {
  const int64_t width = j1 - j0;
  for (int64_t r = 0; r < rows; ++r) {
    const KeySpan& span = sc.spans[static_cast<size_t>(r / s.group)];
    if (!hidden_keys && span.All(j0, j1)) continue;
    float* row = &sc.scores[r * width];
    for (int64_t j = j0; j < j1; ++j)
      if (!span.Sees(j) || (hidden_keys && sc.seen[j - j0] == 0)) row[j - j0] = kNegInf;
  }
}

}  // namespace

void AttentionCpuPackQueries(const AttentionCpuRows& rows, const float* q, float scale,
                             float* out) {
  const int64_t d = rows.head_dim;
  for (int64_t t = rows.q_begin; t < rows.q_end; ++t)
    for (int64_t hl = 0; hl < rows.group; ++hl) {
      const float* src = q + (t * rows.num_q_heads + rows.kv_head * rows.group + hl) * d;
      float* dst = out + ((t - rows.q_begin) * rows.group + hl) * d;
      for (int64_t c = 0; c < d; ++c) dst[c] = src[c] * scale;
    }
}

void AttentionCpuSoftmaxTile(float* scores, int64_t rows, int64_t width, int64_t head_dim,
                             AttentionState* state, float* o_acc) {
  for (int64_t r = 0; r < rows; ++r) {
    float* p = scores + r * width;
    const float tile_max = RowMax(p, width);
    AttentionState tile = AttentionState::Empty();
    if (tile_max != kNegInf) tile = {tile_max, ExpShiftedSum(p, width, tile_max)};
    const AttentionState::Factors f = state[r].Merge(tile);
    float* o = o_acc + r * head_dim;
    // A factor of 0 means that side holds nothing (AttentionState): clear it, never scale it.
    if (f.self == 0.0f) {
      std::fill_n(o, head_dim, 0.0f);
    } else if (f.self != 1.0f) {
      ScaleRow(o, head_dim, f.self);
    }
    if (f.other == 0.0f) {
      std::fill_n(p, width, 0.0f);
    } else if (f.other != 1.0f) {
      ScaleRow(p, width, f.other);
    }
  }
}

void AttentionCpuWriteRows(const AttentionCpuRows& rows, const AttentionState* state,
                           const float* o_acc, float* o, float* lse) {
  const int64_t d = rows.head_dim;
  for (int64_t t = rows.q_begin; t < rows.q_end; ++t)
    for (int64_t hl = 0; hl < rows.group; ++hl) {
      const int64_t r = (t - rows.q_begin) * rows.group + hl;
      const int64_t h = rows.kv_head * rows.group + hl;
      const float out_scale = state[r].OutputScale();
      float* dst = o + (t * rows.num_q_heads + h) * d;
      for (int64_t c = 0; c < d; ++c) dst[c] = o_acc[r * d + c] * out_scale;
      if (lse != nullptr) lse[t * rows.num_q_heads + h] = state[r].Lse();
    }
}

void AttentionCpuBlock(const AttentionCpuShape& s, const AttentionCpuItem& item) {
  thread_local Scratch sc;
  const int64_t positions = item.q_end - item.q_begin, rows = positions * s.group;
  const int64_t d = s.head_dim, g = item.kv_head;
  // The keys any row of the block sees: [lo, hi).
  sc.spans.resize(static_cast<size_t>(positions));
  int64_t lo = item.k_end, hi = item.k_begin;
  for (int64_t t = 0; t < positions; ++t) {
    const KeySpan span = SpanOf(s, g, item.q_begin + t, item.k_begin, item.k_end);
    sc.spans[static_cast<size_t>(t)] = span;
    const int64_t first = span.sink_end > item.k_begin ? item.k_begin : span.window_begin;
    if (first >= span.end) continue;
    lo = std::min(lo, first);
    hi = std::max(hi, span.end);
  }
  sc.q.resize(static_cast<size_t>(rows * d));
  sc.o.assign(static_cast<size_t>(rows * d), 0.0f);
  sc.state.assign(static_cast<size_t>(rows), AttentionState::Empty());
  sc.scores.resize(static_cast<size_t>(rows * kAttentionCpuKeyTile));
  sc.seen.resize(static_cast<size_t>(kAttentionCpuKeyTile));
  const AttentionCpuRows packed{s.num_q_heads, s.head_dim,   s.group,
                                item.kv_head,  item.q_begin, item.q_end};
  AttentionCpuPackQueries(packed, s.args->q.as<const float>(), s.scale, sc.q.data());
  const uint8_t* visible = s.args->kv_row_visible;
  for (int64_t j0 = lo; j0 < hi; j0 += kAttentionCpuKeyTile) {
    const int64_t j1 = std::min(hi, j0 + kAttentionCpuKeyTile), width = j1 - j0;
    bool any = false, all = true;
    for (const KeySpan& span : sc.spans) {
      any = any || span.Any(j0, j1);
      all = all && span.All(j0, j1);
    }
    bool hidden_keys = false;
    if (any && visible != nullptr) {
      int64_t shown = 0;
      for (int64_t j = j0; j < j1; ++j) {
        sc.seen[j - j0] = visible[j * s.num_kv_heads + g] != 0;
        shown += sc.seen[j - j0];
      }
      any = shown > 0;
      hidden_keys = shown < width;
    }
    if (!any) continue;
    int64_t k_stride = 0, v_stride = 0;
    const float* k = KvTile(s, s.k, g, j0, j1, sc.k, &k_stride);
    const float* v = KvTile(s, s.v, g, j0, j1, sc.v, &v_stride);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, width, d, 1.0f, sc.q.data(), d, k,
                k_stride, 0.0f, sc.scores.data(), width);
    if (!all || hidden_keys) MaskTile(s, sc, rows, j0, j1, hidden_keys);
    AttentionCpuSoftmaxTile(sc.scores.data(), rows, width, d, sc.state.data(), sc.o.data());
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d, width, 1.0f, sc.scores.data(),
                width, v, v_stride, 1.0f, sc.o.data(), d);
  }
  AttentionCpuWriteRows(packed, sc.state.data(), sc.o.data(), item.o, item.lse);
}

}  // namespace millipede::cpu
