// SocketAddress: one end of a forward, as written on splice_proxy's command
// line and as printed in its logs:
//
//   IPV4:PORT     127.0.0.1:8080, 0.0.0.0:8080
//   [IPV6]:PORT   [::1]:8080, [fe80::1%eth0]:8080 (scope by name or index)
//   unix:PATH     unix:/run/app.sock
//   unix:@NAME    Linux's abstract namespace (no file on disk)
//
// Addresses are numeric only. The proxy never resolves a host name: a DNS
// lookup would block the event loop, and a name that resolves to several
// addresses would hide which one a forward uses.
#ifndef TOOLS_SPLICE_PROXY_SOCKET_ADDRESS_H_
#define TOOLS_SPLICE_PROXY_SOCKET_ADDRESS_H_

#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace netstack::tools {

class SocketAddress {
 public:
  // The longest filesystem path a unix: address may have (sun_path holds
  // it with its terminating NUL).
  static constexpr size_t kMaxUnixPath = 107;

  // Parses the syntax above. The error message says what is wrong and
  // shows the accepted forms. Port 0 is accepted (a listener then gets a
  // free port); whether it makes sense is the caller's business.
  static absl::StatusOr<SocketAddress> Parse(std::string_view text);
  // Wraps what accept(), getsockname() or getpeername() returned. An
  // unnamed UNIX peer (a client that never bound) prints as
  // "unix:(unnamed)".
  static SocketAddress FromSockaddr(const sockaddr* address, socklen_t length);

  SocketAddress() = default;

  int family() const { return storage_.ss_family; }
  bool is_unix() const { return family() == AF_UNIX; }
  // unix:@NAME.
  bool is_abstract() const;
  // The file a unix: listener creates; empty for abstract and IP addresses.
  std::string unix_path() const;
  // 0 for unix: addresses.
  uint16_t port() const;
  // INADDR_ANY or in6addr_any.
  bool is_wildcard() const;
  // 127.0.0.0/8 or ::1.
  bool is_loopback() const;

  const sockaddr* get() const {
    return reinterpret_cast<const sockaddr*>(&storage_);
  }
  socklen_t length() const { return length_; }

  // The same syntax Parse accepts (canonical: "[::1]:80", not "[0::1]:80").
  std::string ToString() const;

  // Same family, address, port (and scope), or same unix name.
  friend bool operator==(const SocketAddress& a, const SocketAddress& b);

 private:
  sockaddr_storage storage_ = {};
  socklen_t length_ = 0;
};

}  // namespace netstack::tools

#endif  // TOOLS_SPLICE_PROXY_SOCKET_ADDRESS_H_
