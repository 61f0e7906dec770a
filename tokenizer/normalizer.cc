#include "tokenizer/normalizer.h"

#include "tokenizer/normalizer_nfc.h"

namespace millipede::tokenizer_internal {
namespace {

Status CollectSteps(const Json& json, const std::string& what, int depth,
                    std::vector<Normalizer::Step>* steps) {
  MP_REQUIRE(depth < 16, what, ": normalizers nested too deeply");
  MP_REQUIRE(json.is_object(), what, ": expected an object, got ", json.type_name());
  MP_ASSIGN_OR_RETURN(std::string type, JsonGetString(json, "type", what));
  if (type == "NFC") {
    steps->push_back(Normalizer::Step::kNfc);
    return OkStatus();
  }
  if (type == "Sequence") {
    MP_REQUIRE(json.contains("normalizers") && json["normalizers"].is_array(), what,
               ": Sequence needs a \"normalizers\" array");
    const Json& items = json["normalizers"];
    for (size_t i = 0; i < items.size(); ++i) {
      MP_RETURN_IF_ERROR(CollectSteps(items[i], what + ".normalizers[" + std::to_string(i) + "]",
                                      depth + 1, steps));
    }
    return OkStatus();
  }
  return UnimplementedError(what + ": unsupported normalizer type \"" + type +
                            "\" (supported: NFC, Sequence)");
}

}  // namespace

StatusOr<std::unique_ptr<Normalizer>> Normalizer::FromJson(const Json& json,
                                                           const std::string& what) {
  if (json.is_null()) return std::unique_ptr<Normalizer>();
  auto normalizer = std::make_unique<Normalizer>();
  MP_RETURN_IF_ERROR(CollectSteps(json, what, 0, &normalizer->steps_));
  return normalizer;
}

std::string Normalizer::Normalize(std::string_view text) const {
  std::string current(text);
  for (Step step : steps_) {
    switch (step) {
      case Step::kNfc:
        current = NfcNormalize(current);
        break;
    }
  }
  return current;
}

}  // namespace millipede::tokenizer_internal
