// Hopper (sm_90a) building blocks of the wgmma attention kernels (dense prefill,
// attention_wgmma.cu; sparse, sparse_attention.cu): shared-memory matrix descriptors for
// 128-byte-swizzled tiles, mbarriers, TMA tile loads and the warpgroup MMAs they issue
// (m64n128k16 for Q K^T, m64n{128,64}k16 for P V, A from registers), for bf16 and f16 operands
// with fp32 accumulators; then the consumer warpgroup's pieces both kernels share (Q fragments,
// the MMAs of one 128-key tile, the online softmax, the ping-pong schedule, the epilogue) and
// the host's tensor maps. Device code compiles for sm_90a only.
//
// Register layout of an m64nNk16 fp32 accumulator (PTX ISA, wgmma): warp w of the warpgroup
// holds rows 16 w .. 16 w + 15; with g = lane / 4 and c = lane % 4, element d[4 j + e] is row
// g + 8 (e / 2), column 8 j + 2 c + e % 2 — per 8 columns the mma.sync m16n8 C fragment.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

#include <cstdint>

#include "common/dtype.h"
#include "common/status.h"
#include "kernels/attention/attention_mma.cuh"
#include "kernels/attention/attention_state.h"

namespace millipede::attention_internal {

// Descriptor of a tile in shared memory laid out in 128-byte rows swizzled as TMA's
// CU_TENSOR_MAP_SWIZZLE_128B writes them (16-byte chunk c of row r stored at chunk c ^ r % 8,
// atoms of 8 rows = 1024 bytes, 1024-byte aligned). `lbo` and `sbo` are the leading and stride
// byte offsets: for a K-major operand sbo = 1024 (between 8-row groups) and lbo is unused; for
// an MN-major operand lbo is the distance between 64-element column blocks and sbo = 1024
// (between groups of 8 K rows).
__device__ __forceinline__ uint64_t SmemDescriptor(uint32_t address, uint32_t lbo, uint32_t sbo) {
  uint64_t desc = (address & 0x3FFFFu) >> 4;
  desc |= static_cast<uint64_t>((lbo >> 4) & 0x3FFFu) << 16;
  desc |= static_cast<uint64_t>((sbo >> 4) & 0x3FFFu) << 32;
  desc |= uint64_t{1} << 62;  // 128-byte swizzle
  return desc;
}

__device__ __forceinline__ void MbarrierInit(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
// Makes the initialised barriers visible to the async proxy (TMA) and the other threads (with
// the __syncthreads() that follows).
__device__ __forceinline__ void MbarrierInitFence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void MbarrierArrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Arrives and announces `bytes` of TMA transactions that complete the current phase.
__device__ __forceinline__ void MbarrierArriveExpectTx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
// Waits until the phase of parity `parity` has completed.
__device__ __forceinline__ void MbarrierWait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (done == 0);
}

// Arrives on `bar` once every cp.async this thread has issued so far has landed in shared
// memory; the arrival is one of those the barrier was initialised to expect (noinc).
__device__ __forceinline__ void CpAsyncMbarrierArrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// TMA: the box of a 2-D tensor map at element coordinates (x, y) into shared memory `dst`,
// completing `bytes` on barrier `bar`.
__device__ __forceinline__ void TmaLoad2d(uint32_t dst, const CUtensorMap* map, int x, int y,
                                          uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(bar)
      : "memory");
}

