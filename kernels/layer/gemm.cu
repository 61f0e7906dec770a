#include <cublasLt.h>

#include <algorithm>
#include <compare>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>

#include "common/cuda_check.h"
#include "kernels/cuda_util.cuh"
#include "kernels/layer/gemm_cuda.h"
#include "kernels/memory/convert_cuda.h"

namespace millipede {
namespace gemm_cuda_internal {

Status CublasCheck(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return OkStatus();
  return DeviceError(detail::StrCat("cuBLASLt error ", cublasLtGetStatusName(status), " (",
                                    cublasLtGetStatusString(status), ") in ", what));
}

struct LtDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* p) const { cublasLtMatmulDescDestroy(p); }
  void operator()(cublasLtMatrixLayoutOpaque_t* p) const { cublasLtMatrixLayoutDestroy(p); }
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const { cublasLtMatmulPreferenceDestroy(p); }
};
using MatmulDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, LtDeleter>;
using MatrixLayout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LtDeleter>;
using Preference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, LtDeleter>;

// One problem as cuBLASLt sees it. The alignments (bytes, powers of two up to 256) belong to it
// because an algorithm chosen for aligned buffers may not run on less aligned ones.
struct PlanKey {
  int64_t m, n, k;
  int64_t ldb;  // elements between weight rows
  DType dtype;  // of both operands
  uint32_t align_weight, align_activations, align_out;
  auto operator<=>(const PlanKey&) const = default;
};

struct Plan {
  MatmulDesc desc;
  MatrixLayout weight, activations, out;
  cublasLtMatmulAlgo_t algo;
};

}  // namespace gemm_cuda_internal

using gemm_cuda_internal::CublasCheck;
using gemm_cuda_internal::Plan;
using gemm_cuda_internal::PlanKey;

struct GemmCudaContext::Impl {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // a converted to the weight's dtype.
  cuda_util::DeviceScratch activations;
  std::map<PlanKey, std::unique_ptr<Plan>> plans;

  ~Impl() {
    if (workspace != nullptr) cudaFree(workspace);
    if (handle != nullptr) cublasLtDestroy(handle);
  }
};

namespace {

constexpr int kThreads = 256;
// Shapes vary with chunk and batch sizes; past this many the cache starts over, which keeps a
// long-running server's memory flat at the cost of a few heuristic queries.
constexpr size_t kMaxPlans = 1024;

// out[i, j] = (accumulate ? out[i, j] : 0) + bias[j], ahead of a GEMM with beta = 1 that adds
// a @ b^T on top. Threads run along a row (coalesced); both grid dimensions are strided.
//   bias [n] of T, out [m, n] F32.
template <typename T>
__global__ void GemmBiasKernel(const T* __restrict__ bias, float* __restrict__ out, int64_t m,
                               int64_t n, bool accumulate) {
  const int64_t column_stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < n;
       j += column_stride) {
    const float b = cuda_util::LoadFloat(bias, j);
    for (int64_t i = blockIdx.y; i < m; i += gridDim.y) {
      float& dst = out[i * n + j];
      dst = accumulate ? dst + b : b;
    }
  }
}

Status LaunchBias(const GemmArgs& args, cudaStream_t stream) {
  const int64_t m = args.out.dim(0);
  const int64_t n = args.out.dim(1);
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 1024)),
                  static_cast<unsigned>(std::min<int64_t>(m, 65535)));
  return cuda_util::VisitFloatDType(args.bias.dtype, "gemm bias", [&](auto tag) {
    using T = typename decltype(tag)::type;
    GemmBiasKernel<T><<<grid, kThreads, 0, stream>>>(args.bias.as<const T>(), args.out.as<float>(),
                                                     m, n, args.accumulate);
    MP_CUDA_CHECK_LAUNCH();
    return OkStatus();
  });
}

// Skinny products (one decode token: kSkinnyRows activation row of 16-bit type) read the weight
// once at the memory's rate: one warp per weight row j, its lanes striding over k in 16-byte
// chunks of 8 elements, each chunk dotted with every activation row (which stay in L1/L2), fp32
// sums reduced across the warp. out[i, j] = (beta ? out[i, j] : 0) + sum. With 4 rows this was
// slower than cuBLASLt (the activations' reloads; performance.md), so it takes one.
//   a [m, k], b [n, k] of T with rows ldb apart (16-byte aligned rows, k % 8 == 0, ldb % 8 ==
//   0), out [m, n] F32.
constexpr int kSkinnyRows = 1;
constexpr int kSkinnyWarps = kThreads / 32;

