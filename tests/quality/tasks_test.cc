// The retrieval task generators on the retrieval model's tokenizer, without running the model.
#include <gtest/gtest.h>

#include <algorithm>

#include "quality_test_util.h"

namespace millipede {
namespace {

using testing::MustMakeTask;
using testing::RetrievalData;

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
