// The capture layer: the Capture key's fallback, the graph IR's replay and printing (see
// compiler/graph.h and Note [How loom captures] in loom/compile.h).
#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "compiler/graph.h"
#include "loom/error.h"

namespace loom::compiler {
namespace {

thread_local Capture* tls_capture = nullptr;

std::string sym_str(const std::vector<SymExpr>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) (out += i ? ", " : "") += s[i].str();
  return out + "]";
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ']';
  return os.str();
}

// Runs below the Capture key: the operator runs (its own internal calls are not captured), then
// is recorded. With no capture on this thread (a tensor that carries the key outside one) it only
// runs.
void capture_fallback(const OperatorHandle& op, DispatchKeySet keys, Stack* stack) {
  Capture* c = Capture::current();
  const size_t nargs = op.schema().arguments.size();
  const DispatchKeySet below = keys & DispatchKeySet::below(DispatchKey::Capture);
  if (c == nullptr) {
    op.redispatch_boxed(below, *stack);
    return;
  }
  // Note [Decompositions]: the primitives it calls are recorded (Capture stays included).
  if (c->decomposing() && decompose(op, stack)) return;
  std::vector<IValue> args(stack->end() - static_cast<std::ptrdiff_t>(nargs), stack->end());
  {
    ExcludeDispatchKeyGuard no_capture(DispatchKey::Capture);
    op.redispatch_boxed(below, *stack);
  }
  const size_t nrets = op.schema().returns.size();
  c->record(op, args.data(), nargs, stack->data() + (stack->size() - nrets), nrets);
}

void on_capture_break(const char* reason) {
  Capture* c = Capture::current();
  if (c != nullptr && !c->recording_backward()) c->add_break("", reason);
}

// The file a function of libloom lives in, to tell loom's frames from the user's.
std::string loom_library() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&loom_library), &info) == 0 || info.dli_fname == nullptr)
    return "";
  return info.dli_fname;
}

// "function" for an address of `binary` (offset from its load address), through the symbol table
// (dladdr) or addr2line; "" when neither knows.
std::string symbol_at(const Dl_info& info, uintptr_t offset) {
  if (info.dli_sname != nullptr) {
    int status = 0;
    char* d = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
    std::string s = status == 0 && d ? d : info.dli_sname;
    std::free(d);
    return s;
  }
  char cmd[1024];
  std::snprintf(cmd, sizeof(cmd), "addr2line -f -C -e '%s' 0x%lx 2>/dev/null", info.dli_fname,
                static_cast<unsigned long>(offset));
  FILE* p = ::popen(cmd, "r");
  if (p == nullptr) return "";
  char line[1024] = {};
  std::string fn;
  if (std::fgets(line, sizeof(line), p) != nullptr) {
    fn = line;
    while (!fn.empty() && (fn.back() == '\n' || fn.back() == '\r')) fn.pop_back();
    if (fn == "??") fn.clear();
  }
  ::pclose(p);
  return fn;
}

}  // namespace

LOOM_LIBRARY_IMPL(_, Capture, m) {
  m.fallback(KernelFunction::from_boxed(&capture_fallback));
  ::loom::detail::set_capture_break_handler(&on_capture_break);
}

std::string user_call_site() {
  static const std::string loom = loom_library();
  void* frames[64];
  const int n = ::backtrace(frames, 64);
  for (int i = 1; i < n; ++i) {
    Dl_info info{};
    if (dladdr(frames[i], &info) == 0 || info.dli_fname == nullptr) continue;
    if (!loom.empty() && loom == info.dli_fname) continue;
    const std::string file = info.dli_fname;
    if (file.find("libstdc++") != std::string::npos || file.find("libc.so") != std::string::npos)
      continue;
    // The return address is just past the call: look up the call itself.
    const uintptr_t offset =
        reinterpret_cast<uintptr_t>(frames[i]) - reinterpret_cast<uintptr_t>(info.dli_fbase) - 1;
    const std::string fn = symbol_at(info, offset);
    const std::string base = file.substr(file.find_last_of('/') + 1);
    char where[512];
    std::snprintf(where, sizeof(where), "%s+0x%lx", base.c_str(),
                  static_cast<unsigned long>(offset));
    return fn.empty() ? std::string(where) : fn + " (" + where + ")";
  }
  return "";
}

