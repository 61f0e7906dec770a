#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/cuda_check.h"
#include "kernels/attention/attention_mma.cuh"
#include "kernels/sparse_index/antidiagonal_select_cuda.h"
#include "kernels/sparse_index/sparse_index.cuh"
#include "kernels/sparse_index/sparse_index_ref.h"

namespace millipede {
namespace {

using namespace sparse_index_cuda;  // NOLINT(build/namespaces): the builders' shared internals

constexpr int kWarps = 8, kThreads = kWarps * 32;
constexpr int kMaxChunkHeads = 4;                 // query heads sharing one pass over the keys
constexpr int64_t kMassScratchFloats = 1 << 26;   // 256 MiB of masses per slab
constexpr size_t kSharedBudget = 200 * 1024;      // the query rows' shared memory
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

// Eight consecutive elements as eight bf16 packed in 16 bytes (zeros for a null pointer).
__device__ __forceinline__ uint4 Pack8(const float* f) {
  return make_uint4(Bf16::Pack(f[0], f[1]), Bf16::Pack(f[2], f[3]), Bf16::Pack(f[4], f[5]),
                    Bf16::Pack(f[6], f[7]));
}
template <typename T>
__device__ __forceinline__ uint4 Load8(const T* p) {
  if (p == nullptr) return make_uint4(0, 0, 0, 0);
  float f[8];
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __ldg(reinterpret_cast<const uint4*>(p));
  } else if constexpr (std::is_same_v<T, float>) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(p));
    const float4 b = __ldg(reinterpret_cast<const float4*>(p) + 1);
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
  } else if constexpr (std::is_same_v<T, __half>) {
    cuda_util::Widen8<__half>(__ldg(reinterpret_cast<const uint4*>(p)), f);
  } else {
    cuda_util::Widen8<__nv_fp8_e4m3>(__ldg(reinterpret_cast<const uint2*>(p)), f);
  }
  return Pack8(f);
}

struct MassParams {
  const void* q;  // QT
  const int32_t* q_rows;  // rows of positions [q_pos0, ...)
  int64_t q_pos0;
  const void* k;  // KT
  const int32_t* k_rows;  // rows of positions [0, ...)
  int64_t length;
  int heads, kv_heads, d, group, stride, block, rows;  // rows: block / stride
  int chunk_heads, pitch;                              // pitch: a query row's elements in smem
  float c;                                             // scale / stride * log2(e)
  const int32_t* blocks;                               // [n] scored query blocks
  const int64_t* permille;                             // [kv_heads]
  float* mass;                                         // [n, kv_heads, num_kb]
  int64_t num_kb;
};

// The (max, sum) pair of (m, l) and (m2, l2), base 2.
__device__ __forceinline__ void Combine(float& m, float& l, float m2, float l2) {
  const float mm = fmaxf(m, m2);
  if (mm == -INFINITY) return;
  l = l * exp2f(m - mm) + l2 * exp2f(m2 - mm);
  m = mm;
}

