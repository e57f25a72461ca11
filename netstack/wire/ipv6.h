// IPv6 fixed header (RFC 8200 section 3), the Fragment header (section 4.5)
// and a walk over the extension header chain (section 4).
//
//    0                   1                   2                   3
//    0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   |Version| Traffic Class |           Flow Label                  |
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   |         Payload Length        |  Next Header  |   Hop Limit   |
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   |                                                               |
//   +                                                               +
//   |                         Source Address (16)                   |
//   +                                                               +
//   |                                                               |
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   |                                                               |
//   +                                                               +
//   |                      Destination Address (16)                 |
//   +                                                               +
//   |                                                               |
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Fragment header (RFC 8200 section 4.5), 8 bytes:
//
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   |  Next Header  |   Reserved    |      Fragment Offset    |Res|M|
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   |                         Identification                        |
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Hop-by-Hop / Destination Options / Routing headers start with Next Header
// and Hdr Ext Len (8-byte units, not counting the first 8 bytes); the
// Authentication Header (RFC 4302 section 2.2) starts with Next Header and
// Payload Len (4-byte units, minus 2).
#ifndef NETSTACK_WIRE_IPV6_H_
#define NETSTACK_WIRE_IPV6_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <type_traits>

#include "netstack/wire/address.h"
#include "netstack/wire/bytes.h"
#include "netstack/wire/error.h"
#include "netstack/wire/ip_protocol.h"

namespace netstack::wire {

// View over the bytes of one IPv6 packet, fixed header first. The span may
// be longer than 40 + Payload Length: Ethernet pads frames to 60 bytes, so
// a short packet arrives with trailing bytes that are not part of it.
//
// Guarantee: after Check() returns kOk, every accessor reads inside the
// buffer and Payload() ends at Payload Length, not at the end of the buffer.
template <typename Byte>
class Ipv6PacketT {
 public:
  static constexpr bool kMutable = !std::is_const_v<Byte>;
  // Version (4 bits), Traffic Class (8), Flow Label (20) share one word.
  static constexpr size_t kVersionTcFlowOffset = 0;
  static constexpr size_t kPayloadLengthOffset = 4;
  static constexpr size_t kNextHeaderOffset = 6;
  static constexpr size_t kHopLimitOffset = 7;
  static constexpr size_t kSrcOffset = 8;
  static constexpr size_t kDstOffset = 24;
  static constexpr size_t kHeaderLen = 40;
  static constexpr uint8_t kVersion = 6;
  static constexpr uint32_t kFlowLabelMask = 0x000fffff;

  explicit Ipv6PacketT(std::span<Byte> bytes) : bytes_(bytes) {}

  // Validates, in order: the fixed header fits (kTruncated); Version is 6
  // (kBadVersion); Payload Length is not the jumbogram marker (kUnsupported,
  // see below); 40 + Payload Length fits the buffer (kBadLength).
  //
  // RFC 2675 jumbograms set Payload Length to 0 and carry the real length
  // in a Hop-by-Hop option. They need links with an MTU above 65575 bytes,
  // which this stack does not drive, so Payload Length 0 with a Hop-by-Hop
  // header is reported as unsupported rather than misread as empty.
  [[nodiscard]] WireError Check() const {
    if (bytes_.size() < kHeaderLen) return WireError::kTruncated;
    if (Version() != kVersion) return WireError::kBadVersion;
    if (PayloadLength() == 0 &&
        NextHeader() == static_cast<uint8_t>(IpProtocol::kHopByHop)) {
      return WireError::kUnsupported;
    }
    if (kHeaderLen + PayloadLength() > bytes_.size()) {
      return WireError::kBadLength;
    }
    return WireError::kOk;
  }

