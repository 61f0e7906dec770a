// millipede-test-logits: runs one prompt through the engine and writes the logits of its last
// position, so that tests can compare them with an independent implementation (hf_oracle_test.py
// compares them with Hugging Face transformers). Test-only: not installed.
#include <cstdint>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "common/flags.h"
#include "tests/worker/engine/single_sequence.h"
#include "worker/engine/engine.h"

namespace millipede {
namespace {

constexpr char kUsage[] =
    R"(usage: millipede-test-logits --model MODEL --prompt-ids FILE --out FILE [options]

Runs the prompt through the engine in one prefill and writes the last position's logits to FILE
as vocab_size raw little-endian float32 values.

  --model MODEL          a Hugging Face model directory or a GGUF file
  --prompt-ids FILE      whitespace-separated token ids
  --out FILE             where to write the logits
  --kv-dtype D           KV cache storage: bf16 (default) | fp16 | fp32 | fp8
  --kv-scales FILE       with fp8: per-layer K/V scales (as the engine's --kv-scales)
  --weight-dtype D       a GGUF file's weights, dequantised at load into: auto (default: fp32
                         on the CPU backend, bf16 on a GPU) | fp32 | bf16 | fp16
  --prefill-chunk N      tokens per projection/MLP chunk (default 512)
  --backend B            cpu (default) | cuda
)";

StatusOr<std::vector<int32_t>> ParseIds(const std::string& text, const std::string& path) {
  std::vector<int32_t> ids;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    MP_ASSIGN_OR_RETURN(int64_t v, ParseInt64(word, path + ": token id"));
    MP_REQUIRE(v >= 0 && v <= INT32_MAX, path, ": token id ", v, " out of range");
    ids.push_back(static_cast<int32_t>(v));
  }
  MP_REQUIRE(!ids.empty(), path, ": no token ids");
  return ids;
}

// The floats as little-endian bytes whatever the host's byte order, so the file format is fixed.
std::string LittleEndianFloats(const std::vector<float>& values) {
  std::string bytes;
  bytes.reserve(values.size() * 4);
  for (float f : values) {
    uint32_t bits;
    static_assert(sizeof(bits) == sizeof(f));
    std::memcpy(&bits, &f, sizeof(bits));
    for (int shift = 0; shift < 32; shift += 8) bytes.push_back(static_cast<char>(bits >> shift));
  }
  return bytes;
}

Status Run(int argc, char** argv) {
  MP_ASSIGN_OR_RETURN(Flags flags, Flags::Parse(argc, argv, {"help"}));
  if (flags.GetBool("help")) {
    std::cout << kUsage;
    return OkStatus();
  }
  MP_RETURN_IF_ERROR(flags.CheckKnown({"model", "prompt-ids", "out", "kv-dtype", "kv-scales",
                                       "weight-dtype", "prefill-chunk", "backend", "help"}));
  MP_REQUIRE(flags.positional().empty(), "unexpected argument \"", flags.positional()[0], "\"");

  EngineOptions options;
  MP_ASSIGN_OR_RETURN(options.model_path, flags.GetRequired("model"));
  MP_ASSIGN_OR_RETURN(std::string ids_path, flags.GetRequired("prompt-ids"));
  MP_ASSIGN_OR_RETURN(std::string out_path, flags.GetRequired("out"));
  MP_ASSIGN_OR_RETURN(options.kv_dtype, ParseKvDTypeName(flags.Get("kv-dtype").value_or("bf16")));
  if (const std::optional<std::string> scales = flags.Get("kv-scales")) {
    MP_ASSIGN_OR_RETURN(options.kv_scales, ReadKvScalesFile(*scales));
  }
  MP_ASSIGN_OR_RETURN(options.prefill_chunk, flags.GetInt("prefill-chunk", 512));
  MP_ASSIGN_OR_RETURN(options.backend, ParseBackendKind(flags.Get("backend").value_or("cpu")));
  const std::string weight_dtype = flags.Get("weight-dtype").value_or("auto");
  if (weight_dtype != "auto") {
    MP_ASSIGN_OR_RETURN(DType dtype, ParseFloatDTypeName(weight_dtype));
    MP_REQUIRE(dtype != DType::kF64, "--weight-dtype: fp32, bf16 or fp16, not ", weight_dtype);
    options.gguf_weight_dtype = dtype;
  }

  MP_ASSIGN_OR_RETURN(std::string ids_text, ReadFileToString(ids_path));
  MP_ASSIGN_OR_RETURN(std::vector<int32_t> ids, ParseIds(ids_text, ids_path));

  MP_ASSIGN_OR_RETURN(auto engine, Engine::Create(options));
  MP_RETURN_IF_ERROR(testing::StartSequence(*engine, static_cast<int64_t>(ids.size())));
  std::vector<float> logits;
  MP_RETURN_IF_ERROR(testing::ForwardToHost(*engine, ids, &logits));
  testing::EndSequence(*engine);
  MP_ASSERT(static_cast<int64_t>(logits.size()) == engine->config().vocab_size);
  return WriteStringToFile(out_path, LittleEndianFloats(logits));
}

}  // namespace
}  // namespace millipede

int main(int argc, char** argv) {
  millipede::Status s = millipede::Run(argc, argv);
  if (!s.ok()) {
    std::cerr << "millipede-test-logits: " << s.ToString() << "\n";
    return 1;
  }
  return 0;
}
