#include "loom/dispatch.h"

#include <atomic>

#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>

#include "loom/error.h"
#include "operator_entry.h"

namespace loom {

namespace detail {

thread_local LocalDispatchKeySet tls_dispatch_keys __attribute__((tls_model("initial-exec")));

const KernelFunction& entry_table(const OperatorEntry& e, DispatchKey k) {
  return e.table[static_cast<int>(k)];
}

DispatchKeySet entry_non_fallthrough(const OperatorEntry& e) {
  return e.non_fallthrough;
}

namespace {
struct StackPool {
  std::vector<std::unique_ptr<Stack>> stacks;  // stacks[i] serves nesting depth i
  size_t depth = 0;
};
// A plain pointer, initial-exec: a thread_local with a constructor or destructor is reached through
// a guard variable that costs a __tls_get_addr call on every access.
thread_local StackPool* tls_stack_pool __attribute__((tls_model("initial-exec"))) = nullptr;
// A stack that grew past this (a long Tensor[] argument) is freed rather than kept.
constexpr size_t kKeptStackCapacity = 64;

StackPool& make_stack_pool() {
  // Owns the thread's pool and frees it at thread exit (the cold path is the only one that sees
  // it).
  struct Owner {
    std::unique_ptr<StackPool> pool;
    ~Owner() { tls_stack_pool = nullptr; }
  };
  thread_local Owner owner;
  owner.pool = std::make_unique<StackPool>();
  tls_stack_pool = owner.pool.get();
  return *tls_stack_pool;
}
}  // namespace

BorrowedStack::BorrowedStack() {
  StackPool& pool = tls_stack_pool ? *tls_stack_pool : make_stack_pool();
  if (pool.depth == pool.stacks.size()) pool.stacks.push_back(std::make_unique<Stack>());
  stack_ = pool.stacks[pool.depth++].get();
}

BorrowedStack::~BorrowedStack() {
  // Emptied before it is given back, so a pooled stack never keeps a tensor alive.
  if (stack_->capacity() > kKeptStackCapacity) {
    Stack().swap(*stack_);
  } else {
    stack_->clear();
  }
  --tls_stack_pool->depth;
}

std::string CppSignature::str() const {
  std::string s = "(";
  for (size_t i = 0; i < args.size(); ++i) s += (i ? ", " : "") + args[i];
  return s + ") -> " + ret;
}

void report_missing_kernel(const OperatorEntry& e, DispatchKeySet keys) {
  DispatchKey k = keys.highest();
  std::string have;
  OperatorHandle h(const_cast<OperatorEntry*>(&e));
  for (DispatchKey kk : h.kernel_keys())
    have += std::string(have.empty() ? "" : ", ") + dispatch_key_name(kk);
  if (!e.has_schema()) {
    LOOM_THROW(NotImplementedError, "[dispatch] operator ", e.name(),
               " has kernels registered but no schema (missing def?)");
  }
  LOOM_THROW(NotImplementedError, "[", e.name(), "] no kernel for dispatch key ",
             dispatch_key_name(k), " (the call's keys were ", keys.str(),
             "); keys with kernels: ", have.empty() ? "none" : have);
}

void report_undefined_argument(const OperatorEntry& e, int position, int64_t element) {
  // The operator without its overload ("loom::add", not "loom::add.Scalar"): what the user called.
  std::string op = e.name(), arg = "#" + std::to_string(position);
  if (e.has_schema()) {
    const FunctionSchema& s = e.schema();
    op = s.ns + "::" + s.name;
    if (position >= 0 && static_cast<size_t>(position) < s.arguments.size()) {
      arg = s.arguments[static_cast<size_t>(position)].name;
    }
  }
  LOOM_THROW(ValueError, "[", op, "] argument '", arg, "'",
             element >= 0 ? " element " + std::to_string(element) : std::string(),
             " is an undefined tensor (a default-constructed Tensor holds no data)");
}

}  // namespace detail

const FunctionSchema& OperatorEntry::schema() const {
  LOOM_CHECK(schema_.has_value(), "[dispatch] operator ", name_, " has no schema (missing def?)");
  return *schema_;
}

// ---- KernelFunction ----

KernelFunction KernelFunction::from_boxed(BoxedKernelFn fn) {
  KernelFunction k;
  k.kind_ = Kind::Boxed;
  k.boxed_ = fn;
  k.boxed_wrapper_ = [](const KernelFunction& self, const OperatorHandle& op, DispatchKeySet keys,
                        Stack* stack) { self.boxed_(op, keys, stack); };
  return k;
}

KernelFunction KernelFunction::fallthrough() {
  KernelFunction k;
  k.kind_ = Kind::Fallthrough;
  k.boxed_wrapper_ = [](const KernelFunction&, const OperatorHandle& op, DispatchKeySet, Stack*) {
    LOOM_THROW(InternalError, "[dispatch] a fallthrough kernel of ", op.name(), " was called");
  };
  return k;
}

// ---- OperatorHandle ----

const FunctionSchema& OperatorHandle::schema() const {
  return entry_->schema();
}
const std::string& OperatorHandle::name() const {
  return entry_->name();
}

bool OperatorHandle::has_kernel(DispatchKey k) const {
  const KernelFunction& f = entry_->table[static_cast<int>(k)];
  return f.is_valid() && !f.is_fallthrough();
}

std::vector<DispatchKey> OperatorHandle::kernel_keys() const {
  std::vector<DispatchKey> out;
  for (int i = kNumDispatchKeys - 1; i > 0; --i) {
    if (has_kernel(static_cast<DispatchKey>(i))) out.push_back(static_cast<DispatchKey>(i));
  }
  return out;
}

std::string OperatorHandle::kernel_source(DispatchKey k) const {
  const int i = static_cast<int>(k);
  const KernelFunction& f = entry_->table[i];
  if (!f.is_valid()) return "";
  if (f.is_fallthrough()) return "fallthrough";
  std::string how;
  if (entry_->registered[i]) {
    how = "direct";
  } else if (DispatchKeySet::backends().has(k) &&
             entry_->registered[OperatorEntry::kCompositeExplicitSlot]) {
    how = "CompositeExplicit";
  } else if (entry_->registered[OperatorEntry::kCompositeImplicitSlot]) {
    how = "CompositeImplicit";
  } else {
    how = "backend fallback";
  }
  return how + (f.debug.empty() ? "" : " (" + f.debug + ")");
}

DispatchKey OperatorHandle::dispatch_key_for(DispatchKeySet keys) const {
  return (detail::finalize_keys(keys) & entry_->non_fallthrough).highest();
}

namespace {
DispatchKeySet keys_of_stack(const OperatorEntry& e, const FunctionSchema& schema,
                             const Stack& stack) {
  DispatchKeySet ks;
  size_t n = schema.arguments.size();
  LOOM_CHECK(stack.size() >= n, "[", schema.full_name(), "] boxed call needs ", n,
             " arguments on the stack but it holds ", stack.size());
  const size_t base = stack.size() - n;
  for (size_t i = base; i < stack.size(); ++i) {
    const IValue& v = stack[i];
    const int position = static_cast<int>(i - base);
    if (v.is_tensor()) {
      const Tensor& t = v.to_tensor();
      if (t.defined()) {
        ks = ks | t.key_set();
      } else if (!schema.arguments[i - base].type.optional) {  // Tensor? may be undefined: none
        detail::report_undefined_argument(e, position, -1);
      }
    } else if (v.is_tensor_list()) {
      const std::vector<Tensor>& l = v.to_tensor_list();
      for (size_t k = 0; k < l.size(); ++k) {
        if (!l[k].defined())
          detail::report_undefined_argument(e, position, static_cast<int64_t>(k));
        ks = ks | l[k].key_set();
      }
    } else if (v.is_device()) {
      ks = ks.add(backend_key(v.to_device().type()));
    }
  }
  return ks;
}
}  // namespace

void OperatorHandle::call_boxed(Stack& stack) const {
  DispatchKeySet ks = detail::finalize_keys(keys_of_stack(*entry_, schema(), stack));
  if (LOOM_UNLIKELY(record_function_active())) {
    const size_t n = schema().arguments.size();
    RecordFunctionGuard guard(name(), schema(), [&](OpEvent& ev) {
      for (size_t i = stack.size() - n; i < stack.size(); ++i) {
        const IValue& v = stack[i];
        if (v.is_tensor()) {
          detail::record_input(ev, v.to_tensor());
        } else if (v.is_tensor_list()) {
          detail::record_input(ev, TensorList(v.to_tensor_list()));
        } else if (!v.is_none() && ev.record_scalars) {
          ev.scalar_args.push_back(v.repr());
        }
      }
    });
    redispatch_boxed(ks, stack);
    return;
  }
  redispatch_boxed(ks, stack);
}

void OperatorHandle::redispatch_boxed(DispatchKeySet keys, Stack& stack) const {
  DispatchKeySet live = keys & entry_->non_fallthrough;
  const KernelFunction& k = entry_->table[static_cast<int>(live.highest())];
  if (LOOM_UNLIKELY(!k.is_valid())) detail::report_missing_kernel(*entry_, live);
  k.call_boxed(*this, keys, &stack);
}

// ---- guards ----

IncludeDispatchKeyGuard::IncludeDispatchKeyGuard(DispatchKey k)
    : saved_(detail::tls_dispatch_keys.included) {
  detail::tls_dispatch_keys.included = saved_.add(k);
}
IncludeDispatchKeyGuard::~IncludeDispatchKeyGuard() {
  detail::tls_dispatch_keys.included = saved_;
}

ExcludeDispatchKeyGuard::ExcludeDispatchKeyGuard(DispatchKeySet keys)
    : saved_(detail::tls_dispatch_keys.excluded) {
  detail::tls_dispatch_keys.excluded = saved_ | keys;
}
ExcludeDispatchKeyGuard::~ExcludeDispatchKeyGuard() {
  detail::tls_dispatch_keys.excluded = saved_;
}

// ---- Dispatcher ----

struct Dispatcher::Impl {
  std::mutex mu;
  std::map<std::string, std::unique_ptr<OperatorEntry>> ops;  // GUARDED_BY(mu); never erased
  std::array<std::optional<KernelFunction>, kNumDispatchKeys> fallbacks;  // GUARDED_BY(mu)

