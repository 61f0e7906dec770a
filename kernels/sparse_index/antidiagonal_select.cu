#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/cuda_check.h"
#include "kernels/attention/attention_mma.cuh"
#include "kernels/layer/gemm_cuda.h"
#include "kernels/sparse_index/antidiagonal_select_cuda.h"
#include "kernels/sparse_index/sparse_index.cuh"
#include "kernels/sparse_index/sparse_index_ref.h"

namespace millipede {
namespace {

using namespace sparse_index_cuda;  // NOLINT(build/namespaces): the builders' shared internals

constexpr int kWarps = 8, kThreads = kWarps * 32;
constexpr int64_t kScoreBudgetBytes = int64_t{1} << 30;  // one slab's scores (F32)
constexpr float kLog2e = 1.4426950408889634f;
using Bf16 = attention_internal::MmaType<__nv_bfloat16>;

// The row of each position in [pos0, pos0 + n) of a layout, or -1.
__global__ void PositionRowsKernel(const int64_t* runs, int64_t n_runs, int64_t pos0, int64_t n,
                                   int32_t* rows, bool report_absent, ErrorWord* error) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    const int64_t row = RowOf(runs, n_runs, pos0 + i);
    rows[i] = static_cast<int32_t>(row);
    if (row < 0 && report_absent) Report(error, kAbsentKey, pos0 + i);
  }
}

// Eight consecutive elements times `scale`, as eight bf16 in 16 bytes (zeros for a null pointer).
template <typename T>
__device__ __forceinline__ uint4 Load8(const T* p, float scale) {
  if (p == nullptr) return make_uint4(0, 0, 0, 0);
  float f[8];
  if constexpr (std::is_same_v<T, float>) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(p));
    const float4 b = __ldg(reinterpret_cast<const float4*>(p) + 1);
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
  } else if constexpr (std::is_same_v<T, __nv_fp8_e4m3>) {
    cuda_util::Widen8<__nv_fp8_e4m3>(__ldg(reinterpret_cast<const uint2*>(p)), f);
  } else {
    cuda_util::Widen8<T>(__ldg(reinterpret_cast<const uint4*>(p)), f);
  }
  return make_uint4(Bf16::Pack(f[0] * scale, f[1] * scale), Bf16::Pack(f[2] * scale, f[3] * scale),
                    Bf16::Pack(f[4] * scale, f[5] * scale), Bf16::Pack(f[6] * scale, f[7] * scale));
}

// The reshaped keys [kv_heads, key_rows, stride * d] bf16: row b of head g is the keys at
// positions b * stride .. b * stride + stride - 1 in order (0 at positions >= length).
template <typename KT>
__global__ void ReshapeKeysKernel(const KT* k, const int32_t* k_rows, int64_t length,
                                  int64_t key_rows, int kv_heads, int d, int stride,
                                  __nv_bfloat16* out) {
  const int64_t sd8 = static_cast<int64_t>(stride) * d / 8;
  const int64_t total = kv_heads * key_rows * sd8;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t e = (i % sd8) * 8, b = (i / sd8) % key_rows, g = i / sd8 / key_rows;
    const int64_t pos = b * stride + e / d;
    const int32_t row = pos < length ? k_rows[pos] : -1;
    const KT* src = row >= 0 ? k + (static_cast<int64_t>(row) * kv_heads + g) * d + e % d : nullptr;
    *reinterpret_cast<uint4*>(out + i * 8) = Load8(src, 1.0f);
  }
}

