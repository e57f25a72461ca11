// ARP (RFC 826) for Ethernet hardware and IPv4 protocol addresses only.
//
//    0                   1                   2                   3
//    0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   |     Hardware Type (ar$hrd)    |    Protocol Type (ar$pro)     |  0
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   |HW Len (ar$hln)|PrLen (ar$pln) |       Operation (ar$op)       |  4
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   |           Sender Hardware Address (ar$sha) bytes 0-3          |  8
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   |      sha bytes 4-5            | Sender Protocol Addr (ar$spa) | 12
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   |      spa bytes 2-3            | Target HW Address (ar$tha)    | 16
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   |                      tha bytes 2-5                            | 20
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   |              Target Protocol Address (ar$tpa)                 | 24
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// RFC 826 defines the address fields' offsets through the two length
// bytes; the fixed offsets below hold only for hlen 6 and plen 4, which
// Check() requires before any address is read.
#ifndef NETSTACK_WIRE_ARP_H_
#define NETSTACK_WIRE_ARP_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "netstack/wire/address.h"
#include "netstack/wire/bytes.h"
#include "netstack/wire/error.h"

namespace netstack::wire {

// ar$op values (RFC 826). Others (RARP, RFC 903; InARP, RFC 2390) exist on
// the wire but are not handled.
enum class ArpOperation : uint16_t {
  kRequest = 1,
  kReply = 2,
};

// View over one ARP packet. The span may be longer than 28 bytes: Ethernet
// pads ARP to the 60-byte minimum frame.
//
// Guarantee: after Check() returns kOk, every accessor reads inside the
// buffer and the address fields are at the fixed offsets below.
template <typename Byte>
class ArpPacketT {
 public:
  static constexpr bool kMutable = !std::is_const_v<Byte>;
  static constexpr size_t kHtypeOffset = 0;
  static constexpr size_t kPtypeOffset = 2;
  static constexpr size_t kHlenOffset = 4;
  static constexpr size_t kPlenOffset = 5;
  static constexpr size_t kOperOffset = 6;
  static constexpr size_t kFixedLen = 8;  // up to and including ar$op
  static constexpr size_t kShaOffset = 8;
  static constexpr size_t kSpaOffset = 14;
  static constexpr size_t kThaOffset = 18;
  static constexpr size_t kTpaOffset = 24;
  static constexpr size_t kPacketLen = 28;
  // ar$hrd for Ethernet (IANA "Hardware Types"), ar$pro for IPv4 (the
  // EtherType), and their address lengths.
  static constexpr uint16_t kHtypeEthernet = 1;
  static constexpr uint16_t kPtypeIpv4 = 0x0800;
  static constexpr uint8_t kHlenEthernet = 6;
  static constexpr uint8_t kPlenIpv4 = 4;

  explicit ArpPacketT(std::span<Byte> bytes) : bytes_(bytes) {}

  // Validates, in order: the fixed part fits (kTruncated); the hardware is
  // Ethernet and the protocol IPv4 (kUnsupported: well-formed ARP for
  // other networks); their lengths are 6 and 4 (kMalformed: no other
  // value is valid for those types); the addresses fit (kTruncated).
  [[nodiscard]] WireError Check() const {
    if (bytes_.size() < kFixedLen) return WireError::kTruncated;
    if (HardwareType() != kHtypeEthernet || ProtocolType() != kPtypeIpv4) {
      return WireError::kUnsupported;
    }
    if (HardwareLen() != kHlenEthernet || ProtocolLen() != kPlenIpv4) {
      return WireError::kMalformed;
    }
    if (bytes_.size() < kPacketLen) return WireError::kTruncated;
    return WireError::kOk;
  }

  uint16_t HardwareType() const { return LoadBe16(&bytes_[kHtypeOffset]); }
  uint16_t ProtocolType() const { return LoadBe16(&bytes_[kPtypeOffset]); }
  uint8_t HardwareLen() const { return bytes_[kHlenOffset]; }
  uint8_t ProtocolLen() const { return bytes_[kPlenOffset]; }
  uint16_t Operation() const { return LoadBe16(&bytes_[kOperOffset]); }
  MacAddress SenderMac() const {
    return MacAddress::FromBytes(&bytes_[kShaOffset]);
  }
  Ipv4Address SenderIp() const {
    return Ipv4Address::FromBytes(&bytes_[kSpaOffset]);
  }
  MacAddress TargetMac() const {
    return MacAddress::FromBytes(&bytes_[kThaOffset]);
  }
  Ipv4Address TargetIp() const {
    return Ipv4Address::FromBytes(&bytes_[kTpaOffset]);
  }
  std::span<Byte> bytes() const { return bytes_; }

  // Writes hardware/protocol type and length for Ethernet/IPv4.
  void SetEthernetIpv4Types()
    requires kMutable
  {
    StoreBe16(&bytes_[kHtypeOffset], kHtypeEthernet);
    StoreBe16(&bytes_[kPtypeOffset], kPtypeIpv4);
    bytes_[kHlenOffset] = kHlenEthernet;
    bytes_[kPlenOffset] = kPlenIpv4;
  }
  void SetOperation(uint16_t op)
    requires kMutable
  {
    StoreBe16(&bytes_[kOperOffset], op);
  }
  void SetSenderMac(const MacAddress& m)
    requires kMutable
  {
    m.CopyTo(&bytes_[kShaOffset]);
  }
  void SetSenderIp(const Ipv4Address& a)
    requires kMutable
  {
    a.CopyTo(&bytes_[kSpaOffset]);
  }
  void SetTargetMac(const MacAddress& m)
    requires kMutable
  {
    m.CopyTo(&bytes_[kThaOffset]);
  }
  void SetTargetIp(const Ipv4Address& a)
    requires kMutable
  {
    a.CopyTo(&bytes_[kTpaOffset]);
  }

 private:
  std::span<Byte> bytes_;
};

using ArpPacket = ArpPacketT<const uint8_t>;
using MutableArpPacket = ArpPacketT<uint8_t>;

// The meaning of an Ethernet/IPv4 ARP packet.
struct ArpRepr {
  ArpOperation operation = ArpOperation::kRequest;
  MacAddress sender_mac;
  Ipv4Address sender_ip;
  // Ignored in requests (RFC 826 leaves it unspecified; senders commonly
  // put zero), the requester's MAC in replies.
  MacAddress target_mac;
  Ipv4Address target_ip;

  // Check()s the view and fills `out`. An operation other than request or
  // reply is kUnsupported.
  [[nodiscard]] static WireError Parse(const ArpPacket& packet, ArpRepr& out);

  // Bytes Emit writes: the 28-byte packet, without Ethernet padding.
  size_t BufferLen() const { return ArpPacket::kPacketLen; }
  // Writes BufferLen() bytes at the start of `packet`, which must hold at
  // least that many.
  void Emit(MutableArpPacket packet) const;

  friend bool operator==(const ArpRepr&, const ArpRepr&) = default;
};

}  // namespace netstack::wire

#endif  // NETSTACK_WIRE_ARP_H_
