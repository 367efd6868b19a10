#include "loom/ivalue.h"

#include <ostream>
#include <sstream>

#include "loom/error.h"

namespace loom {

namespace {
const char* tag_str(IValue::Tag t) {
  static constexpr const char* names[] = {"None",       "Tensor", "int",      "float",    "bool",
                                          "Scalar",     "int[]",  "float[]",  "Tensor[]", "str",
                                          "ScalarType", "Device", "Generator"};
  return names[static_cast<int>(t)];
}
}  // namespace

const char* IValue::tag_name() const {
  return tag_str(tag());
}

#define LOOM_IVALUE_GET(T, TAG)                                                              \
  LOOM_CHECK_TYPE(tag() == Tag::TAG, "[ivalue] expected a ", tag_str(Tag::TAG), " but got ", \
                  tag_name());                                                               \
  return std::get<T>(v_);

const Tensor& IValue::to_tensor() const {
    LOOM_IVALUE_GET(Tensor, Tensor)} int64_t IValue::to_int() const {
  if (tag() == Tag::Scalar && std::get<Scalar>(v_).is_integral())
    return std::get<Scalar>(v_).to_int();
  LOOM_IVALUE_GET(int64_t, Int)
}
bool IValue::to_bool() const {
  LOOM_IVALUE_GET(bool, Bool)
}
const std::vector<int64_t>& IValue::to_int_list() const {
  LOOM_IVALUE_GET(std::vector<int64_t>, IntList)
}
const std::vector<double>& IValue::to_double_list() const {
  LOOM_IVALUE_GET(std::vector<double>, DoubleList)
}
const std::vector<Tensor>& IValue::to_tensor_list() const {
  LOOM_IVALUE_GET(std::vector<Tensor>, TensorList)
}
const std::string& IValue::to_string() const {
    LOOM_IVALUE_GET(std::string, String)} DType IValue::to_dtype() const {
    LOOM_IVALUE_GET(DType, DType)} Device IValue::to_device() const {
  if (tag() == Tag::String) return Device(std::get<std::string>(v_));
  LOOM_IVALUE_GET(Device, Device)
}
const Generator& IValue::to_generator() const {
  LOOM_IVALUE_GET(Generator, Generator)
}
#undef LOOM_IVALUE_GET

double IValue::to_double() const {
  switch (tag()) {
    case Tag::Double:
      return std::get<double>(v_);
    case Tag::Int:
      return static_cast<double>(std::get<int64_t>(v_));
    case Tag::Scalar:
      return std::get<Scalar>(v_).to_double();
    default:
      break;
  }
  LOOM_THROW(TypeError, "[ivalue] expected a float but got ", tag_name());
}

Scalar IValue::to_scalar() const {
  switch (tag()) {
    case Tag::Scalar:
      return std::get<Scalar>(v_);
    case Tag::Int:
      return Scalar(std::get<int64_t>(v_));
    case Tag::Double:
      return Scalar(std::get<double>(v_));
    case Tag::Bool:
      return Scalar(std::get<bool>(v_));
    default:
      break;
  }
  LOOM_THROW(TypeError, "[ivalue] expected a Scalar but got ", tag_name());
}

std::string IValue::repr() const {
  std::ostringstream os;
  switch (tag()) {
    case Tag::None:
      os << "None";
      break;
    case Tag::Tensor: {
      const Tensor& t = std::get<Tensor>(v_);
      if (!t.defined()) {
        os << "Tensor(undefined)";
      } else {
        os << "Tensor" << t.sizes() << " " << t.dtype();
        if (!t.is_cpu()) os << " " << t.device();
      }
      break;
    }
    case Tag::Int:
      os << std::get<int64_t>(v_);
      break;
    case Tag::Double:
      os << std::get<double>(v_);
      break;
    case Tag::Bool:
      os << (std::get<bool>(v_) ? "True" : "False");
      break;
    case Tag::Scalar:
      os << std::get<Scalar>(v_);
      break;
    case Tag::IntList:
      os << IntArrayRef(std::get<std::vector<int64_t>>(v_));
      break;
    case Tag::DoubleList: {
      os << "[";
      const auto& l = std::get<std::vector<double>>(v_);
      for (size_t i = 0; i < l.size(); ++i) os << (i ? ", " : "") << l[i];
      os << "]";
      break;
    }
    case Tag::TensorList: {
      const auto& l = std::get<std::vector<Tensor>>(v_);
      os << "[";
      for (size_t i = 0; i < l.size(); ++i) os << (i ? ", " : "") << IValue(l[i]).repr();
      os << "]";
      break;
    }
    case Tag::String:
      os << "'" << std::get<std::string>(v_) << "'";
      break;
    case Tag::DType:
      os << std::get<DType>(v_);
      break;
    case Tag::Device:
      os << std::get<Device>(v_);
      break;
    case Tag::Generator:
      os << "Generator(seed=" << std::get<Generator>(v_).seed() << ")";
      break;
  }
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const IValue& v) {
  return os << v.repr();
}

}  // namespace loom
