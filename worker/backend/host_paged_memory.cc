#include "worker/backend/host_paged_memory.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace millipede {
namespace {

// An anonymous in-memory file; closed once no chunk of it is left.
class MemoryFile {
 public:
  explicit MemoryFile(int fd) : fd_(fd) {}
  ~MemoryFile() { close(fd_); }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

class HostChunk final : public MemoryChunk {
 public:
  HostChunk(std::shared_ptr<MemoryFile> file, int64_t offset, int64_t n)
      : file_(std::move(file)), offset_(offset) {
    bytes = n;
  }
  // Unmapped everywhere: its pages go back to the system.
  ~HostChunk() override {
    fallocate(file_->fd(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset_, bytes);
  }
  int fd() const { return file_->fd(); }
  int64_t offset() const { return offset_; }

 private:
  std::shared_ptr<MemoryFile> file_;
  int64_t offset_;
};

// A tensor's address range; unmapped before its chunks are let go.
class HostPagedMemory final : public PagedMemory {
 public:
  HostPagedMemory(char* base, int64_t total) : base_(base), total_(total) {}
  ~HostPagedMemory() { munmap(base_, static_cast<size_t>(total_)); }
  HostPagedMemory(const HostPagedMemory&) = delete;
  HostPagedMemory& operator=(const HostPagedMemory&) = delete;
  char* base() const { return base_; }

 private:
  char* base_;
  int64_t total_;
};

Status Errno(const std::string& what) {
  return ResourceExhaustedError(what + ": " + std::strerror(errno));
}

// Maps `chunk` at `at` (inside a reserved range).
Status MapChunk(char* at, const HostChunk& chunk) {
  void* p = mmap(at, static_cast<size_t>(chunk.bytes), PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_FIXED, chunk.fd(), chunk.offset());
  if (p == MAP_FAILED) return Errno("paged host memory: cannot map a chunk");
  return OkStatus();
}

}  // namespace

int64_t HostPageBytes() { return static_cast<int64_t>(sysconf(_SC_PAGESIZE)); }

StatusOr<BackendTensor> AllocatePagedHost(DType dtype, const Shape& shape, int64_t chunk_bytes,
                                          const BackendTensor* share, int64_t share_chunks) {
  MP_ASSIGN_OR_RETURN(const size_t bytes, CheckedNumBytes(shape, dtype));
  MP_REQUIRE(bytes <= (size_t{1} << 60), "tensor of ", bytes, " bytes is too large");
  MP_ASSIGN_OR_RETURN(PagedPlan plan, PlanPaged(static_cast<int64_t>(bytes), HostPageBytes(),
                                                chunk_bytes, share, share_chunks));
  void* base = mmap(nullptr, static_cast<size_t>(plan.total), PROT_NONE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) return Errno("paged host memory: cannot reserve addresses");
  auto memory = std::make_shared<HostPagedMemory>(static_cast<char*>(base), plan.total);
  int64_t at = 0;
  for (const auto& c : plan.shared) {
    const auto* chunk = dynamic_cast<const HostChunk*>(c.get());
    MP_REQUIRE(chunk != nullptr, "paged host memory: a chunk of another backend");
    MP_RETURN_IF_ERROR(MapChunk(memory->base() + at, *chunk));
    memory->chunks.push_back(c);
    at += c->bytes;
  }
  if (!plan.new_bytes.empty()) {
    const int fd = memfd_create("millipede-kv", MFD_CLOEXEC);
    if (fd < 0) return Errno("paged host memory: no memory file");
    auto file = std::make_shared<MemoryFile>(fd);
    if (ftruncate(fd, plan.total - at) != 0) return Errno("paged host memory: cannot size a file");
    int64_t offset = 0;
    for (const int64_t n : plan.new_bytes) {
      auto chunk = std::make_shared<HostChunk>(file, offset, n);
      MP_RETURN_IF_ERROR(MapChunk(memory->base() + at, *chunk));
      memory->chunks.push_back(std::move(chunk));
      at += n;
      offset += n;
    }
  }
  const TensorView view{memory->base(), dtype, shape};
  return BackendTensor(view, nullptr, std::move(memory));
}

}  // namespace millipede
