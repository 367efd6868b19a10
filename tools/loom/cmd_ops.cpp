// `loom ops`: every registered operator, its schema and the dispatch keys that have kernels.
// `loom ops --explain NAME` shows the whole dispatch table of one operator and why each key gets
// the kernel it does, and what autocast does to it.
#include <cstdio>
#include <iostream>

#include "cli.h"
#include "loom/autocast.h"
#include "loom/dispatch.h"
#include "loom/ops.h"

namespace loom::cli {
namespace {

int run_ops(const std::vector<std::string>& argv) {
  Args args(argv, {"help", "names"}, {"explain", "missing"});
  if (args.flag("help")) {
    std::printf(
        "usage: loom ops [FILTER] [--names] [--explain NAME] [--missing cuda]\n"
        "  Lists operators whose name contains FILTER: schema and the keys with kernels.\n"
        "  --names          only the names\n"
        "  --explain NAME   the dispatch table of one operator (e.g. loom::add)\n"
        "  --missing cuda   operators with a CPU kernel but none for CUDA, and why\n");
    return 0;
  }
  Dispatcher& d = Dispatcher::singleton();
  if (auto backend = args.get("missing")) {
    const DispatchKey key = parse_dispatch_key(*backend == "cuda" ? "CUDA" : *backend);
    LOOM_CHECK(key == DispatchKey::CUDA,
               "[loom ops] --missing takes a device backend (cuda), got '", *backend, "'");
    int with_cpu = 0, missing = 0;
    for (const OperatorHandle& op : d.all_operators()) {
      if (op.kernel_source(DispatchKey::CPU).empty()) continue;
      ++with_cpu;
      if (!op.kernel_source(key).empty()) continue;
      ++missing;
      std::printf("%-40s %s\n", op.name().c_str(), missing_kernel_reason(op.name(), key).c_str());
    }
    std::printf("%d of %d operators with a CPU kernel have no %s kernel\n", missing, with_cpu,
                dispatch_key_name(key));
    return 0;
  }
  if (auto name = args.get("explain")) {
    std::string n = name->find("::") == std::string::npos ? "loom::" + *name : *name;
    OperatorHandle op = d.find_or_throw(n);
    std::printf("%s\n\n", op.schema().str().c_str());
    std::printf("%-14s %s\n", "key", "kernel");
    for (int k = kNumDispatchKeys - 1; k > 0; --k) {
      auto key = static_cast<DispatchKey>(k);
      if (std::string(dispatch_key_name(key)) == "Reserved") continue;
      std::string src = op.kernel_source(key);
      std::printf("%-14s %s\n", dispatch_key_name(key), src.empty() ? "-" : src.c_str());
    }
    std::printf(
        "\nA call runs the highest key present in (tensor keys | thread-local included) "
        "minus thread-local excluded.\nExamples: CPU tensors -> %s; Meta tensors -> %s.\n",
        dispatch_key_name(op.dispatch_key_for(DispatchKeySet(DispatchKey::CPU))),
        dispatch_key_name(op.dispatch_key_for(DispatchKeySet(DispatchKey::Meta))));
    const CastPolicy policy = autocast_policy(op.name());
    if (op.schema().is_mutable()) {
      std::printf("autocast: not cast (out= and in-place variants run in the dtypes given)\n");
    } else if (policy == CastPolicy::None) {
      std::printf("autocast: %s\n", cast_policy_explanation(policy));
    } else {
      std::printf("autocast: %s \u2014 %s\n", cast_policy_name(policy),
                  cast_policy_explanation(policy));
      const std::string exception = autocast_exception(op.name());
      if (!exception.empty()) std::printf("  except: %s\n", exception.c_str());
    }
    return 0;
  }
  std::string filter = args.positionals().empty() ? "" : args.positionals()[0];
  int count = 0;
  for (const OperatorHandle& op : d.all_operators()) {
    if (!filter.empty() && op.name().find(filter) == std::string::npos) continue;
    ++count;
    if (args.flag("names")) {
      std::printf("%s\n", op.name().c_str());
      continue;
    }
    std::string keys;
    for (DispatchKey k : op.kernel_keys())
      keys += std::string(keys.empty() ? "" : ", ") + dispatch_key_name(k);
    std::printf("%s\n    keys: %s\n", op.schema().str().c_str(), keys.c_str());
  }
  std::printf("%d operators\n", count);
  return 0;
}

const RegisterCommand kOps("ops", "list operators, their schemas and dispatch keys", run_ops);

}  // namespace
}  // namespace loom::cli
