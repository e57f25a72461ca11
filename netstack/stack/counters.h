// Why a packet was dropped, and what the stack did: every frame that
// enters the stack ends up either handled (a counter below says how) or
// dropped under exactly one reason, as Linux's kfree_skb_reason does.
// `netstackd` prints these on SIGUSR1 and at exit.
#ifndef NETSTACK_STACK_COUNTERS_H_
#define NETSTACK_STACK_COUNTERS_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace netstack::stack {

// X(enumerator, "name")
#define NETSTACK_DROP_REASONS(X)                                       \
  X(kEthernetMalformed, "ethernet_malformed")                         \
  X(kEthernetBadSource, "ethernet_bad_source")                        \
  X(kNotOurMac, "not_our_mac")                                        \
  X(kVlanTagged, "vlan_tagged")                                       \
  X(kUnknownEthertype, "unknown_ethertype")                           \
  X(kIpv6Disabled, "ipv6_disabled")                                   \
  X(kArpMalformed, "arp_malformed")                                   \
  X(kArpNotForUs, "arp_not_for_us")                                   \
  X(kArpBadSender, "arp_bad_sender")                                  \
  X(kArpAddressConflict, "arp_address_conflict")                      \
  X(kIpv4Malformed, "ipv4_malformed")                                 \
  X(kIpv4BadChecksum, "ipv4_bad_checksum")                            \
  X(kIpv4BadSource, "ipv4_bad_source")                                \
  X(kIpv4NotForUs, "ipv4_not_for_us")                                 \
  /* multicast to a group we have not joined (a peer's mDNS, IGMP): */ \
  /* normal on a shared link, not a fault */                            \
  X(kIpv4MulticastNotJoined, "ipv4_multicast_not_joined")             \
  X(kIpv4LinkBroadcast, "ipv4_unicast_in_link_broadcast")             \
  X(kIpv4FragmentDropped, "ipv4_fragment_dropped")                    \
  X(kIpv4UnknownProtocol, "ipv4_unknown_protocol")                    \
  X(kIcmpv4Malformed, "icmpv4_malformed")                             \
  X(kIcmpv4BadChecksum, "icmpv4_bad_checksum")                        \
  X(kIcmpv4Unhandled, "icmpv4_unhandled")                             \
  X(kIcmpv4EchoToBroadcast, "icmpv4_echo_to_broadcast")               \
  X(kIcmpv4ErrorReceived, "icmpv4_error_received")                    \
  X(kIpv6Malformed, "ipv6_malformed")                                 \
  X(kIpv6BadSource, "ipv6_bad_source")                                \
  X(kIpv6NotForUs, "ipv6_not_for_us")                                 \
  /* Gateway mode: a destination that embeds an IPv4 address, mapped  */ \
  /* (::ffff:0:0/96) or compatible (::/96). Never on a guest kernel's  */ \
  /* wire; a host socket would turn it into IPv4 (::ffff:127.0.0.1 is  */ \
  /* the host's loopback), so no transport may see it. */               \
  X(kIpv6MappedDestination, "ipv6_mapped_destination")               \
  /* multicast to a group we have not joined (a peer's MLD reports, */ \
  /* router solicitations): normal on a shared link, not a fault */    \
  X(kIpv6MulticastNotJoined, "ipv6_multicast_not_joined")             \
  X(kIpv6LinkMulticast, "ipv6_unicast_in_link_multicast")             \
  X(kIpv6ExtensionMalformed, "ipv6_extension_malformed")              \
  X(kIpv6UnrecognizedOption, "ipv6_unrecognized_option")              \
  X(kIpv6FragmentDropped, "ipv6_fragment_dropped")                    \
  X(kIpv6UnknownProtocol, "ipv6_unknown_protocol")                    \
  X(kIcmpv6Malformed, "icmpv6_malformed")                             \
  X(kIcmpv6BadChecksum, "icmpv6_bad_checksum")                        \
  X(kIcmpv6Unhandled, "icmpv6_unhandled")                             \
  X(kIcmpv6ErrorReceived, "icmpv6_error_received")                    \
  X(kNdpInvalid, "ndp_invalid")                                       \
  X(kNdpNotForUs, "ndp_not_for_us")                                   \
  X(kUdpMalformed, "udp_malformed")                                   \
  X(kUdpBadChecksum, "udp_bad_checksum")                              \
  X(kUdpNoListener, "udp_no_listener")                                \
  X(kUdpReceiveBufferFull, "udp_receive_buffer_full")                 \
  X(kTcpMalformed, "tcp_malformed")                                   \
  X(kTcpBadChecksum, "tcp_bad_checksum")                              \
  X(kTcpNoListener, "tcp_no_listener")                                \
  X(kTcpBadDataOffset, "tcp_bad_data_offset")                         \
  X(kTcpBadOptions, "tcp_bad_options")                                \
  X(kTcpBadFlags, "tcp_bad_flags")                                    \
  X(kTcpBadAddress, "tcp_bad_address")                                \
  X(kTcpOutOfWindow, "tcp_out_of_window")                             \
  X(kTcpPawsRejected, "tcp_paws_rejected")                            \
  X(kTcpAckUnsent, "tcp_ack_unsent")                                  \
  X(kTcpOldAck, "tcp_old_ack")                                        \
  X(kTcpChallengeAck, "tcp_challenge_ack")                            \
  X(kTcpRstInvalid, "tcp_rst_invalid")                                \
  X(kTcpListenOverflow, "tcp_listen_overflow")                        \
  X(kTcpBadSynCookie, "tcp_bad_syn_cookie")                           \
  X(kTcpReceiveBufferFull, "tcp_receive_buffer_full")                 \
  X(kTcpClosedState, "tcp_closed_state")                              \
  X(kTcpTimeWait, "tcp_time_wait")                                    \
  /* Old data entirely below RCV.NXT (a spurious retransmission, or our  \
     ACK was lost): answered with a D-SACK (RFC 2883). Not trouble. */  \
  X(kTcpDuplicateData, "tcp_duplicate_data")                          \
  /* In-window data the receive queue could not hold: the memory it    \
     would pin is over the flow's limit even after collapsing and       \
     pruning (docs/TCP.md "Receive memory"; Linux TCPRcvQDrop). */     \
  X(kTcpReceiveMemory, "tcp_receive_memory")                          \
  /* An ACK at a listening port for no connection and no SYN cookie in  \
     use: a late segment of a connection already gone (answered with   \
     RST, RFC 9293 3.10.7.2). */                                        \
  X(kTcpStrayAck, "tcp_stray_ack")                                    \
  /* TcpLayerOptions limits (tcp_options.h). */                         \
  X(kTcpConnectionLimit, "tcp_connection_limit")                      \
  X(kTcpHalfOpenLimit, "tcp_half_open_limit")                         \
  /* A retransmitted SYN while its first one waits for a SynHandler's    \
     decision (a gateway's host connect): absorbed. */                  \
  X(kTcpSynHeld, "tcp_syn_held")                                      \
  /* A SYN a SynHandler shed (SynVerdict::kDrop: a gateway over its     \
     rate of new host connections): dropped silently, retransmitted. */ \
  X(kTcpSynShed, "tcp_syn_shed")                                      \
  /* Gateway mode (NicOptions::gateway): a packet whose source is not  \
     one of the guest's own addresses. Never reaches a transport. */    \
  X(kSpoofedSource, "spoofed_source")                                 \
  /* Transmit side: a packet we were sending (a reply, an error, a     \
     packet waiting for a neighbour) was dropped. These do not decide   \
     a received frame's disposition. */                                 \
  X(kNoRoute, "no_route")                                             \
  X(kIcmpRateLimited, "icmp_rate_limited")                            \
  X(kNeighborUnreachable, "neighbor_unreachable")                     \
  X(kNeighborQueueFull, "neighbor_queue_full")                        \
  X(kFragmentationNeeded, "fragmentation_needed")                     \
  X(kNoBuffer, "no_buffer")                                           \
  X(kTxQueueFull, "tx_queue_full")                                    \
  /* Data dropped after it was accepted (not a received frame's         \
     disposition): out-of-order data pruned under memory pressure, one  \
     per view, highest sequence first (Linux tcp_prune_ofo_queue). */  \
  X(kTcpOfoPruned, "tcp_ofo_pruned")

