// Addresses with prefixes, and the routing table: longest prefix match.
//
// A sandbox backend has a handful of routes (the subnet, a default
// gateway), so the table is a vector kept sorted by prefix length, longest
// first, and lookup is a linear scan: a few compares beat any trie at this
// size. Revisit if a user ever installs thousands of routes.
#ifndef NETSTACK_STACK_ROUTE_TABLE_H_
#define NETSTACK_STACK_ROUTE_TABLE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "netstack/wire/address.h"

namespace netstack::stack {

using NicId = uint32_t;

// True when the first `prefix_len` bits of a and b are equal.
template <typename Address>
bool PrefixMatch(const Address& a, const Address& b, uint8_t prefix_len) {
  size_t bits = prefix_len;
  for (size_t i = 0; i < Address::kSize && bits > 0; ++i) {
    const uint8_t mask =
        bits >= 8 ? 0xff : static_cast<uint8_t>(0xff << (8 - bits));
    if ((a.bytes[i] & mask) != (b.bytes[i] & mask)) return false;
    bits = bits >= 8 ? bits - 8 : 0;
  }
  return true;
}

template <typename Address>
struct Cidr {
  Address address;
  uint8_t prefix_len = 0;

  bool Contains(const Address& a) const {
    return PrefixMatch(address, a, prefix_len);
  }
  friend bool operator==(const Cidr&, const Cidr&) = default;
};
using Ipv4Cidr = Cidr<wire::Ipv4Address>;
using Ipv6Cidr = Cidr<wire::Ipv6Address>;

// "10.0.0.2/24", "fd00::2/64". A missing prefix is an error: a host
// address is "/32" or "/128", explicitly.
std::optional<Ipv4Cidr> ParseIpv4Cidr(std::string_view text);
std::optional<Ipv6Cidr> ParseIpv6Cidr(std::string_view text);
std::string ToString(const Ipv4Cidr& c);
std::string ToString(const Ipv6Cidr& c);

template <typename Address>
struct Route {
  Cidr<Address> destination;
  // Unset for an on-link route: the destination itself is the next hop.
  std::optional<Address> gateway;
  NicId nic = 0;
};

template <typename Address>
class RouteTable {
 public:
  void Add(const Route<Address>& r) {
    auto it = routes_.begin();
    while (it != routes_.end() &&
           it->destination.prefix_len >= r.destination.prefix_len) {
      ++it;
    }
    routes_.insert(it, r);
  }

  struct NextHop {
    Address address;
    NicId nic;
  };
  // The next hop for `dst`: the gateway of the longest matching route, or
  // `dst` itself for an on-link route. nullopt: no route.
  std::optional<NextHop> Lookup(const Address& dst) const {
    for (const auto& r : routes_) {
      if (r.destination.Contains(dst)) {
        return NextHop{r.gateway.value_or(dst), r.nic};
      }
    }
    return std::nullopt;
  }

  const std::vector<Route<Address>>& routes() const { return routes_; }

 private:
  std::vector<Route<Address>> routes_;
};

}  // namespace netstack::stack

#endif  // NETSTACK_STACK_ROUTE_TABLE_H_
