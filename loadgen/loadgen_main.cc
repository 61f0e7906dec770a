// millipede-loadgen: a serving benchmark against a running service, over the Cap'n Proto API or
// the OpenAI HTTP API (docs/operations.md, "Load generator").
#include <fstream>
#include <iostream>
#include <thread>

#include "common/flags.h"
#include "loadgen/http_client.h"
#include "loadgen/prom_text.h"
#include "loadgen/report.h"
#include "loadgen/runner.h"
#include "loadgen/sweep.h"
#include "rpc/client_connection.h"
#include "rpc/rpc_errors.h"

namespace millipede::loadgen {
namespace {

constexpr char kUsage[] = R"(usage: millipede-loadgen (--rpc HOST:PORT | --http HOST:PORT) [options]

Sends a planned load of streaming requests (token-id prompts, EOS ignored, greedy) and reports
TTFT, time per output token, inter-token and end-to-end latency, throughput and outcomes.

Arrivals:
  --num-requests N       requests of the arrival process (default 100 unless --duration)
  --duration S           stop the arrival process after S seconds (needs a finite rate)
  --rate R               requests per second, or inf: all at once (default inf)
  --arrival poisson|fixed  exponential or equal gaps at the rate (default poisson)
  --seed N               seeds arrivals, lengths, cancels and prompts (default 0)
  --max-concurrency N    requests in flight at most; later ones wait (default: no limit)
Lengths (tokens):
  --prompt-len N|A:B     prompt length, fixed or uniform in [A, B] (default 1024)
  --output-len N|A:B     output length (default 128)
  --mix W:P:O,...        classes of weight W, prompt P and output O instead of the two above
  --place T:P:O          also send a request of P + O tokens at T seconds (repeatable)
Shared documents (the prefix cache's workload):
  --documents N:T        N documents of T tokens; a share of the arrivals (below) start with one
                         of them, drawn uniformly, before their own prompt of the length above
  --document-share F     that share, in [0, 1] (default 0.8)
  --warm-documents       first send one request about each document, one at a time, and start
                         the load when they are done (reported apart): the load finds them cached
Cancels:
  --cancel-fraction F    cancel (RPC) or disconnect (HTTP) this share of the requests at a
                         random point: during prefill or after some output (default 0)
  --request-timeout-s S  fail and cancel a request not done S seconds after it was sent
Service:
  --vocab-size N         prompt ids lie in [0, N) (default: the model's vocabulary as the
                         server reports it, over HTTP in GET /v1/models' vocab_size)
  --model NAME           HTTP: the model field (default: the first of GET /v1/models)
  --api-key KEY          HTTP: sent as "Authorization: Bearer KEY"
  --metrics-url URL      scrape the coordinator's /metrics at the end (KV and job gauges)
  --wait-idle-s S        with --metrics-url: poll up to S seconds for no KV and no jobs
Sweep (the same load at several rates and under several policies, one run after another):
  --sweep-rates R1,R2,...  run the arrival process at each rate in turn (instead of --rate)
  --policies NAME[=FILE],...  and under each attention policy in turn (RPC: each request
                         carries FILE's policy JSON; a NAME alone: the workers' default)
  Each run draws its own arrivals and prompts (the seed plus the run's number, from 0), so that
  no run finds an earlier one's prompts in the prefix cache.
  --ttft-p50-limit-s S   report each policy's highest rate whose TTFT p50 stays below S and
                         whose requests all ended as planned, with its output tokens per second
                         beside the first policy's (default 1)
  With --metrics-url, each run waits for the service to be idle (up to --wait-idle-s) before
  the next starts.
Output:
  --json FILE            the report as JSON ("-" = stdout, and no table)
  --quiet                no table on stdout

Exit status: 0 when every request ended as planned (done, or cancelled), 2 when one failed or
the service did not return to idle within --wait-idle-s, 1 on a usage or connection error.
)";

int Fail(const Status& s) {
  std::cerr << "millipede-loadgen: error: " << s.ToString() << "\n";
  return 1;
}

StatusOr<WorkloadOptions> WorkloadFromFlags(const Flags& f) {
  WorkloadOptions w;
  MP_ASSIGN_OR_RETURN(w.rate, ParseRate(f.Get("rate").value_or("inf")));
  if (auto sweep = f.Get("sweep-rates")) {
    // Checked at the first rate here, and at each rate before its run.
    MP_ASSIGN_OR_RETURN(const std::vector<double> rates, ParseSweepRates(*sweep));
    w.rate = rates.front();
  }
  const std::string arrival = f.Get("arrival").value_or("poisson");
  MP_REQUIRE(arrival == "poisson" || arrival == "fixed", "--arrival is poisson or fixed");
  w.process = arrival == "fixed" ? ArrivalProcess::kFixed : ArrivalProcess::kPoisson;
  if (f.Has("duration")) {
    MP_ASSIGN_OR_RETURN(double d, f.GetDouble("duration", 0));
    w.duration_s = d;
  }
  if (f.Has("num-requests") || !f.Has("duration")) {
    MP_ASSIGN_OR_RETURN(int64_t n, f.GetInt("num-requests", 100));
    w.num_requests = n;
  }
  MP_REQUIRE(!f.Has("mix") || (!f.Has("prompt-len") && !f.Has("output-len")),
             "--mix replaces --prompt-len and --output-len");
  if (auto mix = f.Get("mix")) {
    MP_ASSIGN_OR_RETURN(w.lengths.mix, ParseLengthMix(*mix));
  }
  MP_ASSIGN_OR_RETURN(w.lengths.prompt,
                      ParseLengthRange(f.Get("prompt-len").value_or("1024"), "--prompt-len"));
  MP_ASSIGN_OR_RETURN(w.lengths.output,
                      ParseLengthRange(f.Get("output-len").value_or("128"), "--output-len"));
  for (const std::string& p : f.GetAll("place")) {
    MP_ASSIGN_OR_RETURN(PlacedRequest placed, ParsePlacedRequest(p));
    w.placed.push_back(placed);
  }
  if (auto docs = f.Get("documents")) {
    MP_ASSIGN_OR_RETURN(w.documents, ParseDocuments(*docs));
  }
  MP_REQUIRE(!f.Has("document-share") || f.Has("documents"), "--document-share needs --documents");
  MP_ASSIGN_OR_RETURN(w.documents.share, f.GetDouble("document-share", w.documents.share));
  MP_ASSIGN_OR_RETURN(w.cancel_fraction, f.GetDouble("cancel-fraction", 0));
  MP_ASSIGN_OR_RETURN(int64_t seed, f.GetInt("seed", 0));
  w.seed = static_cast<uint64_t>(seed);
  MP_RETURN_IF_ERROR(ValidateWorkload(w));
  return w;
}

StatusOr<RunOptions> RunOptionsFromFlags(const Flags& f, const WorkloadOptions& w) {
  RunOptions o;
  o.seed = w.seed;
  o.document_tokens = w.documents.tokens;
  MP_ASSIGN_OR_RETURN(o.vocab_size, f.GetInt("vocab-size", 0));
  MP_REQUIRE(o.vocab_size >= 0, "--vocab-size must be positive");
  MP_ASSIGN_OR_RETURN(o.max_concurrency, f.GetInt("max-concurrency", 0));
  MP_REQUIRE(o.max_concurrency >= 0, "--max-concurrency must be >= 0");
  MP_ASSIGN_OR_RETURN(o.request_timeout_s, f.GetDouble("request-timeout-s", 0));
  o.model = f.Get("model").value_or("");
  o.api_key = f.Get("api-key").value_or("");
  return o;
}

Json ConfigJson(const Flags& f, const WorkloadOptions& w, const RunOptions& o) {
  Json placed = Json::array();
  for (const PlacedRequest& p : w.placed) {
    placed.push_back(
        {{"at_s", p.at_s}, {"prompt_tokens", p.prompt_tokens}, {"output_tokens", p.output_tokens}});
  }
  Json mix = Json::array();
  for (const LengthClass& c : w.lengths.mix) {
    mix.push_back({{"weight", c.weight},
                   {"prompt_tokens", c.prompt_tokens},
                   {"output_tokens", c.output_tokens}});
  }
  return {{"api", f.Has("rpc") ? "rpc" : "http"},
          {"server", f.Get("rpc").value_or(f.Get("http").value_or(""))},
          {"model", o.model},
          {"vocab_size", o.vocab_size},
          {"rate", f.Get("rate").value_or("inf")},
          {"arrival", w.process == ArrivalProcess::kFixed ? "fixed" : "poisson"},
          {"num_requests", w.num_requests ? Json(*w.num_requests) : Json()},
          {"duration_s", w.duration_s ? Json(*w.duration_s) : Json()},
          {"prompt_len", {w.lengths.prompt.lo, w.lengths.prompt.hi}},
          {"output_len", {w.lengths.output.lo, w.lengths.output.hi}},
          {"mix", mix},
          {"placed", placed},
          {"documents",
           {{"count", w.documents.count},
            {"tokens", w.documents.tokens},
            {"share", w.documents.count > 0 ? Json(w.documents.share) : Json()}}},
          {"warm_documents", f.GetBool("warm-documents")},
          {"cancel_fraction", w.cancel_fraction},
          {"max_concurrency", o.max_concurrency},
          {"request_timeout_s", o.request_timeout_s},
          {"seed", w.seed}};
}

StatusOr<std::vector<RequestRecord>> RunOverRpc(const std::string& address,
                                                const std::vector<PlannedRequest>& plan,
                                                RunOptions& o) {
  ClientConnection c;
  MP_RETURN_IF_ERROR(Connect(address, &c));
  std::string model;
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&] {
                 // The response owns the message `info` reads from.
                 auto response = c.service.modelInfoRequest().send().wait(c.io.waitScope);
                 auto info = response.getInfo();
                 if (o.vocab_size == 0) o.vocab_size = info.getVocabSize();
                 model = info.getId().cStr();
               })) {
    return rpc::StatusFromException(*e);
  }
  if (o.model.empty()) o.model = model;
  return RunRpc(c, plan, o);
}

StatusOr<std::vector<RequestRecord>> RunOverHttp(const std::string& address,
                                                 const std::vector<PlannedRequest>& plan,
                                                 RunOptions& o) {
  MP_ASSIGN_OR_RETURN(HttpTarget target, ParseHttpTarget(address));
  // The model and the vocabulary the flags leave open come from the server's model list.
  if (o.model.empty() || o.vocab_size == 0) {
    MP_ASSIGN_OR_RETURN(HttpResult models,
                        HttpFetch(target, "GET", "/v1/models", "", o.api_key, 30));
    MP_REQUIRE(models.head.status == 200, "GET /v1/models answered ", models.head.status, ": ",
               models.body.substr(0, 200));
    MP_ASSIGN_OR_RETURN(ListedModel listed, ModelFromList(models.body, o.model));
    o.model = listed.id;
    if (o.vocab_size == 0) o.vocab_size = listed.vocab_size;
    MP_REQUIRE(o.vocab_size > 0, "GET /v1/models does not give model ", o.model,
               "'s vocab_size; give --vocab-size");
  }
  return RunHttp(target, plan, o);
}

// The plan over the API the flags name.
StatusOr<std::vector<RequestRecord>> RunPlan(const Flags& f,
                                             const std::vector<PlannedRequest>& plan,
                                             RunOptions& o) {
  return f.Has("rpc") ? RunOverRpc(*f.Get("rpc"), plan, o) : RunOverHttp(*f.Get("http"), plan, o);
}

// The service gauges from the metrics page, polled until idle for up to `wait_s` seconds.
StatusOr<Json> ScrapeMetrics(const std::string& url, double wait_s) {
  MP_ASSIGN_OR_RETURN(HttpTarget target, ParseHttpTarget(url));
  if (target.path == "/") target.path = "/metrics";
  const Clock::time_point start = Clock::now();
  for (;;) {
    MP_ASSIGN_OR_RETURN(HttpResult page, HttpFetch(target, "GET", target.path, "", "", 30));
    MP_REQUIRE(page.head.status == 200, "GET ", url, " answered ", page.head.status);
    MP_ASSIGN_OR_RETURN(std::vector<PromSample> samples, ParsePrometheusText(page.body));
    Json gauges = ServiceGauges(samples);
    gauges["idle"] = ServiceIdle(gauges);
    gauges["waited_s"] = SecondsSince(start);
    if (gauges["idle"].get<bool>() || SecondsSince(start) >= wait_s) return gauges;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

Status WriteJson(const std::string& path, const Json& report) {
  const std::string text = report.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
  if (path == "-") {
    std::cout << text;
    return OkStatus();
  }
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) return IoError("cannot write " + path);
  return OkStatus();
}

// The sweep: every policy at every rate, the service idle between runs.
StatusOr<int> RunSweep(const Flags& f, WorkloadOptions workload, RunOptions options,
                       double wait_idle_s) {
  MP_REQUIRE(!f.GetBool("warm-documents"), "--warm-documents does not combine with a sweep");
  MP_REQUIRE(!(f.Has("sweep-rates") && f.Has("rate")), "--sweep-rates replaces --rate");
  std::vector<double> rates = {workload.rate};
  if (auto text = f.Get("sweep-rates")) {
    MP_ASSIGN_OR_RETURN(rates, ParseSweepRates(*text));
  }
  std::vector<SweepPolicy> policies = {{"default", ""}};
  if (auto text = f.Get("policies")) {
    MP_REQUIRE(f.Has("rpc"), "--policies needs --rpc (the HTTP API takes no attention policy)");
    MP_ASSIGN_OR_RETURN(policies, ParseSweepPolicies(*text));
  }
  MP_ASSIGN_OR_RETURN(const double limit, f.GetDouble("ttft-p50-limit-s", 1));
  MP_REQUIRE(limit > 0, "--ttft-p50-limit-s must be positive");
  std::vector<SweepRun> runs;
  bool healthy = true;
  // Each run draws its own arrivals and prompts (the seed plus the run's number): a run that
  // repeated an earlier one's prompts would find them in the prefix cache.
  const uint64_t seed = workload.seed;
  for (const SweepPolicy& policy : policies) {
    for (const double rate : rates) {
      workload.rate = rate;
      workload.seed = options.seed = seed + runs.size();
      MP_RETURN_IF_ERROR(ValidateWorkload(workload));
      MP_ASSIGN_OR_RETURN(const std::vector<PlannedRequest> plan, PlanWorkload(workload));
      options.policy_json = policy.json;
      MP_ASSIGN_OR_RETURN(const std::vector<RequestRecord> records, RunPlan(f, plan, options));
      runs.push_back({policy.name, rate, Summarize(records, RunDuration(records))});
      if (runs.back().summary.failed > 0) healthy = false;
      if (!f.GetBool("quiet")) {
        std::cerr << "sweep: " << policy.name << " at " << rate
                  << " req/s: " << runs.back().summary.ok << " ok, " << runs.back().summary.failed
                  << " failed\n";
      }
      if (auto url = f.Get("metrics-url")) {
        MP_ASSIGN_OR_RETURN(const Json gauges, ScrapeMetrics(*url, wait_idle_s));
        if (f.Has("wait-idle-s") && !gauges["idle"].get<bool>()) healthy = false;
      }
    }
  }
  const std::string json_path = f.Get("json").value_or("");
  if (!f.GetBool("quiet") && json_path != "-") PrintSweep(std::cout, runs, limit);
  if (!json_path.empty()) {
    Json config = ConfigJson(f, workload, options);
    config["rate"] = nullptr;
    Json report = {{"config", config}, {"sweep", SweepJson(runs, limit)}};
    MP_RETURN_IF_ERROR(WriteJson(json_path, report));
  }
  return healthy ? 0 : 2;
}

StatusOr<int> Run(const Flags& f) {
  MP_REQUIRE(f.Has("rpc") != f.Has("http"), "give one of --rpc HOST:PORT and --http HOST:PORT");
  MP_REQUIRE(f.positional().empty(), "unexpected argument \"",
             f.positional().empty() ? "" : f.positional()[0], "\"");
  MP_ASSIGN_OR_RETURN(WorkloadOptions workload, WorkloadFromFlags(f));
  MP_ASSIGN_OR_RETURN(RunOptions options, RunOptionsFromFlags(f, workload));
  MP_ASSIGN_OR_RETURN(double wait_idle_s, f.GetDouble("wait-idle-s", 0));
  MP_REQUIRE(!f.Has("wait-idle-s") || f.Has("metrics-url"), "--wait-idle-s needs --metrics-url");
  if (f.Has("sweep-rates") || f.Has("policies"))
    return RunSweep(f, std::move(workload), std::move(options), wait_idle_s);
  MP_REQUIRE(!f.Has("ttft-p50-limit-s"), "--ttft-p50-limit-s needs --sweep-rates or --policies");
  MP_ASSIGN_OR_RETURN(std::vector<PlannedRequest> plan, PlanWorkload(workload));
  const bool warm = f.GetBool("warm-documents");
  MP_REQUIRE(!warm || workload.documents.count > 0, "--warm-documents needs --documents");
  std::vector<RequestRecord> warm_up;
  if (warm) {
    RunOptions one_at_a_time = options;
    one_at_a_time.max_concurrency = 1;
    MP_ASSIGN_OR_RETURN(warm_up, RunPlan(f, WarmUpPlan(workload), one_at_a_time));
    options.vocab_size = one_at_a_time.vocab_size;
    options.model = one_at_a_time.model;
  }
  MP_ASSIGN_OR_RETURN(std::vector<RequestRecord> records, RunPlan(f, plan, options));
  Json report = ReportJson(ConfigJson(f, workload, options), records);
  bool healthy = report["summary"]["failed"].get<int64_t>() == 0;
  if (warm) {
    Json all = Json::array();
    for (const RequestRecord& r : warm_up) {
      all.push_back(RecordJson(r));
      if (r.outcome != Outcome::kOk) healthy = false;
    }
    report["warm_up"] = all;
  }
  if (auto url = f.Get("metrics-url")) {
    MP_ASSIGN_OR_RETURN(report["metrics"], ScrapeMetrics(*url, wait_idle_s));
    if (f.Has("wait-idle-s") && !report["metrics"]["idle"].get<bool>()) healthy = false;
  }
  const std::string json_path = f.Get("json").value_or("");
  if (!f.GetBool("quiet") && json_path != "-") {
    for (const RequestRecord& r : warm_up) {
      std::cout << "warm-up request about document " << r.document << ": "
                << OutcomeName(r.outcome);
      if (!r.output_times_s.empty())
        std::cout << ", TTFT " << (r.output_times_s.front() - r.start_s) << " s";
      std::cout << "\n";
    }
    PrintReport(std::cout, records);
    if (report.contains("metrics")) std::cout << "metrics: " << report["metrics"].dump() << "\n";
  }
  if (!json_path.empty()) MP_RETURN_IF_ERROR(WriteJson(json_path, report));
  return healthy ? 0 : 2;
}

int Main(int argc, char** argv) {
  StatusOr<Flags> flags = Flags::Parse(argc, argv, {"quiet", "help", "warm-documents"});
  if (!flags.ok()) return Fail(flags.status());
  if (flags->GetBool("help")) {
    std::cout << kUsage;
    return 0;
  }
  Status known = flags->CheckKnown(
      {"rpc",         "http",     "num-requests",    "duration",          "rate",
       "arrival",     "seed",     "max-concurrency", "prompt-len",        "output-len",
       "mix",         "place",    "cancel-fraction", "request-timeout-s", "vocab-size",
       "model",       "api-key",  "metrics-url",     "wait-idle-s",       "json",
       "quiet",       "help",     "documents",       "document-share",    "warm-documents",
       "sweep-rates", "policies", "ttft-p50-limit-s"});
  if (!known.ok()) return Fail(known);
  StatusOr<int> rc = Run(*flags);
  if (!rc.ok()) return Fail(rc.status());
  return *rc;
}

}  // namespace
}  // namespace millipede::loadgen

int main(int argc, char** argv) { return millipede::loadgen::Main(argc, argv); }
