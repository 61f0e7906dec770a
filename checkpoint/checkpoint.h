// A Hugging Face checkpoint directory: model.safetensors, or shards listed by
// model.safetensors.index.json ({"metadata": {...}, "weight_map": {tensor: shard file}}).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/safetensors.h"
#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

class Checkpoint {
 public:
  Checkpoint() = default;
  Checkpoint(Checkpoint&&) noexcept = default;
  Checkpoint& operator=(Checkpoint&&) noexcept = default;

  // Opens model_dir/model.safetensors if it exists (transformers prefers it too), otherwise the
  // shards named by model_dir/model.safetensors.index.json. Each file is validated as in
  // safetensors.h. For a sharded checkpoint the index must be an object with a non-empty
  // "weight_map" object of strings (and "metadata", if present, an object); shard names must
  // be plain file names inside model_dir (no "/", not "." or ".."), every listed tensor must be
  // in the shard named for it, and every tensor a shard holds must be listed for that shard, so
  // no tensor lives in two shards. NotFound if neither file or a named shard is missing;
  // InvalidArgument for anything malformed.
  static StatusOr<Checkpoint> Open(const std::string& model_dir);

  const std::string& dir() const { return dir_; }
  // The open files, in file-name order.
  const std::vector<SafetensorsFile>& files() const { return files_; }
  bool Has(std::string_view name) const { return where_.find(name) != where_.end(); }
  // The tensor's entry (offsets relative to its own file), or nullptr if absent.
  const TensorInfo* Find(std::string_view name) const;
  // A read-only host view into the mapped file holding the tensor; NotFound if there is none.
  // Alignment as for SafetensorsFile::Get.
  StatusOr<ConstTensorView> Get(std::string_view name) const;
  // All tensor names, sorted.
  std::vector<std::string> TensorNames() const;

 private:
  std::string dir_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t, std::less<>> where_;  // tensor name -> position in files_
};

}  // namespace millipede