// One thread block per (scored block, KV head): see antidiagonal_select_cuda.h.
template <typename QT, typename KT>
__global__ void __launch_bounds__(kThreads) MassKernel(MassParams p) {
  const QT* q = static_cast<const QT*>(p.q);
  const KT* k = static_cast<const KT*>(p.k);
  extern __shared__ uint4 smem[];
  const int g = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int gid = lane / 4, t = lane % 4;
  if (p.permille[g] == 0) return;
  const int64_t qb = p.blocks[blockIdx.x];
  const int R = p.rows, S = p.stride, B = p.block, d = p.d, SD = S * d;
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem);  // [chunk_heads][R][pitch]
  float* part = reinterpret_cast<float*>(qs + static_cast<int64_t>(p.chunk_heads) * R * p.pitch);
  float* stats = part + kWarps * kMaxChunkHeads * 16 * 2;  // [kMaxChunkHeads][16][2]: m, l
  int* has = reinterpret_cast<int*>(stats + kMaxChunkHeads * 16 * 2);  // [16]
  if (threadIdx.x < 16) {
    int any = 0;
    for (int j = 0; threadIdx.x < R && j < S; ++j)
      any |= p.q_rows[qb * B + threadIdx.x * S + j - p.q_pos0] >= 0;
    has[threadIdx.x] = any;
  }
  __syncthreads();
  int taking = 0;
  for (int a = 0; a < R; ++a) taking += has[a];
  const float inv = 1.0f / (static_cast<float>(taking) * p.group);
  const int64_t key_rows = (p.length + S - 1) / S;
  const int64_t b_max = min(qb * R + R - 1, key_rows - 1);
  float* mass_row = p.mass + (static_cast<int64_t>(blockIdx.x) * p.kv_heads + g) * p.num_kb;
  for (int h0 = 0; h0 < p.group; h0 += p.chunk_heads) {
    const int nh = min(p.chunk_heads, p.group - h0);
    __syncthreads();
    // The reshaped query rows: row a, element j * d + c = q[qb*B + a*S + S-1-j][head][c].
    for (int64_t i = threadIdx.x; i < static_cast<int64_t>(nh) * R * SD / 8; i += kThreads) {
      const int e = static_cast<int>(i % (SD / 8)) * 8, a = static_cast<int>(i / (SD / 8)) % R;
      const int hh = static_cast<int>(i / (SD / 8)) / R, j = e / d, cc = e % d;
      const int32_t row = p.q_rows[qb * B + a * S + S - 1 - j - p.q_pos0];
      const QT* src =
          row >= 0 ? q + (static_cast<int64_t>(row) * p.heads + g * p.group + h0 + hh) * d + cc
                   : nullptr;
      *reinterpret_cast<uint4*>(qs + (hh * R + a) * p.pitch + e) = Load8(src);
    }
    __syncthreads();
    // A tile of 8 reshaped key rows against the chunk's query rows: s[hh] in the C layout.
    auto scores = [&](int64_t b0, float (&s)[kMaxChunkHeads][4]) {
#pragma unroll
      for (int hh = 0; hh < kMaxChunkHeads; ++hh) s[hh][0] = s[hh][1] = s[hh][2] = s[hh][3] = 0;
      const int64_t b = b0 + gid;
      for (int e = t * 8; e < SD; e += 32) {
        const int64_t pos = b * S + e / d;
        const int32_t row = b <= b_max && pos < p.length ? p.k_rows[pos] : -1;
        const uint4 kv =
            Load8(row >= 0 ? k + (static_cast<int64_t>(row) * p.kv_heads + g) * d + e % d
                           : static_cast<const KT*>(nullptr));
#pragma unroll
        for (int hh = 0; hh < kMaxChunkHeads; ++hh) {
          if (hh >= nh) break;
          const uint4 lo = *reinterpret_cast<const uint4*>(qs + (hh * R + gid) * p.pitch + e);
          const uint4 hi = gid + 8 < R ? *reinterpret_cast<const uint4*>(
                                             qs + (hh * R + gid + 8) * p.pitch + e)
                                       : make_uint4(0, 0, 0, 0);
          const uint32_t a0[4] = {lo.x, hi.x, lo.y, hi.y}, a1[4] = {lo.z, hi.z, lo.w, hi.w};
          Bf16::Mma(s[hh], a0, kv.x, kv.y);
          Bf16::Mma(s[hh], a1, kv.z, kv.w);
        }
      }
      // Scaled, base 2; -inf where the pair does not count.
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int a = gid + (i >= 2 ? 8 : 0);
        const int64_t col = b0 + 2 * t + (i & 1);
        const bool valid = a < R && has[a] && col <= qb * R + a && col < key_rows;
#pragma unroll
        for (int hh = 0; hh < kMaxChunkHeads; ++hh)
          s[hh][i] = valid && hh < nh ? s[hh][i] * p.c : -INFINITY;
      }
    };
    // Pass 1: each row's maximum and sum.
    float m[kMaxChunkHeads][2], l[kMaxChunkHeads][2];
#pragma unroll
    for (int hh = 0; hh < kMaxChunkHeads; ++hh)
      m[hh][0] = m[hh][1] = -INFINITY, l[hh][0] = l[hh][1] = 0;
    for (int64_t b0 = warp * 8; b0 <= b_max; b0 += kWarps * 8) {
      float s[kMaxChunkHeads][4];
      scores(b0, s);
#pragma unroll
      for (int hh = 0; hh < kMaxChunkHeads; ++hh)
#pragma unroll
        for (int i = 0; i < 4; ++i) Combine(m[hh][i / 2], l[hh][i / 2], s[hh][i], 1.0f);
    }
