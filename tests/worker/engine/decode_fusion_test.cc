// Decode with fused projections: at one token the engine runs Q/K/V as one GEMM and gate/up as
// one GEMM over weights placed back to back, and RoPE of q and k plus the KV-cache stores as one
// op. A backend that counts the ops it is asked for checks how many run per decode layer, and the
// logits must equal, bit for bit, those of the unfused path on the CPU backend.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "tests/worker/engine/single_sequence.h"
#include "tests/worker/engine_test_util.h"
#include "worker/backend/cpu_backend.h"

namespace millipede {
namespace {

using testing::MaxRelError;
using testing::RandomEngineOptions;
using testing::RandomIds;
using testing::SmallConfig;

// Op name -> calls, shared with the test after the engine took the backend.
using OpCounts = std::map<std::string, int64_t>;

// The CPU backend, counting every op. Optionally it reports GEMM inputs in the weights' dtype, as
// the CUDA backend does, or keeps every adopted weight in an allocation of its own (so that no
// projections lie back to back, like a memory-mapped checkpoint's).
class CountingBackend final : public Backend {
 public:
  struct Options {
    bool gemm_input_in_weight_dtype = false;
    bool separate_weights = false;
  };
  CountingBackend(OpCounts* counts, Options options)
      : inner_(CreateCpuBackend()), counts_(counts), options_(options) {}

