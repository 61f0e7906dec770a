#include <vector>

#include "kernels/convert.h"
#include "kernels/rope_kv.h"

namespace millipede {

Status RopeKvCheckArgs(const RopeKvArgs& args) {
  MP_RETURN_IF_ERROR(RopeCheckArgs({args.q, args.positions, args.inv_freq}));
  MP_REQUIRE(args.k.rank() == 3, "rope_kv k: rank ", args.k.rank(), ", expected 3");
  const int64_t n = args.q.dim(0);
  const int64_t head_dim = args.q.dim(2);
  const Shape kv_shape{n, args.k.dim(1), head_dim};
  MP_RETURN_IF_ERROR(CheckTensor(args.k, "rope_kv k", DType::kF32, kv_shape));
  MP_RETURN_IF_ERROR(CheckTensor(args.v, "rope_kv v", DType::kF32, kv_shape));
  for (const TensorView* cache : {&args.k_cache, &args.v_cache}) {
    const char* what = cache == &args.k_cache ? "rope_kv k_cache" : "rope_kv v_cache";
    MP_REQUIRE(
        cache->dtype == DType::kF32 || cache->dtype == DType::kBF16 || cache->dtype == DType::kF16,
        what, ": dtype ", DTypeName(cache->dtype), ", expected F32, BF16 or F16");
    MP_RETURN_IF_ERROR(CheckTensor(*cache, what, cache->dtype, kv_shape));
  }
  return OkStatus();
}

Status RopeKvRef(const RopeKvArgs& args) {
  MP_RETURN_IF_ERROR(RopeKvCheckArgs(args));
  MP_RETURN_IF_ERROR(RopeRef({args.q, args.positions, args.inv_freq}));
  // The keys are rotated in a copy: the op leaves its inputs as they are.
  std::vector<float> k(static_cast<size_t>(args.k.NumElements()));
  if (!k.empty())
    MP_RETURN_IF_ERROR(ConvertRef(args.k, TensorView{k.data(), DType::kF32, args.k.shape}));
  const TensorView rotated{k.data(), DType::kF32, args.k.shape};
  MP_RETURN_IF_ERROR(RopeRef({rotated, args.positions, args.inv_freq}));
  MP_RETURN_IF_ERROR(ConvertRef(AsConst(rotated), args.k_cache));
  return ConvertRef(args.v, args.v_cache);
}

}  // namespace millipede
