#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "kernels/memory/float_rows.h"
#include "kernels/sparse_index/antidiagonal_select.h"
#include "kernels/sparse_index/sparse_index.h"
#include "kernels/sparse_index/sparse_index_ref.h"

namespace millipede {
namespace {

using sparse_index_ref::KeyLayout;

// Every row of a [n, heads, d] tensor as floats.
std::vector<float> LoadAll(ConstTensorView x) {
  std::vector<float> out(static_cast<size_t>(x.NumElements()));
  if (!out.empty()) LoadFloatRow(x.data, x.dtype, 0, x.NumElements(), out.data());
  return out;
}

struct Problem {
  const AntidiagonalSelectArgs& args;
  int64_t heads, kv_heads, d, group, rows_per_block, num_kb;
  std::vector<float> q, k;
  KeyLayout q_layout, k_layout;
  // Row of the query (key) at `pos` in q (k), or -1.
  int64_t QRow(int64_t pos) const { return q_layout.Row(pos); }
};

// mass_h(qb, .) of query head h, added into `mass` [qb + 1] (double).
Status AddHeadMass(const Problem& p, int64_t h, int64_t qb, std::vector<double>* mass) {
  const AntidiagonalSelectArgs& a = p.args;
  const int64_t S = a.stride, B = a.block, d = p.d, g = h / p.group;
  const int64_t key_rows = (a.length + S - 1) / S;  // rows b with b * S < length
  std::vector<double> head_mass(mass->size(), 0.0), s;
  int64_t rows = 0;
  for (int64_t r = 0; r < p.rows_per_block; ++r) {
    std::vector<const float*> qv(static_cast<size_t>(S), nullptr);  // [j]
    bool any = false;
    for (int64_t j = 0; j < S; ++j) {
      const int64_t row = p.QRow(qb * B + r * S + S - 1 - j);
      if (row < 0) continue;
      qv[j] = p.q.data() + (row * p.heads + h) * d;
      any = true;
    }
    if (!any) continue;
    ++rows;
    const int64_t last_b = std::min(qb * p.rows_per_block + r, key_rows - 1);
    s.assign(static_cast<size_t>(last_b + 1), 0.0);
    for (int64_t b = 0; b <= last_b; ++b) {
      double dot = 0.0;
      for (int64_t j = 0; j < S; ++j) {
        const int64_t pos = b * S + j;
        if (qv[j] == nullptr || pos >= a.length) continue;
        const int64_t krow = p.k_layout.Row(pos);
        MP_REQUIRE(krow >= 0, "antidiagonal_select: key position ", pos, " is not in k");
        const float* kv = p.k.data() + (krow * p.kv_heads + g) * d;
        for (int64_t c = 0; c < d; ++c) dot += static_cast<double>(qv[j][c]) * kv[c];
      }
      s[b] = dot * a.scale / static_cast<double>(S);
    }
    const double m = *std::max_element(s.begin(), s.end());
    double l = 0.0;
    for (double& v : s) l += (v = std::exp(v - m));
    for (int64_t b = 0; b <= last_b; ++b) head_mass[b * S / B] += s[b] / l;
  }
  for (size_t kb = 0; kb < mass->size(); ++kb) (*mass)[kb] += rows > 0 ? head_mass[kb] / rows : 0;
  return OkStatus();
}

Status CheckQueries(const Problem& p, std::vector<int64_t>* blocks) {
  const AntidiagonalSelectArgs& a = p.args;
  const int64_t n_qb = a.kept.dim(1);
  const int64_t* r = a.q_runs.as<const int64_t>();
  for (int64_t i = 0; i < a.q_runs.dim(0); ++i) {
    if (r[3 * i + 1] <= r[3 * i]) continue;
    MP_REQUIRE(r[3 * i + 2] + r[3 * i + 1] - r[3 * i] <= a.q.dim(0), "antidiagonal_select: q run ",
               i, " reaches past q's ", a.q.dim(0), " rows");
    MP_REQUIRE(r[3 * i + 1] <= a.length, "antidiagonal_select: query position ", r[3 * i + 1] - 1,
               " is not before length ", a.length);
    for (int64_t qb = r[3 * i] / a.block; qb <= (r[3 * i + 1] - 1) / a.block; ++qb) {
      MP_REQUIRE(qb >= a.qb_begin && qb < a.qb_begin + n_qb, "antidiagonal_select: query block ",
                 qb, " is outside the bitmaps' blocks [", a.qb_begin, ", ", a.qb_begin + n_qb, ")");
      blocks->push_back(qb);
    }
  }
  std::sort(blocks->begin(), blocks->end());
  blocks->erase(std::unique(blocks->begin(), blocks->end()), blocks->end());
  return OkStatus();
}

}  // namespace

Status AntidiagonalSelectCheckArgs(const AntidiagonalSelectArgs& args) {
  MP_REQUIRE(args.q.rank() == 3 && args.k.rank() == 3, "antidiagonal_select: q and k have rank ",
             args.q.rank(), " and ", args.k.rank(), ", expected 3");
  MP_REQUIRE(IsFloatDType(args.q.dtype) && args.q.dtype != DType::kF64,
             "antidiagonal_select q: dtype ", DTypeName(args.q.dtype),
             ", expected F32, BF16 or F16");
  MP_REQUIRE(IsKvDType(args.k.dtype), "antidiagonal_select k: dtype ", DTypeName(args.k.dtype),
             ", expected F32, BF16, F16 or F8_E4M3");
  MP_RETURN_IF_ERROR(CheckTensor(args.q, "antidiagonal_select q", args.q.dtype, args.q.shape));
  MP_RETURN_IF_ERROR(CheckTensor(args.k, "antidiagonal_select k", args.k.dtype, args.k.shape));
  const int64_t heads = args.q.dim(1), kv_heads = args.k.dim(1), d = args.q.dim(2);
  MP_REQUIRE(kv_heads > 0 && heads % kv_heads == 0 && args.k.dim(2) == d,
             "antidiagonal_select: q [", args.q.dim(0), ", ", heads, ", ", d, "] and k [",
             args.k.dim(0), ", ", kv_heads, ", ", args.k.dim(2), "] do not match");
  MP_RETURN_IF_ERROR(SparseRunsCheck(args.q_runs, "antidiagonal_select q_runs"));
  MP_RETURN_IF_ERROR(SparseRunsCheck(args.k_runs, "antidiagonal_select k_runs"));
  MP_REQUIRE(args.block > 0 && args.stride > 0 && args.block % args.stride == 0,
             "antidiagonal_select: stride ", args.stride, " must divide block ", args.block);
  MP_REQUIRE(args.length > 0, "antidiagonal_select: length ", args.length, " must be positive");
  MP_REQUIRE(std::isfinite(args.scale), "antidiagonal_select: scale is not finite");
  MP_REQUIRE(args.qb_begin >= 0, "antidiagonal_select: qb_begin ", args.qb_begin, " is negative");
  MP_REQUIRE(args.kept.rank() == 3, "antidiagonal_select kept: rank ", args.kept.rank(),
             ", expected 3");
  const int64_t n_qb = args.kept.dim(1), num_kb = (args.length + args.block - 1) / args.block;
  MP_REQUIRE(args.kept.dim(0) == kv_heads && args.kept.dim(2) >= num_kb / 32 + 1,
             "antidiagonal_select kept: shape [", args.kept.dim(0), ", ", n_qb, ", ",
             args.kept.dim(2), "], expected [", kv_heads, ", n_qb, >= ", num_kb / 32 + 1, "]");
  MP_RETURN_IF_ERROR(
      CheckTensor(args.kept, "antidiagonal_select kept", DType::kI32, args.kept.shape));
  if (args.mass.data != nullptr)
    MP_RETURN_IF_ERROR(CheckTensor(args.mass, "antidiagonal_select mass", DType::kF32,
                                   Shape{kv_heads, n_qb, num_kb}));
  MP_REQUIRE(args.permille != nullptr, "antidiagonal_select: permille is missing");
  for (int64_t g = 0; g < kv_heads; ++g)
    MP_REQUIRE(args.permille[g] >= 0, "antidiagonal_select: permille[", g, "] = ", args.permille[g],
               " is negative");
  return OkStatus();
}

std::vector<int64_t> AntidiagonalKeep(std::span<const float> mass, int64_t qb, int64_t permille) {
  std::vector<int64_t> kept;
  if (permille >= 1000) {
    for (int64_t kb = 0; kb <= qb; ++kb) kept.push_back(kb);
    return kept;
  }
  std::vector<int64_t> u(static_cast<size_t>(qb + 1));
  int64_t total = 0;
  for (int64_t kb = 0; kb <= qb; ++kb) {
    const float m = mass[kb];
    u[kb] = m > 0.0f ? std::llrint(static_cast<double>(m) * 0x1p40) : 0;  // NaN: 0; ties to even
    total += u[kb];
  }
  const int64_t target = static_cast<int64_t>(
      std::ceil(static_cast<double>(permille) * static_cast<double>(total) / 1000.0));
  int64_t reached = u[0] + (qb > 0 ? u[qb] : 0);
  std::vector<int64_t> others(u.begin() + (qb > 0 ? 1 : 0), u.begin() + std::max<int64_t>(qb, 1));
  if (qb == 0) others.clear();
  std::sort(others.begin(), others.end(), std::greater<>());
  int64_t v = -1;  // keep others with u >= v; -1: none
  for (int64_t x : others) {
    if (reached >= target) break;
    reached += x;
    v = x;
  }
  for (int64_t kb = 0; kb <= qb; ++kb)
    if (kb == 0 || kb == qb || (v >= 0 && u[kb] >= v)) kept.push_back(kb);
  return kept;
}

Status AntidiagonalSelectRef(const AntidiagonalSelectArgs& args) {
  MP_RETURN_IF_ERROR(AntidiagonalSelectCheckArgs(args));
  const int64_t heads = args.q.dim(1), kv_heads = args.k.dim(1);
  MP_ASSIGN_OR_RETURN(KeyLayout q_layout, KeyLayout::Read(args.q_runs, "antidiagonal_select"));
  MP_ASSIGN_OR_RETURN(KeyLayout k_layout, KeyLayout::Read(args.k_runs, "antidiagonal_select"));
  Problem p{args,
            heads,
            kv_heads,
            args.q.dim(2),
            heads / kv_heads,
            args.block / args.stride,
            (args.length + args.block - 1) / args.block,
            LoadAll(args.q),
            LoadAll(args.k),
            std::move(q_layout),
            std::move(k_layout)};
  std::vector<int64_t> blocks;
  MP_RETURN_IF_ERROR(CheckQueries(p, &blocks));
  const int64_t n_qb = args.kept.dim(1), words = args.kept.dim(2);
  uint32_t* kept = reinterpret_cast<uint32_t*>(args.kept.as<int32_t>());
  float* mass_out = args.mass.data != nullptr ? args.mass.as<float>() : nullptr;
  for (int64_t g = 0; g < kv_heads; ++g) {
    if (args.permille[g] == 0) continue;
    for (int64_t qb : blocks) {
      std::vector<double> sum(static_cast<size_t>(qb + 1), 0.0);
      for (int64_t h = g * p.group; h < (g + 1) * p.group; ++h)
        MP_RETURN_IF_ERROR(AddHeadMass(p, h, qb, &sum));
      std::vector<float> mass(sum.size());
      for (size_t kb = 0; kb < sum.size(); ++kb)
        mass[kb] = static_cast<float>(sum[kb] / static_cast<double>(p.group));
      const int64_t row = g * n_qb + qb - args.qb_begin;
      if (mass_out != nullptr) {
        std::fill(mass_out + row * p.num_kb, mass_out + (row + 1) * p.num_kb, 0.0f);
        std::copy(mass.begin(), mass.end(), mass_out + row * p.num_kb);
      }
      std::fill(kept + row * words, kept + (row + 1) * words, 0u);
      for (int64_t kb : AntidiagonalKeep(mass, qb, args.permille[g]))
        kept[row * words + kb / 32] |= 1u << (kb % 32);
    }
  }
  return OkStatus();
}

}  // namespace millipede
