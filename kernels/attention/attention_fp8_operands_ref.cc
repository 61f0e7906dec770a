#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/fp8.h"
#include "kernels/attention/attention_fp8_operands.h"
#include "kernels/memory/float_rows.h"

namespace millipede {

Status Fp8AttentionOperandsCheckArgs(const Fp8AttentionOperandsArgs& args) {
  MP_REQUIRE(args.k.rank() == 3, "fp8 attention operands k: rank ", args.k.rank(), ", expected 3");
  const int64_t n_kv = args.k.dim(0), num_kv_heads = args.k.dim(1), head_dim = args.k.dim(2);
  MP_REQUIRE(head_dim > 0 && num_kv_heads > 0, "fp8 attention operands: empty heads");
  for (const ConstTensorView* t : {&args.k, &args.v})
    MP_REQUIRE(t->dtype == DType::kF32 || t->dtype == DType::kBF16 || t->dtype == DType::kF16,
               "fp8 attention operands: K/V dtype ", DTypeName(t->dtype),
               ", expected F32, BF16 or F16");
  const Shape kv{n_kv, num_kv_heads, head_dim};
  MP_RETURN_IF_ERROR(CheckTensor(args.k, "fp8 attention operands k", args.k.dtype, kv));
  MP_RETURN_IF_ERROR(CheckTensor(args.v, "fp8 attention operands v", args.v.dtype, kv));
  MP_RETURN_IF_ERROR(CheckTensor(args.k8, "fp8 attention operands k8", DType::kF8E4M3, kv));
  MP_RETURN_IF_ERROR(CheckTensor(args.k_scale, "fp8 attention operands k_scale", DType::kF32,
                                 Shape{num_kv_heads, Fp8AttentionKeyBlocks(n_kv)}));
  MP_RETURN_IF_ERROR(CheckTensor(args.v8t, "fp8 attention operands v8t", DType::kF8E4M3,
                                 Shape{num_kv_heads, head_dim, Fp8AttentionPaddedKeys(n_kv)}));
  return CheckTensor(args.v_scale, "fp8 attention operands v_scale", DType::kF32,
                     Shape{num_kv_heads, head_dim});
}

Status Fp8AttentionOperandsRef(const Fp8AttentionOperandsArgs& args) {
  MP_RETURN_IF_ERROR(Fp8AttentionOperandsCheckArgs(args));
  const int64_t n_kv = args.k.dim(0), num_kv_heads = args.k.dim(1), head_dim = args.k.dim(2);
  const int64_t blocks = Fp8AttentionKeyBlocks(n_kv), padded = Fp8AttentionPaddedKeys(n_kv);
  const int64_t row = num_kv_heads * head_dim;
  std::vector<float> k(n_kv * row), v(n_kv * row);
  LoadFloatRow(args.k.data, args.k.dtype, 0, n_kv * row, k.data());
  LoadFloatRow(args.v.data, args.v.dtype, 0, n_kv * row, v.data());
  uint8_t* const k8 = static_cast<uint8_t*>(args.k8.data);
  float* const k_scale = args.k_scale.as<float>();
  for (int64_t g = 0; g < num_kv_heads; ++g)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t j0 = b * kFp8AttentionKeyBlock, j1 = std::min(n_kv, j0 + kFp8AttentionKeyBlock);
      float amax = 0.0f;
      for (int64_t j = j0; j < j1; ++j)
        for (int64_t d = 0; d < head_dim; ++d)
          amax = std::max(amax, std::fabs(k[j * row + g * head_dim + d]));
      const float scale = Fp8AttentionScale(amax), inv = 1.0f / scale;
      k_scale[g * blocks + b] = scale;
      for (int64_t j = j0; j < j1; ++j)
        for (int64_t d = 0; d < head_dim; ++d) {
          const int64_t i = j * row + g * head_dim + d;
          k8[i] = FloatToE4M3Bits(k[i] * inv);
        }
    }
  uint8_t* const v8t = static_cast<uint8_t*>(args.v8t.data);
  float* const v_scale = args.v_scale.as<float>();
  std::memset(v8t, 0, static_cast<size_t>(row * padded));
  for (int64_t g = 0; g < num_kv_heads; ++g)
    for (int64_t d = 0; d < head_dim; ++d) {
      float amax = 0.0f;
      for (int64_t j = 0; j < n_kv; ++j)
        amax = std::max(amax, std::fabs(v[j * row + g * head_dim + d]));
      const float scale = Fp8AttentionScale(amax), inv = 1.0f / scale;
      v_scale[g * head_dim + d] = scale;
      uint8_t* const out = v8t + (g * head_dim + d) * padded;
      for (int64_t c = 0; c < padded; ++c) {
        const int64_t j = c / 16 * 16 + Fp8VColumnKey(static_cast<int>(c % 16));
        if (j < n_kv) out[c] = FloatToE4M3Bits(v[j * row + g * head_dim + d] * inv);
      }
    }
  return OkStatus();
}

}  // namespace millipede