template <typename T, int kM>
__global__ void __launch_bounds__(kThreads)
    SkinnyGemmKernel(const T* __restrict__ a, const T* __restrict__ b, float* __restrict__ out,
                     int64_t n, int64_t k, int64_t ldb, bool add) {
  const int lane = threadIdx.x % 32;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kSkinnyWarps + threadIdx.x / 32;
  if (j >= n) return;  // warp-uniform
  const uint4* row = reinterpret_cast<const uint4*>(b + j * ldb);
  const int64_t chunks = k / 8;
  float acc[kM] = {};
#pragma unroll 4
  for (int64_t c = lane; c < chunks; c += 32) {
    float w[8];
    cuda_util::Widen8<T>(__ldcs(row + c), w);  // read once: do not keep
#pragma unroll
    for (int i = 0; i < kM; ++i) {
      float x[8];
      cuda_util::Widen8<T>(__ldg(reinterpret_cast<const uint4*>(a + i * k) + c), x);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[i] = fmaf(x[e], w[e], acc[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < kM; ++i) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2)
      acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], offset);
  }
  if (lane == 0) {
#pragma unroll
    for (int i = 0; i < kM; ++i) {
      float& dst = out[i * n + j];
      dst = add ? dst + acc[i] : acc[i];
    }
  }
}

// Whether the skinny kernel takes this product (activations already in the weight's dtype).
bool SkinnyFits(const GemmArgs& args, const void* activations) {
  const int64_t m = args.a.dim(0), k = args.a.dim(1);
  return (args.b.dtype == DType::kBF16 || args.b.dtype == DType::kF16) && m <= kSkinnyRows &&
         k % 8 == 0 && GemmBRowStride(args) % 8 == 0 && cuda_util::IsAligned(activations, 16) &&
         cuda_util::IsAligned(args.b.data, 16);
}

template <typename T, int kM>
Status LaunchSkinnyRows(const void* a, const GemmArgs& args, bool add, cudaStream_t stream) {
  const int64_t n = args.b.dim(0), k = args.b.dim(1);
  const unsigned blocks = static_cast<unsigned>((n + kSkinnyWarps - 1) / kSkinnyWarps);
  SkinnyGemmKernel<T, kM><<<blocks, kThreads, 0, stream>>>(
      static_cast<const T*>(a), args.b.as<const T>(), args.out.as<float>(), n, k,
      GemmBRowStride(args), add);
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

template <typename T>
Status LaunchSkinny(const void* a, const GemmArgs& args, bool add, cudaStream_t stream) {
  return LaunchSkinnyRows<T, kSkinnyRows>(a, args, add, stream);
}

// The largest power of two, at most 256, dividing both the address and the leading dimension in
// bytes: what cuBLASLt may assume about a matrix.
uint32_t Alignment(const void* p, uint64_t ld_bytes) {
  const uint64_t bits = reinterpret_cast<uintptr_t>(p) | ld_bytes | 256;
  return static_cast<uint32_t>(bits & (~bits + 1));
}

cudaDataType_t CudaDataType(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}

Status MakeLayout(gemm_cuda_internal::MatrixLayout& layout, cudaDataType_t type, int64_t rows,
                  int64_t cols, int64_t ld) {
  cublasLtMatrixLayout_t raw = nullptr;
  MP_RETURN_IF_ERROR(CublasCheck(cublasLtMatrixLayoutCreate(&raw, type, static_cast<uint64_t>(rows),
                                                            static_cast<uint64_t>(cols), ld),
                                 "cublasLtMatrixLayoutCreate"));
  layout.reset(raw);
  return OkStatus();
}

template <typename T>
Status SetPreference(cublasLtMatmulPreference_t preference,
                     cublasLtMatmulPreferenceAttributes_t attribute, T value) {
  return CublasCheck(
      cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof(value)),
      "cublasLtMatmulPreferenceSetAttribute");
}