// ---- Capture ----

Capture::Capture(const std::vector<Tensor>& inputs, bool decompose)
    : decompose_(decompose), previous_(tls_capture) {
  graph_.num_inputs = static_cast<int32_t>(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    Value v;
    v.kind = Value::Kind::Input;
    v.index = static_cast<int32_t>(i);
    new_value(v, inputs[i]);
  }
  tls_capture = this;
  ::loom::detail::tls_dispatch_keys.included =
      ::loom::detail::tls_dispatch_keys.included.add(DispatchKey::Capture);
}

Capture::~Capture() {
  tls_capture = previous_;
  if (previous_ == nullptr) {
    ::loom::detail::tls_dispatch_keys.included =
        ::loom::detail::tls_dispatch_keys.included.remove(DispatchKey::Capture);
  }
}

Capture* Capture::current() {
  return tls_capture;
}

ValueId Capture::new_value(Value v, const Tensor& t) {
  if (t.defined()) {
    v.dtype = t.dtype();
    v.device = t.device();
    v.sizes = t.sizes().vec();
    v.contiguous = t.is_contiguous();
    ids_[t.impl()] = static_cast<ValueId>(graph_.values.size());
  }
  graph_.values.push_back(std::move(v));
  tensors_.push_back(t);
  return static_cast<ValueId>(graph_.values.size() - 1);
}

ValueId Capture::value_of(const Tensor& t) {
  auto it = ids_.find(t.impl());
  if (it != ids_.end()) return it->second;
  // A backward formula reads what its node saved: autograd keeps a saved result as another
  // tensor over the same memory (without the history that would make a cycle). While the
  // backward is recorded nothing requires grad, so that tensor is the value it was saved from.
  if (recording_backward_ && t.defined()) {
    for (size_t v = tensors_.size(); v-- > 0;) {
      const Tensor& u = tensors_[v];
      if (u.defined() && u.storage().get() == t.storage().get() && u.dtype() == t.dtype() &&
          u.storage_offset() == t.storage_offset() && u.sizes() == t.sizes() &&
          u.strides() == t.strides()) {
        ids_[t.impl()] = static_cast<ValueId>(v);
        aliases_.push_back(t);
        return static_cast<ValueId>(v);
      }
    }
  }
  // A tensor from outside the function: a constant held by the graph.
  Value v;
  v.kind = Value::Kind::Constant;
  v.index = static_cast<int32_t>(graph_.constants.size());
  graph_.constants.push_back(t);
  return new_value(v, t);
}

void Capture::add_break(std::string op, std::string reason, bool resumed) {
  graph_.breaks.push_back(
      GraphBreakInfo{std::move(op), std::move(reason), user_call_site(), resumed});
  graph_.break_at.push_back(graph_.nodes.size());
}

void Capture::record(const OperatorHandle& op, const IValue* args, size_t nargs, const IValue* rets,
                     size_t nrets) {
  size_t host = 0;
  for (size_t r = 0; r < nrets; ++r) host += !rets[r].is_tensor() && !rets[r].is_tensor_list();
  if (host > 0 && host < nrets) {
    add_break(op.name(), "some of its results are host values, which leave the graph");
    return;
  }
  Node node;
  if (host > 0) {
    // A host node: the graph breaks here and resumes after it (Note [Graph breaks]).
    node.host_returns.assign(rets, rets + nrets);
    add_break(op.name(),
              "its result (" + op.schema().returns[0].type.str() +
                  ") is a host value, which leaves the graph",
              /*resumed=*/true);
  }
  node.op = op;
  node.args.reserve(nargs);
  for (size_t i = 0; i < nargs; ++i) {
    const IValue& v = args[i];
    Arg a;
    if (v.is_tensor()) {
      if (v.to_tensor().defined()) {
        a.kind = Arg::Kind::Tensor;
        a.value = value_of(v.to_tensor());
      } else {
        a.kind = Arg::Kind::NoneTensor;
      }
    } else if (v.is_tensor_list()) {
      a.kind = Arg::Kind::TensorList;
      for (const Tensor& t : v.to_tensor_list()) a.list.push_back(value_of(t));
    } else {
      a.constant = v;
    }
    node.args.push_back(std::move(a));
  }
  const auto node_index = static_cast<int32_t>(graph_.nodes.size());
  int32_t slot = 0;
  for (size_t r = 0; r < nrets && !node.is_host(); ++r) {
    std::vector<ValueId> ids;
    auto add = [&](const Tensor& t) {
      Value v;
      v.kind = Value::Kind::NodeOutput;
      v.index = node_index;
      v.slot = slot++;
      ids.push_back(new_value(v, t));
    };
    if (rets[r].is_tensor()) {
      add(rets[r].to_tensor());
    } else {
      for (const Tensor& t : rets[r].to_tensor_list()) add(t);
    }
    node.returns.push_back(std::move(ids));
  }
  graph_.nodes.push_back(std::move(node));
}

