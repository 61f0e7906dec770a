#include "worker/engine/saved_sequence.h"

#include <string>

namespace millipede {

StatusOr<SavedSequence> SavedSequence::Save(Backend& backend, const Sequence& seq) {
  SavedSequence saved;
  saved.options_ = seq.options();
  saved.length_ = seq.length();
  saved.stored_ = seq.stored();
  const int64_t layers = seq.num_layers();
  saved.layers_.resize(static_cast<size_t>(layers));
  for (int64_t l = 0; l < layers; ++l) {
    const KvStore& store = seq.kv(l);
    for (int64_t p = 0; p < store.num_parts(); ++p) {
      StatusOr<SavedKvRows> part = store.SaveRows(backend, p);
      if (!part.ok())
        return Status(part.status().code(),
                      "layer " + std::to_string(l) + ": " + std::string(part.status().message()));
      saved.layers_[static_cast<size_t>(l)].push_back(std::move(part).value());
    }
  }
  return saved;
}

SavedSequence SavedSequence::FromParts(SequenceOptions options, int64_t length,
                                       std::vector<TokenRange> stored,
                                       std::vector<std::vector<SavedKvRows>> layers) {
  SavedSequence saved;
  saved.options_ = std::move(options);
  saved.length_ = length;
  saved.stored_ = std::move(stored);
  saved.layers_ = std::move(layers);
  return saved;
}

int64_t SavedSequence::NumBytes() const {
  int64_t bytes = 0;
  for (const auto& parts : layers_)
    for (const SavedKvRows& part : parts) bytes += part.NumBytes();
  return bytes;
}

}  // namespace millipede
