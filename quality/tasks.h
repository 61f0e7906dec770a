// Retrieval tasks for the constructed retrieval model (models/retrieval_model.h), as token ids:
//  - needle in a haystack: one needle <ka:vb> at a given depth of filler text, then the query
//    <ka>; the answer is <vb>;
//  - multi-key KV retrieval: several needles with distinct keys, one of them (at the given depth)
//    queried;
//  - multi-hop chain: needles (c0,c1), (c1,c2), ... scattered in random order, the query <kc0>;
//    the answers are <vc1> ... <vcH>, each generated answer being the query of the next hop, so
//    every decode step must find a different needle. Distractor needles use the other keys.
// Every prompt starts with BOS and is exactly `context_tokens` long (query included).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "models/retrieval_model.h"
#include "tokenizer/tokenizer.h"

namespace millipede {

enum class TaskKind { kNeedle, kKvRetrieval, kChain };
const char* TaskKindName(TaskKind kind);  // "needle", "kv", "chain"
StatusOr<TaskKind> ParseTaskKind(const std::string& name);

// A control that must make the model fail: the answer is still `expected`, but the prompt no
// longer holds it (kRemoveNeedle: the answering needle becomes filler; kWrongKey: it keeps its
// value under a key that nobody asks for).
enum class TaskControl { kNone, kRemoveNeedle, kWrongKey };
const char* TaskControlName(TaskControl control);  // "none", "remove-needle", "wrong-key"
StatusOr<TaskControl> ParseTaskControl(const std::string& name);

struct TaskSpec {
  TaskKind kind = TaskKind::kNeedle;
  int64_t context_tokens = 1024;  // prompt length, BOS and query included
  double depth = 0.5;             // in [0, 1]: where the (first) answering needle sits
  int num_pairs = 8;              // kKvRetrieval: needles in the prompt (<= kRetrievalSymbols)
  int hops = 4;                   // kChain: answers to generate (<= kRetrievalSymbols - 1)
  int distractors = 4;            // kChain: needles with keys off the chain
  uint64_t seed = 0;
  TaskControl control = TaskControl::kNone;
};

struct QualityTask {
  TaskSpec spec;
  std::vector<int32_t> prompt;
  std::vector<int32_t> expected;        // the answers, in order
  std::vector<int64_t> needle_positions;  // where each answering needle sits, in answer order
};

// Filler text as ids: the haystack sentences tokenized once.
class Haystack {
 public:
  static StatusOr<Haystack> Create(const Tokenizer& tokenizer, const RetrievalVocab& vocab);
  const RetrievalVocab& vocab() const { return vocab_; }
  // `n` filler tokens: whole sentences from sentence `start` on (cycling), padded with <filler>
  // tokens to exactly n; `boundaries` receives every offset in [0, n] between two sentences (or
  // pads), where a needle may go without changing how the text tokenizes.
  std::vector<int32_t> Fill(int64_t n, uint64_t start, std::vector<int64_t>* boundaries) const;

 private:
  RetrievalVocab vocab_;
  std::vector<std::vector<int32_t>> sentences_;
};

// A grid of specs: every kind x length x depth, `samples` tasks each (seeds seed, seed + 1, ...).
struct TaskGridOptions {
  std::vector<TaskKind> kinds = {TaskKind::kNeedle};
  std::vector<int64_t> lengths = {1024};
  std::vector<double> depths = {0.5};
  int samples = 1;
  TaskSpec base;  // num_pairs, hops, distractors, seed and control for every task
};
std::vector<TaskSpec> TaskGrid(const TaskGridOptions& options);

// Builds one task. InvalidArgument when the spec cannot fit (too short a context for its
// needles, too many pairs or hops, a depth outside [0, 1]).
StatusOr<QualityTask> MakeTask(const Haystack& haystack, const TaskSpec& spec);

}  // namespace millipede
