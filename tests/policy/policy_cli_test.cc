// millipede-policy end to end on small files it is given: each subcommand's success (the written
// policy loads back and validates; search on the model's shape with random weights), each kind
// of bad file or value (exit 1, a message naming the place) and bad usage (exit 2).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "checkpoint/model_config.h"
#include "common/file_util.h"
#include "policy/attention_policy.h"

namespace millipede {
namespace {

struct RunResult {
  int exit_code;
  std::string output;  // stdout and stderr together
};

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

// A model of 2 layers, 8 query heads and 2 KV heads.
constexpr int64_t kLayers = 2;
constexpr int64_t kKvHeads = 2;

ModelConfig SmallModel() {
  ModelConfig c;
  c.model_type = "llama";
  c.vocab_size = 256;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_hidden_layers = kLayers;
  c.num_attention_heads = 8;
  c.num_key_value_heads = kKvHeads;
  c.head_dim = 8;
  c.max_position_embeddings = 4096;
  return c;
}

// MInference's format: layer 0 vertical-slash everywhere; layer 1 KV head 0 stream_llm, KV head 1
// mixes block_sparse with stream_llm.
constexpr char kMInferenceConfig[] = R"([
  {"0": ["vertical_and_slash", 1000, 6096, 0.9], "1": ["vertical_and_slash", 30, 800, 0.8],
   "2": ["vertical_and_slash", 100, 750, 0.7], "3": ["vertical_and_slash", 500, 700, 0.6],
   "4": ["vertical_and_slash", 1000, 6096, 0.9], "5": ["vertical_and_slash", 1000, 6096, 0.8],
   "6": ["vertical_and_slash", 1000, 6096, 0.7], "7": ["vertical_and_slash", 1000, 6096, 0.6]},
  {"0": ["stream_llm", 100, 800, 0.9], "1": ["stream_llm", 100, 800, 0.8],
   "2": ["stream_llm", 100, 800, 0.7], "3": ["stream_llm", 100, 800, 0.6],
   "4": ["block_sparse", 8, 1, 0.9], "5": ["stream_llm", 100, 800, 0.8],
   "6": ["block_sparse", 8, 1, 0.7], "7": ["block_sparse", 8, 1, 0.6]}
])";

class PolicyCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    binary_ = std::string(MILLIPEDE_BINARY_DIR) + "/bin/millipede-policy";
    ASSERT_TRUE(FileExists(binary_)) << binary_ << " is not built";
    // CTest runs each test case as its own process, in parallel: one folder per test.
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = JoinPath(::testing::TempDir(), std::string("millipede_policy_cli_") + info->name() +
                                              "_" + std::to_string(::getpid()));
    std::filesystem::create_directories(JoinPath(dir_, "model"));
    std::filesystem::create_directories(JoinPath(dir_, "duo"));
    ASSERT_TRUE(WriteStringToFile(JoinPath(dir_, "model/config.json"),
                                  ModelConfigToJson(SmallModel()).dump())
                    .ok());
    Write("mi.json", kMInferenceConfig);
    // numpy.savetxt's format, one row per layer, one gate per KV head.
    Write("duo/full_attention_heads.tsv",
          "8.593750000000000000e-01\t-9.250640869140625000e-05\n"
          "1.000000000000000000e+00\t3.398437500000000000e-01\n");
    Write("duo/config.json", R"({"sink_size": 16, "recent_size": 64, "threshold": 0.5})");
  }

  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  void Write(const std::string& name, const std::string& text) {
    ASSERT_TRUE(WriteStringToFile(JoinPath(dir_, name), text).ok());
  }
  std::string Path(const std::string& name) const { return JoinPath(dir_, name); }

  RunResult Run(const std::string& args) {
    const std::string command = "cd " + dir_ + " && " + binary_ + " " + args + " 2>&1";
    RunResult result{-1, ""};
    FILE* pipe = popen(command.c_str(), "r");
    if (pipe == nullptr) return result;
    char buffer[4096];
    size_t n;
    while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
    const int status = pclose(pipe);
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return result;
  }

  // The file the tool wrote, loaded and validated as the engine does.
  AttentionPolicy Load(const std::string& name) {
    StatusOr<AttentionPolicy> p = LoadAttentionPolicy(Path(name), kLayers, kKvHeads);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    if (!p.ok()) return {};
    EXPECT_TRUE(ValidateAttentionPolicy(*p, kLayers, kKvHeads).ok());
    return *p;
  }

  // Exit 1 and a message containing `needle`.
  void ExpectBadInput(const std::string& args, const std::string& needle) {
    const RunResult r = Run(args);
    EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.output;
    EXPECT_HAS(r.output, "millipede-policy: ");
    EXPECT_HAS(r.output, needle);
  }

  std::string binary_;
  std::string dir_;
};