// The reshaped queries of a slab of scored blocks, [kv_heads, group, n_blocks, R, stride * d]
// bf16, times `scale`: row a of block i for query head g * group + h holds the queries at
// positions qb * B + a * S + S - 1 - j, j = 0..S-1 (the anti-diagonal order; 0 where q holds none).
template <typename QT>
__global__ void ReshapeQueriesKernel(const QT* q, const int32_t* q_rows, int64_t q_pos0,
                                     const int32_t* blocks, int64_t n_blocks, int heads,
                                     int kv_heads, int d, int stride, int block, float scale,
                                     __nv_bfloat16* out) {
  const int R = block / stride;
  const int64_t sd8 = static_cast<int64_t>(stride) * d / 8;
  const int64_t total = static_cast<int64_t>(heads) * n_blocks * R * sd8;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t e = (i % sd8) * 8, rest = i / sd8;
    const int64_t a = rest % R, blk = rest / R % n_blocks, h = rest / R / n_blocks;  // h: g*group+h
    const int64_t j = e / d;
    const int64_t pos = blocks[blk] * static_cast<int64_t>(block) + a * stride + stride - 1 - j;
    const int32_t row = q_rows[pos - q_pos0];
    const QT* src = row >= 0 ? q + (static_cast<int64_t>(row) * heads + h) * d + e % d : nullptr;
    *reinterpret_cast<uint4*>(out + i * 8) = Load8(src, scale);
  }
}

struct MassParams {
  const float* scores;    // [kv_heads, group, n_blocks, R, cols] base 2, scaled
  int64_t cols;           // key rows computed per row
  const int32_t* q_rows;  // rows of positions [q_pos0, ...)
  int64_t q_pos0;
  const int32_t* blocks;  // [n_blocks] this slab's scored blocks
  int64_t n_blocks, key_rows, num_kb;
  int kv_heads, group, stride, block;
  const int64_t* permille;  // [kv_heads]
  float* mass;              // [n_blocks, kv_heads, num_kb]
};

// One thread block per (block of the slab, KV head, kWarps of its group * R rows (h, a)): each
// warp reads its row's scores twice (maximum and sum, then each key block's share) and adds the
// shares into shared memory, which is then added into the block's row of masses (zeroed before).
// R = block / stride, a power of two <= 16, so a key block's scores are R aligned lanes.
__global__ void __launch_bounds__(kThreads) MassKernel(MassParams p) {
  extern __shared__ float mass[];  // [num_kb]
  __shared__ int has[16];
  const int64_t i = blockIdx.x, g = blockIdx.y;
  if (p.permille[g] == 0) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int R = p.block / p.stride, r = blockIdx.z * kWarps + warp;
  const int64_t qb = p.blocks[i];
  for (int64_t kb = threadIdx.x; kb <= qb; kb += kThreads) mass[kb] = 0.0f;
  if (threadIdx.x < 16) {
    int any = 0;
    for (int j = 0; threadIdx.x < R && j < p.stride; ++j)
      any |= p.q_rows[qb * p.block + threadIdx.x * p.stride + j - p.q_pos0] >= 0;
    has[threadIdx.x] = any;
  }
  __syncthreads();
  int taking = 0;
  for (int a = 0; a < R; ++a) taking += has[a];
  const float inv = 1.0f / (static_cast<float>(taking) * p.group);
  if (r < p.group * R && has[r % R]) {
    const int h = r / R, a = r % R;
    const int64_t last = min(qb * R + a, p.key_rows - 1);  // keys 0..last
    const float* s = p.scores + (((g * p.group + h) * p.n_blocks + i) * R + a) * p.cols;
    float m = -INFINITY, l = 0.0f;
    for (int64_t b = lane; b <= last; b += 32) {
      const float v = s[b];
      if (v > m) {
        l = l * exp2f(m - v) + 1.0f;
        m = v;
      } else {
        l += exp2f(v - m);
      }
    }
    for (int o = 16; o > 0; o /= 2) {
      const float m2 = __shfl_xor_sync(kFullMask, m, o), l2 = __shfl_xor_sync(kFullMask, l, o);
      const float mm = fmaxf(m, m2);
      l = (m == -INFINITY ? 0.0f : l * exp2f(m - mm)) +
          (m2 == -INFINITY ? 0.0f : l2 * exp2f(m2 - mm));
      m = mm;
    }
    const float inv_l = inv / l;
    for (int64_t b0 = 0; b0 <= last; b0 += 32) {
      const int64_t b = b0 + lane;
      float v = b <= last ? exp2f(s[b] - m) * inv_l : 0.0f;
      for (int o = 1; o < R; o *= 2) v += __shfl_xor_sync(kFullMask, v, o);
      if (lane % R == 0 && b <= last) atomicAdd(&mass[b * p.stride / p.block], v);
    }
  }
  __syncthreads();
  float* out = p.mass + (i * p.kv_heads + g) * p.num_kb;
  for (int64_t kb = threadIdx.x; kb <= qb; kb += kThreads)
    if (mass[kb] != 0.0f) atomicAdd(out + kb, mass[kb]);
}

