#include "netstack/transport/address.h"

#include <charconv>

#include "absl/strings/str_cat.h"

namespace netstack::transport {

bool IpAddress::IsUnspecified() const {
  if (is_v4()) return v4_.ToU32() == 0;
  for (uint8_t b : v6_.bytes) {
    if (b != 0) return false;
  }
  return true;
}

std::string IpAddress::ToString() const {
  return is_v4() ? v4_.ToString() : v6_.ToString();
}

std::optional<IpAddress> IpAddress::Parse(std::string_view text) {
  if (auto a = wire::Ipv4Address::Parse(text)) return IpAddress(*a);
  if (auto a = wire::Ipv6Address::Parse(text)) return IpAddress(*a);
  return std::nullopt;
}

std::string SocketAddress::ToString() const {
  if (ip.is_v6()) return absl::StrCat("[", ip.ToString(), "]:", port);
  return absl::StrCat(ip.ToString(), ":", port);
}

std::optional<SocketAddress> SocketAddress::Parse(std::string_view text) {
  std::string_view host;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() ||
        text[close + 1] != ':') {
      return std::nullopt;
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) return std::nullopt;
  }
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(),
                                   value);
  if (ec != std::errc() || end != port.data() + port.size() || value > 65535 ||
      port.empty()) {
    return std::nullopt;
  }
  auto ip = IpAddress::Parse(host);
  if (!ip) return std::nullopt;
  return SocketAddress{*ip, static_cast<uint16_t>(value)};
}

}  // namespace netstack::transport
