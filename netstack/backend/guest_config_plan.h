// The addresses and parameters the guest configuration services hand out
// (DHCPv4, router advertisements, DHCPv6). The backend fills it from its
// address plan; the defaults are slirp4netns's.
#ifndef NETSTACK_BACKEND_GUEST_CONFIG_PLAN_H_
#define NETSTACK_BACKEND_GUEST_CONFIG_PLAN_H_

#include <cstdint>

#include "netstack/base/time.h"
#include "netstack/wire/address.h"

namespace netstack::backend {

struct GuestConfigPlan {
  // IPv4: 10.0.2.0/24, the gateway (our DHCP server id and the router
  // option) .2, DNS .3, the guest's one lease .100.
  wire::Ipv4Address gateway4 = wire::Ipv4Address::FromU32(0x0a000202);
  uint8_t prefix_len4 = 24;
  wire::Ipv4Address dns4 = wire::Ipv4Address::FromU32(0x0a000203);
  wire::Ipv4Address guest4 = wire::Ipv4Address::FromU32(0x0a000264);
  uint32_t lease_seconds = 24 * 3600;
  // Off: no DHCPv4 server (libslirp's disable_dhcp; the C ABI's); a
  // DISCOVER from 0.0.0.0 is then dropped like any unspecified source.
  bool dhcp4 = true;
  // Off: no router advertisements and no DHCPv6 (the guest has no IPv6
  // from us; BackendPolicy::ipv6).
  bool ipv6 = true;
  // IPv6: the guest takes its address by SLAAC in `prefix6`/64; the RA
  // comes from the stack's link-local address, the router's global
  // address is gateway6, DNS (RDNSS and DHCPv6) dns6.
  wire::Ipv6Address prefix6 = Fd00(0);
  wire::Ipv6Address gateway6 = Fd00(2);
  wire::Ipv6Address dns6 = Fd00(3);
  // The link MTU announced (DHCP option 26, RA MTU option). DHCP's field
  // is 16 bits: values above 65535 are announced as 65535, and below 576
  // (RFC 2132 5.1's floor of 68 is legal, but RFC 791 hosts need 576) the
  // option is left out.
  uint32_t mtu = 65520;
  // Router advertisements (RFC 4861 6.2.1).
  Duration ra_interval = absl::Seconds(200);  // MaxRtrAdvInterval
  uint16_t router_lifetime_seconds = 1800;
  uint32_t prefix_valid_seconds = 86400;
  uint32_t prefix_preferred_seconds = 14400;
  uint32_t rdnss_lifetime_seconds = 600;  // RFC 8106: >= 3 * interval

  static wire::Ipv6Address Fd00(uint8_t last) {
    wire::Ipv6Address a;
    a.bytes[0] = 0xfd;
    a.bytes[15] = last;
    return a;
  }
};

}  // namespace netstack::backend

#endif  // NETSTACK_BACKEND_GUEST_CONFIG_PLAN_H_
