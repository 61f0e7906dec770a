#include "checkpoint/gguf.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <limits>
#include <utility>

#include "checkpoint/gguf_reader.h"
#include "common/checked_math.h"

namespace millipede {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader copies little-endian file fields as they are");

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint64_t kDefaultAlignment = 32;
constexpr const char* kAlignmentKey = "general.alignment";
// Smallest possible encodings: a key/value (u64 key length, u32 type, 1-byte value) and a tensor
// info (u64 name length, u32 n_dims, one u64 ne, u32 type, u64 offset).
constexpr uint64_t kMinKeyValueBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;
// Reservations from counts the file claims are capped; vectors grow with what is really read.
constexpr uint64_t kMaxReserve = 4096;
constexpr uint64_t kInt64Max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

std::string Quoted(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back('"');
  out.append(s);
  out.push_back('"');
  return out;
}

// What Parse builds before it moves everything into a GgufFile.
struct Parsed {
  uint32_t version = 0;
  uint64_t alignment = kDefaultAlignment;
  std::vector<std::string> keys;
  std::map<std::string, GgufValue, std::less<>> values;
  std::vector<GgufTensorInfo> tensors;
  std::map<std::string, size_t, std::less<>> tensor_index;
};

// The file's structure: header, metadata, tensor infos, then where each tensor's bytes lie.
class Parser {
 public:
  Parser(const unsigned char* data, size_t size, const std::string& what) : r_(data, size, what) {}

  Status Run(Parsed* out);

 private:
  Status ReadHeader(Parsed* out, uint64_t* n_tensors, uint64_t* n_kv);
  Status ReadMetadata(Parsed* out, uint64_t n_kv);
  Status ReadTensorInfo(Parsed* out, size_t index);
  Status PlaceTensors(Parsed* out);

