// SparseAttentionRef's argument and index checks: each broken contract is refused with the right
// code and a message naming what is wrong.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "kernels/attention/sparse_attention.h"
#include "tests/kernels/attention/sparse_test_util.h"

namespace millipede {
namespace {

using testing::BuildSparseCase;
using testing::CView;
using testing::PoisonedF32;
using testing::RandomTensor;
using testing::SparseCase;
using testing::SparseItem;
using testing::SparseLayout;
using testing::SparseRow3;

// A valid call (2 tiles, 2 KV heads, 4 query heads) whose pieces a test breaks one at a time.
struct Fixture {
  static constexpr int64_t kNq = 80, kNkv = 100, kHq = 4, kHk = 2, kD = 8;
  HostTensor q = RandomTensor(DType::kF32, {kNq, kHq, kD}, 1);
  HostTensor k = RandomTensor(DType::kBF16, {kNkv, kHk, kD}, 2);
  HostTensor v = RandomTensor(DType::kBF16, {kNkv, kHk, kD}, 3);
  HostTensor o = PoisonedF32({kNq, kHq, kD}), lse = PoisonedF32({kNq, kHq});
  std::vector<SparseRow3> tiles = {{0, 44, 20}, {44, 80, 64}};
  std::vector<SparseItem> items = {
      {{{0, 10}, {15, 65}}, {12, 70}}, {{{60, 100}}, {1}}, {{}, {5}}, {{{0, 99}}, {}}};
  SparseCase c;

  Status Run(const std::function<void(SparseAttentionArgs&)>& edit = nullptr) {
    c = BuildSparseCase(tiles, items, SparseLayout::Identity(kNkv));
    SparseAttentionArgs args{CView(q),  CView(k), CView(v), CView(c.tiles),
                             c.index(), 0.0f,     o.view(), lse.view()};
    if (edit) edit(args);
    return SparseAttentionRef(args);
  }
};

void ExpectError(const Status& s, StatusCode code, const std::string& fragment) {
  EXPECT_EQ(s.code(), code) << s.ToString();
  EXPECT_NE(s.message().find(fragment), std::string::npos) << s.ToString();
}

TEST(SparseAttentionArgsTest, TheFixtureIsValid) {
  Fixture f;
  const Status s = f.Run();
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(SparseAttentionArgsTest, ShapesAndDtypes) {
  Fixture f;
  HostTensor v32 = RandomTensor(DType::kF32, {Fixture::kNkv, Fixture::kHk, Fixture::kD}, 4);
  ExpectError(f.Run([&](SparseAttentionArgs& a) { a.v = CView(v32); }),
              StatusCode::kInvalidArgument, "sparse attention v");
  HostTensor q3 = RandomTensor(DType::kF32, {Fixture::kNq, 3, Fixture::kD}, 5);
  ExpectError(f.Run([&](SparseAttentionArgs& a) { a.q = CView(q3); }), StatusCode::kInvalidArgument,
              "not a multiple");
  ExpectError(f.Run([&](SparseAttentionArgs& a) { a.scale = -1.0f; }), StatusCode::kInvalidArgument,
              "scale");
  ExpectError(f.Run([&](SparseAttentionArgs& a) { a.lse = TensorView{}; }),
              StatusCode::kInvalidArgument, "lse");
  HostTensor short_offsets = testing::I64Tensor({0, 0, 0}, {3});
  ExpectError(f.Run([&](SparseAttentionArgs& a) { a.index.range_offsets = CView(short_offsets); }),
              StatusCode::kInvalidArgument, "range_offsets");
}

TEST(SparseAttentionArgsTest, Tiles) {
  Fixture f;
  f.tiles = {{0, 44, 20}, {44, 81, 64}};
  ExpectError(f.Run(), StatusCode::kOutOfRange, "tile 1");
  f.tiles = {{0, 44, 20}, {40, 70, 64}};
  ExpectError(f.Run(), StatusCode::kInvalidArgument, "overlap");
  f.tiles = {{0, 44, 30}, {44, 80, 64}};
  ExpectError(f.Run(), StatusCode::kInvalidArgument, "crosses a multiple");
  f.tiles = {{0, 10, 0}, {10, 80, 64}};
  ExpectError(f.Run(), StatusCode::kInvalidArgument, "more than 64");
  f.tiles = {{5, 4, 0}, {44, 80, 64}};
  ExpectError(f.Run(), StatusCode::kInvalidArgument, "tile 0");
}

TEST(SparseAttentionArgsTest, RangesAndColumns) {
  Fixture f;
  // Edits the built index just before the call.
  auto edit_i64 = [](HostTensor& t, int64_t at, int64_t value) {
    return [&t, at, value](SparseAttentionArgs&) { t.data<int64_t>()[at] = value; };
  };
  ExpectError(f.Run(edit_i64(f.c.ranges, 1, Fixture::kNkv + 1)), StatusCode::kOutOfRange,
              "range 0 rows");
  ExpectError(f.Run(edit_i64(f.c.ranges, 0, -1)), StatusCode::kOutOfRange, "range 0 rows");
  ExpectError(f.Run(edit_i64(f.c.ranges, 0, 11)), StatusCode::kInvalidArgument, "has rows");
  ExpectError(f.Run(edit_i64(f.c.columns, 0, Fixture::kNkv)), StatusCode::kOutOfRange,
              "column 0 row");
  ExpectError(f.Run(edit_i64(f.c.range_offsets, 4, 3)), StatusCode::kInvalidArgument,
              "range_offsets end");
  ExpectError(f.Run(edit_i64(f.c.column_offsets, 0, 1)), StatusCode::kInvalidArgument,
              "column_offsets[0]");
  f.items[0].ranges = {{15, 65}, {0, 10}};
  ExpectError(f.Run(), StatusCode::kInvalidArgument, "out of order");
  f.items[0].ranges = {{0, 20}, {15, 65}};
  ExpectError(f.Run(), StatusCode::kInvalidArgument, "overlaps");
  f.items[0] = {{{0, 10}, {15, 65}}, {70, 12}};
  ExpectError(f.Run(), StatusCode::kInvalidArgument, "not after");
  f.items[0] = {{{0, 10}, {15, 65}}, {12, 20}};
  ExpectError(f.Run(), StatusCode::kInvalidArgument, "inside range 1");
}

}  // namespace
}  // namespace millipede
