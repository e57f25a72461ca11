// Child processes of the tcp_benchmark driver: the roles it measures and
// the `ip`/`ethtool`/`sysctl` commands that build its topology.
//
// Every child runs in its own process group, so a Ctrl-C on the terminal
// reaches only the driver, which then decides in what order to stop
// things (KillAllChildren). A child can be started inside a named network
// namespace (setns(2) between fork and exec, as `ip netns exec` does, but
// without an extra process in between: wait4() then accounts exactly the
// role's own CPU time).
#ifndef TOOLS_TCP_BENCHMARK_CHILD_PROCESS_H_
#define TOOLS_TCP_BENCHMARK_CHILD_PROCESS_H_

#include <sys/types.h>

#include <deque>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace netstack::tools::bench {

struct ChildOptions {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH
  std::string netns;              // empty: the driver's own namespace
  // Copy each stderr line to the driver's stderr as it arrives (the
  // client's interval lines).
  bool echo_stderr = false;
  // Keep all of stderr (stderr_text()), not only its tail.
  bool keep_stderr = false;
};

// How a child ended, with the CPU time wait4() accounted to it.
struct ChildExit {
  int wait_status = 0;
  double cpu_seconds = 0;  // ru_utime + ru_stime
  bool Succeeded() const;
  std::string Describe() const;  // "exited with 1", "killed by SIGTERM"
};

class ChildProcess {
 public:
  // Forks and execs; stdout and stderr go to pipes read by Pump().
  static absl::StatusOr<ChildProcess> Start(const ChildOptions& options);

  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&&) = delete;
  // Kills (SIGKILL) and reaps a child still running.
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  const std::string& stdout_text() const { return stdout_; }
  bool stderr_contains(std::string_view needle) const;
  // The last stderr lines, for error messages.
  std::string StderrTail() const;
  // All of stderr, with ChildOptions::keep_stderr (else empty).
  const std::string& stderr_text() const { return stderr_all_; }
  // The command line, quoted for error messages.
  std::string CommandLine() const;

  // Signals the child's process group.
  void Signal(int signo) const;
  // Reaps the child if it has exited (without blocking); true once reaped.
  bool TryReap();
  bool exited() const { return reaped_; }
  // Until both pipes reached end of file.
  bool output_open() const { return stdout_fd_ >= 0 || stderr_fd_ >= 0; }
  const ChildExit& exit() const { return exit_; }

 private:
  friend void PumpOutput(std::vector<ChildProcess*> children,
                         absl::Duration timeout);
  ChildProcess() = default;
  void Consume(int fd, const char* data, size_t len);
  void CloseFds();

  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  int stderr_fd_ = -1;
  bool echo_stderr_ = false;
  bool keep_stderr_ = false;
  bool reaped_ = false;
  ChildExit exit_;
  std::vector<std::string> argv_;
  std::string stdout_;
  std::string stderr_partial_;
  std::deque<std::string> stderr_lines_;
  std::string stderr_all_;
};

// Waits up to `timeout` for output from any of `children` (a signal cuts
// the wait short) and moves what arrived into each child's buffers.
void PumpOutput(std::vector<ChildProcess*> children, absl::Duration timeout);

// Pumps output until `child` has exited, or `timeout` passed (then it is
// sent SIGTERM, and SIGKILL 2 s later). Returns how it ended.
ChildExit WaitChild(ChildProcess& child, std::vector<ChildProcess*> others,
                    absl::Duration timeout);

// Runs a command to completion (at most 30 s). Error: Internal
// "`ip link add ...` exited with 2: <its stderr>".
absl::Status RunCommand(std::vector<std::string> argv,
                        const std::string& netns = "");

}  // namespace netstack::tools::bench

#endif  // TOOLS_TCP_BENCHMARK_CHILD_PROCESS_H_
