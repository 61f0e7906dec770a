#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/fp8.h"
#include "kernels/attention/attention_fp8.h"
#include "kernels/attention/attention_fp8_operands.h"

namespace millipede {
namespace {

StatusOr<Fp8AttentionHostOperands> Quantize(const AttentionArgs& args) {
  const int64_t n_kv = args.k.dim(0), num_kv_heads = args.k.dim(1), head_dim = args.k.dim(2);
  const int64_t padded = Fp8AttentionPaddedKeys(n_kv), elements = n_kv * num_kv_heads * head_dim;
  Fp8AttentionHostOperands ops;
  ops.blocks = Fp8AttentionKeyBlocks(n_kv);
  std::vector<uint8_t> k8(elements), v8t(num_kv_heads * head_dim * padded);
  ops.k_scale.resize(num_kv_heads * ops.blocks);
  ops.v_scale.resize(num_kv_heads * head_dim);
  const Fp8AttentionOperandsArgs q{
      args.k,
      args.v,
      {k8.data(), DType::kF8E4M3, args.k.shape},
      {ops.k_scale.data(), DType::kF32, Shape{num_kv_heads, ops.blocks}},
      {v8t.data(), DType::kF8E4M3, Shape{num_kv_heads, head_dim, padded}},
      {ops.v_scale.data(), DType::kF32, Shape{num_kv_heads, head_dim}}};
  MP_RETURN_IF_ERROR(Fp8AttentionOperandsRef(q));
  ops.k8.resize(elements);
  for (int64_t i = 0; i < elements; ++i) ops.k8[i] = E4M3BitsToFloat(k8[i]);
  ops.v8.resize(elements);
  for (int64_t g = 0; g < num_kv_heads; ++g)
    for (int64_t d = 0; d < head_dim; ++d)
      for (int64_t c = 0; c < padded; ++c) {
        const int64_t j = c / 16 * 16 + Fp8VColumnKey(static_cast<int>(c % 16));
        if (j < n_kv)
          ops.v8[(g * n_kv + j) * head_dim + d] =
              E4M3BitsToFloat(v8t[(g * head_dim + d) * padded + c]);
      }
  return ops;
}

float RoundE4M3(float x) { return E4M3BitsToFloat(FloatToE4M3Bits(x)); }

}  // namespace

Status AttentionFp8CheckArgs(const AttentionArgs& args) {
  MP_RETURN_IF_ERROR(AttentionCheckArgs(args));
  for (const ConstTensorView* t : {&args.k, &args.v})
    MP_REQUIRE(t->dtype == DType::kF32 || t->dtype == DType::kBF16 || t->dtype == DType::kF16,
               "fp8 attention: K/V dtype ", DTypeName(t->dtype), ", expected F32, BF16 or F16");
  if (AttentionHasWindow(args) || args.kv_row_visible != nullptr ||
      args.kv_head_rows.data != nullptr)
    return UnimplementedError(
        "fp8 attention: A-shape windows, evicted rows and per-head key counts are not available");
  return OkStatus();
}

StatusOr<Fp8AttentionHostOperands> Fp8AttentionHostOperandsRef(const AttentionArgs& args) {
  MP_RETURN_IF_ERROR(AttentionFp8CheckArgs(args));
  return Quantize(args);
}

Status AttentionFp8Ref(const AttentionArgs& args) {
  MP_ASSIGN_OR_RETURN(const Fp8AttentionHostOperands ops, Fp8AttentionHostOperandsRef(args));
  AttentionFp8RowsRef(args, ops, 0, args.q.dim(0));
  return OkStatus();
}

void AttentionFp8RowsRef(const AttentionArgs& args, const Fp8AttentionHostOperands& ops,
                         int64_t row_begin, int64_t row_end) {
  const int64_t num_q_heads = args.q.dim(1), head_dim = args.q.dim(2);
  const int64_t n_kv = args.k.dim(0), num_kv_heads = args.k.dim(1);
  const int64_t group = num_q_heads / num_kv_heads, shift = args.q_offset - args.k_offset;
  const double scale =
      args.scale == 0.0f ? 1.0 / std::sqrt(static_cast<double>(head_dim)) : args.scale;
  const float* const q_all = args.q.as<const float>();
  float* const o_all = args.o.as<float>();
  float* const lse_all = args.lse.as<float>();
  std::vector<float> q8(head_dim);
  std::vector<double> x(kFp8AttentionKeyBlock), acc(head_dim);
  for (int64_t t = row_begin; t < row_end; ++t)
    for (int64_t h = 0; h < num_q_heads; ++h) {
      const int64_t g = h / group;
      const float* const q = q_all + (t * num_q_heads + h) * head_dim;
      float amax = 0.0f;
      for (int64_t d = 0; d < head_dim; ++d) amax = std::max(amax, std::fabs(q[d]));
      const float q_scale = Fp8AttentionScale(amax), inv = 1.0f / q_scale;
      for (int64_t d = 0; d < head_dim; ++d) q8[d] = RoundE4M3(q[d] * inv);
      const int64_t end =
          args.mask == AttentionMask::kCausal ? std::clamp<int64_t>(t + shift + 1, 0, n_kv) : n_kv;
      double m = -std::numeric_limits<double>::infinity(), denominator = 0.0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j0 = 0; j0 < end; j0 += kFp8AttentionKeyBlock) {
        const int64_t j1 = std::min(end, j0 + kFp8AttentionKeyBlock);
        const double block_scale =
            scale * q_scale * ops.k_scale[g * ops.blocks + j0 / kFp8AttentionKeyBlock];
        double block_max = -std::numeric_limits<double>::infinity();
        for (int64_t j = j0; j < j1; ++j) {
          const float* const k = ops.k8.data() + (j * num_kv_heads + g) * head_dim;
          double dot = 0.0;
          for (int64_t d = 0; d < head_dim; ++d) dot += static_cast<double>(q8[d]) * k[d];
          x[j - j0] = dot * block_scale;
          block_max = std::max(block_max, x[j - j0]);
        }
        const double m_new = std::max(m, block_max);
        const double factor = std::exp(m - m_new);  // 0 for the first block (m = -inf)
        denominator *= factor;
        for (double& a : acc) a *= factor;
        for (int64_t j = j0; j < j1; ++j) {
          const double e = std::exp(x[j - j0] - m_new);
          denominator += e;
          const double p = RoundE4M3(static_cast<float>(256.0 * e));
          const float* const v = ops.v8.data() + (g * n_kv + j) * head_dim;
          for (int64_t d = 0; d < head_dim; ++d) acc[d] += p * v[d];
        }
        m = m_new;
      }
      float* const o = o_all + (t * num_q_heads + h) * head_dim;
      for (int64_t d = 0; d < head_dim; ++d)
        o[d] =
            end > 0
                ? static_cast<float>(acc[d] * ops.v_scale[g * head_dim + d] / (256.0 * denominator))
                : 0.0f;
      if (lse_all != nullptr)
        lse_all[t * num_q_heads + h] = end > 0 ? static_cast<float>(m + std::log(denominator))
                                               : -std::numeric_limits<float>::infinity();
    }
}

}  // namespace millipede
