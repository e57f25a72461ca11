// The UDP demultiplexing table of one address family: which socket a
// received datagram belongs to, whether a bind conflicts, and which
// ephemeral port is free.
//
// Keyed by local port; each port holds the (few) bindings on it. A
// datagram to port P from S is matched against P's bindings, and the best
// score wins (Linux's compute_score, without SO_REUSEPORT groups):
//   1. a connected binding whose remote is exactly S (the 4-tuple),
//   2. then one bound to the datagram's destination address,
//   3. then one bound to the unspecified address (any).
// A binding that does not match at all (bound to another address, or
// connected to another peer) never receives the datagram. Ties go to the
// earliest binding, so delivery is deterministic.
//
// Conflicts follow Linux without IPV6_V6ONLY games: two bindings on the
// same port conflict when their addresses overlap (equal, or either is
// unspecified), unless both set reuse_address (SO_REUSEADDR, which for UDP
// allows full duplicates). Each family has its own table, so a v4 and a v6
// socket never conflict (as if every IPv6 socket were IPV6_V6ONLY).
#ifndef NETSTACK_UDP_PORT_TABLE_H_
#define NETSTACK_UDP_PORT_TABLE_H_

#include <cstdint>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "netstack/transport/address.h"

namespace netstack::udp {

class UdpSocket;

// Where a socket is bound, embedded in the socket: the table stores
// pointers, so a binding must stay put while it is inserted.
struct PortBinding {
  transport::IpAddress local_ip;  // unspecified: any address of the family
  uint16_t local_port = 0;
  // Set by connect: only datagrams from this peer match.
  std::optional<transport::SocketAddress> remote;
  bool reuse_address = false;
  UdpSocket* socket = nullptr;  // not dereferenced here
};

class PortTable {
 public:
  PortTable() = default;
  PortTable(const PortTable&) = delete;
  PortTable& operator=(const PortTable&) = delete;

  // Whether binding (ip, port, reuse) next to the existing bindings would
  // conflict with one of them.
  bool Conflicts(const transport::IpAddress& ip, uint16_t port,
                 bool reuse_address) const;
  // No binding of this family uses `port`.
  bool IsFree(uint16_t port) const { return !ports_.contains(port); }

  // `b` must not be inserted already, nor conflict (DCHECK). Allocates
  // only when the port is new to the table.
  void Insert(PortBinding* b);
  // `b` must be inserted (DCHECK).
  void Remove(PortBinding* b);

  // The best binding for a datagram to (dst, dst_port) from `src`, or
  // null. Never allocates.
  PortBinding* Lookup(const transport::IpAddress& dst, uint16_t dst_port,
                      const transport::SocketAddress& src) const;
  // Calls fn(PortBinding&) for every binding that matches at all, in
  // binding order: a broadcast or multicast datagram goes to each of them
  // (Linux __udp4_lib_mcast_deliver). Returns the number of calls.
  template <typename Fn>
  size_t ForEachMatch(const transport::IpAddress& dst, uint16_t dst_port,
                      const transport::SocketAddress& src, Fn&& fn) const {
    auto it = ports_.find(dst_port);
    if (it == ports_.end()) return 0;
    size_t n = 0;
    for (PortBinding* b : it->second) {
      if (Score(*b, dst, src) < 0) continue;
      ++n;
      fn(*b);
    }
    return n;
  }

  // RFC 6056 section 3.3.1 (Algorithm 1): starting at `start` (anywhere in
  // [lo, hi]), the first port at or after it, wrapping, that no binding of
  // this family uses; nullopt when all of [lo, hi] are taken.
  std::optional<uint16_t> FindFreePort(uint16_t lo, uint16_t hi,
                                       uint16_t start) const;

  size_t size() const { return size_; }

 private:
  // -1: does not match; otherwise higher is better.
  static int Score(const PortBinding& b, const transport::IpAddress& dst,
                   const transport::SocketAddress& src);

  absl::flat_hash_map<uint16_t, absl::InlinedVector<PortBinding*, 1>> ports_;
  size_t size_ = 0;
};

}  // namespace netstack::udp

#endif  // NETSTACK_UDP_PORT_TABLE_H_
