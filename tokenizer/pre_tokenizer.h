// The tokenizer.json "pre_tokenizer" section: splits normalized text into the pieces that the
// BPE model encodes independently.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/json_util.h"
#include "common/status.h"
#include "tokenizer/regex.h"

namespace millipede::tokenizer_internal {

// What Split does with the stretches its pattern matches (the "behavior" field).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// The regex behind ByteLevel's use_regex (GPT-2's), and the Llama 3 split regex.
extern const char kGpt2SplitPattern[];
extern const char kLlama3SplitPattern[];

// Metaspace's prepend_scheme: where the replacement character is put in front of a piece.
enum class PrependScheme { kAlways, kFirst, kNever };

// The fields of a Metaspace pre-tokenizer or decoder, as HF reads them: "replacement" (one
// character), "prepend_scheme" ("always", the default, "first" or "never"), "split" (default
// true); the legacy "add_prefix_space" is accepted where it agrees with the scheme (false needs
// "never"), as HF does.
struct MetaspaceOptions {
  std::string replacement;
  PrependScheme prepend_scheme = PrependScheme::kAlways;
  bool split = true;
};
StatusOr<MetaspaceOptions> ParseMetaspace(const Json& json, const std::string& what);

class PreTokenizer {
 public:
  ~PreTokenizer();

  // Parses the "pre_tokenizer" value: null (returns nullptr: the text is one piece), ByteLevel,
  // Split (Regex or String pattern, any behavior, invert), Metaspace, Digits or a Sequence of
  // those. Other types are Unimplemented errors naming the type.
  static StatusOr<std::unique_ptr<PreTokenizer>> FromJson(const Json& json,
                                                          const std::string& what);

  // Splits `text` (valid UTF-8) and appends the non-empty pieces to `pieces`, byte-level
  // spelled if a ByteLevel step ran. `at_start` says whether `text` begins the input (not
  // after an added token): Metaspace's "first" scheme only prepends there.
  Status Split(std::string_view text, std::vector<std::string>* pieces,
               bool at_start = true) const;

 private:
  struct Step;
  PreTokenizer();
  static Status CollectSteps(const Json& json, const std::string& what, int depth,
                             std::vector<Step>* steps);

  std::vector<Step> steps_;
};

// Cuts `text` at the given non-overlapping, sorted matches and appends the pieces that
// `behavior` keeps (HF semantics; `invert` swaps matches and the gaps between them).
void SplitAtMatches(std::string_view text, const std::vector<std::pair<size_t, size_t>>& matches,
                    SplitBehavior behavior, bool invert, std::vector<std::string>* pieces);
// As above; also appends to `begins` where in `text` each appended piece starts.
void SplitAtMatches(std::string_view text, const std::vector<std::pair<size_t, size_t>>& matches,
                    SplitBehavior behavior, bool invert, std::vector<std::string>* pieces,
                    std::vector<size_t>* begins);

}  // namespace millipede::tokenizer_internal
