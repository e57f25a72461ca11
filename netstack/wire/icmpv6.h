// ICMPv6 messages (RFC 4443) and the Neighbor Discovery messages carried in
// them (RFC 4861 section 4).
//
// Every message starts with the same 4 bytes, then 4 type-specific bytes
// (RFC 4443 section 2.1):
//
//    0                   1                   2                   3
//    0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   |     Type      |     Code      |          Checksum             |
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   | Echo (128, 129):    Identifier  |  Sequence Number            |
//   | Packet Too Big (2): MTU                                        |
//   | Parameter Problem (4): Pointer                                 |
//   | Dest. Unreachable (1), Time Exceeded (3): unused               |
//   | RS (133), NS (135): reserved                                   |
//   | NA (136): |R|S|O|  reserved                                    |
//   | RA (134): Cur Hop Limit |M|O|  reserved | Router Lifetime      |
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   | Echo: data. Errors (1-4): as much of the invoking packet as fits
//   |   in the minimum IPv6 MTU (RFC 4443 section 2.4 (c)).
//   | RA: Reachable Time (4), Retrans Timer (4), options (offset 16).
//   | NS, NA: Target Address (16), options (offset 24).
//   | RS: options (offset 8).
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// NDP options (RFC 4861 section 4.6) are type, length (in 8-byte units,
// counting type and length), value:
//
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   |     Type      |    Length     |              ...              |
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   Link-layer address (1 source, 2 target), Ethernet: length 1, 6-byte MAC.
//   MTU (5): length 1, 2 reserved bytes, MTU (4).
//   Prefix Information (3): length 4:
//   | Prefix Length |L|A| reserved  |  Valid Lifetime (4)  |
//   | Preferred Lifetime (4) | Reserved2 (4) | Prefix (16) |
#ifndef NETSTACK_WIRE_ICMPV6_H_
#define NETSTACK_WIRE_ICMPV6_H_

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <type_traits>
#include <variant>

#include "netstack/wire/address.h"
#include "netstack/wire/bytes.h"
#include "netstack/wire/checksum.h"
#include "netstack/wire/error.h"
#include "netstack/wire/ip_protocol.h"

namespace netstack::wire {

enum class Icmpv6Type : uint8_t {
  kDestinationUnreachable = 1,   // RFC 4443 section 3.1
  kPacketTooBig = 2,             // RFC 4443 section 3.2
  kTimeExceeded = 3,             // RFC 4443 section 3.3
  kParameterProblem = 4,         // RFC 4443 section 3.4
  kEchoRequest = 128,            // RFC 4443 section 4.1
  kEchoReply = 129,              // RFC 4443 section 4.2
  kRouterSolicitation = 133,     // RFC 4861 section 4.1
  kRouterAdvertisement = 134,    // RFC 4861 section 4.2
  kNeighborSolicitation = 135,   // RFC 4861 section 4.3
  kNeighborAdvertisement = 136,  // RFC 4861 section 4.4
  kRedirect = 137,               // RFC 4861 section 4.5
};

enum class NdpOptionType : uint8_t {
  kSourceLinkLayerAddress = 1,
  kTargetLinkLayerAddress = 2,
  kPrefixInformation = 3,
  kRedirectedHeader = 4,
  kMtu = 5,
};

// NDP option layout (RFC 4861 section 4.6), offsets within one option.
struct NdpOptionLayout {
  static constexpr size_t kTypeOffset = 0;
  static constexpr size_t kLengthOffset = 1;
  static constexpr size_t kUnit = 8;  // the Length field counts 8 bytes
  // Link-layer address options, for Ethernet (RFC 2464 section 6).
  static constexpr size_t kLinkLayerAddressOffset = 2;
  static constexpr size_t kLinkLayerLen = 8;
  // MTU option (section 4.6.4).
  static constexpr size_t kMtuOffset = 4;
  static constexpr size_t kMtuLen = 8;
  // Prefix Information option (section 4.6.2).
  static constexpr size_t kPrefixLengthOffset = 2;
  static constexpr size_t kPrefixFlagsOffset = 3;
  static constexpr size_t kValidLifetimeOffset = 4;
  static constexpr size_t kPreferredLifetimeOffset = 8;
  static constexpr size_t kPrefixOffset = 16;
  static constexpr size_t kPrefixInformationLen = 32;
  static constexpr uint8_t kOnLinkFlag = 0x80;      // L
  static constexpr uint8_t kAutonomousFlag = 0x40;  // A
};

// Checks the syntax of an NDP option area (everything after a message's
// fixed part, up to the end of the message):
//   - a Length of 0 is kBadOptionLength (RFC 4861 section 4.6: "Nodes MUST
//     silently discard an ND packet that contains an option with length
//     zero");
//   - an option whose Length byte is missing, or whose Length runs past the
//     end of the area, is kOptionOverflow;
//   - a known option of the wrong size is kBadOptionLength: link-layer
//     address options must be 8 bytes (Ethernet is the only link this stack
//     drives), MTU 8 bytes, Prefix Information 32 bytes;
//   - a Prefix Length above 128 is kMalformed.
// Unknown option types are accepted (and later skipped).
[[nodiscard]] WireError CheckNdpOptions(std::span<const uint8_t> options);

// One option found by NdpOptionReader. `bytes` is the whole option, type and
// length bytes included, and points into the packet buffer.
struct NdpOption {
  uint8_t type = 0;
  std::span<const uint8_t> bytes;
};

// Walks an option area that CheckNdpOptions (or Icmpv6Packet::Check) has
// accepted. On an unchecked area it stops at the first malformed option
// instead of reading out of bounds.
class NdpOptionReader {
 public:
  explicit NdpOptionReader(std::span<const uint8_t> options)
      : options_(options) {}