  BackendKind kind() const override { return inner_->kind(); }
  StatusOr<BackendTensor> Allocate(DType dtype, const Shape& shape) override {
    return inner_->Allocate(dtype, shape);
  }
  StatusOr<std::vector<ConstTensorView>> AdoptWeights(
      std::span<const ConstTensorView> hosts) override {
    if (!options_.separate_weights) return inner_->AdoptWeights(hosts);
    std::vector<ConstTensorView> adopted;
    for (const ConstTensorView& host : hosts) {
      MP_ASSIGN_OR_RETURN(BackendTensor copy, inner_->Allocate(host.dtype, host.shape));
      std::memcpy(copy.view().data, host.data, host.NumBytes());
      adopted.push_back(copy.cview());
      copies_.push_back(std::move(copy));
    }
    return adopted;
  }
  Status CopyFromHost(ConstTensorView src, TensorView dst) override {
    return inner_->CopyFromHost(src, dst);
  }
  Status CopyToHost(ConstTensorView src, TensorView dst) override {
    return inner_->CopyToHost(src, dst);
  }
  Status Convert(ConstTensorView src, TensorView dst) override {
    Count("Convert");
    return inner_->Convert(src, dst);
  }
  Status Synchronize() override { return inner_->Synchronize(); }
  StatusOr<BackendMemory> Memory() override { return inner_->Memory(); }
  DType GemmInputDType(DType weight_dtype) const override {
    const bool narrow = weight_dtype == DType::kBF16 || weight_dtype == DType::kF16;
    return options_.gemm_input_in_weight_dtype && narrow ? weight_dtype
                                                         : inner_->GemmInputDType(weight_dtype);
  }
  Status Embedding(const EmbeddingArgs& a) override {
    return Run("Embedding", &Backend::Embedding, a);
  }
  Status RmsNorm(const RmsNormArgs& a) override { return Run("RmsNorm", &Backend::RmsNorm, a); }
  Status Rope(const RopeArgs& a) override { return Run("Rope", &Backend::Rope, a); }
  Status RopeKv(const RopeKvArgs& a) override { return Run("RopeKv", &Backend::RopeKv, a); }
  Status Gemm(const GemmArgs& a) override { return Run("Gemm", &Backend::Gemm, a); }
  Status SiluMul(const SiluMulArgs& a) override { return Run("SiluMul", &Backend::SiluMul, a); }
  Status AddParts(const AddPartsArgs& a) override {
    return Run("AddParts", &Backend::AddParts, a);
  }
  Status Attention(const AttentionArgs& a) override {
    return Run("Attention", &Backend::Attention, a);
  }
  Status AttentionFp8(const AttentionArgs& a) override {
    return Run("AttentionFp8", &Backend::AttentionFp8, a);
  }
  Status BatchDecodeAttention(const BatchDecodeAttentionArgs& a) override {
    return Run("BatchDecodeAttention", &Backend::BatchDecodeAttention, a);
  }
  Status SparseAttention(const SparseAttentionArgs& a) override {
    return Run("SparseAttention", &Backend::SparseAttention, a);
  }
  Status SparseIndexPairs(const SparseIndexPairsArgs& a) override {
    return Run("SparseIndexPairs", &Backend::SparseIndexPairs, a);
  }
  Status MergeState(const MergeStateArgs& a) override {
    return Run("MergeState", &Backend::MergeState, a);
  }
  Status MergeStateInPlace(TensorView o, TensorView lse, ConstTensorView o_other,
                           ConstTensorView lse_other) override {
    Count("MergeStateInPlace");
    return inner_->MergeStateInPlace(o, lse, o_other, lse_other);
  }
  Status ClearState(TensorView o, TensorView lse) override {
    Count("ClearState");
    return inner_->ClearState(o, lse);
  }
  StatusOr<int32_t> Sample(ConstTensorView logits, const SamplingParams& params,
                           uint64_t step) override {
    Count("Sample");
    return inner_->Sample(logits, params, step);
  }
  Status SamplingPenalties(const SamplingPenaltiesArgs& a) override {
    return Run("SamplingPenalties", &Backend::SamplingPenalties, a);
  }
  Status SamplingLogprobs(const SamplingLogprobsArgs& a) override {
    return Run("SamplingLogprobs", &Backend::SamplingLogprobs, a);
  }
  Status TopK(const TopKArgs& a) override { return Run("TopK", &Backend::TopK, a); }
  Status TopKKeys(const TopKKeysArgs& a) override { return Run("TopKKeys", &Backend::TopKKeys, a); }
  Status TopKCut(const TopKCutArgs& a) override { return Run("TopKCut", &Backend::TopKCut, a); }
  Status KeyScores(const KeyScoresArgs& a) override {
    return Run("KeyScores", &Backend::KeyScores, a);
  }
  Status TokenScores(const TokenScoresArgs& a) override {
    return Run("TokenScores", &Backend::TokenScores, a);
  }
  Status BatchTokenScores(const BatchTokenScoresArgs& a) override {
    return Run("BatchTokenScores", &Backend::BatchTokenScores, a);
  }
  Status SelectionIndex(const SelectionIndexArgs& a) override {
    return Run("SelectionIndex", &Backend::SelectionIndex, a);
  }
  Status GatherRows(const GatherRowsArgs& a) override {
    return Run("GatherRows", &Backend::GatherRows, a);
  }
  Status CopyHeads(const CopyHeadsArgs& a) override {
    return Run("CopyHeads", &Backend::CopyHeads, a);
  }
  Status VerticalSlashIndex(const VerticalSlashIndexArgs& a) override {
    return Run("VerticalSlashIndex", &Backend::VerticalSlashIndex, a);
  }
  Status BlockSums(const BlockSumsArgs& a) override {
    return Run("BlockSums", &Backend::BlockSums, a);
  }
  Status BlockSparseIndex(const BlockSparseIndexArgs& a) override {
    return Run("BlockSparseIndex", &Backend::BlockSparseIndex, a);
  }
  Status AntidiagonalSelect(const AntidiagonalSelectArgs& a) override {
    return Run("AntidiagonalSelect", &Backend::AntidiagonalSelect, a);
  }
  Status BlockMaskIndex(const BlockMaskIndexArgs& a) override {
    return Run("BlockMaskIndex", &Backend::BlockMaskIndex, a);
  }
  StatusOr<BackendTensor> AllocateHost(DType dtype, const Shape& shape) override {
    return inner_->AllocateHost(dtype, shape);
  }
  StatusOr<CopyEvent> StartCopy(ConstTensorView src, TensorView dst, CopyOrder order) override {
    Count("StartCopy");
    return inner_->StartCopy(src, dst, order);
  }
  StatusOr<CopyEvent> StartGatherRows(const GatherRowsArgs& a, CopyOrder order) override {
    Count("StartGatherRows");
    return inner_->StartGatherRows(a, order);
  }
  Status ComputeWaitFor(CopyEvent event) override { return inner_->ComputeWaitFor(event); }
  Status WaitCopy(CopyEvent event) override { return inner_->WaitCopy(event); }
  StatusOr<bool> CopyDone(CopyEvent event) override { return inner_->CopyDone(event); }

 private:
  void Count(const char* op) { ++(*counts_)[op]; }
  template <typename Args>
  Status Run(const char* op, Status (Backend::*fn)(const Args&), const Args& args) {
    Count(op);
    return (inner_.get()->*fn)(args);
  }

