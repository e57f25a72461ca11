// Ctrl-C and kill(1) for the tcp_benchmark driver.
//
// The driver's children run in their own process groups (child_process.h),
// so a terminal's SIGINT reaches only the driver. The handler installed
// here forwards SIGTERM to the process group of every registered child and
// records the signal; the driver sees Interrupted() at its next step,
// stops measuring and tears its topology down on the normal path (no
// cleanup work inside the handler beyond kill(2), which is
// async-signal-safe). Later signals are ignored, so that pressing Ctrl-C
// again does not interrupt the teardown.
#ifndef TOOLS_TCP_BENCHMARK_INTERRUPT_H_
#define TOOLS_TCP_BENCHMARK_INTERRUPT_H_

#include <sys/types.h>

namespace netstack::tools::bench {

// SIGINT and SIGTERM, without SA_RESTART: a blocking poll(2) returns EINTR.
void InstallInterruptHandlers();

bool Interrupted();
// The signal that interrupted the run, 0 if none.
int InterruptSignal();

// Children the handler signals. Register right after fork(2) with SIGINT
// and SIGTERM blocked (BlockInterrupts), so none escapes. At most
// kMaxChildren at once; beyond that RegisterChild returns false.
inline constexpr int kMaxChildren = 16;
bool RegisterChild(pid_t pgid);
void UnregisterChild(pid_t pgid);

// Blocks SIGINT/SIGTERM for the lifetime of the object (around fork).
class BlockInterrupts {
 public:
  BlockInterrupts();
  ~BlockInterrupts();
  BlockInterrupts(const BlockInterrupts&) = delete;
  BlockInterrupts& operator=(const BlockInterrupts&) = delete;
};

// In a forked child before exec: default dispositions, nothing blocked.
void ResetSignalsInChild();

}  // namespace netstack::tools::bench

#endif  // TOOLS_TCP_BENCHMARK_INTERRUPT_H_
