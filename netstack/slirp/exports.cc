// The 23 functions of libslirp 4.7 (libslirp.map's nodes: see
// libslirp.lds). Each checks what the caller passed and hands over to
// slirp.cc, forwards.cc or info.cc; nothing here keeps state.
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include <string>

#include "netstack/capi/netstack.h"
#include "netstack/slirp/libslirp.h"
#include "netstack/slirp/slirp_internal.h"

using netstack::slirp::HostForward;
using netstack::slirp::ReportError;

namespace {

// What guestfwd= and smb= are told (docs/SLIRP.md, "guestfwd").
constexpr char kNoGuestfwd[] =
    "guestfwd, exec and unix forwards are not supported by netstack's "
    "libslirp (docs/SLIRP.md)";

// Copies `text` into memory from malloc, which g_free() may free (GLib's
// g_free is free() since 2.46).
char* MallocText(const std::string& text) {
  char* out = static_cast<char*>(malloc(text.size() + 1));
  if (out == nullptr) return nullptr;
  memcpy(out, text.c_str(), text.size() + 1);
  return out;
}

// Fills `f`'s bind and family from a sockaddr; false if it is neither
// family or too short.
bool TakeSockaddr(const struct sockaddr* sa, socklen_t len, HostForward& f,
                  int& port) {
  if (sa == nullptr) return false;
  if (sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
    const auto* in = reinterpret_cast<const struct sockaddr_in*>(sa);
    f.family = AF_INET;
    f.addr4 = in->sin_addr;
    port = ntohs(in->sin_port);
    return true;
  }
  if (sa->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
    const auto* in6 = reinterpret_cast<const struct sockaddr_in6*>(sa);
    f.family = AF_INET6;
    f.addr6 = in6->sin6_addr;
    port = ntohs(in6->sin6_port);
    return true;
  }
  return false;
}

}  // namespace

