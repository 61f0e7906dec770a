// millipede-run: offline generation with the engine, one prompt per run.
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/file_util.h"
#include "common/flags.h"
#include "model_files/model_files.h"
#include "tokenizer/tokenizer.h"
#include "worker/dist/mpi_main.h"
#include "worker/engine_flags.h"
#include "worker/generate.h"

namespace millipede {
namespace {

constexpr char kUsage[] = R"(usage: [mpirun -np N] millipede-run --model MODEL
           (--prompt TEXT | --prompt-file F | --prompt-ids F) --max-new-tokens N [options]

Under mpirun the N ranks share the job: the prompt is sharded over them (context parallelism)
and rank 0 prints the result.

  --prompt TEXT          prompt text (tokenized with the model's tokenizer)
  --prompt-file F        prompt text from a file ("-" for stdin)
  --prompt-ids F         whitespace-separated token ids from a file ("-" for stdin)
  --max-new-tokens N     tokens to generate at most (default 16)
  --stop-id ID           also stop after this token id (repeatable)
  --ignore-eos           do not stop at the model's EOS ids
  --no-bos               do not prepend the tokenizer's BOS token to a text prompt
  --json                 print one JSON object: ids, text, finish_reason, timings (and
                         logprobs: per token [id, logprob, [[id, logprob], ...]])
Sampling:
)";

// Reads a prompt file ("-" = stdin). Under mpirun only rank 0 has stdin, so rank 0 reads and
// sends the text to the other ranks.
StatusOr<std::string> ReadInput(const std::string& path, int rank, Communicator* comm) {
  if (comm != nullptr && comm->size() > 1) {
    std::string text;
    Status read = OkStatus();
    if (rank == 0) {
      StatusOr<std::string> r = ReadInput(path, 0, nullptr);
      if (r.ok()) {
        text = std::move(r).value();
      } else {
        read = r.status();
      }
    }
    // A failed read is sent as length -1, so every rank fails together.
    int64_t length = read.ok() ? static_cast<int64_t>(text.size()) : -1;
    MP_RETURN_IF_ERROR(comm->HostBroadcast(&length, sizeof(length), 0));
    if (length < 0) return read.ok() ? IoError("rank 0 could not read " + path) : read;
    text.resize(static_cast<size_t>(length));
    MP_RETURN_IF_ERROR(comm->HostBroadcast(text.data(), text.size(), 0));
    return text;
  }
  if (path == "-") {
    std::ostringstream s;
    s << std::cin.rdbuf();
    return s.str();
  }
  return ReadFileToString(path);
}

Status Run(int argc, char** argv, const MpiWorld& world) {
  const int rank = world.rank;
  MP_ASSIGN_OR_RETURN(Flags flags, Flags::Parse(argc, argv,
                                                {"json", "ignore-eos", "no-bos", "profile",
                                                 "random-weights", "help"}));
  if (flags.GetBool("help")) {
    std::cout << kUsage << kSamplingFlagsUsage << "Engine:\n" << kEngineFlagsUsage;
    return OkStatus();
  }
  std::vector<std::string> known = {"prompt",         "prompt-file", "prompt-ids",
                                    "max-new-tokens", "stop-id",     "ignore-eos",
                                    "no-bos",         "json",        "help"};
  for (const std::string& name : EngineFlagNames()) known.push_back(name);
  for (const std::string& name : SamplingFlagNames()) known.push_back(name);
  MP_RETURN_IF_ERROR(flags.CheckKnown(known));
  MP_REQUIRE(flags.positional().empty(), "unexpected argument \"", flags.positional()[0], "\"");
  const int sources = flags.Has("prompt") + flags.Has("prompt-file") + flags.Has("prompt-ids");
  MP_REQUIRE(sources == 1, "give exactly one of --prompt, --prompt-file, --prompt-ids");

  MP_ASSIGN_OR_RETURN(EngineOptions options, ParseEngineFlags(flags, world.local_rank));
  MP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                      CreateDataPlane(MPI_COMM_WORLD, world.local_rank, options.backend));

  GenerationRequest request;
  MP_ASSIGN_OR_RETURN(request.max_new_tokens, flags.GetInt("max-new-tokens", 16));
  MP_ASSIGN_OR_RETURN(request.sampling, SamplingParamsFromFlags(flags));
  for (const std::string& s : flags.GetAll("stop-id")) {
    MP_ASSIGN_OR_RETURN(int64_t id, ParseInt64(s, "--stop-id"));
    MP_REQUIRE(id >= 0 && id <= INT32_MAX, "--stop-id ", id, " out of range");
    request.stop_ids.push_back(static_cast<int32_t>(id));
  }
  request.ignore_eos = flags.GetBool("ignore-eos");

