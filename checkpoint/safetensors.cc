#include "checkpoint/safetensors.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "checkpoint/strict_json.h"
#include "common/checked_math.h"
#include "common/json_util.h"

namespace millipede {
namespace {

constexpr const char* kMetadataKey = "__metadata__";

Status Bad(const std::string& where, const std::string& problem) {
  return InvalidArgumentError(where + ": " + problem);
}

bool AsU64(const Json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    *out = static_cast<uint64_t>(v.get<int64_t>());
    return true;
  }
  return false;
}

std::string OffsetsString(uint64_t begin, uint64_t end) {
  std::string s = "[";
  s += std::to_string(begin);
  s += ", ";
  s += std::to_string(end);
  s += "]";
  return s;
}

StatusOr<std::map<std::string, std::string>> ParseMetadata(const Json& m, const std::string& what) {
  std::map<std::string, std::string> out;
  if (m.is_null()) return out;
  if (!m.is_object()) {
    return Bad(what, "\"__metadata__\" must be an object of strings, got " + DescribeJson(m));
  }
  for (const auto& [key, value] : m.items()) {
    if (!value.is_string()) {
      return Bad(what, "\"__metadata__\" value for \"" + key + "\" must be a string, got " +
                           DescribeJson(value));
    }
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

StatusOr<Shape> ParseShape(const Json& j, const std::string& where) {
  if (!j.is_array()) return Bad(where, "\"shape\" must be an array, got " + DescribeJson(j));
  if (j.size() > static_cast<size_t>(kMaxTensorRank)) {
    return Bad(where, "\"shape\" has " + std::to_string(j.size()) + " dimensions; at most " +
                          std::to_string(kMaxTensorRank) + " are supported");
  }
  std::vector<int64_t> dims;
  for (size_t i = 0; i < j.size(); ++i) {
    uint64_t d;
    if (!AsU64(j[i], &d)) {
      return Bad(where, "shape[" + std::to_string(i) + "] must be a non-negative integer, got " +
                            DescribeJson(j[i]));
    }
    if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Bad(where,
                 "shape[" + std::to_string(i) + "] = " + std::to_string(d) + " is too large");
    }
    dims.push_back(static_cast<int64_t>(d));
  }
  return Shape::FromVector(dims);
}

StatusOr<TensorInfo> ParseTensorEntry(const std::string& name, const Json& entry,
                                      uint64_t data_size, const std::string& what) {
  const std::string where = what + ": tensor \"" + name + "\"";
  if (!entry.is_object()) {
    return Bad(where, "entry must be an object with dtype, shape and data_offsets, got " +
                          DescribeJson(entry));
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(key)) return Bad(where, std::string("missing \"") + key + "\"");
  }
  TensorInfo info;
  info.name = name;

  const Json& dtype = entry["dtype"];
  if (!dtype.is_string()) return Bad(where, "\"dtype\" must be a string, got " + DescribeJson(dtype));
  StatusOr<DType> parsed = ParseDType(dtype.get_ref<const std::string&>());
  if (!parsed.ok()) {
    return Bad(where, parsed.status().message() +
                          " (supported: F32, F16, BF16, F64, I8, U8, I16, I32, I64, BOOL)");
  }
  info.dtype = *parsed;

  MP_ASSIGN_OR_RETURN(info.shape, ParseShape(entry["shape"], where));

  const Json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !AsU64(offsets[0], &info.offset_begin) ||
      !AsU64(offsets[1], &info.offset_end)) {
    return Bad(where, "\"data_offsets\" must be two non-negative integers [begin, end], got " +
                          DescribeJson(offsets));
  }
  const std::string offsets_str = OffsetsString(info.offset_begin, info.offset_end);
  if (info.offset_end < info.offset_begin) {
    return Bad(where, "data_offsets " + offsets_str + " end before they begin");
  }
  if (info.offset_end > data_size) {
    return Bad(where, "data_offsets " + offsets_str + " extend past the end of the data section (" +
                          std::to_string(data_size) + " bytes)");
  }

  uint64_t bytes = DTypeSize(info.dtype);
  for (int i = 0; i < info.shape.rank; ++i) {
    if (!CheckedMul(bytes, static_cast<uint64_t>(info.shape[i]), &bytes)) {
      return Bad(where, "byte size of shape " + info.shape.ToString() + " x " +
                            DTypeName(info.dtype) + " overflows 64 bits");
    }
  }
  if (bytes != info.num_bytes()) {
    return Bad(where, "shape " + info.shape.ToString() + " of " + DTypeName(info.dtype) +
                          " needs " + std::to_string(bytes) + " bytes, but data_offsets " +
                          offsets_str + " span " + std::to_string(info.num_bytes()));
  }
  return info;
}

