// The FP8 operands of FP8 prefill attention (kernels/attention/attention_fp8.h): K and V rounded
// to E4M3 with their scales, laid out as the Hopper kernel's FP8 MMAs read them.
//  - K keeps its layout; one scale per KV head and 128-key block (the kernel's key tile): the
//    block's largest |k| / 448, so the block's values span E4M3's range.
//  - V is transposed per KV head ([head_dim][keys]: FP8 MMAs take their B operand K-major only,
//    and P V reduces over keys), with one scale per KV head and channel (applied to O's columns
//    after the sums). Within every 16 keys the columns are permuted so that P, packed from the
//    fp32 score accumulators without shuffles, meets its own keys: column c of a group holds key
//    Fp8VColumnKey(c).
// A scale of 1 stands for an all-zero block or channel. Inputs must be finite.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

// Keys per K scale block, and the multiple V's transposed rows are padded to.
inline constexpr int64_t kFp8AttentionKeyBlock = 128;
// E4M3's largest finite magnitude: a block's largest |value| maps to it.
inline constexpr float kFp8AttentionMax = 448.0f;

// The key (within its group of 16) that column c of a transposed V row holds. The FP8 MMA's
// A fragment gives thread (quad lane q) the k positions 4q .. 4q + 3 (and 16 + 4q ..), while its
// fp32 score accumulators hold keys 2q, 2q + 1, 8 + 2q, 9 + 2q (and 16 + ...).
inline constexpr int Fp8VColumnKey(int column) {
  return 2 * (column / 4) + column % 2 + 8 * ((column / 2) % 2);
}

inline int64_t Fp8AttentionKeyBlocks(int64_t n_kv) {
  return (n_kv + kFp8AttentionKeyBlock - 1) / kFp8AttentionKeyBlock;
}
// The padded key count of V's transposed rows: whole blocks.
inline int64_t Fp8AttentionPaddedKeys(int64_t n_kv) {
  return Fp8AttentionKeyBlocks(n_kv) * kFp8AttentionKeyBlock;
}

// The scale of a block whose largest magnitude is `amax` (>= 0): amax / 448, or 1 for 0. The
// quantised value of x is E4M3(x * (1 / scale)), both operations rounded to nearest in fp32 on
// every backend.
inline float Fp8AttentionScale(float amax) { return amax > 0.0f ? amax / kFp8AttentionMax : 1.0f; }

struct Fp8AttentionOperandsArgs {
  // [n_kv, num_kv_heads, head_dim] F32, BF16 or F16 (after RoPE), finite.
  ConstTensorView k;
  ConstTensorView v;
  // [n_kv, num_kv_heads, head_dim] F8E4M3: k / k_scale of its block.
  TensorView k8;
  // [num_kv_heads, Fp8AttentionKeyBlocks(n_kv)] F32: block b covers keys [128 b, 128 b + 128).
  TensorView k_scale;
  // [num_kv_heads, head_dim, Fp8AttentionPaddedKeys(n_kv)] F8E4M3: row (g, d) holds v[:, g, d] /
  // v_scale[g, d], key 16 i + Fp8VColumnKey(c) in column 16 i + c, zeros past n_kv.
  TensorView v8t;
  // [num_kv_heads, head_dim] F32.
  TensorView v_scale;
};

// Shapes and dtypes (not the data, which may live on a device).
Status Fp8AttentionOperandsCheckArgs(const Fp8AttentionOperandsArgs& args);
// Writes k8, k_scale, v8t and v_scale.
Status Fp8AttentionOperandsRef(const Fp8AttentionOperandsArgs& args);

}  // namespace millipede
