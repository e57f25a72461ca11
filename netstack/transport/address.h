// Transport-layer addressing shared by TCP and UDP: an IP address of
// either family, a socket address (address + port) and the 4-tuple that
// names a connection.
#ifndef NETSTACK_TRANSPORT_ADDRESS_H_
#define NETSTACK_TRANSPORT_ADDRESS_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/hash/hash.h"
#include "netstack/wire/address.h"

namespace netstack::transport {

enum class Family : uint8_t { kIpv4 = 4, kIpv6 = 6 };

// An IPv4 or IPv6 address. The unspecified address of a family
// (0.0.0.0, ::) means "any" when binding.
class IpAddress {
 public:
  IpAddress() = default;  // 0.0.0.0
  IpAddress(const wire::Ipv4Address& a) : family_(Family::kIpv4), v4_(a) {}
  IpAddress(const wire::Ipv6Address& a) : family_(Family::kIpv6), v6_(a) {}

  Family family() const { return family_; }
  bool is_v4() const { return family_ == Family::kIpv4; }
  bool is_v6() const { return family_ == Family::kIpv6; }
  const wire::Ipv4Address& v4() const { return v4_; }
  const wire::Ipv6Address& v6() const { return v6_; }
  bool IsUnspecified() const;

  std::string ToString() const;
  // "10.0.0.1" or "fd00::1" (no brackets).
  static std::optional<IpAddress> Parse(std::string_view text);

  friend bool operator==(const IpAddress& a, const IpAddress& b) {
    return a.family_ == b.family_ &&
           (a.is_v4() ? a.v4_ == b.v4_ : a.v6_ == b.v6_);
  }
  template <typename H>
  friend H AbslHashValue(H h, const IpAddress& a) {
    return a.is_v4() ? H::combine(std::move(h), 4, a.v4_.bytes)
                     : H::combine(std::move(h), 6, a.v6_.bytes);
  }

 private:
  Family family_ = Family::kIpv4;
  wire::Ipv4Address v4_;
  wire::Ipv6Address v6_;
};

struct SocketAddress {
  IpAddress ip;
  uint16_t port = 0;

  // "10.0.0.1:80", "[fd00::1]:80".
  std::string ToString() const;
  static std::optional<SocketAddress> Parse(std::string_view text);

  friend bool operator==(const SocketAddress&, const SocketAddress&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const SocketAddress& a) {
    return H::combine(std::move(h), a.ip, a.port);
  }
};

// A connection's name, seen from our side.
struct FourTuple {
  SocketAddress local;
  SocketAddress remote;

  friend bool operator==(const FourTuple&, const FourTuple&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const FourTuple& t) {
    return H::combine(std::move(h), t.local, t.remote);
  }
};

}  // namespace netstack::transport

#endif  // NETSTACK_TRANSPORT_ADDRESS_H_
