// Guards of compiled functions: checking a call against a cached graph, and describing the guards
// for reports and recompile messages (see compiler/guards.h).
#include "compiler/guards.h"

#include <sstream>

#include "loom/autocast.h"
#include "loom/autograd.h"
#include "loom/ops.h"

namespace loom::compiler {
namespace {

std::string dims_str(IntArrayRef d) {
  std::ostringstream os;
  os << d;
  return os.str();
}

}  // namespace

TensorGuard TensorGuard::of(const Tensor& t) {
  TensorGuard g;
  g.defined = t.defined();
  if (!g.defined) return g;
  g.dtype = t.dtype();
  g.device = t.device();
  g.sizes = t.sizes().vec();
  g.strides = t.strides().vec();
  g.requires_grad = t.requires_grad();
  return g;
}

std::string TensorGuard::mismatch(const Tensor& t, bool describe) const {
  if (t.defined() != defined)
    return describe ? std::string(defined ? "is now undefined" : "is now defined")
                    : std::string("x");
  if (!defined) return "";
  if (t.dtype() != dtype)
    return describe ? std::string(std::string("dtype ") + dtype_name(dtype) + " -> " +
                                  dtype_name(t.dtype()))
                    : std::string("x");
  if (t.device() != device)
    return describe ? std::string("device " + device.str() + " -> " + t.device().str())
                    : std::string("x");
  if (symbol.empty()) {
    if (t.sizes() != IntArrayRef(sizes))
      return describe ? std::string("sizes " + dims_str(sizes) + " -> " + dims_str(t.sizes()))
                      : std::string("x");
  } else {
    if (t.dim() != static_cast<int64_t>(sizes.size()))
      return describe ? std::string("rank " + std::to_string(sizes.size()) + " -> " +
                                    std::to_string(t.dim()))
                      : std::string("x");
    for (size_t d = 0; d < sizes.size(); ++d) {
      if (symbol[d] < 0 && t.size(static_cast<int64_t>(d)) != sizes[d])
        return describe ? std::string("sizes " + sizes_str() + " -> " + dims_str(t.sizes()))
                        : std::string("x");
    }
  }
  if (contiguous_only) {
    if (!t.is_contiguous())
      return describe
                 ? std::string("is no longer contiguous (strides " + dims_str(t.strides()) + ")")
                 : std::string("x");
  } else if (t.strides() != IntArrayRef(strides)) {
    return describe ? std::string("strides " + dims_str(strides) + " -> " + dims_str(t.strides()))
                    : std::string("x");
  }
  if (t.requires_grad() != requires_grad)
    return describe ? std::string(std::string("requires_grad ") +
                                  (requires_grad ? "true -> false" : "false -> true"))
                    : std::string("x");
  return "";
}

std::string TensorGuard::str() const {
  if (!defined) return "undefined";
  std::ostringstream os;
  os << dtype_name(dtype) << ' ' << device << " sizes " << sizes_str();
  if (contiguous_only) {
    os << " contiguous";
  } else {
    os << " strides " << dims_str(strides);
  }
  os << (requires_grad ? " requires_grad" : "");
  return os.str();
}

std::string TensorGuard::sizes_str() const {
  if (symbol.empty()) return dims_str(sizes);
  std::string s = "[";
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (d) s += ", ";
    s += symbol[d] >= 0 ? "s" + std::to_string(symbol[d]) : std::to_string(sizes[d]);
  }
  return s + "]";
}

Entry::AutocastState Entry::AutocastState::current() {
  AutocastState s;
  s.cpu = autocast_enabled(DeviceType::CPU);
  s.cuda = autocast_enabled(DeviceType::CUDA);
  if (s.cpu) s.cpu_dtype = autocast_dtype(DeviceType::CPU);
  if (s.cuda) s.cuda_dtype = autocast_dtype(DeviceType::CUDA);
  return s;
}

std::string Entry::AutocastState::str() const {
  if (!cpu && !cuda) return "off";
  std::string r;
  if (cpu) r += std::string("cpu ") + dtype_name(cpu_dtype);
  if (cuda) r += std::string(cpu ? ", " : "") + "cuda " + dtype_name(cuda_dtype);
  return r;
}

