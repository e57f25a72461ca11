// IPv4 headers (RFC 791 section 3.1).
//
//    0                   1                   2                   3
//    0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   |Version|  IHL  |   DSCP    |ECN|          Total Length         |
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   |         Identification        |R|D|M|     Fragment Offset     |
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   |  Time to Live |    Protocol   |         Header Checksum       |
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   |                       Source Address                          |
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   |                    Destination Address                        |
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   |                    Options (0-40 bytes)       |    Padding    |
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The Type of Service byte is split into DSCP and ECN (RFC 2474 section 3,
// RFC 3168 section 5). Flags: R reserved (must be zero), D Don't Fragment,
// M More Fragments. IHL and Fragment Offset count 4- and 8-byte units.
#ifndef NETSTACK_WIRE_IPV4_H_
#define NETSTACK_WIRE_IPV4_H_

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "netstack/wire/address.h"
#include "netstack/wire/bytes.h"
#include "netstack/wire/checksum.h"
#include "netstack/wire/error.h"
#include "netstack/wire/ip_protocol.h"

namespace netstack::wire {

// Option types (RFC 791 section 3.1 "Options"; Router Alert is RFC 2113).
// The type byte holds copied(1) | class(2) | number(5); these are the whole
// bytes as they appear on the wire.
enum class Ipv4OptionType : uint8_t {
  kEndOfList = 0,
  kNop = 1,
  kRecordRoute = 7,
  kTimestamp = 68,
  kSecurity = 130,
  kLooseSourceRoute = 131,
  kStreamId = 136,
  kStrictSourceRoute = 137,
  kRouterAlert = 148,
};

// Checks the syntax of an IPv4 option area (the bytes between the fixed
// header and the end of the header, padding included):
//   - End of Option List (0) ends the walk; later bytes are padding.
//   - No Operation (1) is a single byte.
//   - Every other option is type, length, data, where the length counts the
//     type and length bytes. A length below 2 (or below the minimum of a
//     known kind) is kBadOptionLength; an option whose length byte is
//     missing or whose length runs past the area is kOptionOverflow.
// Option semantics (route pointers, timestamps) are not interpreted.
[[nodiscard]] WireError CheckIpv4Options(std::span<const uint8_t> options);

// One option found by Ipv4OptionReader. `data` excludes the type and length
// bytes and is empty for NOP. It points into the packet buffer.
struct Ipv4Option {
  uint8_t type = 0;
  std::span<const uint8_t> data;
};

// Walks an option area that CheckIpv4Options (or Ipv4Packet::Check) has
// accepted. On an unchecked area it stops at the first malformed option
// instead of reading out of bounds, but callers should not rely on that to
// detect malformed options.
class Ipv4OptionReader {
 public:
  explicit Ipv4OptionReader(std::span<const uint8_t> options)
      : options_(options) {}

  // Stores the next option in `out` and returns true, or returns false at
  // End of Option List or the end of the area.
  bool Next(Ipv4Option& out);

 private:
  std::span<const uint8_t> options_;
  size_t pos_ = 0;
};

// View over the bytes of one IPv4 datagram, header first. The span may be
// longer than Total Length: Ethernet pads frames to 60 bytes, so a short
// datagram arrives with trailing bytes that are not part of it.
//
// Guarantee: after Check() returns kOk, every accessor reads inside the
// buffer, Options() is the whole option area (validated by
// CheckIpv4Options), and Payload() ends at Total Length, not at the end of
// the buffer.
template <typename Byte>
class Ipv4PacketT {
 public:
  static constexpr bool kMutable = !std::is_const_v<Byte>;
  static constexpr size_t kVersionIhlOffset = 0;
  static constexpr size_t kDscpEcnOffset = 1;
  static constexpr size_t kTotalLengthOffset = 2;
  static constexpr size_t kIdentOffset = 4;
  static constexpr size_t kFlagsFragOffset = 6;
  static constexpr size_t kTtlOffset = 8;
  static constexpr size_t kProtocolOffset = 9;
  static constexpr size_t kChecksumOffset = 10;
  static constexpr size_t kSrcOffset = 12;
  static constexpr size_t kDstOffset = 16;
  static constexpr size_t kMinHeaderLen = 20;
  static constexpr size_t kMaxHeaderLen = 60;  // IHL is 4 bits: 15 * 4
  static constexpr size_t kMaxOptionsLen = kMaxHeaderLen - kMinHeaderLen;
  static constexpr uint8_t kVersion = 4;
  // Bits of the 16-bit flags/fragment-offset word.
  static constexpr uint16_t kFlagReserved = 0x8000;
  static constexpr uint16_t kFlagDontFragment = 0x4000;
  static constexpr uint16_t kFlagMoreFragments = 0x2000;
  static constexpr uint16_t kFragOffsetMask = 0x1fff;

  explicit Ipv4PacketT(std::span<Byte> bytes) : bytes_(bytes) {}

  // Validates, in order: the fixed header fits (kTruncated); Version is 4
  // (kBadVersion); IHL is at least 5 and the header fits the buffer
  // (kBadHeaderLength); Total Length covers the header and fits the buffer
  // (kBadLength); the option area is well formed (CheckIpv4Options).
  [[nodiscard]] WireError Check() const {
    if (bytes_.size() < kMinHeaderLen) return WireError::kTruncated;
    if (Version() != kVersion) return WireError::kBadVersion;
    const size_t header_len = HeaderLen();
    if (header_len < kMinHeaderLen || header_len > bytes_.size()) {
      return WireError::kBadHeaderLength;
    }
    const size_t total_len = TotalLength();
    if (total_len < header_len || total_len > bytes_.size()) {
      return WireError::kBadLength;
    }
    return CheckIpv4Options(Options());
  }

  uint8_t Version() const { return bytes_[kVersionIhlOffset] >> 4; }
  // Internet Header Length in 32-bit words.
  uint8_t Ihl() const { return bytes_[kVersionIhlOffset] & 0x0f; }
  size_t HeaderLen() const { return size_t{Ihl()} * 4; }
  // The whole former Type of Service byte.
  uint8_t DscpEcn() const { return bytes_[kDscpEcnOffset]; }
  uint8_t Dscp() const { return DscpEcn() >> 2; }
  uint8_t Ecn() const { return DscpEcn() & 0x03; }
  uint16_t TotalLength() const { return LoadBe16(&bytes_[kTotalLengthOffset]); }
  uint16_t Ident() const { return LoadBe16(&bytes_[kIdentOffset]); }
  uint16_t FlagsAndFragOffset() const {
    return LoadBe16(&bytes_[kFlagsFragOffset]);
  }
  bool ReservedFlag() const {
    return (FlagsAndFragOffset() & kFlagReserved) != 0;
  }
  bool DontFragment() const {
    return (FlagsAndFragOffset() & kFlagDontFragment) != 0;
  }
  bool MoreFragments() const {
    return (FlagsAndFragOffset() & kFlagMoreFragments) != 0;
  }
  // Fragment offset in 8-byte units, as on the wire.
  uint16_t FragOffsetUnits() const {
    return FlagsAndFragOffset() & kFragOffsetMask;
  }
  // Fragment offset in bytes (at most 8191 * 8 = 65528).
  uint16_t FragOffsetBytes() const {
    return static_cast<uint16_t>(FragOffsetUnits() * 8);
  }
  // True for any fragment of a fragmented datagram, first one included
  // (RFC 791 section 3.2 "Fragmentation and Reassembly").
  bool IsFragment() const { return MoreFragments() || FragOffsetUnits() != 0; }
  uint8_t Ttl() const { return bytes_[kTtlOffset]; }
  uint8_t Protocol() const { return bytes_[kProtocolOffset]; }
  uint16_t HeaderChecksum() const { return LoadBe16(&bytes_[kChecksumOffset]); }
  Ipv4Address Source() const {
    return Ipv4Address::FromBytes(&bytes_[kSrcOffset]);
  }
  Ipv4Address Destination() const {
    return Ipv4Address::FromBytes(&bytes_[kDstOffset]);
  }

  // The header, options included.
  std::span<Byte> Header() const { return bytes_.first(HeaderLen()); }
  // Options and padding, between the fixed header and HeaderLen().
  std::span<Byte> Options() const {
    return bytes_.subspan(kMinHeaderLen, HeaderLen() - kMinHeaderLen);
  }
  // The datagram's data: from HeaderLen() to Total Length, so link-layer
  // padding after the datagram is excluded.
  std::span<Byte> Payload() const {
    return bytes_.subspan(HeaderLen(), TotalLength() - HeaderLen());
  }
  std::span<Byte> bytes() const { return bytes_; }

  // RFC 791 section 3.1: the checksum is the complement of the ones'
  // complement sum of the header, so summing a correct header including
  // its checksum field gives all ones, whose complement is zero.
  bool HeaderChecksumValid() const { return InternetChecksum(Header()) == 0; }

  void SetVersionAndIhl(uint8_t ihl_words)
    requires kMutable
  {
    bytes_[kVersionIhlOffset] =
        static_cast<uint8_t>((kVersion << 4) | (ihl_words & 0x0f));
  }
  void SetDscpEcn(uint8_t v)
    requires kMutable
  {
    bytes_[kDscpEcnOffset] = v;
  }
  void SetTotalLength(uint16_t v)
    requires kMutable
  {
    StoreBe16(&bytes_[kTotalLengthOffset], v);
  }
  void SetIdent(uint16_t v)
    requires kMutable
  {
    StoreBe16(&bytes_[kIdentOffset], v);
  }
  void SetFlagsAndFragOffset(uint16_t v)
    requires kMutable
  {
    StoreBe16(&bytes_[kFlagsFragOffset], v);
  }
  void SetTtl(uint8_t v)
    requires kMutable
  {
    bytes_[kTtlOffset] = v;
  }
  void SetProtocol(uint8_t v)
    requires kMutable
  {
    bytes_[kProtocolOffset] = v;
  }
  void SetHeaderChecksum(uint16_t v)
    requires kMutable
  {
    StoreBe16(&bytes_[kChecksumOffset], v);
  }
  void SetSource(const Ipv4Address& a)
    requires kMutable
  {
    a.CopyTo(&bytes_[kSrcOffset]);
  }
  void SetDestination(const Ipv4Address& a)
    requires kMutable
  {
    a.CopyTo(&bytes_[kDstOffset]);
  }
  // Computes the header checksum over HeaderLen() bytes (with the field
  // zeroed first, RFC 791 section 3.1) and stores it. Call after every
  // other header field is final.
  void FillHeaderChecksum()
    requires kMutable
  {
    SetHeaderChecksum(0);
    SetHeaderChecksum(InternetChecksum(Header()));
  }

 private:
  std::span<Byte> bytes_;
};

using Ipv4Packet = Ipv4PacketT<const uint8_t>;
using MutableIpv4Packet = Ipv4PacketT<uint8_t>;

// The raw option area of a header, kept inline so a Repr needs no
// allocation and Emit reproduces the options byte for byte.
class Ipv4OptionBytes {
 public:
  static constexpr size_t kCapacity = Ipv4Packet::kMaxOptionsLen;

  Ipv4OptionBytes() = default;

  // Replaces the contents; returns false (leaving them unchanged) when
  // `bytes` exceeds kCapacity.
  [[nodiscard]] bool Assign(std::span<const uint8_t> bytes);
  void Clear() { len_ = 0; }

  std::span<const uint8_t> span() const {
    return std::span<const uint8_t>(bytes_.data(), len_);
  }
  size_t size() const { return len_; }
  bool empty() const { return len_ == 0; }

  // Compares the used bytes only.
  friend bool operator==(const Ipv4OptionBytes& a, const Ipv4OptionBytes& b) {
    return std::ranges::equal(a.span(), b.span());
  }

 private:
  std::array<uint8_t, kCapacity> bytes_{};
  uint8_t len_ = 0;
};

// The meaning of an IPv4 header.
struct Ipv4Repr {
  Ipv4Address src;
  Ipv4Address dst;
  uint8_t protocol = 0;  // an IpProtocol value, or any other number
  uint8_t ttl = 64;
  uint8_t dscp_ecn = 0;  // the whole former Type of Service byte
  uint16_t ident = 0;
  bool dont_fragment = false;
  bool more_fragments = false;
  // In bytes. Must be a multiple of 8 (the wire counts 8-byte units); Emit
  // drops the low three bits.
  uint16_t fragment_offset = 0;
  // Bytes after the header: Total Length - header length.
  uint16_t payload_len = 0;
  // Raw option area. Emit pads it with zero bytes (End of Option List) to
  // a multiple of 4, as RFC 791 requires for the header to end on a 32-bit
  // boundary; a parsed area is always already a multiple of 4.
  Ipv4OptionBytes options;

  // Check()s the view and fills `out`. Does not verify the header
  // checksum: use Ipv4Packet::HeaderChecksumValid(). The reserved flag is
  // ignored on receipt (robustness principle, RFC 1122 section 1.2.2) and
  // written as zero by Emit.
  [[nodiscard]] static WireError Parse(const Ipv4Packet& packet, Ipv4Repr& out);

  // Header length with options padded to a multiple of 4.
  size_t HeaderLen() const {
    return Ipv4Packet::kMinHeaderLen + (options.size() + 3) / 4 * 4;
  }
  // Bytes Emit writes: the header only. The payload is written by the
  // caller after it.
  size_t BufferLen() const { return HeaderLen(); }
  // Value of the Total Length field. Callers keep HeaderLen() +
  // payload_len within 65535; Emit writes the low 16 bits.
  size_t TotalLen() const { return HeaderLen() + payload_len; }

  // Writes BufferLen() bytes at the start of `packet`, which must hold at
  // least that many: every field, Total Length, and the header checksum.
  void Emit(MutableIpv4Packet packet) const;

  friend bool operator==(const Ipv4Repr&, const Ipv4Repr&) = default;
};

}  // namespace netstack::wire

#endif  // NETSTACK_WIRE_IPV4_H_