  OperatorEntry& entry(const std::string& name) {
    auto& p = ops[name];
    if (!p) p = std::make_unique<OperatorEntry>(name);
    return *p;
  }

  // Recomputes the runtime table of one operator. Note [Kernel precedence]: a kernel registered for
  // the key itself wins; then CompositeExplicit (backends only); then CompositeImplicit (backends,
  // Autograd and Capture); then the key's backend fallback.
  void rebuild(OperatorEntry& e) {
    DispatchKeySet non_ft = DispatchKeySet::from_raw(~uint64_t{0});
    for (int i = 0; i < kNumDispatchKeys; ++i) {
      auto k = static_cast<DispatchKey>(i);
      const std::optional<KernelFunction>* pick = nullptr;
      if (e.registered[i]) {
        pick = &e.registered[i];
      } else if (DispatchKeySet::backends().has(k) &&
                 e.registered[OperatorEntry::kCompositeExplicitSlot]) {
        pick = &e.registered[OperatorEntry::kCompositeExplicitSlot];
      } else if ((DispatchKeySet::backends().has(k) || k == DispatchKey::Autograd ||
                  k == DispatchKey::Capture) &&
                 e.registered[OperatorEntry::kCompositeImplicitSlot]) {
        pick = &e.registered[OperatorEntry::kCompositeImplicitSlot];
      } else if (fallbacks[i]) {
        pick = &fallbacks[i];
      }
      e.table[i] = pick ? **pick : KernelFunction();
      if (e.table[i].is_fallthrough()) non_ft = non_ft.remove(k);
    }
    e.non_fallthrough = non_ft;
  }
};

Dispatcher::Dispatcher() : impl_(std::make_unique<Impl>()) {}

Dispatcher& Dispatcher::singleton() {
  static Dispatcher* d = new Dispatcher();  // leaked: used from static initialisers and destructors
  return *d;
}

std::optional<OperatorHandle> Dispatcher::find(const std::string& name) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->ops.find(name);
  if (it == impl_->ops.end() || !it->second->has_schema()) return std::nullopt;
  return OperatorHandle(it->second.get());
}

