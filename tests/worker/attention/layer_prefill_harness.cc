#include "tests/worker/attention/layer_prefill_harness.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>

#include "worker/attention/attention_registry.h"
#include "worker/attention/layer_attention.h"
#include "worker/backend/backend_factory.h"

namespace millipede::testing {
namespace {

constexpr int64_t kGroup = 2, kHeadDim = 16;

// Values in [-2, 2) from an LCG: peaked enough that one key more or less shows.
std::vector<float> RandomValues(size_t n, uint32_t* state) {
  std::vector<float> out(n);
  for (float& x : out) {
    *state = *state * 1664525u + 1013904223u;
    x = static_cast<float>((*state >> 8) % 4096) / 1024.0f - 2.0f;
  }
  return out;
}

template <typename T>
std::vector<T> ToHost(Backend& b, ConstTensorView t) {
  std::vector<T> host(static_cast<size_t>(t.NumElements()));
  if (!host.empty()) {
    EXPECT_TRUE(b.CopyToHost(t, {host.data(), t.dtype, t.shape}).ok());
  }
  return host;
}

}  // namespace

int64_t MaskPairs(const HeadMasks& masks) {
  int64_t pairs = 0;
  for (const std::vector<uint8_t>& m : masks)
    for (uint8_t x : m) pairs += x;
  return pairs;
}

LayerPrefillRun::LayerPrefillRun(int64_t kv_heads, int64_t length, uint32_t seed)
    : length_(length) {
  config_.num_hidden_layers = 1;
  config_.num_key_value_heads = kv_heads;
  config_.num_attention_heads = kv_heads * kGroup;
  config_.head_dim = kHeadDim;
  config_.hidden_size = config_.num_attention_heads * kHeadDim;
  const Status s = SetUp(seed);
  EXPECT_TRUE(s.ok()) << s.ToString();
  ready_ = s.ok();
}

Status LayerPrefillRun::SetUp(uint32_t seed) {
  const int64_t n = length_, kv = config_.num_key_value_heads, heads = config_.num_attention_heads;
  MP_ASSIGN_OR_RETURN(backend_, CreateBackend(BackendKind::kCpu));
  comm_ = CreateLocalCommunicator();
  profiler_ = std::make_unique<StepProfiler>(*backend_, false);
  MP_ASSIGN_OR_RETURN(store_, DeviceKvStore::Create(*backend_, {kv, kHeadDim, DType::kF32}, n));
  MP_ASSIGN_OR_RETURN(const KvRows rows, store_->StepRows(0, n));
  host_q_ = RandomValues(static_cast<size_t>(n * heads * kHeadDim), &seed);
  host_k_ = RandomValues(static_cast<size_t>(n * kv * kHeadDim), &seed);
  host_v_ = RandomValues(static_cast<size_t>(n * kv * kHeadDim), &seed);
  MP_RETURN_IF_ERROR(backend_->CopyFromHost({host_k_.data(), DType::kF32, rows.k.shape}, rows.k));
  MP_RETURN_IF_ERROR(backend_->CopyFromHost({host_v_.data(), DType::kF32, rows.v.shape}, rows.v));
  MP_RETURN_IF_ERROR(store_->EndWrites(n));
  const Shape rows_shape{n, heads * kHeadDim}, lse_shape{n, heads};
  MP_ASSIGN_OR_RETURN(q_, backend_->Allocate(DType::kF32, rows_shape));
  MP_RETURN_IF_ERROR(backend_->CopyFromHost({host_q_.data(), DType::kF32, rows_shape}, q_.view()));
  MP_ASSIGN_OR_RETURN(o_, backend_->Allocate(DType::kF32, rows_shape));
  MP_ASSIGN_OR_RETURN(lse_, backend_->Allocate(DType::kF32, lse_shape));
  MP_ASSIGN_OR_RETURN(o_part_, backend_->Allocate(DType::kF32, rows_shape));
  MP_ASSIGN_OR_RETURN(lse_part_, backend_->Allocate(DType::kF32, lse_shape));
  MP_ASSIGN_OR_RETURN(pairs_, backend_->Allocate(DType::kI64, Shape{1}));
  ranges_ = {{0, n}};
  blocks_ = {ranges_};
  return OkStatus();
}

AttentionEnv LayerPrefillRun::Env() {
  AttentionScratch scratch;
  scratch.o_part = o_part_.view();
  scratch.lse_part = lse_part_.view();
  scratch.attention_rows = 64;  // several chunks of query rows
  return AttentionEnv{*backend_, *comm_, config_, scratch, stats_, *profiler_, sparse_};
}

PrefillInput LayerPrefillRun::Input() {
  PrefillInput in;
  in.store = store_.get();
  in.step_rows = length_;
  in.q = AsConst(q_.view());
  in.q_ranges = ranges_;
  in.rank_blocks = blocks_;
  in.rank_queries = blocks_;
  in.length = length_;
  in.o_acc = o_.view();
  in.lse_acc = lse_.view();
  in.pairs = &pairs_counted_;
  return in;
}

LayerOutput LayerPrefillRun::Attend(const AttentionPolicy& policy) {
  LayerOutput out;
  StatusOr<std::vector<LayerAttention>> layers = BuildLayerAttention(policy, config_);
  EXPECT_TRUE(layers.ok()) << layers.status().ToString();
  if (!layers.ok()) return out;
  const int64_t zero = 0;
  EXPECT_TRUE(backend_->CopyFromHost({&zero, DType::kI64, Shape{1}}, pairs_.view()).ok());
  pairs_counted_ = {0, pairs_.view()};
  AttentionEnv env = Env();
  const Status s = (*layers)[0].prefill->Run(env, Input());
  EXPECT_TRUE(s.ok()) << s.ToString();
  out.o = ToHost<float>(*backend_, AsConst(o_.view()));
  out.lse = ToHost<float>(*backend_, AsConst(lse_.view()));
  out.pairs = pairs_counted_.host + ToHost<int64_t>(*backend_, AsConst(pairs_.view()))[0];
  return out;
}

HeadMasks LayerPrefillRun::Masks(const std::vector<HeadPrefillPolicy>& heads) {
  const int64_t n = length_;
  HeadMasks masks(heads.size(), std::vector<uint8_t>(static_cast<size_t>(n * n), 0));
  std::set<PrefillPattern> sparse;
  for (size_t g = 0; g < heads.size(); ++g) {
    const PrefillPatternVariant* v = FindPrefillPattern(heads[g].pattern);
    if (v == nullptr) {
      ADD_FAILURE() << PrefillPatternName(heads[g].pattern) << " is not registered";
      return {};
    }
    if (v->kernel() == PrefillKernel::kSparse) {
      sparse.insert(v->pattern());
      continue;
    }
    const RingHeadMask m = v->RingMask(heads[g]);
    for (int64_t p = 0; p < n; ++p)
      for (int64_t k = 0; k <= p; ++k)
        masks[g][static_cast<size_t>(p * n + k)] = m.window == 0 || k < m.sink || p - k < m.window;
  }
  for (PrefillPattern p : sparse) {
    const Status s = SparseMasks(heads, p, &masks);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  return masks;
}

Status LayerPrefillRun::SparseMasks(const std::vector<HeadPrefillPolicy>& heads,
                                    PrefillPattern pattern, HeadMasks* masks) {
  const PrefillPatternVariant* v = FindPrefillPattern(pattern);
  MP_RETURN_IF_ERROR(v->CheckLayer(heads, 0));
  std::unique_ptr<SparsePatternIndex> index = v->MakeIndex(heads);
  AttentionEnv env = Env();
  const PrefillInput in = Input();
  MP_ASSIGN_OR_RETURN(const ConstKvRows mine, store_->Rows(length_));
  MP_RETURN_IF_ERROR(index->Plan(env, in, mine, ranges_));
  const std::vector<int64_t> tiles = SparseQueryTiles(ranges_, index->grid());
  SparseIndexBuilder builder;
  MP_ASSIGN_OR_RETURN(const ConstTensorView dev_tiles, builder.UploadTiles(*backend_, tiles));
  MP_ASSIGN_OR_RETURN(const ConstTensorView runs,
                      builder.UploadRuns(*backend_, SparseKeyRuns(ranges_)));
  MP_ASSIGN_OR_RETURN(const SparseIndexView view, builder.Build(env, *index, dev_tiles, runs));
  const auto range_offsets = ToHost<int64_t>(*backend_, view.range_offsets);
  const auto ranges = ToHost<int64_t>(*backend_, view.ranges);
  const auto column_offsets = ToHost<int64_t>(*backend_, view.column_offsets);
  const auto columns = ToHost<int64_t>(*backend_, view.columns);
  // Rows are positions here (one run from position 0 at row 0).
  const int64_t n = length_, n_tiles = static_cast<int64_t>(tiles.size() / 3);
  for (size_t g = 0; g < heads.size(); ++g) {
    if (heads[g].pattern != pattern) continue;
    for (int64_t t = 0; t < n_tiles; ++t) {
      const size_t item = g * static_cast<size_t>(n_tiles) + static_cast<size_t>(t);
      std::vector<int64_t> keys;
      for (int64_t r = range_offsets[item]; r < range_offsets[item + 1]; ++r)
        for (int64_t row = ranges[3 * r]; row < ranges[3 * r + 1]; ++row) keys.push_back(row);
      for (int64_t c = column_offsets[item]; c < column_offsets[item + 1]; ++c)
        keys.push_back(columns[2 * c + 1]);
      const int64_t first = tiles[3 * t + 2], rows = tiles[3 * t + 1] - tiles[3 * t];
      for (int64_t p = first; p < first + rows; ++p)
        for (int64_t k : keys)
          if (k <= p) (*masks)[g][static_cast<size_t>(p * n + k)] = 1;
    }
  }
  return OkStatus();
}

LayerOutput LayerPrefillRun::Reference(const HeadMasks& masks) const {
  const int64_t n = length_, kv = config_.num_key_value_heads, heads = config_.num_attention_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(kHeadDim));
  LayerOutput out;
  out.o.assign(static_cast<size_t>(n * heads * kHeadDim), 0.0f);
  out.lse.assign(static_cast<size_t>(n * heads), -std::numeric_limits<float>::infinity());
  out.pairs = MaskPairs(masks);
  for (int64_t p = 0; p < n; ++p) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t g = h / kGroup;
      const float* q = &host_q_[static_cast<size_t>((p * heads + h) * kHeadDim)];
      std::vector<std::pair<int64_t, double>> scores;
      double top = -std::numeric_limits<double>::infinity();
      for (int64_t k = 0; k <= p; ++k) {
        if (!masks[g][static_cast<size_t>(p * n + k)]) continue;
        const float* key = &host_k_[static_cast<size_t>((k * kv + g) * kHeadDim)];
        double s = 0;
        for (int64_t d = 0; d < kHeadDim; ++d) s += static_cast<double>(q[d]) * key[d];
        scores.push_back({k, s * scale});
        top = std::max(top, s * scale);
      }
      if (scores.empty()) continue;
      double sum = 0;
      std::vector<double> o(static_cast<size_t>(kHeadDim), 0.0);
      for (const auto& [k, s] : scores) {
        const double w = std::exp(s - top);
        sum += w;
        const float* value = &host_v_[static_cast<size_t>((k * kv + g) * kHeadDim)];
        for (int64_t d = 0; d < kHeadDim; ++d) o[d] += w * value[d];
      }
      for (int64_t d = 0; d < kHeadDim; ++d)
        out.o[static_cast<size_t>((p * heads + h) * kHeadDim + d)] = static_cast<float>(o[d] / sum);
      out.lse[static_cast<size_t>(p * heads + h)] = static_cast<float>(top + std::log(sum));
    }
  }
  return out;
}

}  // namespace millipede::testing
