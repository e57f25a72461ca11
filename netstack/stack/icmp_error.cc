// ICMP and ICMPv6 errors handed to the transport they concern (RFC 1122
// 3.2.2.1 and 4.2.3.9, RFC 4443 2.4 (d)): the invoking datagram is one we
// sent, so its source is ours and its transport header tells the flow.
#include <cstdint>
#include <span>

#include "netstack/stack/stack.h"
#include "netstack/wire/bytes.h"
#include "netstack/wire/ip_protocol.h"

namespace netstack::stack {

const char* IcmpErrorKindName(IcmpErrorKind k) {
  switch (k) {
    case IcmpErrorKind::kNetUnreachable: return "net_unreachable";
    case IcmpErrorKind::kHostUnreachable: return "host_unreachable";
    case IcmpErrorKind::kProtocolUnreachable: return "protocol_unreachable";
    case IcmpErrorKind::kPortUnreachable: return "port_unreachable";
    case IcmpErrorKind::kAdminProhibited: return "admin_prohibited";
    case IcmpErrorKind::kFragmentationNeeded: return "fragmentation_needed";
    case IcmpErrorKind::kTimeExceeded: return "time_exceeded";
    case IcmpErrorKind::kParameterProblem: return "parameter_problem";
    case IcmpErrorKind::kOther: return "other";
  }
  return "?";
}

bool Stack::DeliverIcmpError(IcmpError e, std::span<const uint8_t> invoking,
                             Instant now) {
  // The invoking datagram's header: only the fields that name the flow
  // are read, each after a length check. Its total length and checksum
  // are not checked (the error quotes a truncated copy).
  size_t l4_at = 0;
  if (!e.v6) {
    if (invoking.size() < 20 || (invoking[0] >> 4) != 4) return false;
    const size_t ihl = static_cast<size_t>(invoking[0] & 0x0f) * 4;
    if (ihl < 20 || invoking.size() < ihl + 8) return false;
    // Only the first fragment carries the transport header.
    if ((wire::LoadBe16(&invoking[6]) & 0x1fff) != 0) return false;
    e.protocol = invoking[9];
    e.src4 = wire::Ipv4Address::FromBytes(&invoking[12]);
    e.dst4 = wire::Ipv4Address::FromBytes(&invoking[16]);
    if (!SentByUs(e.src4)) return false;
    l4_at = ihl;
  } else {
    if (invoking.size() < 40 + 8 || (invoking[0] >> 4) != 6) return false;
    // Extension headers are not walked: our TCP and UDP datagrams carry
    // none unless fragmented, and a fragment's error names no flow.
    e.protocol = invoking[6];
    e.src6 = wire::Ipv6Address::FromBytes(&invoking[8]);
    e.dst6 = wire::Ipv6Address::FromBytes(&invoking[24]);
    if (!SentByUs(e.src6)) return false;
    l4_at = 40;
  }
  e.l4 = invoking.subspan(l4_at);
  TransportHandler* t = nullptr;
  if (e.protocol == static_cast<uint8_t>(wire::IpProtocol::kTcp)) t = tcp_;
  if (e.protocol == static_cast<uint8_t>(wire::IpProtocol::kUdp)) t = udp_;
  if (t == nullptr) return false;
  ++counters_.icmp_errors_to_transport;
  t->OnIcmpError(e, now);
  return true;
}

}  // namespace netstack::stack
