#include "worker/engine/disk_tier.h"

#include <chrono>
#include <filesystem>
#include <iostream>
#include <system_error>

namespace millipede {
namespace {

constexpr char kSuffix[] = ".mkv";

// The entry id a file name gives ("<id>.mkv"), or 0.
uint64_t IdOfName(const std::string& name) {
  const std::string suffix = kSuffix;
  if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(),
                                                   suffix) != 0)
    return 0;
  const std::string digits = name.substr(0, name.size() - suffix.size());
  if (digits.empty() || digits.size() > 19 ||
      digits.find_first_not_of("0123456789") != std::string::npos)
    return 0;
  return std::stoull(digits);
}

}  // namespace

StatusOr<std::unique_ptr<DiskTier>> DiskTier::Open(const std::string& dir, int rank) {
  namespace fs = std::filesystem;
  const fs::path path = fs::path(dir) / ("rank-" + std::to_string(rank));
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) return IoError("cannot create the KV cache directory " + path.string() + ": " + ec.message());
  std::unique_ptr<DiskTier> tier(new DiskTier(path.string()));
  for (const fs::directory_entry& e : fs::directory_iterator(path, ec)) {
    if (!e.is_regular_file()) continue;
    const std::string name = e.path().filename().string();
    const uint64_t id = IdOfName(name);
    StatusOr<SavedSequenceFileInfo> info =
        id != 0 ? ReadSavedSequenceInfo(e.path().string()) : StatusOr<SavedSequenceFileInfo>(
                                                                  IoError("not an entry file"));
    if (info.ok() && info->meta.id == id) {
      tier->files_[id] = std::move(info).value();
      continue;
    }
    // Left half-written, truncated or corrupted: never served.
    if (id != 0 || name.ends_with(std::string(kSuffix) + ".tmp")) {
      std::cerr << "KV cache: removing " << e.path().string() << ": "
                << (info.ok() ? std::string("its id does not match its name")
                              : info.status().ToString())
                << "\n";
      fs::remove(e.path(), ec);
    }
  }
  if (ec) return IoError("cannot list " + path.string() + ": " + ec.message());
  tier->thread_ = std::thread([t = tier.get()] { t->Run(); });
  tier->reader_ = std::thread([t = tier.get()] { t->RunReads(); });
  return tier;
}

DiskTier::~DiskTier() {
  Flush();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  read_wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (reader_.joinable()) reader_.join();
}

std::string DiskTier::PathOf(uint64_t id) const {
  return dir_ + "/" + std::to_string(id) + kSuffix;
}

std::vector<SavedSequenceFileInfo> DiskTier::Entries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<SavedSequenceFileInfo> out;
  for (const auto& [id, info] : files_) out.push_back(info);
  return out;
}

void DiskTier::Write(DiskEntryMeta meta, SavedSequence saved) {
  const uint64_t id = meta.id;
  auto job = std::make_shared<Job>(Job{std::move(meta), std::move(saved)});
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pending_.find(id);
    if (it != pending_.end()) it->second->dropped = true;
    pending_[id] = job;
    queue_.push_back(job);
  }
  wake_.notify_all();
}

void DiskTier::Run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;
    std::shared_ptr<Job> job = queue_.front();
    queue_.pop_front();
    const uint64_t id = job->meta.id;
    Status written = OkStatus();
    if (!job->dropped) {
      writing_ = true;
      lock.unlock();
      const auto t0 = std::chrono::steady_clock::now();
      written = WriteSavedSequenceFile(PathOf(id), job->meta, job->saved);
      const std::chrono::duration<double> took = std::chrono::steady_clock::now() - t0;
      lock.lock();
      write_s_ += took.count();
      writing_ = false;
      if (!written.ok()) {
        ++failed_;
        std::cerr << "KV cache: entry " << id << " not written: " << written.ToString() << "\n";
      }
    }
    if (written.ok() && !job->dropped) {
      SequenceOptions options = job->saved.options();
      options.policy = {};
      files_[id] = SavedSequenceFileInfo{job->meta, std::move(options), job->saved.length(),
                                         job->saved.stored(), job->saved.NumBytes()};
    } else if (written.ok() && job->dropped && pending_.count(id) == 0) {
      std::error_code ec;
      std::filesystem::remove(PathOf(id), ec);
    }
    auto it = pending_.find(id);
    if (it != pending_.end() && it->second == job) pending_.erase(it);
    written_.push_back(std::move(job));
    idle_.notify_all();
    read_wake_.notify_all();
  }
}

