// Random operator programs for the compiler's differential tester (see loom/compiler/fuzz.h).
#include "loom/compiler/fuzz.h"

#include <random>
#include <sstream>

#include "compiler/joint.h"
#include "loom/autograd.h"
#include "loom/compile.h"
#include "loom/error.h"
#include "loom/ops.h"
#include "loom/warning.h"

namespace loom::compiler {
namespace {

using Tensors = std::vector<Tensor>;

enum class Op {
  Relu,
  Sigmoid,
  Tanh,
  Neg,
  Abs,
  ExpClamped,   // exp(clamp(a, -3, 3))
  SqrtShifted,  // sqrt(abs(a) + 1)
  Add,
  Sub,
  Mul,
  DivShifted,  // a / (abs(b) + 1)
  Maximum,
  MulScalar,
  AddScalar,
  Sum,
  Mean,
  Amax,
  Transpose,
  Unsqueeze,
  Flatten,
  Narrow,
  MulInPlace,  // a.mul_(c) on an intermediate that is not a view
  AddInPlace,  // a.add_(b), b broadcast to a
  HostBranch,  // sum(b) > 0 read on the host (a graph break), then a * 2 or -a
  kCount
};

const char* op_name(Op op) {
  static const char* names[] = {"relu",      "sigmoid", "tanh",   "neg",  "abs",   "exp_c",
                                "sqrt_c",    "add",     "sub",    "mul",  "div_c", "maximum",
                                "mul_s",     "add_s",   "sum",    "mean", "amax",  "transpose",
                                "unsqueeze", "flatten", "narrow", "mul_", "add_",  "branch"};
  return names[static_cast<int>(op)];
}

struct Step {
  Op op;
  int a = 0, b = -1;
  int64_t dim = 0;
  bool keepdim = false;
  double scalar = 1.0;
};

struct Program {
  std::vector<std::vector<int64_t>> shapes;  // inputs
  std::vector<bool> requires_grad;
  std::vector<Step> steps;
  std::vector<int> outputs;

