// AntidiagonalSelectRef: masses against a second computation from the full matrix of attention
// scores (partial query blocks, keys beyond length, GQA, layouts of several runs), rows that sum
// to one, the keep rule on hand-made masses (forced first and diagonal blocks, the threshold,
// ties kept together, 1000 keeps all), a needle block found, rows of other blocks and heads left
// alone, and the errors.
#include "kernels/sparse_index/antidiagonal_select.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/sparse_index/sparse_index_test_util.h"

namespace millipede {
namespace {

using testing::RandomTensor;
using testing::Rows3;

struct Problem {
  int64_t heads = 4, kv_heads = 2, d = 8, block = 16, stride = 4, length = 70;
  int64_t qb_begin = 0, n_qb = 5, words = 1;
  HostTensor q, k, q_runs, k_runs;
  std::vector<int64_t> permille{900, 500};
  HostTensor kept, mass;

  Problem() {
    q = RandomTensor(DType::kF32, {length, heads, d}, 1, -1.0f, 1.0f);
    k = RandomTensor(DType::kBF16, {length, kv_heads, d}, 2, -1.0f, 1.0f);
    // q holds positions [3, 70): [40, 70) at rows 0..29, [3, 40) at rows 30..66.
    q_runs = Rows3({3, 40, 30, 40, 70, 0});
    // k holds [0, 70): [0, 35) at rows 35..69 and [35, 70) at rows 0..34.
    k_runs = Rows3({0, 35, 35, 35, 70, 0});
    Reset();
  }
  void Reset() {
    kept = HostTensor(DType::kI32, {kv_heads, n_qb, words});
    std::memset(kept.view().data, 0x5a, kept.NumBytes());
    mass = HostTensor(DType::kF32, {kv_heads, n_qb, (length + block - 1) / block});
    std::memset(mass.view().data, 0x5a, mass.NumBytes());
  }
  AntidiagonalSelectArgs Args() {
    AntidiagonalSelectArgs a;
    a.q = AsConst(q.view());
    a.q_runs = AsConst(q_runs.view());
    a.k = AsConst(k.view());
    a.k_runs = AsConst(k_runs.view());
    a.length = length;
    a.block = block;
    a.stride = stride;
    a.scale = 1.0f / std::sqrt(static_cast<float>(d));
    a.permille = permille.data();
    a.qb_begin = qb_begin;
    a.kept = kept.view();
    a.mass = mass.view();
    return a;
  }
  uint32_t Word(int64_t g, int64_t qb) const {
    return reinterpret_cast<const uint32_t*>(kept.data<int32_t>())[(g * n_qb + qb) * words];
  }
};

// Position p's row in a layout of (pos_begin, pos_end, row_begin) runs, or -1.
int64_t RowOf(const HostTensor& runs, int64_t p) {
  const int64_t* r = runs.data<int64_t>();
  for (int64_t i = 0; i < runs.shape()[0]; ++i)
    if (p >= r[3 * i] && p < r[3 * i + 1]) return r[3 * i + 2] + p - r[3 * i];
  return -1;
}

// mass(g, qb, .) from the full score matrix A[i][j] = scale * q_h[i] . k_g[j] of each head.
std::vector<double> MatrixMass(const Problem& p, int64_t g, int64_t qb) {
  const std::vector<float> q = testing::ToFloats(p.q), k = testing::ToFloats(p.k);
  const int64_t n = p.length, S = p.stride, B = p.block, R = B / S, group = p.heads / p.kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(p.d));
  std::vector<double> mass(static_cast<size_t>(qb + 1), 0.0);
  for (int64_t h = g * group; h < (g + 1) * group; ++h) {
    std::vector<double> a(static_cast<size_t>(n * n), 0.0);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const int64_t qi = RowOf(p.q_runs, i), kj = RowOf(p.k_runs, j);
        if (qi < 0) continue;
        double dot = 0;
        for (int64_t c = 0; c < p.d; ++c)
          dot += static_cast<double>(q[(qi * p.heads + h) * p.d + c]) *
                 k[(kj * p.kv_heads + g) * p.d + c];
        a[i * n + j] = scale * dot;
      }
    std::vector<double> head(mass.size(), 0.0);
    int64_t rows = 0;
    for (int64_t r = 0; r < R; ++r) {
      bool any = false;
      for (int64_t j = 0; j < S; ++j) any |= RowOf(p.q_runs, qb * B + r * S + j) >= 0;
      if (!any) continue;
      ++rows;
      std::vector<double> s;
      for (int64_t b = 0; b <= qb * R + r && b * S < n; ++b) {
        double sum = 0;
        for (int64_t j = 0; j < S; ++j) {
          const int64_t qp = qb * B + r * S + S - 1 - j, kp = b * S + j;
          if (qp < n && kp < n) sum += a[qp * n + kp];
        }
        s.push_back(sum / static_cast<double>(S));
      }
      double m = -INFINITY, l = 0;
      for (double v : s) m = std::max(m, v);
      for (double v : s) l += std::exp(v - m);
      for (size_t b = 0; b < s.size(); ++b)
        head[static_cast<int64_t>(b) * S / B] += std::exp(s[b] - m) / l;
    }
    for (size_t kb = 0; kb < mass.size(); ++kb) mass[kb] += head[kb] / static_cast<double>(rows);
  }
  for (double& v : mass) v /= static_cast<double>(group);
  return mass;
}

