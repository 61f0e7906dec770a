// Expressions: names, literals, containers, access, calls, filters, tests, operators.
#include <cmath>
#include <limits>

#include "jinja/builtins.h"
#include "jinja/evaluator.h"
#include "jinja/py_text.h"

namespace millipede::jinja::internal {
namespace {

Status TypeError(const char* op, const Value& a, const Value& b) {
  return InvalidArgumentError(std::string("unsupported operand types for ") + op + ": '" +
                              TypeName(a) + "' and '" + TypeName(b) + "'");
}

// Python's a // b and a % b for ints (rounding toward negative infinity).
int64_t FloorDiv(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

StatusOr<Value> Arithmetic(const std::string& op, const Value& a, const Value& b) {
  const bool ints = a.kind() != Value::Kind::kFloat && b.kind() != Value::Kind::kFloat;
  if (ints) {
    const int64_t x = a.as_int(), y = b.as_int();
    int64_t r = 0;
    if (op == "+" && !__builtin_add_overflow(x, y, &r)) return Value::Int(r);
    if (op == "-" && !__builtin_sub_overflow(x, y, &r)) return Value::Int(r);
    if (op == "*" && !__builtin_mul_overflow(x, y, &r)) return Value::Int(r);
    if ((op == "//" || op == "%") && y == 0) {
      return InvalidArgumentError("integer division or modulo by zero");
    }
    if (op == "%" && y == -1) return Value::Int(0);  // INT64_MIN / -1 would overflow
    if (op == "//" && !(x == std::numeric_limits<int64_t>::min() && y == -1)) {
      return Value::Int(FloorDiv(x, y));
    }
    if (op == "%") return Value::Int(x - FloorDiv(x, y) * y);
    if (op == "**" && y >= 0) {
      if (x == 0 || x == 1) return Value::Int(y == 0 ? 1 : x);
      if (x == -1) return Value::Int(y % 2 == 0 ? 1 : -1);
      int64_t result = 1;  // |x| >= 2 overflows within 63 rounds
      for (int64_t i = 0; i < y; ++i) {
        if (__builtin_mul_overflow(result, x, &result)) {
          return InvalidArgumentError("integer result of ** is too large");
        }
      }
      return Value::Int(result);
    }
    if (op != "/" && op != "**")
      return InvalidArgumentError("integer result of " + op + " is too large");
  }
  const double x = a.as_float(), y = b.as_float();
  if (op == "+") return Value::Float(x + y);
  if (op == "-") return Value::Float(x - y);
  if (op == "*") return Value::Float(x * y);
  if (op == "**") return Value::Float(std::pow(x, y));
  if (y == 0) return InvalidArgumentError("float division by zero");
  if (op == "/") return Value::Float(x / y);
  const double q = std::floor(x / y);
  if (op == "//") return Value::Float(q);
  const double m = std::fmod(x, y);
  return Value::Float(m != 0 && ((m < 0) != (y < 0)) ? m + y : m);
}

}  // namespace

StatusOr<Value> Evaluator::Lookup(const std::string& name) {
  if (const Value* v = scopes_.Find(name)) return *v;
  if (std::optional<Value> global = GlobalFunction(runtime_, name)) return *global;
  return Value::Undefined("'" + name + "' is undefined");
}

StatusOr<Value> Evaluator::Eval(const Expr& e) {
  MP_ASSIGN_OR_RETURN(Value v, EvalNode(e));
  // Bounded nesting keeps every recursive walk over values (printing, comparing, dumping,
  // freeing) shallow.
  if (v.depth() > kMaxValueDepth) {
    return At(e.offset, InvalidArgumentError("values nest deeper than " +
                                             std::to_string(kMaxValueDepth) + " levels"));
  }
  return v;
}

StatusOr<Value> Evaluator::EvalNode(const Expr& e) {
  if (Status s = runtime_.Charge(1); !s.ok()) return At(e.offset, s);
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.literal;
    case Expr::Kind::kName:
      return Lookup(e.name);
    case Expr::Kind::kList:
    case Expr::Kind::kTuple:
    case Expr::Kind::kDict:
      return EvalContainer(e);
    case Expr::Kind::kAttr:
    case Expr::Kind::kItem:
      return EvalAccess(e);
    case Expr::Kind::kSlice:
      return EvalSlice(e);
    case Expr::Kind::kCall:
    case Expr::Kind::kFilter:
    case Expr::Kind::kTest:
      return EvalCall(e);
    case Expr::Kind::kNot: {
      MP_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
      return Value::Bool(!Truthy(v));
    }
    case Expr::Kind::kNegate:
    case Expr::Kind::kPlus:
      return EvalUnary(e);
    case Expr::Kind::kBinary:
      return EvalBinary(e);
    case Expr::Kind::kCompare:
      return EvalCompare(e);
    case Expr::Kind::kAnd:
    case Expr::Kind::kOr: {
      MP_ASSIGN_OR_RETURN(Value left, Eval(*e.args[0]));
      if (Truthy(left) == (e.kind == Expr::Kind::kOr)) return left;
      return Eval(*e.args[1]);
    }
    case Expr::Kind::kCondition: {
      MP_ASSIGN_OR_RETURN(Value test, Eval(*e.args[1]));
      if (Truthy(test)) return Eval(*e.args[0]);
      if (!e.args[2]) return Value::Undefined("the conditional expression had no else branch");
      return Eval(*e.args[2]);
    }
  }
  return At(e.offset, InternalError("unknown expression kind"));
}

StatusOr<Value> Evaluator::EvalAccess(const Expr& e) {
  MP_ASSIGN_OR_RETURN(Value subject, Eval(*e.args[0]));
  if (e.kind == Expr::Kind::kAttr) {
    StatusOr<Value> v = runtime_.GetAttribute(subject, e.name);
    if (!v.ok()) return At(e.offset, v.status());
    return v;
  }
  MP_ASSIGN_OR_RETURN(Value key, Eval(*e.args[1]));
  StatusOr<Value> v = runtime_.GetItem(subject, key);
  if (!v.ok()) return At(e.offset, v.status());
  return v;
}

StatusOr<Value> Evaluator::EvalUnary(const Expr& e) {
  MP_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
  if (v.is_undefined()) return At(e.offset, InvalidArgumentError(v.as_string()));
  if (!v.is_number()) {
    return At(e.offset, InvalidArgumentError(std::string("bad operand type for unary ") +
                                             (e.kind == Expr::Kind::kNegate ? "-" : "+") + ": '" +
                                             TypeName(v) + "'"));
  }
  if (e.kind == Expr::Kind::kPlus)
    return v.kind() == Value::Kind::kBool ? Value::Int(v.as_int()) : v;
  if (v.kind() == Value::Kind::kFloat) return Value::Float(-v.as_float());
  if (v.as_int() == std::numeric_limits<int64_t>::min()) {
    return At(e.offset, InvalidArgumentError("integer result of - is too large"));
  }
  return Value::Int(-v.as_int());
}

StatusOr<Value> Evaluator::EvalContainer(const Expr& e) {
  if (e.kind == Expr::Kind::kDict) {
    DictData dict;
    for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
      MP_ASSIGN_OR_RETURN(Value key, Eval(*e.args[i]));
      if (!key.is_string()) {
        return At(e.args[i]->offset,
                  InvalidArgumentError(std::string("dict keys must be strings, got '") +
                                       TypeName(key) + "'"));
      }
      MP_ASSIGN_OR_RETURN(Value value, Eval(*e.args[i + 1]));
      dict.Set(key.as_string(), std::move(value));
    }
    return Value::Dict(std::move(dict));
  }
  std::vector<Value> items;
  for (const ExprPtr& arg : e.args) {
    MP_ASSIGN_OR_RETURN(Value v, Eval(*arg));
    items.push_back(std::move(v));
  }
  return Value::List(std::move(items), e.kind == Expr::Kind::kTuple);
}