OperatorHandle Dispatcher::find_or_throw(const std::string& name) {
  if (auto h = find(name)) return *h;
  std::string similar;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    std::string base = name.substr(0, name.find('.'));
    for (auto& [n, e] : impl_->ops) {
      if (e->has_schema() && n.rfind(base, 0) == 0) similar += (similar.empty() ? "" : ", ") + n;
    }
  }
  LOOM_THROW(ValueError, "[dispatch] no operator named '", name, "'",
             similar.empty() ? "" : " (similar: " + similar + ")");
}

std::vector<OperatorHandle> Dispatcher::all_operators() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<OperatorHandle> out;
  for (auto& [n, e] : impl_->ops) {
    if (e->has_schema()) out.emplace_back(e.get());
  }
  return out;
}

std::function<void()> Dispatcher::register_def(FunctionSchema schema, const std::string& debug) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::string name = schema.full_name();
  OperatorEntry& e = impl_->entry(name);
  LOOM_CHECK(!e.has_schema(), "[dispatch] operator ", name, " is defined twice (", e.schema_debug_,
             " and ", debug, ")");
  // Kernels registered before the def must match the schema.
  std::vector<std::string> want;
  for (const auto& a : schema.arguments) want.push_back(a.type.canonical());
  e.schema_ = std::move(schema);
  e.schema_debug_ = debug;
  // The overload-less name also finds the default overload.
  impl_->rebuild(e);
  return [this, name] {
    std::lock_guard<std::mutex> lock(impl_->mu);
    OperatorEntry& e = impl_->entry(name);
    e.schema_.reset();
    e.schema_debug_.clear();
  };
}

