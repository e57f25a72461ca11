#include "tools/splice_proxy/socket_address.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/un.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace netstack::tools {
namespace {

constexpr char kForms[] = "want ADDR:PORT, [V6ADDR]:PORT or unix:PATH";
constexpr std::string_view kUnixPrefix = "unix:";

absl::Status Bad(std::string_view text, std::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("bad address '", std::string(text), "': ", std::string(why),
                   " (", kForms, ")"));
}

// A decimal port, 0..65535, digits only (no sign, no spaces).
bool ParsePort(std::string_view s, uint16_t* port) {
  if (s.empty() || s.size() > 5) return false;
  uint32_t value = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<uint32_t>(c - '0');
  }
  if (value > 65535) return false;
  *port = static_cast<uint16_t>(value);
  return true;
}

absl::StatusOr<SocketAddress> ParseUnix(std::string_view text,
                                        std::string_view name) {
  if (name.empty()) return Bad(text, "empty unix: path");
  const bool abstract = name.front() == '@';
  if (abstract && name.size() == 1) return Bad(text, "empty abstract name");
  if (name.find('\0') != std::string_view::npos) {
    return Bad(text, "NUL byte in the path");
  }
  if (name.size() > SocketAddress::kMaxUnixPath) {
    return Bad(text, absl::StrCat("unix: path of ", name.size(),
                                  " bytes, the limit is ",
                                  SocketAddress::kMaxUnixPath));
  }
  sockaddr_un un = {};
  un.sun_family = AF_UNIX;
  std::memcpy(un.sun_path, name.data(), name.size());
  socklen_t length = offsetof(sockaddr_un, sun_path) + name.size();
  if (abstract) {
    un.sun_path[0] = '\0';  // the name is the bytes after it, no NUL
  } else {
    length += 1;  // the terminating NUL
  }
  return SocketAddress::FromSockaddr(reinterpret_cast<const sockaddr*>(&un),
                                     length);
}

absl::StatusOr<SocketAddress> ParseIpv6(std::string_view text) {
  const size_t close = text.find(']');
  if (close == std::string_view::npos) return Bad(text, "no ']'");
  if (close + 1 >= text.size() || text[close + 1] != ':') {
    return Bad(text, "no ':PORT' after ']'");
  }
  std::string host(text.substr(1, close - 1));
  uint16_t port = 0;
  if (!ParsePort(text.substr(close + 2), &port)) {
    return Bad(text, "the port is not a number in [0, 65535]");
  }
  sockaddr_in6 in6 = {};
  in6.sin6_family = AF_INET6;
  in6.sin6_port = htons(port);
  if (const size_t percent = host.find('%'); percent != std::string::npos) {
    const std::string scope = host.substr(percent + 1);
    host.resize(percent);
    uint16_t numeric = 0;
    if (ParsePort(scope, &numeric)) {
      in6.sin6_scope_id = numeric;
    } else {
      in6.sin6_scope_id = if_nametoindex(scope.c_str());
      if (in6.sin6_scope_id == 0) {
        return Bad(text, absl::StrCat("no interface named '", scope, "'"));
      }
    }
  }
  if (inet_pton(AF_INET6, host.c_str(), &in6.sin6_addr) != 1) {
    return Bad(text, absl::StrCat("'", host, "' is not an IPv6 address"));
  }
  return SocketAddress::FromSockaddr(reinterpret_cast<const sockaddr*>(&in6),
                                     sizeof(in6));
}

absl::StatusOr<SocketAddress> ParseIpv4(std::string_view text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) return Bad(text, "no ':PORT'");
  if (text.find(':') != colon) {
    return Bad(text, "an IPv6 address needs brackets, e.g. [::1]:8080");
  }
  const std::string host(text.substr(0, colon));
  if (host.empty()) {
    return Bad(text,
               "no address before ':' (0.0.0.0 means every IPv4 "
               "address)");
  }
  uint16_t port = 0;
  if (!ParsePort(text.substr(colon + 1), &port)) {
    return Bad(text, "the port is not a number in [0, 65535]");
  }
  sockaddr_in in = {};
  in.sin_family = AF_INET;
  in.sin_port = htons(port);
  if (inet_pton(AF_INET, host.c_str(), &in.sin_addr) != 1) {
    return Bad(text, absl::StrCat("'", host,
                                  "' is not an IPv4 address (host names "
                                  "are not resolved)"));
  }
  return SocketAddress::FromSockaddr(reinterpret_cast<const sockaddr*>(&in),
                                     sizeof(in));
}

}  // namespace

