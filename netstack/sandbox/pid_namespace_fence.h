// Tells whether the peer of a UNIX socket runs inside a given PID
// namespace (CMD's) or in one nested below it: the forward API's way to
// refuse CMD (review 2026-12-06, finding 5). CMD has netstackd's uid and
// sees the host's files, so the socket's mode keeps it out no better than
// it keeps out the operator; its PID namespace, which it cannot leave, can.
//
// The fenced namespace is opened at setup, by the process's pidfd or
// /proc/<pid>/ns/pid, while netstackd still has its capabilities and its
// filesystem (an unprivileged netstackd may not inspect CMD's init, a
// non-dumpable clone of itself: then through a child of the init, CMD). A
// peer is then checked by SO_PEERCRED's pid (the connecting process, as a
// number in netstackd's PID namespace):
//   - kTranslate (Linux 6.11+): NS_GET_TGID_IN_PIDNS asks the kernel for
//     that process's number in the fenced namespace; it has one exactly
//     when it runs there or in a namespace below. Nothing about the peer
//     is opened, so any peer can be checked whatever its user or
//     capabilities. A number can be reused once its process is gone: the
//     peer's pidfd (SO_PEERPIDFD) must still show that process after the
//     question (PIDFD_GET_INFO, Linux 6.13; before 6.13 that last check is
//     skipped).
//   - kProc (older kernels): <pid>/ns/pid opened through a directory fd
//     of /proc taken at setup (after setup netstackd has no filesystem:
//     least_privilege.h step 0), and walked up (NS_GET_PARENT) until it
//     meets the fenced namespace (refused) or leaves netstackd's scope
//     (EPERM: admitted). That open needs ptrace read access to the peer,
//     which a netstackd without capabilities lacks for another user's
//     process or a more capable one (root's, to a root netstackd): such a
//     peer is refused (fail closed). The seccomp filter must let openat
//     use that fd (LeastPrivilegeOptions::proc_dir_fd), and a pid reused
//     between the connect and the check is not noticed.
// A peer whose pid has no number in netstackd's PID namespace (SO_PEERCRED
// gives 0) runs in no namespace below it, so not in CMD's: admitted. A
// peer that cannot be told is refused.
#ifndef NETSTACK_NETSTACK_SANDBOX_PID_NAMESPACE_FENCE_H_
#define NETSTACK_NETSTACK_SANDBOX_PID_NAMESPACE_FENCE_H_

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "link/fd_util.h"

namespace netstack::sandbox {

class PidNamespaceFence {
 public:
  enum class Method { kTranslate, kProc };
  struct Options {
    // Whose namespace it is, in the refusals: "it runs inside CMD's PID
    // namespace".
    std::string owner = "CMD's";
    // Tests: the kProc way on a kernel that has the other.
    bool force_proc = false;
  };

  // Fences the PID namespace of process `pid` (CMD's init, a child of
  // ours), opened now. NotFound: no such process; FailedPrecondition:
  // `pid` shares netstackd's PID namespace or is not below it (there is
  // nothing to tell apart by namespace), or (kProc) /proc is not a proc
  // of netstackd's PID namespace.
  static absl::StatusOr<std::unique_ptr<PidNamespaceFence>> Below(
      pid_t pid, Options options);
  static absl::StatusOr<std::unique_ptr<PidNamespaceFence>> Below(pid_t pid) {
    return Below(pid, Options());
  }

  // OK: the peer of the connected UNIX socket `fd` is outside the fenced
  // namespace. PermissionDenied, saying why: inside it, or it could not
  // be told.
  absl::Status CheckPeer(int fd) const;

  Method method() const { return method_; }
  // kProc: the /proc directory fd the check opens names under; else -1.
  int proc_dir_fd() const { return proc_.get(); }

 private:
  PidNamespaceFence(Method method, std::string owner, link::UniqueFd proc,
                    link::UniqueFd ns, dev_t dev, ino_t ino);
  absl::Status CheckByTranslation(int fd, pid_t pid) const;
  absl::Status CheckByWalk(pid_t pid) const;
  absl::Status Inside() const;

  const Method method_;
  const std::string owner_;
  link::UniqueFd proc_;  // kProc only
  link::UniqueFd ns_;    // the fenced namespace; held, so (dev_, ino_)
                         // stay its own
  const dev_t dev_;
  const ino_t ino_;
};

}  // namespace netstack::sandbox

#endif  // NETSTACK_NETSTACK_SANDBOX_PID_NAMESPACE_FENCE_H_
