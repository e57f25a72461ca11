// UDP header (RFC 768).
//
//    0      7 8     15 16    23 24    31
//   +--------+--------+--------+--------+
//   |     Source      |   Destination   |  0
//   |      Port       |      Port       |
//   +--------+--------+--------+--------+
//   |                 |                 |  4
//   |     Length      |    Checksum     |
//   +--------+--------+--------+--------+
//   |          data octets ...             8
//   +---------------- ...
//
// Length counts header and data. The datagram ends where Length says, not
// where the span ends: bytes after it (Ethernet minimum-frame padding that
// the IP layer did not trim) are not part of it and are ignored.
//
// Checksum: a zero field means the sender computed none, which RFC 768
// allows over IPv4 but RFC 8200 section 8.1 forbids over IPv6. A computed
// checksum of zero is therefore sent as 0xffff, its ones'-complement
// equivalent (RFC 768, "If the computed checksum is zero, it is transmitted
// as all ones").
#ifndef NETSTACK_WIRE_UDP_H_
#define NETSTACK_WIRE_UDP_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "netstack/wire/bytes.h"
#include "netstack/wire/checksum.h"
#include "netstack/wire/error.h"

namespace netstack::wire {

// What a zero checksum field means; this depends on the network layer, so
// the caller states it.
enum class UdpZeroChecksum : uint8_t {
  kAccept,  // IPv4: no checksum was computed (RFC 768); nothing to verify.
  kReject,  // IPv6: the checksum is mandatory (RFC 8200 section 8.1).
};

// View over the bytes of one UDP datagram. `Byte` is `const uint8_t` for a
// read-only view and `uint8_t` for a writable one; setters exist only on
// the writable view.
//
// Guarantee: after Check() returns kOk, 8 <= Length() <= span size, so
// Datagram() and Payload() lie inside the span.
template <typename Byte>
class UdpHeaderT {
 public:
  static constexpr bool kMutable = !std::is_const_v<Byte>;
  static constexpr size_t kSrcPortOffset = 0;
  static constexpr size_t kDstPortOffset = 2;
  static constexpr size_t kLengthOffset = 4;
  static constexpr size_t kChecksumOffset = 6;
  static constexpr size_t kHeaderLen = 8;
  // Largest payload the 16-bit Length field can describe.
  static constexpr size_t kMaxPayloadLen = 0xffff - kHeaderLen;

  explicit UdpHeaderT(std::span<Byte> bytes) : bytes_(bytes) {}

  // kTruncated: fewer than 8 bytes. kBadLength: the Length field is below
  // the header size or beyond the span. (An IPv6 jumbogram's zero Length,
  // RFC 2675, is not supported and also gives kBadLength.)
  [[nodiscard]] WireError Check() const {
    if (bytes_.size() < kHeaderLen) return WireError::kTruncated;
    const size_t length = Length();
    if (length < kHeaderLen || length > bytes_.size()) {
      return WireError::kBadLength;
    }
    return WireError::kOk;
  }

  uint16_t SrcPort() const { return LoadBe16(&bytes_[kSrcPortOffset]); }
  uint16_t DstPort() const { return LoadBe16(&bytes_[kDstPortOffset]); }
  // Header plus payload, in bytes.
  uint16_t Length() const { return LoadBe16(&bytes_[kLengthOffset]); }
  uint16_t Checksum() const { return LoadBe16(&bytes_[kChecksumOffset]); }
  // False when the sender computed no checksum (zero field).
  bool HasChecksum() const { return Checksum() != 0; }
  // The first Length() bytes of the span.
  std::span<Byte> Datagram() const { return bytes_.first(Length()); }
  std::span<Byte> Payload() const {
    return bytes_.subspan(kHeaderLen, Length() - kHeaderLen);
  }
  std::span<Byte> bytes() const { return bytes_; }

  // Checksums. `pseudo_header_sum` is Ipv4PseudoHeaderSum /
  // Ipv6PseudoHeaderSum with protocol 17 and Length(). The variants taking
  // `payload_sum` read only the 8 header bytes of the span and take the
  // payload from the accumulator, which must hold exactly the payload
  // bytes in order (for a payload scattered over chunks); the others use
  // Payload(), so the span must hold the whole datagram.
  //
  // Precondition for all: Check() returned kOk, or the header was written
  // by UdpRepr::Emit into this span (and, for the Payload() variants, the
  // payload copied in after it).

