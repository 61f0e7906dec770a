// Hopper (sm_90a) building blocks of the wgmma attention kernel: shared-memory matrix
// descriptors for 128-byte-swizzled tiles, mbarriers, TMA tile loads and the warpgroup MMAs it
// issues (m64n128k16 for Q K^T, m64n{128,64}k16 for P V, A from registers), for bf16 and f16
// operands with fp32 accumulators. Device code only; compile for sm_90a.
//
// Register layout of an m64nNk16 fp32 accumulator (PTX ISA, wgmma): warp w of the warpgroup
// holds rows 16 w .. 16 w + 15; with g = lane / 4 and c = lane % 4, element d[4 j + e] is row
// g + 8 (e / 2), column 8 j + 2 c + e % 2 — per 8 columns the mma.sync m16n8 C fragment.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

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
#define MP_WGMMA_M64N128K16(PTX_TYPE)                                                      \
  template <int kTransB>                                                                   \
  __device__ __forceinline__ static void M64N128(float (&d)[64], const uint32_t (&a)[4],   \
                                             uint64_t b_desc, int accumulate) {            \
    asm volatile(                                                                          \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                       \
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." PTX_TYPE "." PTX_TYPE " {"          \
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "           \
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"   \
        "}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"                                 \
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),          \
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),        \
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),    \
          "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),    \
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),    \
          "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),    \
          "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),    \
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),    \
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),    \
          "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),    \
          "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])                               \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate),        \
          "n"(kTransB));                                                                   \
  }

#define MP_WGMMA_M64N64K16(PTX_TYPE)                                                     \
  template <int kTransB>                                                                 \
  __device__ __forceinline__ static void M64N64(float (&d)[32], const uint32_t (&a)[4],  \
                                             uint64_t b_desc, int accumulate) {          \
    asm volatile(                                                                        \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                     \
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." PTX_TYPE "." PTX_TYPE " {"         \
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "         \
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31" \
        "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"                               \
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),        \
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),      \
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),  \
          "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),  \
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),  \
          "+f"(d[30]), "+f"(d[31])                                                       \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate),      \
          "n"(kTransB));                                                                 \
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

}  // namespace millipede::attention_internal
