// A TCP segment as the connection code sees it: parsed once at the
// boundary (incoming), or described before the layer emits it (outgoing).
#ifndef NETSTACK_TCP_SEGMENT_H_
#define NETSTACK_TCP_SEGMENT_H_

#include <array>
#include <cstdint>

#include "netstack/buffer/packet.h"
#include "netstack/buffer/payload_view.h"
#include "netstack/tcp/seqnum.h"
#include "netstack/transport/address.h"
#include "netstack/wire/tcp.h"

namespace netstack::tcp {

struct Segment {
  transport::FourTuple tuple;  // local = destination, remote = source
  wire::TcpRepr tcp;
  buffer::PayloadView payload;

  SeqNum seq() const { return SeqNum(tcp.seq); }
  SeqNum ack() const { return SeqNum(tcp.ack); }
  bool has(uint8_t flag) const { return (tcp.flags & flag) != 0; }
  // SEG.LEN: payload plus one for SYN and one for FIN.
  uint32_t len() const {
    return payload.size() + (has(wire::tcp_flag::kSyn) ? 1 : 0) +
           (has(wire::tcp_flag::kFin) ? 1 : 0);
  }
};

// The MSS we announce for a path: its MTU less the IP and TCP headers
// (RFC 9293 3.7.1; options are not counted, RFC 6691).
inline uint16_t MssForMtu(uint32_t mtu, bool v6) {
  const uint32_t hdrs = (v6 ? 40u : 20u) + 20u;
  const uint32_t m = mtu > hdrs ? mtu - hdrs : 536u;
  return static_cast<uint16_t>(m < 65535u ? m : 65535u);
}

// What to send: the header fields (ports are filled from the 4-tuple) and
// the payload views, shared with the send queue.
struct SegmentOut {
  wire::TcpRepr tcp;
  std::array<buffer::PayloadView, buffer::PacketBuffer::kMaxPayloadViews>
      payload;
  uint32_t views = 0;
  uint32_t payload_len = 0;
  // Wire packets this segment becomes (a super-segment: several), and the
  // payload per wire packet (the MSS) when there are several: the link
  // splits the super-segment (GSO).
  uint32_t packets = 1;
  uint16_t gso_size = 0;
};

}  // namespace netstack::tcp

#endif  // NETSTACK_TCP_SEGMENT_H_
