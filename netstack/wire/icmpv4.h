// ICMP for IPv4 (RFC 792), with the Path MTU Discovery field of RFC 1191.
//
//    0                   1                   2                   3
//    0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   |     Type      |     Code      |          Checksum             |
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   |                     Rest of Header (4)                        |
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   |     Data ...
//   +-+-+-+-+-
//
// Rest of Header by type:
//   Echo / Echo Reply (8 / 0):      Identifier (2) | Sequence Number (2)
//   Destination Unreachable (3):    unused (2) | Next-Hop MTU (2)
//                                   (the MTU only for code 4, RFC 1191
//                                   section 4; otherwise unused)
//   Time Exceeded (11):             unused (4)
//   Parameter Problem (12):         Pointer (1) | unused (3)
//   Redirect (5):                   Gateway Internet Address (4)
// Data of an error message is the invoking datagram's IP header and at
// least its first 64 bits of data (RFC 792; RFC 1122 section 3.2.2 allows
// more). Data of an echo is whatever the sender put there.
#ifndef NETSTACK_WIRE_ICMPV4_H_
#define NETSTACK_WIRE_ICMPV4_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <variant>

#include "netstack/wire/bytes.h"
#include "netstack/wire/checksum.h"
#include "netstack/wire/error.h"

namespace netstack::wire {

// Message types (RFC 792; IANA "ICMP Type Numbers").
enum class Icmpv4Type : uint8_t {
  kEchoReply = 0,
  kDestUnreachable = 3,
  kSourceQuench = 4,  // deprecated, RFC 6633
  kRedirect = 5,
  kEchoRequest = 8,
  kTimeExceeded = 11,
  kParameterProblem = 12,
  kTimestamp = 13,
  kTimestampReply = 14,
};

// Destination Unreachable codes (RFC 792; 6-15 from RFC 1122 section
// 3.2.2.1 and RFC 1812 section 5.2.7.1).
enum class Icmpv4UnreachableCode : uint8_t {
  kNetUnreachable = 0,
  kHostUnreachable = 1,
  kProtocolUnreachable = 2,
  kPortUnreachable = 3,
  kFragmentationNeeded = 4,  // "and DF set"; carries Next-Hop MTU
  kSourceRouteFailed = 5,
  kNetUnknown = 6,
  kHostUnknown = 7,
  kSourceHostIsolated = 8,
  kNetProhibited = 9,
  kHostProhibited = 10,
  kNetUnreachableForTos = 11,
  kHostUnreachableForTos = 12,
  kCommunicationProhibited = 13,
  kHostPrecedenceViolation = 14,
  kPrecedenceCutoff = 15,
};

// Time Exceeded codes (RFC 792).
enum class Icmpv4TimeExceededCode : uint8_t {
  kTtlExceeded = 0,
  kReassemblyTimeExceeded = 1,
};

// View over one ICMP message: the whole IPv4 payload, header and data.
//
// Guarantee: after Check() returns kOk, every accessor reads inside the
// buffer. Which Rest-of-Header accessor is meaningful depends on Type().
template <typename Byte>
class Icmpv4PacketT {
 public:
  static constexpr bool kMutable = !std::is_const_v<Byte>;
  static constexpr size_t kTypeOffset = 0;
  static constexpr size_t kCodeOffset = 1;
  static constexpr size_t kChecksumOffset = 2;
  static constexpr size_t kRestOffset = 4;  // Rest of Header, 4 bytes
  static constexpr size_t kEchoIdentOffset = 4;
  static constexpr size_t kEchoSeqOffset = 6;
  static constexpr size_t kNextHopMtuOffset = 6;
  static constexpr size_t kPointerOffset = 4;
  static constexpr size_t kHeaderLen = 8;

  explicit Icmpv4PacketT(std::span<Byte> bytes) : bytes_(bytes) {}

  [[nodiscard]] WireError Check() const {
    if (bytes_.size() < kHeaderLen) return WireError::kTruncated;
    return WireError::kOk;
  }

  uint8_t Type() const { return bytes_[kTypeOffset]; }
  uint8_t Code() const { return bytes_[kCodeOffset]; }
  uint16_t Checksum() const { return LoadBe16(&bytes_[kChecksumOffset]); }
  uint32_t RestOfHeader() const { return LoadBe32(&bytes_[kRestOffset]); }
  // Echo and Echo Reply.
  uint16_t EchoIdent() const { return LoadBe16(&bytes_[kEchoIdentOffset]); }
  uint16_t EchoSeq() const { return LoadBe16(&bytes_[kEchoSeqOffset]); }
  // Destination Unreachable, code 4 (RFC 1191 section 4). Zero from
  // routers that predate RFC 1191.
  uint16_t NextHopMtu() const { return LoadBe16(&bytes_[kNextHopMtuOffset]); }
  // Parameter Problem: offset of the offending octet in the invoking
  // datagram's header.
  uint8_t Pointer() const { return bytes_[kPointerOffset]; }
  // Everything after the 8-byte header.
  std::span<Byte> Data() const { return bytes_.subspan(kHeaderLen); }
  std::span<Byte> bytes() const { return bytes_; }

