#include "quality/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace millipede {
namespace {

std::string Ids(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) {
    if (!s.empty()) s += ' ';
    s += std::to_string(id);
  }
  return s;
}

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::vector<int64_t> Lengths(const std::vector<TaskResult>& results, TaskKind kind) {
  std::set<int64_t> s;
  for (const TaskResult& r : results)
    if (r.task.spec.kind == kind) s.insert(r.task.spec.context_tokens);
  return {s.begin(), s.end()};
}

}  // namespace

std::string LengthLabel(int64_t tokens) {
  if (tokens >= (1 << 20) && tokens % (1 << 20) == 0) return std::to_string(tokens >> 20) + "M";
  if (tokens >= 1024 && tokens % 1024 == 0) return std::to_string(tokens >> 10) + "K";
  return std::to_string(tokens);
}

std::string PercentLabel(double fraction) {
  const double p = fraction * 100;
  return (p == std::round(p) ? std::to_string(static_cast<int64_t>(std::lround(p))) : Fixed(p, 1)) +
         "%";
}

std::string ResultsTable(const std::vector<CellSummary>& cells, const RunLabels& labels) {
  std::ostringstream out;
  out << "policy " << labels.policy << ", backend " << labels.backend << ", kv " << labels.kv_dtype
      << ", " << labels.ranks << " rank(s)\n";
  char line[160];
  std::snprintf(line, sizeof(line), "%-7s %9s %7s %6s %9s %10s\n", "task", "length", "depth",
                "tasks", "accuracy", "step_acc");
  out << line;
  for (const CellSummary& c : cells) {
    std::snprintf(line, sizeof(line), "%-7s %9s %7s %6lld %8.1f%% %9.1f%%\n", TaskKindName(c.kind),
                  LengthLabel(c.context_tokens).c_str(), PercentLabel(c.depth).c_str(),
                  static_cast<long long>(c.tasks), 100 * c.accuracy(), 100 * c.step_accuracy());
    out << line;
  }
  return out.str();
}

std::string ResultsCsv(const std::vector<TaskResult>& results, const RunLabels& labels) {
  std::ostringstream out;
  out << "task,policy,backend,kv_dtype,ranks,context_tokens,depth,pairs,hops,seed,control,"
         "expected,output,steps,correct_steps,correct,ttft_s,decode_s\n";
  for (const TaskResult& r : results) {
    const TaskSpec& s = r.task.spec;
    out << TaskKindName(s.kind) << ',' << labels.policy << ',' << labels.backend << ','
        << labels.kv_dtype << ',' << labels.ranks << ',' << s.context_tokens << ','
        << Fixed(s.depth, 4) << ',' << (s.kind == TaskKind::kKvRetrieval ? s.num_pairs : 1) << ','
        << (s.kind == TaskKind::kChain ? s.hops : 1) << ',' << s.seed << ','
        << TaskControlName(s.control) << ',' << Ids(r.task.expected) << ',' << Ids(r.output) << ','
        << r.task.expected.size() << ',' << r.correct_steps << ',' << (r.correct ? 1 : 0) << ','
        << Fixed(r.ttft_s, 4) << ',' << Fixed(r.decode_s, 4) << '\n';
  }
  return out.str();
}

std::string TasksJsonLines(const std::vector<TaskResult>& results) {
  std::string out;
  for (const TaskResult& r : results) {
    const TaskSpec& s = r.task.spec;
    nlohmann::json j = {{"kind", TaskKindName(s.kind)},
                        {"context_tokens", s.context_tokens},
                        {"depth", s.depth},
                        {"seed", s.seed},
                        {"control", TaskControlName(s.control)},
                        {"prompt", r.task.prompt},
                        {"expected", r.task.expected},
                        {"needle_positions", r.task.needle_positions},
                        {"output", r.output},
                        {"correct", r.correct}};
    out += j.dump() + "\n";
  }
  return out;
}

HeatmapData DepthHeatmap(const std::vector<TaskResult>& results, TaskKind kind) {
  const std::vector<int64_t> lengths = Lengths(results, kind);
  std::set<double> depth_set;
  for (const TaskResult& r : results)
    if (r.task.spec.kind == kind) depth_set.insert(r.task.spec.depth);
  const std::vector<double> depths(depth_set.begin(), depth_set.end());
  HeatmapData h;
  for (int64_t n : lengths) h.x_labels.push_back(LengthLabel(n));
  for (double d : depths) h.y_labels.push_back(PercentLabel(d));
  std::vector<double> right(lengths.size() * depths.size(), 0), total(right.size(), 0);
  for (const TaskResult& r : results) {
    if (r.task.spec.kind != kind) continue;
    const size_t x = std::find(lengths.begin(), lengths.end(), r.task.spec.context_tokens) -
                     lengths.begin();
    const size_t y = std::find(depths.begin(), depths.end(), r.task.spec.depth) - depths.begin();
    right[y * lengths.size() + x] += r.correct;
    total[y * lengths.size() + x] += 1;
  }
  for (size_t i = 0; i < right.size(); ++i)
    h.values.push_back(total[i] > 0 ? right[i] / total[i]
                                    : std::numeric_limits<double>::quiet_NaN());
  return h;
}

HeatmapData ChainStepHeatmap(const std::vector<TaskResult>& results) {
  const std::vector<int64_t> lengths = Lengths(results, TaskKind::kChain);
  size_t hops = 0;
  for (const TaskResult& r : results)
    if (r.task.spec.kind == TaskKind::kChain) hops = std::max(hops, r.task.expected.size());
  HeatmapData h;
  for (int64_t n : lengths) h.x_labels.push_back(LengthLabel(n));
  for (size_t t = 1; t <= hops; ++t) h.y_labels.push_back(std::to_string(t));
  std::vector<double> right(lengths.size() * hops, 0), total(right.size(), 0);
  for (const TaskResult& r : results) {
    if (r.task.spec.kind != TaskKind::kChain) continue;
    const size_t x = std::find(lengths.begin(), lengths.end(), r.task.spec.context_tokens) -
                     lengths.begin();
    for (size_t t = 0; t < r.task.expected.size(); ++t) {
      total[t * lengths.size() + x] += 1;
      right[t * lengths.size() + x] += static_cast<int64_t>(t) < r.correct_steps;
    }
  }
  for (size_t i = 0; i < right.size(); ++i)
    h.values.push_back(total[i] > 0 ? right[i] / total[i]
                                    : std::numeric_limits<double>::quiet_NaN());
  return h;
}

}  // namespace millipede
