// The work budget, the limits on what a template builds, and error positions.
#include "jinja/runtime.h"

#include "jinja/lexer.h"

namespace millipede::jinja::internal {
namespace {

bool HasPosition(const std::string& message) {
  size_t i = 0;
  auto digits = [&] {
    const size_t start = i;
    while (i < message.size() && message[i] >= '0' && message[i] <= '9') ++i;
    return i > start;
  };
  auto literal = [&](std::string_view s) {
    if (message.compare(i, s.size(), s) != 0) return false;
    i += s.size();
    return true;
  };
  return literal("line ") && digits() && literal(", column ") && digits() && literal(": ");
}

}  // namespace

Status Runtime::Charge(int64_t steps) {
  steps_ += steps;
  if (steps_ > limits_.max_steps) {
    return ResourceExhaustedError("the template exceeded its work limit of " +
                                  std::to_string(limits_.max_steps) + " steps");
  }
  return OkStatus();
}

StatusOr<Value> Runtime::MakeString(std::string text) {
  if (static_cast<int64_t>(text.size()) > limits_.max_output_bytes) {
    return ResourceExhaustedError("a string of " + std::to_string(text.size()) +
                                  " bytes exceeds the limit of " +
                                  std::to_string(limits_.max_output_bytes));
  }
  MP_RETURN_IF_ERROR(Charge(static_cast<int64_t>(text.size() / 64)));
  return Value::String(std::move(text));
}

Status Runtime::CheckListSize(int64_t items) const {
  if (items > limits_.max_list_items) {
    return ResourceExhaustedError("a list of " + std::to_string(items) +
                                  " items exceeds the limit of " +
                                  std::to_string(limits_.max_list_items));
  }
  return OkStatus();
}

StatusOr<Value> Runtime::MakeList(std::vector<Value> items, bool is_tuple) {
  MP_RETURN_IF_ERROR(CheckListSize(static_cast<int64_t>(items.size())));
  MP_RETURN_IF_ERROR(Charge(static_cast<int64_t>(items.size())));
  return Value::List(std::move(items), is_tuple);
}

Status Runtime::At(size_t offset, const Status& status) const {
  if (status.ok() || HasPosition(status.message())) return status;
  return Status(status.code(), DescribePosition(source_, offset) + ": " + status.message());
}

}  // namespace millipede::jinja::internal
