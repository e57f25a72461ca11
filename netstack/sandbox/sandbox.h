// The sandbox runner's namespaces and its command (netstackd -- CMD), and
// attaching to a namespace that exists (--netns, --netns-pid).
//
//   netstackd (this process, the host's network namespace; user namespace
//   N: the caller's, or one of ours when not root)
//     |-- holds: the guest's netns G as an fd, the TAP fd inside it, and
//     |   CMD's user namespace C (a child of N that owns G)
//     `-- init (child, pid 1 of a new PID namespace; ours, no exec):
//         setns(G); a mount namespace of N's with a resolv.conf naming the
//         DNS address over /etc/resolv.conf and a /proc of the PID
//         namespace; then setns(C) and a second mount namespace, of C's,
//         in which every mount is locked; setsid()
//           `-- CMD (pid 2): execvp, root in C
//
// What CMD cannot do (docs/SECURITY.md, issue #30):
// - touch netstackd or the init: both are not dumpable (HideFromGuest,
//   before anything of the guest's runs), so /proc/PID/mem, ptrace and
//   /proc/PID/ns/* need CAP_SYS_PTRACE in the initial user namespace;
// - see them: its /proc is its PID namespace's, mounted by the init in a
//   mount namespace that C does not own, so CMD cannot unmount it (nor
//   /etc/resolv.conf) to find the host's /proc underneath; a start where
//   that /proc cannot be mounted is refused;
// - use a capability outside C: C owns G, CMD's mount namespace and
//   nothing else, so root's CMD administers its own network and no more
//   (no nsenter into the host's namespaces, no modules, no raw devices);
// - type into the user's terminal: CMD is in a session of its own. When
//   netstackd runs in the foreground of a terminal, CMD gets a pty of its
//   own as its controlling terminal and the init relays it (the user's
//   terminal is raw meanwhile, and restored); otherwise CMD has no
//   controlling terminal, so TIOCSTI on a terminal fd it inherited fails.
//
// The init passes SIGINT, SIGTERM and SIGHUP on to CMD (one each: the
// init is in its own session, so the terminal's ^C reaches netstackd, or
// CMD's own pty, never both), SIGWINCH as the pty's new size, reaps
// orphans, and exits with CMD's status when CMD ends; the kernel then
// kills what is left in the PID namespace (CMD's background children).
// CMD itself is not pid 1, since a namespace's init gets only the signals
// it handles.
//
// Not root: netstackd first makes a user namespace N of its own and maps
// the caller to root in it (as `unshare -r` and pasta do). It keeps its
// host network namespace, so its host sockets are the caller's. Root: N
// is the initial user namespace, and C maps its root to nobody (--runas:
// another uid, or 0 to keep root's), so that no uid check of the kernel
// takes CMD for root. netstackd enters G
// later through a short-lived thread per entry (link::RunInNetnsFd).
//
// Nothing is left behind: the guest's namespaces live as long as the
// init and our fds; the PID and mount namespaces are the init's; the
// resolv.conf file (and the overlay's directory) is removed once the
// init has it mounted.
#ifndef NETSTACK_NETSTACK_SANDBOX_SANDBOX_H_
#define NETSTACK_NETSTACK_SANDBOX_SANDBOX_H_

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "link/fd_util.h"

namespace netstack::sandbox {

// prctl(PR_SET_DUMPABLE, 0): no process of the guest's may read or write
// this one's memory (/proc/PID/mem, ptrace) or open its /proc/PID/ns/*,
// whatever user namespace it is root in; the init inherits it. Called
// before anything of the guest's can run or see us, and before joining a
// guest's user namespace (--netns-pid), but after this process wrote its
// own uid_map (MakeGuestNamespaces when not root: a non-dumpable
// process's /proc files belong to the initial namespace's root).
absl::Status HideFromGuest();

// The namespaces of -- CMD: the guest's network namespace, and the user
// namespace CMD runs in, which owns it.
struct GuestNamespaces {
  link::UniqueFd netns;
  link::UniqueFd userns;
};

// Who CMD's root is outside its user namespace, when netstackd is root
// (--runas UID[:GID]): nobody by default, as pasta does. uid 0 (--runas 0)
// maps every uid and gid to itself: CMD keeps root's uid, which the
// kernel's uid checks (/proc/sys, device nodes, root's files) take as
// root's, capabilities or not.
struct RunAs {
  uid_t uid = 65534;
  gid_t gid = 65534;
};

// Makes this process a user namespace's root when it is not root (it must
// still be single-threaded; `*made_userns` says so), then CMD's user
// namespace C below it and the guest's network namespace, owned by C.
// Root in C is the caller when netstackd is not root, and `runas` when it
// is. Errors say what to do: "user namespaces are off" names the sysctls.
absl::StatusOr<GuestNamespaces> MakeGuestNamespaces(bool* made_userns,
                                                    const RunAs& runas);

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
    // CMD's user namespace (GuestNamespaces::userns); -1: CMD stays in
    // ours (nothing but tests).
    int userns_fd = -1;
    // Non-empty: bind-mounted over /etc/resolv.conf in a mount namespace
    // of CMD's own. When /etc/resolv.conf does not exist (or is a
    // dangling symlink: systemd-resolved stopped), CMD's /etc is an
    // overlay whose resolv.conf is this; when that cannot be mounted
    // either, CMD starts without it and a note says so.
    std::string resolv_conf;
    // The terminal: when one of netstackd's stdio fds is a terminal, CMD
    // gets a pty of its own in its place, relayed by the init (the user's
    // keys too, when netstackd is the terminal's foreground job).
    bool allow_pty = true;
    // Absolute paths CMD may neither reach nor replace (the forward API's
    // socket): /dev/null is bound over each in CMD's mount namespace.
    std::vector<std::string> cover;
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
  // Passes a signal on to CMD, through the init (SIGWINCH: the init
  // copies the terminal's size to CMD's pty).
  void Signal(int signo) const;
  // Reaps the init if CMD has exited: true, and *status is what netstackd
  // exits with (CMD's exit code, or 128 + the signal that killed it).
  bool Reap(int* status);
  // What the start could not do and went on without (no resolv.conf),
  // one sentence each.
  const std::vector<std::string>& notes() const { return notes_; }

 private:
  SandboxCommand(pid_t pid, link::UniqueFd pidfd,
                 std::vector<std::string> notes)
      : pid_(pid), pidfd_(std::move(pidfd)), notes_(std::move(notes)) {}
  // Start's second half: reads the init's reports to the end of the
  // start pipe.
  static absl::StatusOr<SandboxCommand> Started(const Options& options,
                                                pid_t pid,
                                                link::UniqueFd start_pipe);

  pid_t pid_ = -1;
  link::UniqueFd pidfd_;
  std::vector<std::string> notes_;
};

// A pidfd for `pid` (NotFound when there is no such process).
absl::StatusOr<link::UniqueFd> OpenPidfd(pid_t pid);

}  // namespace netstack::sandbox

#endif  // NETSTACK_NETSTACK_SANDBOX_SANDBOX_H_
