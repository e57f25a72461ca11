// The one interface every link endpoint implements: TAP, AF_PACKET, UNIX
// stream, the in-memory channel, and the decorators (pcap sniffer, fault
// injector, later the GSO splitter) that wrap another endpoint.
//
// Threading and re-entrancy: an endpoint belongs to one event loop. Frames
// are delivered to the receiver only from OnReadable() or Poll(), never
// from inside Transmit(), so a stack that transmits while it handles a
// received batch is never re-entered.
#ifndef NETSTACK_LINK_LINK_ENDPOINT_H_
#define NETSTACK_LINK_LINK_ENDPOINT_H_

#include <cstdint>
#include <span>
#include <string>

#include "netstack/base/time.h"
#include "netstack/buffer/packet.h"
#include "netstack/buffer/payload_view.h"
#include "netstack/wire/address.h"

namespace netstack::link {

struct LinkCapabilities {
  // Largest IP packet (L3 MTU), not counting the Ethernet header.
  uint32_t mtu = 1500;
  // Largest super-segment the link accepts in one packet (host GSO or the
  // software splitter); 0 means no GSO: every packet fits the MTU.
  uint32_t gso_max_size = 0;
  // It also takes UDP super-datagrams (GsoType::kUdpV4/kUdpV6, USO) up
  // to gso_max_size: a TAP with virtio-net headers on Linux 6.2 or later.
  bool udp_gso = false;
  // The link (or the host kernel behind it) completes partial TCP/UDP
  // checksums of outgoing packets.
  bool tx_checksum_offload = false;
  // Frames carry a virtio-net header on the fd (IFF_VNET_HDR or
  // PACKET_VNET_HDR); the endpoint adds and strips it.
  bool vnet_hdr = false;
  // The link's own Ethernet address, used as the NIC's source MAC.
  wire::MacAddress mac;
};

// One received Ethernet frame. The view shares the chunk the endpoint read
// it into; the receiver may keep sub-views as long as it likes.
struct InboundFrame {
  buffer::PayloadView frame;
  // The host kernel vouched for the transport checksum
  // (TP_STATUS_CSUM_VALID, VIRTIO_NET_HDR_F_DATA_VALID): skip verifying.
  bool checksum_verified = false;
  // The transport checksum was never computed (CHECKSUM_PARTIAL from a
  // local sender, TP_STATUS_CSUMNOTREADY, VIRTIO_NET_HDR_F_NEEDS_CSUM): the
  // field holds only the pseudo-header sum, so it must not be verified.
  bool checksum_partial = false;
  // A USO super-frame (virtio-net GSO_UDP_L4, issue #34): one UDP header
  // whose payload is several datagrams of this many bytes each, the last
  // one shorter or equal. 0: one datagram.
  uint16_t udp_gso_size = 0;
};

// Receives frames from an endpoint. The span and the InboundFrame objects
// are valid only during the call; the PayloadViews inside may be copied
// (that shares the chunks) and kept.
class LinkReceiver {
 public:
  virtual ~LinkReceiver() = default;
  virtual void DeliverFrames(std::span<InboundFrame> frames, Instant now) = 0;
};

struct LinkStats {
  uint64_t rx_frames = 0;
  uint64_t rx_bytes = 0;
  uint64_t tx_frames = 0;
  uint64_t tx_bytes = 0;
  // Frames the endpoint could not send (error other than EAGAIN) or had to
  // drop (queue full, frame larger than the MTU, no chunk for receive).
  uint64_t tx_dropped = 0;
  uint64_t rx_dropped = 0;
  // System calls made, to measure batching.
  uint64_t tx_syscalls = 0;
  uint64_t rx_syscalls = 0;
  // Multi-queue links (TapOptions::queues): frames read from queues other
  // than the first, where the kernel puts flows we have not answered.
  uint64_t rx_frames_other_queues = 0;
  // Reads that stopped at their batch limit, frames perhaps still waiting
  // in the kernel: the other side sends faster than we read. (A TAP's
  // other queues, read a frame or so a turn, count only when the queue
  // still has frames after its share.) A backend
  // sheds new host connections while this grows (BackendLimits::
  // busy_connect_rate).
  uint64_t rx_batch_limit_hits = 0;
};

class LinkEndpoint {
 public:
  virtual ~LinkEndpoint() = default;

  virtual LinkCapabilities Capabilities() const = 0;

  // Sets where received frames go. Decorators attach themselves to the
  // endpoint they wrap and forward to their own receiver.
  virtual void Attach(LinkReceiver* receiver) = 0;

  // Sends the packets of `chain` (each one complete Ethernet frame:
  // headers then payload views), in order, and pops every packet that was
  // handed to the kernel or dropped. Packets left in the chain could not be
  // sent yet (the fd would block); call again when WriteFd() is writable.
  // Returns the number of packets sent.
  virtual size_t Transmit(buffer::PacketChain& chain, Instant now) = 0;

  // Event-loop integration for fd-based endpoints: the fd to watch for
  // input (-1 if none), and the call to make when it is readable. An
  // endpoint reads a bounded batch per call, so one busy link cannot
  // starve the loop.
  virtual int ReadFd() const { return -1; }
  virtual void OnReadable(Instant now) {}
  // The fd to watch for writability while Transmit left packets behind.
  virtual int WriteFd() const { return ReadFd(); }

  // Timer-driven work (a delay decorator's queue, the channel's
  // deliveries). NextDeadline() is kNever when there is none.
  virtual Instant NextDeadline() const { return kNever; }
  virtual void Poll(Instant now) {}

  virtual LinkStats Stats() const = 0;
  // Short human-readable description, e.g. "packet:veth0" or
  // "sniffer(pcap:/tmp/x.pcap) -> tap:tap0".
  virtual std::string Name() const = 0;
};

}  // namespace netstack::link

#endif  // NETSTACK_LINK_LINK_ENDPOINT_H_