  std::unique_ptr<Backend> inner_;
  OpCounts* counts_;
  Options options_;
  std::vector<BackendTensor> copies_;
};

struct DecodeRun {
  std::vector<std::vector<float>> logits;  // per decode step
  OpCounts ops;                            // over the decode steps only
};

// Prefills `prompt` tokens, then decodes `steps` more one at a time with ForwardDecode.
DecodeRun RunDecode(EngineOptions options, CountingBackend::Options backend_options,
                    const std::vector<int32_t>& ids, size_t prompt) {
  DecodeRun run;
  OpCounts counts;
  auto engine =
      Engine::Create(options, nullptr, std::make_unique<CountingBackend>(&counts, backend_options));
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  if (!engine.ok()) return run;
  Engine& e = **engine;
  EXPECT_TRUE(testing::StartSequence(e, static_cast<int64_t>(ids.size())).ok());
  std::vector<float> logits;
  EXPECT_TRUE(testing::ForwardToHost(e, std::span(ids).first(prompt), &logits).ok());
  counts.clear();
  for (size_t i = prompt; i < ids.size(); ++i) {
    StatusOr<ConstTensorView> step = testing::ForwardDecode(e, ids[i]);
    EXPECT_TRUE(step.ok()) << step.status().ToString();
    if (!step.ok()) return run;
    logits.assign(static_cast<size_t>(step->NumElements()), 0.0f);
    EXPECT_TRUE(e.backend().CopyToHost(*step, {logits.data(), DType::kF32, step->shape}).ok());
    run.logits.push_back(logits);
  }
  run.ops = counts;
  return run;
}

// The models: the tiny llama (GQA 4 over 2), qwen2 with q/k/v biases and GQA 8 over 2, and a
// llama with attention and MLP biases (o_proj and gate/up/down too).
std::vector<ModelConfig> Models() {
  ModelConfig tiny = SmallConfig();
  ModelConfig qwen = SmallConfig();
  qwen.model_type = "qwen2";
  qwen.qkv_bias = true;
  qwen.num_attention_heads = 8;
  qwen.num_key_value_heads = 2;
  ModelConfig biased = SmallConfig();
  biased.qkv_bias = biased.o_proj_bias = biased.mlp_bias = true;
  return {tiny, qwen, biased};
}

std::string Describe(const ModelConfig& c) {
  return c.model_type + " heads " + std::to_string(c.num_attention_heads) + "/" +
         std::to_string(c.num_key_value_heads) + (c.qkv_bias ? " qkv bias" : "") +
         (c.mlp_bias ? " mlp bias" : "");
}

// Backend ops per decode layer before this path existed: RMSNorm x2, Q, K, V, O, gate, up and
// down GEMMs, RoPE of q and of k, two KV-cache conversions, attention, SiLU-mul.
constexpr int64_t kOpsPerLayerBefore = 15;

int64_t OpsPerDecodeStep(const OpCounts& ops) {
  int64_t total = 0;
  for (const auto& [op, n] : ops) total += n;
  return total;
}

TEST(DecodeFusionTest, FewerOpsPerLayerAndIdenticalLogits) {
  const std::vector<int32_t> ids = RandomIds(27, 97, 8);
  const size_t prompt = 24;
  const int64_t steps = static_cast<int64_t>(ids.size() - prompt);
  for (const ModelConfig& c : Models()) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(Describe(c) + " " + DTypeName(dtype));
      EngineOptions options = RandomEngineOptions(c, dtype, dtype);
      const DecodeRun fused = RunDecode(options, {}, ids, prompt);
      options.fuse_projections = false;
      const DecodeRun unfused = RunDecode(options, {}, ids, prompt);
      ASSERT_EQ(fused.logits.size(), static_cast<size_t>(steps));
      ASSERT_EQ(unfused.logits.size(), static_cast<size_t>(steps));
      for (int64_t s = 0; s < steps; ++s) EXPECT_EQ(fused.logits[s], unfused.logits[s]) << s;

      const int64_t layers = c.num_hidden_layers;
      // Per step beyond the layers: the embedding, the final RMSNorm and the LM head.
      auto per_layer = [&](const OpCounts& ops, const std::string& op, int64_t per_step) {
        auto it = ops.find(op);
        const int64_t n = it == ops.end() ? 0 : it->second;
        EXPECT_EQ((n - per_step * steps) % (layers * steps), 0) << op;
        return (n - per_step * steps) / (layers * steps);
      };
      EXPECT_EQ(per_layer(fused.ops, "Gemm", 1), 4);  // Q|K|V, O, gate|up, down
      EXPECT_EQ(per_layer(unfused.ops, "Gemm", 1), 7);
      for (const DecodeRun* run : {&fused, &unfused}) {
        EXPECT_EQ(per_layer(run->ops, "RmsNorm", 1), 2);
        EXPECT_EQ(per_layer(run->ops, "RopeKv", 0), 1);  // RoPE of q and k, K and V stored
        EXPECT_EQ(per_layer(run->ops, "Rope", 0), 0);
        EXPECT_EQ(per_layer(run->ops, "Convert", 0), 0);
        EXPECT_EQ(per_layer(run->ops, "Attention", 0), 1);
        EXPECT_EQ(per_layer(run->ops, "SiluMul", 0), 1);
        EXPECT_EQ(per_layer(run->ops, "Embedding", 1), 0);
      }
      const int64_t fused_per_layer = (OpsPerDecodeStep(fused.ops) / steps - 3) / layers;
      EXPECT_EQ(fused_per_layer, 9);
      EXPECT_LT(fused_per_layer, kOpsPerLayerBefore);
    }
  }
}

