// Schema parser: a small recursive-descent parser over the PyTorch-style schema syntax.
#include "loom/schema.h"

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "loom/error.h"

namespace loom {

std::string SchemaType::canonical() const {
  static constexpr const char* names[] = {"Tensor",     "int",    "float", "bool",     "Scalar",
                                          "ScalarType", "Device", "str",   "Generator"};
  std::string s = names[static_cast<int>(kind)];
  if (is_list) s += "[]";
  if (optional) s += "?";
  return s;
}

std::string SchemaType::str() const {
  if (!is_list || fixed_size < 0) return canonical();
  std::string s = canonical();
  auto pos = s.find("[]");
  return s.substr(0, pos) + "[" + std::to_string(fixed_size) + "]" + s.substr(pos + 2);
}

std::string FunctionSchema::full_name() const {
  return ns + "::" + op_name();
}
std::string FunctionSchema::op_name() const {
  return overload.empty() ? name : name + "." + overload;
}

bool FunctionSchema::is_mutable() const {
  for (const auto& a : arguments) {
    if (a.is_write) return true;
  }
  return false;
}

namespace {

std::string type_with_alias(const Argument& a) {
  std::string t = a.type.str();
  if (a.alias_set.empty()) return t;
  // The alias annotation goes right after the base type name: Tensor(a!), Tensor(a)[].
  size_t base_len = 0;
  while (base_len < t.size() && std::isalnum(static_cast<unsigned char>(t[base_len]))) ++base_len;
  return t.substr(0, base_len) + "(" + a.alias_set + (a.is_write ? "!" : "") + ")" +
         t.substr(base_len);
}

std::string default_str(const Argument& a) {
  const IValue& v = *a.default_value;
  if (v.is_none()) return "None";
  if (v.is_bool()) return v.to_bool() ? "True" : "False";
  if (v.is_string()) return "'" + v.to_string() + "'";
  if (v.is_int_list()) {
    const auto& l = v.to_int_list();
    // int[2] stride=1 prints back as 1.
    if (a.type.fixed_size > 0 && !l.empty()) {
      bool same = true;
      for (auto x : l) same = same && x == l[0];
      if (same && static_cast<int>(l.size()) == a.type.fixed_size) return std::to_string(l[0]);
    }
  }
  if (v.is_double()) {
    std::ostringstream os;
    os << v.to_double();
    std::string s = os.str();
    if (s.find_first_of(".e") == std::string::npos) s += ".";
    return s;
  }
  return v.repr();
}

}  // namespace

std::string FunctionSchema::str() const {
  std::ostringstream os;
  os << full_name() << "(";
  bool kw = false;
  for (size_t i = 0; i < arguments.size(); ++i) {
    const Argument& a = arguments[i];
    if (i) os << ", ";
    if (a.kwarg_only && !kw) {
      os << "*, ";
      kw = true;
    }
    os << type_with_alias(a) << " " << a.name;
    if (a.default_value) os << "=" << default_str(a);
  }
  os << ") -> ";
  if (returns.size() == 1) {
    os << type_with_alias(returns[0]);
    if (!returns[0].name.empty()) os << " " << returns[0].name;
  } else {
    os << "(";
    for (size_t i = 0; i < returns.size(); ++i) {
      if (i) os << ", ";
      os << type_with_alias(returns[i]);
      if (!returns[i].name.empty()) os << " " << returns[i].name;
    }
    os << ")";
  }
  return os.str();
}

namespace {

class Parser {
 public:
  explicit Parser(const std::string& text) : s_(text) {}

