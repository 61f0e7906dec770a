# Millipede's job API over Cap'n Proto RPC (two-party, TCP). The server's bootstrap capability
# is `Millipede`.
#
# Errors are RPC exceptions whose description starts with the status code name, e.g.
# "INVALID_ARGUMENT: the prompt is empty" or "RESOURCE_EXHAUSTED: queue full: ...".
#
# Cancellation: dropping the `Job` capability (or disconnecting, which drops it) cancels the job
# and frees its KV on every worker rank; so does a failed call to the client's `JobCallback`.
# Cap'n Proto 0.9 lets a caller cancel any pending call by dropping its promise; the handlers
# here never wait on anything, so that is always safe. (Cap'n Proto 1.0 makes cancellation
# opt-in with `$Cxx.allowCancellation`; this schema targets the 0.9 series Debian 12 ships.)
@0xb81297209dc16872;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("millipede::rpc");

struct LogitBias {
  id @0 :Int32;
  bias @1 :Float32;             # in [-100, 100]
}

# Applied in this order: logitBias, repetitionPenalty (ids of the prompt and the output),
# frequencyPenalty and presencePenalty (ids of the output), temperature, topK, topP, minP.
struct Sampling {
  temperature @0 :Float32 = 0;  # 0 = greedy
  topK @1 :Int32 = 0;           # 0 = off
  topP @2 :Float32 = 1;         # 1 = off; must lie in (0, 1]
  seed @3 :UInt64 = 0;
  repetitionPenalty @4 :Float32 = 1;  # > 0; 1 = off
  presencePenalty @5 :Float32 = 0;    # in [-2, 2]
  frequencyPenalty @6 :Float32 = 0;   # in [-2, 2]
  minP @7 :Float32 = 0;               # in [0, 1]; 0 = off
  logitBias @8 :List(LogitBias);      # at most 1024 distinct ids of the vocabulary
  logprobs @9 :Int32 = -1;            # -1: none; 0..20: each token's log-probability and this
                                      # many alternatives (raw logits), in `token` callbacks
}

struct JobSpec {
  prompt :union {
    text @0 :Text;              # tokenized by the server; no BOS is added
    ids @1 :List(Int32);
  }
  maxNewTokens @2 :Int64 = 16;
  sampling @3 :Sampling;
  stopIds @4 :List(Int32);      # generation stops after one of these ids (kept in the output)
  stopStrings @5 :List(Text);   # ... or when the text contains one (cut before it)
  ignoreEos @6 :Bool = false;
  policyJson @7 :Text;          # attention policy overrides (policy-file JSON); empty: default
  cache @8 :Bool = true;        # false: no prefix-cache reuse, and this job's KV is not kept
  pin @9 :Bool = false;         # the KV this job leaves in the cache stays until unpinned/dropped
}

struct Completion {
  finishReason @0 :Text;        # "stop" or "length"
  ids @1 :List(Int32);
  text @2 :Text;
  promptTokens @3 :Int64;
  queueS @4 :Float64;
  ttftS @5 :Float64;            # submit to first generated token
  e2eS @6 :Float64;
  prefillTokensPerS @7 :Float64;
  decodeTokensPerS @8 :Float64;
  prefillDensity @9 :Float64 = 1;  # computed / causal query-key pairs of the prefill attention
  cachedTokens @10 :Int64;      # prompt tokens whose KV came from the prefix cache
  cacheEntry @11 :UInt64;       # the prefix-cache entry this job's KV became (0: none)
}

struct Error {
  code @0 :Text;                # a status code name: CANCELLED, DEVICE_ERROR, ...
  message @1 :Text;
}

struct TokenLogprob {
  id @0 :Int32;
  logprob @1 :Float32;          # natural log
}

# Implemented by the client; the server calls it in order, one call per event.
interface JobCallback {
  progress @0 (tokensDone :Int64, tokensTotal :Int64);  # prefill, in prompt tokens
  # text may be empty while a character or stop is open; logprob and top only when the job's
  # sampling.logprobs >= 0 (top: the most likely ids first).
  token @1 (id :Int32, text :Text, logprob :Float32, top :List(TokenLogprob));
  complete @2 (completion :Completion);
  error @3 (error :Error);            # a cancelled job ends with code CANCELLED
}

enum JobState { queued @0; prefill @1; decode @2; finished @3; cancelled @4; failed @5; }

struct JobStatus {
  id @0 :UInt64;
  state @1 :JobState;
  queuePosition @2 :Int64;
  promptTokens @3 :Int64;
  prefillDone @4 :Int64;
  generatedTokens @5 :Int64;
  error @6 :Text;
}

interface Job {
  status @0 () -> (status :JobStatus);
  # Idempotent: cancelling a job that has already ended does nothing and succeeds. `status` is
  # the job's status as the cancel found it: queued, prefill or decode (it then ends with
  # CANCELLED), or its final state when it had already ended.
  cancel @1 () -> (status :JobStatus);
}

struct ModelInfo {
  id @0 :Text;
  contextLimit @1 :Int64;
  kvCapacityTokens @2 :Int64;
  vocabSize @3 :Int64;
  numWorkers @4 :Int32;
  chatFormat @5 :Text;
  # The largest prompt + generated tokens one job is admitted with: the context limit, or less
  # when the workers' KV budget (their memory plan) holds less for one job. A job this long may
  # still wait for running jobs to free KV.
  maxModelLen @6 :Int64;
}

struct Health {
  alive @0 :Bool;
  accepting @1 :Bool;
  running @2 :Int64;
  waiting @3 :Int64;
  secondsSinceLastToken @4 :Float64;
  detail @5 :Text;
}

# A prefix-cache entry: an ended job's KV, kept for later prompts that start with its tokens.
struct CacheEntry {
  id @0 :UInt64;                # the job whose KV it is
  tokens @1 :Int64;             # of its tokens, those a later prompt may reuse
  kvPositions @2 :Int64;        # KV positions it holds on the busiest worker rank
  pinned @3 :Bool;
  hits @4 :Int64;               # jobs that started from it
  holders @5 :Int64;            # queued jobs about to start from it
  tier @6 :Text;                # "device": the workers' KV memory; "host": their host memory
}

struct RankStats {
  rank @0 :Int32;
  kvBytesGpu @1 :Int64;
  kvBytesHost @2 :Int64;
  attentionS @3 :Float64;
  commS @4 :Float64;
  commBytes @5 :Int64;
}

interface Millipede {
  # Validates and queues a job; events go to `callback`. Keep `job` while you want the job.
  submit @0 (spec :JobSpec, callback :JobCallback) -> (job :Job, id :UInt64, promptTokens :Int64);
  # By id, for clients that did not submit the job (a dropped id handle does not cancel).
  status @1 (id :UInt64) -> (status :JobStatus);
  # Idempotent as Job.cancel: an ended job's cancel succeeds and does nothing; NOT_FOUND only
  # for an id never issued. `status` is unset when the job ended so long ago that its final
  # status is no longer kept.
  cancel @2 (id :UInt64) -> (status :JobStatus);
  modelInfo @3 () -> (info :ModelInfo);
  health @4 () -> (health :Health);
  workers @5 () -> (ranks :List(RankStats));
  # The prefix cache: entries (most recently used first); pin / unpin one; drop one (its KV is
  # freed on every worker). NOT_FOUND for an unknown id; UNIMPLEMENTED when the cache is off.
  cacheList @6 () -> (entries :List(CacheEntry));
  cachePin @7 (id :UInt64, pinned :Bool) -> ();
  cacheDrop @8 (id :UInt64) -> ();
}
