// What every tool that runs a netstack Stack with a TCP layer on an
// EventLoop needs: unguessable keys, and a poller that keeps the loop
// awake for the TCP layer.
#ifndef NETSTACK_RUNTIME_STACK_RUNTIME_H_
#define NETSTACK_RUNTIME_STACK_RUNTIME_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/tcp/tcp_layer.h"
#include "netstack/transport/notifier.h"

namespace netstack::runtime {

// 64 random bits from the kernel (getrandom), for the TCP layer's ISN and
// SYN-cookie keys and the UDP layer's ephemeral ports, which must not be
// guessable.
absl::StatusOr<uint64_t> RandomSeed();

// Runs nothing itself: it keeps the loop awake for the TCP layer's next
// deadline and, while readiness callbacks are pending, for an immediate
// turn. The work is done every turn by the embedder's turn-end hook
// (Notifier::Dispatch, then TcpLayer::Poll).
class TransportPoller : public eventloop::Poller {
 public:
  TransportPoller(const tcp::TcpLayer& tcp, const transport::Notifier& notifier)
      : tcp_(tcp), notifier_(notifier) {}
  Instant NextDeadline() const override {
    return notifier_.empty() ? tcp_.NextDeadline() : absl::InfinitePast();
  }
  void Poll(Instant) override {}

 private:
  const tcp::TcpLayer& tcp_;
  const transport::Notifier& notifier_;
};

}  // namespace netstack::runtime

#endif  // NETSTACK_RUNTIME_STACK_RUNTIME_H_