  // Stores the next option in `out` and returns true, or returns false at
  // the end of the area.
  bool Next(NdpOption& out);

 private:
  std::span<const uint8_t> options_;
  size_t pos_ = 0;
};

// View over one ICMPv6 message. The span must be exactly the message (the
// IPv6 payload from the upper-layer offset on): ICMPv6 has no length field,
// and the checksum covers every byte up to the end of the span.
//
// Guarantee: after Check() returns kOk, every accessor that applies to
// Type() reads inside the buffer, and for NDP messages Options() is a
// well-formed option area (CheckNdpOptions). Accessors for other types
// (e.g. Target() on an echo message) are only in bounds for the types they
// belong to.
template <typename Byte>
class Icmpv6PacketT {
 public:
  static constexpr bool kMutable = !std::is_const_v<Byte>;
  static constexpr size_t kTypeOffset = 0;
  static constexpr size_t kCodeOffset = 1;
  static constexpr size_t kChecksumOffset = 2;
  // Type, code, checksum and the 4 type-specific bytes every message has.
  static constexpr size_t kMinLen = 8;
  // Echo (RFC 4443 section 4).
  static constexpr size_t kIdentifierOffset = 4;
  static constexpr size_t kSequenceOffset = 6;
  static constexpr size_t kEchoDataOffset = 8;
  // Errors (RFC 4443 section 3).
  static constexpr size_t kMtuOffset = 4;
  static constexpr size_t kPointerOffset = 4;
  static constexpr size_t kInvokingPacketOffset = 8;
  // Generic: the 4 type-specific bytes and what follows them.
  static constexpr size_t kRestOfHeaderOffset = 4;
  static constexpr size_t kBodyOffset = 8;
  // Router Solicitation (RFC 4861 section 4.1).
  static constexpr size_t kRsOptionsOffset = 8;
  // Router Advertisement (RFC 4861 section 4.2).
  static constexpr size_t kRaCurHopLimitOffset = 4;
  static constexpr size_t kRaFlagsOffset = 5;
  static constexpr size_t kRaRouterLifetimeOffset = 6;
  static constexpr size_t kRaReachableTimeOffset = 8;
  static constexpr size_t kRaRetransTimerOffset = 12;
  static constexpr size_t kRaOptionsOffset = 16;
  static constexpr uint8_t kRaManagedFlag = 0x80;      // M
  static constexpr uint8_t kRaOtherConfigFlag = 0x40;  // O
  // Neighbor Solicitation / Advertisement (RFC 4861 sections 4.3, 4.4).
  static constexpr size_t kNaFlagsOffset = 4;
  static constexpr size_t kTargetOffset = 8;
  static constexpr size_t kNdOptionsOffset = 24;
  static constexpr uint8_t kNaRouterFlag = 0x80;     // R
  static constexpr uint8_t kNaSolicitedFlag = 0x40;  // S
  static constexpr uint8_t kNaOverrideFlag = 0x20;   // O