#pragma unroll
    for (int hh = 0; hh < kMaxChunkHeads; ++hh)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        for (int o = 1; o < 4; o *= 2)
          Combine(m[hh][r], l[hh][r], __shfl_xor_sync(kFullMask, m[hh][r], o),
                  __shfl_xor_sync(kFullMask, l[hh][r], o));
        if (t == 0) {
          float* out = part + ((warp * kMaxChunkHeads + hh) * 16 + gid + 8 * r) * 2;
          out[0] = m[hh][r];
          out[1] = l[hh][r];
        }
      }
    __syncthreads();
    if (threadIdx.x < kMaxChunkHeads * 16) {
      float mm = -INFINITY, ll = 0;
      for (int w = 0; w < kWarps; ++w)
        Combine(mm, ll, part[(w * kMaxChunkHeads * 16 + threadIdx.x) * 2],
                part[(w * kMaxChunkHeads * 16 + threadIdx.x) * 2 + 1]);
      stats[threadIdx.x * 2] = mm;
      stats[threadIdx.x * 2 + 1] = ll > 0 ? 1.0f / ll : 0.0f;
    }
    __syncthreads();
    // Pass 2: each key block's share of the rows' mass.
    for (int64_t b0 = warp * 8; b0 <= b_max; b0 += kWarps * 8) {
      float s[kMaxChunkHeads][4];
      scores(b0, s);
      float col[2] = {0, 0};
#pragma unroll
      for (int hh = 0; hh < kMaxChunkHeads; ++hh)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float* st = stats + (hh * 16 + gid + (i >= 2 ? 8 : 0)) * 2;
          if (s[hh][i] != -INFINITY) col[i & 1] += exp2f(s[hh][i] - st[0]) * st[1];
        }
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        for (int o = 4; o < 32; o *= 2) col[e] += __shfl_xor_sync(kFullMask, col[e], o);
        const int64_t b = b0 + 2 * t + e;
        if (gid == 0 && b <= b_max && col[e] != 0.0f)
          atomicAdd(mass_row + b * S / B, col[e] * inv);
      }
    }
  }
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
  uint32_t* kept;  // [kv_heads, n_qb, words]
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
  const int64_t target =
      static_cast<int64_t>(ceil(static_cast<double>(permille) * static_cast<double>(total) / 1000.0));
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
    MP_REQUIRE(runs[i + 1] <= args.length, "antidiagonal_select: query position ",
               runs[i + 1] - 1, " is not before length ", args.length);
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

template <typename QT, typename KT>
Status LaunchMass(const MassParams& p, int64_t n, size_t smem, cudaStream_t stream) {
  auto kernel = MassKernel<QT, KT>;
  MP_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  kernel<<<dim3(static_cast<unsigned>(n), static_cast<unsigned>(p.kv_heads)), kThreads, smem,
           stream>>>(p);
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

template <typename QT>
Status DispatchK(DType k_dtype, const MassParams& p, int64_t n, size_t smem, cudaStream_t stream) {
  switch (k_dtype) {
    case DType::kBF16: return LaunchMass<QT, __nv_bfloat16>(p, n, smem, stream);
    case DType::kF16: return LaunchMass<QT, __half>(p, n, smem, stream);
    case DType::kF32: return LaunchMass<QT, float>(p, n, smem, stream);
    default: return LaunchMass<QT, __nv_fp8_e4m3>(p, n, smem, stream);
  }
}

Status DispatchMass(DType q_dtype, DType k_dtype, const MassParams& p, int64_t n, size_t smem,
                    cudaStream_t stream) {
  switch (q_dtype) {
    case DType::kBF16: return DispatchK<__nv_bfloat16>(k_dtype, p, n, smem, stream);
    case DType::kF16: return DispatchK<__half>(k_dtype, p, n, smem, stream);
    default: return DispatchK<float>(k_dtype, p, n, smem, stream);
  }
}

unsigned GridFor(int64_t n) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + 255) / 256, 1, 4096));
}

}  // namespace