  // The checksum field value for this header and payload; the stored field
  // is ignored. Never zero: a computed zero becomes 0xffff.
  uint16_t ComputeChecksum(uint16_t pseudo_header_sum,
                           const ChecksumAccumulator& payload_sum) const {
    ChecksumAccumulator acc;
    acc.AddBe16(SrcPort());
    acc.AddBe16(DstPort());
    acc.AddBe16(Length());
    acc.AddFolded(pseudo_header_sum);
    acc.AddFolded(payload_sum.Folded());
    const uint16_t checksum = acc.Checksum();
    return checksum == 0 ? 0xffff : checksum;
  }
  uint16_t ComputeChecksum(uint16_t pseudo_header_sum) const {
    return ComputeChecksum(pseudo_header_sum, PayloadSum());
  }
  void FillChecksum(uint16_t pseudo_header_sum,
                    const ChecksumAccumulator& payload_sum)
    requires kMutable
  {
    SetChecksum(ComputeChecksum(pseudo_header_sum, payload_sum));
  }
  void FillChecksum(uint16_t pseudo_header_sum)
    requires kMutable
  {
    FillChecksum(pseudo_header_sum, PayloadSum());
  }
  // A zero field is judged by `zero` alone. Otherwise true when the
  // pseudo-header, header (with its stored checksum) and payload sum to all
  // ones (RFC 1071 section 1).
  bool ChecksumValid(uint16_t pseudo_header_sum,
                     const ChecksumAccumulator& payload_sum,
                     UdpZeroChecksum zero) const {
    if (!HasChecksum()) return zero == UdpZeroChecksum::kAccept;
    ChecksumAccumulator acc;
    acc.Add(std::span<const uint8_t>(bytes_.first(kHeaderLen)));
    acc.AddFolded(pseudo_header_sum);
    acc.AddFolded(payload_sum.Folded());
    return acc.Folded() == 0xffff;
  }
  bool ChecksumValid(uint16_t pseudo_header_sum, UdpZeroChecksum zero) const {
    return ChecksumValid(pseudo_header_sum, PayloadSum(), zero);
  }

  void SetSrcPort(uint16_t v)
    requires kMutable
  {
    StoreBe16(&bytes_[kSrcPortOffset], v);
  }
  void SetDstPort(uint16_t v)
    requires kMutable
  {
    StoreBe16(&bytes_[kDstPortOffset], v);
  }
  void SetLength(uint16_t v)
    requires kMutable
  {
    StoreBe16(&bytes_[kLengthOffset], v);
  }
  void SetChecksum(uint16_t v)
    requires kMutable
  {
    StoreBe16(&bytes_[kChecksumOffset], v);
  }

 private:
  ChecksumAccumulator PayloadSum() const {
    ChecksumAccumulator acc;
    acc.Add(std::span<const uint8_t>(Payload()));
    return acc;
  }

  std::span<Byte> bytes_;
};

using UdpHeader = UdpHeaderT<const uint8_t>;
using MutableUdpHeader = UdpHeaderT<uint8_t>;

// The meaning of a UDP header.
struct UdpRepr {
  uint16_t src_port = 0;
  uint16_t dst_port = 0;
  // Bytes of payload, from the Length field; at most
  // UdpHeader::kMaxPayloadLen (the caller bounds it, e.g. by the MTU).
  uint16_t payload_len = 0;

  // Check()s the view, then fills `out`. The checksum is not verified.
  [[nodiscard]] static WireError Parse(const UdpHeader& header, UdpRepr& out);

  size_t BufferLen() const { return UdpHeader::kHeaderLen; }
  // Writes the 8 header bytes at the start of `header`, which must hold at
  // least that many: ports, Length = 8 + payload_len, and a zero checksum.
  // Then either call MutableUdpHeader::FillChecksum once the payload is in
  // place, or, over IPv4 only, leave the zero to send no checksum.
  void Emit(MutableUdpHeader header) const;

  friend bool operator==(const UdpRepr&, const UdpRepr&) = default;
};

}  // namespace netstack::wire

#endif  // NETSTACK_WIRE_UDP_H_
