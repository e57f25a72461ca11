// Link and network addresses as distinct value types, so a MAC address can
// never be passed where an IPv4 address is expected.
#ifndef NETSTACK_WIRE_ADDRESS_H_
#define NETSTACK_WIRE_ADDRESS_H_

#include <array>
#include <compare>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace netstack::wire {

namespace internal {
// Fixed-size byte string with value semantics; the base of the address
// types below. Octets are in network order.
template <size_t N, typename Tag>
struct Octets {
  static constexpr size_t kSize = N;
  std::array<uint8_t, N> bytes{};

  void CopyTo(uint8_t* p) const { std::memcpy(p, bytes.data(), N); }
  bool IsZero() const {
    for (uint8_t b : bytes) {
      if (b != 0) return false;
    }
    return true;
  }
  friend auto operator<=>(const Octets&, const Octets&) = default;
  friend bool operator==(const Octets&, const Octets&) = default;
};
struct MacTag {};
struct Ipv4Tag {};
struct Ipv6Tag {};
}  // namespace internal

struct MacAddress : internal::Octets<6, internal::MacTag> {
  static MacAddress FromBytes(const uint8_t* p) {
    MacAddress m;
    std::memcpy(m.bytes.data(), p, kSize);
    return m;
  }
  static constexpr MacAddress Broadcast() {
    MacAddress m;
    m.bytes = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    return m;
  }
  bool IsBroadcast() const { return *this == Broadcast(); }
  bool IsMulticast() const { return (bytes[0] & 1) != 0; }
  // "aa:bb:cc:dd:ee:ff"
  std::string ToString() const;
  static std::optional<MacAddress> Parse(std::string_view text);
};

struct Ipv4Address : internal::Octets<4, internal::Ipv4Tag> {
  static Ipv4Address FromBytes(const uint8_t* p) {
    Ipv4Address a;
    std::memcpy(a.bytes.data(), p, kSize);
    return a;
  }
  static constexpr Ipv4Address FromU32(uint32_t host_order) {
    Ipv4Address a;
    a.bytes = {static_cast<uint8_t>(host_order >> 24),
               static_cast<uint8_t>(host_order >> 16),
               static_cast<uint8_t>(host_order >> 8),
               static_cast<uint8_t>(host_order)};
    return a;
  }
  constexpr uint32_t ToU32() const {
    return (uint32_t{bytes[0]} << 24) | (uint32_t{bytes[1]} << 16) |
           (uint32_t{bytes[2]} << 8) | uint32_t{bytes[3]};
  }
  bool IsBroadcast() const { return ToU32() == 0xffffffffu; }
  bool IsMulticast() const { return (bytes[0] & 0xf0) == 0xe0; }
  // Dotted quad.
  std::string ToString() const;
  static std::optional<Ipv4Address> Parse(std::string_view text);
};

struct Ipv6Address : internal::Octets<16, internal::Ipv6Tag> {
  static Ipv6Address FromBytes(const uint8_t* p) {
    Ipv6Address a;
    std::memcpy(a.bytes.data(), p, kSize);
    return a;
  }
  bool IsMulticast() const { return bytes[0] == 0xff; }
  bool IsLinkLocal() const {
    return bytes[0] == 0xfe && (bytes[1] & 0xc0) == 0x80;
  }
  // An IPv4 address inside this one: IPv4-mapped ::ffff:a.b.c.d (RFC 4291
  // 2.5.5.2) or the deprecated IPv4-compatible ::a.b.c.d (2.5.5.1),
  // leaving out :: and ::1, which have their own meaning. A host's
  // AF_INET6 socket without IPV6_V6ONLY sends to a mapped address as
  // IPv4: a gateway that passed one on would let a guest reach the host's
  // IPv4 loopback (or 0.0.0.0, which Linux takes for it) whatever its
  // policy says.
  bool EmbedsIpv4() const {
    for (size_t i = 0; i < 10; ++i) {
      if (bytes[i] != 0) return false;
    }
    if (bytes[10] == 0xff && bytes[11] == 0xff) return true;  // mapped
    if (bytes[10] != 0 || bytes[11] != 0) return false;
    // Compatible: anything but ::0.0.0.0 and ::0.0.0.1.
    return bytes[12] != 0 || bytes[13] != 0 || bytes[14] != 0 ||
           bytes[15] > 1;
  }
  // RFC 5952 text form ("fe80::1").
  std::string ToString() const;
  static std::optional<Ipv6Address> Parse(std::string_view text);
};

}  // namespace netstack::wire

#endif  // NETSTACK_WIRE_ADDRESS_H_
