// Warp-level building blocks of the tensor-core attention kernel (sm_80+ PTX, fine on sm_90):
// asynchronous global->shared copies, ldmatrix and the m16n8k16 MMA with fp32 accumulators, for
// bf16 and f16 operands. Device code only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace millipede::attention_internal {

// 16-byte copy from global memory to shared address `dst` (state space), bypassing L1 (K/V tiles
// are read once per block). With `valid` false nothing is read and the 16 bytes are zero-filled, so
// tiles past the end of the keys hold zeros rather than stale data (0 * NaN would poison P.V).
__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* gmem, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem),
               "r"(src_bytes));
}
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits for every copy this thread has committed.
__device__ __forceinline__ void CpAsyncWaitAll() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}
// Waits until at most `kPending` of the groups this thread committed are still in flight.
template <int kPending>
__device__ __forceinline__ void CpAsyncWaitGroups() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Shared-memory (state space) address of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t SharedAddress(const void* smem) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(smem));
}

// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses (shared state space) of matrix
// i, which lands in r[i].
__device__ __forceinline__ void Ldmatrix4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// The same with each matrix transposed (row-major V in shared memory -> the B operand of P.V).
__device__ __forceinline__ void Ldmatrix4Trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Per-type conversion and MMA. Fragment layouts (PTX ISA, mma.m16n8k16), with g = lane / 4 and
// c = lane % 4:
//   A (16x16, row-major): a0 (g, 2c..2c+1), a1 (g+8, 2c..), a2 (g, 2c+8..), a3 (g+8, 2c+8..)
//   B (16x8, k-major):    b0 (k 2c..2c+1, n g), b1 (k 2c+8..2c+9, n g)
//   C (16x8, fp32):       c0, c1 (g, 2c..2c+1), c2, c3 (g+8, 2c..2c+1)
// The lower 16 bits of a register hold the element with the smaller column (or k) index.
template <typename T>
struct MmaType;

template <>
struct MmaType<__nv_bfloat16> {
  __device__ __forceinline__ static uint32_t Pack(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
  // d += a * b
  __device__ __forceinline__ static void Mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

template <>
struct MmaType<__half> {
  __device__ __forceinline__ static uint32_t Pack(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
  __device__ __forceinline__ static void Mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

// Eight consecutive F32 values of a q row (16-byte aligned, read through the read-only cache)
// as eight T packed into 16 bytes: one 16-byte chunk of a Q tile row in shared memory.
template <typename T>
__device__ __forceinline__ uint4 PackQChunk(const float* src) {
  const float4 a = __ldg(reinterpret_cast<const float4*>(src));
  const float4 b = __ldg(reinterpret_cast<const float4*>(src) + 1);
  return make_uint4(MmaType<T>::Pack(a.x, a.y), MmaType<T>::Pack(a.z, a.w),
                    MmaType<T>::Pack(b.x, b.y), MmaType<T>::Pack(b.z, b.w));
}

// The two E4M3 values in the low 16 bits of `pair` widened to an f16x2 register (the lower byte
// into the lower half), exactly: every E4M3 value is an f16 value. One instruction on sm_89+.
__device__ __forceinline__ uint32_t Fp8PairToHalf2(uint32_t pair) {
  const __half2_raw r =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), __NV_E4M3);
  return static_cast<uint32_t>(r.x) | (static_cast<uint32_t>(r.y) << 16);
}

// Sixteen E4M3 values (one 16-byte load) widened to f16: elements 0-7 into `lo`, 8-15 into
// `hi`, in order.
__device__ __forceinline__ void WidenFp8x16ToHalf(uint4 raw, uint4& lo, uint4& hi) {
  const uint32_t in[4] = {raw.x, raw.y, raw.z, raw.w};
  uint32_t out[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = Fp8PairToHalf2(in[i]);
    out[2 * i + 1] = Fp8PairToHalf2(in[i] >> 16);
  }
  lo = make_uint4(out[0], out[1], out[2], out[3]);
  hi = make_uint4(out[4], out[5], out[6], out[7]);
}

}  // namespace millipede::attention_internal
