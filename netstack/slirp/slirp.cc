// libslirp 4.7's ABI on libnetstack (netstack/capi/netstack.h).
//
// A Slirp is one netstack_t with a callback link: slirp_input() hands each
// guest frame to netstack_input(), and netstack's send_frame calls the
// caller's send_packet (possibly from inside slirp_input). Everything
// netstack watches is behind one epoll fd, so slirp_pollfds_fill() adds
// that one fd and lowers the caller's timeout to netstack's next deadline;
// slirp_pollfds_poll() runs netstack's turn when the fd is readable or the
// deadline has come. slirp_input() runs a turn for its frame at once, as
// libslirp handles each frame inside the call, and calls notify when that
// turn made a deadline earlier than the one the caller sleeps until.
//
// Timers: none. libslirp asks its caller for timers (timer_new, or
// timer_new_opaque from version 4); netstack's deadlines reach the caller
// through the fill's timeout instead, so neither is ever called, and
// slirp_handle_timer() has nothing to do. init_completed is still called
// (version 4), before slirp_new() returns, as QEMU expects.
//
// What is refused, and why, goes to the caller's guest_error, prefixed
// "netstack-slirp: "; docs/SLIRP.md names each message.
#include "netstack/slirp/slirp_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "netstack/capi/capi_internal.h"
#include "netstack/capi/netstack.h"
#include "netstack/policy/policy_file.h"
#include "netstack/slirp/libslirp.h"