// Named barriers (ids 1..15; 0 is __syncthreads'): wait until `threads` threads have arrived
// (this one included), or arrive without waiting.
__device__ __forceinline__ void NamedBarrierSync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void NamedBarrierArrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// 2^x in one MUFU instruction (flush-to-zero; about 2 ulp): the probabilities it makes are
// rounded to 16 bits before P V anyway.
__device__ __forceinline__ float FastExp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Sets this warpgroup's registers per thread (every thread of the warpgroup executes it).
template <int kRegisters, bool kIncrease>
__device__ __forceinline__ void SetMaxRegisters() {
  if constexpr (kIncrease)
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
  else
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

__device__ __forceinline__ void WgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void WgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits until at most `kPending` of this warpgroup's committed groups are still running.
template <int kPending>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving accesses of accumulator registers across the asynchronous
// MMAs (which read and write them behind its back).
template <int N>
__device__ __forceinline__ void FenceRegisters(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int N>
__device__ __forceinline__ void FenceRegisters(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// The warpgroup MMAs of one operand type: d (+)= A B with A [64 x 16] in registers (per warp
// the m16n8k16 A fragment of its 16 rows) and B [16 x N] in shared memory (descriptor), K-major
// (kTransB 0) or MN-major (kTransB 1); accumulate 0 overwrites d. One macro per N, instantiated
// for each PTX type below.
#define MP_WGMMA_M64N128K16(PTX_TYPE)                                                              \
  template <int kTransB>                                                                           \
  __device__ __forceinline__ static void M64N128(float(&d)[64], const uint32_t(&a)[4],             \
                                                 uint64_t b_desc, int accumulate) {                \
    asm volatile(                                                                                  \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                               \
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." PTX_TYPE "." PTX_TYPE                       \
        " {"                                                                                       \
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                   \
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "         \
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "         \
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"           \
        "}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"                                         \
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),      \
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),  \
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),            \
          "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),            \
          "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),            \
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]),            \
          "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),            \
          "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),            \
          "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),            \
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]),            \
          "+f"(d[62]), "+f"(d[63])                                                                 \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate), "n"(kTransB)); \
  }

#define MP_WGMMA_M64N64K16(PTX_TYPE)                                                               \
  template <int kTransB>                                                                           \
  __device__ __forceinline__ static void M64N64(float(&d)[32], const uint32_t(&a)[4],              \
                                                uint64_t b_desc, int accumulate) {                 \
    asm volatile(                                                                                  \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                               \
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." PTX_TYPE "." PTX_TYPE                        \
        " {"                                                                                       \
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                   \
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"           \
        "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"                                         \
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),      \
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),  \
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),            \
          "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),            \
          "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])             \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate), "n"(kTransB)); \
  }

template <typename T>
struct Wgmma;
template <>
struct Wgmma<__nv_bfloat16> {
  MP_WGMMA_M64N128K16("bf16")
  MP_WGMMA_M64N64K16("bf16")
};
template <>
struct Wgmma<__half> {
  MP_WGMMA_M64N128K16("f16")
  MP_WGMMA_M64N64K16("f16")
};
#undef MP_WGMMA_M64N128K16
#undef MP_WGMMA_M64N64K16

// d (+)= A B on E4M3 operands: A [64 x 32] in registers (per warp the m16n8k32 A fragment of
// its 16 rows: a0 row g, k 4c .. 4c + 3; a1 row g + 8; a2 and a3 the same at k + 16; the
// lowest byte holds the smallest k), B [32 x N] (N 128 or 64) K-major in shared memory (8-bit
// operands have no MN-major form); accumulate 0 overwrites d.
struct WgmmaE4m3 {
  __device__ __forceinline__ static void M64N128(float (&d)[64], const uint32_t (&a)[4],
                                                 uint64_t b_desc, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
          "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
          "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate));
  }
  __device__ __forceinline__ static void M64N64(float (&d)[32], const uint32_t (&a)[4],
                                                uint64_t b_desc, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate));
  }
};

// The consumer side. A consumer warpgroup owns 64 packed query rows (wgmma M) and runs tiles of
// kWgmmaKeys keys whose K and V sit in shared memory as [column block][kWgmmaKeys keys][128
// bytes] (a column block holds 64 of a row's head_dim values: the swizzle span), 1024-byte
// aligned. Thread (warp w, lane l) holds rows 16 w + l / 4 and 16 w + l / 4 + 8.
inline constexpr int kWgmmaWgRows = 64;
inline constexpr int kWgmmaKeys = 128;
inline constexpr float kWgmmaLog2e = 1.4426950408889634f;