  std::unique_ptr<Tokenizer> tokenizer;
  StatusOr<std::unique_ptr<Tokenizer>> loaded = LoadModelTokenizer(options.model_path);
  if (loaded.ok()) {
    tokenizer = std::move(loaded).value();
  } else if (loaded.status().code() != StatusCode::kNotFound) {
    return loaded.status();
  }
  if (auto ids_path = flags.Get("prompt-ids")) {
    MP_ASSIGN_OR_RETURN(std::string text, ReadInput(*ids_path, rank, comm.get()));
    MP_ASSIGN_OR_RETURN(request.prompt_ids, ParseTokenIds(text));
  } else {
    MP_REQUIRE(tokenizer != nullptr, loaded.status().message(),
               ": give the prompt as ids with --prompt-ids");
    std::string text;
    if (auto p = flags.Get("prompt")) {
      text = *p;
    } else {
      MP_ASSIGN_OR_RETURN(text, ReadInput(*flags.Get("prompt-file"), rank, comm.get()));
    }
    // Like transformers' encode(add_special_tokens=True): the BOS of the tokenizer's template
    // (a tokenizer without a template adds none, there as here).
    MP_ASSIGN_OR_RETURN(request.prompt_ids,
                        EncodePrompt(*tokenizer, text, !flags.GetBool("no-bos")));
  }

  MP_ASSIGN_OR_RETURN(auto engine, Engine::Create(options, std::move(comm)));
  // Only rank 0 speaks; the other ranks compute the same result silently.
  const bool quiet = rank != 0;
  const bool json = flags.GetBool("json");
  std::unique_ptr<StreamingDecoder> stream;
  if (tokenizer && !json && !quiet) stream = std::make_unique<StreamingDecoder>(*tokenizer, true);
  Status stream_status;
  nlohmann::json logprobs = nlohmann::json::array();
  auto on_token = [&](const SampledToken& token) {
    const int32_t id = token.id;
    if (request.sampling.logprobs >= 0) {
      nlohmann::json top = nlohmann::json::array();
      for (const TokenLogprob& t : token.top) top.push_back({t.id, t.logprob});
      logprobs.push_back({id, token.logprob, top});
    }
    if (stream) {
      auto piece = stream->Push(id);
      if (!piece.ok()) {
        stream_status = piece.status();
        return false;
      }
      std::cout << *piece << std::flush;
    } else if (!json && !quiet) {
      std::cout << id << ' ' << std::flush;
    }
    return true;
  };
  StatusOr<GenerationResult> result = Generate(*engine, request, on_token);
  MP_RETURN_IF_ERROR(stream_status);
  if (!result.ok()) return result.status();
  if (quiet) return OkStatus();
  if (stream) std::cout << stream->Finish();

  std::string text;
  if (tokenizer) {
    MP_ASSIGN_OR_RETURN(text, tokenizer->Decode(result->ids, /*skip_special_tokens=*/true));
  }
  if (json) {
    nlohmann::json out = {
        {"ids", result->ids},
        {"text", text},
        {"finish_reason", FinishReasonName(result->finish_reason)},
        {"prompt_tokens", result->prompt_tokens},
        {"generated_tokens", result->ids.size()},
        {"ttft_s", result->ttft_s},
        {"prefill_tokens_per_s", result->prefill_tokens_per_s()},
        {"prefill_density", result->prefill.causal_pairs > 0
                                ? static_cast<double>(result->prefill.attended_pairs) /
                                      static_cast<double>(result->prefill.causal_pairs)
                                : 1.0},
        {"decode_tokens_per_s", result->decode_tokens_per_s()},
        {"backend", BackendKindName(options.backend)},
        {"ranks", engine->comm().size()},
    };
    if (request.sampling.logprobs >= 0) out["logprobs"] = logprobs;
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::cout << "\n";
    std::cerr << "millipede-run: " << result->prompt_tokens << " prompt tokens, "
              << result->ids.size() << " generated (" << FinishReasonName(result->finish_reason)
              << "), TTFT " << result->ttft_s << " s, prefill " << result->prefill_tokens_per_s()
              << " tok/s, decode " << result->decode_tokens_per_s() << " tok/s, "
              << engine->comm().size() << " rank(s)\n";
  }
  return OkStatus();
}

}  // namespace
}  // namespace millipede

int main(int argc, char** argv) {
  return millipede::RunMpiMain("millipede-run", argc, argv, millipede::Run);
}