// Projections that do not lie back to back (each weight in an allocation of its own, as a
// memory-mapped checkpoint on the CPU backend) run as separate GEMMs with fusion on, with the
// same logits.
TEST(DecodeFusionTest, SeparateWeightsFallBackToSeparateGemms) {
  const std::vector<int32_t> ids = RandomIds(22, 97, 9);
  const size_t prompt = 20;
  for (const ModelConfig& c : Models()) {
    SCOPED_TRACE(Describe(c));
    const EngineOptions options = RandomEngineOptions(c, DType::kBF16, DType::kBF16);
    const DecodeRun fused = RunDecode(options, {}, ids, prompt);
    CountingBackend::Options separate;
    separate.separate_weights = true;
    const DecodeRun fallback = RunDecode(options, separate, ids, prompt);
    ASSERT_EQ(fused.logits.size(), fallback.logits.size());
    for (size_t s = 0; s < fused.logits.size(); ++s)
      EXPECT_EQ(fused.logits[s], fallback.logits[s]) << s;
    const int64_t steps = static_cast<int64_t>(ids.size() - prompt);
    EXPECT_EQ(fallback.ops.at("Gemm"), (7 * c.num_hidden_layers + 1) * steps);
    EXPECT_EQ(fused.ops.at("Gemm"), (4 * c.num_hidden_layers + 1) * steps);
  }
}

// With GEMM inputs written in the weights' dtype, as on the GPU (RMSNorm and SiLU-mul round as
// they write; no conversion op runs): fused equals unfused bit for bit, and both stay within
// bf16 rounding of the F32-input engine, which they must differ from (the path is taken).
TEST(DecodeFusionTest, GemmInputsInWeightDtype) {
  const std::vector<int32_t> ids = RandomIds(30, 97, 10);
  const size_t prompt = 26;
  CountingBackend::Options gpu_like;
  gpu_like.gemm_input_in_weight_dtype = true;
  for (const ModelConfig& c : Models()) {
    SCOPED_TRACE(Describe(c));
    EngineOptions options = RandomEngineOptions(c, DType::kBF16, DType::kBF16);
    const DecodeRun f32_inputs = RunDecode(options, {}, ids, prompt);
    const DecodeRun fused = RunDecode(options, gpu_like, ids, prompt);
    options.fuse_projections = false;
    const DecodeRun unfused = RunDecode(options, gpu_like, ids, prompt);
    ASSERT_EQ(fused.logits.size(), f32_inputs.logits.size());
    ASSERT_EQ(unfused.logits.size(), f32_inputs.logits.size());
    for (size_t s = 0; s < fused.logits.size(); ++s) {
      EXPECT_EQ(fused.logits[s], unfused.logits[s]) << s;
      const double error = MaxRelError(fused.logits[s], f32_inputs.logits[s]);
      EXPECT_LT(error, 3e-2) << s;
      EXPECT_GT(error, 0.0) << s;
    }
    EXPECT_EQ(fused.ops.count("Convert"), 0u);
  }
}

