// `loom mem record --train` (see mem_train_child.h).
#include "mem_train_child.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "loom/error.h"

extern char** environ;

namespace loom::cli {
namespace {

std::string self_exe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  LOOM_CHECK(n > 0, "[loom mem record] cannot find this executable (/proc/self/exe): ",
             std::strerror(errno));
  return std::string(buf, static_cast<size_t>(n));
}

}  // namespace

memory::AllocTrace record_train_child(const std::string& out, int64_t steps,
                                      const std::vector<std::string>& train_args) {
  for (const std::string& a : train_args) {
    // Several processes would all write OUT: record one process.
    LOOM_CHECK(a.rfind("--nproc", 0) != 0 && a.rfind("--max-steps", 0) != 0,
               "[loom mem record] --train records one process for --steps steps: `loom train` ", a,
               " is not supported here (run LOOM_MEM_RECORD=FILE%p loom train ... yourself)");
  }
  std::vector<std::string> argv = {self_exe(), "train", "--max-steps", std::to_string(steps),
                                   "--no-progress"};
  argv.insert(argv.end(), train_args.begin(), train_args.end());
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "LOOM_MEM_RECORD=", 16) != 0) env.emplace_back(*e);
  }
  env.push_back("LOOM_MEM_RECORD=" + out);
  std::error_code ec;
  std::filesystem::remove(out, ec);  // so that a stale file is never taken for this run's trace

  std::vector<char*> cargv, cenv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  for (auto& e : env) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  // The child's output goes to our stderr: our stdout stays the recording's summary.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, cargv[0], &actions, nullptr, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&actions);
  LOOM_CHECK(rc == 0, "[loom mem record] cannot run ", argv[0], " train: ", std::strerror(rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    LOOM_CHECK(errno == EINTR,
               "[loom mem record] waiting for loom train failed: ", std::strerror(errno));
  }
  std::string cmd = "loom train --max-steps " + std::to_string(steps) + " --no-progress";
  for (const auto& a : train_args) cmd += " " + a;
  // `loom train` exits with 3 when --max-steps stopped it before the end of its epochs.
  const bool ok = WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 3);
  if (!ok) {
    LOOM_THROW(DataError, "[loom mem record] `", cmd, "` failed (",
               WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                 : "killed by signal " + std::to_string(WTERMSIG(status)),
               "); its output is above");
  }
  LOOM_CHECK_AS(DataError, std::filesystem::exists(out), "[loom mem record] `", cmd,
                "` ended but wrote no trace to ", out);
  memory::AllocTrace trace = memory::read_trace(out);
  trace.source = "loom mem record --train: " + cmd + " (" + trace.source + ")";
  memory::write_trace(out, trace);
  return trace;
}

}  // namespace loom::cli
