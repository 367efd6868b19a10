// SIGTERM and SIGINT for processes with process groups (distributed layer, internal). See Note
// [Stop signals] in signal_abort.cpp.
//
// Thread-safety: every function may be called from any thread; abort_process_groups_from_signal()
// (process_group.h) also from a signal handler.
#pragma once

#include <string>

#include "loom/distributed/process_group.h"

namespace loom::dist::stop_signals {

// Installs loom's SIGTERM and SIGINT handlers where the disposition is still the default, and
// starts the thread that acts on them. Called by ProcessGroup::create.
void install();

// Every live group is registered, so that a stop signal can abort it.
void add_group(ProcessGroup::Impl* group);
void remove_group(ProcessGroup::Impl* group);

// The signal that loom's own handler received, once it did: the process is to exit by it (the
// collective that fails because of it writes its flight record and calls exit_by()). 0 otherwise,
// also when the application's handler called abort_process_groups_from_signal().
int exit_signal();

// Ends the process by `sig` with its default action (exit status 128 + sig), after flushing stdio.
[[noreturn]] void exit_by(int sig);

// "SIGTERM", "SIGINT", "signal 40".
std::string signal_name(int sig);

}  // namespace loom::dist::stop_signals