StatusOr<Value> Evaluator::EvalCall(const Expr& e) {
  MP_ASSIGN_OR_RETURN(Value subject, Eval(*e.args[0]));
  CallArgs args;
  for (size_t i = 1; i < e.args.size(); ++i) {
    MP_ASSIGN_OR_RETURN(Value v, Eval(*e.args[i]));
    args.positional.push_back(std::move(v));
  }
  for (const auto& [key, expr] : e.keyword) {
    MP_ASSIGN_OR_RETURN(Value v, Eval(*expr));
    args.keyword.emplace_back(key, std::move(v));
  }
  if (e.kind == Expr::Kind::kFilter) {
    StatusOr<Value> v = runtime_.ApplyFilter(e.name, subject, args);
    if (!v.ok()) return At(e.offset, v.status());
    return v;
  }
  if (e.kind == Expr::Kind::kTest) {
    StatusOr<bool> b = runtime_.ApplyTest(e.name, subject, args);
    if (!b.ok()) return At(e.offset, b.status());
    return Value::Bool(*b != e.negated);
  }
  if (subject.is_undefined()) return At(e.offset, InvalidArgumentError(subject.as_string()));
  if (subject.kind() != Value::Kind::kFunction) {
    return At(e.offset, InvalidArgumentError(std::string("'") + TypeName(subject) +
                                             "' object is not callable"));
  }
  StatusOr<Value> v = subject.as_function().call(args);
  if (!v.ok()) return At(e.offset, v.status());
  return v;
}

