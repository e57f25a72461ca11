// Echo (RFC 862) over TCP and UDP on one port, every address of both
// families.
//
// TCP: what a connection sends comes back, with flow control end to end:
// each connection has one 64 KiB buffer; it reads only while that buffer
// is empty and writes it out before reading again, so when the peer stops
// reading our send buffer fills, Write would block, we stop reading, our
// receive window closes and the peer's sender stops. Nothing is buffered
// beyond the 64 KiB and the TCP buffers. At the peer's FIN, the rest is
// echoed and the connection closed.
//
// UDP: each datagram goes back to its sender, unchanged.
#ifndef TOOLS_NETSTACKD_SERVICES_ECHO_SERVICE_H_
#define TOOLS_NETSTACKD_SERVICES_ECHO_SERVICE_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "netstack/tcp/tcp_socket.h"
#include "netstack/udp/udp_socket.h"
#include "tools/netstackd/services/listeners.h"
#include "tools/netstackd/services/service.h"

namespace netstack::tools {

class EchoService final : public Service {
 public:
  static constexpr size_t kBufferBytes = 64 << 10;

  struct Counters {
    uint64_t tcp_connections = 0;
    uint64_t tcp_bytes = 0;   // echoed
    uint64_t tcp_errors = 0;  // connections that ended in an error
    uint64_t udp_datagrams = 0;
    uint64_t udp_bytes = 0;
    uint64_t udp_send_errors = 0;
  };

  // Errors name the socket that could not be bound.
  static absl::StatusOr<std::unique_ptr<EchoService>> Start(ServiceContext& ctx,
                                                            uint16_t port);
  ~EchoService() override;

  void Sweep() override;
  std::string FormatCounters() const override;
  std::string FormatConnections() const override;
  const Counters& counters() const { return counters_; }
  size_t open_connections() const { return conns_.size(); }

 private:
  class Connection;
  explicit EchoService(ServiceContext& ctx);
  void Accept(std::unique_ptr<tcp::TcpSocket> s);
  void OnUdpReadable(udp::UdpSocket& s);

  ServiceContext& ctx_;
  Counters counters_;
  ConnectionSet<Connection> conns_;
  std::unique_ptr<TcpListeners> listeners_;
  std::array<std::unique_ptr<udp::UdpSocket>, 2> udp_;
  static constexpr size_t kDatagramBytes = 65536;
  std::unique_ptr<uint8_t[]> datagram_{new uint8_t[kDatagramBytes]};
};

}  // namespace netstack::tools

#endif  // TOOLS_NETSTACKD_SERVICES_ECHO_SERVICE_H_
