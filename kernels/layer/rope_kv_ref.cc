#include <vector>

#include "kernels/layer/rope_kv.h"
#include "kernels/memory/convert.h"

namespace millipede {

namespace {

Status CheckCacheDType(DType dtype, const char* what) {
  MP_REQUIRE(IsKvDType(dtype), what, ": dtype ", DTypeName(dtype),
             ", expected F32, BF16, F16 or F8_E4M3");
  return OkStatus();
}

// The per-row destinations: n of each, empty in pairs, the same dtype per tensor; whole caches
// of `row_shape`'s row width with cache_rows, single rows without.
Status CheckRows(const RopeKvArgs& args, const Shape& row_shape) {
  const int64_t n = args.q.dim(0);
  const bool whole = args.cache_rows.data != nullptr;
  if (whole)
    MP_RETURN_IF_ERROR(CheckTensor(args.cache_rows, "rope_kv cache_rows", DType::kI64, Shape{n}));
  MP_REQUIRE(args.k_cache.data == nullptr && args.v_cache.data == nullptr,
             "rope_kv: k_rows / v_rows replace k_cache / v_cache, which must be empty");
  MP_REQUIRE(static_cast<int64_t>(args.k_rows.size()) == n &&
                 static_cast<int64_t>(args.v_rows.size()) == n,
             "rope_kv: ", args.k_rows.size(), " k_rows and ", args.v_rows.size(),
             " v_rows for ", n, " rows");
  int64_t first = -1;  // the first row with destinations
  for (int64_t t = 0; t < n; ++t) {
    const TensorView& k = args.k_rows[static_cast<size_t>(t)];
    const TensorView& v = args.v_rows[static_cast<size_t>(t)];
    MP_REQUIRE((k.data == nullptr) == (v.data == nullptr), "rope_kv: row ", t,
               " has a K destination without a V destination or the reverse");
    if (k.data == nullptr) continue;
    if (first < 0) first = t;
    MP_RETURN_IF_ERROR(CheckCacheDType(k.dtype, "rope_kv k_rows"));
    MP_RETURN_IF_ERROR(CheckCacheDType(v.dtype, "rope_kv v_rows"));
    MP_REQUIRE(k.dtype == args.k_rows[static_cast<size_t>(first)].dtype &&
                   v.dtype == args.v_rows[static_cast<size_t>(first)].dtype,
               "rope_kv: row ", t, "'s destinations differ in dtype from row ", first, "'s");
    const Shape shape =
        whole ? Shape{k.rank() == 3 ? k.dim(0) : 0, row_shape[1], row_shape[2]} : row_shape;
    MP_REQUIRE(!whole || (shape[0] > 0 && v.rank() == 3 && v.dim(0) == shape[0]),
               "rope_kv: row ", t, "'s caches must be [rows, ", row_shape[1], ", ", row_shape[2],
               "] with rows > 0, K and V alike");
    MP_RETURN_IF_ERROR(CheckTensor(k, "rope_kv k_rows", k.dtype, shape));
    MP_RETURN_IF_ERROR(CheckTensor(v, "rope_kv v_rows", v.dtype, shape));
  }
  return OkStatus();
}

}  // namespace

Status RopeKvCheckArgs(const RopeKvArgs& args) {
  MP_RETURN_IF_ERROR(RopeCheckArgs({args.q, args.positions, args.inv_freq}));
  MP_REQUIRE(args.k.rank() == 3, "rope_kv k: rank ", args.k.rank(), ", expected 3");
  const int64_t n = args.q.dim(0);
  const int64_t head_dim = args.q.dim(2);
  const Shape kv_shape{n, args.k.dim(1), head_dim};
  MP_RETURN_IF_ERROR(CheckTensor(args.k, "rope_kv k", DType::kF32, kv_shape));
  MP_RETURN_IF_ERROR(CheckTensor(args.v, "rope_kv v", DType::kF32, kv_shape));
  if (!args.k_rows.empty() || !args.v_rows.empty())
    return CheckRows(args, Shape{1, args.k.dim(1), head_dim});
  MP_REQUIRE(args.cache_rows.data == nullptr, "rope_kv: cache_rows needs k_rows / v_rows");
  for (const TensorView* cache : {&args.k_cache, &args.v_cache}) {
    const char* what = cache == &args.k_cache ? "rope_kv k_cache" : "rope_kv v_cache";
    MP_RETURN_IF_ERROR(CheckCacheDType(cache->dtype, what));
    MP_RETURN_IF_ERROR(CheckTensor(*cache, what, cache->dtype, kv_shape));
  }
  return OkStatus();
}

StatusOr<RopeKvArgs> RopeKvRowArgs(const RopeKvArgs& args, int64_t t) {
  RopeKvArgs row;
  row.q = SliceRows(args.q, t, 1);
  row.k = SliceRows(args.k, t, 1);
  row.v = SliceRows(args.v, t, 1);
  row.positions = SliceRows(args.positions, t, 1);
  row.inv_freq = args.inv_freq;
  row.k_cache = args.k_rows[static_cast<size_t>(t)];
  row.v_cache = args.v_rows[static_cast<size_t>(t)];
  if (args.cache_rows.data != nullptr && row.k_cache.data != nullptr) {
    const int64_t r = args.cache_rows.as<const int64_t>()[t];
    if (r < 0 || r >= row.k_cache.dim(0))
      return OutOfRangeError(detail::StrCat("rope_kv: row ", t, " goes to cache row ", r,
                                            ", outside its ", row.k_cache.dim(0), " rows"));
    row.k_cache = SliceRows(row.k_cache, r, 1);
    row.v_cache = SliceRows(row.v_cache, r, 1);
  }
  return row;
}

Status RopeKvByRow(const RopeKvArgs& args, Status (*rope)(const RopeArgs&),
                   Status (*rope_kv)(const RopeKvArgs&)) {
  for (int64_t t = 0; t < args.q.dim(0); ++t) {
    MP_ASSIGN_OR_RETURN(const RopeKvArgs row, RopeKvRowArgs(args, t));
    MP_RETURN_IF_ERROR(row.k_cache.data == nullptr ? rope({row.q, row.positions, row.inv_freq})
                                                   : rope_kv(row));
  }
  return OkStatus();
}

Status RopeKvRef(const RopeKvArgs& args) {
  MP_RETURN_IF_ERROR(RopeKvCheckArgs(args));
  if (!args.k_rows.empty()) return RopeKvByRow(args, RopeRef, RopeKvRef);
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
