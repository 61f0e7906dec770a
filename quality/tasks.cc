#include "quality/tasks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <utility>

namespace millipede {
namespace {

uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// One stream per task: the same spec gives the same task.
std::mt19937_64 TaskRng(const TaskSpec& spec) {
  uint64_t depth_bits;
  std::memcpy(&depth_bits, &spec.depth, sizeof(depth_bits));
  uint64_t h = SplitMix(spec.seed);
  for (uint64_t v : {static_cast<uint64_t>(spec.kind), static_cast<uint64_t>(spec.context_tokens),
                     depth_bits, static_cast<uint64_t>(spec.num_pairs),
                     static_cast<uint64_t>(spec.hops), static_cast<uint64_t>(spec.distractors)})
    h = SplitMix(h ^ v);
  return std::mt19937_64(h);
}

struct Needle {
  int key, value;
  int answer_index;  // -1 for a distractor, else its place among the answers
};

// Where a needle goes: (offset in the haystack, needle index).
using NeedleSlot = std::pair<int64_t, size_t>;

// The needles of `spec`'s task over the shuffled `symbols`, drawing random values from `rng`.
// Needle 0 is the one placed at `depth`.
StatusOr<std::vector<Needle>> PlanNeedles(const TaskSpec& spec, const std::vector<int>& symbols,
                                          std::mt19937_64* rng) {
  auto random_symbol = [&] { return static_cast<int>((*rng)() % kRetrievalSymbols); };
  std::vector<Needle> needles;
  switch (spec.kind) {
    case TaskKind::kNeedle:
      needles.push_back({symbols[0], symbols[1], 0});
      break;
    case TaskKind::kKvRetrieval:
      MP_REQUIRE(spec.num_pairs >= 1 && spec.num_pairs <= kRetrievalSymbols,
                 "kv task: pairs must lie in [1, ", kRetrievalSymbols, "], got ", spec.num_pairs);
      needles.push_back({symbols[0], random_symbol(), 0});
      for (int i = 1; i < spec.num_pairs; ++i) needles.push_back({symbols[i], random_symbol(), -1});
      break;
    case TaskKind::kChain:
      MP_REQUIRE(spec.hops >= 1 && spec.distractors >= 0 &&
                     spec.hops + 1 + spec.distractors <= kRetrievalSymbols,
                 "chain task: need hops >= 1, distractors >= 0 and hops + 1 + distractors <= ",
                 kRetrievalSymbols, ", got ", spec.hops, " hops, ", spec.distractors,
                 " distractors");
      for (int i = 0; i < spec.hops; ++i) needles.push_back({symbols[i], symbols[i + 1], i});
      for (int i = 0; i < spec.distractors; ++i)
        needles.push_back({symbols[spec.hops + 1 + i], random_symbol(), -1});
      break;
  }
  return needles;
}

// The answers in order: the value token of each answering needle.
std::vector<int32_t> ExpectedAnswers(const RetrievalVocab& vocab,
                                     const std::vector<Needle>& needles) {
  int answers = 0;
  for (const Needle& n : needles) answers += n.answer_index >= 0;
  std::vector<int32_t> expected(static_cast<size_t>(answers));
  for (const Needle& n : needles)
    if (n.answer_index >= 0)
      expected[static_cast<size_t>(n.answer_index)] = vocab.value_ids[n.value];
  return expected;
}

// Each needle's token. The controls take the answer away from the needle at `depth` (needle 0):
// no needle there, or one with a key no needle uses (the last such of `symbols`).
StatusOr<std::vector<int32_t>> NeedleTokens(const RetrievalVocab& vocab, const TaskSpec& spec,
                                            const std::vector<Needle>& needles,
                                            const std::vector<int>& symbols) {
  std::vector<int32_t> needle_ids;
  for (const Needle& n : needles) needle_ids.push_back(vocab.needle(n.key, n.value));
  if (spec.control == TaskControl::kRemoveNeedle) {
    needle_ids[0] = vocab.filler;
  } else if (spec.control == TaskControl::kWrongKey) {
    std::vector<bool> used(kRetrievalSymbols, false);
    for (const Needle& n : needles) used[static_cast<size_t>(n.key)] = true;
    int wrong = -1;
    for (int s : symbols)
      if (!used[static_cast<size_t>(s)]) wrong = s;
    MP_REQUIRE(wrong >= 0, "wrong-key control: every key is in use");
    needle_ids[0] = vocab.needle(wrong, needles[0].value);
  }
  return needle_ids;
}

// Needle 0 at the boundary nearest to `target`, the others at random boundaries; in the order
// of their offsets (needles at one boundary keep their index order).
std::vector<NeedleSlot> PlaceNeedles(const std::vector<int64_t>& boundaries, double target,
                                     size_t num_needles, std::mt19937_64* rng) {
  std::vector<NeedleSlot> slots;
  int64_t best = boundaries[0];
  for (int64_t b : boundaries)
    if (std::fabs(static_cast<double>(b) - target) < std::fabs(static_cast<double>(best) - target))
      best = b;
  slots.push_back({best, 0});
  for (size_t i = 1; i < num_needles; ++i)
    slots.push_back({boundaries[(*rng)() % boundaries.size()], i});
  std::stable_sort(slots.begin(), slots.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  return slots;
}

// task->prompt: BOS, the haystack `hay` with each needle's token at its slot, then the `query`
// key; task->needle_positions: where each answering needle landed, in answer order.
void AssemblePrompt(const RetrievalVocab& vocab, const std::vector<int32_t>& hay,
                    const std::vector<NeedleSlot>& slots, const std::vector<Needle>& needles,
                    const std::vector<int32_t>& needle_ids, int query, QualityTask* task) {
  task->needle_positions.assign(task->expected.size(), -1);
  task->prompt.reserve(static_cast<size_t>(task->spec.context_tokens));
  task->prompt.push_back(vocab.bos);
  int64_t copied = 0;
  for (const auto& [at, index] : slots) {
    task->prompt.insert(task->prompt.end(), hay.begin() + copied, hay.begin() + at);
    copied = at;
    if (needles[index].answer_index >= 0)
      task->needle_positions[static_cast<size_t>(needles[index].answer_index)] =
          static_cast<int64_t>(task->prompt.size());
    task->prompt.push_back(needle_ids[index]);
  }
  task->prompt.insert(task->prompt.end(), hay.begin() + copied, hay.end());
  task->prompt.push_back(vocab.key_ids[query]);
}

}  // namespace

const char* TaskKindName(TaskKind kind) {
  switch (kind) {
    case TaskKind::kNeedle: return "needle";
    case TaskKind::kKvRetrieval: return "kv";
    case TaskKind::kChain: return "chain";
  }
  return "?";
}

StatusOr<TaskKind> ParseTaskKind(const std::string& name) {
  for (TaskKind k : {TaskKind::kNeedle, TaskKind::kKvRetrieval, TaskKind::kChain})
    if (name == TaskKindName(k)) return k;
  return InvalidArgumentError("unknown task \"" + name + "\" (known: needle, kv, chain)");
}

const char* TaskControlName(TaskControl control) {
  switch (control) {
    case TaskControl::kNone: return "none";
    case TaskControl::kRemoveNeedle: return "remove-needle";
    case TaskControl::kWrongKey: return "wrong-key";
  }
  return "?";
}

StatusOr<TaskControl> ParseTaskControl(const std::string& name) {
  for (TaskControl c : {TaskControl::kNone, TaskControl::kRemoveNeedle, TaskControl::kWrongKey})
    if (name == TaskControlName(c)) return c;
  return InvalidArgumentError("unknown control \"" + name +
                              "\" (known: none, remove-needle, wrong-key)");
}

StatusOr<Haystack> Haystack::Create(const Tokenizer& tokenizer, const RetrievalVocab& vocab) {
  Haystack h;
  h.vocab_ = vocab;
  for (const std::string& s : RetrievalHaystackSentences()) {
    MP_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer.Encode(s));
    MP_REQUIRE(!ids.empty(), "haystack sentence encodes to no tokens");
    h.sentences_.push_back(std::move(ids));
  }
  return h;
}

std::vector<int32_t> Haystack::Fill(int64_t n, uint64_t start,
                                    std::vector<int64_t>* boundaries) const {
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(n));
  boundaries->assign(1, 0);
  for (uint64_t i = start;; ++i) {
    const auto& s = sentences_[i % sentences_.size()];
    if (static_cast<int64_t>(out.size() + s.size()) > n) break;
    out.insert(out.end(), s.begin(), s.end());
    boundaries->push_back(static_cast<int64_t>(out.size()));
  }
  // Pads are added tokens: any offset among them is a boundary.
  while (static_cast<int64_t>(out.size()) < n) {
    out.push_back(vocab_.filler);
    boundaries->push_back(static_cast<int64_t>(out.size()));
  }
  return out;
}

