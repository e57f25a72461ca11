#include "netstack/wire/ipv6.h"

namespace netstack::wire {
namespace {

constexpr uint8_t kHopByHop = static_cast<uint8_t>(IpProtocol::kHopByHop);
constexpr uint8_t kRouting = static_cast<uint8_t>(IpProtocol::kIpv6Route);
constexpr uint8_t kFragment = static_cast<uint8_t>(IpProtocol::kIpv6Frag);
constexpr uint8_t kAuthentication = static_cast<uint8_t>(IpProtocol::kAh);
constexpr uint8_t kDestinationOptions =
    static_cast<uint8_t>(IpProtocol::kIpv6Opts);

// Offsets shared by every extension header walked here.
constexpr size_t kExtNextHeaderOffset = 0;
constexpr size_t kExtLengthOffset = 1;
// Every extension header is at least 8 bytes (RFC 8200 section 4; AH's
// minimum of 12 bytes is enforced by its length formula).
constexpr size_t kExtMinLen = 8;
// Routing header (RFC 8200 section 4.4): Routing Type, Segments Left.
constexpr size_t kRoutingTypeOffset = 2;
constexpr size_t kSegmentsLeftOffset = 3;

// Option types with a meaning here (RFC 8200 section 4.2).
constexpr uint8_t kOptionPad1 = 0;
constexpr uint8_t kOptionPadN = 1;

// Length in bytes of the extension header of kind `next_header` whose
// length byte is `length_field`.
size_t ExtensionHeaderLen(uint8_t next_header, uint8_t length_field) {
  switch (next_header) {
    case kFragment:
      return Ipv6FragmentHeader::kHeaderLen;
    case kAuthentication:
      // RFC 4302 section 2.2: 4-byte units, minus 2.
      return (size_t{length_field} + 2) * 4;
    default:
      // RFC 8200 sections 4.3, 4.4, 4.6: 8-byte units, not counting the
      // first 8 bytes.
      return (size_t{length_field} + 1) * 8;
  }
}

// Checks the type-length-value options of a Hop-by-Hop or Destination
// Options header (`header` is the whole header, `header_offset` its offset
// in the payload) and records the first option that requires discarding.
WireError WalkOptions(std::span<const uint8_t> header, size_t header_offset,
                      Ipv6ExtensionInfo& out) {
  size_t i = 2;  // after Next Header and Hdr Ext Len
  while (i < header.size()) {
    const uint8_t type = header[i];
    // Pad1 is the one option without a length byte.
    if (type == kOptionPad1) {
      ++i;
      continue;
    }
    if (header.size() - i < 2) return WireError::kOptionOverflow;
    const size_t option_len = 2 + size_t{header[i + 1]};
    if (option_len > header.size() - i) return WireError::kOptionOverflow;
    // Action 00 means "skip over this option and continue" (RFC 8200
    // section 4.2), so only options with other actions are reported.
    if (type != kOptionPadN && (type >> 6) != 0 &&
        !out.unrecognized_option.has_value()) {
      out.unrecognized_option = Ipv6UnrecognizedOption{header_offset + i, type};
    }
    i += option_len;
  }
  return WireError::kOk;
}

}  // namespace

WireError Ipv6Repr::Parse(const Ipv6Packet& packet, Ipv6Repr& out) {
  if (WireError e = packet.Check(); e != WireError::kOk) return e;
  out.src = packet.Source();
  out.dst = packet.Destination();
  out.next_header = packet.NextHeader();
  out.hop_limit = packet.HopLimit();
  out.traffic_class = packet.TrafficClass();
  out.flow_label = packet.FlowLabel();
  out.payload_len = packet.PayloadLength();
  return WireError::kOk;
}

void Ipv6Repr::Emit(MutableIpv6Packet packet) const {
  packet.SetVersionTrafficClassFlowLabel(traffic_class, flow_label);
  packet.SetPayloadLength(payload_len);
  packet.SetNextHeader(next_header);
  packet.SetHopLimit(hop_limit);
  packet.SetSource(src);
  packet.SetDestination(dst);
}

WireError Ipv6FragmentRepr::Parse(const Ipv6FragmentHeader& header,
                                  Ipv6FragmentRepr& out) {
  if (WireError e = header.Check(); e != WireError::kOk) return e;
  out.next_header = header.NextHeader();
  out.offset = header.FragmentOffset();
  out.more_fragments = header.MoreFragments();
  out.identification = header.Identification();
  return WireError::kOk;
}

void Ipv6FragmentRepr::Emit(MutableIpv6FragmentHeader header) const {
  header.SetNextHeader(next_header);
  header.SetOffsetAndMoreFragments(offset, more_fragments);
  header.SetIdentification(identification);
}

bool IsIpv6ExtensionHeader(uint8_t next_header) {
  switch (next_header) {
    case kHopByHop:
    case kRouting:
    case kFragment:
    case kAuthentication:
    case kDestinationOptions:
      return true;
    default:
      return false;
  }
}

WireError WalkIpv6ExtensionHeaders(std::span<const uint8_t> payload,
                                   uint8_t first_next_header,
                                   Ipv6ExtensionInfo& out) {
  out = Ipv6ExtensionInfo{};
  uint8_t next_header = first_next_header;
  size_t offset = 0;
  size_t count = 0;
  while (IsIpv6ExtensionHeader(next_header)) {
    // RFC 8200 section 4.1: Hop-by-Hop must immediately follow the fixed
    // header; section 4 has nodes reject it elsewhere.
    if (next_header == kHopByHop && count != 0) {
      return WireError::kBadExtensionHeader;
    }
    if (count == kMaxIpv6ExtensionHeaders) {
      return WireError::kBadExtensionHeader;
    }
    const size_t remaining = payload.size() - offset;
    if (remaining < kExtMinLen) return WireError::kTruncated;
    const std::span<const uint8_t> rest = payload.subspan(offset);
    const size_t len = ExtensionHeaderLen(next_header, rest[kExtLengthOffset]);
    if (next_header == kAuthentication && len % 8 != 0) {
      return WireError::kBadExtensionHeader;
    }
    if (len > remaining) return WireError::kTruncated;
    const std::span<const uint8_t> header = rest.first(len);

    switch (next_header) {
      case kHopByHop:
      case kDestinationOptions:
        if (WireError e = WalkOptions(header, offset, out);
            e != WireError::kOk) {
          return e;
        }
        break;
      case kRouting:
        if (!out.routing.has_value()) {
          out.routing = Ipv6RoutingInfo{offset, header[kRoutingTypeOffset],
                                        header[kSegmentsLeftOffset]};
        }
        break;
      case kFragment: {
        // One packet is at most one fragment of one original packet.
        if (out.fragment.has_value()) return WireError::kBadExtensionHeader;
        Ipv6FragmentInfo info;
        info.header_offset = offset;
        // Cannot fail: `header` is exactly kHeaderLen bytes.
        (void)Ipv6FragmentRepr::Parse(Ipv6FragmentHeader(header), info.header);
        out.fragment = info;
        if (info.header.offset != 0) {
          // The data of a non-first fragment continues the original
          // packet's fragmentable part at some offset; it is not a header.
          out.upper_protocol = info.header.next_header;
          out.upper_offset = offset + len;
          out.header_count = count + 1;
          return WireError::kOk;
        }
        break;
      }
      default:  // kAuthentication: nothing to interpret.
        break;
    }
    next_header = header[kExtNextHeaderOffset];
    offset += len;
    ++count;
  }
  out.upper_protocol = next_header;
  out.upper_offset = offset;
  out.header_count = count;
  return WireError::kOk;
}

}  // namespace netstack::wire
