#include "worker/engine/engine_options.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "common/file_util.h"

namespace millipede {

const char* DecodeGraphsName(DecodeGraphs mode) {
  switch (mode) {
    case DecodeGraphs::kAuto: return "auto";
    case DecodeGraphs::kOff: return "off";
    case DecodeGraphs::kUnrecorded: return "unrecorded";
  }
  return "?";
}

StatusOr<DecodeGraphs> ParseDecodeGraphs(std::string_view name) {
  if (name == "auto") return DecodeGraphs::kAuto;
  if (name == "off") return DecodeGraphs::kOff;
  if (name == "unrecorded") return DecodeGraphs::kUnrecorded;
  return InvalidArgumentError("decode graphs: '" + std::string(name) +
                              "' is not auto, off or unrecorded");
}

StatusOr<bool> ParseSplitKvHeads(std::string_view value) {
  if (value == "on") return true;
  if (value == "off") return false;
  return InvalidArgumentError("--split-kv-heads takes on or off, got \"" + std::string(value) +
                              "\"");
}

StatusOr<bool> ParseDecodeMlp(std::string_view value) {
  if (value == "split") return true;
  if (value == "whole") return false;
  return InvalidArgumentError("--decode-mlp takes split or whole, got \"" + std::string(value) +
                              "\"");
}

namespace {

// FNV-1a, 64 bits.
void Mix(uint64_t* h, std::string_view bytes) {
  for (unsigned char c : bytes) *h = (*h ^ c) * 0x100000001b3ULL;
  *h = (*h ^ 0xff) * 0x100000001b3ULL;  // a separator: ("ab", "c") != ("a", "bc")
}

// A file's name, size and modification time.
void MixFile(uint64_t* h, const std::filesystem::path& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  const auto time = std::filesystem::last_write_time(path, ec);
  Mix(h, path.filename().string());
  Mix(h, std::to_string(ec ? 0 : size) + " " +
             std::to_string(ec ? 0 : time.time_since_epoch().count()));
}

}  // namespace

std::string WeightsFingerprint(const EngineOptions& options) {
  namespace fs = std::filesystem;
  uint64_t h = 0xcbf29ce484222325ULL;
  std::error_code ec;
  if (options.model_path.empty()) {
    const ModelConfig& c = options.random_config;
    const RandomWeightsOptions& r = options.random_weights;
    Mix(&h, "random " + std::to_string(static_cast<int>(r.dtype)) + " " + std::to_string(r.seed) +
                " " + std::to_string(r.std) + " " + std::to_string(r.locality));
    Mix(&h, std::to_string(c.vocab_size) + " " + std::to_string(c.hidden_size) + " " +
                std::to_string(c.intermediate_size) + " " + std::to_string(c.num_hidden_layers) +
                " " + std::to_string(c.num_attention_heads) + " " +
                std::to_string(c.num_key_value_heads) + " " + std::to_string(c.head_dim));
  } else if (fs::is_directory(options.model_path, ec)) {
    StatusOr<std::string> config = ReadFileToString(options.model_path + "/config.json");
    Mix(&h, config.ok() ? *config : std::string());
    std::vector<fs::path> weights;
    for (const fs::directory_entry& e : fs::directory_iterator(options.model_path, ec)) {
      const std::string ext = e.path().extension().string();
      if (ext == ".safetensors" || ext == ".json" || ext == ".gguf") weights.push_back(e.path());
    }
    std::sort(weights.begin(), weights.end());
    for (const fs::path& p : weights) MixFile(&h, p);
  } else {
    MixFile(&h, options.model_path);
  }
  if (!options.kv_scales.empty()) {
    // Each scale by its bits: exact, however small.
    std::string scales = "kv scales";
    for (size_t i = 0; i < options.kv_scales.k.size(); ++i) {
      scales += ' ';
      scales += std::to_string(FloatBits(options.kv_scales.k[i]));
      scales += '/';
      scales += std::to_string(FloatBits(options.kv_scales.v[i]));
    }
    Mix(&h, scales);
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

}  // namespace millipede
