// The fuzz targets as a bounded randomized test: the seed corpus, the inputs libFuzzer runs once
// made fail (regressions/), and a few thousand deterministic mutations of the seeds, through the
// same entry points libFuzzer calls. A failing input is written to the test's temporary folder.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "http/openai_protocol.h"
#include "tests/fuzz/fuzz_service.h"
#include "tests/fuzz/fuzz_targets.h"
#include "tests/fuzz/generators.h"
#include "tests/fuzz/mutator.h"
#include "tests/fuzz/seed_corpus.h"

namespace millipede::fuzz {
namespace {

// Fixed, so that a failure reproduces.
constexpr uint64_t kMutationSeed = 20240517;
constexpr int kMutations = 20000;
constexpr int kGenerated = 5000;
// Mutations start from seeds up to this size; the deep-nesting and huge seeds run as they are.
constexpr size_t kMaxMutatedSeed = 16 << 10;

using Target = std::function<StatusOr<FuzzStage>(std::string_view)>;

std::string Printable(const std::string& input) {
  std::ostringstream out;
  for (size_t i = 0; i < input.size() && i < 400; ++i) {
    const unsigned char c = static_cast<unsigned char>(input[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out << c;
    } else {
      out << "\\x"
          << "0123456789abcdef"[c >> 4] << "0123456789abcdef"[c & 15];
    }
  }
  if (input.size() > 400) out << "... (" << input.size() << " bytes)";
  return out.str();
}

std::string SaveFailure(const std::string& name, const std::string& input) {
  const std::filesystem::path path =
      std::filesystem::path(::testing::TempDir()) /
      ("fuzz-failure-" + name + "-" + std::to_string(std::hash<std::string>{}(input)));
  std::ofstream(path, std::ios::binary)
      .write(input.data(), static_cast<std::streamsize>(input.size()));
  return path.string();
}

// Runs every input; counts the stages reached. Failures name the input and where it was saved.
std::map<FuzzStage, int> RunAll(const Target& target, const std::string& name,
                                const std::vector<std::string>& inputs) {
  std::map<FuzzStage, int> stages;
  int failures = 0;
  for (const std::string& input : inputs) {
    std::string error;
    try {
      StatusOr<FuzzStage> stage = target(input);
      if (stage.ok()) {
        ++stages[*stage];
        continue;
      }
      error = stage.status().ToString();
    } catch (const std::exception& e) {
      error = std::string("uncaught exception: ") + e.what();
    }
    // A few reports are enough to act on.
    if (++failures <= 5) {
      ADD_FAILURE() << name << ": " << error << "\n  input: " << Printable(input) << "\n  saved as "
                    << SaveFailure(name, input);
    }
  }
  EXPECT_EQ(failures, 0) << name;
  return stages;
}

std::vector<std::string> Mutations(const std::vector<std::string>& seeds, Mutator::Kind kind) {
  std::vector<std::string> corpus;
  for (const std::string& s : seeds) {
    if (s.size() <= kMaxMutatedSeed) corpus.push_back(s);
  }
  Mutator mutator(kMutationSeed, kind);
  std::vector<std::string> out;
  for (int i = 0; i < kMutations; ++i) {
    out.push_back(mutator.Mutate(corpus[static_cast<size_t>(i) * 7919 % corpus.size()], corpus));
  }
  return out;
}

// The saved inputs of `target` (none while its folder does not exist).
std::vector<std::string> Regressions(const std::string& target) {
  const std::filesystem::path dir = std::filesystem::path(MILLIPEDE_FUZZ_REGRESSIONS) / target;
  if (!std::filesystem::is_directory(dir)) return {};
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  std::vector<std::string> inputs;
  for (const auto& path : files) {
    std::ifstream in(path, std::ios::binary);
    inputs.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return inputs;
}

TEST(HttpFuzzTest, SeedsEndCleanlyAndReachEveryStage) {
  auto stages = RunAll(FuzzHttpRequest, "http", HttpSeeds());
  for (FuzzStage stage : {FuzzStage::kRefusedWire, FuzzStage::kRefusedRoute, FuzzStage::kRouted,
                          FuzzStage::kRefusedBody, FuzzStage::kRefusedAdmit, FuzzStage::kAnswered,
                          FuzzStage::kAdmitted}) {
    EXPECT_GT(stages[stage], 0) << "no seed reached stage " << static_cast<int>(stage);
  }
}

TEST(FuzzRegressionTest, SavedInputsEndCleanly) {
  std::vector<std::string> http = Regressions("http");
  EXPECT_FALSE(http.empty());
  RunAll(FuzzHttpRequest, "http-regression", http);
  RunAll(FuzzJobSpec, "capnp-regression", Regressions("capnp"));
}

TEST(HttpFuzzTest, MutationsEndCleanly) {
  auto stages =
      RunAll(FuzzHttpRequest, "http-mutation", Mutations(HttpSeeds(), Mutator::Kind::kText));
  // Mutated bodies still reach the protocol layer and admission.
  EXPECT_GT(stages[FuzzStage::kRefusedBody], 0);
  EXPECT_GT(stages[FuzzStage::kAdmitted], 0);
}

TEST(HttpFuzzTest, GeneratedRequestsEndCleanly) {
  std::mt19937_64 rng(kMutationSeed);
  std::vector<std::string> inputs;
  for (int i = 0; i < kGenerated; ++i) inputs.push_back(RandomHttpRequest(rng));
  auto stages = RunAll(FuzzHttpRequest, "http-generated", inputs);
  EXPECT_GT(stages[FuzzStage::kRefusedBody], 0);
  EXPECT_GT(stages[FuzzStage::kRefusedAdmit], 0);
  EXPECT_GT(stages[FuzzStage::kAnswered], 0);
  EXPECT_GT(stages[FuzzStage::kAdmitted], kGenerated / 20);
}

TEST(JobSpecFuzzTest, SeedsEndCleanlyAndReachEveryStage) {
  auto stages = RunAll(FuzzJobSpec, "capnp", JobSpecSeeds());
  for (FuzzStage stage :
       {FuzzStage::kRefusedWire, FuzzStage::kRefusedAdmit, FuzzStage::kAdmitted}) {
    EXPECT_GT(stages[stage], 0) << "no seed reached stage " << static_cast<int>(stage);
  }
}

TEST(JobSpecFuzzTest, MutationsEndCleanly) {
  auto stages =
      RunAll(FuzzJobSpec, "capnp-mutation", Mutations(JobSpecSeeds(), Mutator::Kind::kWords));
  EXPECT_GT(stages[FuzzStage::kRefusedWire], 0);
  EXPECT_GT(stages[FuzzStage::kRefusedAdmit], 0);
}

TEST(JobSpecFuzzTest, GeneratedSpecsEndCleanly) {
  std::mt19937_64 rng(kMutationSeed);
  std::vector<std::string> inputs;
  for (int i = 0; i < kGenerated; ++i) inputs.push_back(RandomJobSpec(rng));
  auto stages = RunAll(FuzzJobSpec, "capnp-generated", inputs);
  EXPECT_GT(stages[FuzzStage::kRefusedAdmit], 0);
  EXPECT_GT(stages[FuzzStage::kAdmitted], kGenerated / 20);
}

// What the seeds' edge cases must get, beyond ending cleanly.
std::optional<ApiError> Parse(Endpoint endpoint, const std::string& body, OpenAiRequest* out) {
  return ParseOpenAiRequest(endpoint, body, GetFuzzService().model, out);
}

TEST(FuzzEdgeCaseTest, OverflowingNumbersInAnyFieldAreInvalidJson) {
  for (const char* number : {"1e400", "-1e400", "1e999", "-1e999"}) {
    for (const char* key : {"max_tokens", "temperature", "x"}) {
      OpenAiRequest request;
      auto error = Parse(Endpoint::kCompletions,
                         std::string(R"({"prompt":"Hi",")") + key + "\":" + number + "}", &request);
      ASSERT_TRUE(error.has_value()) << key << " " << number;
      EXPECT_EQ(error->http_status, 400);
      EXPECT_EQ(error->code, "invalid_json") << error->message;
    }
  }
}

TEST(FuzzEdgeCaseTest, DeepNestingIsRefusedByDepth) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  OpenAiRequest request;
  auto error = Parse(Endpoint::kCompletions, R"({"prompt":"Hi","x":)" + deep + "}", &request);
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->message.find("nested deeper than"), std::string::npos) << error->message;
}

TEST(FuzzEdgeCaseTest, LoneSurrogatesAreRefusedAndPairsDecoded) {
  OpenAiRequest request;
  for (const char* lone : {R"("\ud800")", R"("\udc00")", R"("\ud800\u0041")"}) {
    auto error = Parse(Endpoint::kCompletions, std::string(R"({"prompt":)") + lone + "}", &request);
    ASSERT_TRUE(error.has_value()) << lone;
    EXPECT_EQ(error->code, "invalid_json");
  }
  auto error = Parse(Endpoint::kCompletions, R"({"prompt":"\ud83d\ude00"})", &request);
  ASSERT_FALSE(error.has_value()) << error->message;
  EXPECT_EQ(request.job.prompt_text, "\xf0\x9f\x98\x80");
}

TEST(FuzzEdgeCaseTest, MistypedChatPartsAndOptionsAreRefusedNotThrown) {
  for (const char* body :
       {R"({"messages":[{"role":"user","content":[{"type":5,"text":"Hi"}]}]})",
        R"({"messages":[{"role":"user","content":"Hi"}],"response_format":{"type":[]}})",
        R"({"messages":[{"role":"user","content":"Hi"}],"stream":true,)"
        R"("stream_options":{"continuous_usage_stats":"yes"}})"}) {
    OpenAiRequest request;
    auto error = Parse(Endpoint::kChatCompletions, body, &request);
    ASSERT_TRUE(error.has_value()) << body;
    EXPECT_EQ(error->http_status, 400) << body;
  }
}

TEST(FuzzEdgeCaseTest, ChunkedBodiesReachAdmission) {
  const std::string body = R"({"prompt":"Hello","max_tokens":2})";
  const std::string request = std::string("POST /v1/completions HTTP/1.1\r\nHost: x\r\n") +
                              "Authorization: Bearer " + kApiKey +
                              "\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n" + body.substr(0, 5) +
                              "\r\n" + "1c;ext=1\r\n" + body.substr(5) + "\r\n0\r\n\r\n";
  auto stage = FuzzHttpRequest(request);
  ASSERT_TRUE(stage.ok()) << stage.status().ToString();
  EXPECT_EQ(*stage, FuzzStage::kAdmitted);
}

}  // namespace
}  // namespace millipede::fuzz