// cuBLASLt is column-major, and a row-major [r, c] buffer read column-major is the [c, r]
// transpose with leading dimension c. So the buffers hold, column-major, W = b^T [k, n],
// X = a^T [k, m] and Y = out^T [n, m], and out = a b^T becomes Y = b a^T = W^T X: cuBLASLt's A is
// the weight with op T, its B the activations with op N (the "TN" form cuBLASLt serves best),
// C = D = out, with leading dimensions ldb (k for a contiguous weight), k and n. fp32
// accumulation and fp32 alpha/beta for every dtype; with F32 operands CUBLAS_COMPUTE_32F is a
// true FP32 GEMM (TF32 would have to be asked for with CUBLAS_COMPUTE_32F_FAST_TF32).
StatusOr<std::unique_ptr<Plan>> MakePlan(cublasLtHandle_t handle, const PlanKey& key,
                                         size_t workspace_bytes) {
  auto plan = std::make_unique<Plan>();
  cublasLtMatmulDesc_t desc = nullptr;
  MP_RETURN_IF_ERROR(CublasCheck(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                                 "cublasLtMatmulDescCreate"));
  plan->desc.reset(desc);
  const int32_t op_weight = CUBLAS_OP_T, op_activations = CUBLAS_OP_N;
  MP_RETURN_IF_ERROR(CublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                                &op_weight, sizeof(op_weight)),
                                 "cublasLtMatmulDescSetAttribute(TRANSA)"));
  MP_RETURN_IF_ERROR(
      CublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_activations,
                                                 sizeof(op_activations)),
                  "cublasLtMatmulDescSetAttribute(TRANSB)"));
  const cudaDataType_t type = CudaDataType(key.dtype);
  MP_RETURN_IF_ERROR(MakeLayout(plan->weight, type, key.k, key.n, key.ldb));
  MP_RETURN_IF_ERROR(MakeLayout(plan->activations, type, key.k, key.m, key.k));
  MP_RETURN_IF_ERROR(MakeLayout(plan->out, CUDA_R_32F, key.n, key.m, key.n));

  cublasLtMatmulPreference_t raw_preference = nullptr;
  MP_RETURN_IF_ERROR(CublasCheck(cublasLtMatmulPreferenceCreate(&raw_preference),
                                 "cublasLtMatmulPreferenceCreate"));
  gemm_cuda_internal::Preference preference(raw_preference);
  MP_RETURN_IF_ERROR(SetPreference(raw_preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                   static_cast<uint64_t>(workspace_bytes)));
  // cuBLASLt assumes 256-byte alignment unless told otherwise; rows of an odd k, or views that
  // start mid-buffer, are less aligned.
  MP_RETURN_IF_ERROR(
      SetPreference(raw_preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_weight));
  MP_RETURN_IF_ERROR(SetPreference(raw_preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                   key.align_activations));
  MP_RETURN_IF_ERROR(
      SetPreference(raw_preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_out));
  MP_RETURN_IF_ERROR(
      SetPreference(raw_preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_out));

  cublasLtMatmulHeuristicResult_t result = {};
  int count = 0;
  MP_RETURN_IF_ERROR(CublasCheck(
      cublasLtMatmulAlgoGetHeuristic(handle, desc, plan->weight.get(), plan->activations.get(),
                                     plan->out.get(), plan->out.get(), raw_preference, 1, &result,
                                     &count),
      "cublasLtMatmulAlgoGetHeuristic"));
  if (count == 0)
    return UnimplementedError(
        detail::StrCat("gemm on the GPU: cuBLASLt has no algorithm for m=", key.m, " n=", key.n,
                       " k=", key.k, " ", DTypeName(key.dtype), " with alignments ",
                       key.align_weight, "/", key.align_activations, "/", key.align_out, " bytes"));
  plan->algo = result.algo;
  return plan;
}

}  // namespace

GemmCudaContext::GemmCudaContext() : impl_(std::make_unique<Impl>()) {}
GemmCudaContext::~GemmCudaContext() = default;

uint64_t GemmCudaContext::generation() const { return impl_->activations.generation(); }