namespace netstack::slirp {
namespace {

constexpr size_t kDefaultMtu = 1500;  // libslirp's IF_MTU_DEFAULT
// libslirp takes if_mtu / if_mru from 68 to 65521. netstack needs IPv6's
// 1280 at least and its callback link at most 65518 (a frame, mtu + 18,
// must fit one 64 KiB chunk): 65519..65521 (slirp4netns's --mtu maximum;
// rootlesskit's default is 65520) are taken as 65518, since the guest may
// still send 65521-byte packets (netstack takes frames up to mtu + 18);
// below 1280 is refused.
constexpr size_t kMinMtu = 1280;
constexpr size_t kMaxMtu = 65521;
constexpr size_t kMaxNetstackMtu = 65518;

std::string Ipv4String(struct in_addr a) {
  char buf[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &a, buf, sizeof buf);
  return buf;
}

std::string Ipv6String(const struct in6_addr& a) {
  char buf[INET6_ADDRSTRLEN];
  inet_ntop(AF_INET6, &a, buf, sizeof buf);
  return buf;
}

// The prefix length of a contiguous netmask; -1 if it has holes.
int MaskLength(struct in_addr mask) {
  const uint32_t m = ntohl(mask.s_addr);
  const int len = __builtin_popcount(m);
  const uint32_t want = len == 0 ? 0 : ~uint32_t{0} << (32 - len);
  return m == want ? len : -1;
}

int64_t MonotonicNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

int SendFrame(const void* frame, size_t len, void* opaque) {
  Slirp* s = static_cast<Slirp*>(opaque);
  if (s->cb.send_packet == nullptr) return -1;
  const bool nested = s->in_netstack;
  s->in_netstack = true;
  const ssize_t rc = s->cb.send_packet(frame, len, s->opaque);
  s->in_netstack = nested;
  return rc < 0 ? -1 : 0;
}

// The caller's config, read only as far as its version goes, as the
// strings netstack_config takes. Returns an error message, or "".
std::string ReadConfig(const SlirpConfig& cfg, Slirp& s) {
  SlirpSettings& o = s.settings;
  o.version = cfg.version;
  o.restricted = cfg.restricted != 0;
  o.in_enabled = cfg.in_enabled;
  o.in6_enabled = cfg.in6_enabled;
  const int mask_len = MaskLength(cfg.vnetmask);
  if (mask_len < 0) {
    return absl::StrCat("vnetmask ", Ipv4String(cfg.vnetmask),
                        " is not a contiguous netmask");
  }
  struct in_addr net = cfg.vnetwork;
  net.s_addr &= cfg.vnetmask.s_addr;
  o.network4 = net;
  o.mask4 = cfg.vnetmask;
  o.net4 = absl::StrCat(Ipv4String(net), "/", mask_len);
  o.gateway4 = Ipv4String(cfg.vhost);
  o.gateway4_addr = cfg.vhost;
  const auto* vh = reinterpret_cast<const uint8_t*>(&cfg.vhost.s_addr);
  o.mac = absl::StrFormat("52:55:%02x:%02x:%02x:%02x", vh[0], vh[1], vh[2],
                          vh[3]);
  o.dns4 = Ipv4String(cfg.vnameserver);
  o.dns4_addr = cfg.vnameserver;
  o.lease4 = cfg.vdhcp_start;
  o.lease4_text = Ipv4String(cfg.vdhcp_start);
  if (cfg.vprefix_len > 128) {
    return absl::StrCat("vprefix_len ", cfg.vprefix_len, " is over 128");
  }
  o.net6 = absl::StrCat(Ipv6String(cfg.vprefix_addr6), "/", cfg.vprefix_len);
  o.gateway6 = Ipv6String(cfg.vhost6);
  o.dns6 = Ipv6String(cfg.vnameserver6);
  o.dns6_addr = cfg.vnameserver6;
  o.mtu = cfg.if_mtu == 0 ? kDefaultMtu : cfg.if_mtu;
  o.mru = cfg.if_mru == 0 ? kDefaultMtu : cfg.if_mru;
  if (o.mtu < kMinMtu || o.mtu > kMaxMtu || o.mru < kMinMtu ||
      o.mru > kMaxMtu) {
    return absl::StrCat("if_mtu ", cfg.if_mtu, " / if_mru ", cfg.if_mru,
                        " outside ", kMinMtu, "..", kMaxMtu);
  }
  o.host_loopback = !cfg.disable_host_loopback;
  o.ignored.clear();
  if (cfg.tftp_path != nullptr) o.ignored.push_back("tftp_path (no TFTP)");
  if (cfg.bootfile != nullptr) o.ignored.push_back("bootfile (no BOOTP file)");
  if (cfg.vhostname != nullptr) o.ignored.push_back("vhostname");
  if (cfg.vdomainname != nullptr && cfg.vdomainname[0] != '\0') {
    o.ignored.push_back("vdomainname");
  }
  if (cfg.vdnssearch != nullptr && cfg.vdnssearch[0] != nullptr) {
    o.ignored.push_back("vdnssearch");
  }
  if (cfg.enable_emu) o.ignored.push_back("enable_emu");
  if (!cfg.in_enabled) o.ignored.push_back("in_enabled=false");
  if (!cfg.in6_enabled) o.ignored.push_back("in6_enabled=false");
  if (cfg.version >= 2) {
    if (cfg.outbound_addr != nullptr) {
      if (cfg.outbound_addr->sin_family != AF_INET) {
        return "outbound_addr is not AF_INET";
      }
      o.outbound4 = Ipv4String(cfg.outbound_addr->sin_addr);
    }
    if (cfg.outbound_addr6 != nullptr) {
      if (cfg.outbound_addr6->sin6_family != AF_INET6) {
        return "outbound_addr6 is not AF_INET6";
      }
      o.outbound6 = Ipv6String(cfg.outbound_addr6->sin6_addr);
    }
  }
  // A restricted guest reaches nothing outside (libslirp: only DHCP, its
  // host forwards and guestfwd). netstack has no such policy, so it gets
  // the nearest: no DNS (the input filter) and no host loopback; its own
  // TCP, UDP and ping flows fail at the outbound address NewSlirp sets,
  // which no host holds (docs/SLIRP.md, "restricted").
  o.disable_dns = o.restricted || (cfg.version >= 3 && cfg.disable_dns);
  o.disable_dhcp = cfg.version >= 4 && cfg.disable_dhcp;
  if (o.restricted) o.host_loopback = false;
  return "";
}

// A netstack for the settings as they are now (the guest's address may
// have moved: PinGuest4).
// `pcap`: with NETSTACK_SLIRP_PCAP's capture, if set. A rebuild may run
// after the caller's sandbox took the path away (slirp4netns's
// pivot_root), so PinGuest4 tries again without.
netstack_t* BuildNetstack(Slirp& s, std::string& error, bool pcap = true) {
  const SlirpSettings& o = s.settings;
  netstack_config nc;
  netstack_config_init(&nc);
  nc.link_type = NETSTACK_LINK_CALLBACK;
  nc.send_frame = SendFrame;
  nc.opaque = &s;
  // netstack has one MTU for both ways: if_mru is checked, not used
  // (docs/SLIRP.md).
  nc.mtu = static_cast<uint32_t>(std::min(o.mtu, kMaxNetstackMtu));
  nc.mac = o.mac.c_str();
  nc.net4 = o.net4.c_str();
  nc.gateway4 = o.gateway4.c_str();
  nc.dns4 = o.dns4.c_str();
  nc.lease4 = o.lease4_text.c_str();
  nc.net6 = o.net6.c_str();
  nc.gateway6 = o.gateway6.c_str();
  nc.dns6 = o.dns6.c_str();
  nc.host_loopback = o.host_loopback;
  // disable_dns and disable_dhcp are this library's input filter
  // (FilterInput): libnetstack 1.0 serves both always.
  if (o.restricted) {
    // An outbound address that is no host's: every connect() and send of
    // the guest's own flows fails (bind: EADDRNOTAVAIL), and is counted.
    nc.outbound_addr4 = kRestrictedOutbound4;
    nc.outbound_addr6 = kRestrictedOutbound6;
  } else {
    if (!o.outbound4.empty()) nc.outbound_addr4 = o.outbound4.c_str();
    if (!o.outbound6.empty()) nc.outbound_addr6 = o.outbound6.c_str();
  }
  if (const char* path = getenv("NETSTACK_SLIRP_PCAP");
      pcap && path != nullptr && *path != '\0') {
    nc.pcap_path = path;
  }
  // The policy is NewSlirp's, read once (Slirp::egress): libnetstack does
  // not read NETSTACK_POLICY again for each build.
  nc.policy_file = "";
  char err[256] = "";
  netstack_t* ns = netstack_new(&nc, err, sizeof err);
  if (ns == nullptr) {
    error = err;
    return nullptr;
  }
  if (s.egress != nullptr) {
    if (absl::StatusOr<size_t> set = capi::SetEgressPolicy(ns, s.egress);
        !set.ok()) {
      // Never an open network when a policy was asked for.
      netstack_free(ns);
      error = absl::StrCat("NETSTACK_POLICY: ", set.status().message());
      return nullptr;
    }
  }
  return ns;
}

// NETSTACK_POLICY, if set: the file's policy into s.egress. A file that
// cannot be read or does not parse fails slirp_new, on stderr, since
// QEMU logs guest_error only with `-d guest_errors`.
bool ReadPolicy(Slirp& s) {
  const char* path = getenv("NETSTACK_POLICY");
  if (path == nullptr || *path == '\0') return true;
  absl::StatusOr<std::shared_ptr<const policy::Policy>> p =
      policy::LoadPolicyFile(path);
  if (!p.ok()) {
    const std::string message =
        absl::StrCat("netstack-slirp: slirp_new: NETSTACK_POLICY ",
                     p.status().message(), " (docs/POLICY.md)");
    std::fprintf(stderr, "%s\n", message.c_str());
    std::fflush(stderr);
    return false;
  }
  s.egress = *std::move(p);
  return true;
}

}  // namespace

void ReportError(const Slirp& s, const std::string& message) {
  if (s.cb.guest_error == nullptr) return;
  const std::string text = absl::StrCat("netstack-slirp: ", message);
  s.cb.guest_error(text.c_str(), s.opaque);
}

Slirp* NewSlirp(const SlirpConfig* cfg, const SlirpCb* callbacks,
                void* opaque) {
  if (callbacks == nullptr) return nullptr;
  auto s = std::make_unique<Slirp>();
  s->opaque = opaque;
  // Callbacks past `notify` exist only in version-4 callers' structs.
  const size_t cb_len = cfg != nullptr && cfg->version >= 4
                            ? sizeof(SlirpCb)
                            : offsetof(SlirpCb, init_completed);
  memcpy(&s->cb, callbacks, cb_len);
  if (cfg == nullptr) {
    ReportError(*s, "slirp_new: no config");
    return nullptr;
  }
  if (cfg->version < SLIRP_CONFIG_VERSION_MIN ||
      cfg->version > SLIRP_CONFIG_VERSION_MAX) {
    ReportError(*s, absl::StrCat("slirp_new: config version ", cfg->version,
                                 " not in ", SLIRP_CONFIG_VERSION_MIN, "..",
                                 SLIRP_CONFIG_VERSION_MAX));
    return nullptr;
  }
  if (s->cb.send_packet == nullptr) {
    ReportError(*s, "slirp_new: no send_packet callback");
    return nullptr;
  }
  if (std::string err = ReadConfig(*cfg, *s); !err.empty()) {
    ReportError(*s, absl::StrCat("slirp_new: ", err));
    return nullptr;
  }
  if (!ReadPolicy(*s)) return nullptr;
  std::string err;
  s->ns = BuildNetstack(*s, err);
  if (s->ns == nullptr) {
    ReportError(*s, absl::StrCat("slirp_new: ", err));
    return nullptr;
  }
  const SlirpSettings& o = s->settings;
  for (const std::string& field : o.ignored) {
    ReportError(*s, absl::StrCat("slirp_new: ignored: ", field,
                                 " (docs/SLIRP.md)"));
  }
  Slirp* raw = s.release();
  if (raw->settings.version >= 4 && raw->cb.init_completed != nullptr) {
    raw->cb.init_completed(raw, raw->opaque);
  }
  return raw;
}

void FillPoll(Slirp& s, uint32_t* timeout, SlirpAddPollCb add_poll,
              void* opaque) {
  s.poll_index = -1;
  if (s.ns == nullptr) return;  // a rebuild failed (reported then)
  if (add_poll != nullptr) {
    s.poll_index = add_poll(netstack_fd(s.ns), SLIRP_POLL_IN, opaque);
  }
  if (timeout == nullptr) return;
  const int64_t now = MonotonicNs();
  if (s.input_since_turn) {
    *timeout = 0;
  } else if (const int64_t deadline = netstack_next_deadline_ns(s.ns);
             deadline != INT64_MAX) {
    const int64_t left = deadline - now;
    // Round up: waking a little early only costs another fill.
    const int64_t wait_ms = left <= 0 ? 0 : (left + 999999) / 1000000;
    if (wait_ms < *timeout) *timeout = static_cast<uint32_t>(wait_ms);
  }
  // UINT32_MAX is "no timeout" to QEMU's and slirp4netns's loops.
  s.caller_wakes_ns = *timeout == UINT32_MAX
                          ? INT64_MAX
                          : now + int64_t{*timeout} * 1000000;
}

void RunPoll(Slirp& s, int select_error, SlirpGetREventsCb get_revents,
             void* opaque) {
  if (s.ns == nullptr) return;
  bool due = s.input_since_turn;
  if (!due) {
    const int64_t deadline = netstack_next_deadline_ns(s.ns);
    due = deadline != INT64_MAX && deadline <= MonotonicNs();
  }
  // With select_error the caller's revents mean nothing: only what is
  // due by time (or by input) runs.
  if (!select_error && !due && s.poll_index >= 0 && get_revents != nullptr) {
    due = (get_revents(s.poll_index, opaque) &
           (SLIRP_POLL_IN | SLIRP_POLL_ERR | SLIRP_POLL_HUP)) != 0;
  }
  s.poll_index = -1;
  if (!due) return;
  s.input_since_turn = false;
  if (int rc = netstack_poll(s.ns); rc < 0) {
    ReportError(s, absl::StrCat("poll: ", netstack_last_error(s.ns)));
  }
}

namespace {

constexpr size_t kEthLen = 14;
constexpr uint16_t kEtherIpv4 = 0x0800;
constexpr uint16_t kEtherIpv6 = 0x86dd;
constexpr uint16_t kEtherVlan = 0x8100;
constexpr uint16_t kEtherQinQ = 0x88a8;
constexpr uint8_t kProtoUdp = 17;
constexpr uint16_t kDhcpServerPort = 67;

constexpr uint16_t kEtherArp = 0x0806;

uint16_t Load16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }

// The guest's own IPv4 address in a frame: an IPv4 source, or an ARP
// sender; 0.0.0.0 (a DHCP client, an ARP probe) and short frames say
// nothing.
struct in_addr GuestSource4(const uint8_t* f, size_t len) {
  struct in_addr a = {};
  if (len < kEthLen) return a;
  const uint16_t type = Load16(f + 12);
  if (type == kEtherIpv4 && len >= kEthLen + 20) {
    memcpy(&a, f + kEthLen + 12, 4);
  } else if (type == kEtherArp && len >= kEthLen + 28) {
    memcpy(&a, f + kEthLen + 14, 4);
  }
  return a;
}

bool UsableGuest4(const SlirpSettings& o, struct in_addr a) {
  const uint32_t host_bits = a.s_addr & ~o.mask4.s_addr;
  return (a.s_addr & o.mask4.s_addr) == o.network4.s_addr &&
         host_bits != 0 && host_bits != ~o.mask4.s_addr &&
         a.s_addr != o.gateway4_addr.s_addr && a.s_addr != o.dns4_addr.s_addr;
}

// Whether a guest frame must not reach netstack: what disable_dns and
// disable_dhcp (and restricted) turn off, which libnetstack serves
// always. Reads only bytes inside `len`; a frame too short to say passes
// on, and netstack drops and counts it.
bool FilterInput(Slirp& s, const uint8_t* f, size_t len) {
  const SlirpSettings& o = s.settings;
  if (len < kEthLen) return false;
  const uint16_t type = Load16(f + 12);
  if (type == kEtherVlan || type == kEtherQinQ) {
    ++s.counters.input_tagged;
    return true;
  }
  if (type == kEtherIpv6) {
    if (!o.disable_dns || len < kEthLen + 40) return false;
    // Any packet to the DNS address, whatever its header chain.
    if (memcmp(f + kEthLen + 24, &o.dns6_addr, 16) != 0) return false;
    ++s.counters.input_dns_disabled;
    return true;
  }
  if (type != kEtherIpv4 || len < kEthLen + 20) return false;
  const uint8_t* ip = f + kEthLen;
  if (o.disable_dns && memcmp(ip + 16, &o.dns4_addr, 4) == 0) {
    ++s.counters.input_dns_disabled;
    return true;
  }
  if (!o.disable_dhcp || ip[9] != kProtoUdp) return false;
  const size_t ihl = size_t{ip[0] & 0x0fu} * 4;
  const bool fragment = (Load16(ip + 6) & 0x3fff) != 0;  // MF or offset
  uint32_t dst;
  memcpy(&dst, ip + 16, 4);
  const bool to_server =
      dst == INADDR_BROADCAST || dst == o.gateway4_addr.s_addr;
  // A fragment may hide the port: none to the server's addresses passes.
  bool dhcp = fragment && to_server;
  if (!fragment && ihl >= 20 && len >= kEthLen + ihl + 4) {
    dhcp = Load16(ip + ihl + 2) == kDhcpServerPort;
  }
  if (dhcp) ++s.counters.input_dhcp_disabled;
  return dhcp;
}

}  // namespace

