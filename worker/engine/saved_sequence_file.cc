#include "worker/engine/saved_sequence_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <future>
#include <memory>
#include <string_view>
#include <type_traits>

#include "policy/policy_writer.h"

namespace millipede {
namespace {

constexpr char kMagic[8] = {'M', 'P', 'K', 'V', 'S', 'E', 'Q', '1'};
constexpr uint64_t kSeed = 0x6d696c6c69706564ULL;
constexpr int64_t kMaxHeaderBytes = int64_t{1} << 32;

Status Lost(const std::string& path, const std::string& why) {
  return IoError("prefix-cache file " + path + ": " + why);
}

// Appends integers and byte strings to a header.
class HeaderWriter {
 public:
  template <typename T>
  void Put(T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&value), sizeof(T));
  }
  void PutString(std::string_view s) {
    Put<uint64_t>(s.size());
    out_.append(s);
  }
  template <typename T>
  void PutVector(const std::vector<T>& v) {
    Put<uint64_t>(v.size());
    out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  const std::string& bytes() const { return out_; }

 private:
  std::string out_;
};

// Reads them back; any read past the end is a corrupted header.
class HeaderReader {
 public:
  explicit HeaderReader(std::string_view in) : in_(in) {}
  template <typename T>
  bool Get(T* value) {
    if (in_.size() < sizeof(T)) return false;
    std::memcpy(value, in_.data(), sizeof(T));
    in_.remove_prefix(sizeof(T));
    return true;
  }
  bool GetString(std::string* s) {
    uint64_t n = 0;
    if (!Get(&n) || n > in_.size()) return false;
    s->assign(in_.substr(0, n));
    in_.remove_prefix(n);
    return true;
  }
  template <typename T>
  bool GetVector(std::vector<T>* v) {
    uint64_t n = 0;
    if (!Get(&n) || n > in_.size() / sizeof(T)) return false;
    v->resize(n);
    std::memcpy(v->data(), in_.data(), n * sizeof(T));
    in_.remove_prefix(n * sizeof(T));
    return true;
  }
  bool done() const { return in_.empty(); }

 private:
  std::string_view in_;
};

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

// One part's description in the header.
struct PartInfo {
  KvRetention retention;
  std::vector<TokenRange> ranges;
  DType dtype = DType::kF32;
  int64_t rows = 0, heads = 0, head_dim = 0;
  int64_t bytes() const { return 2 * rows * heads * head_dim * int64_t(DTypeSize(dtype)); }
};

void PutOptions(HeaderWriter& w, const SequenceOptions& o) {
  w.Put<int64_t>(o.capacity);
  w.Put<int64_t>(o.step_tokens);
  w.PutString(AttentionPolicyToJson(o.policy));
  w.Put<int64_t>(o.decode_rows);
  w.Put<int32_t>(static_cast<int32_t>(o.selected_kv));
  w.Put<int64_t>(o.host_tier_layers);
  w.Put<int64_t>(o.ranks);
  w.Put<uint8_t>(o.split_kv_heads ? 1 : 0);
}

bool GetOptions(HeaderReader& r, SequenceOptions* o, std::string* policy_json) {
  int32_t tier = 0;
  uint8_t split = 0;
  const bool ok = r.Get(&o->capacity) && r.Get(&o->step_tokens) && r.GetString(policy_json) &&
                  r.Get(&o->decode_rows) && r.Get(&tier) && r.Get(&o->host_tier_layers) &&
                  r.Get(&o->ranks) && r.Get(&split);
  o->selected_kv = static_cast<SelectedKvTier>(tier);
  o->split_kv_heads = split != 0;
  return ok && tier >= 0 && tier <= static_cast<int32_t>(SelectedKvTier::kHost);
}

void PutPart(HeaderWriter& w, const SavedKvRows& part) {
  w.Put<int64_t>(part.retention.sink_tokens);
  w.Put<int64_t>(part.retention.window_tokens);
  w.Put<int64_t>(part.retention.keep_all_below);
  w.PutVector(part.ranges);
  const ConstTensorView k = part.k.cview();
  w.Put<int32_t>(static_cast<int32_t>(k.dtype));
  w.Put<int64_t>(k.dim(0));
  w.Put<int64_t>(k.dim(1));
  w.Put<int64_t>(k.dim(2));
}

bool GetPart(HeaderReader& r, PartInfo* p) {
  int32_t dtype = 0;
  if (!(r.Get(&p->retention.sink_tokens) && r.Get(&p->retention.window_tokens) &&
        r.Get(&p->retention.keep_all_below) && r.GetVector(&p->ranges) && r.Get(&dtype) &&
        r.Get(&p->rows) && r.Get(&p->heads) && r.Get(&p->head_dim)))
    return false;
  // KV rows are of a KV dtype: F32, BF16, F16 or F8E4M3 (the enum's values, as written).
  if (dtype < 0 || dtype > static_cast<int32_t>(DType::kF8E4M3) ||
      !IsKvDType(static_cast<DType>(dtype)))
    return false;
  p->dtype = static_cast<DType>(dtype);
  return p->rows == TotalSize(p->ranges) && p->heads > 0 && p->heads < (1 << 16) &&
         p->head_dim > 0 && p->head_dim < (1 << 16) && p->rows >= 0 && p->rows < (int64_t{1} << 40);
}

// Checksum64 over a sequence of buffers, each computed on a thread of its own once the one
// before it is done (the buffers must outlive the object, whose destructor waits for them).
class ChainedChecksum {
 public:
  explicit ChainedChecksum(uint64_t seed) {
    std::promise<uint64_t> ready;
    ready.set_value(seed);
    sum_ = ready.get_future().share();
  }
  ~ChainedChecksum() {
    if (sum_.valid()) sum_.wait();
  }
  void Add(const void* data, size_t n) {
    sum_ = std::async(std::launch::async,
                      [prev = sum_, data, n] { return Checksum64(prev.get(), data, n); })
               .share();
  }
  uint64_t Get() const { return sum_.get(); }

