// Statements: text and output, if, for (with loop variables), set, break / continue; the work
// budget.
#include "jinja/interpreter.h"
#include "jinja/lexer.h"

namespace millipede::jinja::internal {
namespace {

// A loop round costs more than one expression step: its scope and `loop` variable.
constexpr int64_t kStepsPerRound = 4;

// The `loop` variable of round `index` of `items` (its attributes are computed when read).
Value LoopObject(const std::shared_ptr<const std::vector<Value>>& items, size_t index) {
  Value loop = Value::Object("LoopContext", {});
  loop.as_object().loop_items = items;
  loop.as_object().loop_index = index;
  return loop;
}

// Whether `v` is or contains an object (values nest at most kMaxValueDepth levels).
bool HoldsObject(const Value& v, int depth) {
  if (v.kind() == Value::Kind::kObject) return true;
  if (depth > kMaxValueDepth) return false;
  if (v.is_list()) {
    for (const Value& item : v.as_list().items) {
      if (HoldsObject(item, depth + 1)) return true;
    }
  } else if (v.is_dict()) {
    for (const auto& [key, item] : v.as_dict().items) {
      if (HoldsObject(item, depth + 1)) return true;
    }
  }
  return false;
}

}  // namespace

Status Interpreter::Charge(int64_t steps) {
  steps_ += steps;
  if (steps_ > limits_.max_steps) {
    return ResourceExhaustedError("the template exceeded its work limit of " +
                                  std::to_string(limits_.max_steps) + " steps");
  }
  return OkStatus();
}

StatusOr<Value> Interpreter::MakeString(std::string text) {
  if (static_cast<int64_t>(text.size()) > limits_.max_output_bytes) {
    return ResourceExhaustedError("a string of " + std::to_string(text.size()) +
                                  " bytes exceeds the limit of " +
                                  std::to_string(limits_.max_output_bytes));
  }
  MP_RETURN_IF_ERROR(Charge(static_cast<int64_t>(text.size() / 64)));
  return Value::String(std::move(text));
}

Status Interpreter::CheckListSize(int64_t items) const {
  if (items > limits_.max_list_items) {
    return ResourceExhaustedError("a list of " + std::to_string(items) +
                                  " items exceeds the limit of " +
                                  std::to_string(limits_.max_list_items));
  }
  return OkStatus();
}

StatusOr<Value> Interpreter::MakeList(std::vector<Value> items, bool is_tuple) {
  MP_RETURN_IF_ERROR(CheckListSize(static_cast<int64_t>(items.size())));
  MP_RETURN_IF_ERROR(Charge(static_cast<int64_t>(items.size())));
  return Value::List(std::move(items), is_tuple);
}

Status Interpreter::Run(const Body& body, std::string* out) {
  out_ = out;
  frames_.emplace_back();
  return Execute(body);
}

Status Interpreter::Execute(const Body& body) {
  for (const Stmt& s : body) {
    MP_RETURN_IF_ERROR(ExecuteStatement(s));
    if (flow_ != Flow::kNormal) return OkStatus();
  }
  return OkStatus();
}

Status Interpreter::Output(std::string_view text, size_t offset) {
  if (static_cast<int64_t>(out_->size() + text.size()) > limits_.max_output_bytes) {
    return At(offset, ResourceExhaustedError("the output exceeds the limit of " +
                                             std::to_string(limits_.max_output_bytes) + " bytes"));
  }
  out_->append(text);
  return At(offset, Charge(static_cast<int64_t>(text.size() / 64)));
}

Status Interpreter::ExecuteStatement(const Stmt& s) {
  MP_RETURN_IF_ERROR(At(s.offset, Charge(1)));
  switch (s.kind) {
    case Stmt::Kind::kText:
      return Output(s.text, s.offset);
    case Stmt::Kind::kOutput: {
      MP_ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
      StatusOr<std::string> text = ToStr(v);
      if (!text.ok()) return At(s.expr->offset, text.status());
      return Output(*text, s.offset);
    }
    case Stmt::Kind::kIf:
      for (const auto& [condition, body] : s.branches) {
        if (condition) {
          MP_ASSIGN_OR_RETURN(Value test, Eval(*condition));
          if (!Truthy(test)) continue;
        }
        return Execute(body);
      }
      return OkStatus();
    case Stmt::Kind::kFor:
      return ExecuteFor(s);
    case Stmt::Kind::kSet:
    case Stmt::Kind::kSetBlock:
      return ExecuteSet(s);
    case Stmt::Kind::kBreak:
      flow_ = Flow::kBreak;
      return OkStatus();
    case Stmt::Kind::kContinue:
      flow_ = Flow::kContinue;
      return OkStatus();
    case Stmt::Kind::kScope: {
      frames_.emplace_back();
      Status status = Execute(s.body);
      frames_.pop_back();
      return status;
    }
  }
  return At(s.offset, InternalError("unknown statement kind"));
}

Status Interpreter::Bind(const std::vector<std::string>& targets, const Value& value,
                         size_t offset) {
  if (targets.size() == 1) {
    frames_.back().Set(targets[0], value);
    return OkStatus();
  }
  StatusOr<std::vector<Value>> items = Iterate(value);
  if (!items.ok() || value.is_undefined()) {
    return At(offset, InvalidArgumentError(std::string("cannot unpack a '") + TypeName(value) +
                                           "' into " + std::to_string(targets.size()) + " names"));
  }
  if (items->size() != targets.size()) {
    return At(offset,
              InvalidArgumentError("cannot unpack " + std::to_string(items->size()) +
                                   " values into " + std::to_string(targets.size()) + " names"));
  }
  for (size_t i = 0; i < targets.size(); ++i) frames_.back().Set(targets[i], (*items)[i]);
  return OkStatus();
}

Status Interpreter::ExecuteFor(const Stmt& s) {
  MP_ASSIGN_OR_RETURN(Value iterable, Eval(*s.expr));
  StatusOr<std::vector<Value>> all = Iterate(iterable);
  if (!all.ok()) return At(s.expr->offset, all.status());
  std::vector<Value> items;
  if (s.condition) {
    // The filter sees each item under the loop's names, without `loop`.
    for (Value& item : *all) {
      MP_RETURN_IF_ERROR(At(s.offset, Charge(1)));
      frames_.emplace_back();
      Status bound = Bind(s.targets, item, s.offset);
      StatusOr<Value> keep = bound.ok() ? Eval(*s.condition) : StatusOr<Value>(bound);
      frames_.pop_back();
      if (!keep.ok()) return keep.status();
      if (Truthy(*keep)) items.push_back(std::move(item));
    }
  } else {
    items = std::move(*all);
  }
  if (items.empty()) {
    frames_.emplace_back();
    Status status = Execute(s.else_body);
    frames_.pop_back();
    return status;
  }
  auto shared = std::make_shared<const std::vector<Value>>(std::move(items));
  // Each round has its own scope: a {% set %} inside does not outlive the round, as in Jinja.
  frames_.emplace_back();
  Status status;
  for (size_t i = 0; i < shared->size() && status.ok(); ++i) {
    status = At(s.offset, Charge(kStepsPerRound));
    if (!status.ok()) break;
    frames_.back().vars.clear();
    frames_.back().Set("loop", LoopObject(shared, i));
    status = Bind(s.targets, (*shared)[i], s.offset);
    if (status.ok()) status = Execute(s.body);
    const Flow flow = flow_;
    flow_ = Flow::kNormal;
    if (flow == Flow::kBreak) break;
  }
  frames_.pop_back();
  return status;
}

Status Interpreter::ExecuteSet(const Stmt& s) {
  Value value;
  if (s.kind == Stmt::Kind::kSetBlock) {
    std::string captured;
    std::string* outer = out_;
    out_ = &captured;
    frames_.emplace_back();
    Status status = Execute(s.body);
    frames_.pop_back();
    out_ = outer;
    MP_RETURN_IF_ERROR(status);
    StatusOr<Value> text = MakeString(std::move(captured));
    if (!text.ok()) return At(s.offset, text.status());
    value = std::move(text).value();
  } else {
    MP_ASSIGN_OR_RETURN(value, Eval(*s.expr));
  }
  if (s.attribute.empty()) return Bind(s.targets, value, s.offset);
  MP_ASSIGN_OR_RETURN(Value target, Lookup(s.targets[0]));
  if (target.kind() != Value::Kind::kObject || target.as_object().type_name != "Namespace") {
    return At(s.offset, InvalidArgumentError("cannot set attribute '" + s.attribute + "' of '" +
                                             s.targets[0] +
                                             "': only namespace() objects have "
                                             "attributes that can be set"));
  }
  if (HoldsObject(value, 0)) {
    return At(s.offset, InvalidArgumentError("a namespace attribute cannot hold a namespace or "
                                             "loop object (it could make a reference cycle)"));
  }
  target.as_object().attributes.Set(s.attribute, std::move(value));
  return OkStatus();
}

}  // namespace millipede::jinja::internal