StatusOr<Value> Evaluator::EvalBinary(const Expr& e) {
  MP_ASSIGN_OR_RETURN(Value a, Eval(*e.args[0]));
  MP_ASSIGN_OR_RETURN(Value b, Eval(*e.args[1]));
  const std::string& op = e.name;
  auto fail = [&](const Status& s) -> StatusOr<Value> { return At(e.offset, s); };
  if (op == "~") {
    StatusOr<std::string> x = ToStr(a), y = ToStr(b);
    if (!x.ok()) return fail(x.status());
    if (!y.ok()) return fail(y.status());
    StatusOr<Value> joined = runtime_.MakeString(*x + *y);
    return joined.ok() ? joined : fail(joined.status());
  }
  if (a.is_undefined()) return fail(InvalidArgumentError(a.as_string()));
  if (b.is_undefined()) return fail(InvalidArgumentError(b.as_string()));
  if (a.is_number() && b.is_number()) {
    StatusOr<Value> v = Arithmetic(op, a, b);
    return v.ok() ? v : fail(v.status());
  }
  if (op == "+" && a.is_string() && b.is_string()) {
    StatusOr<Value> v = runtime_.MakeString(a.as_string() + b.as_string());
    return v.ok() ? v : fail(v.status());
  }
  if (op == "+" && a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
    std::vector<Value> items = a.as_list().items;
    items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
    StatusOr<Value> v = runtime_.MakeList(std::move(items), a.as_list().is_tuple);
    return v.ok() ? v : fail(v.status());
  }
  if (op == "*" && (a.is_string() || a.is_list() || b.is_string() || b.is_list())) {
    const Value& seq = a.is_number() ? b : a;
    const Value& count = a.is_number() ? a : b;
    if (count.kind() != Value::Kind::kInt && count.kind() != Value::Kind::kBool) {
      return fail(TypeError("*", a, b));
    }
    const int64_t n = std::max<int64_t>(0, count.as_int());
    if (seq.is_string()) {
      if (n > 0 &&
          static_cast<int64_t>(seq.as_string().size()) > runtime_.limits().max_output_bytes / n) {
        return fail(ResourceExhaustedError("string repetition exceeds the output limit"));
      }
      std::string text;
      for (int64_t i = 0; i < n; ++i) text += seq.as_string();
      StatusOr<Value> v = runtime_.MakeString(std::move(text));
      return v.ok() ? v : fail(v.status());
    }
    const int64_t size = static_cast<int64_t>(seq.as_list().items.size());
    if (n > 0 && size > runtime_.limits().max_list_items / n) {
      return fail(ResourceExhaustedError("list repetition exceeds the list size limit"));
    }
    std::vector<Value> items;
    for (int64_t i = 0; i < n; ++i) {
      items.insert(items.end(), seq.as_list().items.begin(), seq.as_list().items.end());
    }
    StatusOr<Value> v = runtime_.MakeList(std::move(items), seq.as_list().is_tuple);
    return v.ok() ? v : fail(v.status());
  }
  if (op == "%" && a.is_string()) {
    return fail(InvalidArgumentError("printf-style string formatting (%) is not supported"));
  }
  return fail(TypeError(op.c_str(), a, b));
}

StatusOr<Value> Evaluator::EvalCompare(const Expr& e) {
  MP_ASSIGN_OR_RETURN(Value left, Eval(*e.args[0]));
  for (size_t i = 0; i < e.ops.size(); ++i) {
    MP_ASSIGN_OR_RETURN(Value right, Eval(*e.args[i + 1]));
    const std::string& op = e.ops[i];
    StatusOr<bool> result = false;
    if (op == "==" || op == "!=") {
      result = Equals(left, right);
      if (result.ok() && op == "!=") result = !*result;
    } else if (op == "in" || op == "not in") {
      result = Contains(right, left);
      if (result.ok() && op == "not in") result = !*result;
    } else {
      if (left.is_undefined() || right.is_undefined()) {
        result = InvalidArgumentError((left.is_undefined() ? left : right).as_string());
      } else if (op == "<") {
        result = Less(left, right);
      } else if (op == ">") {
        result = Less(right, left);
      } else {  // <= and >=: not the other way round
        result = op == "<=" ? Less(right, left) : Less(left, right);
        if (result.ok()) result = !*result;
      }
    }
    if (!result.ok()) return At(e.offset, result.status());
    if (!*result) return Value::Bool(false);
    left = std::move(right);
  }
  return Value::Bool(true);
}

StatusOr<Value> Evaluator::EvalSlice(const Expr& e) {
  MP_ASSIGN_OR_RETURN(Value subject, Eval(*e.args[0]));
  std::optional<int64_t> bounds[3];
  for (int k = 0; k < 3; ++k) {
    if (!e.args[k + 1]) continue;
    MP_ASSIGN_OR_RETURN(Value v, Eval(*e.args[k + 1]));
    if (v.is_none()) continue;
    if (v.kind() != Value::Kind::kInt && v.kind() != Value::Kind::kBool) {
      return At(e.offset, InvalidArgumentError("slice indices must be integers or None"));
    }
    bounds[k] = v.as_int();
  }
  StatusOr<Value> v = Slice(runtime_, subject, bounds[0], bounds[1], bounds[2]);
  if (!v.ok()) return At(e.offset, v.status());
  return v;
}

}  // namespace millipede::jinja::internal
