#include "quality/runner.h"

#include "worker/generate.h"

namespace millipede {

StatusOr<TaskResult> RunTask(Engine& engine, const QualityTask& task) {
  MP_REQUIRE(!task.expected.empty(), "task has no answers");
  GenerationRequest request;
  request.prompt_ids = task.prompt;
  request.max_new_tokens = static_cast<int64_t>(task.expected.size());
  request.sampling.temperature = 0;  // greedy
  request.ignore_eos = true;
  MP_ASSIGN_OR_RETURN(GenerationResult generated, Generate(engine, request));
  TaskResult r;
  r.task = task;
  r.output = std::move(generated.ids);
  r.ttft_s = generated.ttft_s;
  r.decode_s = generated.decode_s;
  while (r.correct_steps < static_cast<int64_t>(task.expected.size()) &&
         r.correct_steps < static_cast<int64_t>(r.output.size()) &&
         r.output[static_cast<size_t>(r.correct_steps)] ==
             task.expected[static_cast<size_t>(r.correct_steps)])
    ++r.correct_steps;
  r.correct = r.correct_steps == static_cast<int64_t>(task.expected.size());
  return r;
}

std::vector<CellSummary> Summarize(const std::vector<TaskResult>& results) {
  std::vector<CellSummary> cells;
  for (const TaskResult& r : results) {
    const TaskSpec& s = r.task.spec;
    CellSummary* cell = nullptr;
    for (CellSummary& c : cells)
      if (c.kind == s.kind && c.context_tokens == s.context_tokens && c.depth == s.depth)
        cell = &c;
    if (cell == nullptr) {
      cells.push_back({s.kind, s.context_tokens, s.depth});
      cell = &cells.back();
    }
    ++cell->tasks;
    cell->correct += r.correct;
    cell->steps += static_cast<int64_t>(r.task.expected.size());
    cell->correct_steps += r.correct_steps;
  }
  return cells;
}

}  // namespace millipede