  // RFC 792: the checksum covers the whole ICMP message, so summing it
  // with the checksum field in place gives all ones (complement zero). The
  // view must span exactly the message: build it from
  // Ipv4Packet::Payload(), which excludes link-layer padding.
  bool ChecksumValid() const { return InternetChecksum(bytes_) == 0; }

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
  void SetRestOfHeader(uint32_t v)
    requires kMutable
  {
    StoreBe32(&bytes_[kRestOffset], v);
  }
  // Computes the checksum over the whole view, which must be exactly the
  // ICMP message (header and data, no link padding), and stores it.
  void FillChecksum()
    requires kMutable
  {
    SetChecksum(0);
    SetChecksum(InternetChecksum(bytes_));
  }

 private:
  std::span<Byte> bytes_;
};

using Icmpv4Packet = Icmpv4PacketT<const uint8_t>;
using MutableIcmpv4Packet = Icmpv4PacketT<uint8_t>;

// The meaning of an ICMP message.
//
// Lifetime: `data` is a view into the buffer that was parsed (or whatever
// the caller pointed it at before Emit). It is valid only while that
// buffer is alive and unmodified; copy it out to keep it longer. Emit may
// write into the same buffer that `data` points into (an echo reply built
// in place over the request): it copies with memmove.
struct Icmpv4Repr {
  struct EchoRequest {
    uint16_t ident = 0;
    uint16_t seq_no = 0;
    friend bool operator==(const EchoRequest&, const EchoRequest&) = default;
  };
  struct EchoReply {
    uint16_t ident = 0;
    uint16_t seq_no = 0;
    friend bool operator==(const EchoReply&, const EchoReply&) = default;
  };
  // The two unused bytes before the MTU are ignored on parse and written
  // as zero (RFC 792).
  struct DestUnreachable {
    Icmpv4UnreachableCode code = Icmpv4UnreachableCode::kNetUnreachable;
    // RFC 1191 section 4; meaningful for kFragmentationNeeded only, and
    // zero in messages from routers that predate RFC 1191.
    uint16_t next_hop_mtu = 0;
    friend bool operator==(const DestUnreachable&,
                           const DestUnreachable&) = default;
  };
  // The four unused bytes are ignored on parse and written as zero.
  struct TimeExceeded {
    Icmpv4TimeExceededCode code = Icmpv4TimeExceededCode::kTtlExceeded;
    friend bool operator==(const TimeExceeded&, const TimeExceeded&) = default;
  };
  // Any other type, and echoes with a nonzero code (RFC 792 defines only
  // code 0), kept verbatim so Emit reproduces them.
  struct Other {
    uint8_t type = 0;
    uint8_t code = 0;
    uint32_t rest_of_header = 0;
    friend bool operator==(const Other&, const Other&) = default;
  };
  using Message = std::variant<EchoRequest, EchoReply, DestUnreachable,
                               TimeExceeded, Other>;

  Message message = EchoRequest{};
  // Echo data, or for errors the invoking datagram (IP header first).
  // See the lifetime note above.
  std::span<const uint8_t> data;

  // Check()s the view and fills `out`. Does not verify the checksum: use
  // Icmpv4Packet::ChecksumValid(). The data of error messages is not
  // parsed here; parse it as an Ipv4Packet to find the flow it refers to.
  [[nodiscard]] static WireError Parse(const Icmpv4Packet& packet,
                                       Icmpv4Repr& out);

  uint8_t Type() const;
  uint8_t Code() const;

  // Header plus data.
  size_t BufferLen() const { return Icmpv4Packet::kHeaderLen + data.size(); }
  // Writes BufferLen() bytes at the start of `packet`, which must hold at
  // least that many, and fills the checksum over exactly those bytes.
  void Emit(MutableIcmpv4Packet packet) const;

  // Compares the message and the contents of `data`.
  friend bool operator==(const Icmpv4Repr& a, const Icmpv4Repr& b);
};

}  // namespace netstack::wire

#endif  // NETSTACK_WIRE_ICMPV4_H_
