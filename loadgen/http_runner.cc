// RunHttp: each request of the plan on a connection and thread of its own, streamed as
// server-sent events from POST /v1/completions.
#include <atomic>
#include <condition_variable>
#include <list>
#include <mutex>
#include <thread>

#include "common/json_util.h"
#include "loadgen/http_client.h"
#include "loadgen/runner.h"

namespace millipede::loadgen {
namespace {

// Requests in flight at most; unlimited when the limit is 0.
class Slots {
 public:
  explicit Slots(int64_t limit) : free_(limit > 0 ? limit : INT64_MAX) {}
  void Acquire() {
    std::unique_lock<std::mutex> lock(mutex_);
    freed_.wait(lock, [this] { return free_ > 0; });
    --free_;
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mutex_);
    ++free_;
    freed_.notify_one();
  }

 private:
  std::mutex mutex_;
  std::condition_variable freed_;
  int64_t free_;
};

std::string RequestBody(const PlannedRequest& plan, const RunOptions& o) {
  Json body = {{"model", o.model},
               {"prompt", RequestPromptIds(o.seed, plan, o.document_tokens, o.vocab_size)},
               {"max_tokens", plan.output_tokens},
               {"temperature", 0},
               {"ignore_eos", true},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  return body.dump();
}

// A failure from an error body ({"error": {"message", "code", ...}}): `code` plus the body's
// error code, and its message (or the start of the body when it is not such JSON).
void FailFromBody(std::string code, const std::string& body, RequestRecord& r) {
  r.outcome = Outcome::kFailed;
  r.failure_code = std::move(code);
  r.failure_message = body.substr(0, 300);
  StatusOr<Json> json = ParseJson(body, "error body");
  if (!json.ok() || !json->is_object() || !(*json)["error"].is_object()) return;
  const Json& e = (*json)["error"];
  if (e.value("code", Json()).is_string()) r.failure_code += "_" + e["code"].get<std::string>();
  if (e.value("message", Json()).is_string()) r.failure_message = e["message"];
}

// Follows one streaming response into its record. OnEvent returns true when the request is over
// (done, failed or at its cancel point), with the record's outcome saying which.
class StreamReader {
 public:
  StreamReader(const PlannedRequest& plan, Clock::time_point t0, RequestRecord& r)
      : plan_(plan), t0_(t0), r_(r) {}

  // Handles one SSE event.
  bool OnEvent(const SseEvent& event) {
    if (event.comment) {
      if (event.data.rfind("prefill", 0) == 0) prefill_started_ = true;
      return CancelIfDue();
    }
    if (event.data == "[DONE]") {
      r_.outcome = Outcome::kOk;
      return true;
    }
    StatusOr<Json> chunk = ParseJson(event.data, "stream event");
    if (!chunk.ok() || !chunk->is_object()) return Fail("bad_event", event.data.substr(0, 300));
    if (chunk->contains("error")) {
      FailFromBody("stream_error", event.data, r_);
      return true;
    }
    const Json& choices = chunk->value("choices", Json::array());
    if (choices.is_array() && !choices.empty() && choices[0].is_object()) {
      const Json& text = choices[0].value("text", Json());
      if (text.is_string() && !text.get<std::string>().empty()) {
        r_.output_times_s.push_back(SecondsSince(t0_));
      }
    }
    const Json& usage = chunk->value("usage", Json());
    if (usage.is_object() && usage.value("completion_tokens", Json()).is_number_integer()) {
      r_.output_tokens = usage["completion_tokens"].get<int64_t>();
    }
    if (usage.is_object() && usage.contains("prompt_tokens_details") &&
        usage["prompt_tokens_details"].is_object() &&
        usage["prompt_tokens_details"].value("cached_tokens", Json()).is_number_integer()) {
      r_.cached_tokens = usage["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
    }
    return CancelIfDue();
  }

 private:
  bool CancelIfDue() {
    if (!plan_.cancel_after_tokens ||
        !CancelDue(plan_, prefill_started_, static_cast<int64_t>(r_.output_times_s.size()))) {
      return false;
    }
    r_.outcome = Outcome::kCancelled;
    return true;
  }
  bool Fail(const char* code, std::string message) {
    r_.outcome = Outcome::kFailed;
    r_.failure_code = code;
    r_.failure_message = std::move(message);
    return true;
  }

  const PlannedRequest& plan_;
  const Clock::time_point t0_;
  RequestRecord& r_;
  bool prefill_started_ = false;
};

// Reads events until the stream ends, the request fails, or its cancel point: the connection is
// then closed, which the server sees as a disconnect.
Status ReadStream(HttpConnection& c, const PlannedRequest& plan, Clock::time_point t0,
                  RequestRecord& r) {
  StreamReader reader(plan, t0, r);
  SseParser parser;
  std::string bytes;
  for (;;) {
    bytes.clear();
    MP_ASSIGN_OR_RETURN(bool more, c.ReadBody(&bytes));
    parser.Feed(bytes);
    while (auto event = parser.Next()) {
      if (reader.OnEvent(*event)) {
        c.Close();
        return OkStatus();
      }
    }
    if (!more) return IoError("the stream ended without [DONE]");
  }
}

void RunOne(const HttpTarget& target, const PlannedRequest& plan, const RunOptions& o,
            Clock::time_point t0, RequestRecord& r) {
  const std::string body = RequestBody(plan, o);
  r.start_s = SecondsSince(t0);
  std::unique_ptr<HttpConnection> c;
  Status s = [&]() -> Status {
    MP_ASSIGN_OR_RETURN(
        c, HttpConnection::Open(target.host, target.port, DeadlineAfter(o.request_timeout_s)));
    MP_RETURN_IF_ERROR(c->SendRequest("POST", target, "/v1/completions", body, o.api_key));
    MP_ASSIGN_OR_RETURN(HttpResponseHead head, c->ReadHead());
    if (head.status == 200) return ReadStream(*c, plan, t0, r);
    std::string error_body;
    for (bool more = true; more;) {
      MP_ASSIGN_OR_RETURN(more, c->ReadBody(&error_body));
    }
    FailFromBody("http_" + std::to_string(head.status), error_body, r);
    return OkStatus();
  }();
  if (!s.ok()) {
    r.outcome = Outcome::kFailed;
    r.failure_code = c && c->timed_out() ? "timeout" : "IO_ERROR";
    r.failure_message = s.message();
  }
  // Without a usage event (a cancelled stream, or a server that sends none) the streamed text
  // chunks stand for the tokens.
  if (r.output_tokens == 0) r.output_tokens = static_cast<int64_t>(r.output_times_s.size());
  r.end_s = SecondsSince(t0);
}

}  // namespace

StatusOr<std::vector<RequestRecord>> RunHttp(const HttpTarget& target,
                                             const std::vector<PlannedRequest>& plan,
                                             const RunOptions& options) {
  MP_REQUIRE(options.vocab_size > 0, "the vocabulary size must be positive");
  MP_REQUIRE(!options.model.empty(), "the model name is empty");
  std::vector<RequestRecord> records;
  for (const PlannedRequest& p : plan) records.push_back(RecordFor(p));
  Slots slots(options.max_concurrency);
  // Threads still to join, each with the flag it sets last; finished ones are joined as the run
  // goes, so a long run holds only the threads of requests in flight.
  std::list<std::pair<std::thread, std::atomic<bool>>> threads;
  auto reap = [&threads] {
    threads.remove_if([](std::pair<std::thread, std::atomic<bool>>& t) {
      if (!t.second.load()) return false;
      t.first.join();
      return true;
    });
  };
  const Clock::time_point t0 = Clock::now();
  for (size_t i = 0; i < plan.size(); ++i) {
    std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(plan[i].send_at_s)));
    slots.Acquire();
    reap();
    auto& entry = threads.emplace_back();
    entry.first = std::thread([&, i, done = &entry.second] {
      RunOne(target, plan[i], options, t0, records[i]);
      slots.Release();
      done->store(true);
    });
  }
  for (auto& t : threads) t.first.join();
  return records;
}

