#include "checkpoint/safetensors_writer.h"

#include <cstdio>
#include <filesystem>
#include <set>

#include "checkpoint/atomic_file.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/strict_json.h"
#include "common/checked_math.h"
#include "common/file_util.h"
#include "common/json_util.h"

namespace millipede {
namespace {

// Checks names and views and returns each tensor's byte size.
StatusOr<std::vector<uint64_t>> CheckTensors(const std::vector<NamedTensor>& tensors,
                                             const std::string& what) {
  std::set<std::string_view> names;
  std::vector<uint64_t> sizes;
  sizes.reserve(tensors.size());
  for (const auto& [name, view] : tensors) {
    MP_REQUIRE(IsValidUtf8(name), what, ": tensor name is not valid UTF-8");
    MP_REQUIRE(name != "__metadata__", what, ": \"__metadata__\" is reserved, not a tensor name");
    MP_REQUIRE(names.insert(name).second, what, ": duplicate tensor name \"", name, "\"");
    uint64_t bytes = DTypeSize(view.dtype);
    for (int i = 0; i < view.shape.rank; ++i) {
      MP_REQUIRE(view.shape[i] >= 0, what, ": tensor \"", name, "\" has negative shape ",
                 view.shape.ToString());
      MP_REQUIRE(CheckedMul(bytes, static_cast<uint64_t>(view.shape[i]), &bytes), what,
                 ": tensor \"", name, "\" byte size overflows");
    }
    MP_REQUIRE(view.data != nullptr || bytes == 0, what, ": tensor \"", name, "\" has null data");
    sizes.push_back(bytes);
  }
  return sizes;
}

std::string JsonString(const std::string& s) {
  return Json(s).dump(-1, ' ', false, Json::error_handler_t::replace);
}

// The header bytes, padded with spaces to a multiple of 8.
StatusOr<std::string> BuildHeader(const std::vector<NamedTensor>& tensors,
                                  const std::vector<uint64_t>& sizes,
                                  const std::map<std::string, std::string>& metadata,
                                  const std::string& what) {
  std::string h = "{";
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      MP_REQUIRE(IsValidUtf8(key) && IsValidUtf8(value), what,
                 ": metadata key or value is not valid UTF-8");
      if (!first) h += ',';
      first = false;
      h += JsonString(key) + ":" + JsonString(value);
    }
    h += "}";
  }
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const ConstTensorView& view = tensors[i].second;
    uint64_t end;
    MP_REQUIRE(CheckedAdd(offset, sizes[i], &end), what, ": total tensor size overflows");
    if (h.size() > 1) h += ',';
    h += JsonString(tensors[i].first);
    h += ":{\"dtype\":\"";
    h += DTypeName(view.dtype);
    h += "\",\"shape\":[";
    for (int d = 0; d < view.shape.rank; ++d) {
      if (d > 0) h += ',';
      h += std::to_string(view.shape[d]);
    }
    h += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(end) + "]}";
    offset = end;
  }
  h += "}";
  while (h.size() % 8 != 0) h += ' ';
  MP_REQUIRE(h.size() <= kMaxSafetensorsHeaderBytes, what, ": header of ", h.size(),
             " bytes exceeds the limit of ", kMaxSafetensorsHeaderBytes);
  return h;
}

Status WriteChecked(const std::string& path, const std::vector<NamedTensor>& tensors,
                    const std::vector<uint64_t>& sizes,
                    const std::map<std::string, std::string>& metadata) {
  MP_ASSIGN_OR_RETURN(std::string header, BuildHeader(tensors, sizes, metadata, path));
  unsigned char len_bytes[8];
  uint64_t len = header.size();
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>(len >> (8 * i));

  MP_ASSIGN_OR_RETURN(AtomicFileWriter w, AtomicFileWriter::Create(path));
  MP_RETURN_IF_ERROR(w.Append(len_bytes, sizeof(len_bytes)));
  MP_RETURN_IF_ERROR(w.Append(header.data(), header.size()));
  for (size_t i = 0; i < tensors.size(); ++i) {
    MP_RETURN_IF_ERROR(w.Append(tensors[i].second.data, static_cast<size_t>(sizes[i])));
  }
  return w.Commit();
}

}  // namespace

Status WriteSafetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  MP_ASSIGN_OR_RETURN(std::vector<uint64_t> sizes, CheckTensors(tensors, path));
  return WriteChecked(path, tensors, sizes, metadata);
}

std::string ShardFileName(int index, int count) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05d-of-%05d.safetensors", index + 1, count);
  return buf;
}

Status WriteShardedSafetensors(const std::string& dir, const std::vector<NamedTensor>& tensors,
                               uint64_t max_shard_bytes,
                               const std::map<std::string, std::string>& metadata) {
  MP_REQUIRE(!tensors.empty(), dir, ": a sharded checkpoint needs at least one tensor");
  MP_REQUIRE(max_shard_bytes > 0, dir, ": max_shard_bytes must be positive");
  // Names must be unique across shards, not only within each, so check the whole list first.
  MP_ASSIGN_OR_RETURN(std::vector<uint64_t> sizes, CheckTensors(tensors, dir));

  std::vector<std::vector<size_t>> shards;
  uint64_t shard_bytes = 0;
  uint64_t total_bytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const bool fits = shard_bytes <= max_shard_bytes && sizes[i] <= max_shard_bytes - shard_bytes;
    if (shards.empty() || !fits) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(i);
    MP_REQUIRE(CheckedAdd(shard_bytes, sizes[i], &shard_bytes), dir, ": shard size overflows");
    MP_REQUIRE(CheckedAdd(total_bytes, sizes[i], &total_bytes), dir, ": total size overflows");
  }

  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return IoError("cannot create directory " + dir + ": " + ec.message());

  Json weight_map = Json::object();
  const int count = static_cast<int>(shards.size());
  for (int s = 0; s < count; ++s) {
    const std::string file = ShardFileName(s, count);
    std::vector<NamedTensor> shard_tensors;
    std::vector<uint64_t> shard_sizes;
    for (size_t i : shards[s]) {
      shard_tensors.push_back(tensors[i]);
      shard_sizes.push_back(sizes[i]);
      weight_map[tensors[i].first] = file;
    }
    MP_RETURN_IF_ERROR(WriteChecked(JoinPath(dir, file), shard_tensors, shard_sizes, metadata));
  }
  Json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
  return WriteFileAtomically(JoinPath(dir, kSafetensorsIndexFileName),
                             index.dump(2, ' ', false, Json::error_handler_t::replace) + "\n");
}

}  // namespace millipede