  uint8_t Version() const { return bytes_[kVersionTcFlowOffset] >> 4; }
  // DSCP (upper 6 bits) and ECN (lower 2), RFC 2474 / RFC 3168.
  uint8_t TrafficClass() const {
    return static_cast<uint8_t>(FirstWord() >> 20);
  }
  uint32_t FlowLabel() const { return FirstWord() & kFlowLabelMask; }
  uint16_t PayloadLength() const {
    return LoadBe16(&bytes_[kPayloadLengthOffset]);
  }
  // The fixed header's Next Header: the first extension header or the
  // upper-layer protocol (see WalkIpv6ExtensionHeaders).
  uint8_t NextHeader() const { return bytes_[kNextHeaderOffset]; }
  uint8_t HopLimit() const { return bytes_[kHopLimitOffset]; }
  Ipv6Address Source() const {
    return Ipv6Address::FromBytes(&bytes_[kSrcOffset]);
  }
  Ipv6Address Destination() const {
    return Ipv6Address::FromBytes(&bytes_[kDstOffset]);
  }

  // Everything after the fixed header up to Payload Length: extension
  // headers and the upper-layer data. Link-layer padding is excluded.
  std::span<Byte> Payload() const {
    return bytes_.subspan(kHeaderLen, PayloadLength());
  }
  size_t TotalLen() const { return kHeaderLen + PayloadLength(); }
  std::span<Byte> bytes() const { return bytes_; }

  // Writes Version 6 together with the traffic class and flow label (only
  // the low 20 bits of `flow_label` are used).
  void SetVersionTrafficClassFlowLabel(uint8_t traffic_class,
                                       uint32_t flow_label)
    requires kMutable
  {
    StoreBe32(&bytes_[kVersionTcFlowOffset],
              (uint32_t{kVersion} << 28) | (uint32_t{traffic_class} << 20) |
                  (flow_label & kFlowLabelMask));
  }
  void SetPayloadLength(uint16_t v)
    requires kMutable
  {
    StoreBe16(&bytes_[kPayloadLengthOffset], v);
  }
  void SetNextHeader(uint8_t v)
    requires kMutable
  {
    bytes_[kNextHeaderOffset] = v;
  }
  void SetHopLimit(uint8_t v)
    requires kMutable
  {
    bytes_[kHopLimitOffset] = v;
  }
  void SetSource(const Ipv6Address& a)
    requires kMutable
  {
    a.CopyTo(&bytes_[kSrcOffset]);
  }
  void SetDestination(const Ipv6Address& a)
    requires kMutable
  {
    a.CopyTo(&bytes_[kDstOffset]);
  }

 private:
  uint32_t FirstWord() const { return LoadBe32(&bytes_[kVersionTcFlowOffset]); }

  std::span<Byte> bytes_;
};

using Ipv6Packet = Ipv6PacketT<const uint8_t>;
using MutableIpv6Packet = Ipv6PacketT<uint8_t>;

// The meaning of an IPv6 fixed header. Extension headers are part of the
// payload; see WalkIpv6ExtensionHeaders.
struct Ipv6Repr {
  Ipv6Address src;
  Ipv6Address dst;
  // The fixed header's Next Header: an IpProtocol value, or any other
  // number.
  uint8_t next_header = 0;
  uint8_t hop_limit = 64;
  uint8_t traffic_class = 0;
  // 20 bits; Emit drops higher bits.
  uint32_t flow_label = 0;
  // Bytes after the fixed header, extension headers included.
  uint16_t payload_len = 0;

  // Check()s the view and fills `out`.
  [[nodiscard]] static WireError Parse(const Ipv6Packet& packet, Ipv6Repr& out);

  // Bytes Emit writes: the fixed header only. The caller writes the
  // payload (payload_len bytes) after it.
  size_t BufferLen() const { return Ipv6Packet::kHeaderLen; }
  size_t TotalLen() const { return Ipv6Packet::kHeaderLen + payload_len; }

  // Writes BufferLen() bytes at the start of `packet`, which must hold at
  // least that many.
  void Emit(MutableIpv6Packet packet) const;