  gguf_internal::GgufReader r_;
};

Status Parser::ReadHeader(Parsed* out, uint64_t* n_tensors, uint64_t* n_kv) {
  if (r_.size() < 4) {
    return r_.Bad("too short (" + std::to_string(r_.size()) + " bytes) to be a GGUF file");
  }
  uint32_t magic = 0;
  MP_RETURN_IF_ERROR(r_.Read(&magic, "the header", "magic"));
  if (magic != kMagic) {
    char hex[16];
    const unsigned char* d = r_.data();
    std::snprintf(hex, sizeof(hex), "%02x %02x %02x %02x", d[0], d[1], d[2], d[3]);
    return r_.Bad(std::string("not a GGUF file: bad magic (bytes ") + hex +
                  ", expected 47 47 55 46 \"GGUF\")");
  }
  uint32_t version = 0;
  MP_RETURN_IF_ERROR(r_.Read(&version, "the header", "version"));
  const uint32_t swapped = __builtin_bswap32(version);
  if (version == 1) return r_.Bad("GGUF version 1 is not supported (only versions 2 and 3)");
  if (version != 2 && version != 3) {
    if (swapped >= 1 && swapped <= 3) {
      return r_.Bad("big-endian GGUF file (version " + std::to_string(swapped) +
                    " stored byte-swapped): only little-endian files are supported");
    }
    return r_.Bad("unsupported GGUF version " + std::to_string(version) + " (only 2 and 3)");
  }
  out->version = version;
  MP_RETURN_IF_ERROR(r_.Read(n_tensors, "the header", "tensor count"));
  MP_RETURN_IF_ERROR(r_.Read(n_kv, "the header", "metadata count"));
  if (*n_kv > r_.left() / kMinKeyValueBytes) {
    return r_.Bad("metadata count " + std::to_string(*n_kv) + " cannot fit in the " +
                  std::to_string(r_.left()) + " bytes after the header");
  }
  if (*n_tensors > r_.left() / kMinTensorInfoBytes) {
    return r_.Bad("tensor count " + std::to_string(*n_tensors) + " cannot fit in the " +
                  std::to_string(r_.left()) + " bytes after the header");
  }
  return OkStatus();
}

Status Parser::ReadMetadata(Parsed* out, uint64_t n_kv) {
  out->keys.reserve(static_cast<size_t>(std::min(n_kv, kMaxReserve)));
  MP_RETURN_IF_ERROR(r_.CountValues(n_kv, "the header"));
  for (uint64_t k = 0; k < n_kv; ++k) {
    const std::string nth = "metadata entry " + std::to_string(k);
    std::string key;
    MP_RETURN_IF_ERROR(r_.ReadString(&key, nth, "key"));
    const std::string where = "metadata key " + Quoted(key);
    if (out->values.count(key) != 0) return r_.Bad(where + ": duplicate key");
    uint32_t raw_type = 0;
    MP_RETURN_IF_ERROR(r_.Read(&raw_type, where, "value type"));
    if (!gguf_internal::IsKnownValueType(raw_type)) {
      return r_.Bad(where + ": unknown value type " + std::to_string(raw_type) +
                    " at byte offset " + std::to_string(r_.pos() - 4));
    }
    GgufValue value;
    MP_RETURN_IF_ERROR(r_.ReadValue(static_cast<GgufValue::Type>(raw_type), 0, &value, where));
    out->keys.push_back(key);
    out->values.emplace(std::move(key), std::move(value));
  }
  auto it = out->values.find(kAlignmentKey);
  if (it != out->values.end()) {
    const GgufValue& v = it->second;
    const std::string where = std::string("metadata key ") + Quoted(kAlignmentKey);
    if (v.type != GgufValue::Type::kUint32) {
      return r_.Bad(where + " must be a uint32, got " + GgufValueTypeName(v.type));
    }
    if (v.u == 0 || (v.u & (v.u - 1)) != 0) {
      return r_.Bad(where + " = " + std::to_string(v.u) + " is not a power of two");
    }
    out->alignment = v.u;
  }
  return OkStatus();
}

Status Parser::ReadTensorInfo(Parsed* out, size_t index) {
  GgufTensorInfo t;
  MP_RETURN_IF_ERROR(r_.ReadString(&t.name, "tensor info " + std::to_string(index), "name"));
  const std::string where = "tensor " + Quoted(t.name);
  if (out->tensor_index.count(t.name) != 0) return r_.Bad(where + ": duplicate tensor name");
  uint32_t n_dims = 0;
  MP_RETURN_IF_ERROR(r_.Read(&n_dims, where, "n_dims"));
  if (n_dims < 1 || n_dims > 4) {
    return r_.Bad(where + ": " + std::to_string(n_dims) + " dimensions; 1 to 4 are supported");
  }
  uint64_t elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    uint64_t ne = 0;
    MP_RETURN_IF_ERROR(r_.Read(&ne, where, "ne"));
    if (ne == 0 || ne > kInt64Max) {
      return r_.Bad(where + ": ne[" + std::to_string(d) + "] = " + std::to_string(ne) +
                    " (dimensions must be at least 1 and fit int64)");
    }
    if (!CheckedMul(elements, ne, &elements) || elements > kInt64Max) {
      return r_.Bad(where + ": the element count of its dimensions overflows int64");
    }
    t.ne.push_back(static_cast<int64_t>(ne));
  }
  uint32_t raw_type = 0;
  MP_RETURN_IF_ERROR(r_.Read(&raw_type, where, "ggml type"));
  t.type = static_cast<GgmlType>(raw_type);
  const int64_t block_elements = GgmlBlockElements(t.type);
  if (block_elements == 0) {
    return r_.Bad(where + ": unknown or unsupported ggml type " + std::to_string(raw_type));
  }
  MP_RETURN_IF_ERROR(r_.Read(&t.offset, where, "offset"));
  if (t.ne[0] % block_elements != 0) {
    return r_.Bad(where + ": ne[0] = " + std::to_string(t.ne[0]) + " is not a multiple of the " +
                  GgmlTypeName(t.type) + " block of " + std::to_string(block_elements) +
                  " elements");
  }
  t.num_elements = static_cast<int64_t>(elements);
  if (!CheckedMul(elements / block_elements, GgmlBlockBytes(t.type), &t.num_bytes)) {
    return r_.Bad(where + ": the byte size of its dimensions overflows 64 bits");
  }
  if (t.offset % out->alignment != 0) {
    return r_.Bad(where + ": data offset " + std::to_string(t.offset) +
                  " is not a multiple of the alignment " + std::to_string(out->alignment));
  }
  out->tensor_index.emplace(t.name, out->tensors.size());
  out->tensors.push_back(std::move(t));
  return OkStatus();
}

