// Software GSO: cuts a TCP super-segment (buffer::GsoInfo) into the wire
// packets it stands for, for links whose host kernel cannot do it.
//
//   buffer::PacketChain out;
//   GsoSplitStatus s = SplitGso(std::move(super), packets, out);
//   stats.Count(s, out.size() - before);
//
// What one split produces, for a super-segment of L payload bytes and GSO
// size S (the MSS): n = ceil(L / S) packets (one if L is 0), each a fresh
// pooled PacketBuffer, linked through `next` at the end of `out`:
//   - headers: the super-segment's Ethernet + IP + TCP bytes, copied into
//     the packet's own prependable buffer (they are per-packet memory),
//     then rewritten for packet i:
//       TCP sequence number   seq + i * S (mod 2^32);
//       TCP flags             PSH and FIN only on the last packet, CWR
//                             only on the first (RFC 3168 section 6.1.2:
//                             CWR marks one new segment, as Linux's TSO);
//       IPv4 Total Length     20 + TCP header + this payload;
//       IPv4 Identification   the super-segment's id + i (mod 2^16), the
//                             ids the stack reserved for it;
//       IPv4 header checksum  recomputed;
//       IPv6 Payload Length   TCP header + this payload;
//       TCP checksum          complete: pseudo-header with this packet's
//                             length, its header, and its payload slice.
//   - payload: sub-views of the super-segment's views covering bytes
//     [i * S, min((i + 1) * S, L)). They share the chunks; no payload byte
//     is copied. The checksum sums those slices where they lie in the
//     chunks (ChecksumAccumulator keeps odd offsets right).
// The super-segment itself goes back to its pool after the split.
//
// A packet without GSO is moved to the end of `out` unchanged.
//
// Refusals. The super-segment must follow the contract in
// netstack/buffer/packet.h; if it does not, or the split cannot finish,
// it is dropped (returned to its pool), `out` is left as it was, and the
// status names the reason. The caller counts it (GsoStats); TCP recovers
// the data by retransmission. Nothing here asserts on packet contents.
//
// Cost: per wire packet, one PacketPool allocation, a header copy of at
// most kMaxHeaderLen bytes, and one pass over its payload for the
// checksum; the headers are summed once per super-segment, and each packet
// adds only the fields it changes. No heap allocation (the pools allocate
// only until warm).
#ifndef NETSTACK_LINK_GSO_H_
#define NETSTACK_LINK_GSO_H_

#include <cstddef>
#include <cstdint>

#include "netstack/buffer/packet.h"

namespace netstack::link {

// Largest IP packet a split accepts or produces, by default: IPv4's Total
// Length and IPv6's Payload Length are 16 bits.
inline constexpr uint32_t kMaxGsoIpLen = 65535;

enum class GsoSplitStatus : uint8_t {
  // Split into wire packets, appended to `out`.
  kSplit,
  // Not a GSO packet: moved to `out` unchanged.
  kNotGso,
  // Refused, dropped: the headers break the contract of packet.h (wrong
  // EtherType for the GSO type, more than one VLAN tag, IPv4 options or a
  // fragment, IPv6 extension headers, not TCP, a bad TCP header or
  // options, bytes after the TCP header, IP lengths that do not cover the
  // super-segment, or SYN/RST/URG, which have no meaning split).
  kMalformed,
  // Refused, dropped: GSO size 0, or a wire packet would exceed the MTU.
  kBadGsoSize,
  // Refused, dropped: the PacketPool ran out part way.
  kNoBuffer,
  // Refused, dropped: a packet's payload slice needs more views than a
  // PacketBuffer holds. Cannot happen for a super-segment that itself fits
  // a PacketBuffer (a slice never spans more views than the whole); kept
  // so that the invariant is checked, not assumed.
  kTooManyViews,
};

// "split", "not_gso", "malformed", ...
const char* GsoSplitStatusName(GsoSplitStatus status);

// Splits `super` as described above. `mtu` is the largest IP packet
// (L3 MTU) a produced packet may have.
[[nodiscard]] GsoSplitStatus SplitGso(buffer::PacketPtr super,
                                      buffer::PacketPool& pool,
                                      buffer::PacketChain& out,
                                      uint32_t mtu = kMaxGsoIpLen);

// Counters for whoever calls SplitGso.
struct GsoStats {
  uint64_t super_segments = 0;  // split
  uint64_t packets_out = 0;     // wire packets those splits produced
  uint64_t passed_through = 0;  // packets without GSO
  // Refusals, by reason.
  uint64_t malformed = 0;
  uint64_t bad_gso_size = 0;
  uint64_t no_buffer = 0;
  uint64_t too_many_views = 0;

  // Counts one SplitGso result that appended `packets` packets to `out`.
  void Count(GsoSplitStatus status, size_t packets);
  uint64_t failures() const {
    return malformed + bad_gso_size + no_buffer + too_many_views;
  }
};

}  // namespace netstack::link

#endif  // NETSTACK_LINK_GSO_H_
