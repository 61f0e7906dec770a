#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/memory/float_rows.h"

namespace millipede {
namespace {

Status CheckKv(const ConstTensorView& t, const char* what, const Shape& shape) {
  MP_REQUIRE(IsKvDType(t.dtype), what, ": dtype ", DTypeName(t.dtype),
             ", expected F32, BF16, F16 or F8_E4M3");
  return CheckTensor(t, what, t.dtype, shape);
}

// Rows [0, n_kv) of one kv head, converted to float: [n_kv, head_dim].
std::vector<float> LoadKvHead(const ConstTensorView& t, int64_t kv_head) {
  const int64_t n_kv = t.dim(0), num_kv_heads = t.dim(1), head_dim = t.dim(2);
  std::vector<float> rows(n_kv * head_dim);
  for (int64_t j = 0; j < n_kv; ++j)
    LoadFloatRow(t.data, t.dtype, (j * num_kv_heads + kv_head) * head_dim, head_dim,
                 rows.data() + j * head_dim);
  return rows;
}

}  // namespace

Status AttentionCheckArgs(const AttentionArgs& args) {
  MP_REQUIRE(args.q.rank() == 3, "attention q: rank ", args.q.rank(), ", expected 3");
  MP_REQUIRE(args.k.rank() == 3, "attention k: rank ", args.k.rank(), ", expected 3");
  const int64_t n_q = args.q.dim(0), num_q_heads = args.q.dim(1), head_dim = args.q.dim(2);
  const int64_t n_kv = args.k.dim(0), num_kv_heads = args.k.dim(1);
  MP_REQUIRE(head_dim > 0, "attention: head_dim must be positive");
  MP_REQUIRE(num_kv_heads > 0 && num_q_heads % num_kv_heads == 0, "attention: num_q_heads ",
             num_q_heads, " is not a multiple of num_kv_heads ", num_kv_heads);
  MP_RETURN_IF_ERROR(
      CheckTensor(args.q, "attention q", DType::kF32, Shape{n_q, num_q_heads, head_dim}));
  const Shape kv_shape{n_kv, num_kv_heads, head_dim};
  MP_RETURN_IF_ERROR(CheckKv(args.k, "attention k", kv_shape));
  MP_RETURN_IF_ERROR(CheckKv(args.v, "attention v", kv_shape));
  MP_RETURN_IF_ERROR(
      CheckTensor(args.o, "attention o", DType::kF32, Shape{n_q, num_q_heads, head_dim}));
  if (args.lse.data != nullptr)
    MP_RETURN_IF_ERROR(
        CheckTensor(args.lse, "attention lse", DType::kF32, Shape{n_q, num_q_heads}));
  MP_REQUIRE(args.scale == 0.0f || (args.scale > 0.0f && std::isfinite(args.scale)),
             "attention: scale ", args.scale, " must be 0 (meaning 1/sqrt(head_dim)) or > 0");
  MP_REQUIRE(args.sink_tokens >= 0, "attention: sink_tokens ", args.sink_tokens, " < 0");
  if (args.kv_head_rows.data != nullptr)
    MP_RETURN_IF_ERROR(
        CheckTensor(args.kv_head_rows, "attention kv_head_rows", DType::kI32, Shape{num_kv_heads}));
  if (args.kv_head_window != nullptr)
    for (int64_t g = 0; g < num_kv_heads; ++g)
      MP_REQUIRE(args.kv_head_window[g] >= 0, "attention: window of KV head ", g, " is ",
                 args.kv_head_window[g], " < 0");
  return OkStatus();
}

bool AttentionHasWindow(const AttentionArgs& args) {
  if (args.kv_head_window == nullptr || args.k.rank() != 3) return false;
  for (int64_t g = 0; g < args.k.dim(1); ++g)
    if (args.kv_head_window[g] > 0) return true;
  return false;
}

Status AttentionRef(const AttentionArgs& args) {
  MP_RETURN_IF_ERROR(AttentionCheckArgs(args));
  const int64_t n_q = args.q.dim(0), num_q_heads = args.q.dim(1), head_dim = args.q.dim(2);
  const int64_t n_kv = args.k.dim(0), num_kv_heads = args.k.dim(1);
  const bool write_lse = args.lse.data != nullptr;
  const double scale =
      args.scale == 0.0f ? 1.0 / std::sqrt(static_cast<double>(head_dim)) : args.scale;

  // Scores, their exponentials and the output row are summed in double: the reference must stay
  // exact to ~1e-12 over 10^5+ keys so that it can judge fp32 kernels and so that merged splits
  // can be compared with the whole at 1e-6.
  const int64_t group = num_q_heads / num_kv_heads;
  std::vector<double> scores;
  std::vector<double> acc(head_dim);
  for (int64_t g = 0; g < num_kv_heads; ++g) {
    const std::vector<float> k = LoadKvHead(args.k, g);
    const std::vector<float> v = LoadKvHead(args.v, g);
    for (int64_t t = 0; t < n_q; ++t) {
      // Keys are a contiguous run of positions, so the visible ones are a prefix [0, visible).
      int64_t visible = n_kv;
      if (args.mask == AttentionMask::kCausal)
        visible = std::clamp<int64_t>(args.q_offset + t - args.k_offset + 1, 0, n_kv);
      if (args.kv_head_rows.data != nullptr)
        visible = std::clamp<int64_t>(args.kv_head_rows.as<const int32_t>()[g], 0, visible);
      // An A-shape head drops the keys between the sinks and its window: seen[j] says which of
      // the prefix remain (positions are global, so blocks of a ring see the same mask).
      const int64_t window = args.kv_head_window != nullptr ? args.kv_head_window[g] : 0;
      auto seen = [&](int64_t j) {
        if (args.kv_row_visible != nullptr && args.kv_row_visible[j * num_kv_heads + g] == 0)
          return false;
        if (window <= 0) return true;
        const int64_t key = args.k_offset + j, query = args.q_offset + t;
        return key < args.sink_tokens || query - key < window;
      };
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        const float* q = args.q.as<const float>() + (t * num_q_heads + h) * head_dim;
        float* o = args.o.as<float>() + (t * num_q_heads + h) * head_dim;
        scores.resize(visible);
        double max_score = -std::numeric_limits<double>::infinity();
        int64_t num_seen = 0;
        for (int64_t j = 0; j < visible; ++j) {
          if (!seen(j)) {
            scores[j] = -std::numeric_limits<double>::infinity();
            continue;
          }
          ++num_seen;
          double dot = 0.0;
          for (int64_t c = 0; c < head_dim; ++c)
            dot += static_cast<double>(q[c]) * k[j * head_dim + c];
          scores[j] = scale * dot;
          max_score = std::max(max_score, scores[j]);
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        double sum = 0.0;
        for (int64_t j = 0; j < visible; ++j) {
          if (!seen(j)) continue;
          const double p = std::exp(scores[j] - max_score);
          sum += p;
          for (int64_t c = 0; c < head_dim; ++c) acc[c] += p * v[j * head_dim + c];
        }
        // No visible key: o = 0 and lse = -inf by definition (sum == 0 here).
        for (int64_t c = 0; c < head_dim; ++c)
          o[c] = num_seen == 0 ? 0.0f : static_cast<float>(acc[c] / sum);
        if (write_lse)
          args.lse.as<float>()[t * num_q_heads + h] =
              num_seen == 0 ? -std::numeric_limits<float>::infinity()
                            : static_cast<float>(max_score + std::log(sum));
      }
    }
  }
  return OkStatus();
}

}  // namespace millipede