  explicit Icmpv6PacketT(std::span<Byte> bytes) : bytes_(bytes) {}

  // Validates, in order: the 8 bytes every message has (kTruncated); the
  // fixed part of the message type, 16 bytes for RA and 24 for NS and NA
  // (kTruncated); for RS, RA, NS and NA, the option area
  // (CheckNdpOptions). Does not verify the checksum (ChecksumValid).
  [[nodiscard]] WireError Check() const {
    if (bytes_.size() < kMinLen) return WireError::kTruncated;
    const size_t options_offset = OptionsOffset(Type());
    if (options_offset == 0) return WireError::kOk;
    if (bytes_.size() < options_offset) return WireError::kTruncated;
    return CheckNdpOptions(Options());
  }

  uint8_t Type() const { return bytes_[kTypeOffset]; }
  uint8_t Code() const { return bytes_[kCodeOffset]; }
  uint16_t Checksum() const { return LoadBe16(&bytes_[kChecksumOffset]); }
  // The 4 type-specific bytes as one number.
  uint32_t RestOfHeader() const {
    return LoadBe32(&bytes_[kRestOfHeaderOffset]);
  }
  // Everything after the first 8 bytes.
  std::span<Byte> Body() const { return bytes_.subspan(kBodyOffset); }

  // Echo Request / Reply.
  uint16_t Identifier() const { return LoadBe16(&bytes_[kIdentifierOffset]); }
  uint16_t SequenceNumber() const { return LoadBe16(&bytes_[kSequenceOffset]); }
  std::span<Byte> EchoData() const { return bytes_.subspan(kEchoDataOffset); }

  // Error messages.
  uint32_t Mtu() const { return LoadBe32(&bytes_[kMtuOffset]); }
  uint32_t Pointer() const { return LoadBe32(&bytes_[kPointerOffset]); }
  std::span<Byte> InvokingPacket() const {
    return bytes_.subspan(kInvokingPacketOffset);
  }

  // Router Advertisement.
  uint8_t CurHopLimit() const { return bytes_[kRaCurHopLimitOffset]; }
  bool ManagedFlag() const {
    return (bytes_[kRaFlagsOffset] & kRaManagedFlag) != 0;
  }
  bool OtherConfigFlag() const {
    return (bytes_[kRaFlagsOffset] & kRaOtherConfigFlag) != 0;
  }
  uint16_t RouterLifetime() const {
    return LoadBe16(&bytes_[kRaRouterLifetimeOffset]);
  }
  uint32_t ReachableTime() const {
    return LoadBe32(&bytes_[kRaReachableTimeOffset]);
  }
  uint32_t RetransTimer() const {
    return LoadBe32(&bytes_[kRaRetransTimerOffset]);
  }

  // Neighbor Solicitation / Advertisement.
  Ipv6Address Target() const {
    return Ipv6Address::FromBytes(&bytes_[kTargetOffset]);
  }
  bool RouterFlag() const {
    return (bytes_[kNaFlagsOffset] & kNaRouterFlag) != 0;
  }
  bool SolicitedFlag() const {
    return (bytes_[kNaFlagsOffset] & kNaSolicitedFlag) != 0;
  }
  bool OverrideFlag() const {
    return (bytes_[kNaFlagsOffset] & kNaOverrideFlag) != 0;
  }

  // Offset of the NDP option area for message type `type`, or 0 for types
  // without one here.
  static constexpr size_t OptionsOffset(uint8_t type) {
    switch (static_cast<Icmpv6Type>(type)) {
      case Icmpv6Type::kRouterSolicitation:
        return kRsOptionsOffset;
      case Icmpv6Type::kRouterAdvertisement:
        return kRaOptionsOffset;
      case Icmpv6Type::kNeighborSolicitation:
      case Icmpv6Type::kNeighborAdvertisement:
        return kNdOptionsOffset;
      default:
        return 0;
    }
  }
  // The NDP option area of RS, RA, NS and NA; empty for other types.
  std::span<Byte> Options() const {
    const size_t offset = OptionsOffset(Type());
    if (offset == 0) return {};
    return bytes_.subspan(offset);
  }