  std::string str() const {
    std::ostringstream os;
    for (size_t i = 0; i < shapes.size(); ++i) {
      os << "%" << i << " = input " << IntArrayRef(shapes[i])
         << (requires_grad[i] ? " requires_grad" : "") << '\n';
    }
    for (size_t k = 0; k < steps.size(); ++k) {
      const Step& s = steps[k];
      os << "%" << shapes.size() + k << " = " << op_name(s.op) << "(%" << s.a;
      if (s.b >= 0) os << ", %" << s.b;
      os << ") dim " << s.dim << (s.keepdim ? " keepdim" : "") << " scalar " << s.scalar << '\n';
    }
    os << "return";
    for (int o : outputs) os << " %" << o;
    return os.str();
  }
};

bool broadcasts(IntArrayRef a, IntArrayRef b) {
  // b broadcast onto a's shape exactly (for add_) is checked by the caller; here: a and b have a
  // common broadcast shape.
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const int64_t x = a[a.size() - 1 - i], y = b[b.size() - 1 - i];
    if (x != y && x != 1 && y != 1) return false;
  }
  return true;
}

bool broadcasts_onto(IntArrayRef target, IntArrayRef b) {
  if (b.size() > target.size()) return false;
  for (size_t i = 0; i < b.size(); ++i) {
    const int64_t t = target[target.size() - 1 - i], y = b[b.size() - 1 - i];
    if (y != t && y != 1) return false;
  }
  return true;
}

// Values' shapes while generating, from running the program on Meta tensors.
Program make(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  Program p;
  const int rank = 1 + pick(3);
  std::vector<int64_t> base;
  for (int d = 0; d < rank; ++d) base.push_back(1 + pick(4));
  const int ninputs = 1 + pick(3);
  for (int i = 0; i < ninputs; ++i) {
    std::vector<int64_t> s = base;
    if (i > 0) {
      for (auto& d : s)
        if (pick(3) == 0) d = 1;
      if (s.size() > 1 && pick(3) == 0) s.erase(s.begin());
    }
    p.shapes.push_back(s);
    p.requires_grad.push_back(pick(2) == 0);
  }
  std::vector<std::vector<int64_t>> shape;  // of every value
  std::vector<bool> is_input_or_view;       // in-place targets must be neither
  for (const auto& s : p.shapes) {
    shape.push_back(s);
    is_input_or_view.push_back(true);
  }
  const int nsteps = 3 + pick(10);
  for (int k = 0; k < nsteps; ++k) {
    Step s;
    s.a = pick(static_cast<int>(shape.size()));
    const std::vector<int64_t>& sa = shape[static_cast<size_t>(s.a)];
    s.op = static_cast<Op>(pick(static_cast<int>(Op::kCount)));
    std::vector<int64_t> out = sa;
    bool view = false;
    const int64_t r = static_cast<int64_t>(sa.size());
    const bool needs_dims = s.op == Op::Sum || s.op == Op::Mean || s.op == Op::Amax ||
                            s.op == Op::Narrow || s.op == Op::Transpose;
    if (r == 0 && needs_dims) s.op = Op::Sigmoid;  // a 0-dim value has no dim to reduce or slice
    switch (s.op) {
      case Op::Add:
      case Op::Sub:
      case Op::Mul:
      case Op::DivShifted:
      case Op::Maximum:
      case Op::AddInPlace: {
        std::vector<int> partners;
        for (int v = 0; v < static_cast<int>(shape.size()); ++v) {
          const bool ok = s.op == Op::AddInPlace
                              ? broadcasts_onto(sa, shape[static_cast<size_t>(v)])
                              : broadcasts(sa, shape[static_cast<size_t>(v)]);
          if (ok) partners.push_back(v);
        }
        s.b = partners[static_cast<size_t>(pick(static_cast<int>(partners.size())))];
        if (s.op == Op::AddInPlace) {
          if (is_input_or_view[static_cast<size_t>(s.a)]) s.op = Op::Add;  // not in place then
        }
        if (s.op != Op::AddInPlace) {
          const auto& sb = shape[static_cast<size_t>(s.b)];
          out.assign(std::max(sa.size(), sb.size()), 1);
          for (size_t i = 0; i < out.size(); ++i) {
            const int64_t x = i < sa.size() ? sa[sa.size() - 1 - i] : 1;
            const int64_t y = i < sb.size() ? sb[sb.size() - 1 - i] : 1;
            out[out.size() - 1 - i] = std::max(x, y);
          }
        }
        break;
      }
      case Op::MulScalar:
      case Op::AddScalar:
        s.scalar = static_cast<double>(pick(7) - 3) * 0.5;
        break;
      case Op::HostBranch:
        s.b = pick(static_cast<int>(shape.size()));
        break;
      case Op::MulInPlace:
        s.scalar = static_cast<double>(pick(5) + 1) * 0.5;
        if (is_input_or_view[static_cast<size_t>(s.a)]) s.op = Op::MulScalar;
        break;
      case Op::Sum:
      case Op::Mean:
      case Op::Amax:
        s.dim = pick(static_cast<int>(r));
        s.keepdim = pick(2) == 0;
        if (s.keepdim) {
          out[static_cast<size_t>(s.dim)] = 1;
        } else {
          out.erase(out.begin() + s.dim);
        }
        break;
      case Op::Transpose:
        if (r < 2) {
          s.op = Op::Relu;
          break;
        }
        std::swap(out.front(), out.back());
        view = true;
        break;
      case Op::Unsqueeze:
        out.insert(out.begin(), 1);
        view = true;
        break;
      case Op::Flatten: {
        int64_t n = 1;
        for (int64_t d : sa) n *= d;
        out = {n};
        view = true;  // maybe a copy; treated as a view for in-place targets either way
        break;
      }
      case Op::Narrow:
        if (sa[0] < 2) {
          s.op = Op::Tanh;
          break;
        }
        s.dim = 1 + pick(static_cast<int>(sa[0] - 1));  // the new length of dim 0
        out[0] = s.dim;
        view = true;
        break;
      default:
        break;
    }
    if (s.op == Op::MulInPlace || s.op == Op::AddInPlace) {
      view = false;  // the step's value is a again
    }
    p.steps.push_back(s);
    shape.push_back(out);
    is_input_or_view.push_back(view);
  }
  // Outputs: the last value and sometimes another.
  p.outputs.push_back(static_cast<int>(shape.size()) - 1);
  if (pick(2) == 0) p.outputs.push_back(pick(static_cast<int>(shape.size())));
  return p;
}

Tensors run(const Program& p, const Tensors& in) {
  Tensors v(in.begin(), in.end());
  for (const Step& s : p.steps) {
    const Tensor& a = v[static_cast<size_t>(s.a)];
    const Tensor b = s.b >= 0 ? v[static_cast<size_t>(s.b)] : Tensor();
    Tensor out;
    switch (s.op) {
      case Op::Relu:
        out = relu(a);
        break;
      case Op::Sigmoid:
        out = sigmoid(a);
        break;
      case Op::Tanh:
        out = tanh(a);
        break;
      case Op::Neg:
        out = neg(a);
        break;
      case Op::Abs:
        out = abs(a);
        break;
      case Op::ExpClamped:
        out = exp(clamp(a, -3.0, 3.0));
        break;
      case Op::SqrtShifted:
        out = sqrt(add(abs(a), 1.0));
        break;
      case Op::Add:
        out = add(a, b);
        break;
      case Op::Sub:
        out = sub(a, b);
        break;
      case Op::Mul:
        out = mul(a, b);
        break;
      case Op::DivShifted:
        out = div(a, add(abs(b), 1.0));
        break;
      case Op::Maximum:
        out = maximum(a, b);
        break;
      case Op::MulScalar:
        out = mul(a, s.scalar);
        break;
      case Op::AddScalar:
        out = add(a, s.scalar);
        break;
      case Op::Sum:
        out = sum(a, IntArrayRef{s.dim}, s.keepdim);
        break;
      case Op::Mean:
        out = mean(a, IntArrayRef{s.dim}, s.keepdim);
        break;
      case Op::Amax:
        out = amax(a, {s.dim}, s.keepdim);
        break;
      case Op::Transpose:
        out = transpose(a, 0, a.dim() - 1);
        break;
      case Op::Unsqueeze:
        out = unsqueeze(a, 0);
        break;
      case Op::Flatten:
        out = reshape(a, {-1});
        break;
      case Op::Narrow:
        out = a.narrow(0, 0, s.dim);
        break;
      case Op::MulInPlace:
        a.mul_(s.scalar);
        out = a;
        break;
      case Op::AddInPlace:
        a.add_(b);
        out = a;
        break;
      case Op::HostBranch:
        out = gt(sum(b), 0.0).item<bool>() ? mul(a, 2.0) : neg(a);
        break;
      case Op::kCount:
        break;
    }
    v.push_back(out);
  }
  Tensors outs;
  for (int o : p.outputs) outs.push_back(v[static_cast<size_t>(o)]);
  return outs;
}

// `grow` is added to one dimension of every input (the innermost of input 0 that is at least 2,
// aligned from the right, in each input where it has that size), so that broadcasting still holds.
Tensors make_inputs(const Program& p, uint64_t seed, int64_t grow = 0) {
  Generator g(seed);
  Tensors in;
  const std::vector<int64_t>& base = p.shapes[0];
  int64_t from_right = -1;
  for (size_t k = 0; k < base.size() && grow != 0; ++k)
    if (base[base.size() - 1 - k] >= 2 && from_right < 0) from_right = static_cast<int64_t>(k);
  for (size_t i = 0; i < p.shapes.size(); ++i) {
    std::vector<int64_t> shape = p.shapes[i];
    const int64_t at = static_cast<int64_t>(shape.size()) - 1 - from_right;
    if (from_right >= 0 && at >= 0 &&
        shape[static_cast<size_t>(at)] == base[base.size() - 1 - static_cast<size_t>(from_right)])
      shape[static_cast<size_t>(at)] += grow;
    Tensor t = randn(shape, {}, g);
    if (p.requires_grad[i]) t.requires_grad_();
    in.push_back(t);
  }
  return in;
}

Tensors copies(const Tensors& in) {
  Tensors out;
  for (const Tensor& t : in) {
    Tensor c = t.detach().clone();
    if (t.requires_grad()) c.requires_grad_();
    out.push_back(c);
  }
  return out;
}

// "" when the two runs agree.
std::string compare(const Tensors& got, const Tensors& want, const char* what) {
  if (got.size() != want.size()) return std::string(what) + ": different counts";
  for (size_t i = 0; i < got.size(); ++i) {
    const Tensor& g = got[i];
    const Tensor& w = want[i];
    if (g.defined() != w.defined())
      return std::string(what) + " " + std::to_string(i) + ": defined";
    if (!g.defined()) continue;
    std::ostringstream os;
    if (g.sizes() != w.sizes() || g.dtype() != w.dtype()) {
      os << what << ' ' << i << ": " << g.sizes() << ' ' << dtype_name(g.dtype()) << " vs "
         << w.sizes() << ' ' << dtype_name(w.dtype());
      return os.str();
    }
    if (!allclose(g.detach(), w.detach(), 1e-5, 1e-6, /*equal_nan=*/true)) {
      os << what << ' ' << i << ": values differ\n got: " << g << "\n want: " << w;
      return os.str();
    }
  }
  return "";
}

// Sum of the outputs that require grad, backward, and the inputs' gradients.
Tensors gradients(const Tensors& outs, const Tensors& in) {
  Tensor total;
  for (const Tensor& o : outs) {
    if (!o.defined() || !o.requires_grad()) continue;
    const Tensor s = sum(o);
    total = total.defined() ? add(total, s) : s;
  }
  Tensors g;
  if (total.defined()) total.backward();
  for (const Tensor& t : in) g.push_back(t.requires_grad() ? t.grad() : Tensor());
  return g;
}

}  // namespace