// Decoding through the fused path gives the logits of recomputing the sequence from scratch.
TEST(DecodeFusionTest, FusedDecodeMatchesRecompute) {
  const std::vector<int32_t> ids = RandomIds(25, 97, 11);
  const size_t prompt = 21;
  for (const ModelConfig& c : Models()) {
    SCOPED_TRACE(Describe(c));
    const EngineOptions options = RandomEngineOptions(c, DType::kF32, DType::kF32);
    const DecodeRun fused = RunDecode(options, {}, ids, prompt);
    ASSERT_EQ(fused.logits.size(), ids.size() - prompt);
    auto engine = Engine::Create(options);
    ASSERT_TRUE(engine.ok());
    for (size_t s = 0; s < fused.logits.size(); ++s) {
      const std::vector<int32_t> prefix(ids.begin(),
                                        ids.begin() + static_cast<int64_t>(prompt + s + 1));
      ASSERT_TRUE(testing::StartSequence(**engine, static_cast<int64_t>(prefix.size())).ok());
      std::vector<float> full;
      ASSERT_TRUE(testing::ForwardToHost(**engine, prefix, &full).ok());
      EXPECT_LT(MaxRelError(fused.logits[s], full), 1e-5) << s;
    }
  }
}

}  // namespace
}  // namespace millipede

namespace millipede {
namespace {

// Logits of each decode entry of `plan` on the host, and the ops of that step.
struct StepLogits {
  std::vector<std::vector<float>> logits;
  OpCounts ops;
};

// Prefills sequences 1..N with their prompts (prompts[i] of lengths that differ), then decodes
// `steps` tokens of each (next[i] + s at step s): each step's tokens all together when
// `together`, else one step per sequence. policies[i], when given and not empty, is sequence i's
// policy (else the engine's, dense). The logits come step by step, sequence by sequence. Each
// sequence's capacity is its prompt, the steps and `spare` positions.
StepLogits DecodeSequences(const ModelConfig& c, const std::vector<std::vector<int32_t>>& prompts,
                           const std::vector<int32_t>& next, bool together,
                           const std::vector<std::string>& policies = {}, int steps = 1,
                           int64_t spare = 4) {
  StepLogits out;
  OpCounts counts;
  auto created = Engine::Create(RandomEngineOptions(c, DType::kF32, DType::kF32), nullptr,
                                std::make_unique<CountingBackend>(&counts,
                                                                  CountingBackend::Options{}));
  EXPECT_TRUE(created.ok()) << created.status().ToString();
  if (!created.ok()) return out;
  Engine& e = **created;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const SequenceId id = static_cast<SequenceId>(i + 1);
    const int64_t n = static_cast<int64_t>(prompts[i].size());
    const bool own = i < policies.size() && !policies[i].empty();
    EXPECT_TRUE(e.StartSequence(id, {n + spare + steps, n,
                                     own ? testing::PolicyFor(e, policies[i]) : e.policy()})
                    .ok());
    StepPlan prefill{{SequenceStep{id, StepKind::kPrefill, {{0, n}}, prompts[i]}}};
    EXPECT_TRUE(e.RunStep(prefill).ok());
  }
  std::vector<StepPlan> plans;
  for (int s = 0; s < steps; ++s) {
    const size_t first = plans.size();
    plans.resize(first + (together ? 1 : prompts.size()));
    for (size_t i = 0; i < prompts.size(); ++i)
      plans[first + (together ? 0 : i)].steps.push_back(
          SequenceStep{static_cast<SequenceId>(i + 1), StepKind::kDecode, {}, {next[i] + s}});
  }
  counts.clear();
  for (const StepPlan& plan : plans) {
    StatusOr<StepOutput> step = e.RunStep(plan);
    EXPECT_TRUE(step.ok()) << step.status().ToString();
    if (!step.ok()) return out;
    for (const std::optional<ConstTensorView>& logits : step->logits) {
      EXPECT_TRUE(logits.has_value());
      if (!logits) return out;
      std::vector<float> host(static_cast<size_t>(logits->NumElements()));
      EXPECT_TRUE(e.backend().CopyToHost(*logits, {host.data(), DType::kF32, logits->shape}).ok());
      out.logits.push_back(std::move(host));
    }
  }
  out.ops = counts;
  return out;
}

// The decode tokens of several sequences (different lengths) take one RopeKv and one
// BatchDecodeAttention call per layer, and their logits equal each sequence decoded alone.
TEST(BatchDecodeTest, OneAttentionCallPerLayerForEveryDecodeToken) {
  for (const ModelConfig& c : Models()) {
    SCOPED_TRACE(Describe(c));
    const std::vector<std::vector<int32_t>> prompts = {RandomIds(5, 97, 1), RandomIds(17, 97, 2),
                                                       RandomIds(11, 97, 3)};
    const std::vector<int32_t> next = {7, 8, 9};
    const StepLogits together = DecodeSequences(c, prompts, next, true);
    const StepLogits alone = DecodeSequences(c, prompts, next, false);
    ASSERT_EQ(together.logits.size(), prompts.size());
    ASSERT_EQ(alone.logits.size(), prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i)
      EXPECT_LT(MaxRelError(together.logits[i], alone.logits[i]), 1e-5) << "sequence " << i;
    auto count = [](const OpCounts& ops, const char* op) {
      auto it = ops.find(op);
      return it == ops.end() ? int64_t{0} : it->second;
    };
    EXPECT_EQ(count(together.ops, "BatchDecodeAttention"), c.num_hidden_layers);
    EXPECT_EQ(count(together.ops, "Attention"), 0);
    EXPECT_EQ(count(together.ops, "RopeKv"), c.num_hidden_layers);  // the tokens' RoPE and stores
    // Alone, each token takes the single-sequence call.
    EXPECT_EQ(count(alone.ops, "BatchDecodeAttention"), 0);
    EXPECT_EQ(count(alone.ops, "Attention"),
              c.num_hidden_layers * static_cast<int64_t>(prompts.size()));
  }
}

}  // namespace
}  // namespace millipede

