// The constructed retrieval model without running it: its vocabulary, weights and shape checks.
#include "models/retrieval_model.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>

#include "models/model_presets.h"
#include "tokenizer/tokenizer.h"

namespace millipede {
namespace {

struct RetrievalTokens {
  std::unique_ptr<Tokenizer> tokenizer;
  RetrievalVocab vocab;
};

// The retrieval model's tokenizer and vocabulary, built once per process.
const RetrievalTokens& RetrievalData() {
  static const RetrievalTokens* data = [] {
    auto* d = new RetrievalTokens;
    StatusOr<std::string> json = RetrievalTokenizerJson();
    EXPECT_TRUE(json.ok()) << json.status().ToString();
    StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
        Tokenizer::FromJson(json.ok() ? *json : "", "retrieval tokenizer");
    EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
    d->tokenizer = std::move(tokenizer).value();
    StatusOr<RetrievalVocab> vocab = RetrievalVocab::FromTokenizer(*d->tokenizer);
    EXPECT_TRUE(vocab.ok()) << vocab.status().ToString();
    d->vocab = *vocab;
    return d;
  }();
  return *data;
}

ModelConfig RetrievalConfig() {
  ModelConfig c = *ModelPreset("retrieval");
  c.vocab_size = RetrievalData().vocab.vocab_size;
  return c;
}

TEST(RetrievalModelTest, VocabularyHasEveryTaskTokenOnce) {
  const RetrievalVocab& v = RetrievalData().vocab;
  std::set<int32_t> ids = {v.bos, v.eos, v.filler, v.none};
  ids.insert(v.key_ids.begin(), v.key_ids.end());
  ids.insert(v.value_ids.begin(), v.value_ids.end());
  ids.insert(v.needle_ids.begin(), v.needle_ids.end());
  EXPECT_EQ(ids.size(), 4u + 2 * kRetrievalSymbols + kRetrievalSymbols * kRetrievalSymbols);
  EXPECT_LT(*ids.rbegin(), v.vocab_size);
  EXPECT_EQ(v.ValueSymbol(v.value_ids[7]), 7);
  EXPECT_EQ(v.ValueSymbol(v.key_ids[7]), -1);
  // Only BOS and EOS are special: decoded answers show the task tokens.
  const Tokenizer& tok = *RetrievalData().tokenizer;
  EXPECT_TRUE(tok.IsSpecial(v.bos));
  EXPECT_EQ(tok.bos_id(), v.bos);  // the template puts the sink first
  EXPECT_FALSE(tok.IsSpecial(v.needle(3, 9)));
  EXPECT_EQ(*tok.Decode({v.key_ids[3], v.needle(3, 9), v.value_ids[9]}, true), "<k3><k3:v9><v9>");
}

TEST(RetrievalModelTest, WeightsAreExactInEveryDtype) {
  const ModelConfig c = RetrievalConfig();
  auto f32 = BuildRetrievalWeights(c, RetrievalData().vocab, DType::kF32);
  ASSERT_TRUE(f32.ok()) << f32.status().ToString();
  for (DType low : {DType::kBF16, DType::kF16}) {
    auto w = BuildRetrievalWeights(c, RetrievalData().vocab, low);
    ASSERT_TRUE(w.ok());
    ASSERT_EQ(w->size(), f32->size());
    int64_t nonzero = 0;
    for (size_t t = 0; t < f32->size(); ++t) {
      const HostTensor& a = (*f32)[t].tensor;
      const HostTensor& b = (*w)[t].tensor;
      ASSERT_EQ(a.NumElements(), b.NumElements());
      for (int64_t i = 0; i < a.NumElements(); ++i) {
        const float x = LoadAsFloat(a.view().data, DType::kF32, static_cast<size_t>(i));
        ASSERT_EQ(x, LoadAsFloat(b.view().data, low, static_cast<size_t>(i)))
            << (*f32)[t].name << " element " << i;
        nonzero += x != 0;
      }
    }
    EXPECT_GT(nonzero, 5000);  // 15875: the constructed entries
  }
}

TEST(RetrievalModelTest, RejectsOtherShapes) {
  ModelConfig c = RetrievalConfig();
  c.num_key_value_heads = 4;
  EXPECT_FALSE(CheckRetrievalConfig(c, RetrievalData().vocab).ok());
  c = RetrievalConfig();
  c.head_dim = 32;  // the old shape
  EXPECT_FALSE(CheckRetrievalConfig(c, RetrievalData().vocab).ok());
  c = RetrievalConfig();
  c.rope_theta = 10000;
  EXPECT_FALSE(CheckRetrievalConfig(c, RetrievalData().vocab).ok());
  c = RetrievalConfig();
  c.vocab_size = 100;
  EXPECT_FALSE(CheckRetrievalConfig(c, RetrievalData().vocab).ok());
  EXPECT_TRUE(CheckRetrievalConfig(RetrievalConfig(), RetrievalData().vocab).ok());
}

}  // namespace
}  // namespace millipede
