#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "loom/dispatch.h"
#include "loom/error.h"
#include "loom/ops.h"

namespace loom {
namespace {

std::vector<std::string>& trace() {
  static std::vector<std::string> t;
  return t;
}

// ---- a custom operator registered with the macros, as user code would ----
// A backend kernel computes directly (no dispatched calls), so layers switched on for the thread
// are not re-entered from inside it.
Tensor twice_cpu(const Tensor& x) {
  trace().push_back("CPU");
  Tensor xc = x.contiguous();
  Tensor out = empty_tensor(x.sizes(), kFloat32);
  for (int64_t i = 0; i < x.numel(); ++i) out.data_ptr<float>()[i] = 2 * xc.data_ptr<float>()[i];
  return out;
}
Tensor twice_meta(const Tensor& x) {
  trace().push_back("Meta");
  return empty(x.sizes(), TensorOptions(x.dtype()).with_device(kMeta));
}
TypedOperatorHandle<Tensor(const Tensor&)> twice_op() {
  return Dispatcher::singleton().find_typed<Tensor(const Tensor&)>("dtest::twice");
}
Tensor twice_autograd(DispatchKeySet ks, const Tensor& x) {
  trace().push_back("Autograd");
  // Like PyTorch's autograd kernels: ops run by the kernels below do not see this layer again.
  ExcludeDispatchKeyGuard below(DispatchKey::Autograd);
  return twice_op().redispatch(ks & DispatchKeySet::below(DispatchKey::Autograd), x);
}
Tensor twice_capture(DispatchKeySet ks, const Tensor& x) {
  trace().push_back("Capture");
  ExcludeDispatchKeyGuard below(DispatchKey::Capture);
  return twice_op().redispatch(ks & DispatchKeySet::below(DispatchKey::Capture), x);
}

}  // namespace
}  // namespace loom

LOOM_LIBRARY(dtest, m) {
  m.def("twice(Tensor x) -> Tensor");
  m.def("only_cpu(Tensor x) -> Tensor");
}
LOOM_LIBRARY_IMPL(dtest, CPU, m) {
  m.impl("twice", loom::twice_cpu);
  m.impl("only_cpu", loom::twice_cpu);
}
LOOM_LIBRARY_IMPL(dtest, Meta, m) {
  m.impl("twice", loom::twice_meta);
}
LOOM_LIBRARY_IMPL(dtest, Autograd, m) {
  m.impl("twice", loom::twice_autograd);
}

