// The init of -- CMD's PID namespace (sandbox.h): what runs in the child
// netstackd clones, from the clone to CMD's exec, and then pid 1's loop.
//
// It runs in a clone of a process that may have other threads, without
// exec: it makes system calls only (no malloc, no locks, no stdio), and
// everything it needs is built before the clone, in InitPlan.
#ifndef NETSTACK_NETSTACK_SANDBOX_SANDBOX_INIT_H_
#define NETSTACK_NETSTACK_SANDBOX_SANDBOX_INIT_H_

#include <sys/types.h>

#include <cstddef>

namespace netstack::sandbox::init {

// What the init and CMD report through the start pipe, one record per
// write (a pipe write this small is atomic). A failed step ends the start;
// a note (kOverlayEtc) does not.
struct ChildReport {
  int step;
  int err;
};
enum Step : int {
  kSetns,
  kUnshareMount,
  kPrivate,
  kBind,
  kOverlayEtc,
  kMountProc,
  kCover,
  kJoinUserns,
  kBecomeRoot,
  kLockMounts,
  kSetsid,
  kPty,
  kForkCommand,
  kControllingTty,
  kExec,
};
// "enter the guest's network namespace", ...
const char* StepName(int step);

struct InitPlan {
  int pipe_fd;
  int netns_fd;
  int userns_fd;  // CMD's user namespace; -1: stay in ours
  // Bind-mounted over /etc/resolv.conf; nullptr: leave it alone.
  const char* resolv_path;
  // Instead of the bind mount, when /etc/resolv.conf does not resolve: a
  // directory of ours where a tmpfs holds the upper layer of an overlay of
  // /etc whose resolv.conf is resolv_text.
  const char* overlay_dir;
  const char* resolv_text;
  size_t resolv_len;
  // Paths bound over with /dev/null in CMD's mount namespace (nullptr
  // ends the list; may be nullptr): the forward API's socket, which CMD
  // may then neither connect to, remove nor replace.
  const char* const* cover;
  // CMD gets a pty of its own (sandbox.h): its stdio fds that are
  // terminals become the pty, whose output the init copies to tty_out.
  // relay_input: the init also copies fd 0 (the user's terminal, raw
  // meanwhile) to the pty; without it CMD gets no input from the user.
  bool pty;
  bool relay_input;
  int tty_out;
  char** argv;
};

// The child netstackd clones into a new PID namespace: its pid 1.
[[noreturn]] void RunInit(const InitPlan& plan);

// fork(2) with clone flags, as a system call: glibc's fork() would run
// its atfork handlers and take locks (malloc's) that another thread of
// netstackd may hold; the child makes system calls only. A null stack
// means the child runs on a copy of ours, as after fork. (flags, stack,
// parent_tid, child_tid, tls) is x86-64's and arm64's order up to the last
// two, which are null either way.
pid_t CloneProcess(unsigned long flags);

// The signal that ends the init early (netstackd's death, or netstackd
// quitting before CMD): the init puts the user's terminal back first.
inline constexpr int kEndSignal = 12;  // SIGUSR2

}  // namespace netstack::sandbox::init

#endif  // NETSTACK_NETSTACK_SANDBOX_SANDBOX_INIT_H_
