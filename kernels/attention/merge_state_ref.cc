#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/attention/attention_state.h"
#include "kernels/attention/merge_state.h"

namespace millipede {
namespace {

using State = AttentionStateT<double>;

Status CheckLse(float lse, const char* what, int64_t index) {
  MP_REQUIRE(!std::isnan(lse) && lse != INFINITY, "merge_state: ", what, "[", index, "] is ", lse,
             "; an LSE must be finite or -inf");
  return OkStatus();
}

// Checks o [n, num_heads, head_dim] and lse [n, num_heads] against each other.
Status CheckPair(const ConstTensorView& o, const ConstTensorView& lse, const char* o_name,
                 const char* lse_name) {
  MP_REQUIRE(o.rank() == 3, o_name, ": rank ", o.rank(), ", expected 3");
  MP_RETURN_IF_ERROR(CheckTensor(o, o_name, DType::kF32, o.shape));
  return CheckTensor(lse, lse_name, DType::kF32, Shape{o.dim(0), o.dim(1)});
}

}  // namespace

Status MergeStateCheckArgs(const MergeStateArgs& args) {
  MP_REQUIRE(args.o_parts.rank() == 4, "merge_state o_parts: rank ", args.o_parts.rank(),
             ", expected 4");
  const int64_t num_parts = args.o_parts.dim(0), n = args.o_parts.dim(1);
  const int64_t num_heads = args.o_parts.dim(2), head_dim = args.o_parts.dim(3);
  MP_RETURN_IF_ERROR(CheckTensor(args.o_parts, "merge_state o_parts", DType::kF32,
                                 Shape{num_parts, n, num_heads, head_dim}));
  MP_REQUIRE(args.part_stride == 0 || args.part_stride >= n * num_heads * head_dim,
             "merge_state: part_stride ", args.part_stride, " is below a part's ",
             n * num_heads * head_dim, " output elements");
  MP_RETURN_IF_ERROR(CheckTensor(args.lse_parts, "merge_state lse_parts", DType::kF32,
                                 Shape{num_parts, n, num_heads}));
  MP_RETURN_IF_ERROR(
      CheckTensor(args.o, "merge_state o", DType::kF32, Shape{n, num_heads, head_dim}));
  return CheckTensor(args.lse, "merge_state lse", DType::kF32, Shape{n, num_heads});
}

Status MergeStateRef(const MergeStateArgs& args) {
  MP_RETURN_IF_ERROR(MergeStateCheckArgs(args));
  const int64_t num_parts = args.o_parts.dim(0), n = args.o_parts.dim(1);
  const int64_t num_heads = args.o_parts.dim(2), head_dim = args.o_parts.dim(3);
  const float* lse_parts = args.lse_parts.as<const float>();
  const int64_t rows = n * num_heads;
  const int64_t o_stride = args.part_stride > 0 ? args.part_stride : rows * head_dim;
  const int64_t lse_stride = args.part_stride > 0 ? args.part_stride : rows;
  for (int64_t p = 0; p < num_parts; ++p)
    for (int64_t r = 0; r < rows; ++r)
      MP_RETURN_IF_ERROR(CheckLse(lse_parts[p * lse_stride + r], "lse_parts", p * rows + r));

  // Accumulating in double makes this the oracle for fp32 kernels: the only roundings that
  // matter are the final conversions to float.
  std::vector<double> acc(head_dim);
  for (int64_t r = 0; r < rows; ++r) {
    State state = State::Empty();
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t p = 0; p < num_parts; ++p) {
      const State::Factors f = state.Merge(State::FromLse(lse_parts[p * lse_stride + r]));
      const float* o_part = args.o_parts.as<const float>() + p * o_stride + r * head_dim;
      for (int64_t c = 0; c < head_dim; ++c) acc[c] = f.Apply(acc[c], o_part[c]);
    }
    const double out_scale = state.OutputScale();
    float* o = args.o.as<float>() + r * head_dim;
    for (int64_t c = 0; c < head_dim; ++c) o[c] = static_cast<float>(acc[c] * out_scale);
    args.lse.as<float>()[r] = static_cast<float>(state.Lse());
  }
  return OkStatus();
}

Status MergeStateInPlaceCheckArgs(TensorView o, TensorView lse, ConstTensorView o_other,
                                  ConstTensorView lse_other) {
  MP_RETURN_IF_ERROR(CheckPair(AsConst(o), AsConst(lse), "merge_state o", "merge_state lse"));
  MP_RETURN_IF_ERROR(CheckTensor(o_other, "merge_state o_other", DType::kF32, o.shape));
  return CheckTensor(lse_other, "merge_state lse_other", DType::kF32, lse.shape);
}

Status MergeStateInPlaceRef(TensorView o, TensorView lse, ConstTensorView o_other,
                            ConstTensorView lse_other) {
  MP_RETURN_IF_ERROR(MergeStateInPlaceCheckArgs(o, lse, o_other, lse_other));
  const int64_t rows = lse.NumElements();
  const int64_t head_dim = o.dim(2);
  for (int64_t r = 0; r < rows; ++r) {
    MP_RETURN_IF_ERROR(CheckLse(lse.as<const float>()[r], "lse", r));
    MP_RETURN_IF_ERROR(CheckLse(lse_other.as<const float>()[r], "lse_other", r));
  }

  for (int64_t r = 0; r < rows; ++r) {
    float& lse_r = lse.as<float>()[r];
    State state = State::FromLse(lse_r);
    const State::Factors f = state.Merge(State::FromLse(lse_other.as<const float>()[r]));
    const double out_scale = state.OutputScale();
    float* o_r = o.as<float>() + r * head_dim;
    const float* other = o_other.as<const float>() + r * head_dim;
    // Factors of 0 skip their side, so an empty o (which may hold anything) is never read.
    for (int64_t c = 0; c < head_dim; ++c)
      o_r[c] = static_cast<float>(f.Apply(o_r[c], other[c]) * out_scale);
    lse_r = static_cast<float>(state.Lse());
  }
  return OkStatus();
}

}  // namespace millipede
