// `loom store`: a standalone rendezvous store server (TCPStoreServer) that runs until SIGINT or
// SIGTERM, and `loom store --check HOST:PORT`, which asks a running one how many keys it holds.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "cli.h"
#include "loom/distributed/store.h"
#include "loom/error.h"
#include "loom/parse.h"

namespace loom::cli {
namespace {

int check_server(const std::string& target, const Args& args) {
  const size_t colon = target.rfind(':');
  LOOM_CHECK(colon != std::string::npos && colon > 0,
             "[loom store] --check expects HOST:PORT but got '", target, "'");
  dist::TCPStoreOptions opt;
  opt.host = target.substr(0, colon);
  if (opt.host.size() >= 2 && opt.host.front() == '[')
    opt.host = opt.host.substr(1, opt.host.size() - 2);
  opt.port = static_cast<int>(parse_int(target.substr(colon + 1),
                                        "[loom store] --check " + target + ": the port", 1, 65535));
  opt.token = args.get_or("token", "");
  const double seconds = args.get_double("timeout", 5.0, 0.001, 1e6);
  opt.timeout = dist::Duration(static_cast<int64_t>(seconds * 1000));
  dist::TCPStore store(opt);
  std::printf("loom store at %s is up: %lld keys\n", target.c_str(),
              static_cast<long long>(store.num_keys()));
  return 0;
}

int run_store(const std::vector<std::string>& argv) {
  Args args(argv, {"help"},
            {"host", "port", "token", "check", "timeout", "max-frame-bytes",
             "max-client-queue-bytes", "max-buffered-bytes", "stalled-client-timeout"});
  if (args.flag("help")) {
    std::printf(
        "usage: loom store [--host H] [--port P] [--token T] [limits]\n"
        "       loom store --check HOST:PORT [--token T] [--timeout SECONDS]\n"
        "  Runs a rendezvous store server until SIGINT/SIGTERM (port 0 picks a free port; the\n"
        "  token defaults to LOOM_STORE_TOKEN), or checks that one answers.\n"
        "  limits: --max-frame-bytes N (64 MiB), --max-client-queue-bytes N (4 MiB: replies "
        "queued\n"
        "  for one client before its requests wait), --stalled-client-timeout SECONDS (30: a "
        "client\n"
        "  that reads none of its queued replies this long is closed), --max-buffered-bytes N\n"
        "  (1 GiB: all clients' buffers; the largest client is closed beyond it).\n");
    return 0;
  }
  if (auto target = args.get("check")) return check_server(*target, args);

  // Block the stop signals before the server's thread starts, so that it inherits the mask and
  // this thread receives them in sigwait().
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  dist::TCPStoreServerOptions opt;
  opt.host = args.get_or("host", "127.0.0.1");
  const int64_t port = args.get_int("port", 29500, 0, 65535);
  opt.port = static_cast<int>(port);
  opt.token = args.get_or("token", "");
  auto bytes_option = [&](const char* name, size_t fallback) {
    return static_cast<size_t>(
        args.get_int(name, static_cast<int64_t>(fallback), 1, int64_t{1} << 50));
  };
  opt.max_frame_bytes = bytes_option("max-frame-bytes", opt.max_frame_bytes);
  opt.max_client_queue_bytes = bytes_option("max-client-queue-bytes", opt.max_client_queue_bytes);
  opt.max_buffered_bytes = bytes_option("max-buffered-bytes", opt.max_buffered_bytes);
  if (args.get("stalled-client-timeout")) {
    const double seconds = args.get_double("stalled-client-timeout", 0, 0.001, 1e9);
    opt.stalled_client_timeout =
        dist::Duration(std::max<int64_t>(1, static_cast<int64_t>(seconds * 1000)));
  }
  dist::TCPStoreServer server(opt);
  std::printf("loom store listening on %s:%d\n", server.host().c_str(), server.port());
  std::fflush(stdout);

  int sig = 0;
  while (sigwait(&stop_signals, &sig) != 0) {
  }
  server.stop();
  const auto st = server.stats();
  std::printf(
      "loom store stopped by %s: %lld clients accepted, %lld keys, %lld rejected frames, %lld "
      "rejected tokens\n"
      "  buffers: peak %.1f MiB of %.1f MiB (max_buffered_bytes); %lld throttled clients, %lld "
      "closed for not reading replies, %lld closed over the budget\n",
      sig == SIGINT ? "SIGINT" : "SIGTERM", static_cast<long long>(st.accepted),
      static_cast<long long>(st.keys), static_cast<long long>(st.rejected_frames),
      static_cast<long long>(st.rejected_tokens),
      static_cast<double>(st.peak_buffered_bytes) / (1 << 20),
      static_cast<double>(opt.max_buffered_bytes) / (1 << 20), static_cast<long long>(st.throttled),
      static_cast<long long>(st.dropped_stalled), static_cast<long long>(st.dropped_over_budget));
  std::fflush(stdout);
  return 0;
}

const RegisterCommand kStore("store", "run a rendezvous store server (or --check one)", run_store);

}  // namespace
}  // namespace loom::cli