absl::StatusOr<SocketAddress> SocketAddress::Parse(std::string_view text) {
  if (text.empty()) return Bad(text, "empty");
  if (text.substr(0, kUnixPrefix.size()) == kUnixPrefix) {
    return ParseUnix(text, text.substr(kUnixPrefix.size()));
  }
  if (text.front() == '[') return ParseIpv6(text);
  return ParseIpv4(text);
}

SocketAddress SocketAddress::FromSockaddr(const sockaddr* address,
                                          socklen_t length) {
  SocketAddress result;
  const socklen_t n = std::min<socklen_t>(length, sizeof(result.storage_));
  std::memcpy(&result.storage_, address, n);
  result.length_ = n;
  return result;
}

bool SocketAddress::is_abstract() const {
  const auto* un = reinterpret_cast<const sockaddr_un*>(&storage_);
  return is_unix() && length_ > offsetof(sockaddr_un, sun_path) &&
         un->sun_path[0] == '\0';
}

std::string SocketAddress::unix_path() const {
  if (!is_unix() || is_abstract()) return "";
  const auto* un = reinterpret_cast<const sockaddr_un*>(&storage_);
  const size_t max = length_ - offsetof(sockaddr_un, sun_path);
  return std::string(un->sun_path, strnlen(un->sun_path, max));
}

uint16_t SocketAddress::port() const {
  if (family() == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in*>(&storage_)->sin_port);
  }
  if (family() == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_port);
  }
  return 0;
}

bool SocketAddress::is_wildcard() const {
  if (family() == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(&storage_)->sin_addr.s_addr ==
           htonl(INADDR_ANY);
  }
  if (family() == AF_INET6) {
    return IN6_IS_ADDR_UNSPECIFIED(
        &reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_addr);
  }
  return false;
}

bool SocketAddress::is_loopback() const {
  if (family() == AF_INET) {
    const uint32_t a =
        ntohl(reinterpret_cast<const sockaddr_in*>(&storage_)->sin_addr.s_addr);
    return (a >> 24) == 127;
  }
  if (family() == AF_INET6) {
    return IN6_IS_ADDR_LOOPBACK(
        &reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_addr);
  }
  return false;
}

std::string SocketAddress::ToString() const {
  char buf[INET6_ADDRSTRLEN] = {};
  if (family() == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&storage_);
    inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
    return absl::StrCat(buf, ":", port());
  }
  if (family() == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&storage_);
    inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf));
    std::string scope;
    if (in6->sin6_scope_id != 0) {
      char name[IF_NAMESIZE] = {};
      scope = if_indextoname(in6->sin6_scope_id, name) != nullptr
                  ? absl::StrCat("%", name)
                  : absl::StrCat("%", in6->sin6_scope_id);
    }
    return absl::StrCat("[", buf, scope, "]:", port());
  }
  if (is_unix()) {
    const auto* un = reinterpret_cast<const sockaddr_un*>(&storage_);
    const size_t offset = offsetof(sockaddr_un, sun_path);
    if (length_ <= offset) return "unix:(unnamed)";
    if (is_abstract()) {
      return absl::StrCat("unix:@",
                          std::string(un->sun_path + 1, length_ - offset - 1));
    }
    return absl::StrCat("unix:", unix_path());
  }
  return absl::StrCat("(address family ", family(), ")");
}

bool operator==(const SocketAddress& a, const SocketAddress& b) {
  if (a.family() != b.family()) return false;
  if (a.is_unix()) {
    return a.length_ == b.length_ &&
           std::memcmp(&a.storage_, &b.storage_, a.length_) == 0;
  }
  if (a.family() == AF_INET) {
    const auto* x = reinterpret_cast<const sockaddr_in*>(&a.storage_);
    const auto* y = reinterpret_cast<const sockaddr_in*>(&b.storage_);
    return x->sin_port == y->sin_port &&
           x->sin_addr.s_addr == y->sin_addr.s_addr;
  }
  if (a.family() == AF_INET6) {
    const auto* x = reinterpret_cast<const sockaddr_in6*>(&a.storage_);
    const auto* y = reinterpret_cast<const sockaddr_in6*>(&b.storage_);
    return x->sin6_port == y->sin6_port &&
           x->sin6_scope_id == y->sin6_scope_id &&
           IN6_ARE_ADDR_EQUAL(&x->sin6_addr, &y->sin6_addr);
  }
  return false;
}

}  // namespace netstack::tools
