// A top-k over simulated ranks for the TopKKeys / TopKCut tests: a score matrix over global
// positions is split zig-zag over the ranks (rank r holds chunks r and 2R-1-r of 2R), and each
// rank runs TopKRef in column order over its own columns and TopKKeysRef over the result.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/selection/top_k.h"
#include "kernels/selection/top_k_keys.h"
#include "tests/kernels/kernel_test_util.h"

namespace millipede::testing {

enum class Scores { kUniform, kTies, kConstant, kSpecial };

struct RankOffer {
  std::vector<TopKPositionRange> ranges;
  HostTensor scores;  // [rows, n]: the rank's columns
  HostTensor index;   // [rows, k] I32: TopKRef in column order
  HostTensor value;   // [rows, k] F32
  HostTensor keys;    // [rows, k] I64: TopKKeysRef
  int64_t columns() const { return scores.shape()[1]; }
};

inline HostTensor GlobalScores(int64_t rows, int64_t positions, Scores kind, uint64_t seed) {
  HostTensor t(DType::kF32, {rows, positions});
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(0.0f, 1.0f);
  for (int64_t i = 0; i < t.NumElements(); ++i) {
    float& x = t.data<float>()[i];
    switch (kind) {
      case Scores::kUniform: x = dist(rng); break;
      case Scores::kTies: x = std::round(dist(rng) * 4.0f) / 4.0f; break;
      case Scores::kConstant: x = 0.25f; break;
      case Scores::kSpecial: {
        const float special[] = {kNaN, kInf, -kInf, 0.0f, -0.0f};
        x = rng() % 3 == 0 ? special[rng() % 5] : dist(rng);
        break;
      }
    }
  }
  return t;
}

// Rank r's positions of `positions` split over `ranks`: chunks r and 2R-1-r of 2R.
inline std::vector<TopKPositionRange> ZigZag(int64_t positions, int64_t ranks, int64_t r) {
  auto chunk = [&](int64_t c) {
    return TopKPositionRange{positions * c / (2 * ranks), positions * (c + 1) / (2 * ranks)};
  };
  std::vector<TopKPositionRange> out;
  for (const TopKPositionRange& c : {chunk(r), chunk(2 * ranks - 1 - r)}) {
    if (c.end <= c.begin) continue;
    if (!out.empty() && out.back().end == c.begin) {
      out.back().end = c.end;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// Each rank's offer of its best k per row.
inline std::vector<RankOffer> Offers(const HostTensor& global, int64_t ranks, int64_t k) {
  const int64_t rows = global.shape()[0], positions = global.shape()[1];
  std::vector<RankOffer> out;
  for (int64_t r = 0; r < ranks; ++r) {
    RankOffer o;
    o.ranges = ZigZag(positions, ranks, r);
    int64_t n = 0;
    for (const TopKPositionRange& x : o.ranges) n += x.end - x.begin;
    o.scores = HostTensor(DType::kF32, {rows, n});
    for (int64_t row = 0; row < rows; ++row) {
      int64_t c = 0;
      for (const TopKPositionRange& x : o.ranges)
        for (int64_t p = x.begin; p < x.end; ++p)
          o.scores.data<float>()[row * n + c++] = global.data<float>()[row * positions + p];
    }
    o.index = HostTensor(DType::kI32, {rows, k});
    o.value = HostTensor(DType::kF32, {rows, k});
    o.keys = HostTensor(DType::kI64, {rows, k});
    EXPECT_TRUE(TopKRef({CView(o.scores), k, o.index.view(), o.value.view(), TopKOrder::kColumn})
                    .ok());
    EXPECT_TRUE(TopKKeysRef({CView(o.index), CView(o.value), o.ranges, o.keys.view()}).ok());
    out.push_back(std::move(o));
  }
  return out;
}

// The offers' keys all-gathered: [ranks, rows, k].
inline HostTensor Gathered(const std::vector<RankOffer>& offers) {
  const int64_t rows = offers[0].keys.shape()[0], k = offers[0].keys.shape()[1];
  HostTensor all(DType::kI64, {static_cast<int64_t>(offers.size()), rows, k});
  for (size_t r = 0; r < offers.size(); ++r)
    std::memcpy(all.data<int64_t>() + static_cast<int64_t>(r) * rows * k,
                offers[r].keys.data<int64_t>(), offers[r].keys.NumBytes());
  return all;
}

}  // namespace millipede::testing
