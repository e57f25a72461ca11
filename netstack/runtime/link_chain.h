// The link a tool's stack talks to, built the same way by netstackd and
// tcp_benchmark: a host endpoint (AF_PACKET socket on an interface, or a
// TAP device), then the decorators from the wire towards the stack:
//
//   stack -> [GsoEndpoint] -> [FaultInjector] -> [SnifferEndpoint] -> host
//
// The pcap shows the wire after the faults, and the software GSO splitter
// sits right under the stack so that the faults and the pcap see wire
// packets. With host GSO the host endpoint writes super-segments whole
// (virtio-net header) and there is no splitter.
#ifndef NETSTACK_RUNTIME_LINK_CHAIN_H_
#define NETSTACK_RUNTIME_LINK_CHAIN_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "link/fault_injector.h"
#include "link/gso_endpoint.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/link/link_endpoint.h"
#include "netstack/wire/address.h"

namespace netstack::runtime {

// The host side: exactly one of `packet_interface`, `tap_name` and
// `tap_fd`.
struct HostLinkOptions {
  std::string packet_interface;
  std::string tap_name;
  int tap_fd = -1;  // a TAP a parent opened (TapEndpoint::FromFd); owned
  std::string netns;  // empty: ours
  int tap_netns_fd = -1;  // with tap_name: its namespace as an fd (not owned)
  uint32_t mtu = 0;   // 0: the interface's (TAP: the endpoint's default)
  std::optional<wire::MacAddress> mac;
  uint32_t host_gso_max_size = 0;  // > 0: host GSO with this size
  uint32_t tap_tx_queue_len = 0;   // > 0: TapOptions::tx_queue_len
  uint32_t tap_queues = 1;         // TapOptions::queues
};

// The decorators; each is left out when off.
struct LinkDecorators {
  std::string pcap;  // empty: no sniffer
  std::optional<link::FaultInjectorOptions> faults;
  uint32_t software_gso_max_size = 0;  // > 0: GsoEndpoint
};

struct LinkChain {
  std::unique_ptr<link::LinkEndpoint> outer;  // the one the stack talks to
  link::LinkEndpoint* host = nullptr;         // owned through `outer`
  link::FaultInjector* faults = nullptr;      // if any
  link::GsoEndpoint* gso = nullptr;           // if any (then outer itself)
  int read_fd = -1;      // the host endpoint's; its readiness drives outer
  std::string nic_name;  // the interface or TAP name
};

// Opens the host endpoint. Errors name the interface. `notes`, if given,
// gets a line for each thing asked for that the link could not do (a
// TAP with fewer queues than tap_queues).
absl::StatusOr<std::unique_ptr<link::LinkEndpoint>> OpenHostLink(
    const HostLinkOptions& options, buffer::ChunkPool& chunks,
    std::vector<std::string>* notes = nullptr);

// Wraps `host` in the decorators. Errors start with the flag they come
// from ("--pcap: ...", "faults: ...", "--gso: ..."). The pools must
// outlive the chain.
absl::StatusOr<LinkChain> DecorateLink(std::unique_ptr<link::LinkEndpoint> host,
                                       const LinkDecorators& decorators,
                                       buffer::ChunkPool& chunks,
                                       buffer::PacketPool& packets);

}  // namespace netstack::runtime

#endif  // NETSTACK_RUNTIME_LINK_CHAIN_H_