void Dispatcher::check_signature(const OperatorHandle& op, const detail::CppSignature& sig,
                                 const char* what) const {
  const FunctionSchema& s = op.schema();
  detail::CppSignature want;
  for (const auto& a : s.arguments) want.args.push_back(a.type.canonical());
  if (s.returns.empty()) {
    want.ret = "()";
  } else if (s.returns.size() == 1) {
    want.ret = s.returns[0].type.canonical();
  } else {
    want.ret = "(";
    for (size_t i = 0; i < s.returns.size(); ++i) {
      want.ret += (i ? ", " : "") + s.returns[i].type.canonical();
    }
    want.ret += ")";
  }
  LOOM_CHECK_TYPE(want.args == sig.args && want.ret == sig.ret,
                  "[dispatch] the C++ signature of a ", what, " for ", op.name(), " is ", sig.str(),
                  " but its schema ", s.str(), " needs ", want.str());
}

std::function<void()> Dispatcher::register_impl(const std::string& name, DispatchKey key,
                                                KernelFunction k) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  OperatorEntry& e = impl_->entry(name);
  int slot;
  if (key == DispatchKey::CompositeExplicit) {
    slot = OperatorEntry::kCompositeExplicitSlot;
  } else if (key == DispatchKey::CompositeImplicit) {
    slot = OperatorEntry::kCompositeImplicitSlot;
  } else {
    slot = static_cast<int>(key);
    LOOM_CHECK(slot > 0 && slot < kNumDispatchKeys, "[dispatch] cannot register ", name,
               " for dispatch key ", dispatch_key_name(key));
  }
  if (e.has_schema() && k.cpp_signature()) {
    lock.unlock();
    check_signature(OperatorHandle(&e), *k.cpp_signature(), "kernel");
    lock.lock();
  }
  LOOM_CHECK(!e.registered[slot], "[dispatch] ", name, " already has a kernel for ",
             dispatch_key_name(key), " (registered at ", e.registered[slot]->debug, "; again at ",
             k.debug, ")");
  e.registered[slot] = std::move(k);
  impl_->rebuild(e);
  return [this, name, slot] {
    std::lock_guard<std::mutex> lock(impl_->mu);
    OperatorEntry& e = impl_->entry(name);
    e.registered[slot].reset();
    impl_->rebuild(e);
  };
}

