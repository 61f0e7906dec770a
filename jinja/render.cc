// Statements: text and output, if, for (with loop variables), set, break / continue, scopes.
#include <memory>

#include "jinja/renderer.h"

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

Status Renderer::Run(const Body& body, std::string* out) {
  out_ = out;
  scopes_.Push();
  return Execute(body);
}

Status Renderer::Execute(const Body& body) {
  for (const Stmt& s : body) {
    MP_RETURN_IF_ERROR(ExecuteStatement(s));
    if (flow_ != Flow::kNormal) return OkStatus();
  }
  return OkStatus();
}

Status Renderer::ExecuteScoped(const Body& body) {
  scopes_.Push();
  Status status = Execute(body);
  scopes_.Pop();
  return status;
}

Status Renderer::Output(std::string_view text, size_t offset) {
  if (static_cast<int64_t>(out_->size() + text.size()) > runtime_.limits().max_output_bytes) {
    return At(offset, ResourceExhaustedError("the output exceeds the limit of " +
                                             std::to_string(runtime_.limits().max_output_bytes) +
                                             " bytes"));
  }
  out_->append(text);
  return At(offset, runtime_.Charge(static_cast<int64_t>(text.size() / 64)));
}

Status Renderer::ExecuteStatement(const Stmt& s) {
  MP_RETURN_IF_ERROR(At(s.offset, runtime_.Charge(1)));
  switch (s.kind) {
    case Stmt::Kind::kText:
      return Output(s.text, s.offset);
    case Stmt::Kind::kOutput: {
      MP_ASSIGN_OR_RETURN(Value v, evaluator_.Eval(*s.expr));
      StatusOr<std::string> text = ToStr(v);
      if (!text.ok()) return At(s.expr->offset, text.status());
      return Output(*text, s.offset);
    }
    case Stmt::Kind::kIf:
      return ExecuteIf(s);
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
    case Stmt::Kind::kScope:
      return ExecuteScoped(s.body);
  }
  return At(s.offset, InternalError("unknown statement kind"));
}

Status Renderer::ExecuteIf(const Stmt& s) {
  for (const auto& [condition, body] : s.branches) {
    if (condition) {
      MP_ASSIGN_OR_RETURN(Value test, evaluator_.Eval(*condition));
      if (!Truthy(test)) continue;
    }
    return Execute(body);
  }
  return OkStatus();
}

Status Renderer::Bind(const std::vector<std::string>& targets, const Value& value, size_t offset) {
  if (targets.size() == 1) {
    scopes_.Set(targets[0], value);
    return OkStatus();
  }
  StatusOr<std::vector<Value>> items = runtime_.Iterate(value);
  if (!items.ok() || value.is_undefined()) {
    return At(offset, InvalidArgumentError(std::string("cannot unpack a '") + TypeName(value) +
                                           "' into " + std::to_string(targets.size()) + " names"));
  }
  if (items->size() != targets.size()) {
    return At(offset,
              InvalidArgumentError("cannot unpack " + std::to_string(items->size()) +
                                   " values into " + std::to_string(targets.size()) + " names"));
  }
  for (size_t i = 0; i < targets.size(); ++i) scopes_.Set(targets[i], (*items)[i]);
  return OkStatus();
}

StatusOr<std::vector<Value>> Renderer::FilterLoopItems(const Stmt& s, std::vector<Value> all) {
  std::vector<Value> items;
  // The filter sees each item under the loop's names, without `loop`.
  for (Value& item : all) {
    MP_RETURN_IF_ERROR(At(s.offset, runtime_.Charge(1)));
    scopes_.Push();
    Status bound = Bind(s.targets, item, s.offset);
    StatusOr<Value> keep = bound.ok() ? evaluator_.Eval(*s.condition) : StatusOr<Value>(bound);
    scopes_.Pop();
    if (!keep.ok()) return keep.status();
    if (Truthy(*keep)) items.push_back(std::move(item));
  }
  return items;
}

Status Renderer::ExecuteFor(const Stmt& s) {
  MP_ASSIGN_OR_RETURN(Value iterable, evaluator_.Eval(*s.expr));
  StatusOr<std::vector<Value>> all = runtime_.Iterate(iterable);
  if (!all.ok()) return At(s.expr->offset, all.status());
  std::vector<Value> items = std::move(*all);
  if (s.condition) {
    MP_ASSIGN_OR_RETURN(items, FilterLoopItems(s, std::move(items)));
  }
  if (items.empty()) return ExecuteScoped(s.else_body);
  auto shared = std::make_shared<const std::vector<Value>>(std::move(items));
  // Each round has its own scope: a {% set %} inside does not outlive the round, as in Jinja.
  scopes_.Push();
  Status status;
  for (size_t i = 0; i < shared->size() && status.ok(); ++i) {
    status = At(s.offset, runtime_.Charge(kStepsPerRound));
    if (!status.ok()) break;
    scopes_.ClearInnermost();
    scopes_.Set("loop", LoopObject(shared, i));
    status = Bind(s.targets, (*shared)[i], s.offset);
    if (status.ok()) status = Execute(s.body);
    const Flow flow = flow_;
    flow_ = Flow::kNormal;
    if (flow == Flow::kBreak) break;
  }
  scopes_.Pop();
  return status;
}

Status Renderer::ExecuteSet(const Stmt& s) {
  Value value;
  if (s.kind == Stmt::Kind::kSetBlock) {
    std::string captured;
    std::string* outer = out_;
    out_ = &captured;
    Status status = ExecuteScoped(s.body);
    out_ = outer;
    MP_RETURN_IF_ERROR(status);
    StatusOr<Value> text = runtime_.MakeString(std::move(captured));
    if (!text.ok()) return At(s.offset, text.status());
    value = std::move(text).value();
  } else {
    MP_ASSIGN_OR_RETURN(value, evaluator_.Eval(*s.expr));
  }
  if (s.attribute.empty()) return Bind(s.targets, value, s.offset);
  return SetNamespaceAttribute(s, std::move(value));
}

Status Renderer::SetNamespaceAttribute(const Stmt& s, Value value) {
  MP_ASSIGN_OR_RETURN(Value target, evaluator_.Lookup(s.targets[0]));
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
