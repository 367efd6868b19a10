#include "loom/scalar.h"

#include <ostream>

namespace loom {

DType Scalar::dtype() const {
  switch (kind_) {
    case Kind::Bool:
      return kBool;
    case Kind::Int:
      return kInt64;
    case Kind::Float:
      return default_dtype();
  }
  return kFloat32;
}

bool Scalar::operator==(const Scalar& o) const {
  if (kind_ != o.kind_) return false;
  return kind_ == Kind::Float ? v_.d == o.v_.d : v_.i == o.v_.i;
}

std::ostream& operator<<(std::ostream& os, const Scalar& s) {
  switch (s.kind()) {
    case Scalar::Kind::Bool:
      return os << (s.to_bool() ? "True" : "False");
    case Scalar::Kind::Int:
      return os << s.to_int();
    case Scalar::Kind::Float:
      return os << s.to_double();
  }
  return os;
}

}  // namespace loom
