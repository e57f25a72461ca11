// slirp_connection_info's text and the state stream.
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "netstack/capi/netstack.h"
#include "netstack/slirp/slirp_internal.h"

namespace netstack::slirp {
namespace {

// The state stream: this magic, then the format (4 bytes, big-endian).
// libslirp's stream starts with its sockets' fields, never these bytes,
// so a stream from the other library is refused, not misread.
constexpr char kStateMagic[8] = {'N', 'S', '-', 'S', 'L', 'I', 'R', 'P'};
constexpr uint32_t kStateFormat = 1;
constexpr size_t kStateLen = sizeof kStateMagic + 4;

std::string AddrText(const HostForward& f) {
  char buf[INET6_ADDRSTRLEN];
  if (f.family == AF_INET) {
    if (f.addr4.s_addr == INADDR_ANY) return "*";
    inet_ntop(AF_INET, &f.addr4, buf, sizeof buf);
  } else {
    if (IN6_IS_ADDR_UNSPECIFIED(&f.addr6)) return "*";
    inet_ntop(AF_INET6, &f.addr6, buf, sizeof buf);
  }
  return buf;
}

uint64_t Counter(const Slirp& s, const char* name) {
  uint64_t v = 0;
  if (s.ns != nullptr) netstack_counter(s.ns, name, &v);
  return v;
}

}  // namespace

// The layout of libslirp's `info usernet`: one line per socket. A
// forward is a [HOST_FORWARD] line, and each connection it accepted a
// TCP[ESTABLISHED] line under the forward's own address and port with the
// guest's end, as libslirp lists them (a UDP forward's flows: UDP[FLOW]).
// netstack's sockets are all behind its one epoll fd, which the FD column
// shows. The guest's own outbound flows are summed in the last line from
// netstack's counters: the C ABI lists no flows one by one.
std::string ConnectionInfo(const Slirp& s) {
  std::string out = absl::StrFormat(
      "  %-19s %3s %15s %5s %15s %5s %5s %5s\n", "Protocol[State]", "FD",
      "Source Address", "Port", "Dest. Address", "Port", "RecvQ", "SendQ");
  const int fd = s.ns != nullptr ? netstack_fd(s.ns) : -1;
  auto row = [&](const char* what, const HostForward& f) {
    absl::StrAppendFormat(&out, "  %-19s %3d %15s %5d %15s %5d %5d %5d\n",
                          what, fd, AddrText(f), f.host_port,
                          s.settings.lease4_text, f.guest_port, 0, 0);
  };
  for (const HostForward& f : s.forwards) {
    row(f.udp ? "UDP[HOST_FORWARD]" : "TCP[HOST_FORWARD]", f);
  }
  for (const HostForward& f : s.forwards) {
    const uint64_t active =
        Counter(s, absl::StrCat("forward.", f.id, ".active").c_str());
    for (uint64_t i = 0; i < active; ++i) {
      row(f.udp ? "UDP[FLOW]" : "TCP[ESTABLISHED]", f);
    }
  }
  const uint64_t opened = Counter(s, "backend.tcp_flows_opened") +
                          Counter(s, "backend.tcp_inbound_opened");
  const uint64_t closed = Counter(s, "backend.tcp_flows_closed");
  const SlirpCounters& c = s.counters;
  absl::StrAppendFormat(
      &out,
      "  netstack: %d TCP flows open, %d host fds; guest frames dropped: "
      "%d empty, %d dns_disabled, %d dhcp_disabled, %d tagged\n",
      opened >= closed ? opened - closed : 0,
      Counter(s, "backend.tcp_host_fds_open"), c.input_refused,
      c.input_dns_disabled, c.input_dhcp_disabled, c.input_tagged);
  return out;
}

void SaveState(const Slirp& s, SlirpWriteCb write, void* opaque) {
  if (write == nullptr) return;
  uint8_t buf[kStateLen];
  memcpy(buf, kStateMagic, sizeof kStateMagic);
  const uint32_t format = htonl(kStateFormat);
  memcpy(buf + sizeof kStateMagic, &format, 4);
  write(buf, sizeof buf, opaque);
}

int LoadState(Slirp& s, int version_id, SlirpReadCb read, void* opaque) {
  if (read == nullptr) return -EINVAL;
  if (version_id != slirp_state_version()) {
    ReportError(s, absl::StrCat("state load: version ", version_id,
                                " is not ours (", slirp_state_version(),
                                ")"));
    return -EINVAL;
  }
  uint8_t buf[kStateLen];
  if (read(buf, sizeof buf, opaque) != static_cast<ssize_t>(sizeof buf) ||
      memcmp(buf, kStateMagic, sizeof kStateMagic) != 0) {
    ReportError(s,
                "state load: not netstack's state (migrating from libslirp "
                "is not supported: docs/SLIRP.md)");
    return -EINVAL;
  }
  uint32_t format;
  memcpy(&format, buf + sizeof kStateMagic, 4);
  if (ntohl(format) != kStateFormat) {
    ReportError(s, absl::StrCat("state load: format ", ntohl(format),
                                " unknown"));
    return -EINVAL;
  }
  return 0;
}

}  // namespace netstack::slirp
