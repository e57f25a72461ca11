// Opening file descriptors inside a named network namespace.
//
// A socket or TAP fd belongs to the network namespace its creator was in
// when it was created (the TAP device is created in that namespace by
// TUNSETIFF on the fd), and keeps it for its whole life. So an endpoint
// that serves a namespace only needs the calling thread to be in that
// namespace for the moment it creates its fd: enter, open, switch back.
//
// Names are those of `ip netns`: a bind mount of the namespace at
// /var/run/netns/NAME.
//
// Threading: setns(2) with CLONE_NEWNET switches only the calling thread,
// so other threads of the process never see the temporary switch. The
// thread's own namespace is saved from /proc/thread-self/ns/net (not
// /proc/self, which names the main thread's, and differs when this thread
// was moved before).
#ifndef NETSTACK_LINK_NETNS_H_
#define NETSTACK_LINK_NETNS_H_

#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace netstack::link {

// Where `ip netns` keeps its namespaces.
inline constexpr char kNetnsDir[] = "/var/run/netns";

// Runs `fn` with the calling thread in network namespace `netns_name`, then
// switches the thread back to the namespace it was in, whether `fn`
// succeeded or not. An empty name runs `fn` in the current namespace.
//
// Errors (fn is not run): NotFound "netns 'foo' does not exist" when there
// is no /var/run/netns/foo; InvalidArgument for a name with '/' or "..";
// PermissionDenied without CAP_SYS_ADMIN. Otherwise returns fn's status.
//
// If switching back fails the process aborts: a thread left in another
// namespace would silently create every later socket there. (It cannot
// fail in practice: the thread came from that namespace, and the saved fd
// keeps it alive.)
absl::Status RunInNetns(const std::string& netns_name,
                        absl::FunctionRef<absl::Status()> fn);

// RunInNetns for the common case: `open_fn` creates an fd (TAP, socket),
// which stays in the namespace after the switch back. The fd is returned
// to the caller, who owns it.
absl::StatusOr<int> OpenInNetns(
    const std::string& netns_name,
    absl::FunctionRef<absl::StatusOr<int>()> open_fn);

// Runs `fn` on a short-lived thread that has entered the network namespace
// `netns_fd` (an fd of /proc/PID/ns/net, of a `ip netns` bind mount, or one
// netstackd made), and returns fn's status once the thread has ended. The
// calling thread never moves, so this works where switching back would be
// refused: a process inside a user namespace of its own cannot setns(2)
// back into a namespace that the initial user namespace owns. Fds that
// `fn` creates keep their namespace, as with RunInNetns.
//
// Errors (fn is not run): PermissionDenied without CAP_SYS_ADMIN over the
// namespace's user namespace; InvalidArgument when `netns_fd` is not a
// network namespace.
absl::Status RunInNetnsFd(int netns_fd, absl::FunctionRef<absl::Status()> fn);

}  // namespace netstack::link

#endif  // NETSTACK_LINK_NETNS_H_