Graph Capture::finish(const std::vector<Tensor>& outputs) {
  for (const Tensor& t : outputs) {
    if (!t.defined()) {
      Value v;
      v.kind = Value::Kind::Constant;
      v.index = static_cast<int32_t>(graph_.constants.size());
      graph_.constants.push_back(Tensor());
      graph_.outputs.push_back(new_value(v, t));
      continue;
    }
    graph_.outputs.push_back(value_of(t));
  }
  // Autograd recorded every node's outputs above the Capture key by now.
  for (size_t i = 0; i < tensors_.size(); ++i)
    graph_.values[i].requires_grad = tensors_[i].defined() && tensors_[i].requires_grad();
  graph_.steps.clear();
  for (size_t k = 0; k < graph_.nodes.size(); ++k)
    graph_.steps.push_back(Step{static_cast<int32_t>(k), -1});
  graph_.compute_releases();
  return std::move(graph_);
}

// ---- Graph ----

// Runs one node through the dispatcher, reading its arguments from env and writing its returns.
void run_node(const Node& n, std::vector<Tensor>& env, Stack& stack,
              const std::vector<int64_t>& symbols) {
  stack.clear();
  for (const Arg& a : n.args) {
    switch (a.kind) {
      case Arg::Kind::Constant:
        if (a.sym.empty()) {
          stack.push_back(a.constant);
        } else if (a.constant.is_int()) {
          stack.emplace_back(a.sym[0].eval(symbols));
        } else {
          std::vector<int64_t> l(a.sym.size());
          for (size_t i = 0; i < l.size(); ++i) l[i] = a.sym[i].eval(symbols);
          stack.emplace_back(std::move(l));
        }
        break;
      case Arg::Kind::Tensor:
        stack.emplace_back(env[static_cast<size_t>(a.value)]);
        break;
      case Arg::Kind::NoneTensor:
        stack.emplace_back(Tensor());
        break;
      case Arg::Kind::TensorList: {
        std::vector<Tensor> l;
        l.reserve(a.list.size());
        for (ValueId id : a.list) l.push_back(env[static_cast<size_t>(id)]);
        stack.emplace_back(std::move(l));
        break;
      }
    }
  }
  n.op.call_boxed(stack);
  for (size_t r = 0; r < n.returns.size(); ++r) {
    const IValue& ret = stack[r];
    if (ret.is_tensor()) {
      env[static_cast<size_t>(n.returns[r][0])] = ret.to_tensor();
    } else {
      const std::vector<Tensor>& l = ret.to_tensor_list();
      LOOM_INTERNAL_ASSERT(l.size() == n.returns[r].size(), "[compile] ", n.op.name(), " returned ",
                           l.size(), " tensors on replay, ", n.returns[r].size(), " when captured");
      for (size_t k = 0; k < l.size(); ++k) env[static_cast<size_t>(n.returns[r][k])] = l[k];
    }
  }
}

std::vector<ValueId> Graph::step_reads(const Step& s) const {
  if (s.kernel >= 0) {
    const FusedKernel& f = kernels[static_cast<size_t>(s.kernel)];
    std::vector<ValueId> r = f.inputs;
    r.insert(r.end(), f.scalars.begin(), f.scalars.end());
    return r;
  }
  std::vector<ValueId> r;
  for (const Arg& a : nodes[static_cast<size_t>(s.node)].args) {
    if (a.kind == Arg::Kind::Tensor) r.push_back(a.value);
    r.insert(r.end(), a.list.begin(), a.list.end());
  }
  return r;
}

