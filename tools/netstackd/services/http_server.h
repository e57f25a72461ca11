// A small static-file HTTP/1.1 server on the netstack TCP layer: GET and
// HEAD of the files under a document root, on every address of both
// families.
//
//   - Persistent connections (RFC 9112 9.3): HTTP/1.1 keeps the connection
//     unless "Connection: close"; HTTP/1.0 closes unless "keep-alive".
//     Pipelined requests are answered in order, one at a time: the next
//     request is parsed only when the previous response is in the send
//     buffer, and no more is read while a response is pending, so a
//     client that pipelines fills its own send buffer, not our memory.
//   - Files stream with flow control: a 64 KiB chunk is pread() and
//     written; when the send buffer is full (Write would block) the server
//     waits for kWritable. A 100 MiB file costs 64 KiB of memory here.
//   - Answers: 200, 400 (malformed, path traversal), 403, 404, 405 (not
//     GET/HEAD), 413 (header section over 16 KiB), 414 (target over
//     8 KiB), 501 (Transfer-Encoding), 505. Errors other than 404 close
//     the connection after the response ("lingering close": our FIN, then
//     the rest of the peer's data is read and dropped, so that an RST
//     cannot destroy the response before the client reads it).
//   - A directory serves its index.html, else 404 (no listings).
//   - Files are opened with openat2(RESOLVE_BENEATH) under the root: on
//     top of the parser's ".." refusal, a symlink cannot lead outside.
//   - A connection idle for `idle_timeout` (no byte read or written) is
//     closed.
#ifndef TOOLS_NETSTACKD_SERVICES_HTTP_SERVER_H_
#define TOOLS_NETSTACKD_SERVICES_HTTP_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "netstack/base/time.h"
#include "netstack/tcp/tcp_socket.h"
#include "tools/netstackd/services/http_request.h"
#include "tools/netstackd/services/listeners.h"
#include "tools/netstackd/services/service.h"

namespace netstack::tools {

struct HttpServerOptions {
  std::string root;  // the document root, a directory
  uint16_t port = 80;
  Duration idle_timeout = absl::Seconds(60);
  http::ParseLimits limits;
  bool send_date = true;  // the Date header (reads the wall clock)
};

class HttpServer final : public Service {
 public:
  static constexpr size_t kFileChunkBytes = 64 << 10;
  static constexpr size_t kReadBytes = 16 << 10;

  struct Counters {
    uint64_t connections = 0;
    uint64_t requests = 0;
    uint64_t status_2xx = 0;
    uint64_t status_4xx = 0;
    uint64_t status_5xx = 0;
    uint64_t body_bytes = 0;         // file bytes written to sockets
    uint64_t connection_errors = 0;  // reset, timed out, read error
    uint64_t idle_timeouts = 0;
  };

  // NotFound/PermissionDenied/FailedPrecondition naming the root if it
  // cannot be opened as a directory; the listeners' errors otherwise.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      ServiceContext& ctx, const HttpServerOptions& options);
  ~HttpServer() override;

  void Sweep() override;
  std::string FormatCounters() const override;
  std::string FormatConnections() const override;
  const Counters& counters() const { return counters_; }
  size_t open_connections() const { return conns_.size(); }

 private:
  class Connection;
  HttpServer(ServiceContext& ctx, const HttpServerOptions& options,
             int root_fd);
  void Accept(std::unique_ptr<tcp::TcpSocket> s);

  ServiceContext& ctx_;
  const HttpServerOptions options_;
  const int root_fd_;
  Counters counters_;
  ConnectionSet<Connection> conns_;
  std::unique_ptr<TcpListeners> listeners_;
};

}  // namespace netstack::tools

#endif  // TOOLS_NETSTACKD_SERVICES_HTTP_SERVER_H_
