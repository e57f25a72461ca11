// What netstackd keeps once it is set up (docs/SECURITY.md): the
// capabilities it still uses, no way to gain new privileges, and only the
// system calls its loop makes.
//
// Drop() runs after the links, the namespaces, the forwards and CMD are
// set up, just before the event loop starts, on the main thread; the
// filter is synchronised to every thread the process has then (the
// guest-socket thread of netns_sockets.h). In order:
//   0. the mount namespace is detached: netstackd's own (unshared, made
//      private so nothing propagates either way) gets an empty, read-only
//      tmpfs as its root (pivot_root), and the old root is unmounted
//      (lazily, MNT_DETACH). After this no path leads anywhere: what
//      netstackd still needs from the filesystem it holds by fds opened
//      during setup (the TAP, the pcap file, the HTTP root, and its socket
//      files' directories for their removal at exit, link::DirEntryRef).
//      A sanitizer build keeps /proc in the new root, for the leak check;
//   1. the capability bounding set loses everything not kept (this needs
//      CAP_SETPCAP, so it goes first), then the permitted, effective and
//      inheritable sets are cut to the kept ones, and the ambient set is
//      cleared;
//   2. PR_SET_NO_NEW_PRIVS: no execve can give privileges back;
//   3. a seccomp filter (libseccomp) allows the calls of AllowedCalls(),
//      some only with the arguments netstackd passes (ioctl: the requests
//      of AllowedIoctls(); socket: TCP and UDP of IPv4 and IPv6; unlinkat:
//      no AT_REMOVEDIR), and traps every other one: the SIGSYS handler writes
//      "netstackd: system call N (NAME) is not allowed after setup (see
//      docs/SECURITY.md)" to stderr and ends the process with status 159
//      (128 + SIGSYS). A trap rather than a silent kill, so that a call we
//      missed names itself.
// CMD was started before this and is not affected: a child inherits a
// filter only when forked after it.
#ifndef NETSTACK_NETSTACK_SANDBOX_LEAST_PRIVILEGE_H_
#define NETSTACK_NETSTACK_SANDBOX_LEAST_PRIVILEGE_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"

namespace netstack::sandbox {

struct LeastPrivilegeOptions {
  // --forward-api may open a listener on a port below 1024 later.
  bool keep_net_bind_service = false;
  // --http-root: the HTTP service opens files below its root as requests
  // come (openat2 with RESOLVE_BENEATH, or openat read-only) and reads
  // them with pread.
  bool serve_files = false;
  // --sandbox=log: a call outside the list is allowed and logged by the
  // kernel (dmesg: "audit: type=1326 ... syscall=N") instead of trapped;
  // for finding what a new code path needs.
  bool log_only = false;
  // -- CMD: the one process kill(2) may signal; 0: none.
  int cmd_pid = 0;
  // The forward API's PID namespace check on kernels before 6.11
  // (pid_namespace_fence.h, its kProc way): a directory fd of /proc that
  // openat may open <pid>/ns/pid under, read-only. -1: none.
  int proc_dir_fd = -1;
  // --flow-log (netstack/policy/flow_log.h): the log's directory, an
  // O_PATH fd, under which openat may create and append to a file
  // (O_WRONLY | O_CREAT | O_APPEND, never O_TRUNC) and renameat (or
  // renameat2 without flags) may rename within it: the rotation. -1: none.
  int flow_log_dir_fd = -1;
  // --policy FILE's directory: openat read-only under it (SIGHUP reads the
  // file again). -1: none.
  int policy_dir_fd = -1;
  // Step 0 (above).
  bool detach_filesystem = true;
  // Capabilities, no_new_privs and the mount namespace are per thread in
  // Linux: this runs a step on every other thread netstackd has (the
  // guest-socket thread, netns_sockets.h's RunOnWorker) and returns the
  // first error. Unset: there is no other thread.
  std::function<absl::Status(absl::FunctionRef<absl::Status()>)>
      on_other_threads;
};

// The system calls the filter allows, by name (x86_64), with the reason
// for each group; docs/SECURITY.md lists them. Sanitizer builds add their
// runtimes' own (reports, leak checks at exit).
struct AllowedCall {
  const char* name;
  const char* why;
  // What the arguments must be:
  //   kAny: anything;
  //   kCmdPid: the first is CMD's pid (kill: only CMD can be signalled;
  //     without CMD, nothing);
  //   kOwnPid: the first is netstackd's own (tgkill: abort());
  //   kIoctlRequests: the request is one of AllowedIoctls();
  //   kInetSocket: the family is AF_INET or AF_INET6 and the type
  //     SOCK_STREAM or SOCK_DGRAM (flags aside);
  //   kNoFlags: the flags (third argument) are 0 (unlinkat: no
  //     AT_REMOVEDIR).
  enum class Args {
    kAny,
    kCmdPid,
    kOwnPid,
    kIoctlRequests,
    kInetSocket,
    kNoFlags,
  } args = Args::kAny;
};
const std::vector<AllowedCall>& AllowedCalls();

// The ioctl(2) requests the filter allows, with the reason for each.
struct AllowedIoctl {
  unsigned long request;
  const char* name;
  const char* why;
};
const std::vector<AllowedIoctl>& AllowedIoctls();

// Applies the three steps; an error names the step that failed (nothing
// is half-applied that would leave more than before, but a failure after
// step 1 leaves the capabilities dropped).
absl::Status DropPrivileges(const LeastPrivilegeOptions& options);

// Test-only (--sandbox-test=WHAT), a call the filter must stop:
// "execve": execve("/bin/true"); "kill": kill(1, 0), a process that is
// not CMD. Returns if the call was allowed (it should not be).
void AttemptForbiddenCall(const std::string& what);

}  // namespace netstack::sandbox

#endif  // NETSTACK_NETSTACK_SANDBOX_LEAST_PRIVILEGE_H_
