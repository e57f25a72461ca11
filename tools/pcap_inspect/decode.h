// Decodes one captured Ethernet frame with netstack/wire, layer by layer,
// the way the stack's receive path will: each layer's view is Check()ed,
// its Repr parsed, and the payload handed down. The first error stops the
// walk and is recorded with the layer that raised it.
#ifndef NETSTACK_TOOLS_PCAP_INSPECT_DECODE_H_
#define NETSTACK_TOOLS_PCAP_INSPECT_DECODE_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "netstack/wire/arp.h"
#include "netstack/wire/error.h"
#include "netstack/wire/ethernet.h"
#include "netstack/wire/icmpv4.h"
#include "netstack/wire/icmpv6.h"
#include "netstack/wire/ipv4.h"
#include "netstack/wire/ipv6.h"
#include "netstack/wire/tcp.h"
#include "netstack/wire/udp.h"

namespace netstack::tools {

struct DecodedFrame {
  std::optional<wire::EthernetRepr> eth;
  std::optional<wire::ArpRepr> arp;

  std::optional<wire::Ipv4Repr> ipv4;
  bool ipv4_checksum_valid = false;
  std::optional<wire::Ipv6Repr> ipv6;
  std::optional<wire::Ipv6ExtensionInfo> ipv6_ext;
  // The upper-layer protocol after IPv4 or the IPv6 extension headers.
  std::optional<uint8_t> l4_protocol;
  // Set for a non-first fragment: its data is not a transport header.
  bool non_first_fragment = false;

  std::optional<wire::TcpRepr> tcp;
  std::optional<wire::UdpRepr> udp;
  // Spans inside these point into the frame bytes given to DecodeFrame.
  std::optional<wire::Icmpv4Repr> icmpv4;
  std::optional<wire::Icmpv6Repr> icmpv6;
  // Transport payload bytes (TCP segment data, UDP datagram data).
  size_t l4_payload_len = 0;
  // TCP/UDP/ICMP checksum; unset when not checked (fragment, no checksum).
  std::optional<bool> l4_checksum_valid;

  // The first error, and the layer that raised it ("ethernet", "ipv4",
  // "tcp", ...). error == kOk means every layer present decoded.
  wire::WireError error = wire::WireError::kOk;
  std::string_view error_layer;
};

// Total: any byte string gives a DecodedFrame, never a crash.
DecodedFrame DecodeFrame(std::span<const uint8_t> frame);

// "S", "SA", "FPA", ... in tcpdump's letter order: F S R P A U E C.
std::string TcpFlagString(uint8_t flags);

}  // namespace netstack::tools

#endif  // NETSTACK_TOOLS_PCAP_INSPECT_DECODE_H_
