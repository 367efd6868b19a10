// The `loom` command: one binary, one subcommand per job. Each subcommand registers itself with a
// name, a one-line summary and a function taking its arguments (argv[0] is the subcommand name).
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
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
// Numbers go through loom::parse_int / parse_double (loom/parse.h): whole text, a range, and an
// error naming the command, the option and the value.
class Args {
 public:
  Args(const std::vector<std::string>& args, const std::vector<std::string>& flags,
       const std::vector<std::string>& options);
  bool flag(const std::string& name) const;
  std::optional<std::string> get(const std::string& name) const;
  std::string get_or(const std::string& name, const std::string& fallback) const;
  // The option's integer value in [min, max], or fallback when the option is absent (fallback is
  // not checked against the range: a command may use a sentinel such as 0 for "automatic").
  int64_t get_int(const std::string& name, int64_t fallback,
                  int64_t min = std::numeric_limits<int64_t>::min(),
                  int64_t max = std::numeric_limits<int64_t>::max()) const;
  double get_double(const std::string& name, double fallback,
                    double min = -std::numeric_limits<double>::max(),
                    double max = std::numeric_limits<double>::max()) const;
  const std::string& command() const { return command_; }
  const std::vector<std::string>& positionals() const { return positionals_; }

 private:
  std::string command_;
  std::vector<std::pair<std::string, std::string>> values_;
  std::vector<std::string> flags_set_;
  std::vector<std::string> positionals_;
};

// Path of the running executable's directory (to find helper binaries built beside it).
std::string self_dir();

}  // namespace loom::cli
