// Runs every registered gradcheck case, and checks that every differentiable operator has one.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <set>

#include "autograd/gradcheck_cases.h"
#include "loom/derivatives.h"
#include "loom/dispatch.h"

namespace loom::testing {

std::vector<GradCase>& grad_cases() {
  static std::vector<GradCase> cases;
  return cases;
}

namespace {

TEST(Gradcheck, EveryCase) {
  ASSERT_FALSE(grad_cases().empty());
  for (const GradCase& c : grad_cases()) {
    SCOPED_TRACE(c.op + " [" + c.label + "]");
    if (std::getenv("LOOM_GRADCHECK_VERBOSE"))
      std::fprintf(stderr, "case %s [%s]\n", c.op.c_str(), c.label.c_str());
    autograd::GradcheckOptions opt;
    opt.atol = c.atol;
    opt.rtol = c.rtol;
    try {
      std::string report = autograd::gradcheck(c.fn, c.inputs(), opt);
      EXPECT_EQ(report, "") << c.op << " [" << c.label << "]";
    } catch (const std::exception& e) {
      ADD_FAILURE() << c.op << " [" << c.label << "] threw: " << e.what();
    }
    if (!c.gradgrad) continue;
    try {
      std::string r2 = autograd::gradgradcheck(c.fn, c.inputs(), opt);
      EXPECT_EQ(r2, "") << "second derivative of " << c.op << " [" << c.label << "]";
    } catch (const std::exception& e) {
      ADD_FAILURE() << "second derivative of " << c.op << " [" << c.label
                    << "] threw: " << e.what();
    }
  }
}

TEST(Gradcheck, EveryDifferentiableOperatorHasACase) {
  std::set<std::string> covered;
  for (const GradCase& c : grad_cases()) covered.insert(c.op);
  std::vector<std::string> missing;
  for (const autograd::Derivative* d : autograd::all_derivatives()) {
    if (d->differentiable && !covered.count(d->op)) missing.push_back(d->op + " (" + d->file + ")");
  }
  std::string list;
  for (auto& m : missing) list += "  " + m + "\n";
  EXPECT_TRUE(missing.empty()) << "derivatives without a gradcheck case:\n" << list;
}

TEST(Gradcheck, EveryOperatorIsDifferentiableOrDeclaredNot) {
  // An operator with no derivative, no composite (Autograd) kernel and no nondifferentiable mark
  // would throw NotImplementedError on an input that requires grad.
  std::vector<std::string> missing;
  for (const OperatorHandle& op : Dispatcher::singleton().all_operators()) {
    const std::string name = op.schema().op_name();
    if (op.schema().ns != "loom") continue;
    // Every operator has an Autograd kernel: the boxed fallback. Only a kernel of its own
    // (CompositeImplicit, or one registered for Autograd) makes a derivative unnecessary.
    const std::string autograd_kernel = op.kernel_source(DispatchKey::Autograd);
    if (!autograd_kernel.empty() && autograd_kernel.rfind("backend fallback", 0) != 0) continue;
    bool takes_tensor = false, has_out = false;
    for (const Argument& a : op.schema().arguments) {
      takes_tensor |= a.type.kind == SchemaType::Kind::Tensor;
      has_out |= a.is_write && a.kwarg_only;
    }
    if (has_out) continue;        // out= never records
    if (!takes_tensor) continue;  // factories
    if (!autograd::find_derivative(name)) missing.push_back(name);
  }
  std::string list;
  for (auto& m : missing) list += "  " + m + "\n";
  EXPECT_TRUE(missing.empty())
      << "operators with neither a derivative nor a nondifferentiable mark:\n"
      << list;
}

}  // namespace
}  // namespace loom::testing