extern "C" {

Slirp* slirp_new(const SlirpConfig* cfg, const SlirpCb* callbacks,
                 void* opaque) {
  return netstack::slirp::NewSlirp(cfg, callbacks, opaque);
}

Slirp* slirp_init(int restricted, bool in_enabled, struct in_addr vnetwork,
                  struct in_addr vnetmask, struct in_addr vhost,
                  bool in6_enabled, struct in6_addr vprefix_addr6,
                  uint8_t vprefix_len, struct in6_addr vhost6,
                  const char* vhostname, const char* tftp_server_name,
                  const char* tftp_path, const char* bootfile,
                  struct in_addr vdhcp_start, struct in_addr vnameserver,
                  struct in6_addr vnameserver6, const char** vdnssearch,
                  const char* vdomainname, const SlirpCb* callbacks,
                  void* opaque) {
  SlirpConfig cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.version = 1;
  cfg.restricted = restricted;
  cfg.in_enabled = in_enabled;
  cfg.vnetwork = vnetwork;
  cfg.vnetmask = vnetmask;
  cfg.vhost = vhost;
  cfg.in6_enabled = in6_enabled;
  cfg.vprefix_addr6 = vprefix_addr6;
  cfg.vprefix_len = vprefix_len;
  cfg.vhost6 = vhost6;
  cfg.vhostname = vhostname;
  cfg.tftp_server_name = tftp_server_name;
  cfg.tftp_path = tftp_path;
  cfg.bootfile = bootfile;
  cfg.vdhcp_start = vdhcp_start;
  cfg.vnameserver = vnameserver;
  cfg.vnameserver6 = vnameserver6;
  cfg.vdnssearch = vdnssearch;
  cfg.vdomainname = vdomainname;
  return netstack::slirp::NewSlirp(&cfg, callbacks, opaque);
}

void slirp_cleanup(Slirp* slirp) {
  if (slirp == nullptr) return;
  netstack_free(slirp->ns);
  delete slirp;
}

void slirp_pollfds_fill(Slirp* slirp, uint32_t* timeout,
                        SlirpAddPollCb add_poll, void* opaque) {
  if (slirp == nullptr) return;
  netstack::slirp::FillPoll(*slirp, timeout, add_poll, opaque);
}

void slirp_pollfds_poll(Slirp* slirp, int select_error,
                        SlirpGetREventsCb get_revents, void* opaque) {
  if (slirp == nullptr) return;
  netstack::slirp::RunPoll(*slirp, select_error, get_revents, opaque);
}

void slirp_input(Slirp* slirp, const uint8_t* pkt, int pkt_len) {
  if (slirp == nullptr) return;
  netstack::slirp::Input(*slirp, pkt, pkt_len);
}

void slirp_handle_timer(Slirp* slirp, SlirpTimerId id, void* cb_opaque) {
  // No timers are ever made (slirp.cc), so none can expire.
}

int slirp_add_hostfwd(Slirp* slirp, int is_udp, struct in_addr host_addr,
                      int host_port, struct in_addr guest_addr,
                      int guest_port) {
  if (slirp == nullptr) return -1;
  HostForward f;
  f.udp = is_udp != 0;
  f.family = AF_INET;
  f.addr4 = host_addr;
  f.host_port = host_port;
  f.guest4 = guest_addr;
  f.guest_port = guest_port;
  return netstack::slirp::AddForward(*slirp, f);
}

int slirp_remove_hostfwd(Slirp* slirp, int is_udp, struct in_addr host_addr,
                         int host_port) {
  if (slirp == nullptr) return -1;
  return netstack::slirp::RemoveForward(*slirp, is_udp != 0, AF_INET,
                                        &host_addr, host_port);
}

int slirp_add_hostxfwd(Slirp* slirp, const struct sockaddr* haddr,
                       socklen_t haddrlen, const struct sockaddr* gaddr,
                       socklen_t gaddrlen, int flags) {
  if (slirp == nullptr) return -1;
  HostForward f;
  f.udp = (flags & SLIRP_HOSTFWD_UDP) != 0;
  HostForward guest;
  int guest_port = 0;
  if (!TakeSockaddr(haddr, haddrlen, f, f.host_port) ||
      !TakeSockaddr(gaddr, gaddrlen, guest, guest_port)) {
    ReportError(*slirp, "hostxfwd: an address is neither AF_INET nor "
                        "AF_INET6, or too short");
    return -1;
  }
  if (guest.family != AF_INET) {
    ReportError(*slirp, "hostxfwd: forwards go to the guest's IPv4 DHCP "
                        "lease, not to an IPv6 address");
    return -1;
  }
  f.guest4 = guest.addr4;
  f.guest_port = guest_port;
  return netstack::slirp::AddForward(*slirp, f);
}

int slirp_remove_hostxfwd(Slirp* slirp, const struct sockaddr* haddr,
                          socklen_t haddrlen, int flags) {
  if (slirp == nullptr) return -1;
  HostForward f;
  int port = 0;
  if (!TakeSockaddr(haddr, haddrlen, f, port)) return -1;
  const void* addr = f.family == AF_INET ? static_cast<const void*>(&f.addr4)
                                         : &f.addr6;
  return netstack::slirp::RemoveForward(
      *slirp, (flags & SLIRP_HOSTFWD_UDP) != 0, f.family, addr, port);
}

int slirp_add_exec(Slirp* slirp, const char* cmdline,
                   struct in_addr* guest_addr, int guest_port) {
  if (slirp != nullptr) ReportError(*slirp, kNoGuestfwd);
  return -1;
}

int slirp_add_unix(Slirp* slirp, const char* unixsock,
                   struct in_addr* guest_addr, int guest_port) {
  if (slirp != nullptr) ReportError(*slirp, kNoGuestfwd);
  return -1;
}

int slirp_add_guestfwd(Slirp* slirp, SlirpWriteCb write_cb, void* opaque,
                       struct in_addr* guest_addr, int guest_port) {
  if (slirp != nullptr) ReportError(*slirp, kNoGuestfwd);
  return -1;
}

size_t slirp_socket_can_recv(Slirp* slirp, struct in_addr guest_addr,
                             int guest_port) {
  return 0;  // no guestfwd socket exists to take anything
}

void slirp_socket_recv(Slirp* slirp, struct in_addr guest_addr,
                       int guest_port, const uint8_t* buf, int size) {}

int slirp_remove_guestfwd(Slirp* slirp, struct in_addr guest_addr,
                          int guest_port) {
  return -1;  // none was ever added
}

char* slirp_connection_info(Slirp* slirp) {
  if (slirp == nullptr) return MallocText("");
  return MallocText(netstack::slirp::ConnectionInfo(*slirp));
}

char* slirp_neighbor_info(Slirp* slirp) {
  // netstack's neighbour tables are not reachable through its C ABI.
  return MallocText("  Hardware Address   IP Address\n");
}

void slirp_state_save(Slirp* s, SlirpWriteCb write_cb, void* opaque) {
  if (s == nullptr) return;
  netstack::slirp::SaveState(*s, write_cb, opaque);
}

int slirp_state_version(void) { return 4; }

int slirp_state_load(Slirp* s, int version_id, SlirpReadCb read_cb,
                     void* opaque) {
  if (s == nullptr) return -EINVAL;
  return netstack::slirp::LoadState(*s, version_id, read_cb, opaque);
}

const char* slirp_version_string(void) { return "4.7.0-netstack"; }

}  // extern "C"
