// What the expression evaluator (evaluator.h) and the built-ins (builtins.h) share while a
// template renders: the work budget and its limits, error positions, and Jinja's operations on
// values (attribute and item access, iteration, filters and tests by name). Internal to jinja.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "jinja/template.h"
#include "jinja/value.h"

namespace millipede::jinja::internal {

class Runtime {
 public:
  // `source` (the normalized template, for error positions) and `limits` must outlive the
  // runtime.
  Runtime(std::string_view source, const RenderLimits& limits) : source_(source), limits_(limits) {}

  const RenderLimits& limits() const { return limits_; }
  // The budget: `steps` more steps, or ResourceExhausted (runtime.cc).
  Status Charge(int64_t steps);
  // A string built by a filter or operator: charged by size and bounded by max_output_bytes.
  StatusOr<Value> MakeString(std::string text);
  // A list built on the way: bounded by max_list_items.
  StatusOr<Value> MakeList(std::vector<Value> items, bool is_tuple = false);
  Status CheckListSize(int64_t items) const;
  // Prefixes an error that carries no position yet with the position of `offset`.
  Status At(size_t offset, const Status& status) const;

  // Filters and tests by name (filters.cc, predicates.cc), also for the filters that take a test
  // or filter name (select, map).
  StatusOr<Value> ApplyFilter(std::string_view name, const Value& subject, CallArgs& args);
  StatusOr<bool> ApplyTest(std::string_view name, const Value& subject, CallArgs& args);

  // value.name and value[key] as Jinja resolves them (attribute, then item, or the reverse;
  // access.cc).
  StatusOr<Value> GetAttribute(const Value& value, std::string_view name);
  StatusOr<Value> GetItem(const Value& value, const Value& key);
  // The items a for loop or filter iterates over: list items, dict keys, string characters;
  // nothing for undefined.
  StatusOr<std::vector<Value>> Iterate(const Value& value);

 private:
  std::string_view source_;
  const RenderLimits& limits_;
  int64_t steps_ = 0;
};

}  // namespace millipede::jinja::internal