const SavedSequence* DiskTier::Pending(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = pending_.find(id);
  return it == pending_.end() ? nullptr : &it->second->saved;
}

std::optional<SavedSequenceFileInfo> DiskTier::Info(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = files_.find(id);
  if (it == files_.end()) return std::nullopt;
  return it->second;
}

StatusOr<SavedSequence> DiskTier::Read(Backend& backend, uint64_t id, const ModelConfig& config) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (files_.count(id) == 0)
      return NotFoundError("no prefix-cache entry " + std::to_string(id) + " on disk");
  }
  StatusOr<SavedSequence> read = ReadSavedSequenceFile(backend, PathOf(id), config);
  if (!read.ok()) RemoveFile(id);
  return read;
}

void DiskTier::RemoveFile(uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (files_.erase(id) > 0) {
    std::error_code ec;
    std::filesystem::remove(PathOf(id), ec);
  }
}

void DiskTier::Promote(Backend& backend, uint64_t id, const ModelConfig& config) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    reads_.push_back(std::make_shared<ReadJob>(ReadJob{id, &backend, &config}));
  }
  read_wake_.notify_all();
}

void DiskTier::RunReads() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    read_wake_.wait(lock, [this] { return stop_ || !reads_.empty(); });
    if (stop_) return;
    reading_ = reads_.front();
    reads_.pop_front();
    if (reading_->dropped) {
      reading_.reset();
      continue;
    }
    const std::shared_ptr<ReadJob> job = reading_;
    // An entry still being written is read once its file is complete.
    read_wake_.wait(lock, [&] { return stop_ || job->dropped || pending_.count(job->id) == 0; });
    if (stop_) return;
    if (job->dropped) {
      reading_.reset();
      continue;
    }
    lock.unlock();
    StatusOr<SavedSequence> got = Read(*job->backend, job->id, *job->config);
    lock.lock();
    reading_.reset();
    promoted_.push_back({Promotion{job->id, std::move(got)}, job->dropped});
  }
}

std::vector<DiskTier::Promotion> DiskTier::TakePromoted() {
  std::vector<std::pair<Promotion, bool>> ended;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ended.swap(promoted_);
  }
  std::vector<Promotion> out;
  for (auto& [promotion, dropped] : ended)
    if (!dropped) out.push_back(std::move(promotion));
  return out;  // the dropped ones' memory is freed here
}

void DiskTier::Drop(uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  read_wake_.notify_all();  // a read waiting for this entry's write
  for (const auto& read : reads_)
    if (read->id == id) read->dropped = true;
  if (reading_ && reading_->id == id) reading_->dropped = true;
  for (auto& [promotion, dropped] : promoted_)
    if (promotion.id == id) dropped = true;
  auto it = pending_.find(id);
  if (it != pending_.end()) {
    it->second->dropped = true;
    pending_.erase(it);
  }
  if (files_.erase(id) > 0) {
    std::error_code ec;
    std::filesystem::remove(PathOf(id), ec);
  }
}

int64_t DiskTier::Collect() {
  std::vector<std::shared_ptr<Job>> done;
  int64_t failed = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done.swap(written_);
    failed = failed_;
    failed_ = 0;
  }
  return failed;  // `done` frees its host memory here, on the owner's thread
}

int64_t DiskTier::bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t n = 0;
  for (const auto& [id, info] : files_) n += info.row_bytes;
  for (const auto& [id, job] : pending_) n += job->saved.NumBytes();
  return n;
}

double DiskTier::write_seconds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return write_s_;
}

void DiskTier::Flush() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [this] { return queue_.empty() && !writing_; });
}

}  // namespace millipede