std::string FuzzReport::str() const {
  std::ostringstream os;
  os << programs << " program(s), " << replays << " replayed call(s) (" << dynamic_replays
     << " of a graph with symbolic sizes), " << fused_kernels << " fused kernel(s), "
     << resumed_breaks << " graph break(s) resumed, " << eager_errors
     << " raising the same error eagerly and compiled, " << failures.size() << " failure(s)\n";
  os << "joint graphs: " << joint_graphs
     << ", min cuts checked against every choice: " << min_cuts_checked
     << ", dynamic graphs replayed as joint graphs: " << dynamic_joint_graphs << '\n'
     << "memory plan: " << buffers_taken << " kernel output(s) written into a dead buffer, "
     << buffers_refused << " refused at run time (the buffer was held elsewhere)\n";
  for (const FuzzFailure& f : failures)
    os << "seed " << f.seed << ": " << f.what << "\n" << f.program << "\n";
  return os.str();
}

std::string fuzz_program_text(uint64_t seed) {
  return make(seed).str();
}

namespace {

// Note [Joint graph] in compiler/joint.h: the program's joint graph, when it has one, is
// partitioned by the min cut; with few enough candidates, every choice of saved tensors is tried
// and the cut must cost no more than the best of them.
std::string check_partition(const Program& p, uint64_t seed, FuzzReport& report) {
  const Tensors in = make_inputs(p, seed * 7919);
  Graph g;
  try {
    Capture cap(in);
    const Tensors out = run(p, in);
    g = cap.finish(out);
  } catch (const Error&) {
    return "";  // raised eagerly too: the calls above compared that
  }
  std::string why;
  const auto j = build_joint(g, in, /*optimize_halves=*/false, PassOptions{}, &why);
  if (!j) return "";
  ++report.joint_graphs;
  const Partition part = min_cut_partition(j->joint, in.size(), j->num_results);
  int64_t best = 0;
  if (!smallest_saving(j->joint, in.size(), j->num_results, 14, &best)) return "";
  ++report.min_cuts_checked;
  if (part.saved_bytes == best) return "";
  return "the min cut saves " + std::to_string(part.saved_bytes) + " bytes, but " +
         std::to_string(best) + " bytes suffice (" + j->summary + ")";
}

}  // namespace

