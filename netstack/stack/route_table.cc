#include "netstack/stack/route_table.h"

#include <charconv>

#include "absl/strings/str_cat.h"

namespace netstack::stack {
namespace {

template <typename Address>
std::optional<Cidr<Address>> ParseCidr(std::string_view text,
                                       unsigned max_len) {
  const size_t slash = text.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  const auto addr = Address::Parse(text.substr(0, slash));
  if (!addr) return std::nullopt;
  const std::string_view len_text = text.substr(slash + 1);
  unsigned len = 0;
  const auto [end, ec] =
      std::from_chars(len_text.data(), len_text.data() + len_text.size(), len);
  if (ec != std::errc() || end != len_text.data() + len_text.size() ||
      len_text.empty() || len > max_len) {
    return std::nullopt;
  }
  return Cidr<Address>{*addr, static_cast<uint8_t>(len)};
}

}  // namespace

std::optional<Ipv4Cidr> ParseIpv4Cidr(std::string_view text) {
  return ParseCidr<wire::Ipv4Address>(text, 32);
}

std::optional<Ipv6Cidr> ParseIpv6Cidr(std::string_view text) {
  return ParseCidr<wire::Ipv6Address>(text, 128);
}

std::string ToString(const Ipv4Cidr& c) {
  return absl::StrCat(c.address.ToString(), "/", c.prefix_len);
}

std::string ToString(const Ipv6Cidr& c) {
  return absl::StrCat(c.address.ToString(), "/", c.prefix_len);
}

}  // namespace netstack::stack
