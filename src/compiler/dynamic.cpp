// Dynamic shapes: symbolic sizes in a captured graph (lesson 11).
//
// Note [How loom learns symbolic sizes]
//   A C++ function reads sizes as plain int64_t (x.size(1)), so loom cannot trace how a host int
//   was computed, as torch.compile does with SymInt. It observes instead: after capturing at the
//   real sizes (the hints), it runs the function twice more on inputs whose dynamic dimensions
//   take other values (the probes; same dtype, device and requires_grad, random data, the random
//   generator's state restored afterwards) and compares the three graphs. They must have the same
//   operators, arguments and values in the same order; each host int, and each dimension of each
//   value, that differs between them must fit a * (product of one or two symbols) + b at all
//   three points (two points fix a and b, the third checks them). Anything else (another
//   structure, a float that changed, an int of no such form) and the function's sizes stay
//   static, with the reason in a warning. Functions that write in place are not probed (a probe
//   would run their writes twice more), nor those whose capture broke.
//
//   Symbols come from input dimensions (automatic dynamic: those whose size changed between
//   calls; or CompileOptions::dynamic_dims, or all with dynamic=on). Dimensions of size 0 or 1
//   stay specialised (broadcasting depends on them); dimensions of equal size share one symbol
//   (duck sizing), guarded equal. The guards of a dynamic graph check each symbol's dimensions
//   (all equal, >= 2) instead of the sizes, and contiguity instead of the strides.
#include <cstring>
#include <sstream>

#include "compiler/graph.h"
#include "loom/ops.h"

namespace loom::compiler {

int64_t SymExpr::eval(const std::vector<int64_t>& symbols) const {
  if (syms.empty()) return b;
  int64_t p = a;
  for (int s : syms) p *= symbols[static_cast<size_t>(s)];
  return p + b;
}

std::string SymExpr::str() const {
  if (is_constant()) return std::to_string(b);
  std::string s = a == 1 ? "" : std::to_string(a) + "*";
  for (size_t i = 0; i < syms.size(); ++i) (s += i ? "*s" : "s") += std::to_string(syms[i]);
  if (b > 0) (s += " + ") += std::to_string(b);
  if (b < 0) (s += " - ") += std::to_string(-b);
  return s;
}

std::vector<int64_t> probe_values(const std::vector<Symbol>& symbols, int probe) {
  std::vector<int64_t> v;
  for (size_t s = 0; s < symbols.size(); ++s) {
    const int64_t h = symbols[s].hint;
    v.push_back(probe == 0 ? h + 1 + 2 * static_cast<int64_t>(s)
                           : h + 3 + 3 * static_cast<int64_t>(s));
  }
  return v;
}

std::vector<Tensor> probe_inputs(const std::vector<Symbol>& symbols,
                                 const std::vector<int64_t>& values,
                                 const std::vector<Tensor>& inputs) {
  std::vector<std::vector<int64_t>> sizes(inputs.size());
  for (size_t s = 0; s < symbols.size(); ++s) {
    for (const auto& [i, d] : symbols[s].dims) {
      std::vector<int64_t>& sz = sizes[static_cast<size_t>(i)];
      if (sz.empty()) sz = inputs[static_cast<size_t>(i)].sizes().vec();
      sz[static_cast<size_t>(d)] = values[s];
    }
  }
  std::vector<Tensor> in = inputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (sizes[i].empty()) continue;
    const Tensor& src = inputs[i];
    const TensorOptions o = TensorOptions(src.dtype()).with_device(src.device());
    in[i] = is_floating(src.dtype()) ? randn(sizes[i], o) : zeros(sizes[i], o);
    if (src.requires_grad()) in[i].requires_grad_(true);
  }
  return in;
}

std::vector<int64_t> Graph::bind_symbols(const std::vector<Tensor>& inputs) const {
  std::vector<int64_t> v(symbols.size());
  for (size_t i = 0; i < symbols.size(); ++i) {
    const auto [input, dim] = symbols[i].dims.front();
    v[i] = inputs[static_cast<size_t>(input)].size(dim);
  }
  return v;
}

namespace {

int64_t product(const std::vector<int>& syms, const std::vector<int64_t>& values) {
  int64_t p = 1;
  for (int s : syms) p *= values[static_cast<size_t>(s)];
  return p;
}

// The expression that gives v0, v1, v2 at the hints and the probes, or false.
bool fit(int64_t v0, int64_t v1, int64_t v2, const std::vector<int64_t>& h,
         const std::vector<int64_t>& p1, const std::vector<int64_t>& p2, SymExpr* out) {
  if (v0 == v1 && v1 == v2) {
    *out = SymExpr::constant(v0);
    return true;
  }
  std::vector<std::vector<int>> candidates;
  for (int i = 0; i < static_cast<int>(h.size()); ++i) candidates.push_back({i});
  for (int i = 0; i < static_cast<int>(h.size()); ++i)
    for (int j = i; j < static_cast<int>(h.size()); ++j) candidates.push_back({i, j});
  for (const std::vector<int>& c : candidates) {
    const int64_t q0 = product(c, h), q1 = product(c, p1), q2 = product(c, p2);
    if (q1 == q0 || (v1 - v0) % (q1 - q0) != 0) continue;
    const int64_t a = (v1 - v0) / (q1 - q0);
    const int64_t b = v0 - a * q0;
    if (a != 0 && a * q2 + b == v2) {
      *out = SymExpr{a, b, c};
      return true;
    }
  }
  return false;
}

// Int and int-list host constants are fitted; other constants must be equal.
bool fit_arg(Arg& a0, const Arg& a1, const Arg& a2, const std::vector<int64_t>& h,
             const std::vector<int64_t>& p1, const std::vector<int64_t>& p2, std::string* why) {
  const IValue &c0 = a0.constant, &c1 = a1.constant, &c2 = a2.constant;
  if (c0.is_int() && c1.is_int() && c2.is_int()) {
    SymExpr e;
    if (!fit(c0.to_int(), c1.to_int(), c2.to_int(), h, p1, p2, &e)) {
      *why = "the int " + std::to_string(c0.to_int()) + " follows no size";
      return false;
    }
    if (!e.is_constant()) a0.sym = {e};
    return true;
  }
  if (c0.is_int_list() && c1.is_int_list() && c2.is_int_list()) {
    const auto &l0 = c0.to_int_list(), &l1 = c1.to_int_list(), &l2 = c2.to_int_list();
    if (l0.size() != l1.size() || l0.size() != l2.size()) {
      *why = "an int list changed its length";
      return false;
    }
    std::vector<SymExpr> exprs(l0.size());
    bool any = false;
    for (size_t i = 0; i < l0.size(); ++i) {
      if (!fit(l0[i], l1[i], l2[i], h, p1, p2, &exprs[i])) {
        *why = "the size " + std::to_string(l0[i]) + " in " + c0.repr() + " follows no size";
        return false;
      }
      any = any || !exprs[i].is_constant();
    }
    if (any) a0.sym = std::move(exprs);
    return true;
  }
  if (c0.repr() != c1.repr() || c0.repr() != c2.repr()) {
    *why = "the host value " + c0.repr() + " changed with the sizes (" + c1.repr() + ")";
    return false;
  }
  return true;
}

}  // namespace