std::vector<TaskSpec> TaskGrid(const TaskGridOptions& options) {
  std::vector<TaskSpec> specs;
  for (TaskKind kind : options.kinds) {
    for (int64_t length : options.lengths) {
      for (double depth : options.depths) {
        for (int i = 0; i < options.samples; ++i) {
          TaskSpec s = options.base;
          s.kind = kind;
          s.context_tokens = length;
          s.depth = depth;
          s.seed = options.base.seed + static_cast<uint64_t>(i);
          specs.push_back(s);
        }
      }
    }
  }
  return specs;
}

StatusOr<QualityTask> MakeTask(const Haystack& haystack, const TaskSpec& spec) {
  const RetrievalVocab& vocab = haystack.vocab();
  MP_REQUIRE(spec.depth >= 0 && spec.depth <= 1, "task depth ", spec.depth, " must lie in [0, 1]");
  std::mt19937_64 rng = TaskRng(spec);
  std::vector<int> symbols(kRetrievalSymbols);
  std::iota(symbols.begin(), symbols.end(), 0);
  std::shuffle(symbols.begin(), symbols.end(), rng);
  MP_ASSIGN_OR_RETURN(std::vector<Needle> needles, PlanNeedles(spec, symbols, &rng));

  QualityTask task;
  task.spec = spec;
  task.expected = ExpectedAnswers(vocab, needles);
  MP_ASSIGN_OR_RETURN(std::vector<int32_t> needle_ids, NeedleTokens(vocab, spec, needles, symbols));

  const int64_t filler = spec.context_tokens - 2 - static_cast<int64_t>(needles.size());
  MP_REQUIRE(filler >= 0, TaskKindName(spec.kind), " task: context of ", spec.context_tokens,
             " tokens is too short for BOS, ", needles.size(), " needles and the query");
  std::vector<int64_t> boundaries;
  std::vector<int32_t> hay = haystack.Fill(filler, rng(), &boundaries);
  const std::vector<NeedleSlot> slots =
      PlaceNeedles(boundaries, spec.depth * static_cast<double>(filler), needles.size(), &rng);
  // The query is the key of needle 0.
  AssemblePrompt(vocab, hay, slots, needles, needle_ids, symbols[0], &task);
  MP_ASSERT(static_cast<int64_t>(task.prompt.size()) == spec.context_tokens);
  return task;
}

}  // namespace millipede
