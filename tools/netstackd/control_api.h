// --control PATH (host mode): a UNIX stream socket through which a test
// drives the stack's own TCP and UDP sockets, as gVisor packetimpact's
// posix_server does for the system under test. The differential
// conformance suite (tests/conformance) speaks the same protocol to a
// helper that makes the same calls on the Linux kernel's sockets
// (tests/conformance/linux_dut.py), so a scenario is written once.
//
// One JSON object per line each way. Every call is non-blocking; a caller
// that wants to wait polls (errno 11, EAGAIN, means "not yet"):
//
//   {"op":"socket","family":4,"proto":"tcp"}     -> {"ok":true,"fd":1}
//   {"op":"bind","fd":1,"addr":"10.0.0.2","port":80}
//   {"op":"listen","fd":1,"backlog":8}
//   {"op":"accept","fd":1}        -> {"ok":true,"fd":2,"addr":..,"port":..}
//   {"op":"connect","fd":1,"addr":"10.0.0.1","port":80}  (TCP: in progress)
//   {"op":"send","fd":2,"data":"68690a"} or "size":N -> {"ok":true,"n":3}
//   {"op":"sendto","fd":3,"data":"..","addr":..,"port":..}          (UDP)
//   {"op":"recv","fd":2,"len":100} -> {"ok":true,"data":"..","n":3}
//                                     (UDP also "addr","port")
//   {"op":"shutdown","fd":2,"how":"wr"}   (rd, wr, rdwr)
//   {"op":"close","fd":2}         (an abort when linger 0 was set)
//   {"op":"setsockopt","fd":2,"opt":"nodelay","value":1}  nodelay, cork,
//       keepalive (value, idle, interval, count: seconds), user_timeout
//       (ms), linger (value, seconds; only 0 seconds), rcvbuf and
//       window_clamp (bytes, before connect/listen)
//   {"op":"getsockopt","fd":2,"opt":"error"}  -> {"ok":true,"value":111}
//   {"op":"info","fd":2} -> {"ok":true,"state":"ESTABLISHED","rto_ms":..,
//                            "snd_mss":..,"rcv_wnd":..,"retransmits":..}
//   {"op":"poll","fd":2} -> {"ok":true,"readable":..,"writable":..,
//                            "error":..,"hup":..}
//   {"op":"reset"}       -> aborts and forgets every socket
//   {"op":"counters"}    -> {"ok":true,"counters":{...}}
//   an error -> {"ok":false,"errno":N,"error":"..."}
//
// The socket and its clients are a JsonLinesServer (json_lines_server.h),
// as the forward API's are: mode 0600 (whoever can connect controls the
// stack's sockets), never replaces an existing file, unlinked when this
// goes; per client kMaxLine, kMaxOutput and kMaxLinesPerWakeup, and
// kMaxClients at once. At most
// kMaxSockets sockets at once. Nothing a client sends can stop the loop.
#ifndef TOOLS_NETSTACKD_CONTROL_API_H_
#define TOOLS_NETSTACKD_CONTROL_API_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/tcp/tcp_layer.h"
#include "netstack/tcp/tcp_socket.h"
#include "netstack/udp/udp_layer.h"
#include "netstack/udp/udp_socket.h"
#include "tools/netstackd/json_lines_server.h"
#include "tools/tcp_benchmark/json.h"

namespace netstack::tools {

class ControlApi {
 public:
  static constexpr size_t kMaxLine = 256 * 1024;
  static constexpr size_t kMaxOutput = 4 * 1024 * 1024;
  static constexpr size_t kMaxClients = 8;
  static constexpr size_t kMaxLinesPerWakeup = 16;
  static constexpr size_t kMaxSockets = 4096;
  static constexpr size_t kMaxIo = 1 << 20;  // bytes per send/recv call

  static absl::StatusOr<std::unique_ptr<ControlApi>> Create(
      eventloop::EventLoop& loop, tcp::TcpLayer& tcp, udp::UdpLayer& udp,
      std::function<std::string()> counters, const std::string& path);
  ControlApi(const ControlApi&) = delete;
  ControlApi& operator=(const ControlApi&) = delete;
  ~ControlApi();

  // One request line (without its newline) to its answer (without one).
  std::string Handle(std::string_view line, Instant now);

  uint64_t requests() const { return requests_; }
  uint64_t errors() const { return errors_; }
  size_t sockets() const { return sockets_.size(); }
  std::string FormatCounters() const;

 private:
  struct Socket {
    std::unique_ptr<tcp::TcpSocket> tcp;
    std::unique_ptr<udp::UdpSocket> udp;
    bool linger_zero = false;
  };
  using SocketMap = std::map<int, Socket>;
  // A request that names a socket: its op, the whole request, the socket.
  struct SocketRequest {
    std::string_view op;
    const bench::JsonValue& req;
    SocketMap::iterator it;
    Instant now;
  };

  ControlApi(tcp::TcpLayer& tcp, udp::UdpLayer& udp,
             std::function<std::string()> counters);
  int AddSocket(Socket s);
  // An error answer, counted in errors().
  std::string Fail(int err, std::string_view why);
  std::string Fail(const absl::Status& s);

  // The ops, each to its answer: the table's own, then one per socket op
  // (Handle has found the socket).
  std::string OpenSocket(const bench::JsonValue& req);
  std::string Reset();
  std::string Counters();
  std::string CloseSocket(const SocketRequest& r);
  std::string BindOrConnect(const SocketRequest& r);
  std::string Listen(const SocketRequest& r);
  std::string Accept(const SocketRequest& r);
  std::string Send(const SocketRequest& r);  // send and sendto
  std::string Recv(const SocketRequest& r);
  std::string Shutdown(const SocketRequest& r);
  std::string Poll(const SocketRequest& r);
  std::string Info(const SocketRequest& r);
  std::string GetSockOpt(const SocketRequest& r);
  std::string SetSockOpt(const SocketRequest& r);

  tcp::TcpLayer& tcp_;
  udp::UdpLayer& udp_;
  std::function<std::string()> counter_text_;
  uint64_t requests_ = 0;
  uint64_t errors_ = 0;
  int next_fd_ = 3;
  SocketMap sockets_;
  // Last: its clients call Handle, so it goes before the sockets.
  std::unique_ptr<JsonLinesServer> server_;
};

}  // namespace netstack::tools

#endif  // TOOLS_NETSTACKD_CONTROL_API_H_
