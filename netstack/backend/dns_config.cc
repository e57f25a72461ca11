#include "netstack/backend/dns_config.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace netstack::backend {

using transport::IpAddress;
using transport::SocketAddress;

namespace {

std::optional<uint16_t> ParsePort(std::string_view s) {
  uint32_t port = 0;
  if (s.empty() || s.size() > 5 ||
      !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      port > 65535) {
    return std::nullopt;
  }
  for (char c : s) port = port * 10 + static_cast<uint32_t>(c - '0');
  if (port == 0 || port > 65535) return std::nullopt;
  return static_cast<uint16_t>(port);
}

}  // namespace

absl::StatusOr<SocketAddress> ParseDnsUpstream(std::string_view text) {
  auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("dns upstream '", absl::string_view(text.data(), text.size()),
                     "': want ADDR[:PORT]"));
  };
  std::string_view host = text;
  uint16_t port = kDnsPort;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return bad();
    host = text.substr(1, close - 1);
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return bad();
      auto p = ParsePort(rest.substr(1));
      if (!p) return bad();
      port = *p;
    }
    std::optional<IpAddress> ip = IpAddress::Parse(host);
    if (!ip || !ip->is_v6()) return bad();
    return SocketAddress{*ip, port};
  }
  // One colon: v4 with a port. More: a bare IPv6 address.
  const size_t colons = std::count(text.begin(), text.end(), ':');
  if (colons == 1) {
    const size_t c = text.find(':');
    host = text.substr(0, c);
    auto p = ParsePort(text.substr(c + 1));
    if (!p) return bad();
    port = *p;
  }
  std::optional<IpAddress> ip = IpAddress::Parse(host);
  if (!ip || ip->IsUnspecified()) return bad();
  if (colons == 1 && !ip->is_v4()) return bad();
  return SocketAddress{*ip, port};
}

std::vector<SocketAddress> ParseResolvConf(std::string_view text,
                                           std::vector<std::string>* skipped) {
  std::vector<SocketAddress> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    // Comments: glibc takes # or ; in the first column as a comment and
    // stops parsing a nameserver's address at whitespace, so "1.2.3.4 #x"
    // names 1.2.3.4.
    if (const size_t c = line.find_first_of("#;"); c != std::string_view::npos) {
      line = line.substr(0, c);
    }
    std::vector<std::string_view> words;
    for (size_t i = 0; i < line.size() && words.size() < 2;) {
      const size_t b = line.find_first_not_of(" \t\r\f\v", i);
      if (b == std::string_view::npos) break;
      size_t e = line.find_first_of(" \t\r\f\v", b);
      if (e == std::string_view::npos) e = line.size();
      words.push_back(line.substr(b, e - b));
      i = e;
    }
    if (words.size() < 2 || words[0] != "nameserver") continue;
    const std::string_view addr = words[1];
    std::optional<IpAddress> ip;
    if (addr.find('%') == std::string_view::npos) ip = IpAddress::Parse(addr);
    if (!ip || ip->IsUnspecified()) {
      if (skipped != nullptr) skipped->push_back(std::string(addr));
      continue;
    }
    const SocketAddress a{*ip, kDnsPort};
    if (std::find(out.begin(), out.end(), a) != out.end()) continue;
    if (out.size() == kMaxNameservers) {
      if (skipped != nullptr) skipped->push_back(std::string(addr));
      continue;
    }
    out.push_back(a);
  }
  return out;
}

absl::StatusOr<std::vector<SocketAddress>> ReadResolvConf(
    const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  std::stringstream ss;
  ss << in.rdbuf();
  std::vector<SocketAddress> out = ParseResolvConf(ss.str());
  if (out.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": no usable nameserver"));
  }
  return out;
}

}  // namespace netstack::backend
