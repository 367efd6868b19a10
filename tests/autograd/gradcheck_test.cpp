// Runs every registered gradcheck case, and checks that every differentiable operator has one.
#include <gtest/gtest.h>

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
      ADD_FAILURE() << "second derivative of " << c.op << " [" << c.label << "] threw: " << e.what();
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
    if (op.has_kernel(DispatchKey::Autograd)) continue;
    if (op.schema().overload == "out") continue;  // out= never records
    bool takes_tensor = false;
    for (const Argument& a : op.schema().arguments) takes_tensor |= a.type.kind == SchemaType::Kind::Tensor;
    if (!takes_tensor) continue;  // factories
    if (!autograd::find_derivative(name)) missing.push_back(name);
  }
  std::string list;
  for (auto& m : missing) list += "  " + m + "\n";
  EXPECT_TRUE(missing.empty()) << "operators with neither a derivative nor a nondifferentiable mark:\n"
                               << list;
}

}  // namespace
}  // namespace loom::testing