void Input(Slirp& s, const uint8_t* pkt, int len) {
  if (pkt == nullptr || len <= 0) {
    ++s.counters.input_refused;
    return;
  }
  const SlirpSettings& o = s.settings;
  if ((o.disable_dns || o.disable_dhcp) &&
      FilterInput(s, pkt, static_cast<size_t>(len))) {
    return;
  }
  if (!s.guest4_pinned) {
    const struct in_addr src = GuestSource4(pkt, static_cast<size_t>(len));
    if (src.s_addr != INADDR_ANY) PinGuest4(s, src);
  }
  if (s.ns == nullptr) return;
  netstack_input(s.ns, pkt, static_cast<size_t>(len));
  s.input_since_turn = true;
  // libslirp handles a frame inside slirp_input, and QEMU counts on it:
  // its vCPU thread hands the guest's frames over while the main loop
  // sleeps in poll(), and nothing would wake it for a frame that only
  // waits for the next turn (the guest's ACKs stalled every download).
  // So the turn runs here, unless netstack is already on the stack
  // (send_packet fed a frame straight back): then the fill's timeout 0
  // runs it.
  if (s.in_netstack) return;
  s.input_since_turn = false;
  if (int rc = netstack_poll(s.ns); rc < 0) {
    ReportError(s, absl::StrCat("input: ", netstack_last_error(s.ns)));
  }
  // The turn may have set an earlier deadline (a retransmission, a
  // delayed ACK) than the one the caller's loop sleeps until.
  const int64_t deadline = netstack_next_deadline_ns(s.ns);
  if (deadline < s.caller_wakes_ns && s.cb.notify != nullptr) {
    s.caller_wakes_ns = deadline;
    s.cb.notify(s.opaque);
  }
}