 private:
  std::shared_future<uint64_t> sum_;
};

// Everything ReadSavedSequenceInfo gives plus what reading the rows needs.
struct Header {
  SavedSequenceFileInfo info;
  SequenceOptions options;
  std::string policy_json;
  std::vector<std::vector<PartInfo>> layers;
  int64_t rows_offset = 0;
};

std::string HeaderBytes(const DiskEntryMeta& meta, const SavedSequence& saved) {
  HeaderWriter w;
  w.Put<uint64_t>(meta.id);
  w.Put<uint64_t>(meta.key);
  w.PutString(meta.model_key);
  w.PutVector(meta.tokens);
  w.Put<uint8_t>(meta.every_length ? 1 : 0);
  w.PutVector(meta.lengths);
  PutOptions(w, saved.options());
  w.Put<int64_t>(saved.length());
  w.PutVector(saved.stored());
  w.Put<int64_t>(saved.num_layers());
  for (int64_t l = 0; l < saved.num_layers(); ++l) {
    w.Put<int64_t>(static_cast<int64_t>(saved.layer(l).size()));
    for (const SavedKvRows& part : saved.layer(l)) PutPart(w, part);
  }
  w.Put<int64_t>(saved.NumBytes());
  return w.bytes();
}

bool ParseHeader(std::string_view bytes, Header* h) {
  HeaderReader r(bytes);
  DiskEntryMeta& m = h->info.meta;
  uint8_t every = 0;
  int64_t layers = 0;
  if (!(r.Get(&m.id) && r.Get(&m.key) && r.GetString(&m.model_key) && r.GetVector(&m.tokens) &&
        r.Get(&every) && r.GetVector(&m.lengths) && GetOptions(r, &h->options, &h->policy_json) &&
        r.Get(&h->info.length) && r.GetVector(&h->info.stored) && r.Get(&layers)))
    return false;
  m.every_length = every != 0;
  if (layers < 0 || layers > (1 << 16)) return false;
  int64_t total = 0;
  h->layers.resize(static_cast<size_t>(layers));
  for (auto& parts : h->layers) {
    int64_t n = 0;
    if (!r.Get(&n) || n < 1 || n > 2) return false;
    parts.resize(static_cast<size_t>(n));
    for (PartInfo& p : parts) {
      if (!GetPart(r, &p)) return false;
      total += p.bytes();
    }
  }
  h->info.options = h->options;
  return r.Get(&h->info.row_bytes) && r.done() && h->info.row_bytes == total;
}

StatusOr<Header> ReadHeader(std::FILE* f, const std::string& path) {
  char magic[8];
  uint64_t size = 0;
  if (std::fread(magic, 1, 8, f) != 8 || std::memcmp(magic, kMagic, 8) != 0)
    return Lost(path, "not a prefix-cache file of this format");
  if (std::fread(&size, 8, 1, f) != 1 || size > static_cast<uint64_t>(kMaxHeaderBytes))
    return Lost(path, "truncated or corrupted header");
  std::string bytes(size, '\0');
  uint64_t sum = 0;
  if (std::fread(bytes.data(), 1, size, f) != size || std::fread(&sum, 8, 1, f) != 1)
    return Lost(path, "truncated header");
  if (Checksum64(kSeed, bytes.data(), bytes.size()) != sum)
    return Lost(path, "the header's checksum does not match (corrupted)");
  Header h;
  if (!ParseHeader(bytes, &h)) return Lost(path, "malformed header");
  h.rows_offset = 8 + 8 + static_cast<int64_t>(size) + 8;
  return h;
}

StatusOr<Header> OpenChecked(const std::string& path, File* file) {
  file->reset(std::fopen(path.c_str(), "rb"));
  if (*file == nullptr) return IoError("cannot open " + path);
  MP_ASSIGN_OR_RETURN(Header h, ReadHeader(file->get(), path));
  if (std::fseek(file->get(), 0, SEEK_END) != 0) return IoError("cannot seek in " + path);
  const int64_t size = std::ftell(file->get());
  if (size != h.rows_offset + h.info.row_bytes + 8)
    return Lost(path, "holds " + std::to_string(size) + " bytes where its header announces " +
                          std::to_string(h.rows_offset + h.info.row_bytes + 8) +
                          " (truncated or corrupted)");
  if (std::fseek(file->get(), h.rows_offset, SEEK_SET) != 0)
    return IoError("cannot seek in " + path);
  return h;
}

}  // namespace

