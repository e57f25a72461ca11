// Listening on every address of both families: one IPv4 socket bound to
// 0.0.0.0:port and one IPv6 socket bound to [::]:port (netstack keeps the
// families apart, as if IPV6_V6ONLY were always set).
#ifndef TOOLS_NETSTACKD_SERVICES_LISTENERS_H_
#define TOOLS_NETSTACKD_SERVICES_LISTENERS_H_

#include <array>
#include <cstdint>
#include <memory>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "netstack/tcp/tcp_layer.h"
#include "netstack/tcp/tcp_socket.h"
#include "netstack/udp/udp_layer.h"
#include "netstack/udp/udp_socket.h"

namespace netstack::tools {

class TcpListeners {
 public:
  // Gets each accepted connection. It may set the socket's callback and
  // use it at once (data may already be readable).
  using AcceptCallback =
      absl::AnyInvocable<void(std::unique_ptr<tcp::TcpSocket>)>;

  // Errors name the address, e.g. "TCP 0.0.0.0:80: address in use".
  static absl::StatusOr<std::unique_ptr<TcpListeners>> Open(
      tcp::TcpLayer& tcp, uint16_t port, uint32_t backlog,
      AcceptCallback on_accept);

  uint64_t accepted() const { return accepted_; }
  uint64_t accept_errors() const { return accept_errors_; }

 private:
  TcpListeners() = default;
  void AcceptAll(tcp::TcpSocket& listener);

  std::array<std::unique_ptr<tcp::TcpSocket>, 2> sockets_;
  AcceptCallback on_accept_;
  uint64_t accepted_ = 0;
  uint64_t accept_errors_ = 0;
};

// An unbound pair of UDP sockets bound to 0.0.0.0:port and [::]:port.
absl::StatusOr<std::array<std::unique_ptr<udp::UdpSocket>, 2>> BindUdpBoth(
    udp::UdpLayer& udp, uint16_t port);

}  // namespace netstack::tools

#endif  // TOOLS_NETSTACKD_SERVICES_LISTENERS_H_
