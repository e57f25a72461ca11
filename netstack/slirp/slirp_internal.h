// The Slirp behind libslirp's opaque handle, and the pieces of the ABI
// (slirp.cc: creation and the loop; forwards.cc: host forwards;
// info.cc: connection_info and state save/load; exports.cc: the C
// functions). Private to netstack/slirp.
#ifndef NETSTACK_SLIRP_SLIRP_INTERNAL_H_
#define NETSTACK_SLIRP_SLIRP_INTERNAL_H_

#include <netinet/in.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "netstack/capi/netstack.h"
#include "netstack/policy/policy.h"
#include "netstack/slirp/libslirp.h"

namespace netstack::slirp {

// restricted's outbound addresses: documentation ranges (RFC 5737, RFC
// 3849), which no host holds, so a bind() to them fails.
inline constexpr char kRestrictedOutbound4[] = "192.0.2.1";
inline constexpr char kRestrictedOutbound6[] = "2001:db8::1";

// The caller's SlirpConfig as it was read (only up to its version).
struct SlirpSettings {
  uint32_t version = 0;
  bool restricted = false;
  bool in_enabled = true;
  bool in6_enabled = true;
  std::string net4, gateway4, dns4, lease4_text;
  // The gateway's MAC, as libslirp's: 52:55 and vhost's four bytes. Fixed,
  // so the guest's ARP and neighbour entries hold across a rebuild.
  std::string mac;
  struct in_addr lease4 = {};
  struct in_addr network4 = {};
  struct in_addr mask4 = {};
  struct in_addr gateway4_addr = {};
  struct in_addr dns4_addr = {};
  std::string net6, gateway6, dns6;
  struct in6_addr dns6_addr = {};
  size_t mtu = 1500;
  size_t mru = 1500;
  bool host_loopback = true;
  bool disable_dns = false;
  bool disable_dhcp = false;
  std::string outbound4, outbound6;
  // Fields set that netstack has no use for (named to guest_error once).
  std::vector<std::string> ignored;
};

// One slirp_add_hostfwd / slirp_add_hostxfwd.
struct HostForward {
  bool udp = false;
  int family = AF_INET;
  // The bind address as the caller gave it (in6 for both families:
  // IPv4 as ::ffff:a.b.c.d is not used; family says which half is set).
  struct in_addr addr4 = {};
  struct in6_addr addr6 = {};
  int host_port = 0;
  struct in_addr guest4 = {};
  int guest_port = 0;
  uint64_t id = 0;  // netstack_forward_add's
};

struct SlirpCounters {
  uint64_t input_refused = 0;  // slirp_input with no frame or length <= 0
  // Guest frames dropped here, before netstack: to the DNS address with
  // disable_dns (or restricted), DHCPv4 requests with disable_dhcp, and
  // 802.1Q-tagged frames while either filter is on (libslirp takes no
  // tagged frames; netstack's filter here reads untagged ones only).
  uint64_t input_dns_disabled = 0;
  uint64_t input_dhcp_disabled = 0;
  uint64_t input_tagged = 0;
  uint64_t forwards_refused = 0;  // hostfwd adds refused
  // The guest's IPv4 address was not vdhcp_start (PinGuest4): netstack
  // was rebuilt for it.
  uint64_t guest4_moves = 0;
};

}  // namespace netstack::slirp

// libslirp's handle (a global name: libslirp.h declares `struct Slirp`).
struct Slirp {
  netstack_t* ns = nullptr;
  SlirpCb cb = {};
  void* opaque = nullptr;
  netstack::slirp::SlirpSettings settings;
  // The index add_poll gave our fd in this round's fill; -1: none.
  int poll_index = -1;
  // A frame went in since netstack's last turn: the next fill's timeout is
  // 0, so what it made pending (TCP's sends) leaves without waiting.
  bool input_since_turn = false;
  // When the caller's loop wakes next by time (CLOCK_MONOTONIC ns, from
  // the last fill; INT64_MAX: not by time). A turn inside slirp_input
  // that makes an earlier deadline calls notify, or it would be missed.
  int64_t caller_wakes_ns = INT64_MAX;
  // Whether the guest's IPv4 address is known (PinGuest4), and whether a
  // call into netstack is on the stack (send_packet): netstack is not
  // rebuilt from inside itself.
  bool guest4_pinned = false;
  bool in_netstack = false;
  std::vector<netstack::slirp::HostForward> forwards;
  netstack::slirp::SlirpCounters counters;
  // NETSTACK_POLICY's policy, read once at slirp_new (null: none). Every
  // netstack built for this Slirp gets it: a rebuild (PinGuest4) may run
  // after the caller's sandbox took the file away (slirp4netns's
  // pivot_root), and must not come up open.
  std::shared_ptr<const netstack::policy::Policy> egress;
};

namespace netstack::slirp {

// guest_error("netstack-slirp: " + message), if the caller gave one.
void ReportError(const Slirp& s, const std::string& message);

Slirp* NewSlirp(const SlirpConfig* cfg, const SlirpCb* callbacks,
                void* opaque);
void FillPoll(Slirp& s, uint32_t* timeout, SlirpAddPollCb add_poll,
              void* opaque);
void RunPoll(Slirp& s, int select_error, SlirpGetREventsCb get_revents,
             void* opaque);
void Input(Slirp& s, const uint8_t* pkt, int len);

// netstack takes IPv4 from one guest address only (its lease; the stack
// drops other sources as spoofed). libslirp's DHCP leases from
// vdhcp_start, but a guest configured by hand uses any address:
// slirp4netns --configure puts it at .100 while vdhcp_start is .15. So
// the first address the guest uses (an IPv4 source or an ARP sender other
// than 0.0.0.0), or the first forward that names one, pins it: when it
// is not the lease, netstack is built anew for it (before any flow can
// exist, since every flow needs that address) and the forwards are added
// again. Later, another address is refused. True when `guest` is the
// guest's address now.
bool PinGuest4(Slirp& s, struct in_addr guest);

// forwards.cc. 0 or -1, as libslirp.
int AddForward(Slirp& s, const HostForward& f);
int RemoveForward(Slirp& s, bool udp, int family, const void* addr,
                  int host_port);
// Adds every forward again to a netstack built anew; one that fails is
// dropped and reported.
void ReaddForwards(Slirp& s);

// info.cc.
std::string ConnectionInfo(const Slirp& s);
// The state stream (docs/SLIRP.md): what save writes, and whether load
// accepts `read`'s bytes.
void SaveState(const Slirp& s, SlirpWriteCb write, void* opaque);
int LoadState(Slirp& s, int version_id, SlirpReadCb read, void* opaque);

}  // namespace netstack::slirp

#endif  // NETSTACK_SLIRP_SLIRP_INTERNAL_H_
