#include "kernels/cpu/attention_cpu.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/attention_cpu_block.h"
#include "kernels/cpu/merge_state_cpu.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vector_math.h"

namespace millipede {
namespace {

// Packed query rows (positions x q heads of a group) per item: enough for sgemm to run near its
// peak on a tile, few enough that a causal block wastes little on its diagonal tile.
constexpr int64_t kRowsPerItem = 256;

// Largest F32 copy of K and V made per call (see WidenKv).
constexpr int64_t kMaxWideKvBytes = int64_t{64} << 20;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Several query blocks read every key of their KV head: BF16/F16 keys and values are widened to
// F32 once for the call rather than once per block (bounded; beyond that each block widens its
// own tiles). Under a causal mask only the rows up to the last query's position are. The copy is
// kept per calling thread for the next call.
void WidenKv(cpu::AttentionCpuShape& s, int64_t q_blocks) {
  const AttentionArgs& a = *s.args;
  const ConstTensorView& k = a.k;
  const ConstTensorView& v = a.v;
  const int64_t rows = a.mask == AttentionMask::kCausal
                           ? std::clamp<int64_t>(a.q_offset + s.n_q - a.k_offset, 0, s.n_kv)
                           : s.n_kv;
  const int64_t elements = rows * s.num_kv_heads * s.head_dim;
  if ((k.dtype == DType::kF32 && v.dtype == DType::kF32) || q_blocks < 2 ||
      2 * elements * static_cast<int64_t>(sizeof(float)) > kMaxWideKvBytes)
    return;
  thread_local std::vector<float> wide;
  wide.resize(static_cast<size_t>(2 * elements));
  // The calling thread's buffer: the pool's threads must not name the thread_local themselves.
  float* const k32 = wide.data();
  float* const v32 = k32 + elements;
  constexpr int64_t kChunk = 16384;
  cpu::ParallelFor(CeilDiv(elements, kChunk), 2.0 * static_cast<double>(elements), [&](int64_t i) {
    const int64_t begin = i * kChunk, n = std::min(kChunk, elements - begin);
    cpu::WidenRow(k.data, k.dtype, begin, n, k32 + begin);
    cpu::WidenRow(v.data, v.dtype, begin, n, v32 + begin);
  });
  // No item reads a row past `rows` (its causal limit).
  const Shape shape{rows, s.num_kv_heads, s.head_dim};
  s.k = ConstTensorView{k32, DType::kF32, shape};
  s.v = ConstTensorView{v32, DType::kF32, shape};
}

// Key splits per item: 1 unless there are fewer items than threads (decode, a few query rows)
// and enough keys to share out.
int64_t KeySplits(int64_t items, int64_t n_kv) {
  const int64_t threads = cpu::CpuThreads();
  if (items >= threads) return 1;
  return std::clamp<int64_t>(CeilDiv(2 * threads, items), 1,
                             std::max<int64_t>(1, n_kv / (2 * kAttentionCpuKeyTile)));
}

}  // namespace

Status AttentionCpu(const AttentionArgs& args, const AttentionCpuOptions& options) {
  MP_RETURN_IF_ERROR(AttentionCheckArgs(args));
  MP_REQUIRE(options.key_splits >= 0, "attention: key_splits ", options.key_splits, " < 0");
  cpu::AttentionCpuShape s{.args = &args,
                           .n_q = args.q.dim(0),
                           .num_q_heads = args.q.dim(1),
                           .head_dim = args.q.dim(2),
                           .n_kv = args.k.dim(0),
                           .num_kv_heads = args.k.dim(1),
                           .group = args.q.dim(1) / args.k.dim(1),
                           .scale = args.scale,
                           .k = args.k,
                           .v = args.v};
  if (s.scale == 0.0f)
    s.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim)));
  if (s.n_q == 0) return OkStatus();

  const int64_t block = std::max<int64_t>(1, kRowsPerItem / s.group);
  const int64_t q_blocks = CeilDiv(s.n_q, block);
  const int64_t items = q_blocks * s.num_kv_heads;
  int64_t splits = options.key_splits > 0
                       ? std::min(options.key_splits, std::max<int64_t>(1, s.n_kv))
                       : KeySplits(items, s.n_kv);
  const int64_t split_keys = CeilDiv(s.n_kv, splits);
  if (splits > 1) splits = CeilDiv(s.n_kv, split_keys);
  WidenKv(s, q_blocks);

  // With splits, each writes a normalised part and MergeStateCpu combines them.
  std::vector<float> o_parts, lse_parts;
  float* o = args.o.as<float>();
  float* lse = args.lse.data != nullptr ? args.lse.as<float>() : nullptr;
  const int64_t o_size = s.n_q * s.num_q_heads * s.head_dim, lse_size = s.n_q * s.num_q_heads;
  if (splits > 1) {
    o_parts.resize(static_cast<size_t>(splits * o_size));
    lse_parts.resize(static_cast<size_t>(splits * lse_size));
  }
  const double work = 4.0 * static_cast<double>(o_size) * static_cast<double>(s.n_kv);
  cpu::ParallelFor(items * splits, work, [&](int64_t i) {
    // Causal blocks later in the sequence see more keys: hand those out first.
    const int64_t qb = q_blocks - 1 - i / (s.num_kv_heads * splits);
    const int64_t g = (i / splits) % s.num_kv_heads, part = i % splits;
    cpu::AttentionCpuItem item{.kv_head = g,
                               .q_begin = qb * block,
                               .q_end = std::min(s.n_q, (qb + 1) * block),
                               .k_begin = part * split_keys,
                               .k_end = std::min(s.n_kv, (part + 1) * split_keys),
                               .o = o,
                               .lse = lse};
    if (splits > 1) {
      item.o = o_parts.data() + part * o_size;
      item.lse = lse_parts.data() + part * lse_size;
    }
    cpu::AttentionCpuBlock(s, item);
  });
  if (splits == 1) return OkStatus();

  std::vector<float> lse_scratch;
  TensorView lse_out = args.lse;
  if (lse == nullptr) {
    lse_scratch.resize(static_cast<size_t>(lse_size));
    lse_out = TensorView{lse_scratch.data(), DType::kF32, Shape{s.n_q, s.num_q_heads}};
  }
  return MergeStateCpu(
      {ConstTensorView{o_parts.data(), DType::kF32,
                       Shape{splits, s.n_q, s.num_q_heads, s.head_dim}},
       ConstTensorView{lse_parts.data(), DType::kF32, Shape{splits, s.n_q, s.num_q_heads}}, args.o,
       lse_out});
}

}  // namespace millipede
