// Vertical-slash and block-sparse prefill in the engine (CPU backend): a budget that covers every
// key gives dense attention, a small one changes the answer, prompts below dense_below_tokens run
// dense, dense and A-shape heads beside sparse ones keep their exact ring, every layer shares
// one set of sparse buffers (counted once by the plan), and block sizes the query tiles cannot
// serve are refused clearly.
#include <gtest/gtest.h>

#include "tests/worker/engine/single_sequence.h"
#include "tests/worker/engine_test_util.h"
#include "worker/generate.h"

namespace millipede {
namespace {

using testing::MaxRelError;
using testing::RandomEngineOptions;
using testing::RandomIds;
using testing::SmallConfig;

std::vector<float> PromptLogits(Engine& e, const std::vector<int32_t>& ids) {
  std::vector<float> logits;
  EXPECT_TRUE(testing::StartSequence(e, static_cast<int64_t>(ids.size()) + 4).ok());
  Status s = testing::ForwardToHost(e, ids, &logits);
  EXPECT_TRUE(s.ok()) << s.ToString();
  testing::EndSequence(e);
  return logits;
}

class SparsePolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto engine = Engine::Create(RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF32, 64));
    ASSERT_TRUE(engine.ok());
    engine_ = std::move(engine).value();
    ids_ = RandomIds(300, 97, 21);
    ASSERT_TRUE(engine_->SetPolicy(DensePolicy(2, 2)).ok());
    dense_ = PromptLogits(*engine_, ids_);
  }
  std::vector<float> With(const std::string& fields) {
    Status s =
        engine_->SetPolicy(testing::PolicyFor(*engine_, R"({"version": 1, )" + fields + "}"));
    EXPECT_TRUE(s.ok()) << s.ToString();
    return PromptLogits(*engine_, ids_);
  }
  std::unique_ptr<Engine> engine_;
  std::vector<int32_t> ids_;
  std::vector<float> dense_;
};

TEST_F(SparsePolicyTest, VerticalSlashCoveringEveryKeyIsDense) {
  EXPECT_LT(MaxRelError(With(R"("default": {"prefill": "vertical-slash"},
      "vertical_slash": {"last_queries": 64, "vertical": 300, "slash": 300})"),
                        dense_),
            1e-5);
  // Every diagonal alone covers every key too.
  EXPECT_LT(MaxRelError(With(R"("default": {"prefill": "vertical-slash"},
      "vertical_slash": {"last_queries": 8, "vertical": 1, "slash": 5000})"),
                        dense_),
            1e-5);
}

TEST_F(SparsePolicyTest, BlockSparseCoveringEveryBlockIsDense) {
  EXPECT_LT(MaxRelError(With(R"("default": {"prefill": "block-sparse"},
      "block_sparse": {"block": 16, "top_blocks": 19})"),
                        dense_),
            1e-5);
  EXPECT_LT(MaxRelError(With(R"("default": {"prefill": "block-sparse"},
      "block_sparse": {"block": 128, "top_blocks": 3})"),
                        dense_),
            1e-5);
}

TEST_F(SparsePolicyTest, SmallBudgetsChangeTheAnswerAndShortPromptsStayDense) {
  const std::string vs = R"("default": {"prefill": "vertical-slash"},
      "vertical_slash": {"last_queries": 16, "vertical": 4, "slash": 6})";
  EXPECT_GT(MaxRelError(With(vs), dense_), 1e-3);
  const std::string bs = R"("default": {"prefill": "block-sparse"},
      "block_sparse": {"block": 16, "top_blocks": 2})";
  EXPECT_GT(MaxRelError(With(bs), dense_), 1e-3);
  // Both kinds in one layer, one per KV head.
  EXPECT_GT(MaxRelError(With(R"("default": {"prefill": ["vertical-slash", "block-sparse"]},
      "vertical_slash": {"vertical": 4, "slash": 6}, "block_sparse": {"block": 32, "top_blocks": 2})"),
                        dense_),
            1e-3);
  // Below dense_below_tokens the same budgets are dense, bit for bit the dense path.
  EXPECT_EQ(With(vs + R"(, "dense_below_tokens": 301)"), dense_);
  EXPECT_EQ(With(bs + R"(, "dense_below_tokens": 301)"), dense_);
}

