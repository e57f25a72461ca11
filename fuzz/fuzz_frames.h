// Frames for the fuzz targets that feed a whole Stack: a transport payload
// from the fuzzer, wrapped in a valid Ethernet + IP header with its TCP,
// UDP or ICMPv6 checksum filled in, so the transports and the services
// behind them see the fuzzer's bytes instead of a checksum drop.
#ifndef NETSTACK_FUZZ_FUZZ_FRAMES_H_
#define NETSTACK_FUZZ_FUZZ_FRAMES_H_

#include <cstdint>
#include <vector>

#include "netstack/wire/address.h"

namespace netstack::fuzz {

// Fills the checksum of a TCP (offset 16), UDP (6) or ICMPv6 (2) payload
// over the pseudo-header sum `pseudo_sum`, when it is long enough to have
// one; other protocols are left as they are.
void FillL4Checksum(std::vector<uint8_t>& l4, uint8_t proto,
                    uint16_t pseudo_sum);

// One Ethernet frame: `l4` over IPv4 (TTL 64) from `src` to `dst`.
std::vector<uint8_t> Ipv4Frame(const wire::MacAddress& src_mac,
                               const wire::MacAddress& dst_mac,
                               const wire::Ipv4Address& src,
                               const wire::Ipv4Address& dst, uint8_t proto,
                               std::vector<uint8_t> l4, uint16_t ident);

// One Ethernet frame: `l4` over IPv6 with `hop_limit`.
std::vector<uint8_t> Ipv6Frame(const wire::MacAddress& src_mac,
                               const wire::MacAddress& dst_mac,
                               const wire::Ipv6Address& src,
                               const wire::Ipv6Address& dst, uint8_t proto,
                               uint8_t hop_limit, std::vector<uint8_t> l4,
                               uint16_t ident);

}  // namespace netstack::fuzz

#endif  // NETSTACK_FUZZ_FUZZ_FRAMES_H_
