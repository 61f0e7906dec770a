#include "checkpoint/checkpoint.h"

#include <utility>

#include "checkpoint/strict_json.h"
#include "common/file_util.h"
#include "common/json_util.h"

namespace millipede {
namespace {

bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find_first_of(std::string_view("/\0", 2)) == std::string::npos;
}

// The parsed weight_map: tensor name -> shard file name.
StatusOr<std::map<std::string, std::string>> ParseIndex(const std::string& text,
                                                        const std::string& what) {
  MP_ASSIGN_OR_RETURN(Json index, ParseJsonRejectingDuplicateKeys(text, what));
  MP_REQUIRE(index.is_object(), what, ": must be a JSON object, got ", index.type_name());
  if (index.contains("metadata")) {
    const Json& m = index["metadata"];
    MP_REQUIRE(m.is_null() || m.is_object(), what, ": \"metadata\" must be an object, got ",
               m.type_name());
  }
  MP_REQUIRE(index.contains("weight_map"), what, ": missing \"weight_map\"");
  const Json& wm = index["weight_map"];
  MP_REQUIRE(wm.is_object(), what, ": \"weight_map\" must be an object, got ", wm.type_name());
  MP_REQUIRE(!wm.empty(), what, ": \"weight_map\" is empty");
  std::map<std::string, std::string> out;
  for (const auto& [tensor, shard] : wm.items()) {
    MP_REQUIRE(shard.is_string(), what, ": weight_map entry for tensor \"", tensor,
               "\" must be a file name string, got ", shard.type_name());
    const std::string& file = shard.get_ref<const std::string&>();
    MP_REQUIRE(IsPlainFileName(file), what, ": shard \"", file, "\" for tensor \"", tensor,
               "\" is not a plain file name inside the checkpoint directory");
    out.emplace(tensor, file);
  }
  return out;
}

}  // namespace

StatusOr<Checkpoint> Checkpoint::Open(const std::string& model_dir) {
  Checkpoint c;
  c.dir_ = model_dir;
  const std::string single_path = JoinPath(model_dir, kSafetensorsSingleFileName);
  if (FileExists(single_path)) {
    MP_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(single_path));
    for (const TensorInfo& t : file.tensors()) c.where_.emplace(t.name, 0);
    c.files_.push_back(std::move(file));
    return c;
  }

  const std::string index_path = JoinPath(model_dir, kSafetensorsIndexFileName);
  if (!FileExists(index_path)) {
    return NotFoundError(model_dir + ": neither " + kSafetensorsSingleFileName + " nor " +
                         kSafetensorsIndexFileName + " exists");
  }
  MP_ASSIGN_OR_RETURN(std::string text, ReadFileToString(index_path));
  MP_ASSIGN_OR_RETURN(auto weight_map, ParseIndex(text, index_path));

  std::map<std::string, size_t> shard_pos;  // file name -> position in files_
  for (const auto& [tensor, shard] : weight_map) shard_pos.emplace(shard, 0);
  for (auto& [shard, pos] : shard_pos) {
    StatusOr<SafetensorsFile> file = SafetensorsFile::Open(JoinPath(model_dir, shard));
    if (!file.ok()) {
      return file.status().WithContext(index_path + ": shard \"" + shard + "\"");
    }
    pos = c.files_.size();
    c.files_.push_back(std::move(file).value());
  }

  for (const auto& [tensor, shard] : weight_map) {
    const size_t pos = shard_pos.at(shard);
    MP_REQUIRE(c.files_[pos].Has(tensor), index_path, ": tensor \"", tensor,
               "\" is listed in shard \"", shard, "\", which does not contain it");
    c.where_.emplace(tensor, pos);
  }
  for (const auto& [shard, pos] : shard_pos) {
    for (const TensorInfo& t : c.files_[pos].tensors()) {
      auto listed = weight_map.find(t.name);
      MP_REQUIRE(listed != weight_map.end(), index_path, ": shard \"", shard, "\" holds tensor \"",
                 t.name, "\", which weight_map does not list");
      MP_REQUIRE(listed->second == shard, index_path, ": tensor \"", t.name,
                 "\" is stored in both \"", listed->second, "\" and \"", shard, "\"");
    }
  }
  return c;
}

const TensorInfo* Checkpoint::Find(std::string_view name) const {
  auto it = where_.find(name);
  return it == where_.end() ? nullptr : files_[it->second].Find(name);
}

StatusOr<ConstTensorView> Checkpoint::Get(std::string_view name) const {
  auto it = where_.find(name);
  if (it == where_.end()) {
    return NotFoundError(dir_ + ": checkpoint has no tensor named \"" + std::string(name) + "\"");
  }
  return files_[it->second].Get(name);
}

std::vector<std::string> Checkpoint::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(where_.size());
  for (const auto& [name, pos] : where_) names.push_back(name);
  return names;
}

}  // namespace millipede