TEST_F(SparsePolicyTest, DenseAndAShapeHeadsBesideSparseHeadsKeepTheirRing) {
  // Full budgets and a window covering the prompt: dense, whichever heads ride which path.
  EXPECT_LT(MaxRelError(With(R"("default": {"prefill": ["dense", "vertical-slash"]},
      "vertical_slash": {"vertical": 300, "slash": 300})"),
                        dense_),
            1e-5);
  EXPECT_LT(MaxRelError(With(R"("default": {"prefill": ["block-sparse", "a-shape"]},
      "a_shape": {"sink_tokens": 4, "window_tokens": 300},
      "block_sparse": {"block": 16, "top_blocks": 19})"),
                        dense_),
            1e-5);
  // A narrow window beside a full sparse head equals a narrow window beside a dense head.
  const std::vector<float> narrow = With(R"("default": {"prefill": ["a-shape", "dense"]},
      "a_shape": {"sink_tokens": 4, "window_tokens": 20})");
  EXPECT_GT(MaxRelError(narrow, dense_), 1e-3);
  EXPECT_LT(MaxRelError(With(R"("default": {"prefill": ["a-shape", "vertical-slash"]},
      "a_shape": {"sink_tokens": 4, "window_tokens": 20},
      "vertical_slash": {"vertical": 300, "slash": 300})"),
                        narrow),
            1e-5);
}

TEST_F(SparsePolicyTest, EveryLayerSharesOneSparseScratch) {
  // The plan counts the widest layer's need once, however many layers are sparse.
  const std::string params = R"("vertical_slash": {"last_queries": 64, "vertical": 300,
      "slash": 300}, "block_sparse": {"block": 16, "top_blocks": 19})";
  const std::string both = R"("prefill": ["vertical-slash", "block-sparse"])";
  const AttentionPolicy every =
      testing::PolicyFor(*engine_, R"({"version": 1, "default": {)" + both + "}, " + params + "}");
  const AttentionPolicy first = testing::PolicyFor(
      *engine_, R"({"version": 1, "layers": [{"layer": 0, )" + both + "}], " + params + "}");
  ASSERT_GT(engine_->config().num_hidden_layers, 1);
  auto plan = engine_->PlanSequence({.capacity = 304, .policy = every}, 0);
  auto one_layer = engine_->PlanSequence({.capacity = 304, .policy = first}, 0);
  ASSERT_TRUE(plan.ok() && one_layer.ok());
  EXPECT_GT(plan->index_bytes, 0);
  EXPECT_EQ(plan->index_bytes, one_layer->index_bytes);
  EXPECT_NE(plan->ToString().find("sparse prefill scratch"), std::string::npos);
  // A prefill grows the shared buffers within the plan; the last sequence's end frees them.
  ASSERT_TRUE(testing::StartSequence(*engine_, 304, 0, every).ok());
  std::vector<float> logits;
  ASSERT_TRUE(testing::ForwardToHost(*engine_, ids_, &logits).ok());
  EXPECT_LT(MaxRelError(logits, dense_), 1e-5);
  EXPECT_GT(engine_->SparsePrefillScratchBytes(), 0);
  EXPECT_LE(engine_->SparsePrefillScratchBytes(), plan->index_bytes);
  // A second sequence's plan counts only what the engine does not hold yet.
  auto again = engine_->PlanSequence({.capacity = 304, .policy = every}, 0);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->index_held_bytes, engine_->SparsePrefillScratchBytes());
  EXPECT_LT(again->total(), plan->total());
  testing::EndSequence(*engine_);
  EXPECT_EQ(engine_->SparsePrefillScratchBytes(), 0);
}

TEST_F(SparsePolicyTest, BlockSizesTheTilesCannotServeAreRefused) {
  GenerationRequest r;
  r.prompt_ids = ids_;
  r.max_new_tokens = 2;
  r.policy = testing::PolicyFor(*engine_, R"({"version": 1, "default": {"prefill": "block-sparse"},
      "block_sparse": {"block": 48}})");
  auto refused = Generate(*engine_, r);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("block 48 (layer 0, KV head 0)"), std::string::npos)
      << refused.status().ToString();
  EXPECT_EQ(engine_->num_sequences(), 0);
  r.policy.reset();
  EXPECT_TRUE(Generate(*engine_, r).ok());
}

}  // namespace
}  // namespace millipede