bool generalize(Graph& g0, const Graph& g1, const Graph& g2, const std::vector<Symbol>& symbols,
                const std::vector<int64_t>& probe1, const std::vector<int64_t>& probe2,
                std::string* why) {
  std::vector<int64_t> h;
  for (const Symbol& s : symbols) h.push_back(s.hint);
  if (g0.nodes.size() != g1.nodes.size() || g0.nodes.size() != g2.nodes.size() ||
      g0.values.size() != g1.values.size() || g0.values.size() != g2.values.size() ||
      g0.outputs != g1.outputs || g0.outputs != g2.outputs) {
    *why = "the function records another graph at other sizes (" + std::to_string(g0.nodes.size()) +
           " and " + std::to_string(g1.nodes.size()) + " operators)";
    return false;
  }
  for (size_t k = 0; k < g0.nodes.size(); ++k) {
    Node& n0 = g0.nodes[k];
    const Node &n1 = g1.nodes[k], &n2 = g2.nodes[k];
    const std::string where = " (operator " + std::to_string(k) + ", " + n0.op.name() + ")";
    if (n0.op.name() != n1.op.name() || n0.op.name() != n2.op.name() ||
        n0.args.size() != n1.args.size() || n0.returns != n1.returns || n0.returns != n2.returns) {
      *why = "the function records other operators at other sizes" + where;
      return false;
    }
    for (size_t i = 0; i < n0.args.size(); ++i) {
      Arg& a0 = n0.args[i];
      const Arg &a1 = n1.args[i], &a2 = n2.args[i];
      if (a0.kind != a1.kind || a0.kind != a2.kind || a0.value != a1.value ||
          a0.value != a2.value || a0.list != a1.list || a0.list != a2.list) {
        *why = "an argument takes another value at other sizes" + where;
        return false;
      }
      if (a0.kind == Arg::Kind::Constant && !fit_arg(a0, a1, a2, h, probe1, probe2, why)) {
        *why += where;
        return false;
      }
    }
  }
  // Constants: the same tensors (parameters), or small ones made from host values (a wrapped
  // scalar) with the same contents; a scale computed from a size is not a symbol of ours.
  if (g0.constants.size() != g1.constants.size() || g0.constants.size() != g2.constants.size()) {
    *why = "the function reaches other tensors at other sizes";
    return false;
  }
  for (size_t i = 0; i < g0.constants.size(); ++i) {
    for (const Graph* g : {&g1, &g2}) {
      const Tensor &c0 = g0.constants[i], &c = g->constants[i];
      if (c0.impl() == c.impl()) continue;
      const bool same =
          c0.defined() && c.defined() && c0.device() == kCPU && c.device() == kCPU &&
          c0.dtype() == c.dtype() && c0.sizes() == c.sizes() && c0.numel() <= 64 &&
          std::memcmp(c0.contiguous().data_ptr(), c.contiguous().data_ptr(), c0.nbytes()) == 0;
      if (!same) {
        *why = "the host value in constant " + std::to_string(i) +
               " (a tensor the function made from host numbers) changes with the sizes";
        return false;
      }
    }
  }
  for (size_t v = 0; v < g0.values.size(); ++v) {
    Value& x0 = g0.values[v];
    const Value &x1 = g1.values[v], &x2 = g2.values[v];
    if (x0.sizes.size() != x1.sizes.size() || x0.sizes.size() != x2.sizes.size() ||
        x0.dtype != x1.dtype || x0.kind != x1.kind) {
      *why = "a value changes its rank or dtype with the sizes";
      return false;
    }
    x0.sym_sizes.resize(x0.sizes.size());
    for (size_t d = 0; d < x0.sizes.size(); ++d) {
      if (!fit(x0.sizes[d], x1.sizes[d], x2.sizes[d], h, probe1, probe2, &x0.sym_sizes[d])) {
        *why = "a size of value %" + std::to_string(v) + " follows no symbol";
        return false;
      }
    }
    x0.contiguous = x0.contiguous && x1.contiguous && x2.contiguous;
  }
  g0.symbols = symbols;
  return true;
}

}  // namespace loom::compiler