// The data section starts at the end of the tensor infos rounded up to the alignment; every
// tensor's bytes must lie inside the file and no two may overlap.
Status Parser::PlaceTensors(Parsed* out) {
  if (out->tensors.empty()) return OkStatus();
  const uint64_t data_start = (r_.pos() + out->alignment - 1) / out->alignment * out->alignment;
  std::vector<const GgufTensorInfo*> by_offset;
  by_offset.reserve(out->tensors.size());
  for (GgufTensorInfo& t : out->tensors) {
    uint64_t begin = 0, end = 0;
    if (!CheckedAdd(data_start, t.offset, &begin) || !CheckedAdd(begin, t.num_bytes, &end) ||
        end > r_.size()) {
      return r_.Bad("tensor " + Quoted(t.name) + ": its " + std::to_string(t.num_bytes) +
                    " bytes at data offset " + std::to_string(t.offset) +
                    " end past the end of the file (" + std::to_string(r_.size()) +
                    " bytes; the data section starts at byte " + std::to_string(data_start) + ")");
    }
    t.data = r_.data() + begin;
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& prev = *by_offset[i - 1];
    const GgufTensorInfo& t = *by_offset[i];
    if (t.offset < prev.offset + prev.num_bytes) {
      return r_.Bad("tensor " + Quoted(t.name) + " (data bytes [" + std::to_string(t.offset) +
                    ", " + std::to_string(t.offset + t.num_bytes) + ")) overlaps tensor " +
                    Quoted(prev.name) + " (data bytes [" + std::to_string(prev.offset) + ", " +
                    std::to_string(prev.offset + prev.num_bytes) + "))");
    }
  }
  return OkStatus();
}

Status Parser::Run(Parsed* out) {
  uint64_t n_tensors = 0, n_kv = 0;
  MP_RETURN_IF_ERROR(ReadHeader(out, &n_tensors, &n_kv));
  MP_RETURN_IF_ERROR(ReadMetadata(out, n_kv));
  if (n_tensors > r_.left() / kMinTensorInfoBytes) {
    return r_.Bad("tensor count " + std::to_string(n_tensors) + " cannot fit in the " +
                  std::to_string(r_.left()) + " bytes after the metadata");
  }
  out->tensors.reserve(static_cast<size_t>(std::min(n_tensors, kMaxReserve)));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    MP_RETURN_IF_ERROR(ReadTensorInfo(out, static_cast<size_t>(i)));
  }
  return PlaceTensors(out);
}

}  // namespace

StatusOr<GgufFile> GgufFile::Parse(const unsigned char* data, size_t size,
                                   const std::string& what) {
  Parsed parsed;
  Parser parser(data, size, what);
  MP_RETURN_IF_ERROR(parser.Run(&parsed));
  GgufFile f;
  f.path_ = what;
  f.version_ = parsed.version;
  f.alignment_ = parsed.alignment;
  f.keys_ = std::move(parsed.keys);
  f.values_ = std::move(parsed.values);
  f.tensors_ = std::move(parsed.tensors);
  f.tensor_index_ = std::move(parsed.tensor_index);
  return f;
}

StatusOr<GgufFile> GgufFile::Open(const std::string& path) {
  MP_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(path));
  MP_ASSIGN_OR_RETURN(GgufFile f, Parse(file.data(), file.size(), path));
  // The tensors' data pointers stay valid: moving a MappedFile keeps its mapping.
  f.file_ = std::move(file);
  return f;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace millipede
