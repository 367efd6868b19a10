// Operator schemas (dispatch layer): parsed from strings such as
//   "loom::add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)"
// A schema names the operator, its arguments (type, default, keyword-only, alias/mutation
// annotation) and its returns; the dispatcher checks kernels and typed calls against it. Immutable
// after parsing; thread-safe to read.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "loom/export.h"
#include "loom/ivalue.h"

namespace loom {

struct LOOM_API SchemaType {
  enum class Kind : uint8_t {
    Tensor,
    Int,
    Float,
    Bool,
    Scalar,
    ScalarType,
    Device,
    Str,
    Generator,
  };
  Kind kind = Kind::Tensor;
  bool is_list = false;
  int fixed_size = -1;  // int[2] -> 2
  bool optional = false;

  // Canonical text without the fixed size: "int[]?", "Tensor", "Scalar?". Typed calls and kernels
  // are matched against this.
  std::string canonical() const;
  // Text as written, including the fixed size: "int[2]".
  std::string str() const;
};

struct LOOM_API Argument {
  std::string name;
  SchemaType type;
  std::optional<IValue> default_value;
  bool kwarg_only = false;
  // Alias annotation "(a)" or "(a!)": the alias set and whether the operator writes through it.
  std::string alias_set;
  bool is_write = false;
};

class LOOM_API FunctionSchema {
 public:
  std::string ns;        // "loom"
  std::string name;      // "add"
  std::string overload;  // "out", or empty
  std::vector<Argument> arguments;
  std::vector<Argument> returns;

  // "loom::add.out"
  std::string full_name() const;
  // Name without namespace: "add.out".
  std::string op_name() const;
  // The schema printed back in the input syntax.
  std::string str() const;
  bool is_mutable() const;
};

// Parses a schema; throws ValueError naming the schema text and the character offset of the
// problem. A string without a namespace gets `default_ns`.
LOOM_API FunctionSchema parse_schema(const std::string& text, const std::string& default_ns = "");

}  // namespace loom