  std::span<Byte> bytes() const { return bytes_; }

  // RFC 4443 section 2.3: the checksum covers the IPv6 pseudo-header (RFC
  // 8200 section 8.1, Next Header 58) and the whole message. A correct
  // message sums to all ones, whose complement is zero.
  bool ChecksumValid(const Ipv6Address& src, const Ipv6Address& dst) const {
    return ComputeChecksum(src, dst) == 0;
  }

  void SetType(uint8_t v)
    requires kMutable
  {
    bytes_[kTypeOffset] = v;
  }
  void SetCode(uint8_t v)
    requires kMutable
  {
    bytes_[kCodeOffset] = v;
  }
  void SetChecksum(uint16_t v)
    requires kMutable
  {
    StoreBe16(&bytes_[kChecksumOffset], v);
  }
  // Computes the checksum over the pseudo-header and the whole span (with
  // the field zeroed first) and stores it. Call after every other byte of
  // the message is final.
  void FillChecksum(const Ipv6Address& src, const Ipv6Address& dst)
    requires kMutable
  {
    SetChecksum(0);
    SetChecksum(ComputeChecksum(src, dst));
  }

 private:
  // The checksum of pseudo-header plus message as it stands: zero for a
  // correct message, the value to store for one whose field is zero.
  uint16_t ComputeChecksum(const Ipv6Address& src,
                           const Ipv6Address& dst) const {
    ChecksumAccumulator acc;
    acc.AddFolded(Ipv6PseudoHeaderSum(src, dst,
                                      static_cast<uint8_t>(IpProtocol::kIcmpv6),
                                      static_cast<uint32_t>(bytes_.size())));
    acc.Add(bytes_);
    return acc.Checksum();
  }

  std::span<Byte> bytes_;
};

using Icmpv6Packet = Icmpv6PacketT<const uint8_t>;
using MutableIcmpv6Packet = Icmpv6PacketT<uint8_t>;

// --- Reprs ----------------------------------------------------------------
//
// Spans in the message structs below point into the parsed buffer (no
// copy); Emit copies them into the output, with memmove, so a Repr parsed
// from a buffer may be emitted back into the same buffer (an echo reply
// built in place). They compare by content.

namespace internal {
inline bool Icmpv6BytesEqual(std::span<const uint8_t> a,
                             std::span<const uint8_t> b) {
  return std::ranges::equal(a, b);
}
}  // namespace internal

struct Icmpv6EchoRequest {
  uint16_t identifier = 0;
  uint16_t sequence = 0;
  std::span<const uint8_t> data;
  friend bool operator==(const Icmpv6EchoRequest& a,
                         const Icmpv6EchoRequest& b) {
    return a.identifier == b.identifier && a.sequence == b.sequence &&
           internal::Icmpv6BytesEqual(a.data, b.data);
  }
};

struct Icmpv6EchoReply {
  uint16_t identifier = 0;
  uint16_t sequence = 0;
  std::span<const uint8_t> data;
  friend bool operator==(const Icmpv6EchoReply& a, const Icmpv6EchoReply& b) {
    return a.identifier == b.identifier && a.sequence == b.sequence &&
           internal::Icmpv6BytesEqual(a.data, b.data);
  }
};

// RFC 4443 section 3.1. Codes: 0 no route, 1 administratively prohibited,
// 2 beyond scope of source, 3 address unreachable, 4 port unreachable,
// 5 source address failed policy, 6 reject route.
struct Icmpv6DestinationUnreachable {
  uint8_t code = 0;
  std::span<const uint8_t> invoking_packet;
  friend bool operator==(const Icmpv6DestinationUnreachable& a,
                         const Icmpv6DestinationUnreachable& b) {
    return a.code == b.code &&
           internal::Icmpv6BytesEqual(a.invoking_packet, b.invoking_packet);
  }
};

// RFC 4443 section 3.2. The Code is "ignored by the receiver", so it is not
// kept; Emit writes 0.
struct Icmpv6PacketTooBig {
  uint32_t mtu = 0;
  std::span<const uint8_t> invoking_packet;
  friend bool operator==(const Icmpv6PacketTooBig& a,
                         const Icmpv6PacketTooBig& b) {
    return a.mtu == b.mtu &&
           internal::Icmpv6BytesEqual(a.invoking_packet, b.invoking_packet);
  }
};

// RFC 4443 section 3.3. Codes: 0 hop limit exceeded in transit,
// 1 fragment reassembly time exceeded.
struct Icmpv6TimeExceeded {
  uint8_t code = 0;
  std::span<const uint8_t> invoking_packet;
  friend bool operator==(const Icmpv6TimeExceeded& a,
                         const Icmpv6TimeExceeded& b) {
    return a.code == b.code &&
           internal::Icmpv6BytesEqual(a.invoking_packet, b.invoking_packet);
  }
};

// RFC 4443 section 3.4. Codes: 0 erroneous header field, 1 unrecognized
// Next Header, 2 unrecognized IPv6 option. `pointer` is the byte offset in
// the invoking packet of the offending field.
struct Icmpv6ParameterProblem {
  uint8_t code = 0;
  uint32_t pointer = 0;
  std::span<const uint8_t> invoking_packet;
  friend bool operator==(const Icmpv6ParameterProblem& a,
                         const Icmpv6ParameterProblem& b) {
    return a.code == b.code && a.pointer == b.pointer &&
           internal::Icmpv6BytesEqual(a.invoking_packet, b.invoking_packet);
  }
};

// Prefix Information option (RFC 4861 section 4.6.2). The prefix is kept
// as sent; bits past prefix_length are for the receiver to ignore.
struct NdpPrefixInformation {
  uint8_t prefix_length = 0;
  bool on_link = false;             // L
  bool autonomous = false;          // A (RFC 4862 section 5.5.3)
  uint32_t valid_lifetime = 0;      // seconds; 0xffffffff is infinity
  uint32_t preferred_lifetime = 0;  // seconds; 0xffffffff is infinity
  Ipv6Address prefix;
  friend bool operator==(const NdpPrefixInformation&,
                         const NdpPrefixInformation&) = default;
};

// Prefix Information options of one message, kept inline so a Repr needs no
// allocation. Routers advertise one or a few prefixes; in a message with
// more than kCapacity the rest are ignored (and counted in NdpOptions)
// rather than failing the whole message, so its router lifetime and first
// prefixes still take effect.
class NdpPrefixList {
 public:
  static constexpr size_t kCapacity = 8;