std::vector<ValueId> Graph::step_writes(const Step& s) const {
  if (s.kernel >= 0) return kernels[static_cast<size_t>(s.kernel)].outputs;
  std::vector<ValueId> w;
  for (const auto& r : nodes[static_cast<size_t>(s.node)].returns)
    w.insert(w.end(), r.begin(), r.end());
  return w;
}

// Last uses: a value read by no later step and not returned is released after the step that read
// (or made) it last.
void Graph::compute_releases() {
  std::vector<size_t> last(values.size(), SIZE_MAX);
  for (size_t k = 0; k < steps.size(); ++k) {
    for (ValueId id : step_writes(steps[k])) last[static_cast<size_t>(id)] = k;
    for (ValueId id : step_reads(steps[k])) last[static_cast<size_t>(id)] = k;
  }
  for (ValueId id : outputs) last[static_cast<size_t>(id)] = SIZE_MAX;
  release_after.assign(steps.size(), {});
  for (size_t v = 0; v < last.size(); ++v) {
    if (last[v] != SIZE_MAX) release_after[last[v]].push_back(static_cast<ValueId>(v));
  }
}

bool same_host_value(const IValue& a, const IValue& b) {
  auto bits = [](double d) {
    uint64_t u = 0;
    std::memcpy(&u, &d, sizeof(u));
    return u;
  };
  if (a.is_scalar() && b.is_scalar()) {
    const Scalar x = a.to_scalar(), y = b.to_scalar();
    if (x.is_floating() && y.is_floating()) return bits(x.to_double()) == bits(y.to_double());
    return x.is_floating() == y.is_floating() && x == y;
  }
  if (a.is_double() && b.is_double()) return bits(a.to_double()) == bits(b.to_double());
  if (a.is_int() && b.is_int()) return a.to_int() == b.to_int();
  if (a.is_bool() && b.is_bool()) return a.to_bool() == b.to_bool();
  return a.repr() == b.repr();
}

std::string host_value_str(const IValue& v) {
  double d = 0;
  if (v.is_double()) {
    d = v.to_double();
  } else if (v.is_scalar() && v.to_scalar().is_floating()) {
    d = v.to_scalar().to_double();
  } else {
    return v.repr();
  }
  char b[40];
  std::snprintf(b, sizeof(b), "%.17g", d);
  return b;
}

std::vector<int32_t> Graph::host_nodes() const {
  std::vector<int32_t> h;
  for (size_t k = 0; k < nodes.size(); ++k)
    if (nodes[k].is_host()) h.push_back(static_cast<int32_t>(k));
  return h;
}

namespace {

// Note [Memory planning]: the buffer of `t` if nothing but the replay holds it (no other handle of
// its tensor, no view of its storage), else null.
Storage sole_storage(const Tensor& t) {
  if (!t.defined() || t.use_count() != 1 || t.storage()->use_count() != 1) return Storage();
  return t.storage();
}

// A contiguous tensor of `like`'s sizes and dtype over `s` (which is large enough, on its device).
Tensor over(const Storage& s, const Value& like, IntArrayRef sizes) {
  std::vector<int64_t> strides(sizes.size());
  int64_t st = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    strides[d] = st;
    st *= std::max<int64_t>(sizes[d], 1);
  }
  return make_tensor(s, like.dtype, sizes, strides);
}

}  // namespace

