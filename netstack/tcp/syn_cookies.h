// SYN cookies: under a SYN flood the listener keeps no state for a
// half-open connection; everything it needs comes back in the final ACK,
// encoded in our ISN (the "cookie") and, when the peer uses timestamps, in
// our TSval.
//
// The cookie, as our ISN (the final ACK carries it as SEG.ACK - 1):
//
//    31    29 28   26 25                                          0
//   +--------+-------+---------------------------------------------+
//   | count  |  mss  |  MAC                                        |
//   +--------+-------+---------------------------------------------+
//
//   count  the time in 64-second periods, modulo 8. A cookie is good in
//          its own period and the kMaxAge after it (128 to 192 s).
//   mss    index into kMssTable: the largest entry not above the peer's
//          MSS (the MSS option is not repeated in the final ACK).
//   MAC    the low 26 bits of SipHash-2-4 over the 4-tuple, the peer's
//          ISN, the full period count and the MSS index.
//
// The MAC binds the full count, so a cookie from 8 periods ago, whose
// count bits alias today's, still fails. Forging one takes 2^26 guesses
// per period and 4-tuple.
//
// Window scale and SACK-permitted cannot fit in 32 bits as well; when the
// peer sent timestamps they ride in the low 6 bits of our TSval, which the
// peer echoes as TSecr in the final ACK (EncodeTsval / DecodeTsecr). Without
// timestamps the connection goes on without them.
#ifndef NETSTACK_TCP_SYN_COOKIES_H_
#define NETSTACK_TCP_SYN_COOKIES_H_

#include <array>
#include <cstdint>
#include <optional>

#include "netstack/base/time.h"
#include "netstack/tcp/isn.h"
#include "netstack/tcp/seqnum.h"
#include "netstack/transport/address.h"

namespace netstack::tcp {

// The options a SYN cookie's timestamp carries.
struct CookieOptions {
  std::optional<uint8_t> wscale;  // the peer's shift count, if it sent one
  bool sack = false;              // the peer sent SACK-permitted

  friend bool operator==(const CookieOptions&, const CookieOptions&) = default;
};

class SynCookies {
 public:
  // 536: the IPv4 default (RFC 9293 section 3.7.1); 1220: IPv6's minimum
  // MTU; 1440/1460: Ethernet behind tunnels or with IP options, and plain;
  // 8960: jumbo frames.
  static constexpr std::array<uint16_t, 5> kMssTable = {536, 1220, 1440, 1460,
                                                        8960};
  static constexpr Duration kPeriod = absl::Seconds(64);
  // How many periods old a cookie may be.
  static constexpr uint32_t kMaxAge = 2;

  // `key`: secret and random, and not the ISN generator's key.
  explicit SynCookies(SipKey key) : key_(key) {}

  struct Cookie {
    SeqNum isn;    // our ISN for the SYN-ACK
    uint16_t mss;  // the MSS the connection will use (a kMssTable entry)
  };
  // The cookie for a SYN from `t` with sequence number `peer_isn` and MSS
  // option `peer_mss` (the caller passes the default, 536 for IPv4 or 1220
  // for IPv6, when the SYN had none). An MSS below 536 is encoded as 536:
  // every IPv4 host must accept 576-byte datagrams (RFC 1122 3.3.3).
  [[nodiscard]] Cookie Make(const transport::FourTuple& t, SeqNum peer_isn,
                            uint16_t peer_mss, Instant now) const;

  // Validates the final ACK of the handshake: `peer_isn` is its SEG.SEQ - 1
  // and `cookie` its SEG.ACK - 1. Returns the MSS the cookie carries, or
  // nullopt if the cookie is forged, for another connection, or too old.
  [[nodiscard]] std::optional<uint16_t> Check(const transport::FourTuple& t,
                                              SeqNum peer_isn, SeqNum cookie,
                                              Instant now) const;

  // Our TSval for the SYN-ACK with the peer's options in its low 6 bits:
  // bits 0-3 the window scale (0xf: none; above 14 is sent as 14, RFC 7323
  // section 2.3), bit 4 SACK-permitted, bit 5 reserved (zero). The result
  // is never ahead of `tsval`, so our later TSvals never go backwards.
  static uint32_t EncodeTsval(uint32_t tsval, std::optional<uint8_t> wscale,
                              bool sack);
  // The options from the TSecr of the final ACK.
  static CookieOptions DecodeTsecr(uint32_t tsecr);

 private:
  uint32_t Mac(const transport::FourTuple& t, SeqNum peer_isn, uint32_t count,
               uint32_t mss_index) const;

  SipKey key_;
};

}  // namespace netstack::tcp

#endif  // NETSTACK_TCP_SYN_COOKIES_H_