TEST_F(PolicyCliTest, ImportsMInferenceShowsAndLoads) {
  const RunResult r =
      Run("import-minference mi.json --model model --out p.json --dense-below 1024");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "wrote p.json: prefill a-shape 1, block-sparse 1, vertical-slash 2");
  EXPECT_HAS(r.output, "note: layer 1, KV head 1 (query heads 4-7): a-shape 1, block-sparse 3");
  EXPECT_HAS(r.output, "note: 1 KV head(s) took the largest sizes of their query heads");
  const AttentionPolicy p = Load("p.json");
  ASSERT_EQ(p.layers.size(), 2u);
  EXPECT_EQ(p.dense_below_tokens, 1024);
  EXPECT_EQ(p.layers[0].prefill[0].vertical_slash, (VerticalSlashParams{64, 1000, 6096}));
  EXPECT_EQ(p.layers[1].prefill[0].a_shape, (AShapeParams{100, 800}));
  EXPECT_EQ(p.layers[1].prefill[1].block_sparse, (BlockSparseParams{64, 100}));

  const RunResult show = Run("show p.json --model model --length 512");
  ASSERT_EQ(show.exit_code, 0) << show.output;
  EXPECT_HAS(show.output, "2 layers x 2 KV heads (8 query heads); dense_below_tokens 1024");
  EXPECT_HAS(show.output, "below dense_below_tokens: every head runs dense");
  EXPECT_HAS(show.output, "summary: " + p.Summary());
  const RunResult at_4096 = Run("show p.json --model model");  // max_position_embeddings
  ASSERT_EQ(at_4096.exit_code, 0) << at_4096.output;
  EXPECT_HAS(at_4096.output, "expected prefill density at 4096 tokens");
  EXPECT_HAS(at_4096.output, "    1 ");
  EXPECT_HAS(at_4096.output, "A1 B1");
}

