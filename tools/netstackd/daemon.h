// netstackd's daemon: a Config (config.h) becomes the guest's namespace
// (sandbox.h), a Runtime (netstack/runtime/runtime.h) with the link and
// the backend, the services, the APIs, CMD and the sandbox, in that
// order; then the runtime's loop runs until netstackd is told to stop or
// what it serves is gone.
#ifndef TOOLS_NETSTACKD_DAEMON_H_
#define TOOLS_NETSTACKD_DAEMON_H_

#include "tools/netstackd/config.h"

namespace netstack::tools {

// Runs until a stop; returns netstackd's exit status: CMD's with -- CMD,
// 0 after a clean stop, 1 when something could not be set up (the reason
// on stderr), 126 or 127 when CMD could not be started or found.
int RunDaemon(const Config& config);

}  // namespace netstack::tools

#endif  // TOOLS_NETSTACKD_DAEMON_H_
