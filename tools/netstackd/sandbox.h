// The sandbox runner's namespaces and its command (netstackd -- CMD), and
// attaching to a namespace that exists (--netns, --netns-pid).
//
//   netstackd (this process, the host's network namespace)
//     |-- holds: the guest's netns as an fd, the TAP fd inside it
//     `-- init (child, pid 1 of a new PID namespace; ours, no exec):
//         setns(guest netns), its own mount namespace with a resolv.conf
//         naming the DNS address bind-mounted over /etc/resolv.conf and a
//         /proc of the PID namespace
//           `-- CMD (pid 2): execvp
//
// The init passes SIGINT, SIGTERM and SIGHUP on to CMD, reaps orphans,
// and exits with CMD's status when CMD ends; the kernel then kills what
// is left in the PID namespace (CMD's background children). CMD itself
// is not pid 1, since a namespace's init gets only the signals it
// handles.
//
// Not root: netstackd first makes a user namespace of its own and maps the
// caller to root in it (as `unshare -r` and pasta do). It keeps its host
// network namespace, so its host sockets are the caller's; the guest's
// namespace is owned by the new user namespace, which is what lets it
// create the TAP and enter the namespace later (a short-lived thread per
// entry: link::RunInNetnsFd, since this process cannot switch back into a
// namespace the initial user namespace owns).
//
// Nothing is left behind: the guest's namespace lives as long as the
// init and our fds; the PID and mount namespaces are the init's; the
// resolv.conf file is unlinked once the init has it mounted.
#ifndef TOOLS_NETSTACKD_SANDBOX_H_
#define TOOLS_NETSTACKD_SANDBOX_H_

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "link/fd_util.h"

namespace netstack::tools {

// Makes this process a user namespace's root when it is not root (it must
// still be single-threaded), then a new network namespace, returned as an
// fd. `*made_userns` says whether a user namespace was made. Errors say
// what to do: "user namespaces are off" names the sysctls.
absl::StatusOr<link::UniqueFd> MakeGuestNetns(bool* made_userns);

// The network namespace of process `pid` (slirp4netns's way: the PID of a
// process in it). `join_userns`: enter its user namespace first
// (--userns-pid, or netstackd not being root), so that we may act in the
// namespace. A pidfd of `pid` goes to *pidfd (to quit when it exits).
absl::StatusOr<link::UniqueFd> OpenNetnsOfPid(pid_t pid, bool join_userns,
                                             link::UniqueFd* pidfd);

// --netns NAME|PATH: a name under /var/run/netns, or a path to a
// namespace file (/proc/PID/ns/net, a bind mount).
absl::StatusOr<link::UniqueFd> OpenNetnsPath(const std::string& name_or_path,
                                            std::string* path);

// --userns PATH: enters that user namespace (single-threaded).
absl::Status JoinUserns(const std::string& path);

// CMD, started in the guest's namespace.
class SandboxCommand {
 public:
  struct Options {
    std::vector<std::string> argv;  // argv[0] is looked up in PATH
    int netns_fd = -1;
    // Non-empty: bind-mounted over /etc/resolv.conf in a mount namespace
    // of CMD's own.
    std::string resolv_conf;
  };
  // Starts the init and CMD under it, and waits until CMD has exec'd. An
  // exec failure or a failed namespace step is an error naming it
  // ("cannot run 'foo': No such file or directory"); the init is then
  // reaped.
  static absl::StatusOr<SandboxCommand> Start(const Options& options);

  SandboxCommand(SandboxCommand&& o) noexcept
      : pid_(std::exchange(o.pid_, -1)),
        pidfd_(std::move(o.pidfd_)),
        notes_(std::move(o.notes_)) {}
  SandboxCommand& operator=(SandboxCommand&&) = delete;
  // Kills and reaps CMD if it is still running.
  ~SandboxCommand();

  // The init's pid, here: the one process netstackd signals.
  pid_t pid() const { return pid_; }
  // Readable once CMD has exited, and with it the init (pidfd_open).
  int pidfd() const { return pidfd_.get(); }
  // Passes a signal on to CMD, through the init.
  void Signal(int signo) const;
  // Reaps the init if CMD has exited: true, and *status is what netstackd
  // exits with (CMD's exit code, or 128 + the signal that killed it).
  bool Reap(int* status);
  // What the start could not do and went on without (no /proc of CMD's
  // PID namespace), one sentence each.
  const std::vector<std::string>& notes() const { return notes_; }

 private:
  SandboxCommand(pid_t pid, link::UniqueFd pidfd,
                 std::vector<std::string> notes)
      : pid_(pid), pidfd_(std::move(pidfd)), notes_(std::move(notes)) {}
  // Start's second half: reads the init's reports to the end of the
  // start pipe.
  static absl::StatusOr<SandboxCommand> Started(
      const Options& options, pid_t pid, link::UniqueFd start_pipe,
      const std::string& resolv_path);

  pid_t pid_ = -1;
  link::UniqueFd pidfd_;
  std::vector<std::string> notes_;
};

// A pidfd for `pid` (NotFound when there is no such process).
absl::StatusOr<link::UniqueFd> OpenPidfd(pid_t pid);

}  // namespace netstack::tools

#endif  // TOOLS_NETSTACKD_SANDBOX_H_
