// The Cap'n Proto front end against a recording JobService, client and server on one KJ event
// loop over loopback TCP.
#include "rpc/rpc_server.h"

#include <capnp/rpc-twoparty.h>
#include <gtest/gtest.h>
#include <kj/async-io.h>

#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "rpc/millipede.capnp.h"
#include "rpc/rpc_errors.h"
#include "tests/coordinator/coordinator_test_util.h"

namespace millipede {
namespace {

class RecordingService final : public JobService {
 public:
  StatusOr<JobId> Submit(JobRequest request, std::shared_ptr<JobObserver> observer) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!refuse.ok()) return refuse;
    requests.push_back(request);
    observers.push_back(observer);
    return static_cast<JobId>(requests.size());
  }
  // As the scheduler's: idempotent (an ended job's cancel is Ok), NotFound for ids never issued.
  Status Cancel(JobId id) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (id == 0 || id > requests.size()) return NotFoundError("no job " + std::to_string(id));
    cancelled.push_back(id);
    return OkStatus();
  }
  // Decoding unless `ended` says otherwise; an id in `forgotten` ended too long ago.
  StatusOr<JobStatusInfo> GetStatus(JobId id) const override {
    std::lock_guard<std::mutex> lock(mu_);
    if (forgotten.count(id)) return NotFoundError("job " + std::to_string(id) + " ended");
    JobStatusInfo info;
    info.id = id;
    info.state = ended.count(id) ? ended.at(id) : JobState::kDecode;
    info.prompt_tokens = 3;
    return info;
  }
  ModelInfo GetModelInfo() const override {
    ModelInfo m;
    m.id = "recorded";
    m.context_limit = 4096;
    m.max_model_len = 1000;
    m.vocab_size = 256;
    return m;
  }
  HealthInfo GetHealth() const override { return {}; }
  const Tokenizer& tokenizer() const override { return *tokenizer_; }

  std::vector<JobId> Cancelled() {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled;
  }

  Status refuse;
  std::map<JobId, JobState> ended;
  std::set<JobId> forgotten;
  std::vector<JobRequest> requests;
  std::vector<std::shared_ptr<JobObserver>> observers;
  std::vector<JobId> cancelled;

 private:
  mutable std::mutex mu_;
  std::unique_ptr<Tokenizer> tokenizer_ = coordinator_test::ByteTokenizer();
};

// Collects what the server sends to the client's callback.
class Collector final : public rpc::JobCallback::Server {
 public:
  explicit Collector(std::string* log) : log_(log) {}

 protected:
  kj::Promise<void> progress(ProgressContext c) override {
    *log_ += "progress " + std::to_string(c.getParams().getTokensDone()) + ";";
    return kj::READY_NOW;
  }
  kj::Promise<void> token(TokenContext c) override {
    auto text = c.getParams().getText();
    *log_ += "token " + std::to_string(c.getParams().getId()) + " " +
             std::string(text.begin(), text.size()) + ";";
    if (c.getParams().getTop().size() > 0 || c.getParams().getLogprob() != 0) {
      *log_ += "logprob " + std::to_string(c.getParams().getLogprob()) + ";";
      for (auto t : c.getParams().getTop())
        *log_ += "top " + std::to_string(t.getId()) + " " + std::to_string(t.getLogprob()) + ";";
    }
    return kj::READY_NOW;
  }
  kj::Promise<void> complete(CompleteContext c) override {
    *log_ +=
        "complete " + std::string(c.getParams().getCompletion().getFinishReason().cStr()) + ";";
    return kj::READY_NOW;
  }
  kj::Promise<void> error(ErrorContext c) override {
    *log_ += "error " + std::string(c.getParams().getError().getCode().cStr()) + ";";
    return kj::READY_NOW;
  }

 private:
  std::string* log_;
};

// Server and client on one event loop. (KJ objects may throw from destructors, which a
// GoogleTest fixture may not, so they live behind a pointer.)
struct Loop {
  RecordingService service;
  kj::AsyncIoContext io = kj::setupAsyncIo();
  std::unique_ptr<rpc::RpcServer> server;
  kj::Own<kj::AsyncIoStream> stream;
  kj::Own<capnp::TwoPartyClient> client;
  rpc::Millipede::Client millipede = nullptr;

  void Connect() {
    millipede = nullptr;
    client = nullptr;
    stream = nullptr;
    auto address = io.provider->getNetwork()
                       .parseAddress("127.0.0.1", static_cast<unsigned>(server->port()))
                       .wait(io.waitScope);
    stream = address->connect().wait(io.waitScope);
    client = kj::heap<capnp::TwoPartyClient>(*stream);
    millipede = client->bootstrap().castAs<rpc::Millipede>();
  }
};

class RpcServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    loop_ = std::make_unique<Loop>();
    auto server = rpc::RpcServer::Start(loop_->service, loop_->io, "127.0.0.1:0");
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    loop_->server = std::move(server).value();
    loop_->Connect();
  }

  // Runs the loop until `done` or about two seconds passed.
  template <typename F>
  void RunUntil(F done) {
    for (int i = 0; i < 200 && !done(); ++i)
      loop_->io.provider->getTimer().afterDelay(10 * kj::MILLISECONDS).wait(ws());
  }
  kj::WaitScope& ws() { return loop_->io.waitScope; }
  // The service drops its observers before the server goes, as the scheduler does when jobs end.
  void TearDown() override {
    if (loop_) loop_->service.observers.clear();
    KJ_IF_MAYBE (e, kj::runCatchingExceptions([&] {
                   // The client goes first and the events its leaving queues (a job dropped,
                   // callbacks in flight) run before the loop that holds them is destroyed.
                   loop_->millipede = nullptr;
                   loop_->client = nullptr;
                   loop_->stream = nullptr;
                   for (int i = 0; i < 20; ++i) loop_->io.waitScope.poll();
                   delete loop_.release();
                 })) {
      ADD_FAILURE() << "tearing down: " << e->getDescription().cStr();
    }
  }

  std::unique_ptr<Loop> loop_;
};

TEST_F(RpcServerTest, SubmitStreamsEventsFromAnotherThreadInOrder) {
  std::string log;
  auto req = loop_->millipede.submitRequest();
  req.getSpec().getPrompt().setText("abc");
  req.getSpec().setMaxNewTokens(5);
  req.getSpec().getSampling().setTemperature(0.5f);
  req.setCallback(kj::heap<Collector>(&log));
  auto response = req.send().wait(ws());
  EXPECT_EQ(response.getId(), 1u);
  EXPECT_EQ(response.getPromptTokens(), 3);
  ASSERT_EQ(loop_->service.requests.size(), 1u);
  EXPECT_EQ(loop_->service.requests[0].prompt_text, "abc");
  EXPECT_EQ(loop_->service.requests[0].max_new_tokens, 5);
  EXPECT_FLOAT_EQ(loop_->service.requests[0].sampling.temperature, 0.5f);

  std::shared_ptr<JobObserver> observer = loop_->service.observers[0];
  std::thread service_thread([observer] {
    observer->OnProgress(3, 3);
    observer->OnToken({104, 0.0f, {}}, "h");
    observer->OnToken({105, 0.0f, {}}, std::string("i\0", 2));  // text may hold any byte
    JobCompletion done;
    done.finish_reason = "stop";
    observer->OnComplete(done);
  });
  service_thread.join();
  loop_->service.observers.clear();
  observer.reset();
  RunUntil([&] { return log.find("complete") != std::string::npos; });
  EXPECT_EQ(log, "progress 3;token 104 h;token 105 i" + std::string(1, '\0') + ";complete stop;");
}

TEST_F(RpcServerTest, SamplingParametersAndLogprobsTravel) {
  std::string log;
  auto req = loop_->millipede.submitRequest();
  req.getSpec().getPrompt().setText("abc");
  auto s = req.getSpec().getSampling();
  s.setRepetitionPenalty(1.25f);
  s.setPresencePenalty(-0.5f);
  s.setFrequencyPenalty(0.75f);
  s.setMinP(0.1f);
  auto bias = s.initLogitBias(2);
  bias[0].setId(3);
  bias[0].setBias(-100.0f);
  bias[1].setId(9);
  bias[1].setBias(2.5f);
  s.setLogprobs(2);
  req.setCallback(kj::heap<Collector>(&log));
  req.send().wait(ws());
  ASSERT_EQ(loop_->service.requests.size(), 1u);
  const SamplingParams& p = loop_->service.requests[0].sampling;
  EXPECT_FLOAT_EQ(p.repetition_penalty, 1.25f);
  EXPECT_FLOAT_EQ(p.presence_penalty, -0.5f);
  EXPECT_FLOAT_EQ(p.frequency_penalty, 0.75f);
  EXPECT_FLOAT_EQ(p.min_p, 0.1f);
  ASSERT_EQ(p.logit_bias.size(), 2u);
  EXPECT_EQ(p.logit_bias[1].id, 9);
  EXPECT_FLOAT_EQ(p.logit_bias[1].bias, 2.5f);
  EXPECT_EQ(p.logprobs, 2);

  std::shared_ptr<JobObserver> observer = loop_->service.observers[0];
  std::thread service_thread([observer] {
    observer->OnToken({104, -0.5f, {{104, -0.5f}, {7, -1.5f}}}, "h");
    observer->OnComplete(JobCompletion{"length", {104}, "h"});
  });
  service_thread.join();
  loop_->service.observers.clear();
  observer.reset();
  RunUntil([&] { return log.find("complete") != std::string::npos; });
  EXPECT_EQ(log,
            "token 104 h;logprob -0.500000;top 104 -0.500000;top 7 -1.500000;complete length;");

  // Without a sampling struct the defaults are the wire's: nothing on, no logprobs.
  auto plain = loop_->millipede.submitRequest();
  plain.getSpec().getPrompt().setText("x");
  plain.setCallback(kj::heap<Collector>(&log));
  plain.send().wait(ws());
  const SamplingParams& d = loop_->service.requests[1].sampling;
  EXPECT_EQ(d.repetition_penalty, 1.0f);
  EXPECT_EQ(d.logprobs, -1);
  EXPECT_FALSE(d.ProcessesLogits());
}

