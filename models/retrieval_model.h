// A Llama model whose weights are constructed, not trained, so that dense attention answers
// retrieval questions exactly at any context length up to max_position_embeddings (1M).
//
// The vocabulary (a byte-level BPE plus added tokens) has kRetrievalSymbols symbols s and:
//   <ks>, <vs>   query tokens for key s (a value token <vs> is also the query for key s, so an
//                answer can be the next question of a chain);
//   <ka:vb>      a needle: key a carries value b;
//   <none>       what the model answers when no needle matches;
//   <filler>, bytes and merges: haystack (the model treats all of them alike).
// A query token attends by content to the needle with its key, anywhere before it, and the model
// outputs <vb>. The layout of the residual stream, the heads and the margins are described in
// docs/quality.md; the numbers live in retrieval_model.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/model_config.h"
#include "common/status.h"
#include "tokenizer/tokenizer.h"
#include "worker/random_weights.h"

namespace millipede {

inline constexpr int kRetrievalSymbols = 32;
inline constexpr char kRetrievalFillerToken[] = "<filler>";
inline constexpr char kRetrievalNoneToken[] = "<none>";
inline constexpr char kRetrievalBosToken[] = "<|begin_of_text|>";
inline constexpr char kRetrievalEosToken[] = "<|end_of_text|>";

std::string RetrievalKeyToken(int symbol);                // "<k7>"
std::string RetrievalValueToken(int symbol);              // "<v7>"
std::string RetrievalNeedleToken(int key, int value);     // "<k7:v12>"

// Haystack text: sentences that each start with a space, so that the tokens of a concatenation
// are the concatenation of the sentences' tokens (the split regex cuts before " Word").
std::vector<std::string> RetrievalHaystackSentences();

// The tokenizer.json of the retrieval model: a byte-level BPE trained on the haystack sentences
// with the tokens above added (BOS and EOS special, the others ordinary added tokens, so that
// decoded text shows them), and a post-processor template that puts BOS first when special tokens
// are added (as Llama 3's). Deterministic.
StatusOr<std::string> RetrievalTokenizerJson();

// The ids of the retrieval tokens in a tokenizer built by RetrievalTokenizerJson.
struct RetrievalVocab {
  int32_t bos = -1, eos = -1, filler = -1, none = -1;
  std::vector<int32_t> key_ids;     // [kRetrievalSymbols]: <ks>
  std::vector<int32_t> value_ids;   // [kRetrievalSymbols]: <vs>
  std::vector<int32_t> needle_ids;  // [kRetrievalSymbols^2]: <ka:vb> at a * symbols + b
  int32_t vocab_size = 0;           // the tokenizer's

  int32_t needle(int key, int value) const { return needle_ids[key * kRetrievalSymbols + value]; }
  // The symbol a value token stands for, or -1 for any other id.
  int ValueSymbol(int32_t id) const;

  // NotFound naming the first missing token when `tokenizer` lacks one.
  static StatusOr<RetrievalVocab> FromTokenizer(const Tokenizer& tokenizer);
};

// Checks that `c` has the shape the construction needs (the "retrieval" preset's: llama, hidden
// 512, 3 layers, 8 query heads over 2 KV heads of head_dim 64, rope_theta 1e18, no scaling, no
// biases, untied) and a vocabulary covering `vocab`.
Status CheckRetrievalConfig(const ModelConfig& c, const RetrievalVocab& vocab);

// Every weight of ExpectedModelTensors(c), in that order, stored as `dtype` (F32, BF16 or F16;
// every constructed value is 0 or +- a short binary fraction such as 1/16, 3/8, 17/16 or 8, so
// all three hold them exactly).
StatusOr<std::vector<NamedHostTensor>> BuildRetrievalWeights(const ModelConfig& c,
                                                             const RetrievalVocab& vocab,
                                                             DType dtype);

// Writes the complete model (config.json, model.safetensors, tokenizer.json) to `dir` (created
// if missing) with weights stored as `dtype`.
Status WriteRetrievalModel(const std::string& dir, DType dtype);

}  // namespace millipede