// Block-wide sum of 64-bit values (every thread calls it; `red` holds kWarps entries).
__device__ int64_t BlockSum(int64_t v, int64_t* red) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(kFullMask, v, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  int64_t total = 0;
  for (int w = 0; w < kWarps; ++w) total += red[w];
  return total;
}
__device__ __forceinline__ int64_t Fixed(float m) {
  return m > 0.0f ? __double2ll_rn(static_cast<double>(m) * 0x1p40) : 0;
}

struct SelectParams {
  const float* mass;  // [n, kv_heads, num_kb]
  const int32_t* blocks;
  const int64_t* permille;
  int64_t kv_heads, num_kb, qb_begin, n_qb, words;
  uint32_t* kept;   // [kv_heads, n_qb, words]
  float* mass_out;  // [kv_heads, n_qb, num_kb] or null
};

// One thread block per (scored block, KV head): AntidiagonalKeep on the device.
__global__ void __launch_bounds__(kThreads) SelectKernel(SelectParams p) {
  __shared__ int64_t red[kWarps];
  const int64_t g = blockIdx.y, qb = p.blocks[blockIdx.x], permille = p.permille[g];
  if (permille == 0) return;
  const float* m = p.mass + (blockIdx.x * p.kv_heads + g) * p.num_kb;
  const int64_t out_row = g * p.n_qb + qb - p.qb_begin;
  if (p.mass_out != nullptr)
    for (int64_t kb = threadIdx.x; kb < p.num_kb; kb += kThreads)
      p.mass_out[out_row * p.num_kb + kb] = kb <= qb ? m[kb] : 0.0f;
  int64_t local = 0, top = 0;
  for (int64_t kb = threadIdx.x; kb <= qb; kb += kThreads) {
    local += Fixed(m[kb]);
    if (kb != 0 && kb != qb) top = max(top, Fixed(m[kb]));
  }
  const int64_t total = BlockSum(local, red);
  for (int o = 16; o > 0; o /= 2) top = max(top, __shfl_xor_sync(kFullMask, top, o));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) red[threadIdx.x / 32] = top;
  __syncthreads();
  for (int w = 0; w < kWarps; ++w) top = max(top, red[w]);
  const int64_t target = static_cast<int64_t>(
      ceil(static_cast<double>(permille) * static_cast<double>(total) / 1000.0));
  const int64_t forced = Fixed(m[0]) + (qb > 0 ? Fixed(m[qb]) : 0);
  // Keep the other blocks with u >= v (v < 0: every block; v > top: none).
  int64_t v = top + 1;
  if (permille >= 1000) {
    v = -1;
  } else if (forced < target && qb > 1) {
    int64_t lo = 0, hi = top + 1;  // reached(lo) >= target > reached(hi)
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      int64_t sum = 0;
      for (int64_t kb = 1 + threadIdx.x; kb < qb; kb += kThreads) {
        const int64_t u = Fixed(m[kb]);
        if (u >= mid) sum += u;
      }
      __syncthreads();
      if (forced + BlockSum(sum, red) >= target) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    v = lo;
  }
  uint32_t* bits = p.kept + out_row * p.words;
  for (int64_t w = threadIdx.x; w < p.words; w += kThreads) {
    uint32_t word = 0;
    for (int i = 0; i < 32 && w <= qb / 32; ++i) {
      const int64_t kb = w * 32 + i;
      if (kb > qb) break;
      if (kb == 0 || kb == qb || v < 0 || Fixed(m[kb]) >= v) word |= 1u << i;
    }
    bits[w] = word;
  }
}

