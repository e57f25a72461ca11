// What a netstack_t is inside (libnetstack's C ABI, netstack.h): the
// runtime, the callback link when there is one, and the state the C
// functions keep between calls. For code built into the same library
// (libslirp's stand-in in netstack/slirp) that must reach the runtime
// behind a handle; nothing here is exported.
#ifndef NETSTACK_CAPI_CAPI_INTERNAL_H_
#define NETSTACK_CAPI_CAPI_INTERNAL_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "link/callback_endpoint.h"
#include "link/fd_util.h"
#include "netstack/capi/netstack.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/policy/policy.h"
#include "netstack/runtime/runtime.h"

namespace netstack::capi {

// netstack_stop()'s eventfd, read on the loop's thread: a Stop() there
// ends netstack_run() after its turn.
class StopHandler : public eventloop::Handler {
 public:
  explicit StopHandler(netstack_t* ns) : ns_(ns) {}
  void OnReadable(Instant now) override;

 private:
  netstack_t* const ns_;
};

}  // namespace netstack::capi

struct netstack_instance {
  // The callback link's way out (its send function calls these).
  netstack_send_frame_fn send_frame = nullptr;
  void* opaque = nullptr;

  // netstack_stop(): the eventfd (registered with the loop), a request
  // made before netstack_run() started, and whether it runs.
  netstack::link::UniqueFd stop_fd;
  std::unique_ptr<netstack::capi::StopHandler> stop_handler;
  std::atomic<bool> stop_requested{false};
  bool running = false;
  // Calls on the stack of this thread that run a turn (run, poll, input):
  // a nested one from a callback would re-enter the loop.
  int depth = 0;

  mutable std::string last_error;

  // Declared last, destroyed first: the link's send function and the
  // loop's stop handler point at the members above.
  std::unique_ptr<netstack::runtime::Runtime> rt;
  // The callback link (owned by the runtime's link chain); null for an fd
  // link.
  netstack::link::CallbackEndpoint* callback = nullptr;
};

namespace netstack::capi {

// Replaces `ns`'s egress policy (null: none) and judges its open flows
// again: what netstack_set_policy_file() does with a file's policy.
// Returns the number of flows the new policy ended.
absl::StatusOr<size_t> SetEgressPolicy(
    netstack_t* ns, std::shared_ptr<const policy::Policy> egress);

}  // namespace netstack::capi

#endif  // NETSTACK_CAPI_CAPI_INTERNAL_H_
