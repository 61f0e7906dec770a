// The prefix cache's disk tier on one rank: a saved sequence (SavedSequence) and what the
// coordinator needs to index it again after a restart, in one file.
//
// Layout (integers little-endian):
//   "MPKVSEQ1"                 8 bytes: magic and format version
//   header size H              8 bytes
//   header                     H bytes: the entry (id, key, model key, tokens, reuse lengths),
//                              the sequence (options with the policy as JSON, length, stored
//                              positions) and each layer's parts (retention, positions, dtype,
//                              shape)
//   header checksum            8 bytes
//   rows                       each layer's parts in order, each part's K then V bytes
//   rows checksum              8 bytes
// A file is written under a temporary name, synced, dropped from the page cache and renamed once
// complete. Reading checks the magic, both checksums and the size the header announces: a
// truncated or corrupted file is an IoError, never served.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/model_config.h"
#include "common/status.h"
#include "worker/engine/saved_sequence.h"

namespace millipede {

// What the coordinator indexes an entry by.
struct DiskEntryMeta {
  uint64_t id = 0;             // the entry (the job that made it)
  uint64_t key = 0;            // PrefixKey of what changes its KV (model, policy, KV dtype)
  std::string model_key;       // the coordinator's model key: another model's entries are ignored
  std::vector<int32_t> tokens;  // the tokens a later prompt may reuse
  bool every_length = true;    // reusable at every length, else at `lengths` only
  std::vector<int64_t> lengths;
};

// A file's header: the entry, and the sequence's length and this rank's stored positions.
struct SavedSequenceFileInfo {
  DiskEntryMeta meta;
  SequenceOptions options;  // without the policy (ReadSavedSequenceFile parses it)
  int64_t length = 0;
  std::vector<TokenRange> stored;
  int64_t row_bytes = 0;  // the K and V bytes the file holds
};

// A 64-bit checksum of `n` bytes continuing `seed` (any change of one 8-byte word changes it).
uint64_t Checksum64(uint64_t seed, const void* data, size_t n);

// Writes `saved` with `meta` to `path` (through `path`.tmp, renamed when complete).
Status WriteSavedSequenceFile(const std::string& path, const DiskEntryMeta& meta,
                              const SavedSequence& saved);
// The header of the file at `path`, its size checked against it (the rows' checksum is checked
// by ReadSavedSequenceFile). DataLoss for a file that is not one, truncated or corrupted.
StatusOr<SavedSequenceFileInfo> ReadSavedSequenceInfo(const std::string& path);
// The whole file, its rows read into new host memory (AllocateHost) and checked; the policy is
// parsed for a model of `config`'s layers and KV heads.
StatusOr<SavedSequence> ReadSavedSequenceFile(Backend& backend, const std::string& path,
                                              const ModelConfig& config);

}  // namespace millipede