// The scored query blocks (sorted) from q's layout on the host, checked as the reference does.
StatusOr<std::vector<int32_t>> ScoredBlocks(const AntidiagonalSelectArgs& args,
                                            cudaStream_t stream) {
  std::vector<int64_t> runs(static_cast<size_t>(args.q_runs.NumElements()));
  if (!runs.empty()) {
    MP_CUDA_CHECK(cudaMemcpyAsync(runs.data(), args.q_runs.data, runs.size() * 8,
                                  cudaMemcpyDeviceToHost, stream));
    MP_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  MP_RETURN_IF_ERROR(sparse_index_ref::KeyLayout::Read(
                         {runs.data(), DType::kI64, args.q_runs.shape}, "antidiagonal_select")
                         .status());
  std::vector<int32_t> blocks;
  const int64_t n_qb = args.kept.dim(1);
  for (size_t i = 0; i < runs.size(); i += 3) {
    if (runs[i + 1] <= runs[i]) continue;
    MP_REQUIRE(runs[i + 2] + runs[i + 1] - runs[i] <= args.q.dim(0), "antidiagonal_select: q run ",
               i / 3, " reaches past q's ", args.q.dim(0), " rows");
    MP_REQUIRE(runs[i + 1] <= args.length, "antidiagonal_select: query position ", runs[i + 1] - 1,
               " is not before length ", args.length);
    for (int64_t qb = runs[i] / args.block; qb <= (runs[i + 1] - 1) / args.block; ++qb) {
      MP_REQUIRE(qb >= args.qb_begin && qb < args.qb_begin + n_qb,
                 "antidiagonal_select: query block ", qb, " is outside the bitmaps' blocks [",
                 args.qb_begin, ", ", args.qb_begin + n_qb, ")");
      blocks.push_back(static_cast<int32_t>(qb));
    }
  }
  std::sort(blocks.begin(), blocks.end());
  blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
  return blocks;
}

unsigned GridFor(int64_t n) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + 255) / 256, 1, 8192));
}