StatusOr<ListedModel> ModelFromList(const std::string& body, const std::string& wanted) {
  MP_ASSIGN_OR_RETURN(Json list, ParseJson(body, "GET /v1/models"));
  MP_REQUIRE(list.is_object(), "GET /v1/models answered no JSON object");
  const Json data = list.value("data", Json());
  MP_REQUIRE(data.is_array() && !data.empty(), "GET /v1/models lists no model");
  // A server that lists one model answers to its other names too (the model's own id beside
  // the served name): `wanted` need not be the listed id then.
  const bool only_one = data.size() == 1;
  for (const Json& entry : data) {
    if (!entry.is_object() || !entry.value("id", Json()).is_string()) continue;
    ListedModel model{entry["id"].get<std::string>(), 0};
    if (!wanted.empty() && model.id != wanted && !only_one) continue;
    const Json vocab = entry.value("vocab_size", Json());
    if (!vocab.is_null()) {
      MP_REQUIRE(vocab.is_number_integer() && vocab.get<int64_t>() > 0,
                 "GET /v1/models gives model ", model.id, " the vocab_size ", vocab.dump(),
                 "; give --vocab-size");
      model.vocab_size = vocab.get<int64_t>();
    }
    return model;
  }
  MP_REQUIRE(!wanted.empty(), "GET /v1/models lists no model with an id; give --model");
  return InvalidArgumentError("GET /v1/models does not list the model \"" + wanted + "\"");
}

}  // namespace millipede::loadgen
