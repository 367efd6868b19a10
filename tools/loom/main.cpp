// Entry point of the `loom` command.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "cli.h"
#include "loom/error.h"
#include "loom/parse.h"

namespace loom::cli {

std::vector<Command>& commands() {
  static std::vector<Command> c;
  return c;
}

Args::Args(const std::vector<std::string>& args, const std::vector<std::string>& flags,
           const std::vector<std::string>& options)
    : command_(args.empty() ? std::string() : args[0]) {
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) == 0 && a.size() > 2) {
      std::string key = a.substr(2), value;
      bool has_value = false;
      if (auto eq = key.find('='); eq != std::string::npos) {
        value = key.substr(eq + 1);
        key = key.substr(0, eq);
        has_value = true;
      }
      if (std::find(flags.begin(), flags.end(), key) != flags.end()) {
        LOOM_CHECK(!has_value, "[loom ", args[0], "] --", key, " takes no value");
        flags_set_.push_back(key);
      } else if (std::find(options.begin(), options.end(), key) != options.end()) {
        if (!has_value) {
          LOOM_CHECK(i + 1 < args.size(), "[loom ", args[0], "] --", key, " needs a value");
          value = args[++i];
        }
        values_.emplace_back(key, value);
      } else {
        LOOM_THROW(ValueError, "[loom ", args[0], "] unknown option --", key);
      }
    } else {
      positionals_.push_back(a);
    }
  }
}

bool Args::flag(const std::string& name) const {
  return std::find(flags_set_.begin(), flags_set_.end(), name) != flags_set_.end();
}

std::optional<std::string> Args::get(const std::string& name) const {
  for (auto it = values_.rbegin(); it != values_.rend(); ++it) {
    if (it->first == name) return it->second;
  }
  return std::nullopt;
}

std::string Args::get_or(const std::string& name, const std::string& fallback) const {
  return get(name).value_or(fallback);
}

int64_t Args::get_int(const std::string& name, int64_t fallback, int64_t min, int64_t max) const {
  auto v = get(name);
  if (!v) return fallback;
  return parse_int(*v, "[loom " + command_ + "] --" + name, min, max);
}

double Args::get_double(const std::string& name, double fallback, double min, double max) const {
  auto v = get(name);
  if (!v) return fallback;
  return parse_double(*v, "[loom " + command_ + "] --" + name, min, max);
}

std::string self_dir() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string p(buf, static_cast<size_t>(n));
  return p.substr(0, p.rfind('/'));
}

}  // namespace loom::cli

namespace {

void usage() {
  std::printf(
      "loom: a deep-learning framework runtime you can see through\n\nusage: loom <command> "
      "[args]\n\n");
  auto cmds = loom::cli::commands();
  std::sort(cmds.begin(), cmds.end(), [](auto& a, auto& b) { return a.name < b.name; });
  for (const auto& c : cmds) std::printf("  %-14s %s\n", c.name.c_str(), c.summary.c_str());
  std::printf("\nRun `loom <command> --help` for a command's options.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h" ||
      std::string(argv[1]) == "help") {
    usage();
    return argc < 2 ? 2 : 0;
  }
  std::vector<std::string> args(argv + 1, argv + argc);
  // Two-word commands ("data pack"): `loom data pack ...` runs them with args[0] = "data pack".
  if (args.size() >= 2) {
    const std::string two = args[0] + " " + args[1];
    for (const auto& c : loom::cli::commands()) {
      if (c.name == two) {
        args.erase(args.begin());
        args[0] = two;
        break;
      }
    }
  }
  bool group = false;  // `loom data` alone: list the group's commands
  for (const auto& c : loom::cli::commands()) group = group || c.name.rfind(args[0] + " ", 0) == 0;
  if (group) {
    std::printf("usage: loom %s <command> [args]\n\n", args[0].c_str());
    for (const auto& c : loom::cli::commands()) {
      if (c.name.rfind(args[0] + " ", 0) == 0)
        std::printf("  %-14s %s\n", c.name.c_str(), c.summary.c_str());
    }
    return args.size() > 1 && args[1] != "--help" ? 2 : 0;
  }
  for (const auto& c : loom::cli::commands()) {
    if (c.name == args[0]) {
      try {
        return c.run(args);
      } catch (const loom::Error& e) {
        std::fprintf(stderr, "loom %s: %s: %s\n", args[0].c_str(), e.kind(), e.what());
        return 1;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "loom %s: error: %s\n", args[0].c_str(), e.what());
        return 1;
      }
    }
  }
  std::fprintf(stderr, "loom: unknown command '%s'\n\n", args[0].c_str());
  usage();
  return 2;
}
