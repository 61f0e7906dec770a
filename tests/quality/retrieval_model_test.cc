// The construction and the task generators, without running the model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "common/checkpoint/model_tensors.h"
#include "quality_test_util.h"
#include "worker/model_presets.h"

namespace millipede {
namespace {

using testing::MustMakeTask;
using testing::RetrievalData;

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

TEST(RetrievalTasksTest, PromptsHaveTheRightShapeAndRoundTrip) {
  const RetrievalVocab& v = RetrievalData().vocab;
  const Tokenizer& tok = *RetrievalData().tokenizer;
  for (TaskKind kind : {TaskKind::kNeedle, TaskKind::kKvRetrieval, TaskKind::kChain}) {
    for (double depth : {0.0, 0.3, 1.0}) {
      TaskSpec spec;
      spec.kind = kind;
      spec.context_tokens = 777;
      spec.depth = depth;
      spec.seed = 5;
      const QualityTask t = MustMakeTask(spec);
      ASSERT_EQ(t.prompt.size(), 777u);
      EXPECT_EQ(t.prompt.front(), v.bos);
      const size_t answers = kind == TaskKind::kChain ? spec.hops : 1;
      ASSERT_EQ(t.expected.size(), answers);
      ASSERT_EQ(t.needle_positions.size(), answers);
      // The needle at `depth` sits within a sentence of depth * length.
      EXPECT_NEAR(static_cast<double>(t.needle_positions[0]), depth * 777, 40);
      // Each answering needle's value is the expected answer.
      for (size_t i = 0; i < answers; ++i) {
        const int32_t needle = t.prompt[static_cast<size_t>(t.needle_positions[i])];
        const auto it = std::find(v.needle_ids.begin(), v.needle_ids.end(), needle);
        ASSERT_NE(it, v.needle_ids.end());
        EXPECT_EQ(v.value_ids[(it - v.needle_ids.begin()) % kRetrievalSymbols], t.expected[i]);
      }
      // The text of a prompt tokenizes back to the same ids.
      auto text = tok.Decode(t.prompt);
      ASSERT_TRUE(text.ok());
      auto ids = tok.Encode(*text);
      ASSERT_TRUE(ids.ok());
      EXPECT_EQ(*ids, t.prompt) << TaskKindName(kind) << " depth " << depth;
      // Deterministic.
      EXPECT_EQ(MustMakeTask(spec).prompt, t.prompt);
    }
  }
}

TEST(RetrievalTasksTest, ControlsTakeTheAnswerAway) {
  const RetrievalVocab& v = RetrievalData().vocab;
  TaskSpec spec;
  spec.context_tokens = 300;
  const QualityTask real = MustMakeTask(spec);
  spec.control = TaskControl::kRemoveNeedle;
  const QualityTask removed = MustMakeTask(spec);
  spec.control = TaskControl::kWrongKey;
  const QualityTask wrong = MustMakeTask(spec);
  const size_t at = static_cast<size_t>(real.needle_positions[0]);
  EXPECT_EQ(removed.prompt[at], v.filler);
  EXPECT_NE(wrong.prompt[at], real.prompt[at]);
  EXPECT_EQ(removed.expected, real.expected);
  for (size_t i = 0; i < real.prompt.size(); ++i) {
    if (i == at) continue;
    EXPECT_EQ(removed.prompt[i], real.prompt[i]);
    EXPECT_EQ(wrong.prompt[i], real.prompt[i]);
  }
}

TEST(RetrievalTasksTest, RejectsImpossibleSpecs) {
  const Haystack& h = *RetrievalData().haystack;
  TaskSpec spec;
  spec.context_tokens = 2;
  EXPECT_FALSE(MakeTask(h, spec).ok());
  spec = TaskSpec{};
  spec.depth = 1.5;
  EXPECT_FALSE(MakeTask(h, spec).ok());
  spec = TaskSpec{};
  spec.kind = TaskKind::kChain;
  spec.hops = kRetrievalSymbols;
  EXPECT_FALSE(MakeTask(h, spec).ok());
  spec = TaskSpec{};
  spec.kind = TaskKind::kKvRetrieval;
  spec.num_pairs = kRetrievalSymbols + 1;
  EXPECT_FALSE(MakeTask(h, spec).ok());
}

}  // namespace
}  // namespace millipede
