// The prefix cache's disk tier on one rank: saved sequences (SavedSequence) written to files
// under DIR/rank-R (saved_sequence_file.h) by a thread of their own, read back on a hit, found
// again when the worker restarts.
//
// Write queues an entry; until its file is complete it stays readable from memory (Pending),
// and Collect (called by the owner's thread) frees the memory of those written, so that host
// memory is only ever freed where it was allocated. A failed write (a full disk) loses the entry:
// later reads of it are NotFound and the caller recomputes.
//
// Promote queues a read of an entry into host memory on a second thread (a hit moves the entry
// up to the host tier without holding the steps up for the read); TakePromoted hands the owner
// the reads that ended.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "worker/engine/saved_sequence_file.h"

namespace millipede {

class DiskTier {
 public:
  // Opens (creating) `dir`/rank-`rank` and reads the header of every entry file there: files
  // that are not complete entries (truncated, corrupted, left half-written) are removed.
  static StatusOr<std::unique_ptr<DiskTier>> Open(const std::string& dir, int rank);
  ~DiskTier();
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  // Every entry on disk, as found by Open and written since.
  std::vector<SavedSequenceFileInfo> Entries() const;
  // Queues `saved` to be written as entry meta.id (replacing a file of that id).
  void Write(DiskEntryMeta meta, SavedSequence saved);
  // Entry `id` still in memory (queued or being written), or null. Valid until Collect or Drop.
  const SavedSequence* Pending(uint64_t id) const;
  // Entry `id`'s header (options via Read), or none.
  std::optional<SavedSequenceFileInfo> Info(uint64_t id) const;
  // Entry `id` read back (and checked). NotFound when there is none; IoError for a file that
  // fails its checks, which is removed.
  StatusOr<SavedSequence> Read(Backend& backend, uint64_t id, const ModelConfig& config);
  // Queues a read of entry `id` into host memory (backend.AllocateHost, which must be callable
  // from another thread); `backend` and `config` must outlive the tier.
  void Promote(Backend& backend, uint64_t id, const ModelConfig& config);
  // A read Promote queued, once ended: the entry in host memory, or why not (NotFound, or an
  // IoError for a file that failed its checks, which is removed).
  struct Promotion {
    uint64_t id = 0;
    StatusOr<SavedSequence> read;
  };
  // The promotions that ended since the last call, in order (dropped entries' left out).
  std::vector<Promotion> TakePromoted();
  // Removes entry `id` (a queued one is not written, nor read).
  void Drop(uint64_t id);
  // Frees the memory of entries written since the last call; returns how many failed to write.
  int64_t Collect();
  // Bytes of the entries' rows on disk and queued.
  int64_t bytes() const;
  // Blocks until every queued entry is written (tests, shutdown).
  void Flush();
  // Seconds the writer thread spent writing files, cumulative.
  double write_seconds() const;

 private:
  explicit DiskTier(std::string dir) : dir_(std::move(dir)) {}
  std::string PathOf(uint64_t id) const;
  void Run();
  void RunReads();
  // Forgets entry `id`'s file and removes it (a read found it damaged).
  void RemoveFile(uint64_t id);
  struct ReadJob {
    uint64_t id = 0;
    Backend* backend = nullptr;
    const ModelConfig* config = nullptr;
    bool dropped = false;
  };

  struct Job {
    DiskEntryMeta meta;
    SavedSequence saved;
    bool dropped = false;
  };
  const std::string dir_;
  mutable std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::map<uint64_t, SavedSequenceFileInfo> files_;  // complete files, by id
  std::map<uint64_t, std::shared_ptr<Job>> pending_;  // queued or being written
  std::deque<std::shared_ptr<Job>> queue_;
  std::vector<std::shared_ptr<Job>> written_;  // to free on the owner's thread
  int64_t failed_ = 0;
  double write_s_ = 0;
  bool writing_ = false, stop_ = false;
  std::thread thread_;
  std::condition_variable read_wake_;
  std::deque<std::shared_ptr<ReadJob>> reads_;  // queued
  std::shared_ptr<ReadJob> reading_;            // being read
  // Ended, for TakePromoted; a dropped entry's read too, so that its memory is freed there, on
  // the owner's thread.
  std::vector<std::pair<Promotion, bool>> promoted_;
  std::thread reader_;
};

}  // namespace millipede
