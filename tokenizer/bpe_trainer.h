// A small, deterministic byte-level BPE trainer for giving generated demo models a tokenizer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace millipede {

// Trains a byte-level BPE on `corpus` (valid UTF-8 strings) and returns a complete
// tokenizer.json text that both millipede::Tokenizer and Hugging Face `tokenizers` load and
// encode identically. The vocabulary is the 256 byte symbols (ids 0..255 in byte order), then
// one token per learned merge; text is pre-split with the Llama 3 regex and decoded with the
// ByteLevel decoder, so any text, including bytes never seen in training, round-trips.
//
// At most `num_merges` merges are learned, fewer when no pair occurs at least twice any more.
// Each step merges the most frequent adjacent pair (ties: the smallest pair of ids). Each of
// `special_tokens` (non-empty, distinct) becomes a special added token after the vocabulary.
// The output depends only on the arguments.
StatusOr<std::string> TrainByteLevelBpe(const std::vector<std::string>& corpus, int32_t num_merges,
                                        const std::vector<std::string>& special_tokens);

}  // namespace millipede