  friend bool operator==(const Ipv6Repr&, const Ipv6Repr&) = default;
};

// View over a Fragment header (RFC 8200 section 4.5).
//
// Guarantee: after Check() returns kOk, every accessor reads inside the
// buffer.
template <typename Byte>
class Ipv6FragmentHeaderT {
 public:
  static constexpr bool kMutable = !std::is_const_v<Byte>;
  static constexpr size_t kNextHeaderOffset = 0;
  static constexpr size_t kReservedOffset = 1;
  // Fragment Offset (13 bits, 8-byte units), two reserved bits, M flag.
  static constexpr size_t kOffsetFlagsOffset = 2;
  static constexpr size_t kIdentificationOffset = 4;
  static constexpr size_t kHeaderLen = 8;
  // The offset field sits in the top 13 bits, so masking the low three bits
  // of the word gives the offset in bytes directly (units * 8).
  static constexpr uint16_t kOffsetMask = 0xfff8;
  static constexpr uint16_t kMoreFragmentsFlag = 0x0001;

  explicit Ipv6FragmentHeaderT(std::span<Byte> bytes) : bytes_(bytes) {}

  [[nodiscard]] WireError Check() const {
    if (bytes_.size() < kHeaderLen) return WireError::kTruncated;
    return WireError::kOk;
  }

  // Identifies the first header of the fragmentable part of the original
  // packet (RFC 8200 section 4.5), not of this fragment's data.
  uint8_t NextHeader() const { return bytes_[kNextHeaderOffset]; }
  uint16_t OffsetAndFlags() const {
    return LoadBe16(&bytes_[kOffsetFlagsOffset]);
  }
  // Offset of this fragment's data in the original fragmentable part, in
  // bytes (at most 8191 * 8 = 65528).
  uint16_t FragmentOffset() const { return OffsetAndFlags() & kOffsetMask; }
  bool MoreFragments() const {
    return (OffsetAndFlags() & kMoreFragmentsFlag) != 0;
  }
  uint32_t Identification() const {
    return LoadBe32(&bytes_[kIdentificationOffset]);
  }
  std::span<Byte> bytes() const { return bytes_; }

  void SetNextHeader(uint8_t v)
    requires kMutable
  {
    bytes_[kNextHeaderOffset] = v;
  }
  // Also zeroes the Reserved byte and the two reserved bits, which RFC 8200
  // section 4.5 says are initialized to zero for transmission.
  void SetOffsetAndMoreFragments(uint16_t offset_bytes, bool more)
    requires kMutable
  {
    bytes_[kReservedOffset] = 0;
    StoreBe16(&bytes_[kOffsetFlagsOffset],
              static_cast<uint16_t>((offset_bytes & kOffsetMask) |
                                    (more ? kMoreFragmentsFlag : 0)));
  }
  void SetIdentification(uint32_t v)
    requires kMutable
  {
    StoreBe32(&bytes_[kIdentificationOffset], v);
  }

 private:
  std::span<Byte> bytes_;
};

using Ipv6FragmentHeader = Ipv6FragmentHeaderT<const uint8_t>;
using MutableIpv6FragmentHeader = Ipv6FragmentHeaderT<uint8_t>;

// The meaning of a Fragment header. Reserved fields are ignored on receipt
// and written as zero (RFC 8200 section 4.5).
struct Ipv6FragmentRepr {
  uint8_t next_header = 0;
  // In bytes. Must be a multiple of 8 (the wire counts 8-byte units); Emit
  // drops the low three bits.
  uint16_t offset = 0;
  bool more_fragments = false;
  uint32_t identification = 0;

  [[nodiscard]] static WireError Parse(const Ipv6FragmentHeader& header,
                                       Ipv6FragmentRepr& out);
  size_t BufferLen() const { return Ipv6FragmentHeader::kHeaderLen; }
  // Writes BufferLen() bytes at the start of `header`, which must hold at
  // least that many.
  void Emit(MutableIpv6FragmentHeader header) const;