// Stages the warpgroup's 64 Q rows (F32 from row_ptr(r), nullptr for a row past the end: zeros)
// as T in shared memory (q_wg: the 1024-aligned staging area, generic pointer q_smem, one
// [64 rows][128 bytes] block per column block), then loads them as the A fragments of the
// head_dim / 16 steps of Q K^T, so the MMAs read only K from shared memory.
template <typename T, int kHeadDim, typename RowPtr>
__device__ __forceinline__ void WgmmaLoadQ(uint32_t (&qa)[kHeadDim / 16][4], unsigned char* q_smem,
                                           uint32_t q_wg, int named_barrier, RowPtr row_ptr) {
  constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks per row
  constexpr int kBlockBytes = kWgmmaWgRows * 128;
  const int tid = threadIdx.x % 128, warp = tid / 32, lane = threadIdx.x % 32;
  for (int i = tid; i < kWgmmaWgRows * kChunks; i += 128) {
    const int r = i / kChunks, c = i % kChunks;
    const float* src = row_ptr(r);
    const uint4 packed = src != nullptr ? PackQChunk<T>(src + 8 * c) : make_uint4(0, 0, 0, 0);
    const int offset = (c / 8) * kBlockBytes + r * 128 + (((c % 8) ^ (r % 8)) << 4);
    *reinterpret_cast<uint4*>(q_smem + offset) = packed;
  }
  NamedBarrierSync(named_barrier, 128);
  const int r = warp * 16 + lane % 8 + (lane / 8) % 2 * 8;
#pragma unroll
  for (int ks = 0; ks < kHeadDim / 16; ++ks) {
    const int chunk = 2 * ks + lane / 16;
    Ldmatrix4(qa[ks], q_wg + (chunk / 8) * kBlockBytes + r * 128 + (((chunk % 8) ^ (r % 8)) << 4));
  }
}

// S = Q K^T of one tile, raw dot products: 16 columns of head_dim per MMA, four per column
// block (k_block_bytes apart).
template <typename T, int kHeadDim>
__device__ __forceinline__ void WgmmaIssueQk(float (&s)[kWgmmaKeys / 2],
                                             const uint32_t (&qa)[kHeadDim / 16][4],
                                             uint32_t k_tile, uint32_t k_block_bytes) {
#pragma unroll
  for (int ks = 0; ks < kHeadDim / 16; ++ks) {
    const uint32_t column = (ks % 4) * 32;  // bytes into the 128-byte row
    Wgmma<T>::template M64N128<0>(
        s, qa[ks], SmemDescriptor(k_tile + (ks / 4) * k_block_bytes + column, 16, 1024),
        ks > 0 ? 1 : 0);
  }
  WgmmaCommit();
}

// O += P V of one tile: 16 keys (two 8-row groups, 1024 bytes apart) per MMA; the column blocks
// of V are v_block_bytes apart.
template <typename T, int kHeadDim>
__device__ __forceinline__ void WgmmaIssuePv(float (&o)[kHeadDim / 2],
                                             const uint32_t (&pa)[kWgmmaKeys / 16][4],
                                             uint32_t v_tile, uint32_t v_block_bytes) {
#pragma unroll
  for (int kk = 0; kk < kWgmmaKeys / 16; ++kk) {
    const uint64_t desc = SmemDescriptor(v_tile + kk * 2048, v_block_bytes, 1024);
    if constexpr (kHeadDim == 128)
      Wgmma<T>::template M64N128<1>(o, pa[kk], desc, 1);
    else
      Wgmma<T>::template M64N64<1>(o, pa[kk], desc, 1);
  }
  WgmmaCommit();
}

// AttentionState::AdvanceTo with FastExp2: one MUFU instruction per row and tile. The consumer
// loops use it rather than Merge, whose two accurate expf and branches, with one chain of
// additions per row sum, cost the dense kernel about a tenth of its rate.
__device__ __forceinline__ float WgmmaAdvanceRow(AttentionState& state, float m_new, float sum) {
  return state.AdvanceTo(m_new, sum, [](float x) { return FastExp2(x); });
}

