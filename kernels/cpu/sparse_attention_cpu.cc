#include "kernels/cpu/sparse_attention_cpu.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/attention/attention_state.h"
#include "kernels/cpu/attention_cpu.h"
#include "kernels/cpu/attention_cpu_block.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vector_math.h"

namespace millipede {
namespace {

constexpr int64_t kChunk = kAttentionCpuKeyTile;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Shapes shared by every item of one call.
struct SparseCpuShape {
  const SparseAttentionArgs* args;
  int64_t num_q_heads, head_dim, num_kv_heads, group, n_tiles;
  float scale;
};

// One item's packed query rows, running softmax state and the chunk of keys being gathered.
struct Scratch {
  std::vector<float> q, o, k, v, scores;
  std::vector<AttentionState> state;
  std::vector<int64_t> pos;
  int64_t width = 0;  // keys in the chunk
};

// The keys of item i that its tile can see: (key row, position, count) runs clipped at the
// tile's last position `last`; calls visit(row, pos, n) for each non-empty one.
template <typename Visit>
void ForEachVisibleRun(const SparseIndexView& index, int64_t i, int64_t last, Visit visit) {
  const int64_t* roff = index.range_offsets.as<const int64_t>();
  const int64_t* ranges = index.ranges.as<const int64_t>();
  const int64_t* coff = index.column_offsets.as<const int64_t>();
  const int64_t* cols = index.columns.as<const int64_t>();
  for (int64_t r = roff[i]; r < roff[i + 1]; ++r) {
    const int64_t* range = ranges + 3 * r;
    const int64_t n = std::min(range[1] - range[0], last - range[2] + 1);
    if (n > 0) visit(range[0], range[2], n);
  }
  for (int64_t c = coff[i]; c < coff[i + 1]; ++c)
    if (cols[2 * c + 1] <= last) visit(cols[2 * c], cols[2 * c + 1], int64_t{1});
}

// Scores the gathered chunk against the packed rows and folds it into their state and output.
void RunChunk(const SparseCpuShape& s, Scratch& sc, int64_t rows, int64_t first_pos) {
  const int64_t width = sc.width, d = s.head_dim;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, width, d, 1.0f, sc.q.data(), d,
              sc.k.data(), d, 0.0f, sc.scores.data(), width);
  // Row r is at position first_pos + r / group; a key after it is masked. Chunks wholly at or
  // before the tile's first position (most of them) need no mask.
  if (*std::max_element(sc.pos.begin(), sc.pos.begin() + width) > first_pos)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t query = first_pos + r / s.group;
      float* row = &sc.scores[r * width];
      for (int64_t j = 0; j < width; ++j)
        if (sc.pos[j] > query) row[j] = kNegInf;
    }
  cpu::AttentionCpuSoftmaxTile(sc.scores.data(), rows, width, d, sc.state.data(), sc.o.data());
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d, width, 1.0f, sc.scores.data(),
              width, sc.v.data(), d, 1.0f, sc.o.data(), d);
  sc.width = 0;
}

void RunItem(const SparseCpuShape& s, int64_t i) {
  thread_local Scratch sc;
  const SparseAttentionArgs& a = *s.args;
  const int64_t g = i / s.n_tiles, t = i % s.n_tiles, d = s.head_dim;
  const int64_t* tile = a.tiles.as<const int64_t>() + 3 * t;
  if (tile[1] == tile[0]) return;
  const cpu::AttentionCpuRows packed{s.num_q_heads, d, s.group, g, tile[0], tile[1]};
  const int64_t rows = packed.Count(), first_pos = tile[2];
  const int64_t last_pos = first_pos + tile[1] - tile[0] - 1;
  sc.q.resize(static_cast<size_t>(rows * d));
  sc.o.assign(static_cast<size_t>(rows * d), 0.0f);
  sc.state.assign(static_cast<size_t>(rows), AttentionState::Empty());
  sc.scores.resize(static_cast<size_t>(rows * kChunk));
  sc.k.resize(static_cast<size_t>(kChunk * d));
  sc.v.resize(static_cast<size_t>(kChunk * d));
  sc.pos.resize(static_cast<size_t>(kChunk));
  sc.width = 0;
  cpu::AttentionCpuPackQueries(packed, a.q.as<const float>(), s.scale, sc.q.data());
  const int64_t row_stride = s.num_kv_heads * d;
  ForEachVisibleRun(a.index, i, last_pos, [&](int64_t row, int64_t pos, int64_t n) {
    for (int64_t j = 0; j < n; ++j) {
      const int64_t offset = (row + j) * row_stride + g * d;
      cpu::WidenRow(a.k.data, a.k.dtype, offset, d, &sc.k[sc.width * d]);
      cpu::WidenRow(a.v.data, a.v.dtype, offset, d, &sc.v[sc.width * d]);
      sc.pos[sc.width] = pos + j;
      if (++sc.width == kChunk) RunChunk(s, sc, rows, first_pos);
    }
  });
  if (sc.width > 0) RunChunk(s, sc, rows, first_pos);
  cpu::AttentionCpuWriteRows(packed, sc.state.data(), sc.o.data(), a.o.as<float>(),
                             a.lse.as<float>());
}

}  // namespace

Status SparseAttentionCpu(const SparseAttentionArgs& args) {
  MP_RETURN_IF_ERROR(SparseAttentionCheckArgs(args));
  MP_RETURN_IF_ERROR(SparseAttentionCheckData(args));
  SparseCpuShape s{.args = &args,
                   .num_q_heads = args.q.dim(1),
                   .head_dim = args.q.dim(2),
                   .num_kv_heads = args.k.dim(1),
                   .group = args.q.dim(1) / args.k.dim(1),
                   .n_tiles = args.tiles.dim(0),
                   .scale = args.scale};
  if (s.scale == 0.0f)
    s.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim)));
  const int64_t items = s.num_kv_heads * s.n_tiles;
  // Each item's work (visible keys x packed rows), to hand out the costly ones first.
  std::vector<double> work(static_cast<size_t>(items), 0.0);
  const int64_t* tiles = args.tiles.as<const int64_t>();
  for (int64_t i = 0; i < items; ++i) {
    const int64_t* tile = tiles + 3 * (i % s.n_tiles);
    int64_t keys = 0;
    ForEachVisibleRun(args.index, i, tile[2] + tile[1] - tile[0] - 1,
                      [&](int64_t, int64_t, int64_t n) { keys += n; });
    work[i] = 4.0 * static_cast<double>(keys * (tile[1] - tile[0]) * s.group * s.head_dim);
  }
  std::vector<int64_t> order(static_cast<size_t>(items));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t x, int64_t y) { return work[x] > work[y]; });
  cpu::ParallelFor(items, std::accumulate(work.begin(), work.end(), 0.0),
                   [&](int64_t i) { RunItem(s, order[i]); });
  return OkStatus();
}

}  // namespace millipede
