// SampleCuda against SampleRef: the same token for many (seed, step) pairs over greedy,
// temperature, top-k and top-p settings, vocabularies from 1 to 128256, logits with -inf, ties
// (and -0.0 next to +0.0) and a peaked head; the async form writing to device memory; invalid
// logits and parameters. Skips without a GPU.
//
// The only permitted difference is the association of the double sums of the weights: a token may
// differ from the reference only when u (or top_p) lies within 1e-6 of a cumulative boundary of
// the reference's own distribution, and every mismatch is checked to be such a case.
#include "kernels/sampling/sampling_cuda.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/random.h"
#include "kernels/sampling/sampling.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/op_harness.h"

namespace millipede {
namespace {

using testing::CView;
using testing::DeviceTensor;
using testing::HaveGpu;
using testing::kInf;
using testing::kNaN;

// How close u (or top_p) must be to a boundary of the cumulative distribution for a different
// token to be accepted.
constexpr double kBoundaryTolerance = 1e-6;

enum class LogitsKind { kUniform, kTies, kPeaked };

// [vocab] logits from a fixed seed. kUniform: U(-4, 4) with every 17th token (from id 5) at -inf.
// kTies: multiples of 0.25 in [-3, 3] (many exact ties; zeros alternate -0.0 and +0.0). kPeaked:
// U(-4, 4) with two tokens far ahead, so that top-p cuts after very few.
HostTensor MakeLogits(int64_t vocab, LogitsKind kind, uint64_t seed) {
  HostTensor logits(DType::kF32, {vocab});
  float* x = logits.data<float>();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(kind == LogitsKind::kTies ? -3.0f : -4.0f,
                                             kind == LogitsKind::kTies ? 3.0f : 4.0f);
  for (int64_t i = 0; i < vocab; ++i) {
    x[i] = dist(rng);
    if (kind == LogitsKind::kTies) {
      x[i] = std::round(x[i] * 4.0f) / 4.0f;
      if (x[i] == 0.0f) x[i] = i % 2 ? -0.0f : 0.0f;
    }
    if (kind == LogitsKind::kUniform && i % 17 == 5) x[i] = -kInf;
  }
  if (kind == LogitsKind::kPeaked) {
    x[vocab / 2] = 9.0f;
    x[vocab - 1] = 8.5f;
  }
  return logits;
}

// True when the reference's own distribution puts top_p or u within kBoundaryTolerance of a
// cumulative boundary (computed here independently, in double, from the definition).
bool NearBoundary(const HostTensor& logits, const SamplingParams& params, uint64_t step) {
  std::vector<std::pair<double, int32_t>> kept;
  for (int64_t i = 0; i < logits.NumElements(); ++i)
    if (std::isfinite(logits.data<float>()[i]))
      kept.push_back({static_cast<double>(logits.data<float>()[i]) / params.temperature,
                      static_cast<int32_t>(i)});
  std::sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < kept.size())
    kept.resize(params.top_k);
  std::vector<double> cumulative;
  double sum = 0.0;
  for (const auto& [score, id] : kept) cumulative.push_back(sum += std::exp(score - kept[0].first));
  size_t count = kept.size();
  if (params.top_p < 1.0f) {
    for (size_t i = 0; i < cumulative.size(); ++i)
      if (std::abs(cumulative[i] / sum - params.top_p) < kBoundaryTolerance) return true;
    count = 1;
    while (count < kept.size() && cumulative[count - 1] < params.top_p * sum) ++count;
  }
  const double u = RandomUniform(params.seed, step);
  for (size_t i = 0; i < count; ++i)
    if (std::abs(cumulative[i] / cumulative[count - 1] - u) < kBoundaryTolerance) return true;
  return false;
}

struct Setting {
  float temperature;
  int32_t top_k;
  float top_p;
};

const std::vector<Setting>& Settings() {
  static const std::vector<Setting> settings = {
      {0.0f, 0, 1.0f},  {1.0f, 0, 1.0f},         {0.7f, 0, 1.0f},   {1.5f, 50, 1.0f},
      {1.0f, 1, 1.0f},  {0.8f, 0, 0.9f},         {1.0f, 40, 0.95f}, {1.2f, 0, 0.5f},
      {1.0f, 5, 0.01f}, {2.0f, 1 << 30, 0.999f},
  };
  return settings;
}

std::unique_ptr<SampleCudaWorkspace> NewWorkspace() {
  StatusOr<std::unique_ptr<SampleCudaWorkspace>> workspace = SampleCudaWorkspace::Create();
  EXPECT_TRUE(workspace.ok()) << workspace.status().ToString();
  return workspace.ok() ? std::move(*workspace) : nullptr;
}

struct Case {
  int64_t vocab;
  LogitsKind kind;
};

std::string Name(const ::testing::TestParamInfo<Case>& info) {
  const char* kinds[] = {"uniform", "ties", "peaked"};
  return detail::StrCat("v", info.param.vocab, "_", kinds[static_cast<int>(info.param.kind)]);
}

class SampleCudaTest : public testing::GpuOpTest<Case> {};

TEST_P(SampleCudaTest, SameTokensAsReference) {
  const Case c = GetParam();
  std::unique_ptr<SampleCudaWorkspace> workspace = NewWorkspace();
  ASSERT_NE(workspace, nullptr);
  const HostTensor logits = MakeLogits(c.vocab, c.kind, 81);
  DeviceTensor d_logits(logits);
  const uint64_t steps = c.vocab <= 1000 ? 48 : 6;
  int compared = 0, boundary_cases = 0;
  for (const Setting& s : Settings()) {
    for (const uint64_t seed : {uint64_t{0}, uint64_t{12345}, uint64_t{0xDEADBEEFCAFEF00Dull}}) {
      const SamplingParams params{s.temperature, s.top_k, s.top_p, seed};
      for (uint64_t step = 0; step < steps; ++step) {
        SCOPED_TRACE(detail::StrCat("temperature ", s.temperature, " top_k ", s.top_k, " top_p ",
                                    s.top_p, " seed ", seed, " step ", step));
        const StatusOr<int32_t> expected = SampleRef(CView(logits), params, step);
        ASSERT_TRUE(expected.ok()) << expected.status().ToString();
        const StatusOr<int32_t> actual =
            SampleCuda(d_logits.cview(), params, step, *workspace, nullptr);
        ASSERT_TRUE(actual.ok()) << actual.status().ToString();
        ++compared;
        if (*actual == *expected) continue;
        // Greedy involves no sums at all: it must always agree.
        ASSERT_NE(s.temperature, 0.0f) << "greedy gave " << *actual << ", expected " << *expected;
        ASSERT_TRUE(NearBoundary(logits, params, step))
            << "token " << *actual << ", expected " << *expected << " away from any boundary";
        ++boundary_cases;
      }
    }
  }
  EXPECT_LE(boundary_cases, compared / 100 + 1) << "boundary cases should be rare";
  EXPECT_TRUE(d_logits.Unchanged(logits));
}

INSTANTIATE_TEST_SUITE_P(
    Vocabularies, SampleCudaTest,
    ::testing::Values(Case{1, LogitsKind::kUniform}, Case{2, LogitsKind::kTies},
                      Case{7, LogitsKind::kUniform}, Case{7, LogitsKind::kTies},
                      Case{1000, LogitsKind::kUniform}, Case{1000, LogitsKind::kTies},
                      Case{1000, LogitsKind::kPeaked}, Case{32000, LogitsKind::kUniform},
                      Case{32000, LogitsKind::kPeaked}, Case{128256, LogitsKind::kUniform},
                      Case{128256, LogitsKind::kTies}),
    Name);

TEST(SampleCudaAsyncTest, QueuedCallsMatchSyncCalls) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  std::unique_ptr<SampleCudaWorkspace> workspace = NewWorkspace();
  ASSERT_NE(workspace, nullptr);
  ASSERT_TRUE(workspace->Reserve(32000, nullptr).ok());
  const HostTensor logits = MakeLogits(1000, LogitsKind::kUniform, 82);
  DeviceTensor d_logits(logits);
  const std::vector<Setting>& settings = Settings();
  const int64_t slots = static_cast<int64_t>(settings.size());
  HostTensor poisoned(DType::kI32, {slots});
  for (int64_t i = 0; i < slots; ++i) poisoned.data<int32_t>()[i] = -7;
  DeviceTensor d_tokens(poisoned);
  // Everything queued back to back on one stream, sharing the workspace, read once at the end.
  for (int64_t i = 0; i < slots; ++i) {
    const SamplingParams params{settings[i].temperature, settings[i].top_k, settings[i].top_p, 5};
    ASSERT_TRUE(SampleCudaAsync(d_logits.cview(), params, 100 + i, *workspace,
                                d_tokens.view().as<int32_t>() + i, nullptr)
                    .ok());
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const HostTensor tokens = d_tokens.Read();
  for (int64_t i = 0; i < slots; ++i) {
    const SamplingParams params{settings[i].temperature, settings[i].top_k, settings[i].top_p, 5};
    const StatusOr<int32_t> expected =
        SampleCuda(d_logits.cview(), params, 100 + i, *workspace, nullptr);
    ASSERT_TRUE(expected.ok()) << expected.status().ToString();
    EXPECT_EQ(tokens.data<int32_t>()[i], *expected) << "slot " << i;
  }
}

// Sync and async forms on logits the reference rejects; `message` must appear in the error.
void ExpectInvalidLogits(const HostTensor& logits, const std::string& message) {
  std::unique_ptr<SampleCudaWorkspace> workspace = NewWorkspace();
  ASSERT_NE(workspace, nullptr);
  DeviceTensor d_logits(logits);
  HostTensor poisoned(DType::kI32, {1});
  poisoned.data<int32_t>()[0] = 12345;
  DeviceTensor d_token(poisoned);
  for (const Setting& s : {Setting{0.0f, 0, 1.0f}, Setting{1.0f, 0, 0.9f}}) {
    const SamplingParams params{s.temperature, s.top_k, s.top_p, 3};
    const StatusOr<int32_t> reference = SampleRef(CView(logits), params, 0);
    EXPECT_EQ(reference.status().code(), StatusCode::kInvalidArgument);
    const StatusOr<int32_t> token = SampleCuda(d_logits.cview(), params, 0, *workspace, nullptr);
    ASSERT_FALSE(token.ok());
    EXPECT_EQ(token.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(token.status().message(), reference.status().message());
    EXPECT_NE(token.status().message().find(message), std::string::npos)
        << token.status().ToString();
    ASSERT_TRUE(SampleCudaAsync(d_logits.cview(), params, 0, *workspace,
                                d_token.view().as<int32_t>(), nullptr)
                    .ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(d_token.Read().data<int32_t>()[0], -1);
  }
}

TEST(SampleCudaErrorsTest, InvalidLogits) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  HostTensor nan_logits = MakeLogits(3000, LogitsKind::kUniform, 83);
  nan_logits.data<float>()[2000] = kNaN;
  nan_logits.data<float>()[5] = kNaN;
  ExpectInvalidLogits(nan_logits, "logit 5 is nan");
  HostTensor inf_logits = MakeLogits(3000, LogitsKind::kUniform, 84);
  inf_logits.data<float>()[20] = kNaN;
  inf_logits.data<float>()[9] = kInf;
  ExpectInvalidLogits(inf_logits, "logit 9 is inf");
  HostTensor all_masked(DType::kF32, {1500});
  for (int64_t i = 0; i < 1500; ++i) all_masked.data<float>()[i] = -kInf;
  ExpectInvalidLogits(all_masked, "every logit is -inf");
}

TEST(SampleCudaErrorsTest, RejectsBadParamsBeforeLaunch) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  std::unique_ptr<SampleCudaWorkspace> workspace = NewWorkspace();
  ASSERT_NE(workspace, nullptr);
  // Host memory stands in for device memory: nothing may be launched.
  std::vector<float> fake(16, 0.0f);
  const ConstTensorView logits{fake.data(), DType::kF32, {16}};
  EXPECT_EQ(SampleCuda(logits, {-1.0f, 0, 1.0f, 0}, 0, *workspace, nullptr).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(SampleCuda(logits, {1.0f, -2, 1.0f, 0}, 0, *workspace, nullptr).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(SampleCuda(logits, {1.0f, 0, 0.0f, 0}, 0, *workspace, nullptr).status().code(),
            StatusCode::kInvalidArgument);
  const ConstTensorView matrix{fake.data(), DType::kF32, {4, 4}};
  EXPECT_EQ(SampleCuda(matrix, {}, 0, *workspace, nullptr).status().code(),
            StatusCode::kInvalidArgument);
  const ConstTensorView wrong_dtype{fake.data(), DType::kF16, {16}};
  EXPECT_EQ(SampleCudaAsync(wrong_dtype, {}, 0, *workspace, nullptr, nullptr).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace millipede
