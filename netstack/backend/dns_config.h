// Where the DNS forwarder sends the guest's queries: `--dns-upstream
// ADDR[:PORT]` values, or the nameservers of /etc/resolv.conf.
#ifndef NETSTACK_BACKEND_DNS_CONFIG_H_
#define NETSTACK_BACKEND_DNS_CONFIG_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "netstack/transport/address.h"

namespace netstack::backend {

inline constexpr uint16_t kDnsPort = 53;

// "1.2.3.4", "1.2.3.4:5353", "fd00::1", "[fd00::1]", "[fd00::1]:5353".
// InvalidArgument for anything else (a port of 0 or above 65535, a scope
// id, a name).
absl::StatusOr<transport::SocketAddress> ParseDnsUpstream(std::string_view text);

// The `nameserver` lines of a resolv.conf (resolv.conf(5)), port 53, in
// order, duplicates dropped. Tolerant as glibc is: comments (# and ;) at
// a line's start or after the address, tabs, CRLF, a missing final
// newline, unknown keywords; a nameserver that does not parse (a name, a
// link-local address with a %scope) is skipped and named in `skipped`.
// At most kMaxNameservers are kept (glibc's MAXNS is 3; we keep a few
// more and say so in `skipped`).
inline constexpr size_t kMaxNameservers = 8;
std::vector<transport::SocketAddress> ParseResolvConf(
    std::string_view text, std::vector<std::string>* skipped = nullptr);

// Reads and parses `path`; NotFound/errno statuses if it cannot be read,
// FailedPrecondition if it names no usable nameserver.
absl::StatusOr<std::vector<transport::SocketAddress>> ReadResolvConf(
    const std::string& path = "/etc/resolv.conf");

}  // namespace netstack::backend

#endif  // NETSTACK_BACKEND_DNS_CONFIG_H_
