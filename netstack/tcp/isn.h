// Initial sequence numbers (RFC 6528) and the keyed hash they rest on.
//
// ISN = M + F(localip, localport, remoteip, remoteport, secretkey), M a
// clock ticking every 4 microseconds (RFC 9293 section 3.4.1) and F a
// pseudorandom function of the connection's 4-tuple: SipHash-2-4 (Aumasson
// and Bernstein, "SipHash: a fast short-input PRF", 2012). Successive
// incarnations of one 4-tuple get increasing ISNs, while an off-path
// attacker cannot guess another connection's ISN.
#ifndef NETSTACK_TCP_ISN_H_
#define NETSTACK_TCP_ISN_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "netstack/base/time.h"
#include "netstack/tcp/seqnum.h"
#include "netstack/transport/address.h"

namespace netstack::tcp {

using SipKey = std::array<uint8_t, 16>;

// SipHash-2-4 of `data` under `key`: the key's bytes 0-7 and 8-15 are the
// little-endian k0 and k1 of the paper.
uint64_t SipHash24(const SipKey& key, std::span<const uint8_t> data);

// The 4-tuple as bytes for keyed hashing: local address, local port,
// remote address, remote port, all in network order. 12 bytes for IPv4,
// 36 for IPv6; returns how many were written.
inline constexpr size_t kMaxFourTupleBytes = 2 * (16 + 2);
size_t SerializeFourTuple(const transport::FourTuple& t,
                          std::span<uint8_t, kMaxFourTupleBytes> out);

class IsnGenerator {
 public:
  // `key`: secret and random, drawn once per stack (RFC 6528 section 3).
  explicit IsnGenerator(SipKey key) : key_(key) {}

  // The ISN for a connection on `t` opened at `now` (RFC 6528 section 3).
  SeqNum Next(const transport::FourTuple& t, Instant now) const;

 private:
  SipKey key_;
};

}  // namespace netstack::tcp

#endif  // NETSTACK_TCP_ISN_H_
