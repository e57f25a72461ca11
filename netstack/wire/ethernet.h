// Ethernet II frames, with an optional single 802.1Q (or 802.1ad) tag.
//
//   0                   1                   2                   3
//   +-------------------------------------------------------------+
//   |          destination MAC (6)      |      source MAC (6)      |
//   +-------------------------------------------------------------+
//   | [TPID 0x8100 (2) | TCI (2)]  | EtherType (2) | payload ...   |
//   +-------------------------------------------------------------+
#ifndef NETSTACK_WIRE_ETHERNET_H_
#define NETSTACK_WIRE_ETHERNET_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <type_traits>

#include "netstack/wire/address.h"
#include "netstack/wire/bytes.h"
#include "netstack/wire/error.h"

namespace netstack::wire {

enum class EtherType : uint16_t {
  kIpv4 = 0x0800,
  kArp = 0x0806,
  kVlan = 0x8100,
  kQinQ = 0x88a8,
  kIpv6 = 0x86dd,
};

// View over the bytes of one frame. `Byte` is `const uint8_t` for a
// read-only view and `uint8_t` for a writable one; setters exist only on
// the writable view.
//
// Guarantee: after Check() returns kOk, every accessor reads inside the
// buffer, and Payload() starts after the tag (if any) and EtherType.
template <typename Byte>
class EthernetFrameT {
 public:
  static constexpr bool kMutable = !std::is_const_v<Byte>;
  static constexpr size_t kDstOffset = 0;
  static constexpr size_t kSrcOffset = 6;
  static constexpr size_t kTypeOffset = 12;
  static constexpr size_t kHeaderLen = 14;
  static constexpr size_t kVlanTagLen = 4;

  explicit EthernetFrameT(std::span<Byte> bytes) : bytes_(bytes) {}

  [[nodiscard]] WireError Check() const {
    if (bytes_.size() < kHeaderLen) return WireError::kTruncated;
    if (HasVlanTag() && bytes_.size() < kHeaderLen + kVlanTagLen) {
      return WireError::kTruncated;
    }
    return WireError::kOk;
  }

  MacAddress Destination() const {
    return MacAddress::FromBytes(&bytes_[kDstOffset]);
  }
  MacAddress Source() const {
    return MacAddress::FromBytes(&bytes_[kSrcOffset]);
  }
  // The EtherType field right after the source address: a TPID if tagged.
  uint16_t OuterType() const { return LoadBe16(&bytes_[kTypeOffset]); }
  bool HasVlanTag() const {
    const uint16_t t = OuterType();
    return t == static_cast<uint16_t>(EtherType::kVlan) ||
           t == static_cast<uint16_t>(EtherType::kQinQ);
  }
  // Tag control information; only meaningful when HasVlanTag().
  uint16_t VlanTci() const { return LoadBe16(&bytes_[kTypeOffset + 2]); }
  // The EtherType of the payload, after any tag.
  uint16_t Type() const {
    return HasVlanTag() ? LoadBe16(&bytes_[kTypeOffset + 4]) : OuterType();
  }
  size_t HeaderLen() const {
    return HasVlanTag() ? kHeaderLen + kVlanTagLen : kHeaderLen;
  }
  std::span<Byte> Payload() const { return bytes_.subspan(HeaderLen()); }
  std::span<Byte> bytes() const { return bytes_; }

  void SetDestination(const MacAddress& m)
    requires kMutable
  {
    m.CopyTo(&bytes_[kDstOffset]);
  }
  void SetSource(const MacAddress& m)
    requires kMutable
  {
    m.CopyTo(&bytes_[kSrcOffset]);
  }
  void SetOuterType(uint16_t t)
    requires kMutable
  {
    StoreBe16(&bytes_[kTypeOffset], t);
  }

 private:
  std::span<Byte> bytes_;
};

using EthernetFrame = EthernetFrameT<const uint8_t>;
using MutableEthernetFrame = EthernetFrameT<uint8_t>;

struct VlanTag {
  uint16_t tpid = static_cast<uint16_t>(EtherType::kVlan);
  uint16_t tci = 0;
  friend bool operator==(const VlanTag&, const VlanTag&) = default;
};

// The meaning of an Ethernet header.
struct EthernetRepr {
  MacAddress src;
  MacAddress dst;
  uint16_t ethertype = 0;  // of the payload, after any tag
  std::optional<VlanTag> vlan;

  [[nodiscard]] static WireError Parse(const EthernetFrame& frame,
                                       EthernetRepr& out);
  size_t BufferLen() const {
    return EthernetFrame::kHeaderLen +
           (vlan ? EthernetFrame::kVlanTagLen : 0);
  }
  // Writes BufferLen() bytes at the start of `frame`, which must hold at
  // least that many.
  void Emit(MutableEthernetFrame frame) const;

  friend bool operator==(const EthernetRepr&, const EthernetRepr&) = default;
};

}  // namespace netstack::wire

#endif  // NETSTACK_WIRE_ETHERNET_H_
