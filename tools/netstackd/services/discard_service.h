// Discard (RFC 863) over TCP and UDP on one port, every address of both
// families: everything received is read, counted and dropped. A TCP
// connection is closed when the peer closes its side.
#ifndef TOOLS_NETSTACKD_SERVICES_DISCARD_SERVICE_H_
#define TOOLS_NETSTACKD_SERVICES_DISCARD_SERVICE_H_

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

class DiscardService final : public Service {
 public:
  struct Counters {
    uint64_t tcp_connections = 0;
    uint64_t tcp_bytes = 0;  // read and dropped
    uint64_t tcp_errors = 0;
    uint64_t udp_datagrams = 0;
    uint64_t udp_bytes = 0;
  };

  static absl::StatusOr<std::unique_ptr<DiscardService>> Start(
      ServiceContext& ctx, uint16_t port);
  ~DiscardService() override;

  void Sweep() override;
  std::string FormatCounters() const override;
  std::string FormatConnections() const override;
  const Counters& counters() const { return counters_; }
  size_t open_connections() const { return conns_.size(); }

 private:
  class Connection;
  DiscardService();
  void Accept(std::unique_ptr<tcp::TcpSocket> s);
  void OnUdpReadable(udp::UdpSocket& s);

  static constexpr size_t kScratchBytes = 64 << 10;

  Counters counters_;
  ConnectionSet<Connection> conns_;
  std::unique_ptr<TcpListeners> listeners_;
  std::array<std::unique_ptr<udp::UdpSocket>, 2> udp_;
  // Shared by every connection: what is read here is dropped at once.
  std::unique_ptr<uint8_t[]> scratch_{new uint8_t[kScratchBytes]};
};

}  // namespace netstack::tools

#endif  // TOOLS_NETSTACKD_SERVICES_DISCARD_SERVICE_H_