TEST(AntidiagonalSelectTest, MassesMatchTheFullScoreMatrix) {
  Problem p;
  const Status s = AntidiagonalSelectRef(p.Args());
  ASSERT_TRUE(s.ok()) << s.ToString();
  const int64_t num_kb = p.mass.shape()[2];
  for (int64_t g = 0; g < p.kv_heads; ++g)
    for (int64_t qb = 0; qb < p.n_qb; ++qb) {
      const std::vector<double> want = MatrixMass(p, g, qb);
      const float* got = p.mass.data<float>() + (g * p.n_qb + qb) * num_kb;
      double sum = 0;
      for (int64_t kb = 0; kb < num_kb; ++kb) {
        const double w = kb <= qb ? want[kb] : 0.0;
        EXPECT_NEAR(got[kb], w, 1e-6) << "g " << g << " qb " << qb << " kb " << kb;
        sum += got[kb];
      }
      EXPECT_NEAR(sum, 1.0, 1e-5);
      // The bitmap is the keep rule applied to the row.
      uint32_t want_bits = 0;
      for (int64_t kb : AntidiagonalKeep(std::span<const float>(got, num_kb), qb, p.permille[g]))
        want_bits |= 1u << kb;
      EXPECT_EQ(p.Word(g, qb), want_bits) << "g " << g << " qb " << qb;
      EXPECT_EQ(p.Word(g, qb) & 1u, 1u);
      EXPECT_EQ((p.Word(g, qb) >> qb) & 1u, 1u);
    }
}

std::vector<int64_t> Keep(std::vector<float> mass, int64_t permille) {
  return AntidiagonalKeep(mass, static_cast<int64_t>(mass.size()) - 1, permille);
}

