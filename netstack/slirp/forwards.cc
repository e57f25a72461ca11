// Host forwards: slirp_add_hostfwd / slirp_add_hostxfwd as netstack
// forward specs ("ADDR/HOST_PORT:GUEST_PORT"), and their removal by the
// (protocol, bind address, host port) that libslirp matches on.
//
// netstack's forwards go to the guest's DHCP lease (port_forwards.h), so a
// forward to another guest address is refused; 0.0.0.0 is the lease, as
// in libslirp.
#include <arpa/inet.h>
#include <string.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "netstack/capi/netstack.h"
#include "netstack/slirp/slirp_internal.h"

namespace netstack::slirp {
namespace {

bool SameBind(const HostForward& f, bool udp, int family, const void* addr,
              int host_port) {
  if (f.udp != udp || f.family != family || f.host_port != host_port) {
    return false;
  }
  return family == AF_INET ? memcmp(&f.addr4, addr, sizeof f.addr4) == 0
                           : memcmp(&f.addr6, addr, sizeof f.addr6) == 0;
}

std::string BindText(const HostForward& f) {
  char buf[INET6_ADDRSTRLEN];
  if (f.family == AF_INET) {
    inet_ntop(AF_INET, &f.addr4, buf, sizeof buf);
    return buf;
  }
  inet_ntop(AF_INET6, &f.addr6, buf, sizeof buf);
  return absl::StrCat("[", buf, "]");
}

// netstack's -t/-u spec for one forward.
std::string Spec(const HostForward& f) {
  return absl::StrCat(BindText(f), "/", f.host_port, ":", f.guest_port);
}

}  // namespace

int AddForward(Slirp& s, const HostForward& f) {
  const std::string what =
      absl::StrCat(f.udp ? "udp " : "tcp ", BindText(f), ":", f.host_port,
                   " -> guest port ", f.guest_port);
  auto refuse = [&](const std::string& why) {
    ++s.counters.forwards_refused;
    ReportError(s, absl::StrCat("hostfwd ", what, ": ", why));
    return -1;
  };
  // Port 0 would be an ephemeral port that the caller could not learn.
  if (f.host_port <= 0 || f.host_port > 65535) {
    return refuse("host port must be 1..65535");
  }
  if (f.guest_port <= 0 || f.guest_port > 65535) {
    return refuse("guest port must be 1..65535");
  }
  if (f.guest4.s_addr != INADDR_ANY && !PinGuest4(s, f.guest4)) {
    return refuse(absl::StrCat("forwards go to the guest's address ",
                               s.settings.lease4_text, " only"));
  }
  if (s.ns == nullptr) return refuse("the network is down");
  const void* addr =
      f.family == AF_INET ? static_cast<const void*>(&f.addr4) : &f.addr6;
  for (const HostForward& old : s.forwards) {
    if (SameBind(old, f.udp, f.family, addr, f.host_port)) {
      return refuse("already forwarded");
    }
  }
  HostForward added = f;
  if (netstack_forward_add(s.ns, f.udp ? NETSTACK_UDP : NETSTACK_TCP,
                           Spec(f).c_str(), &added.id) < 0) {
    return refuse(netstack_last_error(s.ns));
  }
  s.forwards.push_back(added);
  return 0;
}

void ReaddForwards(Slirp& s) {
  for (auto it = s.forwards.begin(); it != s.forwards.end();) {
    if (netstack_forward_add(s.ns, it->udp ? NETSTACK_UDP : NETSTACK_TCP,
                             Spec(*it).c_str(), &it->id) < 0) {
      ReportError(s, absl::StrCat("hostfwd ", Spec(*it), " lost: ",
                                  netstack_last_error(s.ns)));
      it = s.forwards.erase(it);
    } else {
      ++it;
    }
  }
}

int RemoveForward(Slirp& s, bool udp, int family, const void* addr,
                  int host_port) {
  for (auto it = s.forwards.begin(); it != s.forwards.end(); ++it) {
    if (!SameBind(*it, udp, family, addr, host_port)) continue;
    const uint64_t id = it->id;
    s.forwards.erase(it);
    if (s.ns != nullptr && netstack_forward_remove(s.ns, id) < 0) {
      ReportError(s, absl::StrCat("remove hostfwd: ",
                                  netstack_last_error(s.ns)));
      return -1;
    }
    return 0;
  }
  return -1;
}

}  // namespace netstack::slirp