  FunctionSchema parse(const std::string& default_ns) {
    FunctionSchema f;
    std::string first = ident("operator name");
    if (peek("::")) {
      pos_ += 2;
      f.ns = first;
      f.name = ident("operator name");
    } else {
      f.ns = default_ns;
      f.name = first;
    }
    if (f.ns.empty()) fail("the operator name needs a namespace (ns::name)");
    if (accept('.')) f.overload = ident("overload name");
    expect('(');
    bool kwarg_only = false;
    skip_ws();
    if (!accept(')')) {
      for (;;) {
        skip_ws();
        if (accept('*')) {
          if (kwarg_only) fail("'*' appears twice");
          kwarg_only = true;
        } else {
          Argument a = argument(/*is_return=*/false);
          a.kwarg_only = kwarg_only;
          for (const auto& prev : f.arguments) {
            if (prev.name == a.name) fail("argument name '" + a.name + "' is used twice");
          }
          f.arguments.push_back(std::move(a));
        }
        skip_ws();
        if (accept(')')) break;
        expect(',');
      }
    }
    skip_ws();
    if (!peek("->")) fail("expected '->' before the returns");
    pos_ += 2;
    skip_ws();
    if (accept('(')) {
      skip_ws();
      if (!accept(')')) {
        for (;;) {
          f.returns.push_back(argument(/*is_return=*/true));
          skip_ws();
          if (accept(')')) break;
          expect(',');
        }
      }
    } else {
      f.returns.push_back(argument(/*is_return=*/true));
    }
    skip_ws();
    if (pos_ != s_.size()) fail("unexpected text after the returns");
    return f;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    LOOM_THROW(ValueError, "[schema] ", what, " at offset ", pos_, " in '", s_, "'");
  }
  void skip_ws() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool peek(const char* lit) {
    skip_ws();
    return s_.compare(pos_, std::strlen(lit), lit) == 0;
  }
  bool accept(char c) {
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!accept(c)) fail(std::string("expected '") + c + "'");
  }
  std::string ident(const char* what) {
    skip_ws();
    size_t start = pos_;
    while (pos_ < s_.size() &&
           (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) {
      ++pos_;
    }
    if (start == pos_ || std::isdigit(static_cast<unsigned char>(s_[start]))) {
      pos_ = start;
      fail(std::string("expected ") + what);
    }
    return s_.substr(start, pos_ - start);
  }

  SchemaType::Kind kind_of(const std::string& name) {
    using K = SchemaType::Kind;
    if (name == "Tensor") return K::Tensor;
    if (name == "int" || name == "SymInt") return K::Int;
    if (name == "float") return K::Float;
    if (name == "bool") return K::Bool;
    if (name == "Scalar") return K::Scalar;
    if (name == "ScalarType") return K::ScalarType;
    if (name == "Device") return K::Device;
    if (name == "str") return K::Str;
    if (name == "Generator") return K::Generator;
    fail("unknown type '" + name + "'");
  }

  Argument argument(bool is_return) {
    Argument a;
    size_t type_pos = pos_;
    std::string base = ident("a type");
    a.type.kind = kind_of(base);
    if (accept('(')) {  // alias annotation
      skip_ws();
      size_t start = pos_;
      while (pos_ < s_.size() && std::isalnum(static_cast<unsigned char>(s_[pos_]))) ++pos_;
      a.alias_set = s_.substr(start, pos_ - start);
      if (a.alias_set.empty()) fail("expected an alias set name such as 'a'");
      if (accept('!')) a.is_write = true;
      expect(')');
    }
    if (accept('[')) {
      a.type.is_list = true;
      skip_ws();
      if (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
        a.type.fixed_size = static_cast<int>(std::strtol(s_.c_str() + pos_, nullptr, 10));
        while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
      }
      expect(']');
    }
    if (accept('?')) a.type.optional = true;
    if (a.type.is_list && a.type.kind != SchemaType::Kind::Tensor &&
        a.type.kind != SchemaType::Kind::Int && a.type.kind != SchemaType::Kind::Float) {
      pos_ = type_pos;
      fail("lists of " + base + " are not supported");
    }
    skip_ws();
    if (is_return) {
      if (pos_ < s_.size() &&
          (std::isalpha(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) {
        a.name = ident("a return name");
      }
      return a;
    }
    a.name = ident("an argument name");
    if (accept('=')) a.default_value = default_value(a.type);
    return a;
  }

  IValue default_value(const SchemaType& t) {
    skip_ws();
    size_t start = pos_;
    if (peek("None")) {
      pos_ += 4;
      if (!t.optional) fail("default None for a non-optional argument");
      return IValue();
    }
    if (peek("True")) {
      pos_ += 4;
      return IValue(true);
    }
    if (peek("False")) {
      pos_ += 5;
      return IValue(false);
    }
    if (s_[pos_] == '\'' || s_[pos_] == '"') {
      char q = s_[pos_++];
      size_t end = s_.find(q, pos_);
      if (end == std::string::npos) fail("unterminated string default");
      std::string v = s_.substr(pos_, end - pos_);
      pos_ = end + 1;
      return IValue(v);
    }
    if (t.is_list) {
      std::vector<int64_t> ints;
      std::vector<double> doubles;
      if (accept('[')) {
        skip_ws();
        if (!accept(']')) {
          for (;;) {
            double d;
            bool is_int;
            number(&d, &is_int);
            ints.push_back(static_cast<int64_t>(d));
            doubles.push_back(d);
            skip_ws();
            if (accept(']')) break;
            expect(',');
          }
        }
      } else {  // int[2] stride=1 means [1, 1]
        double d;
        bool is_int;
        number(&d, &is_int);
        if (t.fixed_size < 0) {
          pos_ = start;
          fail("a single-number default needs a fixed-size list type such as int[2]");
        }
        ints.assign(static_cast<size_t>(t.fixed_size), static_cast<int64_t>(d));
        doubles.assign(static_cast<size_t>(t.fixed_size), d);
      }
      if (t.kind == SchemaType::Kind::Float) return IValue(doubles);
      return IValue(ints);
    }
    double d;
    bool is_int;
    number(&d, &is_int);
    switch (t.kind) {
      case SchemaType::Kind::Int:
        if (!is_int) fail("an int argument needs an integer default");
        return IValue(static_cast<int64_t>(d));
      case SchemaType::Kind::Float:
        return IValue(d);
      case SchemaType::Kind::Scalar:
        return is_int ? IValue(Scalar(static_cast<int64_t>(d))) : IValue(Scalar(d));
      case SchemaType::Kind::Bool:
        return IValue(d != 0);
      default:
        pos_ = start;
        fail("a number is not a valid default for this type");
    }
  }

  void number(double* out, bool* is_int) {
    skip_ws();
    const char* b = s_.c_str() + pos_;
    char* e = nullptr;
    *out = std::strtod(b, &e);
    if (e == b) fail("expected a number");
    std::string tok(b, static_cast<size_t>(e - b));
    *is_int = tok.find_first_of(".eE") == std::string::npos && tok.find("inf") == std::string::npos;
    pos_ += static_cast<size_t>(e - b);
  }

  const std::string& s_;
  size_t pos_ = 0;
};

}  // namespace

FunctionSchema parse_schema(const std::string& text, const std::string& default_ns) {
  return Parser(text).parse(default_ns);
}

}  // namespace loom
