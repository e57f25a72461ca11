// A stateless DHCPv6 server (RFC 8415 with RFC 3736's subset): an
// INFORMATION-REQUEST to ff02::1:2 (or our address), UDP port 547, gets a
// REPLY with our Server Identifier (a DUID-LL of the NIC's MAC), the
// client's Client Identifier echoed, and DNS_RECURSIVE_NAME_SERVER (23,
// RFC 3646) with the plan's DNS address. The RA's O flag points clients
// here.
//
// Dropped and counted: a message shorter than its 4-byte header, an
// option running past the end, any other message type (this server
// leases nothing: SOLICIT, REQUEST... are counted as unsupported), and
// what RFC 8415 16.12 has a server discard in an INFORMATION-REQUEST: a
// Server Identifier that is not ours, or an IA option (IA_NA, IA_TA,
// IA_PD).
#ifndef NETSTACK_BACKEND_DHCP6_SERVER_H_
#define NETSTACK_BACKEND_DHCP6_SERVER_H_

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "netstack/backend/guest_config_plan.h"
#include "netstack/base/time.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/stack/stack.h"

namespace netstack::backend {

inline constexpr uint16_t kDhcp6ServerPort = 547;
inline constexpr uint16_t kDhcp6ClientPort = 546;

#define NETSTACK_DHCP6_COUNTERS(X)                    \
  X(information_requests, "received.information_request") \
  X(replies_sent, "sent.reply")                       \
  X(truncated, "drop.truncated")                      \
  X(option_overrun, "drop.option_overrun")            \
  X(unsupported_type, "drop.unsupported_type")        \
  X(server_id_mismatch, "drop.server_id_mismatch")    \
  X(has_ia, "drop.has_ia")                            \
  X(client_id_too_long, "drop.client_id_too_long")    \
  X(send_failed, "drop.send_failed")

struct Dhcp6Counters {
#define NETSTACK_DHCP6_FIELD(f, name) uint64_t f = 0;
  NETSTACK_DHCP6_COUNTERS(NETSTACK_DHCP6_FIELD)
#undef NETSTACK_DHCP6_FIELD
  // "dhcp6.<name> value" lines for the non-zero counters.
  std::string Format() const;
};

class Dhcp6Server {
 public:
  static constexpr uint8_t kInformationRequest = 11;
  static constexpr uint8_t kReply = 7;
  static constexpr uint16_t kOptionClientId = 1;
  static constexpr uint16_t kOptionServerId = 2;
  static constexpr uint16_t kOptionDnsServers = 23;
  static constexpr size_t kMaxDuidLen = 128;  // RFC 8415 11.1

  Dhcp6Server(stack::Stack& stack, buffer::ChunkPool& chunks,
              buffer::PacketPool& packets, stack::NicId nic,
              const GuestConfigPlan& plan);

  // Joins ff02::1:2 (All_DHCP_Relay_Agents_and_Servers).
  absl::Status Start();
  // A verified UDP datagram to port 547; `d.payload` starts at the UDP
  // header. Always consumed (drops counted here).
  void Deliver(const stack::Ipv6Datagram& d, Instant now);

  const Dhcp6Counters& counters() const { return counters_; }
  // Our DUID-LL (RFC 8415 11.4): type 3, hardware type 1, the MAC.
  std::span<const uint8_t> duid() const { return duid_; }

 private:
  stack::Stack& stack_;
  buffer::ChunkPool& chunks_;
  buffer::PacketPool& packets_;
  const stack::NicId nic_;
  const GuestConfigPlan plan_;
  std::array<uint8_t, 10> duid_{};
  Dhcp6Counters counters_;
};

}  // namespace netstack::backend

#endif  // NETSTACK_BACKEND_DHCP6_SERVER_H_