  // Appends `p`; returns false (and changes nothing) when full.
  bool push_back(const NdpPrefixInformation& p) {
    if (size_ == kCapacity) return false;
    items_[size_++] = p;
    return true;
  }
  void clear() { size_ = 0; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const NdpPrefixInformation& operator[](size_t i) const { return items_[i]; }
  std::span<const NdpPrefixInformation> span() const {
    return std::span<const NdpPrefixInformation>(items_.data(), size_);
  }
  auto begin() const { return span().begin(); }
  auto end() const { return span().end(); }

  // Compares the used entries only.
  friend bool operator==(const NdpPrefixList& a, const NdpPrefixList& b) {
    return std::ranges::equal(a.span(), b.span());
  }

 private:
  std::array<NdpPrefixInformation, kCapacity> items_{};
  size_t size_ = 0;
};

// The NDP options this stack understands. Parsing keeps the first of each
// single-valued option when a message repeats one (as Linux does) and
// silently skips unknown options (RFC 4861 sections 4.1 to 4.4: "Receivers
// MUST silently ignore any options they do not recognize").
//
// Emit writes the options present in this fixed order, the order RFC 4861
// section 4.2 lists them in: source link-layer address, target link-layer
// address, MTU, then each prefix in list order. A message that carried
// them in another order therefore parses to the same Repr but re-emits
// reordered.
struct NdpOptions {
  std::optional<MacAddress> source_link_layer;  // type 1
  std::optional<MacAddress> target_link_layer;  // type 2
  std::optional<uint32_t> mtu;                  // type 5
  NdpPrefixList prefixes;                       // type 3
  // Prefix Information options beyond NdpPrefixList::kCapacity (saturates
  // at 255). Not emitted.
  uint8_t prefixes_ignored = 0;

  // Bytes of options Emit writes.
  size_t BufferLen() const;