// The online softmax of one masked tile of raw scores (-inf: masked): merges each of the
// thread's two rows' statistics into its state and turns s into exp(scale s - m) relative to the
// new running max; factor[h] is what row h's O must be scaled by (the tile's own factor is
// exactly 1, so P V is added unscaled). Each row's sum runs in two halves, which halves the
// chain of dependent additions.
__device__ __forceinline__ void WgmmaSoftmaxTile(float (&s)[kWgmmaKeys / 2],
                                                 AttentionState (&state)[2], float (&factor)[2],
                                                 float scale) {
  const float scale_log2 = scale * kWgmmaLog2e;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < kWgmmaKeys / 8; ++j)
      tile_max = fmaxf(tile_max, fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
    const float m_ref = fmaxf(state[h].m, tile_max * scale);
    const float m_ref_log2 = m_ref == -INFINITY ? 0.0f : m_ref * kWgmmaLog2e;
    float sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < kWgmmaKeys / 8; ++j)
#pragma unroll
      for (int e = 2 * h; e < 2 * h + 2; ++e) {
        s[4 * j + e] = FastExp2(fmaf(s[4 * j + e], scale_log2, -m_ref_log2));
        sum[e % 2] += s[4 * j + e];
      }
    factor[h] = WgmmaAdvanceRow(state[h], m_ref, sum[0] + sum[1]);
  }
}