Status LaunchReshapeKeys(const AntidiagonalSelectArgs& args, const int32_t* k_rows,
                         int64_t key_rows, __nv_bfloat16* out, cudaStream_t stream) {
  const int kv = static_cast<int>(args.k.dim(1)), d = static_cast<int>(args.k.dim(2));
  const int64_t n = kv * key_rows * args.stride * d / 8;
  auto launch = [&](auto tag) {
    using KT = decltype(tag);
    ReshapeKeysKernel<KT><<<GridFor(n), 256, 0, stream>>>(static_cast<const KT*>(args.k.data),
                                                          k_rows, args.length, key_rows, kv, d,
                                                          static_cast<int>(args.stride), out);
  };
  switch (args.k.dtype) {
    case DType::kBF16:
      launch(__nv_bfloat16{});
      break;
    case DType::kF16:
      launch(__half{});
      break;
    case DType::kF32:
      launch(float{});
      break;
    default:
      launch(__nv_fp8_e4m3{});
      break;
  }
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

Status LaunchReshapeQueries(const AntidiagonalSelectArgs& args, const int32_t* q_rows,
                            int64_t q_pos0, const int32_t* blocks, int64_t n_blocks, float scale,
                            __nv_bfloat16* out, cudaStream_t stream) {
  const int heads = static_cast<int>(args.q.dim(1)), d = static_cast<int>(args.q.dim(2));
  const int64_t n = heads * n_blocks * args.block * d / 8;
  auto launch = [&](auto tag) {
    using QT = decltype(tag);
    ReshapeQueriesKernel<QT><<<GridFor(n), 256, 0, stream>>>(
        static_cast<const QT*>(args.q.data), q_rows, q_pos0, blocks, n_blocks, heads,
        static_cast<int>(args.k.dim(1)), d, static_cast<int>(args.stride),
        static_cast<int>(args.block), scale, out);
  };
  switch (args.q.dtype) {
    case DType::kBF16:
      launch(__nv_bfloat16{});
      break;
    case DType::kF16:
      launch(__half{});
      break;
    default:
      launch(float{});
      break;
  }
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

// Slabs of the scored blocks: runs of consecutive blocks whose scores fit the budget (a gap
// starts a new slab, so that no block computes keys far past its own).
std::vector<std::pair<int64_t, int64_t>> Slabs(const std::vector<int32_t>& blocks,
                                               int64_t bytes_per_block_row, int64_t R,
                                               int64_t key_rows) {
  std::vector<std::pair<int64_t, int64_t>> slabs;  // [begin, end) into blocks
  const int64_t n = static_cast<int64_t>(blocks.size());
  for (int64_t b = 0; b < n;) {
    int64_t e = b + 1;
    while (e < n && blocks[e] == blocks[e - 1] + 1) {
      const int64_t cols = std::min(key_rows, (blocks[e] + int64_t{1}) * R);
      if ((e - b + 1) * bytes_per_block_row * cols > kScoreBudgetBytes) break;
      ++e;
    }
    slabs.push_back({b, e});
    b = e;
  }
  return slabs;
}

}  // namespace

Status AntidiagonalSelectCuda(const AntidiagonalSelectArgs& args,
                              SparseIndexCudaWorkspace& workspace, GemmCudaContext& gemm,
                              cudaStream_t stream) {
  MP_RETURN_IF_ERROR(AntidiagonalSelectCheckArgs(args));
  const int64_t heads = args.q.dim(1), kv_heads = args.k.dim(1), d = args.q.dim(2);
  const int64_t S = args.stride, B = args.block, R = B / S, SD = S * d, group = heads / kv_heads;
  MP_REQUIRE(d % 8 == 0 && R <= 16 && (R & (R - 1)) == 0,
             "antidiagonal_select on CUDA needs head_dim % 8 == 0 (", d,
             ") and block / stride a power of two <= 16 (", R, ")");
  SparseIndexCudaWorkspace::Impl& ws = workspace.impl();
  MP_RETURN_IF_ERROR(BeginChecks(ws, ConstTensorView{}, args.k_runs, stream));
  MP_ASSIGN_OR_RETURN(const std::vector<int32_t> blocks, ScoredBlocks(args, stream));
  const int64_t num_kb = (args.length + B - 1) / B, n_qb = args.kept.dim(1);
  bool any_head = false;
  for (int64_t g = 0; g < kv_heads; ++g) any_head |= args.permille[g] != 0;
  if (blocks.empty() || !any_head) return Finish(ws, "antidiagonal_select", stream);
  // Device copies: permille [kv_heads] I64, then the scored blocks (I32).
  const size_t head_bytes = static_cast<size_t>(kv_heads) * 8;
  MP_RETURN_IF_ERROR(ws.heads.Reserve(head_bytes + blocks.size() * 4, stream));
  auto* permille = static_cast<int64_t*>(ws.heads.data());
  auto* dev_blocks = reinterpret_cast<int32_t*>(static_cast<char*>(ws.heads.data()) + head_bytes);
  MP_CUDA_CHECK(
      cudaMemcpyAsync(permille, args.permille, head_bytes, cudaMemcpyHostToDevice, stream));
  MP_CUDA_CHECK(cudaMemcpyAsync(dev_blocks, blocks.data(), blocks.size() * 4,
                                cudaMemcpyHostToDevice, stream));
  // Position tables: q over the scored blocks' positions, k over [0, key_end) (all held).
  const int64_t q_pos0 = blocks.front() * B, q_n = (blocks.back() + 1) * B - q_pos0;
  const int64_t key_end = std::min(args.length, (blocks.back() + 1) * B);
  MP_RETURN_IF_ERROR(ws.positions.Reserve(static_cast<size_t>(q_n + key_end) * 4, stream));
  auto* q_rows = static_cast<int32_t*>(ws.positions.data());
  int32_t* k_rows = q_rows + q_n;
  PositionRowsKernel<<<GridFor(q_n), 256, 0, stream>>>(
      args.q_runs.as<const int64_t>(), args.q_runs.dim(0), q_pos0, q_n, q_rows, false, ws.error);
  MP_CUDA_CHECK_LAUNCH();
  PositionRowsKernel<<<GridFor(key_end), 256, 0, stream>>>(
      args.k_runs.as<const int64_t>(), args.k_runs.dim(0), 0, key_end, k_rows, true, ws.error);
  MP_CUDA_CHECK_LAUNCH();
  // The reshaped keys, then one slab's reshaped queries, scores and masses.
  const int64_t key_rows = (key_end + S - 1) / S;
  const auto slabs = Slabs(blocks, heads * R * 4, R, key_rows);
  int64_t most = 1, most_scores = 1;
  for (const auto& [b, e] : slabs) {
    most = std::max(most, e - b);
    most_scores = std::max(
        most_scores, (e - b) * heads * R * std::min(key_rows, (blocks[e - 1] + int64_t{1}) * R));
  }
  const int64_t k_elems = kv_heads * key_rows * SD, q_elems = most * heads * R * SD;
  MP_RETURN_IF_ERROR(ws.reshaped.Reserve(static_cast<size_t>(k_elems + q_elems) * 2, stream));
  auto* k_r = static_cast<__nv_bfloat16*>(ws.reshaped.data());
  __nv_bfloat16* q_r = k_r + k_elems;
  const size_t mass_bytes = static_cast<size_t>(most * kv_heads * num_kb) * 4;
  MP_RETURN_IF_ERROR(ws.scores.Reserve(static_cast<size_t>(most_scores) * 4 + mass_bytes, stream));
  auto* scores = static_cast<float*>(ws.scores.data());
  float* mass = scores + most_scores;
  MP_RETURN_IF_ERROR(LaunchReshapeKeys(args, k_rows, key_rows, k_r, stream));
  const float scale = args.scale / static_cast<float>(S) * kLog2e;
  const size_t mass_smem = static_cast<size_t>(num_kb) * 4;
  MP_REQUIRE(mass_smem <= 200 * 1024, "antidiagonal_select on CUDA: ", num_kb,
             " key blocks are more than shared memory holds (at most 51200)");
  MP_CUDA_CHECK(cudaFuncSetAttribute(MassKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(mass_smem)));
  for (const auto& [b, e] : slabs) {
    const int64_t n = e - b, cols = std::min(key_rows, (blocks[e - 1] + int64_t{1}) * R);
    MP_RETURN_IF_ERROR(
        LaunchReshapeQueries(args, q_rows, q_pos0, dev_blocks + b, n, scale, q_r, stream));
    const int64_t m = group * n * R;  // a KV head's rows: [group, n, R]
    for (int64_t g = 0; g < kv_heads; ++g) {
      if (args.permille[g] == 0) continue;
      GemmArgs ga;
      ga.a = {q_r + g * m * SD, DType::kBF16, Shape{m, SD}};
      ga.b = {k_r + g * key_rows * SD, DType::kBF16, Shape{cols, SD}};
      ga.out = {scores + g * m * cols, DType::kF32, Shape{m, cols}};
      MP_RETURN_IF_ERROR(GemmCuda(ga, gemm, stream));
    }
    MassParams mp{scores,
                  cols,
                  q_rows,
                  q_pos0,
                  dev_blocks + b,
                  n,
                  key_rows,
                  num_kb,
                  static_cast<int>(kv_heads),
                  static_cast<int>(group),
                  static_cast<int>(S),
                  static_cast<int>(B),
                  permille,
                  mass};
    MP_CUDA_CHECK(cudaMemsetAsync(mass, 0, static_cast<size_t>(n * kv_heads * num_kb) * 4, stream));
    MassKernel<<<dim3(static_cast<unsigned>(n), static_cast<unsigned>(kv_heads),
                      static_cast<unsigned>((group * R + kWarps - 1) / kWarps)),
                 kThreads, mass_smem, stream>>>(mp);
    MP_CUDA_CHECK_LAUNCH();
    SelectParams sp{mass,
                    dev_blocks + b,
                    permille,
                    kv_heads,
                    num_kb,
                    args.qb_begin,
                    n_qb,
                    args.kept.dim(2),
                    reinterpret_cast<uint32_t*>(args.kept.as<int32_t>()),
                    args.mass.data != nullptr ? args.mass.as<float>() : nullptr};
    SelectKernel<<<dim3(static_cast<unsigned>(n), static_cast<unsigned>(kv_heads)), kThreads, 0,
                   stream>>>(sp);
    MP_CUDA_CHECK_LAUNCH();
  }
  return Finish(ws, "antidiagonal_select", stream);
}

}  // namespace millipede