  friend bool operator==(const NdpOptions&, const NdpOptions&) = default;
};

// RFC 4861 section 4.1.
struct NdpRouterSolicitation {
  NdpOptions options;
  friend bool operator==(const NdpRouterSolicitation&,
                         const NdpRouterSolicitation&) = default;
};

// RFC 4861 section 4.2. Flag bits other than M and O (Home Agent, RFC 6275;
// router preference, RFC 4191; proxy, RFC 4389) are not kept; Emit writes
// them as zero, which means medium preference.
struct NdpRouterAdvertisement {
  uint8_t cur_hop_limit = 0;     // 0: unspecified
  bool managed = false;          // M: addresses via DHCPv6
  bool other_config = false;     // O: other configuration via DHCPv6
  uint16_t router_lifetime = 0;  // seconds; 0: not a default router
  uint32_t reachable_time = 0;   // milliseconds; 0: unspecified
  uint32_t retrans_timer = 0;    // milliseconds; 0: unspecified
  NdpOptions options;
  friend bool operator==(const NdpRouterAdvertisement&,
                         const NdpRouterAdvertisement&) = default;
};

// RFC 4861 section 4.3.
struct NdpNeighborSolicitation {
  Ipv6Address target;
  NdpOptions options;
  friend bool operator==(const NdpNeighborSolicitation&,
                         const NdpNeighborSolicitation&) = default;
};

// RFC 4861 section 4.4.
struct NdpNeighborAdvertisement {
  bool router = false;         // R
  bool solicited = false;      // S
  bool override_flag = false;  // O
  Ipv6Address target;
  NdpOptions options;
  friend bool operator==(const NdpNeighborAdvertisement&,
                         const NdpNeighborAdvertisement&) = default;
};

// Any other type (Redirect, MLD, ...): the first 8 bytes split into fields,
// the rest as bytes. Use it only for types without a struct above: Parse
// never produces it for those.
struct Icmpv6Other {
  uint8_t type = 0;
  uint8_t code = 0;
  uint32_t rest_of_header = 0;  // bytes 4 to 7
  std::span<const uint8_t> body;
  friend bool operator==(const Icmpv6Other& a, const Icmpv6Other& b) {
    return a.type == b.type && a.code == b.code &&
           a.rest_of_header == b.rest_of_header &&
           internal::Icmpv6BytesEqual(a.body, b.body);
  }
};

using Icmpv6Message = std::variant<
    Icmpv6EchoRequest, Icmpv6EchoReply, Icmpv6DestinationUnreachable,
    Icmpv6PacketTooBig, Icmpv6TimeExceeded, Icmpv6ParameterProblem,
    NdpRouterSolicitation, NdpRouterAdvertisement, NdpNeighborSolicitation,
    NdpNeighborAdvertisement, Icmpv6Other>;

// The meaning of an ICMPv6 message.
struct Icmpv6Repr {
  Icmpv6Message message;

  // Check()s the view and fills `out`. Does not verify the checksum: use
  // Icmpv6Packet::ChecksumValid(). Beyond Check(), rejects with kMalformed
  // what RFC 4861 sections 6.1 and 7.1.1-7.1.2 have receivers discard and
  // that is visible in the message alone: an NDP message with a Code other
  // than 0, and an NS or NA whose Target is multicast. The checks that need
  // the IPv6 header (Hop Limit 255, source address rules) are the caller's.
  // Echo Codes are not kept (RFC 4443 sections 4.1 and 4.2 define only 0).
  [[nodiscard]] static WireError Parse(const Icmpv6Packet& packet,
                                       Icmpv6Repr& out);

  // The Type field Emit writes.
  uint8_t type() const;

  // Bytes Emit writes: the whole message, data and options included.
  size_t BufferLen() const;

  // Writes BufferLen() bytes at the start of `packet`, which must hold at
  // least that many: every field, reserved fields as zero, and a zero
  // checksum. Fill the checksum afterwards with
  // MutableIcmpv6Packet::FillChecksum on a view of exactly the message.
  void Emit(MutableIcmpv6Packet packet) const;

  friend bool operator==(const Icmpv6Repr&, const Icmpv6Repr&) = default;
};

}  // namespace netstack::wire

#endif  // NETSTACK_WIRE_ICMPV6_H_
