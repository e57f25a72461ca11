#include "netstack/runtime/forward_spec.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "netstack/wire/address.h"

namespace netstack::runtime {
namespace {

absl::Status Bad(const std::string& why) {
  return absl::InvalidArgumentError(why);
}

// (Debian's Abseil has its own string_view.)
std::string S(std::string_view v) { return std::string(v); }

std::optional<uint16_t> Port(std::string_view p) {
  if (p.empty() || p.size() > 5) return std::nullopt;
  uint32_t v = 0;
  for (char ch : p) {
    if (ch < '0' || ch > '9') return std::nullopt;
    v = v * 10 + static_cast<uint32_t>(ch - '0');
  }
  if (v < 1 || v > 65535) return std::nullopt;
  return static_cast<uint16_t>(v);
}

struct Range {
  uint16_t first = 0;
  uint16_t last = 0;
  uint32_t size() const { return uint32_t{last} - first + 1; }
};

absl::StatusOr<Range> PortRange(std::string_view text, std::string_view what) {
  const size_t dash = text.find('-');
  auto first = Port(text.substr(0, dash));
  if (!first) {
    return Bad(absl::StrCat("bad ", S(what), " port '", S(text.substr(0, dash)),
                            "' (want 1-65535)"));
  }
  Range r{*first, *first};
  if (dash != std::string_view::npos) {
    auto last = Port(text.substr(dash + 1));
    if (!last) {
      return Bad(absl::StrCat("bad ", S(what), " range end '",
                              S(text.substr(dash + 1)), "'"));
    }
    if (*last < *first) {
      return Bad(
          absl::StrCat(S(what), " range ", S(text), " ends before it starts"));
    }
    r.last = *last;
  }
  return r;
}

}  // namespace

absl::StatusOr<std::vector<ForwardRule>> ParseForwardSpec(
    bool udp, std::string_view spec) {
  ForwardRule base;
  base.udp = udp;
  if (spec.starts_with("unix:")) {
    if (udp) return Bad("unix: forwards are TCP only");
    const std::string_view rest = spec.substr(5);
    const size_t colon = rest.rfind(':');
    if (colon == std::string_view::npos || colon == 0) {
      return Bad("want unix:PATH:GUEST_PORT");
    }
    auto g = Port(rest.substr(colon + 1));
    if (!g) return Bad("bad guest port (want 1-65535)");
    base.unix_path = std::string(rest.substr(0, colon));
    base.host_port = base.guest_port = *g;
    return std::vector<ForwardRule>{base};
  }
  std::string_view ports = spec;
  if (const size_t slash = spec.rfind('/'); slash != std::string_view::npos) {
    std::string_view addr = spec.substr(0, slash);
    if (addr.size() >= 2 && addr.front() == '[' && addr.back() == ']') {
      addr = addr.substr(1, addr.size() - 2);
    }
    if (auto v4 = wire::Ipv4Address::Parse(addr)) {
      base.bind = transport::IpAddress(*v4);
    } else if (auto v6 = wire::Ipv6Address::Parse(addr)) {
      base.bind = transport::IpAddress(*v6);
    } else {
      return Bad(absl::StrCat("'", S(addr), "' is not an IP address"));
    }
    ports = spec.substr(slash + 1);
  }
  if (ports.empty()) return Bad("no port");
  const size_t colon = ports.find(':');
  auto host = PortRange(ports.substr(0, colon), "host");
  if (!host.ok()) return host.status();
  Range guest = *host;
  if (colon != std::string_view::npos) {
    auto g = PortRange(ports.substr(colon + 1), "guest");
    if (!g.ok()) return g.status();
    guest = *g;
    if (guest.first == guest.last && host->size() > 1) {
      // A single guest port with a host range: where the guest range
      // starts.
      if (uint32_t{guest.first} + host->size() - 1 > 65535) {
        return Bad("the guest range would pass port 65535");
      }
      guest.last = static_cast<uint16_t>(guest.first + host->size() - 1);
    } else if (guest.size() != host->size()) {
      return Bad(absl::StrCat("the host range has ", host->size(),
                              " ports and the guest range ", guest.size()));
    }
  }
  if (host->size() > kMaxForwardRange) {
    return Bad(absl::StrCat(host->size(), " ports; one spec may name at most ",
                            kMaxForwardRange));
  }
  std::vector<ForwardRule> out;
  out.reserve(host->size());
  for (uint32_t i = 0; i < host->size(); ++i) {
    ForwardRule r = base;
    r.host_port = static_cast<uint16_t>(host->first + i);
    r.guest_port = static_cast<uint16_t>(guest.first + i);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace netstack::runtime
