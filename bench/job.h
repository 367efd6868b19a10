// Child processes of `loom bench` under a deadline: a job is a set of processes (the ranks of one
// configuration, or mpirun) in a process group of their own. See Note [bench deadlines].
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

namespace loom::bench {

// Note [bench deadlines]
// A benchmark configuration must end, whatever its library does: a Gloo rank busy-polling for a
// peer that will never send, a rank that crashed while its peer waits in a collective, an anchor
// co-process stuck in a measurement. So every child of `loom bench` runs in a process group of its
// own (setpgid; the children of one job share it), dies with the driver (PR_SET_PDEATHSIG), and is
// bounded by its parent: at the deadline the whole group gets SIGTERM, then SIGKILL after a grace
// period (killpg, so a rank's own children go too). When any process of a job exits non-zero or is
// killed, the others are stopped at once the same way: a peer does not wait for its library's
// timeout. A group leader is reaped only after the last killpg, so its group id cannot have been
// reused by then. The failure is reported as data (JobResult::reason), not thrown: the suite goes
// on with its other configurations and its table says which failed and why.

// How a process ended, from waitid(2): "exited with status 3", "was killed by SIGABRT".
struct ExitInfo {
  int code = 0;    // CLD_EXITED, CLD_KILLED or CLD_DUMPED
  int status = 0;  // the exit status or the signal
  bool clean() const;
  std::string describe() const;
  // How likely this ending caused a job's failure rather than reacted to it, for naming the cause
  // among failures seen together: 2 for a signal (a crash, the OOM killer), 1 for an exit with a
  // status or SIGPIPE (a write to a peer that had died: the reaction, not the cause).
  int cause_rank() const;
};

struct JobProcess {
  std::string name;           // how a failure names it: "rank 1", "mpirun"
  std::function<int()> body;  // runs in the forked child; returns its exit status (or execs)
};

struct JobOptions {
  double deadline_s = 60;  // from the start of the job
  double grace_s = 5;      // from SIGTERM to SIGKILL
};

struct JobResult {
  bool timed_out = false;
  int failed = -1;          // the first process that failed on its own (-1: none)
  std::string failed_name;  // its name
  ExitInfo exit;            // how it ended
  std::string last_stderr;  // its last line on stderr
  std::string also;         // "; rank 0 exited with status 1 (...)" for those that failed with it
  double seconds = 0;       // how long the job took
  double deadline_s = 0;
  bool ok() const { return !timed_out && failed < 0; }
  // "" when ok; else "timeout after 60 s at 1M" or "rank 1 was killed by SIGABRT at 8K (its last
  // stderr line)"; `where` (e.g. the size in progress) is left out when empty.
  std::string reason(const std::string& where = "") const;
};

// Called for each line a process writes (stdout or stderr), with the process's index.
using LineFn = std::function<void(size_t process, const std::string& line)>;

// Forks the processes into one new process group, starts them together, and passes their output on
// line by line until all have ended. Throws DistError only when a pipe or fork cannot be made.
JobResult run_job(const std::vector<JobProcess>& processes, const JobOptions& options,
                  const LineFn& on_stdout, const LineFn& on_stderr);

// Ends the process group led by `leader` (a child of ours that leads its own group and has not been
// reaped): waits up to wait_s for the leader to exit by itself, then SIGTERM to the group and after
// grace_s SIGKILL; then SIGKILL to whatever is left of the group, and reaps the leader.
ExitInfo end_group(pid_t leader, double wait_s, double grace_s);

// Prepares a freshly forked child: joins process group `pgid` (0: a new one of its own) and dies
// when the parent `parent` does. Returns false when the parent is already gone.
bool adopt_child(pid_t pgid, pid_t parent);

}  // namespace loom::bench