namespace loom {
namespace {

class Dispatch : public ::testing::Test {
 protected:
  void SetUp() override { trace().clear(); }
};

TEST_F(Dispatch, SchemaParsesAndPrintsBack) {
  const char* texts[] = {
      "loom::add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)",
      "ns::f(Tensor? w=None, int[2] stride=1, float eps=1e-05, str mode='none', bool b=False) -> "
      "(Tensor, Tensor)",
      "ns::g(Tensor[] xs, int[]? dim=None, ScalarType? dtype=None) -> Tensor(a)[]",
      "ns::h() -> ()",
  };
  for (const char* t : texts) {
    FunctionSchema s = parse_schema(t);
    EXPECT_EQ(s.str(), t);
    EXPECT_EQ(parse_schema(s.str()).str(), s.str());
  }
  FunctionSchema s = parse_schema(texts[0]);
  EXPECT_EQ(s.full_name(), "loom::add.out");
  EXPECT_TRUE(s.arguments[3].is_write);
  EXPECT_TRUE(s.arguments[2].kwarg_only);
  EXPECT_EQ(s.arguments[2].default_value->to_scalar().to_int(), 1);
  FunctionSchema f = parse_schema(texts[1]);
  EXPECT_EQ(f.arguments[1].default_value->to_int_list(), (std::vector<int64_t>{1, 1}));
}

TEST_F(Dispatch, BadSchemasNameTheProblemAndOffset) {
  const char* bad[] = {"ns::f(Tensor x -> Tensor",
                       "ns::f(Tensr x) -> Tensor",
                       "ns::f(Tensor x, Tensor x) -> Tensor",
                       "f(Tensor x) -> Tensor",
                       "ns::f(int x=1.5) -> Tensor",
                       "ns::f(Tensor x) Tensor"};
  for (const char* b : bad) {
    try {
      parse_schema(b);
      ADD_FAILURE() << "accepted " << b;
    } catch (const ValueError& e) {
      std::string m = e.what();
      EXPECT_EQ(m.rfind("[schema]", 0), 0u) << m;
      EXPECT_NE(m.find("offset"), std::string::npos) << m;
    }
  }
}

TEST_F(Dispatch, HighestKeyRunsAndRedispatchesBelow) {
  Tensor x = ones({2});
  Tensor y = twice_op().call(x);
  EXPECT_EQ(trace(), (std::vector<std::string>{"CPU"}));
  EXPECT_EQ(to_vector<float>(y), (std::vector<float>{2, 2}));

  trace().clear();
  Tensor g = ones({2});
  g.impl()->add_key(DispatchKey::Autograd);
  twice_op().call(g);
  EXPECT_EQ(trace(), (std::vector<std::string>{"Autograd", "CPU"}));

  trace().clear();
  {
    ExcludeDispatchKeyGuard no_grad(DispatchKey::Autograd);
    twice_op().call(g);
  }
  EXPECT_EQ(trace(), (std::vector<std::string>{"CPU"}));

  trace().clear();
  twice_op().call(empty({3}, TensorOptions().with_device(kMeta)));
  EXPECT_EQ(trace(), (std::vector<std::string>{"Meta"}));
}

TEST_F(Dispatch, ThreadLocalIncludeAndFallthrough) {
  Library lib(Library::Kind::Impl, "dtest", DispatchKey::Capture, __FILE__, __LINE__);
  lib.impl("twice", twice_capture);
  Tensor x = ones({1});
  {
    IncludeDispatchKeyGuard capture(DispatchKey::Capture);
    twice_op().call(x);
  }
  EXPECT_EQ(trace(), (std::vector<std::string>{"Capture", "CPU"}));
  // The include set is thread-local: another thread does not see it.
  trace().clear();
  {
    IncludeDispatchKeyGuard capture(DispatchKey::Capture);
    std::thread t([&] { twice_op().call(x); });
    t.join();
  }
  EXPECT_EQ(trace(), (std::vector<std::string>{"CPU"}));
}

TEST_F(Dispatch, FallthroughSkipsAKey) {
  Library lib(Library::Kind::Impl, "dtest", DispatchKey::Capture, __FILE__, __LINE__);
  lib.impl("twice", fallthrough_kernel());
  Tensor x = ones({1});
  IncludeDispatchKeyGuard capture(DispatchKey::Capture);
  twice_op().call(x);
  EXPECT_EQ(trace(), (std::vector<std::string>{"CPU"}));
  EXPECT_EQ(twice_op().dispatch_key_for(DispatchKeySet(DispatchKey::CPU)), DispatchKey::CPU);
}

std::vector<std::string> g_fallback_log;
void logging_fallback(const OperatorHandle& op, DispatchKeySet ks, Stack* stack) {
  g_fallback_log.push_back(op.name());
  op.redispatch_boxed(ks & DispatchKeySet::below(DispatchKey::Tracer), *stack);
}

TEST_F(Dispatch, BoxedBackendFallbackHandlesAnyOperator) {
  g_fallback_log.clear();
  Library lib(Library::Kind::Impl, "_", DispatchKey::Tracer, __FILE__, __LINE__);
  lib.fallback(KernelFunction::from_boxed(logging_fallback));
  Tensor a = from_vector<float>({1, 2}), b = from_vector<float>({3, 4});
  Tensor c;
  {
    IncludeDispatchKeyGuard tracer(DispatchKey::Tracer);
    // Typed call -> boxed fallback -> boxed wrapper of the unboxed CPU kernel.
    c = add(a, b, 2);
    mul(c, c);
  }
  EXPECT_EQ(to_vector<float>(c), (std::vector<float>{7, 10}));
  ASSERT_GE(g_fallback_log.size(), 2u);
  EXPECT_EQ(g_fallback_log[0], "loom::add");
  EXPECT_EQ(g_fallback_log[1], "loom::mul");
  // Outside the guard the fallback is not consulted.
  g_fallback_log.clear();
  add(a, b);
  EXPECT_TRUE(g_fallback_log.empty());
}

// Typed calls box into a per-thread pool of stacks (detail::BorrowedStack): a boxed kernel that
// makes typed calls of its own gets a second stack, and one that throws gives its stack back empty.
void nesting_or_throwing_fallback(const OperatorHandle& op, DispatchKeySet ks, Stack* stack) {
  if (op.name() == "loom::sub") LOOM_THROW(ValueError, "[test] sub is refused here");
  if (op.name() == "loom::add") {
    const Tensor a = (*stack)[stack->size() - 3].to_tensor();
    mul(a, a);  // boxed again through this fallback, one level deeper
  }
  g_fallback_log.push_back(op.name());
  op.redispatch_boxed(ks & DispatchKeySet::below(DispatchKey::Tracer), *stack);
}

TEST_F(Dispatch, BoxingStacksNestAndAreReturnedEmptyOnErrors) {
  g_fallback_log.clear();
  Library lib(Library::Kind::Impl, "_", DispatchKey::Tracer, __FILE__, __LINE__);
  lib.fallback(KernelFunction::from_boxed(nesting_or_throwing_fallback));
  Tensor a = from_vector<float>({1, 2}), b = from_vector<float>({3, 4});
  IncludeDispatchKeyGuard tracer(DispatchKey::Tracer);
  Tensor c = add(a, b);
  EXPECT_EQ(to_vector<float>(c), (std::vector<float>{4, 6}));
  EXPECT_EQ(g_fallback_log, (std::vector<std::string>{"loom::mul", "loom::add"}));
  EXPECT_THROW(sub(a, b), ValueError);
  // The stack the failed call borrowed no longer holds a or b.
  EXPECT_EQ(a.use_count(), 1);
  EXPECT_EQ(b.use_count(), 1);
  EXPECT_EQ(to_vector<float>(mul(a, b)), (std::vector<float>{3, 8}));
}

TEST_F(Dispatch, BoxedCallOfUnboxedKernel) {
  OperatorHandle op = Dispatcher::singleton().find_or_throw("loom::add");
  Stack s{from_vector<float>({1, 2}), from_vector<float>({10, 20}), Scalar(3)};
  op.call_boxed(s);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(to_vector<float>(s[0].to_tensor()), (std::vector<float>{31, 62}));
  // A tuple-returning operator pushes each result.
  OperatorHandle split_op = Dispatcher::singleton().find_or_throw("loom::split");
  Stack s2{arange(0, 5, 1, kFloat32), int64_t{2}, int64_t{0}};
  split_op.call_boxed(s2);
  ASSERT_EQ(s2.size(), 1u);
  EXPECT_EQ(s2[0].to_tensor_list().size(), 3u);
}

TEST_F(Dispatch, MissingKernelErrorNamesOperatorAndKeys) {
  auto op = Dispatcher::singleton().find_typed<Tensor(const Tensor&)>("dtest::only_cpu");
  try {
    op.call(empty({2}, TensorOptions().with_device(kMeta)));
    FAIL();
  } catch (const NotImplementedError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("dtest::only_cpu"), std::string::npos) << m;
    EXPECT_NE(m.find("Meta"), std::string::npos) << m;
    // The Autograd and Capture backend fallbacks count as kernels for every operator.
    EXPECT_NE(m.find("keys with kernels: Autograd, Capture, CPU"), std::string::npos) << m;
  }
}

TEST_F(Dispatch, SignatureMismatchesAreTypeErrors) {
  EXPECT_THROW(Dispatcher::singleton().find_typed<Tensor(const Tensor&, int64_t)>("dtest::twice"),
               TypeError);
  Library lib(Library::Kind::Impl, "dtest", DispatchKey::CUDA, __FILE__, __LINE__);
  auto wrong = +[](const Tensor& x, double) { return x; };
  EXPECT_THROW(lib.impl("twice", wrong), TypeError);
  // Registering a second kernel for the same key is an error.
  Library lib2(Library::Kind::Impl, "dtest", DispatchKey::CPU, __FILE__, __LINE__);
  EXPECT_THROW(lib2.impl("twice", twice_cpu), ValueError);
  EXPECT_THROW(Dispatcher::singleton().find_or_throw("dtest::nope"), ValueError);
}

TEST_F(Dispatch, LibraryDestructionUnregisters) {
  {
    Library lib(Library::Kind::Fragment, "dtest", std::nullopt, __FILE__, __LINE__);
    lib.def("temp(Tensor x) -> Tensor");
    lib.impl("temp", DispatchKey::CPU, twice_cpu);
    EXPECT_TRUE(Dispatcher::singleton().find("dtest::temp").has_value());
  }
  EXPECT_FALSE(Dispatcher::singleton().find("dtest::temp").has_value());
}

TEST_F(Dispatch, OpsListIncludesCustomOperatorWithKeys) {
  bool found = false;
  for (const OperatorHandle& op : Dispatcher::singleton().all_operators()) {
    if (op.name() == "dtest::twice") {
      found = true;
      auto keys = op.kernel_keys();
      EXPECT_EQ(keys, (std::vector<DispatchKey>{DispatchKey::Autograd, DispatchKey::Capture,
                                                DispatchKey::Meta, DispatchKey::CPU}));
      EXPECT_NE(op.kernel_source(DispatchKey::CPU).find("dispatch_test.cpp"), std::string::npos);
    }
  }
  EXPECT_TRUE(found);
}

TEST_F(Dispatch, RecordFunctionSeesTopLevelOperators) {
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<uint64_t> seqs;
  uint64_t h =
      add_record_callbacks(RecordFunctionCallbacks{[&](OpEvent& ev) {
                                                     names.emplace_back(ev.name);
                                                     seqs.push_back(ev.sequence_nr);
                                                     if (!ev.input_shapes.empty())
                                                       shapes.push_back(ev.input_shapes[0].vec());
                                                   },
                                                   nullptr, true});
  Tensor a = ones({2, 3});
  Tensor b = mul(a, a);
  remove_record_callbacks(h);
  Tensor c = add(b, b);  // not recorded
  ASSERT_GE(names.size(), 2u);
  EXPECT_EQ(names.back(), "loom::mul");
  EXPECT_EQ(shapes.back(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(seqs[seqs.size() - 1], seqs[seqs.size() - 2] + 1);
  EXPECT_FALSE(record_function_active());
}

}  // namespace
}  // namespace loom
