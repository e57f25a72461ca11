// IP fragmentation on the way out: IPv4 (RFC 791 section 3.2, "An Example
// Fragmentation Procedure") and IPv6 (RFC 8200 section 4.5).
//
// Each fragment is one PacketBuffer from the caller's PacketPool:
//   - its IP header (IPv4; or IPv6 fixed header + Fragment header) is
//     prepended into the packet's headroom with the wire Reprs' Emit, so
//     lengths, offset, flags and the IPv4 header checksum are right;
//   - its payload is sub-views of the caller's payload views: the payload
//     bytes are never copied, and every fragment shares the input chunks;
//   - the rest of the headroom is left for the link: the caller prepends
//     Ethernet (and anything else) to each packet of the chain afterwards.
// Fragment data lengths are multiples of 8 except the last (both RFCs).
// A fragment uses at most PacketBuffer::kMaxPayloadViews views: when the
// input is split into many small views, a fragment ends early (at a
// multiple of 8) instead of exceeding the limit.
//
// Sizes: `mtu` is the largest IP packet the link carries, IP header
// included, Ethernet excluded (1500 on Ethernet). Values above 65535 are
// treated as 65535 (the largest IP packet).
//
// When the whole datagram fits in `mtu`, the result is one packet, not
// fragmented: IPv4 with the header as given (DF may be set), IPv6 without a
// Fragment header (RFC 8021 deprecates atomic fragments). So the IP output
// path can call these unconditionally.
//
// Failures are clean: `out` is unchanged, every packet taken from the pool
// has been returned, and the status says why. In particular DF: when an
// IPv4 datagram with Don't Fragment does not fit, kDontFragment is
// returned and nothing is sent; what to do (ICMP Fragmentation Needed to a
// local sender, RFC 1191; lowering the path MTU) is the caller's business.
#ifndef NETSTACK_IP_FRAGMENT_H_
#define NETSTACK_IP_FRAGMENT_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "netstack/buffer/packet.h"
#include "netstack/buffer/payload_view.h"
#include "netstack/wire/ipv4.h"
#include "netstack/wire/ipv6.h"

namespace netstack::ip {

enum class [[nodiscard]] FragmentStatus : uint8_t{
    kOk = 0,
    // IPv4 Don't Fragment is set and the datagram does not fit the MTU.
    kDontFragment,
    // The MTU leaves no room for 8 bytes of data after the headers (IPv4:
    // header length + 8, at most 68 as RFC 791 requires every link to carry;
    // IPv6: 40 + 8 + 8 = 56).
    kMtuTooSmall,
    // The datagram cannot exist: IPv4 header + fragment offset + payload
    // above 65535 (RFC 791 Total Length), IPv6 payload above 65535 (RFC 8200
    // Payload Length).
    kTooBig,
    // The IPv4 option area is malformed (CheckIpv4Options), so the options
    // to copy into later fragments cannot be found.
    kBadOptions,
    // kMaxPayloadViews consecutive payload views hold fewer than 8 bytes: no
    // non-last fragment can be formed within the view limit.
    kTooManyViews,
    // The packet pool is exhausted.
    kNoPacket,
    // A fresh packet's headroom does not fit the IP headers. Cannot happen
    // with kMaxHeaderLen (192); checked rather than assumed.
    kNoHeadroom,
};

std::string_view FragmentStatusName(FragmentStatus status);

// Fragments one IPv4 datagram. `header` describes it:
//   - payload_len is ignored: the payload is the concatenation of
//     `payload` (empty views allowed);
//   - ident, protocol, addresses, TTL, DSCP/ECN are copied to every
//     fragment;
//   - fragment_offset / more_fragments may describe a datagram that is
//     itself a fragment (RFC 791 allows refragmenting): the fragments then
//     continue its offset, and the last keeps its MF flag;
//   - options: the fragment at offset 0 carries them all; later fragments
//     only those with the copied flag (RFC 791 section 3.1), so their
//     header may be shorter and carry more data.
// Appends the fragments, in offset order, to `out`.
FragmentStatus FragmentIpv4(const wire::Ipv4Repr& header,
                            std::span<const buffer::PayloadView> payload,
                            size_t mtu, buffer::PacketPool& pool,
                            buffer::PacketChain& out);

// Fragments one IPv6 packet whose payload (the fragmentable part: upper-
// layer header and data; this stack sends no extension headers) is the
// concatenation of `payload`. `header.next_header` is the payload's
// protocol; it goes into each Fragment header's Next Header, and the fixed
// headers get Next Header 44 (Fragment). payload_len is ignored. Every
// fragment carries `identification` (RFC 8200 section 4.5: unique among
// recent fragmented packets with the same source and destination; RFC 7739
// asks for an unpredictable one, which is the caller's to choose).
// Appends the fragments, in offset order, to `out`.
FragmentStatus FragmentIpv6(const wire::Ipv6Repr& header,
                            uint32_t identification,
                            std::span<const buffer::PayloadView> payload,
                            size_t mtu, buffer::PacketPool& pool,
                            buffer::PacketChain& out);

}  // namespace netstack::ip

#endif  // NETSTACK_IP_FRAGMENT_H_