namespace millipede {
namespace {

// DuoAttention's mixed layers (a streaming and a full KV head) batch too: three sequences under
// the same windows take one BatchDecodeAttention call per layer and give each sequence's logits
// alone; a dense sequence among them takes a call of its own (the windows differ), and narrow
// windows change the logits.
TEST(BatchDecodeTest, MixedStreamingLayersBatchUnderEqualWindows) {
  const ModelConfig c = SmallConfig();
  const std::string duo = R"({"version": 1, "default": {"decode": ["streaming-head", "full"]},
      "streaming_head": {"sink_tokens": 1, "window_tokens": 5}})";
  const std::vector<std::vector<int32_t>> prompts = {RandomIds(5, 97, 1), RandomIds(17, 97, 2),
                                                     RandomIds(11, 97, 3)};
  const std::vector<int32_t> next = {7, 8, 9};
  auto count = [](const OpCounts& ops, const char* op) {
    auto it = ops.find(op);
    return it == ops.end() ? int64_t{0} : it->second;
  };
  const std::vector<std::string> all_duo(3, duo);
  const StepLogits together = DecodeSequences(c, prompts, next, true, all_duo);
  const StepLogits alone = DecodeSequences(c, prompts, next, false, all_duo);
  const StepLogits dense = DecodeSequences(c, prompts, next, false);
  ASSERT_EQ(together.logits.size(), 3u);
  ASSERT_EQ(alone.logits.size(), 3u);
  ASSERT_EQ(dense.logits.size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_LT(MaxRelError(together.logits[i], alone.logits[i]), 1e-5) << "sequence " << i;
  // The 5-token prompt and its token fit sink + window; the others do not.
  EXPECT_LT(MaxRelError(together.logits[0], dense.logits[0]), 1e-5);
  for (size_t i = 1; i < 3; ++i)
    EXPECT_GT(MaxRelError(together.logits[i], dense.logits[i]), 1e-3) << "sequence " << i;
  EXPECT_EQ(count(together.ops, "BatchDecodeAttention"), c.num_hidden_layers);
  EXPECT_EQ(count(together.ops, "Attention"), 0);
  // Dense beside DuoAttention: two windows, two batches (the middle one alone is a single call).
  const StepLogits mixed = DecodeSequences(c, prompts, next, true, {duo, "", duo});
  ASSERT_EQ(mixed.logits.size(), 3u);
  EXPECT_LT(MaxRelError(mixed.logits[1], dense.logits[1]), 1e-5);
  EXPECT_LT(MaxRelError(mixed.logits[2], alone.logits[2]), 1e-5);
  EXPECT_EQ(count(mixed.ops, "Attention") + count(mixed.ops, "BatchDecodeAttention"),
            3 * c.num_hidden_layers);
}

}  // namespace
}  // namespace millipede