TEST(AntidiagonalSelectTest, KeepRule) {
  const std::vector<float> m{0.1f, 0.5f, 0.05f, 0.3f, 0.05f};
  EXPECT_EQ(Keep(m, 900), (std::vector<int64_t>{0, 1, 3, 4}));  // 0.15 + 0.5 + 0.3 >= 0.9
  EXPECT_EQ(Keep(m, 600), (std::vector<int64_t>{0, 1, 4}));     // 0.15 + 0.5 >= 0.6
  EXPECT_EQ(Keep(m, 100), (std::vector<int64_t>{0, 4}));        // the forced blocks suffice
  EXPECT_EQ(Keep(m, 1000), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(Keep(m, 999), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  // Ties are kept together: one 0.2 reaches the target, all three come.
  EXPECT_EQ(Keep({0.2f, 0.2f, 0.2f, 0.2f, 0.2f}, 500), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(Keep({0.4f, 0.1f, 0.1f, 0.4f}, 800), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(Keep({0.4f, 0.1f, 0.1f, 0.4f}, 850), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(Keep({1.0f}, 500), (std::vector<int64_t>{0}));
  EXPECT_EQ(Keep({0.3f, 0.7f}, 10), (std::vector<int64_t>{0, 1}));
  // NaN and negative masses count as 0.
  EXPECT_EQ(Keep({0.5f, NAN, -1.0f, 0.4f, 0.1f}, 900), (std::vector<int64_t>{0, 3, 4}));
}

TEST(AntidiagonalSelectTest, ANeedleBlockIsKept) {
  Problem p;
  p.permille = {500, 500};
  // Every query is e0; the keys of block 2 are 8 e0, the others small.
  for (int64_t i = 0; i < p.q.NumElements(); ++i) p.q.data<float>()[i] = i % p.d == 0 ? 1.0f : 0.0f;
  HostTensor k(DType::kF32, {p.length, p.kv_heads, p.d});
  for (int64_t r = 0; r < p.length; ++r) {
    const int64_t pos = r < 35 ? r + 35 : r - 35;  // the layout of k_runs
    for (int64_t i = 0; i < p.kv_heads * p.d; ++i)
      k.data<float>()[r * p.kv_heads * p.d + i] =
          i % p.d == 0 ? (pos / p.block == 2 ? 8.0f : 0.01f) : 0.0f;
  }
  p.k = std::move(k);
  ASSERT_TRUE(AntidiagonalSelectRef(p.Args()).ok());
  for (int64_t g = 0; g < p.kv_heads; ++g) {
    EXPECT_EQ(p.Word(g, 3), 0b1101u);   // blocks 0, 2, 3
    EXPECT_EQ(p.Word(g, 4), 0b10101u);  // blocks 0, 2, 4
  }
}

TEST(AntidiagonalSelectTest, OtherRowsAreLeftAlone) {
  Problem p;
  p.permille = {0, 900};
  p.q_runs = Rows3({40, 70, 0});  // query blocks 2, 3, 4
  ASSERT_TRUE(AntidiagonalSelectRef(p.Args()).ok());
  for (int64_t qb = 0; qb < p.n_qb; ++qb) EXPECT_EQ(p.Word(0, qb), 0x5a5a5a5au) << qb;
  EXPECT_EQ(p.Word(1, 0), 0x5a5a5a5au);
  EXPECT_EQ(p.Word(1, 1), 0x5a5a5a5au);
  EXPECT_EQ(p.Word(1, 2) & 0b101u, 0b101u);
  // Bitmaps of a window of blocks: qb_begin 2, three rows.
  p.qb_begin = 2;
  p.n_qb = 3;
  p.Reset();
  ASSERT_TRUE(AntidiagonalSelectRef(p.Args()).ok());
  EXPECT_EQ(p.Word(1, 0) & 0b101u, 0b101u);  // query block 2
}

TEST(AntidiagonalSelectTest, Errors) {
  auto expect_error = [](Problem& p, const char* what) {
    const Status s = AntidiagonalSelectRef(p.Args());
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << what;
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
  };
  {
    Problem p;
    p.stride = 3;
    expect_error(p, "must divide block");
  }
  {
    Problem p;
    p.words = 0;
    p.Reset();
    expect_error(p, "kept: shape");
  }
  {
    Problem p;
    p.length = 60;
    p.Reset();
    expect_error(p, "is not before length 60");
  }
  {
    Problem p;
    p.k_runs = Rows3({0, 30, 35, 35, 70, 0});  // key positions [30, 35) missing
    expect_error(p, "key position 30 is not in k");
  }
  {
    Problem p;
    p.qb_begin = 1;
    p.n_qb = 4;
    p.Reset();
    expect_error(p, "query block 0 is outside");
  }
  {
    Problem p;
    p.permille = {-1, 5};
    expect_error(p, "is negative");
  }
}

}  // namespace
}  // namespace millipede