// Sorts by offset and checks that the tensors tile [0, data_size) exactly.
Status CheckTiling(std::vector<TensorInfo>& tensors, uint64_t data_size, const std::string& what) {
  std::sort(tensors.begin(), tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    if (a.offset_begin != b.offset_begin) return a.offset_begin < b.offset_begin;
    if (a.offset_end != b.offset_end) return a.offset_end < b.offset_end;
    return a.name < b.name;
  });
  uint64_t pos = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorInfo& t = tensors[i];
    if (t.offset_begin < pos) {
      // pos is the previous tensor's end, and begin >= its begin, so the two overlap.
      const TensorInfo& prev = tensors[i - 1];
      return Bad(what, "tensor \"" + t.name + "\" (data_offsets " +
                           OffsetsString(t.offset_begin, t.offset_end) + ") overlaps tensor \"" +
                           prev.name + "\" (data_offsets " +
                           OffsetsString(prev.offset_begin, prev.offset_end) + ")");
    }
    if (t.offset_begin > pos) {
      return Bad(what, "gap of " + std::to_string(t.offset_begin - pos) +
                           " bytes in the data section before tensor \"" + t.name +
                           "\" (data_offsets " + OffsetsString(t.offset_begin, t.offset_end) +
                           "); tensors must be stored contiguously");
    }
    pos = t.offset_end;
  }
  if (pos != data_size) {
    return Bad(what, std::to_string(data_size - pos) +
                         " bytes at the end of the data section belong to no tensor");
  }
  return OkStatus();
}

}  // namespace

StatusOr<SafetensorsHeader> ParseSafetensorsHeader(const unsigned char* data, size_t size,
                                                   const std::string& what) {
  if (size < 8) {
    return Bad(what, "file is too short (" + std::to_string(size) +
                         " bytes) to hold the 8-byte header length");
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];
  if (header_len > kMaxSafetensorsHeaderBytes) {
    return Bad(what, "header length " + std::to_string(header_len) + " exceeds the limit of " +
                         std::to_string(kMaxSafetensorsHeaderBytes) + " bytes");
  }
  if (header_len > size - 8) {
    return Bad(what, "header length " + std::to_string(header_len) +
                         " extends past the end of the file (" + std::to_string(size) + " bytes)");
  }
  SafetensorsHeader out;
  out.data_offset = 8 + header_len;
  const uint64_t data_size = size - out.data_offset;

  std::string_view text(reinterpret_cast<const char*>(data + 8), header_len);
  MP_ASSIGN_OR_RETURN(Json header,
                      ParseJsonRejectingDuplicateKeys(text, what + ": header", "tensor name"));
  if (!header.is_object()) {
    return Bad(what, std::string("header must be a JSON object, got ") + header.type_name());
  }
  for (const auto& [name, entry] : header.items()) {
    if (name == kMetadataKey) {
      MP_ASSIGN_OR_RETURN(out.metadata, ParseMetadata(entry, what));
      continue;
    }
    MP_ASSIGN_OR_RETURN(TensorInfo info, ParseTensorEntry(name, entry, data_size, what));
    out.tensors.push_back(std::move(info));
  }
  MP_RETURN_IF_ERROR(CheckTiling(out.tensors, data_size, what));
  return out;
}

StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  MP_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(path));
  MP_ASSIGN_OR_RETURN(SafetensorsHeader header,
                      ParseSafetensorsHeader(file.data(), file.size(), path));
  SafetensorsFile f;
  f.file_ = std::move(file);
  f.header_ = std::move(header);
  for (size_t i = 0; i < f.header_.tensors.size(); ++i) {
    f.index_.emplace(f.header_.tensors[i].name, i);
  }
  return f;
}

const TensorInfo* SafetensorsFile::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

StatusOr<ConstTensorView> SafetensorsFile::Get(std::string_view name) const {
  const TensorInfo* info = Find(name);
  if (info == nullptr) {
    return NotFoundError(path() + ": no tensor named \"" + std::string(name) + "\"");
  }
  ConstTensorView view;
  view.data = file_.data() + header_.data_offset + info->offset_begin;
  view.dtype = info->dtype;
  view.shape = info->shape;
  return view;
}

}  // namespace millipede