  friend bool operator==(const Ipv6FragmentRepr&,
                         const Ipv6FragmentRepr&) = default;
};

// Where a Fragment header was found, and what it says.
struct Ipv6FragmentInfo {
  // Offset of the Fragment header in the IPv6 payload. The bytes before it
  // are the unfragmentable part (RFC 8200 section 4.5).
  size_t header_offset = 0;
  Ipv6FragmentRepr header;
  friend bool operator==(const Ipv6FragmentInfo&,
                         const Ipv6FragmentInfo&) = default;
};

// A Routing header found in the chain (the first one, if several).
struct Ipv6RoutingInfo {
  size_t header_offset = 0;
  uint8_t routing_type = 0;
  uint8_t segments_left = 0;
  friend bool operator==(const Ipv6RoutingInfo&,
                         const Ipv6RoutingInfo&) = default;
};

// An option in a Hop-by-Hop or Destination Options header that this code
// does not recognize and whose action bits (the top two bits of the type,
// RFC 8200 section 4.2) say the packet must be discarded:
//   01  discard silently;
//   10  discard and send ICMP Parameter Problem, Code 2, pointing at it;
//   11  the same, but only if the destination was not multicast.
// Options with action 00 are skipped and never reported.
struct Ipv6UnrecognizedOption {
  // Offset of the option's type byte in the IPv6 payload; the Parameter
  // Problem pointer is this plus Ipv6Packet::kHeaderLen.
  size_t offset = 0;
  uint8_t type = 0;
  uint8_t action() const { return type >> 6; }
  friend bool operator==(const Ipv6UnrecognizedOption&,
                         const Ipv6UnrecognizedOption&) = default;
};

// The result of walking the extension header chain.
struct Ipv6ExtensionInfo {
  // The protocol of the bytes at `upper_offset`: the upper-layer protocol,
  // No Next Header (59, and the bytes after it are to be ignored, RFC 8200
  // section 4.7), or, for a non-first fragment, the Fragment header's Next
  // Header (the data there is a slice of the original packet, not a header,
  // and must be reassembled first).
  uint8_t upper_protocol = 0;
  // Offset of the upper-layer header in the IPv6 payload.
  size_t upper_offset = 0;
  // Extension headers walked (the Fragment header included).
  size_t header_count = 0;
  std::optional<Ipv6FragmentInfo> fragment;
  std::optional<Ipv6RoutingInfo> routing;
  // The first option that requires discarding the packet, if any.
  std::optional<Ipv6UnrecognizedOption> unrecognized_option;

  friend bool operator==(const Ipv6ExtensionInfo&,
                         const Ipv6ExtensionInfo&) = default;
};

// Longest chain WalkIpv6ExtensionHeaders accepts. Real traffic carries at
// most a few headers (RFC 8200 section 4.1 recommends each at most once,
// Destination Options at most twice); the bound keeps a crafted chain of
// tiny headers from costing more than a fixed amount of work.
inline constexpr size_t kMaxIpv6ExtensionHeaders = 8;

// True for the Next Header values WalkIpv6ExtensionHeaders steps over:
// Hop-by-Hop (0), Routing (43), Fragment (44), Authentication (51) and
// Destination Options (60). Everything else, ESP (50) included since what
// follows it is encrypted, ends the walk as the upper-layer protocol.
bool IsIpv6ExtensionHeader(uint8_t next_header);

// Walks the extension headers at the start of `payload` (an IPv6 payload,
// e.g. Ipv6Packet::Payload()), starting from the fixed header's Next Header
// `first_next_header`, and stops at the first protocol that is not an
// extension header. Errors:
//   - kBadExtensionHeader: Hop-by-Hop anywhere but first (RFC 8200 section
//     4.1); more than kMaxIpv6ExtensionHeaders headers; a second Fragment
//     header; an Authentication Header whose length is not a multiple of 8
//     (RFC 4302 section 2.2 requires that for IPv6).
//   - kTruncated: a header, or the length its own length field gives it,
//     runs past the end of `payload`. Payload Length has already been
//     checked against the buffer, so this means the chain claims more
//     bytes than the packet has, exactly as error.h defines kTruncated.
//   - kOptionOverflow: an option in a Hop-by-Hop or Destination Options
//     header runs past the end of that header.
// A non-first fragment (offset != 0) ends the walk right after its Fragment
// header: its data is not a header (see Ipv6ExtensionInfo::upper_protocol).
// A first fragment is walked further, since RFC 8200 section 4.5 requires
// it to carry the whole header chain. `out` is meaningful only on kOk.
[[nodiscard]] WireError WalkIpv6ExtensionHeaders(
    std::span<const uint8_t> payload, uint8_t first_next_header,
    Ipv6ExtensionInfo& out);

}  // namespace netstack::wire

#endif  // NETSTACK_WIRE_IPV6_H_
