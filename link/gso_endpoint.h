// A decorator that gives any link software GSO: it tells the stack it
// takes TCP super-segments up to gso_max_size bytes, and splits each one
// into wire packets (link/gso.h) before the endpoint it wraps sees them.
//
//   auto link = GsoEndpoint::Create(std::move(packet_endpoint), packets);
//   stack.AttachLink(**link);
//
// Where it sits: outermost, right under the stack, e.g.
//   gso(sw 65535) -> sniffer(pcap:x) -> faults(...) -> packet:veth0
// so that the pcap records, and the fault injector drops, delays and
// corrupts, the packets that go on the wire, not super-segments.
//
// Transmit: every packet of the caller's chain is taken, in order; a GSO
// packet is replaced by its wire packets, any other packet passes as it
// is. The resulting chain goes to the inner endpoint in ONE Transmit call,
// so an fd endpoint sends it in one sendmmsg (up to its batch limit).
// Packets the inner endpoint leaves (its fd would block) are put back at
// the front of the caller's chain, already split, so nothing is lost or
// reordered; the caller retries them like with any endpoint. A
// super-segment the splitter refuses (malformed, no buffer, ...) is
// dropped and counted in gso_stats(); TCP retransmits its data.
//
// Receive, fds, timers and LinkStats are the inner endpoint's, forwarded
// unchanged: the receiver is attached straight to the inner endpoint.
//
// Ownership: the decorator owns the inner endpoint; the PacketPool that
// the wire packets come from must outlive it and every packet it produced.
#ifndef NETSTACK_LINK_GSO_ENDPOINT_H_
#define NETSTACK_LINK_GSO_ENDPOINT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "link/gso.h"
#include "netstack/base/time.h"
#include "netstack/buffer/packet.h"
#include "netstack/link/link_endpoint.h"

namespace netstack::link {

struct GsoEndpointOptions {
  // Largest super-segment (IP packet, bytes) announced to the stack in
  // LinkCapabilities::gso_max_size: above the inner MTU, at most 65535.
  uint32_t gso_max_size = kMaxGsoIpLen;
};

class GsoEndpoint final : public LinkEndpoint {
 public:
  // Wraps `inner` (owned). InvalidArgument, with the values, for a null
  // inner endpoint, a gso_max_size above 65535, or one not above the
  // inner endpoint's MTU (there would be nothing to split).
  static absl::StatusOr<std::unique_ptr<GsoEndpoint>> Create(
      std::unique_ptr<LinkEndpoint> inner, buffer::PacketPool& packets,
      const GsoEndpointOptions& options = {});

  GsoEndpoint(const GsoEndpoint&) = delete;
  GsoEndpoint& operator=(const GsoEndpoint&) = delete;
  ~GsoEndpoint() override = default;

  // LinkEndpoint.
  // The inner endpoint's, with gso_max_size from the options.
  LinkCapabilities Capabilities() const override;
  void Attach(LinkReceiver* receiver) override;
  // Returns what the inner endpoint returns: wire packets sent.
  size_t Transmit(buffer::PacketChain& chain, Instant now) override;
  int ReadFd() const override;
  void OnReadable(Instant now) override;
  int WriteFd() const override;
  Instant NextDeadline() const override;
  void Poll(Instant now) override;
  LinkStats Stats() const override;
  // "gso(sw 65535) -> <inner name>"
  std::string Name() const override;

  const GsoStats& gso_stats() const { return stats_; }
  LinkEndpoint& inner() { return *inner_; }

 private:
  GsoEndpoint(std::unique_ptr<LinkEndpoint> inner, buffer::PacketPool& packets,
              const GsoEndpointOptions& options);

  std::unique_ptr<LinkEndpoint> inner_;
  buffer::PacketPool& packets_;
  const GsoEndpointOptions options_;
  GsoStats stats_;
  // The split chain handed to the inner endpoint; empty between calls.
  buffer::PacketChain wire_;
};

}  // namespace netstack::link

#endif  // NETSTACK_LINK_GSO_ENDPOINT_H_