uint64_t Checksum64(uint64_t seed, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = seed;
  auto mix = [&h](uint64_t w) {
    h = (h ^ w) * 0x9e3779b97f4a7c15ULL;
    h ^= h >> 29;
  };
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    mix(w);
  }
  uint64_t tail = 0;
  for (size_t j = 0; i + j < n; ++j) tail |= uint64_t{p[i + j]} << (8 * j);
  mix(tail ^ (uint64_t{n} << 56));
  return h;
}

Status WriteSavedSequenceFile(const std::string& path, const DiskEntryMeta& meta,
                              const SavedSequence& saved) {
  const std::string tmp = path + ".tmp";
  File f(std::fopen(tmp.c_str(), "wb"));
  if (f == nullptr) return IoError("cannot create " + tmp);
  const std::string header = HeaderBytes(meta, saved);
  const uint64_t size = header.size(), header_sum = Checksum64(kSeed, header.data(), size);
  bool ok = std::fwrite(kMagic, 1, 8, f.get()) == 8 && std::fwrite(&size, 8, 1, f.get()) == 1 &&
            std::fwrite(header.data(), 1, size, f.get()) == size &&
            std::fwrite(&header_sum, 8, 1, f.get()) == 1;
  uint64_t sum = kSeed;
  for (int64_t l = 0; ok && l < saved.num_layers(); ++l)
    for (const SavedKvRows& part : saved.layer(l))
      for (const BackendTensor* t : {&part.k, &part.v}) {
        const size_t n = t->NumBytes();
        sum = Checksum64(sum, t->cview().data, n);
        ok = ok && std::fwrite(t->cview().data, 1, n, f.get()) == n;
      }
  ok = ok && std::fwrite(&sum, 8, 1, f.get()) == 1;
  ok = ok && std::fflush(f.get()) == 0;
  // On the disk before it counts (a restart finds it), and out of the page cache: an entry is
  // read again, if ever, from the disk, not from memory the service did not budget.
  ok = ok && ::fsync(::fileno(f.get())) == 0;
  if (ok) (void)::posix_fadvise(::fileno(f.get()), 0, 0, POSIX_FADV_DONTNEED);
  f.reset();
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return IoError("cannot write " + path + " (disk full?)");
  }
  return OkStatus();
}

StatusOr<SavedSequenceFileInfo> ReadSavedSequenceInfo(const std::string& path) {
  File f;
  MP_ASSIGN_OR_RETURN(Header h, OpenChecked(path, &f));
  return h.info;
}

StatusOr<SavedSequence> ReadSavedSequenceFile(Backend& backend, const std::string& path,
                                              const ModelConfig& config) {
  File f;
  MP_ASSIGN_OR_RETURN(Header h, OpenChecked(path, &f));
  MP_ASSIGN_OR_RETURN(h.options.policy,
                      ParseAttentionPolicy(h.policy_json, config.num_hidden_layers,
                                           config.num_key_value_heads, path));
  std::vector<std::vector<SavedKvRows>> layers(h.layers.size());
  // The checksum runs behind the reads, one tensor after the other on threads of its own (each
  // task waits for the one before it), so that the file is read at the disk's rate. Declared
  // after `layers`: on an early return it waits for the tasks before the rows they read go.
  ChainedChecksum sum(kSeed);
  for (size_t l = 0; l < h.layers.size(); ++l)
    for (const PartInfo& p : h.layers[l]) {
      SavedKvRows part{.retention = p.retention, .ranges = p.ranges, .k = {}, .v = {}};
      const Shape shape{p.rows, p.heads, p.head_dim};
      MP_ASSIGN_OR_RETURN(part.k, backend.AllocateHost(p.dtype, shape));
      MP_ASSIGN_OR_RETURN(part.v, backend.AllocateHost(p.dtype, shape));
      for (const BackendTensor* t : {&part.k, &part.v}) {
        const size_t n = t->NumBytes();
        if (std::fread(t->view().data, 1, n, f.get()) != n) return Lost(path, "truncated rows");
        sum.Add(t->cview().data, n);
      }
      layers[l].push_back(std::move(part));
    }
  uint64_t want = 0;
  if (std::fread(&want, 8, 1, f.get()) != 1 || want != sum.Get())
    return Lost(path, "the rows' checksum does not match (corrupted)");
  return SavedSequence::FromParts(std::move(h.options), h.info.length, std::move(h.info.stored),
                                  std::move(layers));
}

}  // namespace millipede
