// Reading safetensors files (https://github.com/huggingface/safetensors), memory-mapped.
//
// Layout: an 8-byte little-endian u64 N, then N bytes of UTF-8 JSON (the header), then the data
// section. The header is an object mapping each tensor name to
// {"dtype": "BF16", "shape": [d0, d1, ...], "data_offsets": [begin, end]}, offsets in bytes
// relative to the start of the data section, plus an optional "__metadata__" object of strings.
//
// Validation follows the reference implementation and is strict, since the files are untrusted:
//  - the file holds at least 8 bytes; N <= kMaxSafetensorsHeaderBytes; 8 + N <= file size;
//  - the header is valid UTF-8 and a JSON object with no repeated key (so names are unique);
//  - "__metadata__", if present and not null, is an object whose values are all strings;
//  - every tensor has a known dtype (the ten of common/dtype.h; FP8 and others are rejected),
//    a shape of at most kMaxTensorRank non-negative integers, and integer offsets with
//    begin <= end <= data section size;
//  - product(shape) * dtype size == end - begin, computed with overflow checks;
//  - sorted by offset, the tensors tile the data section exactly: no overlap, no gap between
//    them, no unused bytes at the end. (The reference rejects gaps and trailing bytes too, so a
//    file accepted here also loads in Python.)
// Every failure is InvalidArgument naming the file, the problem and, where there is one, the
// tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/dtype.h"
#include "common/file_util.h"
#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

// The reference implementation's cap on the header length.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// File names of a Hugging Face checkpoint directory: one file, or shards listed by an index.
inline constexpr char kSafetensorsSingleFileName[] = "model.safetensors";
inline constexpr char kSafetensorsIndexFileName[] = "model.safetensors.index.json";

// One tensor of a safetensors file. Offsets are relative to the start of the data section.
struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t offset_begin = 0;
  uint64_t offset_end = 0;

  uint64_t num_bytes() const { return offset_end - offset_begin; }
};

// A validated header.
struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;  // in data-offset order
  std::map<std::string, std::string> metadata;
  uint64_t data_offset = 0;  // where the data section starts in the file: 8 + header length
};

// Validates a whole file image (header and the size of the data section) as described at the top
// of this file. `what` names the source in errors (normally the path).
StatusOr<SafetensorsHeader> ParseSafetensorsHeader(const unsigned char* data, size_t size,
                                                   const std::string& what);

// An open, validated safetensors file. Move-only; views returned by Get stay valid as long as
// this object (or the one it is moved into) lives.
class SafetensorsFile {
 public:
  SafetensorsFile() = default;
  SafetensorsFile(SafetensorsFile&&) noexcept = default;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept = default;

  // Maps and validates the file. A missing file is NotFound; a malformed one InvalidArgument.
  static StatusOr<SafetensorsFile> Open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  // All tensors, in data-offset order.
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  // The tensor's entry, or nullptr if there is none of that name.
  const TensorInfo* Find(std::string_view name) const;
  bool Has(std::string_view name) const { return Find(name) != nullptr; }
  // A read-only host view into the mapped file; NotFound if there is no such tensor. The data
  // pointer is only as aligned as the file makes it: the data section starts 8-byte aligned in
  // files from conforming writers, but a tensor's offset need not be a multiple of its element
  // size, so callers that load elements through typed pointers should check or copy.
  StatusOr<ConstTensorView> Get(std::string_view name) const;

 private:
  MappedFile file_;
  SafetensorsHeader header_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in header_.tensors
};

}  // namespace millipede