bool Graph::run(const std::vector<Tensor>& inputs, std::vector<Tensor>* outputs_out,
                HostMismatch* mismatch) const {
  std::vector<Tensor> env(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const Value& v = values[i];
    if (v.kind == Value::Kind::Input) env[i] = inputs[static_cast<size_t>(v.index)];
    if (v.kind == Value::Kind::Constant) env[i] = constants[static_cast<size_t>(v.index)];
  }
  Stack stack;
  std::vector<Tensor> kin, kscalars, preset;
  const std::vector<int64_t> sym = symbols.empty() ? std::vector<int64_t>{} : bind_symbols(inputs);
  // Note [Memory planning]: the buffers of dead donors, until a kernel output takes them.
  const bool planned = !memory.take.empty();
  std::vector<std::pair<ValueId, Storage>> stash;
  auto take_stashed = [&](ValueId id) {
    for (auto& [v, s] : stash) {
      if (v != id) continue;
      v = -1;
      return std::move(s);
    }
    return Storage();
  };
  int64_t taken = 0, refused = 0;
  for (size_t k = 0; k < steps.size(); ++k) {
    const Step& step = steps[k];
    if (step.kernel >= 0) {
      const FusedKernel& f = kernels[static_cast<size_t>(step.kernel)];
      kin.clear();
      kscalars.clear();
      for (ValueId id : f.inputs) kin.push_back(env[static_cast<size_t>(id)]);
      for (ValueId id : f.scalars) kscalars.push_back(env[static_cast<size_t>(id)]);
      const std::vector<Tensor>* pre = nullptr;
      if (planned && !memory.take[k].empty()) {
        const std::vector<int64_t>& osizes = f.out_sizes;
        std::vector<int64_t> now;
        if (!sym.empty() && !f.out_sym_sizes.empty())
          for (const SymExpr& e : f.out_sym_sizes) now.push_back(e.eval(sym));
        const std::vector<int64_t>& want = now.empty() ? osizes : now;
        // In place: the input's handle in env and in kin are the replay's; the storage must be
        // the input's alone, and the kernel must not save its inputs for a backward.
        for (ValueId id : memory.in_place[k]) {
          Tensor& t = env[static_cast<size_t>(id)];
          Storage s;
          if (t.defined() && t.use_count() == 2 && t.storage()->use_count() == 1 &&
              t.is_contiguous() && t.storage_offset() == 0 && t.sizes() == IntArrayRef(want) &&
              !f.records_backward(kin))
            s = t.storage();
          stash.emplace_back(id, std::move(s));
        }
        preset.assign(f.outputs.size(), Tensor());
        for (size_t o = 0; o < f.outputs.size(); ++o) {
          const ValueId donor = memory.take[k][o];
          if (donor < 0) continue;
          const Value& out = values[static_cast<size_t>(f.outputs[o])];
          Storage s = take_stashed(donor);
          int64_t need = static_cast<int64_t>(element_size(out.dtype));
          for (int64_t d : want) need *= d;
          if (s && s.get()->device() == f.device && static_cast<int64_t>(s->nbytes()) >= need) {
            preset[o] = over(s, out, want);
            ++taken;
          } else {
            ++refused;
          }
        }
        pre = &preset;
      }
      std::vector<Tensor> out = f.run(kin, kscalars, sym, pre);
      for (size_t i = 0; i < out.size(); ++i)
        env[static_cast<size_t>(f.outputs[i])] = std::move(out[i]);
      kin.clear();
      kscalars.clear();
      preset.clear();
    } else {
      const Node& n = nodes[static_cast<size_t>(step.node)];
      run_node(n, env, stack, sym);
      if (n.is_host()) {
        for (size_t r = 0; r < n.host_returns.size(); ++r) {
          if (same_host_value(stack[r], n.host_returns[r])) continue;
          int index = 0;
          for (int32_t h : host_nodes()) index += h < step.node;
          mismatch->host_node = index;
          mismatch->why = n.op.name() + " returned " + host_value_str(stack[r]) + ", captured " +
                          host_value_str(n.host_returns[r]);
          return false;
        }
      }
      stack.clear();
    }
    for (ValueId id : release_after[k]) {
      Tensor& t = env[static_cast<size_t>(id)];
      if (planned && memory.donor[static_cast<size_t>(id)]) {
        bool in_place_here = false;
        for (ValueId d : memory.in_place[k]) in_place_here = in_place_here || d == id;
        if (!in_place_here) stash.emplace_back(id, sole_storage(t));
      }
      t = Tensor();
    }
  }
  if (planned) {
    memory.counters->taken.fetch_add(taken, std::memory_order_relaxed);
    memory.counters->refused.fetch_add(refused, std::memory_order_relaxed);
  }
  outputs_out->clear();
  outputs_out->reserve(outputs.size());
  for (ValueId id : outputs) outputs_out->push_back(env[static_cast<size_t>(id)]);
  return true;
}