TEST_F(PolicyCliTest, ImportsXAttentionSettings) {
  RunResult r = Run("import-xattention --model model --out x.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "wrote x.json: prefill antidiagonal 4");
  AttentionPolicy p = Load("x.json");
  ASSERT_EQ(p.layers.size(), 2u);
  for (const LayerPolicy& layer : p.layers)
    for (const HeadPrefillPolicy& h : layer.prefill) {
      EXPECT_EQ(h.pattern, PrefillPattern::kAntidiagonal);
      EXPECT_EQ(h.antidiagonal, (AntidiagonalParams{128, 8, 900}));
    }
  r =
      Run("import-xattention --model model --threshold 0.95 --stride 16 --block-size 64 "
          "--starting-layer 1 --dense-below 2048 --out y.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  p = Load("y.json");
  EXPECT_EQ(p.dense_below_tokens, 2048);
  EXPECT_EQ(p.layers[0].prefill[0].pattern, PrefillPattern::kDense);
  EXPECT_EQ(p.layers[1].prefill[1].antidiagonal, (AntidiagonalParams{64, 16, 950}));
  const RunResult show = Run("show y.json --model model --length 512");
  ASSERT_EQ(show.exit_code, 0) << show.output;
  EXPECT_HAS(show.output, "X1");
  r = Run("import-xattention --model model --threshold 0.9004 --out z.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "rounded to 900 per mille");
  ExpectBadInput("import-xattention --model model --threshold 1.5 --out x.json",
                 "threshold 1.5 must lie in (0, 1]");
  ExpectBadInput("import-xattention --model model --stride 3 --out x.json",
                 "stride 3 must divide block_size 128");
  ExpectBadInput("import-xattention --model model --stride 4 --out x.json",
                 "into a power of two of at most 16 rows");
  ExpectBadInput("import-xattention --model model --block-size 96 --out x.json",
                 "block_size 96 must divide or be a multiple of 64");
  ExpectBadInput("import-xattention --model model --starting-layer 3 --out x.json",
                 "starting layer 3 outside the model's [0, 2]");
}

TEST_F(PolicyCliTest, ImportsDuoAttentionByThresholdAndSparsity) {
  RunResult r =
      Run("import-duo duo/full_attention_heads.tsv --model model --threshold 0.5 "
          "--out d.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "retrieval heads: 2 of 4 (sink 16, recent 64)");
  AttentionPolicy p = Load("d.json");
  EXPECT_EQ(p.streaming_head, (AShapeParams{16, 64}));
  EXPECT_EQ(p.layers[0].decode,
            (std::vector<DecodeRole>{DecodeRole::kFull, DecodeRole::kStreamingHead}));
  EXPECT_EQ(p.layers[1].decode,
            (std::vector<DecodeRole>{DecodeRole::kFull, DecodeRole::kStreamingHead}));
  EXPECT_EQ(p.layers[0].prefill[1].a_shape, (AShapeParams{16, 64}));

  // --sink and --recent over the config; a quarter streaming: ceil(0.25 * 3) = 1 head.
  r =
      Run("import-duo duo/full_attention_heads.tsv --model model --sparsity 0.25 --sink 4 "
          "--recent 32 --dense-below 100 --out d2.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  p = Load("d2.json");
  EXPECT_EQ(p.dense_below_tokens, 100);
  EXPECT_EQ(p.streaming_head, (AShapeParams{4, 32}));
  EXPECT_EQ(p.layers[0].decode,
            (std::vector<DecodeRole>{DecodeRole::kFull, DecodeRole::kStreamingHead}));
  EXPECT_EQ(p.layers[1].decode, std::vector<DecodeRole>(2, DecodeRole::kFull));
  const RunResult show = Run("show d2.json --model model --length 2048");
  ASSERT_EQ(show.exit_code, 0) << show.output;
  EXPECT_HAS(show.output, "S streaming-head sink_tokens 4 window_tokens 32");
}

TEST_F(PolicyCliTest, BadFilesNameThePlace) {
  Write("short.json", R"([{"0": ["vertical_and_slash", 1000, 6096, 1]}])");
  ExpectBadInput("import-minference short.json --model model --out x.json",
                 "short.json lists 1 layers but the model has 2 (num_hidden_layers)");
  std::string missing_head = kMInferenceConfig;
  const std::string head7 = R"(, "7": ["block_sparse", 8, 1, 0.6])";
  missing_head.replace(missing_head.find(head7), head7.size(), "");
  Write("missing.json", missing_head);
  ExpectBadInput("import-minference missing.json --model model --out x.json",
                 "missing.json: layer 1: query head 7 is missing");
  std::string bad_pattern = kMInferenceConfig;
  bad_pattern.replace(bad_pattern.find("stream_llm"), 10, "tri_shape");
  Write("pattern.json", bad_pattern);
  ExpectBadInput("import-minference pattern.json --model model --out x.json",
                 "pattern.json: layer 1, query head \"0\": unknown pattern \"tri_shape\"");
  Write("broken.json", "[{\"0\": [");
  ExpectBadInput("import-minference broken.json --model model --out x.json", "invalid JSON");
  ExpectBadInput("import-minference absent.json --model model --out x.json", "absent.json");

  Write("duo/ragged.tsv", "0.5\t0.5\n0.5\n");
  ExpectBadInput("import-duo duo/ragged.tsv --model model --threshold 0.5 --out x.json",
                 "ragged.tsv: line 2 has 1 columns but line 1 has 2");
  Write("duo/nan.tsv", "0.5\t0.5\n0.5\tnan\n");
  ExpectBadInput("import-duo duo/nan.tsv --model model --threshold 0.5 --out x.json",
                 "nan.tsv: line 2, column 2: \"nan\" is not a finite number");
  Write("duo/range.tsv", "0.5\t3\n0.5\t0.5\n");
  ExpectBadInput("import-duo duo/range.tsv --model model --threshold 0.5 --out x.json",
                 "range.tsv: line 1, column 2: gate 3 is outside [0, 1]");
  Write("duo/rows.tsv", "0.5\t0.5\n");
  ExpectBadInput("import-duo duo/rows.tsv --model model --threshold 0.5 --out x.json",
                 "rows.tsv has 1 rows (layers) but the model has 2 layers");
  Write("duo/query.tsv", "0\t0\t0\t0\t0\t0\t0\t0\n0\t0\t0\t0\t0\t0\t0\t0\n");
  ExpectBadInput("import-duo duo/query.tsv --model model --threshold 0.5 --out x.json",
                 "that is its number of query heads");
  Write("lone.tsv", "0.5\t0.5\n0.5\t0.5\n");
  ExpectBadInput("import-duo lone.tsv --model model --threshold 0.5 --out x.json",
                 "give --sink and --recent");
  ExpectBadInput("import-duo duo/full_attention_heads.tsv --model model --sparsity 2 --out x.json",
                 "must be in [0, 1], got 2");
  ExpectBadInput("import-duo duo/full_attention_heads.tsv --model model --threshold x --out x.json",
                 "--threshold: \"x\" is not a finite number");

  Write("bad-policy.json", R"({"version": 1, "layers": [{"layer": 1, "prefill": ["dense"]}]})");
  ExpectBadInput(
      "show bad-policy.json --model model",
      "bad-policy.json: layers[0].prefill lists 1 patterns but the model has 2 KV heads");
  ExpectBadInput("show bad-policy.json --model nowhere", "nowhere/config.json");
  ExpectBadInput("show bad-policy.json --model model --length 0", "--length must be positive");
  EXPECT_FALSE(FileExists(Path("x.json")));
}

// The pattern search on the model's shape with random weights: the policy it writes loads, every
// head got one of the sparse candidates, and bad values and prompts are refused.
TEST_F(PolicyCliTest, SearchesOnAReferencePrompt) {
  std::string ids, few;
  for (int i = 0; i < 200; ++i) ids += std::to_string((i * 37) % 256) + " ";
  for (int i = 0; i < 10; ++i) few += std::to_string(i) + " ";
  Write("ids.txt", ids);
  Write("few.txt", few);
  Write("outside.txt", ids + "256");
  Write("text.txt", "some prompt text");
  const std::string search = "search --model model --random-weights --kv-dtype fp32 ";
  const RunResult r = Run(search + "--prompt-ids ids.txt --budget 0.3 --out s.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "candidates: [a-shape 64+");
  EXPECT_HAS(r.output, "layer 1:");
  EXPECT_HAS(r.output, "wrote s.json");
  const AttentionPolicy p = Load("s.json");
  ASSERT_EQ(p.layers.size(), static_cast<size_t>(kLayers));
  for (const LayerPolicy& layer : p.layers)
    for (size_t g = 0; g < layer.prefill.size(); ++g) {
      EXPECT_NE(layer.prefill[g].pattern, PrefillPattern::kDense) << g;
      EXPECT_EQ(layer.decode[g], DecodeRole::kFull) << g;
    }
  const RunResult shown = Run("show s.json --model model --length 200");
  EXPECT_EQ(shown.exit_code, 0) << shown.output;

  ExpectBadInput(search + "--prompt-ids ids.txt --budget 0 --out x.json", "budget 0");
  ExpectBadInput(search + "--prompt-ids ids.txt --budget 1.5 --out x.json", "budget 1.5");
  ExpectBadInput(search + "--prompt-ids ids.txt --sink 0 --out x.json", "sinks must be positive");
  ExpectBadInput(search + "--prompt-ids few.txt --out x.json", "at least 64");
  ExpectBadInput(search + "--prompt-ids outside.txt --out x.json", "outside the vocabulary");
  ExpectBadInput(search + "--prompt-ids missing.txt --out x.json", "missing.txt");
  ExpectBadInput(search + "--prompt-file text.txt --out x.json", "tokenizer.json");
  EXPECT_FALSE(FileExists(Path("x.json")));
  for (const std::string& args :
       {search + "--out x.json", search + "--prompt-ids ids.txt --prompt-file t.txt --out x.json",
        search + "--prompt-ids ids.txt", search + "extra --prompt-ids ids.txt --out x.json",
        std::string("search --prompt-ids ids.txt --out x.json")}) {
    const RunResult bad = Run(args);
    EXPECT_EQ(bad.exit_code, 2) << args << "\n" << bad.output;
    EXPECT_HAS(bad.output, "usage:");
  }
}

TEST_F(PolicyCliTest, BadUsageExitsTwo) {
  for (const char* args :
       {"", "frobnicate", "show", "show a.json b.json --model model", "show p.json",
        "import-minference mi.json --model model", "import-minference mi.json --out x.json",
        "import-minference mi.json --model model --out x.json --sparsity 0.5",
        "import-duo duo/full_attention_heads.tsv --model model --out x.json",
        "import-duo duo/full_attention_heads.tsv --model model --threshold 0.5 --sparsity 0.5 "
        "--out x.json",
        "show p.json --model"}) {
    const RunResult r = Run(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_HAS(r.output, "usage:");
  }
  const RunResult help = Run("--help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_HAS(help.output, "import-minference CONFIG.json --model MODEL --out POLICY.json");
}

}  // namespace
}  // namespace millipede