std::vector<std::string> Entry::describe_guards() const {
  std::vector<std::string> g;
  g.push_back(std::string("grad mode ") + (grad_mode ? "on" : "off"));
  g.push_back(std::string("default dtype ") + dtype_name(default_dtype) + ", autocast " +
              autocast.str());
  for (size_t i = 0; i < inputs.size(); ++i)
    g.push_back("input " + std::to_string(i) + ": " + inputs[i].str());
  std::string alias = "storage sharing between inputs: ";
  if (shared.empty()) alias += "none";
  for (size_t k = 0; k < shared.size(); ++k) {
    alias += (k ? ", " : "") + std::string("input ") + std::to_string(shared[k].first) +
             " with input " + std::to_string(shared[k].second);
  }
  g.push_back(alias);
  for (size_t i = 0; i < constants.size(); ++i)
    g.push_back("constant " + std::to_string(i) + ": the same tensor, " + constants[i].str());
  for (size_t i = 0; i < graph.symbols.size(); ++i) {
    std::string line = "s" + std::to_string(i);
    for (const auto& [in, d] : graph.symbols[i].dims)
      line += " = input " + std::to_string(in) + " dim " + std::to_string(d);
    line += ", >= 2 (captured at " + std::to_string(graph.symbols[i].hint) + ")";
    g.push_back(line);
  }
  const std::vector<int32_t> host = graph.host_nodes();
  for (size_t j = 0; j < host.size(); ++j) {
    const Node& n = graph.nodes[static_cast<size_t>(host[j])];
    std::string line = "host value " + std::to_string(j + 1) + ": " + n.op.name() +
                       " == " + host_value_str(n.host_returns[0]);
    for (size_t b = 0; b < graph.breaks.size(); ++b) {
      if (graph.break_at[b] == static_cast<size_t>(host[j]) && !graph.breaks[b].location.empty())
        line += " (at " + graph.breaks[b].location + ")";
    }
    g.push_back(line);
  }
  return g;
}

int Entry::check(const std::vector<Tensor>& in, std::string* why) const {
  std::string scratch;
  const bool describe = why != nullptr;
  if (!describe) why = &scratch;
  if (autograd::GradMode::is_enabled() != grad_mode) {
    *why = std::string("grad mode ") + (grad_mode ? "on -> off" : "off -> on");
    return 0;
  }
  if (loom::default_dtype() != default_dtype) {
    *why = std::string("default dtype ") + dtype_name(default_dtype) + " -> " +
           dtype_name(loom::default_dtype());
    return 1;
  }
  if (const Entry::AutocastState now = Entry::AutocastState::current(); !(now == autocast)) {
    *why = "autocast " + autocast.str() + " -> " + now.str();
    return 1;
  }
  if (in.size() != inputs.size()) {
    *why = "number of inputs " + std::to_string(inputs.size()) + " -> " + std::to_string(in.size());
    return 2;
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::string m = inputs[i].mismatch(in[i], describe);
    if (!m.empty()) {
      *why = "input " + std::to_string(i) + ": " + m;
      return static_cast<int>(2 + i);
    }
  }
  const int alias_guard = static_cast<int>(2 + inputs.size());
  for (const auto& [a, b] : shared) {
    if (storage_of(in[a]) != storage_of(in[b])) {
      *why =
          "inputs " + std::to_string(a) + " and " + std::to_string(b) + " no longer share storage";
      return alias_guard;
    }
  }
  for (size_t a = 0; a < in.size(); ++a) {
    for (size_t b = a + 1; b < in.size(); ++b) {
      if (storage_of(in[a]) == nullptr || storage_of(in[a]) != storage_of(in[b])) continue;
      bool expected = false;
      for (const auto& p : shared) expected = expected || (p.first == a && p.second == b);
      if (!expected) {
        *why = "inputs " + std::to_string(a) + " and " + std::to_string(b) + " now share storage";
        return alias_guard;
      }
    }
  }
  for (size_t i = 0; i < constants.size(); ++i) {
    std::string m = constants[i].mismatch(graph.constants[i], describe);
    if (!m.empty()) {
      *why = "constant " + std::to_string(i) + ": " + m;
      return static_cast<int>(alias_guard + 1 + static_cast<int>(i));
    }
  }
  const int symbol_guard = alias_guard + 1 + static_cast<int>(constants.size());
  for (size_t i = 0; i < graph.symbols.size(); ++i) {
    const auto& dims = graph.symbols[i].dims;
    const int64_t v = in[static_cast<size_t>(dims[0].first)].size(dims[0].second);
    bool ok = v >= 2;
    for (const auto& [input, d] : dims) ok = ok && in[static_cast<size_t>(input)].size(d) == v;
    if (!ok) {
      *why = "s" + std::to_string(i) + ":";
      for (const auto& [input, d] : dims) {
        *why += " input " + std::to_string(input) + " dim " + std::to_string(d) + " = " +
                std::to_string(in[static_cast<size_t>(input)].size(d));
      }
      *why += v < 2 ? " (sizes 0 and 1 are specialised)" : " (no longer equal)";
      return symbol_guard + static_cast<int>(i);
    }
  }
  return -1;
}

}  // namespace loom::compiler