StatusOr<std::unique_ptr<GemmCudaContext>> GemmCudaContext::Create(size_t workspace_bytes) {
  auto context = std::unique_ptr<GemmCudaContext>(new GemmCudaContext());
  Impl& impl = *context->impl_;
  MP_RETURN_IF_ERROR(CublasCheck(cublasLtCreate(&impl.handle), "cublasLtCreate"));
  if (workspace_bytes > 0) MP_CUDA_CHECK(cudaMalloc(&impl.workspace, workspace_bytes));
  impl.workspace_bytes = workspace_bytes;
  return context;
}

Status GemmCudaContext::Reserve(int64_t max_activation_elements, cudaStream_t stream) {
  MP_REQUIRE(max_activation_elements >= 0, "gemm: cannot reserve ", max_activation_elements,
             " activation elements");
  // Two bytes per element: BF16 or F16 (F32 activations are used in place).
  return impl_->activations.Reserve(static_cast<size_t>(max_activation_elements) * 2, stream);
}

Status GemmCuda(const GemmArgs& args, GemmCudaContext& context, cudaStream_t stream) {
  MP_RETURN_IF_ERROR(GemmCheckArgs(args));
  const DType dtype = args.b.dtype;
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16)
    return UnimplementedError(detail::StrCat("gemm on the GPU: ", DTypeName(dtype),
                                             " weights are not supported (F32, BF16 or F16)"));
  const int64_t m = args.a.dim(0);
  const int64_t k = args.a.dim(1);
  const int64_t n = args.b.dim(0);
  if (m == 0 || n == 0) return OkStatus();
  GemmCudaContext::Impl& impl = context.impl();
  float* out = args.out.as<float>();

  float beta = args.accumulate ? 1.0f : 0.0f;
  if (args.bias.data != nullptr) {
    MP_RETURN_IF_ERROR(LaunchBias(args, stream));
    beta = 1.0f;
  }
  if (k == 0) {
    // An empty product: out already holds everything but a zero sum, unless nothing was written.
    if (beta == 0.0f) MP_CUDA_CHECK(cudaMemsetAsync(out, 0, args.out.NumBytes(), stream));
    return OkStatus();
  }

  // F32 activations with BF16/F16 weights are rounded to the weight's dtype here (one more
  // kernel); activations already in that dtype (GemmCheckArgs allows no other mix) are used as
  // they are, with the same result.
  const void* activations = args.a.data;
  if (args.a.dtype != dtype) {
    MP_RETURN_IF_ERROR(
        impl.activations.Reserve(static_cast<size_t>(m * k) * DTypeSize(dtype), stream));
    const TensorView scratch{impl.activations.data(), dtype, Shape{m, k}};
    MP_RETURN_IF_ERROR(ConvertCuda(args.a, scratch, stream));
    activations = scratch.data;
  }
  if (SkinnyFits(args, activations))
    return dtype == DType::kBF16 ? LaunchSkinny<__nv_bfloat16>(activations, args, beta != 0.0f, stream)
                                 : LaunchSkinny<__half>(activations, args, beta != 0.0f, stream);

  const uint64_t row_bytes = static_cast<uint64_t>(k) * DTypeSize(dtype);
  const int64_t ldb = GemmBRowStride(args);
  const PlanKey key{m,
                    n,
                    k,
                    ldb,
                    dtype,
                    Alignment(args.b.data, static_cast<uint64_t>(ldb) * DTypeSize(dtype)),
                    Alignment(activations, row_bytes),
                    Alignment(out, static_cast<uint64_t>(n) * sizeof(float))};
  auto it = impl.plans.find(key);
  if (it == impl.plans.end()) {
    MP_ASSIGN_OR_RETURN(std::unique_ptr<Plan> plan,
                        MakePlan(impl.handle, key, impl.workspace_bytes));
    if (impl.plans.size() >= kMaxPlans) impl.plans.clear();
    it = impl.plans.emplace(key, std::move(plan)).first;
  }
  const Plan& plan = *it->second;
  const float alpha = 1.0f;
  return CublasCheck(
      cublasLtMatmul(impl.handle, plan.desc.get(), &alpha, args.b.data, plan.weight.get(),
                     activations, plan.activations.get(), &beta, out, plan.out.get(), out,
                     plan.out.get(), &plan.algo, impl.workspace, impl.workspace_bytes, stream),
      "cublasLtMatmul");
}

}  // namespace millipede
