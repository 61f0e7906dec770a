// Reports of a quality run: a text table, per-task CSV, per-task JSON lines (prompt, answers,
// output: what an independent implementation needs to replay the tasks) and heatmap data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "quality/heatmap.h"
#include "quality/runner.h"

namespace millipede {

// What was run, for the reports' columns.
struct RunLabels {
  std::string policy = "dense";  // the attention policy the engine ran with
  std::string backend = "cpu";
  std::string kv_dtype = "bf16";
  int ranks = 1;
};

// "1K" for 1024, "1M" for 1048576, "300" for 300 (K = 1024).
std::string LengthLabel(int64_t tokens);
// "25%" for 0.25.
std::string PercentLabel(double fraction);

// One line per cell: task, length, depth, tasks, accuracy, step accuracy.
std::string ResultsTable(const std::vector<CellSummary>& cells, const RunLabels& labels);
// A header and one row per task.
std::string ResultsCsv(const std::vector<TaskResult>& results, const RunLabels& labels);
// One JSON object per line: kind, context_tokens, depth, seed, control, prompt (ids), expected,
// output, correct.
std::string TasksJsonLines(const std::vector<TaskResult>& results);

// Accuracy of `kind`'s tasks: lengths across, depths down. Cells with no task are NaN.
HeatmapData DepthHeatmap(const std::vector<TaskResult>& results, TaskKind kind);
// For chains: lengths across, hop 1..H down; a cell is the fraction of chains whose answers up to
// and including that hop are all right.
HeatmapData ChainStepHeatmap(const std::vector<TaskResult>& results);

}  // namespace millipede
