// Builders of frames a peer (the Linux kernel, in real life) would send,
// for stack tests, the fuzz test and benchmarks.
#ifndef NETSTACK_STACK_TEST_FRAMES_H_
#define NETSTACK_STACK_TEST_FRAMES_H_

#include <cstdint>
#include <vector>

#include "netstack/wire/address.h"

namespace netstack::stack::testing {

struct Peer {
  wire::MacAddress mac;
  wire::Ipv4Address ip4;
  wire::Ipv6Address ip6;
};

std::vector<uint8_t> ArpRequest(const Peer& from, const wire::Ipv4Address& target);
std::vector<uint8_t> ArpReply(const Peer& from, const wire::MacAddress& to_mac,
                              const wire::Ipv4Address& to_ip);

// The ICMP echo request message (header + data), `size` data bytes.
std::vector<uint8_t> Icmpv4Echo(uint16_t id, uint16_t seq, size_t size);
// IPv4 datagrams (no Ethernet) carrying `l4`, fragmented to fit `mtu` if
// needed (all fragments share `ident`).
std::vector<std::vector<uint8_t>> Ipv4Packets(const wire::Ipv4Address& src,
                                              const wire::Ipv4Address& dst,
                                              uint8_t protocol, uint16_t ident,
                                              const std::vector<uint8_t>& l4,
                                              size_t mtu);
std::vector<uint8_t> WithEthernet(const wire::MacAddress& src,
                                  const wire::MacAddress& dst, uint16_t type,
                                  const std::vector<uint8_t>& payload);

// ICMPv6 echo request with checksum for src/dst.
std::vector<uint8_t> Icmpv6Echo(const wire::Ipv6Address& src,
                                const wire::Ipv6Address& dst, uint16_t id,
                                uint16_t seq, size_t size);
// To the target's solicited-node group, or unicast to `dst`/`dst_mac`.
std::vector<uint8_t> Icmpv6NeighborSolicitation(
    const Peer& from, const wire::Ipv6Address& target,
    const wire::Ipv6Address* dst = nullptr,
    const wire::MacAddress* dst_mac = nullptr);
std::vector<std::vector<uint8_t>> Ipv6Packets(const wire::Ipv6Address& src,
                                              const wire::Ipv6Address& dst,
                                              uint8_t next_header,
                                              uint8_t hop_limit,
                                              uint32_t ident,
                                              const std::vector<uint8_t>& l4,
                                              size_t mtu);

}  // namespace netstack::stack::testing

#endif  // NETSTACK_STACK_TEST_FRAMES_H_
