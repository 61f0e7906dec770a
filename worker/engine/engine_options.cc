#include "worker/engine/engine_options.h"

#include <string>

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

}  // namespace millipede