FuzzReport fuzz_compile(uint64_t first_seed, int64_t count) {
  FuzzReport report;
  WarningsToStderr quiet(false);
  for (int64_t k = 0; k < count; ++k) {
    const uint64_t seed = first_seed + static_cast<uint64_t>(k);
    const Program p = make(seed);
    ++report.programs;
    CompiledFunction f = compile([&p](const Tensors& in) { return run(p, in); },
                                 {.name = "fuzz " + std::to_string(seed)});
    std::string failure;
    // Odd seeds change a size between calls: call 1 recompiles with a symbol (automatic dynamic),
    // call 2 replays that graph at a third size.
    const bool dynamic = seed % 2 == 1;
    for (uint64_t call = 0; call < 3 && failure.empty(); ++call) {
      const int64_t grow = dynamic ? static_cast<int64_t>(call * (call + 1) / 2) : 0;  // 0, 1, 3
      const Tensors in = make_inputs(p, seed * 7919 + call, grow);
      const Tensors eager_in = copies(in), compiled_in = copies(in);
      Tensors want, got;
      std::string eager_error, compiled_error;
      try {
        want = run(p, eager_in);
        want.push_back(Tensor());  // separates outputs from gradients
        for (const Tensor& g : gradients(Tensors(want.begin(), want.end() - 1), eager_in))
          want.push_back(g);
      } catch (const Error& e) {
        eager_error = e.kind();
      }
      try {
        got = f(compiled_in);
        got.push_back(Tensor());
        for (const Tensor& g : gradients(Tensors(got.begin(), got.end() - 1), compiled_in))
          got.push_back(g);
      } catch (const Error& e) {
        compiled_error = e.kind() + std::string(": ") + e.what();
      }
      if (!eager_error.empty() || !compiled_error.empty()) {
        if (compiled_error.rfind(eager_error, 0) != 0 || eager_error.empty()) {
          failure = "call " + std::to_string(call) + ": eager raised '" + eager_error +
                    "', compiled '" + compiled_error + "'";
        } else if (call == 0) {
          ++report.eager_errors;
        }
        break;
      }
      failure = compare(got, want, "output/gradient");
      if (failure.empty()) failure = compare(compiled_in, eager_in, "input after the call");
      if (!failure.empty()) failure = "call " + std::to_string(call) + ": " + failure;
    }
    const CompileReport r = f.report();
    for (const GraphInfo& g : r.graphs) {
      report.replays += g.replays;
      report.fused_kernels += static_cast<int64_t>(g.kernels.size());
      report.buffers_taken += g.buffers_taken;
      report.buffers_refused += g.buffers_refused;
      bool symbolic = false;
      for (const GuardInfo& gd : g.guards) symbolic = symbolic || gd.text.rfind("s0 = ", 0) == 0;
      if (symbolic) report.dynamic_replays += g.replays;
      bool joint = false;
      for (const std::string& pass : g.passes) joint = joint || pass.rfind("joint graph: ", 0) == 0;
      if (symbolic && joint && g.replays > 0) ++report.dynamic_joint_graphs;
    }
    // Host reads are the only breaks a program has; after an in-place step they cannot resume.
    for (const GraphBreakInfo& b : r.breaks) {
      if (failure.empty() && b.op != "loom::_local_scalar_dense")
        failure = "a graph break: " + b.reason;
      report.resumed_breaks += b.resumed;
    }
    if (failure.empty()) failure = check_partition(p, seed, report);
    if (!failure.empty()) report.failures.push_back(FuzzFailure{seed, p.str(), failure});
  }
  return report;
}

}  // namespace loom::compiler
