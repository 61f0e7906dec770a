// AddPartsCuda against AddPartsRef, exactly (a NaN matches a NaN, whatever its payload): part
// counts 1 to 8 (the ranks of a node), rows of one decode token and of a batch, strides with
// padding between parts, odd widths and unaligned bases, NaN and infinities; outputs between
// guard bands. Skips without a GPU.
#include "kernels/layer/add_parts_cuda.h"

#include <gtest/gtest.h>

#include <string>

#include "kernels/layer/add_parts.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/op_harness.h"

namespace millipede {
namespace {

using testing::kInf;
using testing::kNaN;
using testing::OpCheck;
using testing::RandomTensor;
using testing::Tolerance;

struct Case {
  int64_t parts, m, n;
  int64_t padding = 0;  // elements between the end of one part and the start of the next
  size_t offset_bytes = 0;
};

std::string Name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string name = detail::StrCat("p", c.parts, "_m", c.m, "_n", c.n);
  if (c.padding) name += detail::StrCat("_pad", c.padding);
  if (c.offset_bytes) name += "_unaligned";
  return name;
}

class AddPartsCudaTest : public testing::GpuOpTest<Case> {};

TEST_P(AddPartsCudaTest, MatchesReferenceExactly) {
  const Case c = GetParam();
  const int64_t stride = c.m * c.n + c.padding;
  // The parts as one [parts, stride] buffer; the op sees [parts, m, n] with the stride.
  HostTensor parts = RandomTensor(DType::kF32, {c.parts, stride}, 31, -20.0f, 20.0f);
  float* p = parts.data<float>();
  if (c.m * c.n > 3) {
    p[0] = kNaN;
    p[1] = kInf;
    p[stride * (c.parts - 1) + 2] = -kInf;
  }
  HostTensor out = RandomTensor(DType::kF32, {c.m, c.n}, 32, -5.0f, 5.0f);
  OpCheck check("add_parts");
  const int iparts = check.Input(parts, c.offset_bytes);
  const int iout =
      check.Output("out", out, Tolerance::Exact().WithNanMatchingNan(), c.offset_bytes);
  check.Run(
      [&](const OpCheck::Tensors& t) {
        return AddPartsArgs{{t.cview(iparts).data, DType::kF32, Shape{c.parts, c.m, c.n}},
                            c.padding > 0 ? stride : 0, t.view(iout)};
      },
      AddPartsRef, AddPartsCuda);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AddPartsCudaTest,
    ::testing::Values(Case{1, 1, 4096}, Case{2, 1, 4096, 32}, Case{4, 1, 4096, 32},
                      Case{8, 3, 4096}, Case{3, 5, 77, 13, 4}, Case{2, 1, 1}, Case{7, 33, 1000, 1}),
    Name);

}  // namespace
}  // namespace millipede