bool PinGuest4(Slirp& s, struct in_addr guest) {
  SlirpSettings& o = s.settings;
  if (s.guest4_pinned || s.in_netstack || !UsableGuest4(o, guest)) {
    return guest.s_addr == o.lease4.s_addr;
  }
  s.guest4_pinned = true;
  if (guest.s_addr == o.lease4.s_addr) return true;
  const struct in_addr old = o.lease4;
  // The old netstack goes first: the new one binds the same forwards.
  netstack_free(s.ns);
  o.lease4 = guest;
  o.lease4_text = Ipv4String(guest);
  std::string err;
  s.ns = BuildNetstack(s, err);
  if (s.ns == nullptr) {
    ReportError(s, absl::StrCat("rebuild: ", err, "; without the pcap"));
    s.ns = BuildNetstack(s, err, /*pcap=*/false);
  }
  if (s.ns == nullptr) {
    ReportError(s, absl::StrCat("guest address ", o.lease4_text, ": ", err));
    o.lease4 = old;
    o.lease4_text = Ipv4String(old);
    s.ns = BuildNetstack(s, err, /*pcap=*/false);
    if (s.ns == nullptr) {
      ReportError(s, absl::StrCat("rebuild: ", err, "; the network is down"));
      return false;
    }
  } else {
    ++s.counters.guest4_moves;
  }
  s.input_since_turn = true;
  ReaddForwards(s);
  return guest.s_addr == o.lease4.s_addr;
}

}  // namespace netstack::slirp