std::function<void()> Dispatcher::register_fallback(DispatchKey key, KernelFunction k) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  int slot = static_cast<int>(key);
  LOOM_CHECK(slot > 0 && slot < kNumDispatchKeys, "[dispatch] cannot register a fallback for ",
             dispatch_key_name(key));
  LOOM_CHECK(!impl_->fallbacks[slot], "[dispatch] a fallback for ", dispatch_key_name(key),
             " is already registered (at ", impl_->fallbacks[slot]->debug, ")");
  impl_->fallbacks[slot] = std::move(k);
  for (auto& [n, e] : impl_->ops) impl_->rebuild(*e);
  return [this, slot] {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->fallbacks[slot].reset();
    for (auto& [n, e] : impl_->ops) impl_->rebuild(*e);
  };
}

const KernelFunction* Dispatcher::fallback(DispatchKey key) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const auto& f = impl_->fallbacks[static_cast<int>(key)];
  return f ? &*f : nullptr;
}

// ---- Library ----

namespace {
std::mutex g_def_ns_mu;
std::map<std::string, std::string>& def_namespaces() {  // GUARDED_BY(g_def_ns_mu)
  static auto* m = new std::map<std::string, std::string>();
  return *m;
}
}  // namespace

Library::Library(Kind kind, std::string ns, std::optional<DispatchKey> key, const char* file,
                 int line)
    : kind_(kind), ns_(std::move(ns)), key_(key), file_(file), line_(line) {
  if (kind_ == Kind::Def) {
    std::lock_guard<std::mutex> lock(g_def_ns_mu);
    auto [it, inserted] = def_namespaces().emplace(ns_, where());
    LOOM_CHECK(inserted, "[dispatch] LOOM_LIBRARY(", ns_, ") appears twice (", it->second, " and ",
               where(), "); use LOOM_LIBRARY_FRAGMENT for more definitions");
    std::string w = where();
    std::string n = ns_;
    undo_.push_back([n] {
      std::lock_guard<std::mutex> lock(g_def_ns_mu);
      def_namespaces().erase(n);
    });
  }
}

Library::~Library() {
  for (auto it = undo_.rbegin(); it != undo_.rend(); ++it) (*it)();
}

std::string Library::where() const {
  return file_ + ":" + std::to_string(line_);
}

DispatchKey Library::required_key() const {
  LOOM_CHECK(key_.has_value(), "[dispatch] impl() without a dispatch key in a library for ", ns_,
             " at ", where(), " (use LOOM_LIBRARY_IMPL or pass the key)");
  return *key_;
}

Library& Library::def(const std::string& schema) {
  LOOM_CHECK(kind_ != Kind::Impl, "[dispatch] def() in LOOM_LIBRARY_IMPL at ", where());
  FunctionSchema s = parse_schema(schema, ns_);
  LOOM_CHECK(s.ns == ns_, "[dispatch] schema '", schema, "' names namespace ", s.ns,
             " inside the library for ", ns_, " at ", where());
  undo_.push_back(Dispatcher::singleton().register_def(std::move(s), where()));
  return *this;
}

Library& Library::impl_kernel(const std::string& name, DispatchKey key, KernelFunction k) {
  std::string full = name.find("::") == std::string::npos ? ns_ + "::" + name : name;
  k.debug = where();
  undo_.push_back(Dispatcher::singleton().register_impl(full, key, std::move(k)));
  return *this;
}

Library& Library::fallback(KernelFunction k) {
  k.debug = where();
  undo_.push_back(Dispatcher::singleton().register_fallback(required_key(), std::move(k)));
  return *this;
}

namespace detail {
namespace {
std::atomic<CaptureBreakHandler> g_capture_break_handler{nullptr};
}  // namespace

void set_capture_break_handler(CaptureBreakHandler handler) {
  g_capture_break_handler.store(handler, std::memory_order_release);
}

void report_capture_break(const char* reason) {
  if (!tls_dispatch_keys.included.has(DispatchKey::Capture) ||
      tls_dispatch_keys.excluded.has(DispatchKey::Capture))
    return;
  if (CaptureBreakHandler h = g_capture_break_handler.load(std::memory_order_acquire)) h(reason);
}
}  // namespace detail

}  // namespace loom
