// IValue (dispatch layer): one boxed value of any type an operator schema can name, and Stack, the
// vector of IValues that boxed kernels (fallbacks, profiler, graph capture) read their arguments
// from and push their results to. Plain value type; not synchronised.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "loom/device.h"
#include "loom/dtype.h"
#include "loom/export.h"
#include "loom/generator.h"
#include "loom/scalar.h"
#include "loom/tensor.h"

namespace loom {

class LOOM_API IValue {
 public:
  // Order matches the variant alternatives below.
  enum class Tag : uint8_t {
    None,
    Tensor,
    Int,
    Double,
    Bool,
    Scalar,
    IntList,
    DoubleList,
    TensorList,
    String,
    DType,
    Device,
    Generator,
  };

  IValue() = default;
  IValue(std::nullopt_t) {}                             // NOLINT
  IValue(Tensor t) : v_(std::move(t)) {}                // NOLINT
  IValue(int64_t i) : v_(i) {}                          // NOLINT
  IValue(int i) : v_(static_cast<int64_t>(i)) {}        // NOLINT
  IValue(double d) : v_(d) {}                           // NOLINT
  IValue(bool b) : v_(b) {}                             // NOLINT
  IValue(const Scalar& s) : v_(s) {}                    // NOLINT
  IValue(std::vector<int64_t> l) : v_(std::move(l)) {}  // NOLINT
  IValue(std::vector<double> l) : v_(std::move(l)) {}   // NOLINT
  IValue(std::vector<Tensor> l) : v_(std::move(l)) {}   // NOLINT
  IValue(std::string s) : v_(std::move(s)) {}           // NOLINT
  IValue(const char* s) : v_(std::string(s)) {}         // NOLINT
  IValue(DType t) : v_(t) {}                            // NOLINT
  IValue(Device d) : v_(d) {}                           // NOLINT
  IValue(Generator g) : v_(std::move(g)) {}             // NOLINT

  Tag tag() const { return static_cast<Tag>(v_.index()); }
  const char* tag_name() const;
  bool is_none() const { return tag() == Tag::None; }
  bool is_tensor() const { return tag() == Tag::Tensor; }
  bool is_tensor_list() const { return tag() == Tag::TensorList; }
  bool is_int() const { return tag() == Tag::Int; }
  bool is_double() const { return tag() == Tag::Double; }
  bool is_bool() const { return tag() == Tag::Bool; }
  bool is_scalar() const { return tag() == Tag::Scalar; }
  bool is_int_list() const { return tag() == Tag::IntList; }
  bool is_string() const { return tag() == Tag::String; }
  bool is_device() const { return tag() == Tag::Device; }

  // Accessors throw TypeError naming both tags on a mismatch.
  const Tensor& to_tensor() const;
  int64_t to_int() const;
  double to_double() const;  // also from Int
  bool to_bool() const;
  Scalar to_scalar() const;  // from Scalar, Int, Double or Bool
  const std::vector<int64_t>& to_int_list() const;
  const std::vector<double>& to_double_list() const;
  const std::vector<Tensor>& to_tensor_list() const;
  const std::string& to_string() const;
  DType to_dtype() const;
  Device to_device() const;
  const Generator& to_generator() const;

  // A short human-readable form: tensors print as "Tensor[2, 3] float32".
  std::string repr() const;

 private:
  std::variant<std::monostate, Tensor, int64_t, double, bool, Scalar, std::vector<int64_t>,
               std::vector<double>, std::vector<Tensor>, std::string, DType, Device, Generator>
      v_;
};

using Stack = std::vector<IValue>;

LOOM_API std::ostream& operator<<(std::ostream& os, const IValue& v);

}  // namespace loom
