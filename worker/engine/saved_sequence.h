// The prefix cache's host tier on one rank: a cached sequence's KV saved to host memory once its
// backend memory is wanted (SequenceTable::Demote), and restored into a new sequence on a hit
// (Sequence::RestorePrefix) as a kept sequence is. What stays: the options it was started with,
// its length, this rank's stored positions, and every layer's held rows, part by part (a store
// per group of heads has two), in position order.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "worker/engine/sequence.h"
#include "worker/kv/saved_kv_rows.h"

namespace millipede {

class SavedSequence {
 public:
  // Copies every layer's held rows of `seq` into new host memory (AllocateHost) and waits for
  // the copies; `seq` is unchanged.
  static StatusOr<SavedSequence> Save(Backend& backend, const Sequence& seq);
  // One read back from elsewhere (the disk tier): `layers` as Save lays them out.
  static SavedSequence FromParts(SequenceOptions options, int64_t length,
                                 std::vector<TokenRange> stored,
                                 std::vector<std::vector<SavedKvRows>> layers);

  const SequenceOptions& options() const { return options_; }
  int64_t length() const { return length_; }
  const std::vector<TokenRange>& stored() const { return stored_; }
  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
  // Layer `layer`'s parts, in the store's part order.
  const std::vector<SavedKvRows>& layer(int64_t layer) const {
    return layers_[static_cast<size_t>(layer)];
  }
  // Host bytes of every saved row (K and V).
  int64_t NumBytes() const;

 private:
  SequenceOptions options_;
  int64_t length_ = 0;
  std::vector<TokenRange> stored_;
  std::vector<std::vector<SavedKvRows>> layers_;
};

}  // namespace millipede