// O *= factor (row h of the thread's two: factor[h]), every tile: skipping factor 1 (a settled
// maximum) measured slower than the multiplies.
template <int kHeadDim>
__device__ __forceinline__ void WgmmaRescaleO(float (&o)[kHeadDim / 2], const float (&factor)[2]) {
#pragma unroll
  for (int j = 0; j < kHeadDim / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[4 * j + e] *= factor[e / 2];
}

// O *= factor, then P = s as 16-bit A fragments (two 8-key accumulator blocks per step).
template <typename T, int kHeadDim>
__device__ __forceinline__ void WgmmaRescaleAndPack(float (&o)[kHeadDim / 2],
                                                    uint32_t (&pa)[kWgmmaKeys / 16][4],
                                                    const float (&s)[kWgmmaKeys / 2],
                                                    const float (&factor)[2]) {
  using Mma = MmaType<T>;
  WgmmaRescaleO<kHeadDim>(o, factor);
#pragma unroll
  for (int kk = 0; kk < kWgmmaKeys / 16; ++kk) {
    pa[kk][0] = Mma::Pack(s[8 * kk + 0], s[8 * kk + 1]);
    pa[kk][1] = Mma::Pack(s[8 * kk + 2], s[8 * kk + 3]);
    pa[kk][2] = Mma::Pack(s[8 * kk + 4], s[8 * kk + 5]);
    pa[kk][3] = Mma::Pack(s[8 * kk + 6], s[8 * kk + 7]);
  }
}

// The schedule of the two consumer warpgroups over num_tiles >= 1 tiles (stage tile % kStages,
// full and empty mbarriers 8 bytes apart from full_bar / empty_bar). In one turn a warpgroup
// issues S(t) = Q K(t)^T and O += P(t-1) V(t-1), then runs the softmax of tile t while both
// MMAs are in flight; the warpgroups take turns through named barriers turn_barrier and
// turn_barrier + 1 (ping-pong), so one's softmax runs while the other's MMAs use the tensor
// cores. Every consumer thread arrives on a stage's empty barrier once it is done with it.
// issue_qk(t) / issue_pv(t) issue and commit the MMAs of tile t; softmax(t, factor) masks and
// runs WgmmaSoftmaxTile; rescale_and_pack(factor) runs WgmmaRescaleAndPack; fence() fences the
// registers the MMAs write (FenceRegisters).
template <int kStages, int kConsumerThreads, typename IssueQk, typename IssuePv, typename Softmax,
          typename Pack, typename Fence>
__device__ __forceinline__ void WgmmaPingPong(int num_tiles, int wg, uint32_t full_bar,
                                              uint32_t empty_bar, int turn_barrier,
                                              IssueQk issue_qk, IssuePv issue_pv, Softmax softmax,
                                              Pack rescale_and_pack, Fence fence) {
  // Turns alternate between the warpgroups, warpgroup 0 first.
  const int my_turn = turn_barrier + wg, their_turn = turn_barrier + 1 - wg;
  if (wg == 1) NamedBarrierArrive(their_turn, kConsumerThreads);

  MbarrierWait(full_bar, 0);
  NamedBarrierSync(my_turn, kConsumerThreads);
  fence();
  WgmmaFence();
  issue_qk(0);
  NamedBarrierArrive(their_turn, kConsumerThreads);
  WgmmaWait<0>();
  fence();
  {
    float factor[2];
    softmax(0, factor);
    rescale_and_pack(factor);
  }
  for (int tile = 1; tile < num_tiles; ++tile) {
    const int stage = tile % kStages;
    MbarrierWait(full_bar + 8 * stage, (tile / kStages) & 1);
    NamedBarrierSync(my_turn, kConsumerThreads);
    fence();
    WgmmaFence();
    issue_qk(tile);
    issue_pv(tile - 1);
    NamedBarrierArrive(their_turn, kConsumerThreads);
    WgmmaWait<1>();  // S of this tile; P V of the last may still run
    fence();
    float factor[2];
    softmax(tile, factor);
    WgmmaWait<0>();
    fence();
    MbarrierArrive(empty_bar + 8 * ((tile - 1) % kStages));
    rescale_and_pack(factor);
  }
  const int last = num_tiles - 1;
  NamedBarrierSync(my_turn, kConsumerThreads);
  fence();
  WgmmaFence();
  issue_pv(last);
  NamedBarrierArrive(their_turn, kConsumerThreads);
  WgmmaWait<0>();
  fence();
  MbarrierArrive(empty_bar + 8 * (last % kStages));
  // Warpgroup 1's last arrival, so that no barrier is left half-complete.
  if (wg == 0) NamedBarrierSync(my_turn, kConsumerThreads);
}

// The epilogue: sums each row's softmax denominator over its quad, then writes the thread's
// two rows of normalised O and their LSE. out_row(h) is the o row / lse index of row h (the
// thread's row + 8 h), or -1 for a row past the end; lse may be null.
template <int kHeadDim, typename OutRow>
__device__ __forceinline__ void WgmmaWriteRows(const float (&o_acc)[kHeadDim / 2],
                                               AttentionState (&state)[2], OutRow out_row, float* o,
                                               float* lse) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float& d = state[h].d;
    d += __shfl_xor_sync(0xffffffffu, d, 1);
    d += __shfl_xor_sync(0xffffffffu, d, 2);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t out = out_row(h);
    if (out < 0) continue;
    const float o_scale = state[h].OutputScale();
    float* const dst = o + out * kHeadDim + 2 * (lane % 4);
#pragma unroll
    for (int j = 0; j < kHeadDim / 8; ++j)
      *reinterpret_cast<float2*>(dst + 8 * j) =
          make_float2(o_acc[4 * j + 2 * h] * o_scale, o_acc[4 * j + 2 * h + 1] * o_scale);
    if (lane % 4 == 0 && lse != nullptr) lse[out] = state[h].Lse();
  }
}

// Host side (attention_wgmma.cu). Whether the wgmma/TMA kernels run on the current device
// (compute capability 9.0, a driver that encodes tensor maps).
bool WgmmaDeviceSupported();
// A 2-D tensor map over a [rows][row_values] matrix of 16-bit `dtype` (BF16 or F16; K or V as
// [n_kv][num_kv_heads * head_dim]) with boxes of 64 values x box_rows rows and 128-byte swizzle;
// reads outside the matrix give zeros.
StatusOr<CUtensorMap> WgmmaTensorMap(const void* data, DType dtype, int64_t rows,
                                     int64_t row_values, int box_rows);
// A 2-D tensor map over a [rows][row_bytes] byte matrix (E4M3 operands) with boxes of box_bytes
// (128 or 64) x box_rows rows, swizzled over box_bytes; reads outside the matrix give zeros.
// row_bytes must be a multiple of 16.
StatusOr<CUtensorMap> WgmmaTensorMapBytes(const void* data, int64_t rows, int64_t row_bytes,
                                          int box_bytes, int box_rows);

}  // namespace millipede::attention_internal