std::string Graph::str() const {
  std::ostringstream os;
  auto name = [&](ValueId id) {
    const Value& v = values[static_cast<size_t>(id)];
    // Appended rather than "literal" + string: GCC 12 reports a false -Wrestrict on the latter.
    std::string s = v.kind == Value::Kind::Input      ? "%in"
                    : v.kind == Value::Kind::Constant ? "%const"
                                                      : "%";
    return s += std::to_string(v.kind == Value::Kind::NodeOutput ? id : v.index);
  };
  for (int32_t i = 0; i < num_inputs; ++i) {
    const Value& v = values[static_cast<size_t>(i)];
    os << "%in" << i << ": " << dtype_name(v.dtype) << ' ' << v.device << ' '
       << (v.sym_sizes.empty() ? shape_str(v.sizes) : sym_str(v.sym_sizes)) << '\n';
  }
  size_t next_break = 0;
  auto print_value_list = [&](const std::vector<ValueId>& ids) {
    for (size_t i = 0; i < ids.size(); ++i) os << (i ? ", " : "") << name(ids[i]);
  };
  for (const Step& step : steps) {
    if (step.kernel >= 0) {
      const FusedKernel& f = kernels[static_cast<size_t>(step.kernel)];
      print_value_list(f.outputs);
      os << " = " << f.name << '(';
      std::vector<ValueId> in = f.inputs;
      in.insert(in.end(), f.scalars.begin(), f.scalars.end());
      print_value_list(in);
      os << ")  # " << dtype_name(f.dtype) << ' '
         << (f.out_sym_sizes.empty() ? shape_str(f.out_sizes) : sym_str(f.out_sym_sizes));
      if (f.reduce != 0) {
        os << " -> "
           << (f.reduced_sym_sizes.empty() ? shape_str(f.reduced_sizes)
                                           : sym_str(f.reduced_sym_sizes));
      }
      os << ": " << f.ops << '\n';
      continue;
    }
    const size_t k = static_cast<size_t>(step.node);
    while (next_break < breaks.size() && break_at[next_break] <= k) {
      const GraphBreakInfo& b = breaks[next_break++];
      os << "-- graph break: " << (b.op.empty() ? "" : b.op + ": ") << b.reason
         << (b.location.empty() ? "" : " at " + b.location) << '\n';
    }
    const Node& n = nodes[k];
    std::vector<std::string> outs;
    for (const auto& r : n.returns)
      for (ValueId id : r) outs.push_back(name(id));
    for (size_t i = 0; i < outs.size(); ++i) os << (i ? ", " : "") << outs[i];
    os << (outs.empty() ? "" : " = ") << n.op.name() << '(';
    for (size_t i = 0; i < n.args.size(); ++i) {
      const Arg& a = n.args[i];
      os << (i ? ", " : "");
      switch (a.kind) {
        case Arg::Kind::Constant:
          if (a.sym.empty()) {
            os << a.constant.repr();
          } else if (a.constant.is_int()) {
            os << a.sym[0].str();
          } else {
            os << sym_str(a.sym);
          }
          break;
        case Arg::Kind::Tensor:
          os << name(a.value);
          break;
        case Arg::Kind::NoneTensor:
          os << "None";
          break;
        case Arg::Kind::TensorList:
          os << '[';
          print_value_list(a.list);
          os << ']';
          break;
      }
    }
    os << ')';
    if (n.is_host()) {
      os << "  # host value " << host_value_str(n.host_returns[0]) << ", guarded";
    } else if (!n.returns.empty() && n.returns[0].size() == 1) {
      const Value& v = values[static_cast<size_t>(n.returns[0][0])];
      os << "  # " << dtype_name(v.dtype) << ' '
         << (v.sym_sizes.empty() ? shape_str(v.sizes) : sym_str(v.sym_sizes));
    }
    os << '\n';
  }
  for (; next_break < breaks.size(); ++next_break) {
    const GraphBreakInfo& b = breaks[next_break];
    os << "-- graph break: " << (b.op.empty() ? "" : b.op + ": ") << b.reason
       << (b.location.empty() ? "" : " at " + b.location) << '\n';
  }
  os << "return ";
  for (size_t i = 0; i < outputs.size(); ++i) os << (i ? ", " : "") << name(outputs[i]);
  os << '\n';
  return os.str();
}

std::map<std::string, int64_t> Graph::op_counts() const {
  std::map<std::string, int64_t> m;
  for (const Step& s : steps) {
    if (s.kernel >= 0) {
      ++m["fused"];
    } else {
      ++m[nodes[static_cast<size_t>(s.node)].op.name()];
    }
  }
  return m;
}

}  // namespace loom::compiler
