// The link under tcp_benchmark's netstack role, built from the flags:
// --packet IFNAME or --tap NAME (in --netns), then the decorators from the
// stack outwards: software GSO (--swgso), the fault injector (--loss,
// --duplicate, --reorder, --latency; both directions) and the pcap sniffer
// (--pcap), as in netstackd: the pcap shows the wire after the faults, and
// the GSO splitter sits right under the stack so that the faults and the
// pcap see wire packets. With --hostgso the base endpoint
// writes super-segments whole with a virtio-net header instead.
#ifndef TOOLS_TCP_BENCHMARK_NETSTACK_LINK_H_
#define TOOLS_TCP_BENCHMARK_NETSTACK_LINK_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "link/fault_injector.h"
#include "link/gso_endpoint.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/link/link_endpoint.h"
#include "netstack/stack/stack.h"

namespace netstack::tools::bench {

enum class GsoMode { kOff, kSoftware, kHost };

// "off", "sw", "host".
const char* GsoModeName(GsoMode mode);

class NetstackLink {
 public:
  // Validates the flags and opens the link. The pools must outlive it.
  static absl::StatusOr<std::unique_ptr<NetstackLink>> FromFlags(
      buffer::ChunkPool& chunks, buffer::PacketPool& packets);
  ~NetstackLink();

  // Adds the NIC, --addr and --addr6 to `stack`.
  absl::Status Configure(stack::Stack& stack);
  // Watches the base endpoint's fd on `loop`.
  absl::Status Register(eventloop::EventLoop& loop);
  void Unregister(eventloop::EventLoop& loop);

  // The outermost endpoint, the one the stack talks to.
  link::LinkEndpoint& link() { return *outer_; }
  GsoMode gso_mode() const { return gso_mode_; }
  // Link, GSO and fault counters as "name value" lines.
  std::string FormatCounters() const;

 private:
  class Handler;
  NetstackLink() = default;

  std::unique_ptr<link::LinkEndpoint> outer_;
  link::FaultInjector* faults_ = nullptr;   // inside outer_, if any
  link::GsoEndpoint* gso_ = nullptr;        // outer_ itself, with --swgso
  std::unique_ptr<Handler> handler_;
  int read_fd_ = -1;
  GsoMode gso_mode_ = GsoMode::kOff;
  std::string nic_name_;
};

}  // namespace netstack::tools::bench

#endif  // TOOLS_TCP_BENCHMARK_NETSTACK_LINK_H_
