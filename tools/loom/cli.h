// The `loom` command: one binary, one subcommand per job. Each subcommand registers itself with a
// name, a one-line summary and a function taking its arguments (argv[0] is the subcommand name).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace loom::cli {

using CommandFn = std::function<int(const std::vector<std::string>& args)>;

struct Command {
  std::string name;
  std::string summary;
  CommandFn run;
};

std::vector<Command>& commands();

struct RegisterCommand {
  RegisterCommand(std::string name, std::string summary, CommandFn fn) {
    commands().push_back(Command{std::move(name), std::move(summary), std::move(fn)});
  }
};

// Tiny option parser: --flag, --key value, --key=value, positionals. Unknown options are errors.
class Args {
 public:
  Args(const std::vector<std::string>& args, const std::vector<std::string>& flags,
       const std::vector<std::string>& options);
  bool flag(const std::string& name) const;
  std::optional<std::string> get(const std::string& name) const;
  std::string get_or(const std::string& name, const std::string& fallback) const;
  int64_t get_int(const std::string& name, int64_t fallback) const;
  const std::vector<std::string>& positionals() const { return positionals_; }

 private:
  std::vector<std::pair<std::string, std::string>> values_;
  std::vector<std::string> flags_set_;
  std::vector<std::string> positionals_;
};

// Path of the running executable's directory (to find helper binaries built beside it).
std::string self_dir();

}  // namespace loom::cli
