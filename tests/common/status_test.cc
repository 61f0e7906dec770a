#include "common/status.h"

#include <gtest/gtest.h>

namespace millipede {
namespace {

Status Fails() { return InvalidArgumentError("bad thing"); }
Status Propagates() {
  MP_RETURN_IF_ERROR(Fails());
  return InternalError("not reached");
}
StatusOr<int> Value(bool ok) {
  if (!ok) return NotFoundError("no value");
  return 7;
}
StatusOr<int> Doubled(bool ok) {
  MP_ASSIGN_OR_RETURN(int v, Value(ok));
  return 2 * v;
}
Status Require(int x) {
  MP_REQUIRE(x > 0, "x must be positive, got ", x);
  return OkStatus();
}
Status Assert(int x) {
  MP_ASSERT(x == 1, "x was ", x);
  return OkStatus();
}

TEST(StatusTest, OkAndError) {
  EXPECT_TRUE(OkStatus().ok());
  EXPECT_EQ(OkStatus().ToString(), "OK");
  Status s = Fails();
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.ToString(), "INVALID_ARGUMENT: bad thing");
  EXPECT_EQ(s.WithContext("loading").message(), "loading: bad thing");
  EXPECT_TRUE(OkStatus().WithContext("x").ok());
}

TEST(StatusTest, Macros) {
  EXPECT_EQ(Propagates().message(), "bad thing");
  ASSERT_TRUE(Doubled(true).ok());
  EXPECT_EQ(*Doubled(true), 14);
  EXPECT_EQ(Doubled(false).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Require(1).ok());
  EXPECT_EQ(Require(-3).message(), "x must be positive, got -3");
  EXPECT_TRUE(Assert(1).ok());
  Status a = Assert(2);
  EXPECT_EQ(a.code(), StatusCode::kInternal);
  EXPECT_NE(a.message().find("x == 1"), std::string::npos);
  EXPECT_NE(a.message().find("x was 2"), std::string::npos);
}

TEST(StatusTest, StatusOrFromOkIsAnError) {
  StatusOr<int> s(OkStatus());
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace millipede
