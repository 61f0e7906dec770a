#include <cstring>
#include <vector>

#include "kernels/memory/copy_heads.h"

namespace millipede {

Status CopyHeadsCheckArgs(const CopyHeadsArgs& args) {
  MP_REQUIRE(args.src.rank() == 3, "copy_heads src: shape ", args.src.shape.ToString(),
             ", expected [n, heads, width]");
  MP_REQUIRE(args.dst.rank() == 3, "copy_heads dst: shape ", args.dst.shape.ToString(),
             ", expected [n, heads, width]");
  MP_REQUIRE(args.dst.dtype == args.src.dtype, "copy_heads: dst dtype ",
             DTypeName(args.dst.dtype), " differs from src dtype ", DTypeName(args.src.dtype));
  MP_REQUIRE(args.dst.dim(0) == args.src.dim(0) && args.dst.dim(2) == args.src.dim(2),
             "copy_heads: dst ", args.dst.shape.ToString(), " and src ",
             args.src.shape.ToString(), " differ in rows or head width");
  MP_RETURN_IF_ERROR(CheckedNumBytes(args.src.shape, args.src.dtype).status());
  MP_RETURN_IF_ERROR(CheckedNumBytes(args.dst.shape, args.dst.dtype).status());
  const int64_t pairs = static_cast<int64_t>(args.src_heads.size());
  MP_REQUIRE(pairs == static_cast<int64_t>(args.dst_heads.size()), "copy_heads: ", pairs,
             " source heads for ", args.dst_heads.size(), " destination heads");
  MP_REQUIRE(pairs <= kCopyHeadsMax, "copy_heads: ", pairs, " heads, at most ", kCopyHeadsMax);
  std::vector<bool> taken(static_cast<size_t>(args.dst.dim(1)), false);
  for (int64_t j = 0; j < pairs; ++j) {
    const int64_t s = args.src_heads[static_cast<size_t>(j)];
    const int64_t d = args.dst_heads[static_cast<size_t>(j)];
    MP_REQUIRE(s >= 0 && s < args.src.dim(1), "copy_heads: src_heads[", j, "] = ", s,
               " is outside the ", args.src.dim(1), " source heads");
    MP_REQUIRE(d >= 0 && d < args.dst.dim(1), "copy_heads: dst_heads[", j, "] = ", d,
               " is outside the ", args.dst.dim(1), " destination heads");
    MP_REQUIRE(!taken[static_cast<size_t>(d)], "copy_heads: destination head ", d,
               " appears twice");
    taken[static_cast<size_t>(d)] = true;
  }
  return OkStatus();
}

Status CopyHeadsRef(const CopyHeadsArgs& args) {
  MP_RETURN_IF_ERROR(CopyHeadsCheckArgs(args));
  const int64_t n = args.src.dim(0), src_heads = args.src.dim(1), dst_heads = args.dst.dim(1);
  const size_t head_bytes = static_cast<size_t>(args.src.dim(2)) * DTypeSize(args.src.dtype);
  const char* src = static_cast<const char*>(args.src.data);
  char* dst = static_cast<char*>(args.dst.data);
  for (int64_t t = 0; t < n; ++t)
    for (size_t j = 0; j < args.src_heads.size(); ++j)
      std::memcpy(dst + (t * dst_heads + args.dst_heads[j]) * head_bytes,
                  src + (t * src_heads + args.src_heads[j]) * head_bytes, head_bytes);
  return OkStatus();
}

}  // namespace millipede