enum class DropReason : uint8_t {
#define NETSTACK_ENUM(e, name) e,
  NETSTACK_DROP_REASONS(NETSTACK_ENUM)
#undef NETSTACK_ENUM
      kCount
};

inline constexpr size_t kDropReasonCount =
    static_cast<size_t>(DropReason::kCount);
// Reasons from kNoRoute on are transmit-side (see the list above).
inline constexpr size_t kFirstTxDropReason =
    static_cast<size_t>(DropReason::kNoRoute);
constexpr bool IsReceiveDrop(DropReason r) {
  return static_cast<size_t>(r) < kFirstTxDropReason;
}

std::string_view DropReasonName(DropReason r);

// Things the stack did, for the same printout.
#define NETSTACK_EVENT_COUNTERS(X)               \
  X(rx_frames, "rx_frames")                      \
  X(rx_consumed, "rx_consumed")                  \
  X(rx_dropped_frames, "rx_dropped_frames")      \
  X(tx_packets, "tx_packets")                    \
  X(arp_requests_received, "arp_requests_received") \
  X(arp_replies_sent, "arp_replies_sent")        \
  X(arp_requests_sent, "arp_requests_sent")      \
  X(arp_replies_received, "arp_replies_received") \
  X(ipv4_received, "ipv4_received")              \
  X(ipv4_fragments_received, "ipv4_fragments_received") \
  X(ipv4_reassembled, "ipv4_reassembled")        \
  X(ipv4_fragments_sent, "ipv4_fragments_sent")  \
  X(icmpv4_echo_requests, "icmpv4_echo_requests") \
  X(icmpv4_echo_replies_sent, "icmpv4_echo_replies_sent") \
  /* Taken by the EchoHandler (a backend's ping forwarder). */ \
  X(icmpv4_echo_requests_handed_off, "icmpv4_echo_requests_handed_off") \
  X(icmpv4_errors_sent, "icmpv4_errors_sent")    \
  X(ipv6_received, "ipv6_received")              \
  X(ipv6_fragments_received, "ipv6_fragments_received") \
  X(ipv6_reassembled, "ipv6_reassembled")        \
  X(ipv6_fragments_sent, "ipv6_fragments_sent")  \
  X(icmpv6_echo_requests, "icmpv6_echo_requests") \
  X(icmpv6_echo_replies_sent, "icmpv6_echo_replies_sent") \
  X(icmpv6_echo_requests_handed_off, "icmpv6_echo_requests_handed_off") \
  X(icmpv6_errors_sent, "icmpv6_errors_sent")    \
  X(ndp_ns_received, "ndp_ns_received")          \
  X(ndp_na_sent, "ndp_na_sent")                  \
  X(ndp_ns_sent, "ndp_ns_sent")                  \
  X(ndp_na_received, "ndp_na_received")          \
  X(delivered_to_transport, "delivered_to_transport") \
  /* ICMP/ICMPv6 errors about our datagrams, handed to TCP or UDP. */ \
  X(icmp_errors_to_transport, "icmp_errors_to_transport")

// Accounting invariant, checked by the tests and the fuzz test: every
// received frame is either consumed (handled, or held for reassembly) or
// dropped under exactly one receive-side reason, so
//   rx_frames == rx_consumed + rx_dropped_frames == rx_consumed + RxDrops().
// Transmit-side reasons count packets we failed to send (a reply, an ICMP
// error, packets waiting for a neighbour); they never change a received
// frame's disposition. Fragments accepted for reassembly are consumed; what
// later happens to their datagram is in the reassembler's statistics.
struct StackCounters {
#define NETSTACK_FIELD(f, name) uint64_t f = 0;
  NETSTACK_EVENT_COUNTERS(NETSTACK_FIELD)
#undef NETSTACK_FIELD
  std::array<uint64_t, kDropReasonCount> drops{};

  uint64_t drop(DropReason r) const {
    return drops[static_cast<size_t>(r)];
  }
  uint64_t TotalDrops() const;
  uint64_t RxDrops() const;
  // "name value" lines: every non-zero event counter, then "drop.<reason>"
  // for every non-zero drop reason.
  std::string Format() const;
};

}  // namespace netstack::stack

#endif  // NETSTACK_STACK_COUNTERS_H_
