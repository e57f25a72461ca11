#include "netstack/wire/address.h"

#include <arpa/inet.h>

#include <cstdio>
#include <string>

#include "absl/strings/str_format.h"

namespace netstack::wire {

std::string MacAddress::ToString() const {
  return absl::StrFormat("%02x:%02x:%02x:%02x:%02x:%02x", bytes[0], bytes[1],
                         bytes[2], bytes[3], bytes[4], bytes[5]);
}

std::optional<MacAddress> MacAddress::Parse(std::string_view text) {
  if (text.size() != 17) return std::nullopt;
  MacAddress m;
  for (size_t i = 0; i < 6; ++i) {
    if (i > 0 && text[i * 3 - 1] != ':') return std::nullopt;
    unsigned v = 0;
    for (size_t j = 0; j < 2; ++j) {
      const char c = text[i * 3 + j];
      unsigned d;
      if (c >= '0' && c <= '9') {
        d = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        d = c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        d = c - 'A' + 10;
      } else {
        return std::nullopt;
      }
      v = v * 16 + d;
    }
    m.bytes[i] = static_cast<uint8_t>(v);
  }
  return m;
}

std::string Ipv4Address::ToString() const {
  return absl::StrFormat("%u.%u.%u.%u", bytes[0], bytes[1], bytes[2],
                         bytes[3]);
}

std::optional<Ipv4Address> Ipv4Address::Parse(std::string_view text) {
  // inet_pton needs a NUL-terminated string; bound the copy.
  if (text.size() >= INET_ADDRSTRLEN) return std::nullopt;
  char buf[INET_ADDRSTRLEN] = {};
  text.copy(buf, text.size());
  Ipv4Address a;
  if (inet_pton(AF_INET, buf, a.bytes.data()) != 1) return std::nullopt;
  return a;
}

std::string Ipv6Address::ToString() const {
  char buf[INET6_ADDRSTRLEN];
  if (inet_ntop(AF_INET6, bytes.data(), buf, sizeof(buf)) == nullptr) {
    return "?";
  }
  return buf;
}

std::optional<Ipv6Address> Ipv6Address::Parse(std::string_view text) {
  if (text.size() >= INET6_ADDRSTRLEN) return std::nullopt;
  char buf[INET6_ADDRSTRLEN] = {};
  text.copy(buf, text.size());
  Ipv6Address a;
  if (inet_pton(AF_INET6, buf, a.bytes.data()) != 1) return std::nullopt;
  return a;
}

}  // namespace netstack::wire