TEST_F(RpcServerTest, DroppingTheJobCancelsIt) {
  std::string log;
  {
    auto req = loop_->millipede.submitRequest();
    req.getSpec().getPrompt().initIds(2).set(0, 7);
    req.setCallback(kj::heap<Collector>(&log));
    auto response = req.send().wait(ws());
    EXPECT_EQ(loop_->service.requests[0].prompt_ids, (std::vector<int32_t>{7, 0}));
    EXPECT_TRUE(loop_->service.Cancelled().empty());
  }  // the response, and with it the Job capability, is dropped here
  RunUntil([&] { return !loop_->service.Cancelled().empty(); });
  EXPECT_EQ(loop_->service.Cancelled(), std::vector<JobId>{1});
}

// cancel answers the status it found; a job that already ended is no error; only an id never
// issued is NOT_FOUND.
TEST_F(RpcServerTest, CancelIsIdempotentAndAnswersTheStatusItFound) {
  std::string log;
  auto submit = loop_->millipede.submitRequest();
  submit.getSpec().getPrompt().setText("x");
  submit.setCallback(kj::heap<Collector>(&log));
  auto response = submit.send().wait(ws());
  const JobId id = response.getId();
  auto by_id = [&] {
    auto req = loop_->millipede.cancelRequest();
    req.setId(id);
    return req.send().wait(ws());
  };
  auto running = by_id();
  ASSERT_TRUE(running.hasStatus());
  EXPECT_EQ(running.getStatus().getState(), rpc::JobState::DECODE);
  // It ended (the client's cancel raced its end): both cancels succeed, with the final state.
  loop_->service.ended[id] = JobState::kFinished;
  auto finished = by_id();
  ASSERT_TRUE(finished.hasStatus());
  EXPECT_EQ(finished.getStatus().getState(), rpc::JobState::FINISHED);
  auto through_job = response.getJob().cancelRequest().send().wait(ws());
  ASSERT_TRUE(through_job.hasStatus());
  EXPECT_EQ(through_job.getStatus().getState(), rpc::JobState::FINISHED);
  // Its final status no longer kept: still no error, and no status.
  loop_->service.forgotten.insert(id);
  EXPECT_FALSE(by_id().hasStatus());
  EXPECT_EQ(loop_->service.Cancelled(), (std::vector<JobId>{id, id, id, id}));
  // Never issued.
  auto unknown = loop_->millipede.cancelRequest();
  unknown.setId(id + 1);
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&] { unknown.send().wait(ws()); })) {
    EXPECT_EQ(rpc::StatusFromException(*e).code(), StatusCode::kNotFound);
  } else {
    ADD_FAILURE() << "cancelling an id never issued succeeded";
  }
}

TEST_F(RpcServerTest, ModelInfoCarriesMaxModelLenAndTheVocabulary) {
  auto info = loop_->millipede.modelInfoRequest().send().wait(ws()).getInfo();
  EXPECT_EQ(info.getContextLimit(), 4096);
  EXPECT_EQ(info.getMaxModelLen(), 1000);
  EXPECT_EQ(info.getVocabSize(), 256);
}

TEST_F(RpcServerTest, RefusedSubmissionCarriesTheStatusCode) {
  loop_->service.refuse = ResourceExhaustedError("queue full: 64 jobs are waiting");
  std::string log;
  auto req = loop_->millipede.submitRequest();
  req.getSpec().getPrompt().setText("x");
  req.setCallback(kj::heap<Collector>(&log));
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&] { req.send().wait(ws()); })) {
    Status s = rpc::StatusFromException(*e);
    EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
    EXPECT_EQ(s.message(), "queue full: 64 jobs are waiting");
  } else {
    ADD_FAILURE() << "the submission was not refused";
  }
}

TEST_F(RpcServerTest, OversizedMessageClosesOnlyThatConnection) {
  std::string log;
  auto req = loop_->millipede.submitRequest();
  // 80 MiB of ids: over the 64 MiB limit on every message a peer sends.
  req.getSpec().getPrompt().initIds(20 << 20);
  req.setCallback(kj::heap<Collector>(&log));
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&] { req.send().wait(ws()); })) {
    EXPECT_EQ(rpc::StatusFromException(*e).code(), StatusCode::kIoError);
  } else {
    ADD_FAILURE() << "an oversized message was accepted";
  }
  EXPECT_TRUE(loop_->service.requests.empty());
  // A new connection is served.
  loop_->Connect();
  auto info = loop_->millipede.modelInfoRequest().send().wait(ws());
  EXPECT_EQ(std::string(info.getInfo().getId().cStr()), "recorded");
}

}  // namespace
}  // namespace millipede
