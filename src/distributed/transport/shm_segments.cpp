// Shared-memory segment names and the sweep of orphaned ones (see shm_segments.h).
//
// Note [Orphaned segments]
// A rank's inbox segment is unlinked as soon as every local peer has mapped it (connect.cpp), so a
// name stays in /dev/shm only while the group connects. A rank killed in that window (SIGKILL, or
// the launcher stopping a rank that waits for a peer that never comes) leaves the segment behind:
// nothing else would ever remove it, and each one holds its rings (2 MiB for a few ranks) until
// reboot. So the name records its owner: pid namespace, pid and the process's start time (field 22
// of /proc/<pid>/stat, which tells a reused pid from the original). Group creation and `loom
// launch` (after its workers end) sweep /dev/shm and remove the segments whose owner is gone: no
// process with that pid, or one that started at another time, or a zombie. Whenever it cannot be
// sure the owner is dead the sweep keeps the segment: another pid namespace (a container sharing
// /dev/shm), another user's file, a /proc entry it cannot read, a name it does not parse.
#include "distributed/transport/shm_segments.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace loom::dist {
namespace {

constexpr const char* kPrefix = "loom-pg-";

uint64_t pid_namespace() {
  char buf[64] = {0};
  const ssize_t n = ::readlink("/proc/self/ns/pid", buf, sizeof(buf) - 1);
  if (n <= 0) return 0;
  uint64_t ns = 0;
  return std::sscanf(buf, "pid:[%" SCNu64 "]", &ns) == 1 ? ns : 0;
}

enum class Owner { Alive, Dead, Unknown };

// Dead: no such process, a zombie, or a process that started at another time (the pid was reused).
Owner owner_state(int pid, uint64_t start) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  std::ifstream f(path);
  if (!f) {
    struct stat st;
    return ::stat(("/proc/" + std::to_string(pid)).c_str(), &st) != 0 && errno == ENOENT
               ? Owner::Dead
               : Owner::Unknown;
  }
  std::string line;
  std::getline(f, line);
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so fields count from the
  // last ')'; the state is field 3, the start time field 22.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return Owner::Unknown;
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  std::vector<std::string> fields;
  while (rest >> field && fields.size() < 20) fields.push_back(field);
  if (fields.size() < 20) return Owner::Unknown;
  if (fields[0] == "Z" || fields[0] == "X") return Owner::Dead;
  return std::strtoull(fields[19].c_str(), nullptr, 10) == start ? Owner::Alive : Owner::Dead;
}

uint64_t start_time(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(f, line);
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  for (int i = 0; i < 20 && rest >> field; ++i) {
    if (i == 19) return std::strtoull(field.c_str(), nullptr, 10);
  }
  return 0;
}

struct ParsedName {
  uint64_t ns = 0;
  int pid = 0;
  uint64_t start = 0;
};

// "loom-pg-<ns>-<pid>-<start>-<rank>-<hex>"; false for anything else.
bool parse_name(const char* name, ParsedName* out) {
  if (std::strncmp(name, kPrefix, std::strlen(kPrefix)) != 0) return false;
  unsigned long long ns = 0, start = 0, nonce = 0;
  int pid = 0, rank = 0, used = 0;
  if (std::sscanf(name + std::strlen(kPrefix), "%llu-%d-%llu-%d-%llx%n", &ns, &pid, &start, &rank,
                  &nonce, &used) != 5) {
    return false;
  }
  if (name[std::strlen(kPrefix) + static_cast<size_t>(used)] != '\0' || pid <= 0) return false;
  out->ns = ns;
  out->pid = pid;
  out->start = start;
  return true;
}

}  // namespace

std::string shm_segment_name(int rank, uint64_t nonce) {
  static const uint64_t ns = pid_namespace();
  static const int pid_at_start = static_cast<int>(::getpid());
  static const uint64_t start_at_start = start_time(pid_at_start);
  // A forked child has its own pid and start time.
  const int pid = static_cast<int>(::getpid());
  const uint64_t start = pid == pid_at_start ? start_at_start : start_time(pid);
  char buf[128];
  std::snprintf(buf, sizeof(buf), "/%s%" PRIu64 "-%d-%" PRIu64 "-%d-%" PRIx64, kPrefix, ns, pid,
                start, rank, nonce);
  return buf;
}

SegmentSweep remove_orphan_segments(const std::string& dir) {
  SegmentSweep sweep;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return sweep;  // no /dev/shm: no segments either
  const uint64_t my_ns = pid_namespace();
  const uid_t me = ::geteuid();
  while (dirent* e = ::readdir(d)) {
    ParsedName n;
    if (!parse_name(e->d_name, &n)) continue;
    if (n.ns != my_ns) continue;  // pids of another namespace mean nothing here
    struct stat st;
    if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_uid != me ||
        !S_ISREG(st.st_mode)) {
      continue;
    }
    if (owner_state(n.pid, n.start) != Owner::Dead) continue;
    const std::string path = dir + "/" + e->d_name;
    if (::unlinkat(::dirfd(d), e->d_name, 0) == 0) {
      sweep.removed.push_back({path, n.pid});
    } else if (errno != ENOENT) {  // ENOENT: another sweep was quicker
      sweep.errors.push_back(path + ": " + std::strerror(errno));
    }
  }
  ::closedir(d);
  return sweep;
}

std::string describe(const SegmentSweep& sweep) {
  std::string s;
  if (!sweep.removed.empty()) {
    s = "removed " + std::to_string(sweep.removed.size()) +
        " shared-memory segment(s) left by dead processes:";
    for (size_t i = 0; i < sweep.removed.size(); ++i) {
      s += (i ? ", " : " ") + sweep.removed[i].path + " (pid " +
           std::to_string(sweep.removed[i].pid) + ")";
    }
  }
  for (const auto& e : sweep.errors) {
    s += (s.empty() ? "" : "; ") + std::string("cannot remove the orphaned segment ") + e;
  }
  return s;
}

}  // namespace loom::dist
