// Runs retrieval tasks on an Engine (one rank or all ranks of a communicator together) and
// scores the answers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "quality/tasks.h"
#include "worker/engine/engine.h"

namespace millipede {

struct TaskResult {
  QualityTask task;
  std::vector<int32_t> output;  // greedy tokens, as many as task.expected
  // Answers right before the first wrong one (a chain is only as good as its first miss).
  int64_t correct_steps = 0;
  bool correct = false;  // every answer right
  double ttft_s = 0;
  double decode_s = 0;
};

// Greedy generation of task.expected.size() tokens (EOS ignored), scored against the answers.
// With several ranks every rank calls this with the same task and gets the same result.
StatusOr<TaskResult> RunTask(Engine& engine, const QualityTask& task);

// One cell of a results grid: the tasks that share (kind, length, depth).
struct CellSummary {
  TaskKind kind = TaskKind::kNeedle;
  int64_t context_tokens = 0;
  double depth = 0;
  int64_t tasks = 0;
  int64_t correct = 0;       // tasks with every answer right
  int64_t steps = 0;         // answers asked for
  int64_t correct_steps = 0; // answers right before a task's first miss
  double accuracy() const { return tasks > 0 ? static_cast<double>(correct) / tasks : 0; }
  double step_accuracy() const {
    return steps > 0 ? static_cast<double>(correct_steps) / steps : 0;
  }
};

// Groups results by (kind, length, depth), in order of first appearance.
std::vector<CellSummary> Summarize(const std::vector<TaskResult>& results);

}  // namespace millipede
