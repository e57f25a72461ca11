// -t/-u SPEC strings as forward rules (pasta's shape):
//
//   [BIND_ADDR/]HOST_PORT[-END][:GUEST_PORT[-END]]
//   unix:PATH:GUEST_PORT                       (TCP only)
//
// BIND_ADDR is an IPv4 or IPv6 address ("::1/8080" or "[::1]/8080");
// without it the forward listens on every address of both families.
// Without GUEST_PORT each host port goes to the same guest port. A guest
// range must be as long as the host range; a single GUEST_PORT with a host
// range is where the guest range starts ("8000-8009:9000" is 9000-9009).
#ifndef NETSTACK_RUNTIME_FORWARD_SPEC_H_
#define NETSTACK_RUNTIME_FORWARD_SPEC_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "netstack/transport/address.h"

namespace netstack::runtime {

// One host port to one guest port.
struct ForwardRule {
  bool udp = false;
  // nullopt: every address of both families (one IPv4 and one IPv6
  // listener).
  std::optional<transport::IpAddress> bind;
  std::string unix_path;  // non-empty: a UNIX stream listener (TCP only)
  uint16_t host_port = 0;
  uint16_t guest_port = 0;

  bool operator==(const ForwardRule&) const = default;
};

// The most ports one SPEC may name: each is one or two listening sockets.
inline constexpr uint32_t kMaxForwardRange = 1024;

// The rules of one SPEC, in port order. Errors (InvalidArgument) say what
// is wrong without repeating the spec; the caller names it.
absl::StatusOr<std::vector<ForwardRule>> ParseForwardSpec(bool udp,
                                                          std::string_view spec);

}  // namespace netstack::runtime

#endif  // NETSTACK_RUNTIME_FORWARD_SPEC_H_