namespace millipede {
namespace {

// OmniKV's filter and selected layers and static eviction batch across sequences too: their
// tokens' parts (every row; the chosen rows, each KV head over its count, and the generated rows;
// the kept rows older than the window and the window) take one BatchDecodeAttention call per
// layer, with sequences of every policy in one call, and each sequence's logits equal it decoded
// alone (its strategies' own calls) step after step; the budgets are below the prompts, so the
// policies change the logits, and budgets that cover every key give dense attention. The filter
// layers of the tokens whose contexts hold the budget choose in one BatchTokenScores and one TopK
// per layer, the others alone.
TEST(BatchDecodeTest, SparseRolesBatchAcrossSequencesAndEqualEachAlone) {
  const ModelConfig c = SmallConfig();
  ASSERT_GE(c.num_hidden_layers, 2);
  const std::string omnikv = R"({"version": 1, "filter": {"top_k": 4},
      "layers": [{"layer": 0, "decode": "filter"}, {"layer": 1, "decode": "selected"}]})";
  const std::string eviction = R"({"version": 1, "default": {"decode": "static-eviction"},
      "static_eviction": {"keep_tokens": 3, "recent_tokens": 4, "observed_queries": 4}})";
  const std::vector<std::vector<int32_t>> prompts = {RandomIds(5, 97, 1), RandomIds(17, 97, 2),
                                                     RandomIds(11, 97, 3), RandomIds(23, 97, 4)};
  const std::vector<int32_t> next = {7, 8, 9, 10};
  constexpr int kSteps = 6;  // the window passes kept positions: the counts change
  auto count = [](const OpCounts& ops, const char* op) {
    auto it = ops.find(op);
    return it == ops.end() ? int64_t{0} : it->second;
  };
  const StepLogits dense = DecodeSequences(c, prompts, next, false, {}, kSteps);
  for (const std::string& policy : {omnikv, eviction}) {
    SCOPED_TRACE(policy);
    const std::vector<std::string> all(prompts.size(), policy);
    const StepLogits together = DecodeSequences(c, prompts, next, true, all, kSteps);
    const StepLogits alone = DecodeSequences(c, prompts, next, false, all, kSteps);
    ASSERT_EQ(together.logits.size(), prompts.size() * kSteps);
    ASSERT_EQ(alone.logits.size(), together.logits.size());
    ASSERT_EQ(dense.logits.size(), together.logits.size());
    for (size_t i = 0; i < together.logits.size(); ++i)
      EXPECT_LT(MaxRelError(together.logits[i], alone.logits[i]), 1e-5)
          << "step " << i / prompts.size() << " sequence " << i % prompts.size();
    // The 23-token prompt's budget is well below its length.
    EXPECT_GT(MaxRelError(together.logits[3], dense.logits[3]), 1e-3);
    EXPECT_EQ(count(together.ops, "BatchDecodeAttention"), c.num_hidden_layers * kSteps);
    EXPECT_EQ(count(together.ops, "Attention"), 0);
    // Alone, static eviction reads its kept rows through their index too: one call per token
    // and layer over its parts.
    EXPECT_EQ(count(alone.ops, "BatchDecodeAttention"),
              policy == omnikv ? 0 : c.num_hidden_layers * kSteps * 4);
    if (policy == omnikv) {
      // Every prompt holds the budget of 4: one scoring and one cut per step for all four.
      EXPECT_EQ(count(together.ops, "BatchTokenScores"), kSteps);
      EXPECT_EQ(count(together.ops, "TokenScores"), 0);
      EXPECT_EQ(count(together.ops, "TopK"), kSteps);
      EXPECT_EQ(count(alone.ops, "TokenScores"), 4 * kSteps);
      EXPECT_EQ(count(alone.ops, "BatchTokenScores"), 0);
    }
  }
  // A budget of 12: the 17- and 23-token prompts choose together, the 5- and 11-token ones (whose
  // whole context is chosen) alone; each as decoded alone.
  {
    const std::string omnikv_12 = R"({"version": 1, "filter": {"top_k": 12},
      "layers": [{"layer": 0, "decode": "filter"}, {"layer": 1, "decode": "selected"}]})";
    const std::vector<std::string> all(prompts.size(), omnikv_12);
    const StepLogits together = DecodeSequences(c, prompts, next, true, all, kSteps);
    const StepLogits alone = DecodeSequences(c, prompts, next, false, all, kSteps);
    ASSERT_EQ(together.logits.size(), alone.logits.size());
    for (size_t i = 0; i < together.logits.size(); ++i)
      EXPECT_LT(MaxRelError(together.logits[i], alone.logits[i]), 1e-5) << i;
    EXPECT_GT(MaxRelError(together.logits[3], dense.logits[3]), 1e-3);
    EXPECT_EQ(count(together.ops, "BatchTokenScores"), kSteps);
    EXPECT_EQ(count(together.ops, "TokenScores"), 2 * kSteps);
  }
  // Budgets that cover every key: the batched parts give dense attention.
  const std::string omnikv_all = R"({"version": 1, "filter": {"top_k": 64},
      "layers": [{"layer": 0, "decode": "filter"}, {"layer": 1, "decode": "selected"}]})";
  const std::string eviction_all = R"({"version": 1, "default": {"decode": "static-eviction"},
      "static_eviction": {"keep_tokens": 64, "recent_tokens": 64, "observed_queries": 4}})";
  for (const std::string& policy : {omnikv_all, eviction_all}) {
    SCOPED_TRACE(policy);
    const std::vector<std::string> all(prompts.size(), policy);
    const StepLogits together = DecodeSequences(c, prompts, next, true, all, kSteps);
    ASSERT_EQ(together.logits.size(), dense.logits.size());
    for (size_t i = 0; i < together.logits.size(); ++i)
      EXPECT_LT(MaxRelError(together.logits[i], dense.logits[i]), 1e-5) << i;
    EXPECT_EQ(count(together.ops, "BatchDecodeAttention"), c.num_hidden_layers * kSteps);
  }
  // DuoAttention's layers with a store per group of KV heads (streaming heads prefilled a-shape
  // within their window; capacities large enough to split the stores) batch by group: one call
  // per group and layer, the streaming group's under its windows, over stores that keep every row
  // (the short prompts) and stores that dropped rows.
  const std::string duo = R"({"version": 1,
      "default": {"prefill": ["a-shape", "dense"], "decode": ["streaming-head", "full"]},
      "a_shape": {"sink_tokens": 2, "window_tokens": 5},
      "streaming_head": {"sink_tokens": 2, "window_tokens": 6}})";
  {
    const std::vector<std::string> all(prompts.size(), duo);
    const StepLogits together = DecodeSequences(c, prompts, next, true, all, kSteps, 200);
    const StepLogits alone = DecodeSequences(c, prompts, next, false, all, kSteps, 200);
    ASSERT_EQ(together.logits.size(), prompts.size() * kSteps);
    ASSERT_EQ(alone.logits.size(), together.logits.size());
    for (size_t i = 0; i < together.logits.size(); ++i)
      EXPECT_LT(MaxRelError(together.logits[i], alone.logits[i]), 1e-5)
          << "step " << i / prompts.size() << " sequence " << i % prompts.size();
    EXPECT_GT(MaxRelError(together.logits[3], dense.logits[3]), 1e-3);
    EXPECT_EQ(count(together.ops, "BatchDecodeAttention"), 2 * c.num_hidden_layers * kSteps);
    EXPECT_EQ(count(together.ops, "Attention"), 0);
  }
  // Dense, OmniKV and static eviction in one step: one call per layer, each as alone.
  const std::vector<std::string> mixed_policies = {"", omnikv, eviction, omnikv};
  const StepLogits mixed = DecodeSequences(c, prompts, next, true, mixed_policies, kSteps);
  const StepLogits mixed_alone = DecodeSequences(c, prompts, next, false, mixed_policies, kSteps);
  ASSERT_EQ(mixed.logits.size(), mixed_alone.logits.size());
  for (size_t i = 0; i < mixed.logits.size(); ++i)
    EXPECT_LT(MaxRelError(mixed.logits[i], mixed_alone.logits[i]), 1e-5) << i;
  EXPECT_EQ(count(mixed.ops, "BatchDecodeAttention"), c.num_hidden_layers * kSteps);
  EXPECT_EQ(count(mixed.ops, "Attention"), 0);
  EXPECT_EQ(count(mixed.ops, "BatchTokenScores"), kSteps);
}

}  // namespace
}  // namespace millipede
