#include "worker/random_weights.h"

#include <algorithm>
#include <cmath>
#include <new>
#include <string_view>
#include <thread>

#include "checkpoint/model_tensors.h"
#include "kernels/random.h"

namespace millipede {
namespace {

// FNV-1a: a stable 64-bit key per tensor name (independent of std::hash's implementation).
uint64_t NameKey(std::string_view name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The shared direction of the locality option: +-1/sqrt(cols) by column.
double SharedDirection(uint64_t seed, int64_t col, int64_t cols) {
  const RandomPhiloxBlock bits =
      RandomBits(seed ^ 0x6c6f63616c697479ull, static_cast<uint64_t>(col));
  return ((bits.v[0] & 1u) ? 1.0 : -1.0) / std::sqrt(static_cast<double>(cols));
}

// What the locality option adds to element i of tensor `name` of shape [rows, cols] (0 for the
// other tensors).
double LocalityTerm(const std::string& name, const RandomWeightsOptions& o, int64_t i,
                    int64_t cols) {
  const bool embed = name == "model.embed_tokens.weight";
  const bool qk = EndsWith(name, "q_proj.weight") || EndsWith(name, "k_proj.weight");
  if (o.locality <= 0 || !(embed || qk)) return 0.0;
  const double dir = SharedDirection(o.seed, i % cols, cols);
  const double random_norm = o.std * std::sqrt(static_cast<double>(cols));
  if (embed) return 2.0 * random_norm * dir;
  // After RMSNorm the shared direction's coefficient is about 2 sqrt(cols / 5); every row of
  // every head maps it to s, so that s^2 * head_dim / sqrt(head_dim) = locality at distance 0.
  const double d = static_cast<double>(o.head_dim);
  const double s = std::sqrt(o.locality / std::sqrt(d));
  return s / (2.0 * std::sqrt(static_cast<double>(cols) / 5.0)) * dir;
}

}  // namespace

Status FillRandomWeight(const std::string& name, const RandomWeightsOptions& options,
                        TensorView out) {
  MP_REQUIRE(IsFloatDType(out.dtype), "random weight ", name, ": dtype ", DTypeName(out.dtype),
             " is not a float type");
  const bool is_norm = EndsWith(name, "layernorm.weight") || EndsWith(name, "norm.weight");
  const double half_width = is_norm ? 0.1 : options.std * std::sqrt(3.0);
  const double center = is_norm ? 1.0 : 0.0;
  const uint64_t key = options.seed ^ NameKey(name);
  const int64_t n = out.NumElements();
  MP_REQUIRE(options.locality == 0 || (options.locality > 0 && options.head_dim > 0),
             "random weights: locality needs a positive value and the head_dim");
  const int64_t cols = out.shape.rank == 2 ? out.dim(1) : 1;
  // One Philox block gives four 32-bit words: four elements per counter value.
  // Whether the locality term applies to this tensor, decided once rather than per element
  // (the term is 0 elsewhere, so the values are the same either way).
  const bool local = LocalityTerm(name, options, 0, cols) != 0.0;
  auto fill_range = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; i += 4) {
      RandomPhiloxBlock bits = RandomBits(key, static_cast<uint64_t>(i / 4));
      for (int64_t j = 0; j < 4 && i + j < end; ++j) {
        double u = (static_cast<double>(bits.v[j]) + 0.5) * 0x1.0p-32;  // (0, 1)
        double value = center + half_width * (2.0 * u - 1.0);
        if (local) value += LocalityTerm(name, options, i + j, cols);
        StoreFromFloat(out.data, out.dtype, static_cast<size_t>(i + j), static_cast<float>(value));
      }
    }
  };
  const int64_t kPerThread = 1 << 22;
  const int64_t threads =
      std::clamp<int64_t>(n / kPerThread, 1, std::max(1u, std::thread::hardware_concurrency()));
  if (threads == 1) {
    fill_range(0, n);
    return OkStatus();
  }
  // Split on multiples of 4 so every block of four belongs to one thread.
  const int64_t step = (n / threads + 3) / 4 * 4;
  std::vector<std::thread> pool;
  for (int64_t b = 0; b < n; b += step) pool.emplace_back(fill_range, b, std::min(n, b + step));
  for (auto& t : pool) t.join();
  return OkStatus();
}

StatusOr<std::vector<NamedHostTensor>> GenerateRandomWeights(const ModelConfig& config,
                                                             const RandomWeightsOptions& options) {
  MP_RETURN_IF_ERROR(ValidateModelConfig(config));
  MP_REQUIRE(
      options.dtype == DType::kF32 || options.dtype == DType::kBF16 || options.dtype == DType::kF16,
      "random weights: dtype must be F32, BF16 or F16, got ", DTypeName(options.dtype));
  MP_REQUIRE(options.std > 0 && std::isfinite(options.std), "random weights: std must be > 0");
  std::vector<NamedHostTensor> out;
  try {
    for (const ExpectedTensor& e : ExpectedModelTensors(config)) {
      MP_RETURN_IF_ERROR(CheckedNumBytes(e.shape, options.dtype).status());
      NamedHostTensor t{e.name, HostTensor(options.dtype, e.shape)};
      MP_RETURN_IF_ERROR(FillRandomWeight(e.name, options, t.tensor.view()));
      out.push_back(std::move(t));
    }
  } catch (const std::bad_alloc&) {
    return ResourceExhaustedError("not enough host memory for the random weights of this model");
  }
  return out;
}

}  // namespace millipede