Status AntidiagonalSelectCuda(const AntidiagonalSelectArgs& args,
                              SparseIndexCudaWorkspace& workspace, cudaStream_t stream) {
  MP_RETURN_IF_ERROR(AntidiagonalSelectCheckArgs(args));
  const int64_t heads = args.q.dim(1), kv_heads = args.k.dim(1), d = args.q.dim(2);
  const int64_t S = args.stride, B = args.block, R = B / S;
  MP_REQUIRE(d % 8 == 0 && (S * d) % 32 == 0 && R <= 16,
             "antidiagonal_select on CUDA needs head_dim % 8 == 0 (", d,
             "), stride * head_dim % 32 == 0 (", S * d, ") and block / stride <= 16 (", R, ")");
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
  MP_CUDA_CHECK(cudaMemcpyAsync(permille, args.permille, head_bytes, cudaMemcpyHostToDevice,
                                stream));
  MP_CUDA_CHECK(cudaMemcpyAsync(dev_blocks, blocks.data(), blocks.size() * 4,
                                cudaMemcpyHostToDevice, stream));
  // Position tables: q over the scored blocks' positions, k over [0, key_end) (all held).
  const int64_t q_pos0 = blocks.front() * B, q_n = (blocks.back() + 1) * B - q_pos0;
  const int64_t key_end = std::min(args.length, (blocks.back() + 1) * B);
  MP_RETURN_IF_ERROR(ws.positions.Reserve(static_cast<size_t>(q_n + key_end) * 4, stream));
  auto* q_rows = static_cast<int32_t*>(ws.positions.data());
  int32_t* k_rows = q_rows + q_n;
  PositionRowsKernel<<<GridFor(q_n), 256, 0, stream>>>(args.q_runs.as<const int64_t>(),
                                                       args.q_runs.dim(0), q_pos0, q_n, q_rows,
                                                       false, ws.error);
  MP_CUDA_CHECK_LAUNCH();
  PositionRowsKernel<<<GridFor(key_end), 256, 0, stream>>>(
      args.k_runs.as<const int64_t>(), args.k_runs.dim(0), 0, key_end, k_rows, true, ws.error);
  MP_CUDA_CHECK_LAUNCH();
  // Shared memory: the chunk's query rows, the warps' partial statistics, the rows' flags.
  const int pad = (S * d) % 64 == 0 ? 32 : 0;  // rows 64 bytes apart in banks: no conflicts
  const size_t per_head = static_cast<size_t>(R * (S * d + pad)) * 2;
  const int group = static_cast<int>(heads / kv_heads);
  const int chunk_heads = static_cast<int>(std::clamp<int64_t>(
      std::min<int64_t>(group, static_cast<int64_t>(kSharedBudget / per_head)), 1,
      kMaxChunkHeads));
  MP_REQUIRE(per_head <= kSharedBudget, "antidiagonal_select on CUDA: block * head_dim = ", B * d,
             " is too large for shared memory");
  const size_t smem = chunk_heads * per_head + (kWarps + 1) * kMaxChunkHeads * 16 * 2 * 4 + 64;
  MassParams p{args.q.data,
               q_rows,
               q_pos0,
               args.k.data,
               k_rows,
               args.length,
               static_cast<int>(heads),
               static_cast<int>(kv_heads),
               static_cast<int>(d),
               group,
               static_cast<int>(S),
               static_cast<int>(B),
               static_cast<int>(R),
               chunk_heads,
               static_cast<int>(S * d + pad),
               args.scale / static_cast<float>(S) * kLog2e,
               nullptr,
               permille,
               nullptr,
               num_kb};
  const int64_t slab =
      std::max<int64_t>(1, kMassScratchFloats / std::max<int64_t>(1, kv_heads * num_kb));
  const int64_t n_blocks = static_cast<int64_t>(blocks.size());
  const int64_t slab_floats = std::min(slab, n_blocks) * kv_heads * num_kb;
  MP_RETURN_IF_ERROR(ws.scores.Reserve(static_cast<size_t>(slab_floats) * 4, stream));
  p.mass = static_cast<float*>(ws.scores.data());
  for (int64_t i0 = 0; i0 < n_blocks; i0 += slab) {
    const int64_t n = std::min(slab, n_blocks - i0);
    p.blocks = dev_blocks + i0;
    MP_CUDA_CHECK(cudaMemsetAsync(p.mass, 0, static_cast<size_t>(n * kv_heads * num_kb) * 4,
                                  stream));
    MP_RETURN_IF_ERROR(DispatchMass(args.q.dtype, args.k.dtype, p, n, smem, stream));
    SelectParams sp{p.mass,
                    p.blocks,
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
