// IP protocol numbers, shared by the IPv4 Protocol field (RFC 791 section
// 3.1) and the IPv6 Next Header field (RFC 8200 section 3). Values are from
// the IANA "Assigned Internet Protocol Numbers" registry.
//
// The wire field is a plain uint8_t; this enum names the values the stack
// handles. Any other byte is still a valid protocol number, so parsers keep
// the raw byte and compare against these names.
#ifndef NETSTACK_WIRE_IP_PROTOCOL_H_
#define NETSTACK_WIRE_IP_PROTOCOL_H_

#include <cstdint>

namespace netstack::wire {

enum class IpProtocol : uint8_t {
  kHopByHop = 0,     // IPv6 Hop-by-Hop Options (RFC 8200 section 4.3)
  kIcmp = 1,         // RFC 792
  kTcp = 6,          // RFC 9293
  kUdp = 17,         // RFC 768
  kIpv6Route = 43,   // IPv6 Routing header (RFC 8200 section 4.4)
  kIpv6Frag = 44,    // IPv6 Fragment header (RFC 8200 section 4.5)
  kEsp = 50,         // RFC 4303
  kAh = 51,          // RFC 4302
  kIcmpv6 = 58,      // RFC 4443
  kIpv6NoNext = 59,  // No Next Header (RFC 8200 section 4.7)
  kIpv6Opts = 60,    // IPv6 Destination Options (RFC 8200 section 4.6)
};

}  // namespace netstack::wire

#endif  // NETSTACK_WIRE_IP_PROTOCOL_H_
