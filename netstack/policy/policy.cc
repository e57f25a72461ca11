#include "netstack/policy/policy.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "netstack/wire/address.h"

namespace netstack::policy {
namespace {

using transport::IpAddress;
using wire::Ipv4Address;
using wire::Ipv6Address;

// Debian's Abseil has its own string_view type, not std::string_view.
absl::string_view A(std::string_view s) { return {s.data(), s.size()}; }
std::string_view S(absl::string_view s) { return {s.data(), s.size()}; }

constexpr size_t kMaxName = 253;
constexpr size_t kMaxLabel = 63;

// ---- Addresses ----

// 128 bits of an IPv6 address as two words, for masking and hashing.
struct V6Key {
  uint64_t hi = 0;
  uint64_t lo = 0;
  friend bool operator==(const V6Key&, const V6Key&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const V6Key& k) {
    return H::combine(std::move(h), k.hi, k.lo);
  }
};

V6Key KeyOf(const Ipv6Address& a) {
  V6Key k;
  for (int i = 0; i < 8; ++i) k.hi = (k.hi << 8) | a.bytes[i];
  for (int i = 8; i < 16; ++i) k.lo = (k.lo << 8) | a.bytes[i];
  return k;
}

uint32_t Mask4(uint32_t a, int len) {
  return len == 0 ? 0 : a & (~uint32_t{0} << (32 - len));
}

V6Key Mask6(V6Key k, int len) {
  if (len <= 64) {
    k.hi = len == 0 ? 0 : k.hi & (~uint64_t{0} << (64 - len));
    k.lo = 0;
  } else if (len < 128) {
    k.lo &= ~uint64_t{0} << (128 - len);
  }
  return k;
}

bool InV4(uint32_t a, uint32_t net, int len) { return Mask4(a, len) == net; }

// The IPv4 address an IPv6 address embeds (RFC 4291 2.5.5 mapped and
// compatible, RFC 6052 NAT64's well-known prefix), if it is one of those.
// :: and ::1 are IPv6's own unspecified and loopback addresses.
std::optional<Ipv4Address> EmbeddedV4(const Ipv6Address& a) {
  const V6Key k = KeyOf(a);
  const bool mapped = k.hi == 0 && (k.lo >> 32) == 0xffff;
  const bool compat = k.hi == 0 && (k.lo >> 32) == 0 && k.lo > 1;
  const bool nat64 = k.hi == 0x0064ff9b00000000ull && (k.lo >> 32) == 0;
  if (!mapped && !compat && !nat64) return std::nullopt;
  return Ipv4Address::FromBytes(a.bytes.data() + 12);
}

// The address every rule and check judges: the embedded IPv4 one if any.
IpAddress Judged(const IpAddress& a) {
  if (a.is_v6()) {
    if (std::optional<Ipv4Address> v4 = EmbeddedV4(a.v6())) return *v4;
  }
  return a;
}

bool IsMetadata(const IpAddress& judged) {
  static const IpAddress kV4 = *IpAddress::Parse("169.254.169.254");
  static const IpAddress kV6 = *IpAddress::Parse("fd00:ec2::254");
  return judged == kV4 || judged == kV6;
}

bool SpecialV4(uint32_t a) {
  return InV4(a, 0x00000000, 8) ||    // 0.0.0.0/8, the unspecified
         InV4(a, 0x0a000000, 8) ||    // 10/8
         InV4(a, 0x64400000, 10) ||   // 100.64/10
         InV4(a, 0x7f000000, 8) ||    // 127/8
         InV4(a, 0xa9fe0000, 16) ||   // 169.254/16
         InV4(a, 0xac100000, 12) ||   // 172.16/12
         InV4(a, 0xc0a80000, 16) ||   // 192.168/16
         InV4(a, 0xe0000000, 4) ||    // multicast
         a == 0xffffffffu;            // broadcast
}

bool SpecialV6(const Ipv6Address& a) {
  const V6Key k = KeyOf(a);
  return (k.hi == 0 && k.lo <= 1) ||        // :: and ::1
         (a.bytes[0] & 0xfe) == 0xfc ||     // fc00::/7
         (a.bytes[0] == 0xfe && (a.bytes[1] & 0xc0) == 0x80) ||  // fe80::/10
         a.bytes[0] == 0xff;                // multicast
}

// ---- Names ----

bool NameByte(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' ||
         c == '_';
}

// Lower case and without one trailing dot; what rules and pins compare.
std::string CanonicalName(std::string_view name) {
  if (!name.empty() && name.back() == '.') name.remove_suffix(1);
  return absl::AsciiStrToLower(A(name));
}

// Checks a canonical name: 1..253 bytes of labels of 1..63 bytes of
// letters, digits, '-' (not first or last) and '_'; not all-numeric in the
// last label (so a mistyped address is not taken for a name).
absl::Status CheckName(std::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError("empty name");
  if (name.size() > kMaxName) {
    return absl::InvalidArgumentError("name longer than 253 bytes");
  }
  std::string_view last;
  for (std::string_view rest = name;;) {
    const size_t dot = rest.find('.');
    std::string_view label = rest.substr(0, dot);
    if (label.empty()) return absl::InvalidArgumentError("empty label");
    if (label.size() > kMaxLabel) {
      return absl::InvalidArgumentError("label longer than 63 bytes");
    }
    for (char c : label) {
      if (!NameByte(c)) {
        return absl::InvalidArgumentError(
            "a name is letters, digits, '-', '_' and dots");
      }
    }
    if (label.front() == '-' || label.back() == '-') {
      return absl::InvalidArgumentError("a label cannot start or end with '-'");
    }
    last = label;
    if (dot == std::string_view::npos) break;
    rest.remove_prefix(dot + 1);
  }
  if (std::all_of(last.begin(), last.end(), [](char c) {
        return absl::ascii_isdigit(static_cast<unsigned char>(c));
      })) {
    return absl::InvalidArgumentError("neither an address nor a name");
  }
  return absl::OkStatus();
}

// ---- Rules ----

std::optional<uint16_t> ParsePortNumber(std::string_view s) {
  unsigned v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() ||
      v > 65535) {
    return std::nullopt;
  }
  return static_cast<uint16_t>(v);
}

absl::Status ParsePorts(std::string_view s, Rule& rule) {
  const size_t dash = s.find('-');
  std::optional<uint16_t> lo = ParsePortNumber(s.substr(0, dash));
  std::optional<uint16_t> hi =
      dash == std::string_view::npos ? lo : ParsePortNumber(s.substr(dash + 1));
  if (!lo || !hi) {
    return absl::InvalidArgumentError(
        "a port is 0..65535, a range PORT-PORT");
  }
  if (*lo > *hi) return absl::InvalidArgumentError("port range is backwards");
  if (*hi == 0) return absl::InvalidArgumentError("port 0 matches no flow");
  rule.port_lo = *lo;
  rule.port_hi = *hi;
  return absl::OkStatus();
}

// "ADDRESS" or "ADDRESS/LEN" of the family `v6` says.
absl::Status ParseCidr(std::string_view s, bool v6, Target& target) {
  const size_t slash = s.find('/');
  std::string_view addr = s.substr(0, slash);
  const int max_len = v6 ? 128 : 32;
  int len = max_len;
  if (slash != std::string_view::npos) {
    std::string_view l = s.substr(slash + 1);
    auto [end, ec] = std::from_chars(l.data(), l.data() + l.size(), len);
    if (l.empty() || ec != std::errc() || end != l.data() + l.size() ||
        len < 0 || len > max_len) {
      return absl::InvalidArgumentError(
          absl::StrCat("prefix length is 0..", max_len));
    }
  }
  if (v6) {
    std::optional<Ipv6Address> a = Ipv6Address::Parse(addr);
    if (!a) return absl::InvalidArgumentError("not an IPv6 address");
    const V6Key k = KeyOf(*a);
    if (!(Mask6(k, len) == k)) {
      return absl::InvalidArgumentError("host bits set after the prefix");
    }
    // An embedded IPv4 network is judged as IPv4, so store it as one
    // ([64:ff9b::/96] is then 0.0.0.0/0: every IPv4 address, as the
    // embedded forms are judged).
    std::optional<Ipv4Address> v4 = EmbeddedV4(*a);
    if (v4 && len >= 96) {
      target.address = *v4;
      target.prefix_len = static_cast<uint8_t>(len - 96);
    } else {
      target.address = *a;
      target.prefix_len = static_cast<uint8_t>(len);
    }
  } else {
    std::optional<Ipv4Address> a = Ipv4Address::Parse(addr);
    if (!a) return absl::InvalidArgumentError("not an IPv4 address");
    if (Mask4(a->ToU32(), len) != a->ToU32()) {
      return absl::InvalidArgumentError("host bits set after the prefix");
    }
    target.address = *a;
    target.prefix_len = static_cast<uint8_t>(len);
  }
  target.kind = Target::Kind::kCidr;
  return absl::OkStatus();
}

bool LooksLikeIpv4(std::string_view s) {
  s = s.substr(0, s.find('/'));
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return c == '.' || absl::ascii_isdigit(static_cast<unsigned char>(c));
  });
}

absl::Status ParseTarget(std::string_view s, Rule& rule) {
  std::string_view port;
  bool has_port = false;
  if (!s.empty() && s.front() == '[') {
    const size_t close = s.find(']');
    if (close == std::string_view::npos) {
      return absl::InvalidArgumentError("'[' without ']'");
    }
    std::string_view rest = s.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') {
        return absl::InvalidArgumentError("']' must be followed by ':PORT'");
      }
      port = rest.substr(1);
      has_port = true;
    }
    if (absl::Status st = ParseCidr(s.substr(1, close - 1), true, rule.target);
        !st.ok()) {
      return st;
    }
  } else if (std::count(s.begin(), s.end(), ':') > 1) {
    // A bare IPv6 address or CIDR; no port without brackets.
    if (absl::Status st = ParseCidr(s, true, rule.target); !st.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(st.message(), " (an IPv6 address with a port needs "
                                     "brackets: [ADDRESS]:PORT)"));
    }
  } else {
    const size_t colon = s.find(':');
    std::string_view host = s.substr(0, colon);
    if (colon != std::string_view::npos) {
      port = s.substr(colon + 1);
      has_port = true;
    }
    if (LooksLikeIpv4(host) || host.find('/') != std::string_view::npos) {
      if (absl::Status st = ParseCidr(host, false, rule.target); !st.ok()) {
        return st;
      }
    } else {
      std::string name = CanonicalName(host);
      Target::Kind kind = Target::Kind::kName;
      if (absl::StartsWith(name, "*.")) {
        name.erase(0, 2);
        kind = Target::Kind::kWildcard;
        if (name.empty()) {
          return absl::InvalidArgumentError("'*.' needs a name after it");
        }
      }
      if (absl::Status st = CheckName(name); !st.ok()) return st;
      rule.target.kind = kind;
      rule.target.name = std::move(name);
    }
  }
  if (has_port) {
    if (rule.protocols == kIcmp) {
      return absl::InvalidArgumentError("an icmp: rule takes no port");
    }
    if (absl::Status st = ParsePorts(port, rule); !st.ok()) return st;
    // ICMP has no port: a rule with one is for TCP and UDP.
    rule.protocols &= kTcp | kUdp;
  }
  return absl::OkStatus();
}

// The problem with a rule made by hand (not by ParseRule), if any.
absl::Status CheckRule(const Rule& r) {
  if (r.protocols == 0 || (r.protocols & ~kAnyProtocol) != 0) {
    return absl::InvalidArgumentError("no protocol");
  }
  if (r.port_lo > r.port_hi) {
    return absl::InvalidArgumentError("port range is backwards");
  }
  if (r.port_hi == 0 && (r.protocols & kIcmp) == 0) {
    return absl::InvalidArgumentError("port 0 matches no flow");
  }
  if (r.protocols == kIcmp && r.port_lo != 0) {
    return absl::InvalidArgumentError("an icmp: rule takes no port");
  }
  switch (r.target.kind) {
    case Target::Kind::kName:
    case Target::Kind::kWildcard:
      if (r.target.name != CanonicalName(r.target.name) ||
          (!r.target.name.empty() && r.target.name.back() == '.')) {
        return absl::InvalidArgumentError("name not in lower case");
      }
      return CheckName(r.target.name);
    case Target::Kind::kCidr: {
      const IpAddress& a = r.target.address;
      const int len = r.target.prefix_len;
      if (a.is_v4()) {
        if (len > 32 || Mask4(a.v4().ToU32(), len) != a.v4().ToU32()) {
          return absl::InvalidArgumentError("bad IPv4 network");
        }
      } else if (len > 128 || !(Mask6(KeyOf(a.v6()), len) == KeyOf(a.v6()))) {
        return absl::InvalidArgumentError("bad IPv6 network");
      }
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError("bad target kind");
}

bool Covers(const Rule& r, Protocol protocol, uint16_t port) {
  return (r.protocols & protocol) != 0 && port >= r.port_lo &&
         port <= r.port_hi;
}

}  // namespace

// ---- ReasonName ----

std::string_view ReasonName(Reason r) {
  switch (r) {
#define NETSTACK_POLICY_NAME(e, name, allow) \
  case Reason::e:                            \
    return name;
    NETSTACK_POLICY_REASONS(NETSTACK_POLICY_NAME)
#undef NETSTACK_POLICY_NAME
  }
  return "unknown";
}

// ---- ParseRule, ParsePolicyFile ----

absl::StatusOr<Rule> ParseRule(std::string_view text, bool allow) {
  text = S(absl::StripAsciiWhitespace(A(text)));
  if (text.empty()) return absl::InvalidArgumentError("empty rule");
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f) {
      return absl::InvalidArgumentError(
          "a rule is one word of printable ASCII");
    }
  }
  Rule rule;
  rule.allow = allow;
  rule.text = absl::StrCat(allow ? "allow " : "deny ", A(text));
  std::string_view s = text;
  static constexpr std::pair<std::string_view, Protocol> kProtocols[] = {
      {"tcp:", kTcp}, {"udp:", kUdp}, {"icmp:", kIcmp}};
  for (const auto& [prefix, proto] : kProtocols) {
    if (s.size() >= prefix.size() &&
        absl::EqualsIgnoreCase(A(s.substr(0, prefix.size())), A(prefix))) {
      rule.protocols = proto;
      s.remove_prefix(prefix.size());
      break;
    }
  }
  if (s.empty()) return absl::InvalidArgumentError("no target");
  if (absl::Status st = ParseTarget(s, rule); !st.ok()) return st;
  return rule;
}

absl::StatusOr<PolicyConfig> ParsePolicyFile(std::string_view contents) {
  PolicyConfig config;
  int line_no = 0;
  while (!contents.empty()) {
    ++line_no;
    const size_t nl = contents.find('\n');
    std::string_view line = contents.substr(0, nl);
    contents.remove_prefix(nl == std::string_view::npos ? contents.size()
                                                        : nl + 1);
    line = line.substr(0, line.find('#'));
    line = S(absl::StripAsciiWhitespace(A(line)));
    if (line.empty()) continue;
    auto error = [line_no](std::string_view what) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line_no, ": ", A(what)));
    };
    size_t space = 0;
    while (space < line.size() &&
           !absl::ascii_isspace(static_cast<unsigned char>(line[space]))) {
      ++space;
    }
    const std::string_view verb = line.substr(0, space);
    const std::string_view arg =
        S(absl::StripLeadingAsciiWhitespace(A(line.substr(space))));
    if (verb == "egress") {
      if (arg != "none") return error("the only egress line is 'egress none'");
      config.egress_none = true;
    } else if (verb == "allow" || verb == "deny") {
      if (arg.empty()) return error(absl::StrCat("'", A(verb), "' needs a rule"));
      absl::StatusOr<Rule> rule = ParseRule(arg, verb == "allow");
      if (!rule.ok()) {
        return error(S(absl::StrCat(rule.status().message(), ": ", A(arg))));
      }
      config.rules.push_back(*std::move(rule));
    } else {
      return error("expected 'allow RULE', 'deny RULE' or 'egress none'");
    }
  }
  return config;
}

// ---- PinTable ----

PinTable::PinTable(size_t max_entries) : max_entries_(max_entries) {}

void PinTable::Erase(const IpAddress& address) {
  auto it = pins_.find(address);
  if (it == pins_.end()) return;
  expiry_order_.erase(ExpiryKey{it->second.expiry, it->second.seq});
  pins_.erase(it);
}

void PinTable::Pin(const IpAddress& address, std::string_view name,
                   absl::Duration ttl, Instant now) {
  const Instant expiry = now + std::max(ttl, absl::ZeroDuration()) + kPinGrace;
  auto it = pins_.find(address);
  if (it != pins_.end()) {
    Pin_& pin = it->second;
    // In place: a re-pin (every answer for a name asked again) reuses the
    // string's storage.
    if (!name.empty() && name.back() == '.') name.remove_suffix(1);
    pin.name.assign(name.data(), name.size());
    absl::AsciiStrToLower(&pin.name);
    if (expiry > pin.expiry) {
      expiry_order_.erase(ExpiryKey{pin.expiry, pin.seq});
      pin.expiry = expiry;
      pin.seq = next_seq_++;
      expiry_order_.emplace(ExpiryKey{pin.expiry, pin.seq}, address);
    }
    return;
  }
  if (pins_.size() >= max_entries_) Expire(now);
  while (!pins_.empty() && pins_.size() >= max_entries_) {
    // Copy: Erase drops the map entry the reference points into.
    const IpAddress first = expiry_order_.begin()->second;
    Erase(first);
    ++evicted_;
  }
  if (max_entries_ == 0) {
    ++evicted_;
    return;
  }
  const uint64_t seq = next_seq_++;
  pins_.emplace(address, Pin_{CanonicalName(name), expiry, seq});
  expiry_order_.emplace(ExpiryKey{expiry, seq}, address);
}

std::optional<std::string_view> PinTable::Find(const IpAddress& address,
                                               Instant now) const {
  auto it = pins_.find(address);
  if (it == pins_.end() || now >= it->second.expiry) return std::nullopt;
  return std::string_view(it->second.name);
}

void PinTable::Expire(Instant now) {
  while (!expiry_order_.empty() && expiry_order_.begin()->first.first <= now) {
    const IpAddress first = expiry_order_.begin()->second;
    Erase(first);
  }
}

void PinTable::Clear() {
  pins_.clear();
  expiry_order_.clear();
}

size_t PinTable::size() const { return pins_.size(); }

// ---- Policy ----

// One verdict's rules by target, each list in rule order:
//   - exact names in a hash map;
//   - wildcard suffixes in a hash map, looked up once per label of the
//     name asked about;
//   - networks grouped by prefix length, one hash map per length present
//     (at most 33 + 129 lookups, in practice a handful).
// So Decide costs a few hash lookups per flow, not one compare per rule.
struct Policy::Index {
  using Rules = std::vector<int>;
  absl::flat_hash_map<std::string, Rules> exact;
  absl::flat_hash_map<std::string, Rules> wildcard;
  std::vector<int> v4_lengths;  // present, longest first
  std::array<absl::flat_hash_map<uint32_t, Rules>, 33> v4;
  std::vector<int> v6_lengths;
  std::array<absl::flat_hash_map<V6Key, Rules>, 129> v6;
  bool empty = true;  // no rule at all

  void Add(const Rule& r, int index) {
    empty = false;
    switch (r.target.kind) {
      case Target::Kind::kName:
        exact[r.target.name].push_back(index);
        break;
      case Target::Kind::kWildcard:
        wildcard[r.target.name].push_back(index);
        break;
      case Target::Kind::kCidr: {
        const int len = r.target.prefix_len;
        if (r.target.address.is_v4()) {
          v4[len][r.target.address.v4().ToU32()].push_back(index);
        } else {
          v6[len][KeyOf(r.target.address.v6())].push_back(index);
        }
        break;
      }
    }
  }
  void Finish() {
    for (int len = 32; len >= 0; --len) {
      if (!v4[len].empty()) v4_lengths.push_back(len);
    }
    for (int len = 128; len >= 0; --len) {
      if (!v6[len].empty()) v6_lengths.push_back(len);
    }
  }

  // The first rule (lowest index) of `list` that covers protocol/port and
  // passes `pred`, if it comes before `best`.
  template <typename Pred>
  static void FirstOf(const std::vector<Rule>& rules, const Rules& list,
                      Pred pred, int& best) {
    for (int i : list) {
      if (best >= 0 && i >= best) return;
      if (pred(rules[i])) {
        best = i;
        return;
      }
    }
  }

  // The first network rule containing `judged` that `pred` accepts, or -1.
  template <typename Pred>
  int MatchAddress(const std::vector<Rule>& rules, const IpAddress& judged,
                   Pred pred) const {
    int best = -1;
    if (judged.is_v4()) {
      const uint32_t a = judged.v4().ToU32();
      for (int len : v4_lengths) {
        auto it = v4[len].find(Mask4(a, len));
        if (it != v4[len].end()) FirstOf(rules, it->second, pred, best);
      }
    } else {
      const V6Key k = KeyOf(judged.v6());
      for (int len : v6_lengths) {
        auto it = v6[len].find(Mask6(k, len));
        if (it != v6[len].end()) FirstOf(rules, it->second, pred, best);
      }
    }
    return best;
  }

  // The first name rule matching canonical `name` that `pred` accepts:
  // the exact name, or a wildcard for any proper suffix at a dot.
  template <typename Pred>
  int MatchName(const std::vector<Rule>& rules, std::string_view name,
                Pred pred) const {
    int best = -1;
    if (name.empty()) return best;
    if (!exact.empty()) {
      auto it = exact.find(A(name));
      if (it != exact.end()) FirstOf(rules, it->second, pred, best);
    }
    if (!wildcard.empty()) {
      for (size_t dot = name.find('.'); dot != std::string_view::npos;
           dot = name.find('.', dot + 1)) {
        auto it = wildcard.find(A(name.substr(dot + 1)));
        if (it != wildcard.end()) FirstOf(rules, it->second, pred, best);
      }
    }
    return best;
  }
};

Policy::Policy(PolicyConfig config) : config_(std::move(config)) {
  auto allow = std::make_unique<Index>();
  auto deny = std::make_unique<Index>();
  for (size_t i = 0; i < config_.rules.size(); ++i) {
    const Rule& r = config_.rules[i];
    (r.allow ? *allow : *deny).Add(r, static_cast<int>(i));
    if (r.allow) allowlist_ = true;
  }
  allow->Finish();
  deny->Finish();
  allow_ = std::move(allow);
  deny_ = std::move(deny);
}

Policy::~Policy() = default;

absl::StatusOr<std::shared_ptr<const Policy>> Policy::Create(
    PolicyConfig config) {
  if (config.rules.size() > kMaxRules) {
    return absl::InvalidArgumentError(
        absl::StrCat(config.rules.size(), " rules; at most ", kMaxRules));
  }
  for (size_t i = 0; i < config.rules.size(); ++i) {
    if (absl::Status st = CheckRule(config.rules[i]); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rule ", i, " (", config.rules[i].text, "): ", st.message()));
    }
  }
  return std::shared_ptr<const Policy>(new Policy(std::move(config)));
}

std::shared_ptr<const Policy> Policy::Open() {
  static const std::shared_ptr<const Policy> open(new Policy(PolicyConfig()));
  return open;
}

bool Policy::IsSpecial(const IpAddress& address) {
  const IpAddress judged = Judged(address);
  return judged.is_v4() ? SpecialV4(judged.v4().ToU32())
                        : SpecialV6(judged.v6());
}

bool Policy::ExplicitlyAllowed(const IpAddress& address,
                               Protocol protocol) const {
  return allow_->MatchAddress(config_.rules, Judged(address),
                              [protocol](const Rule& r) {
                                return (r.protocols & protocol) != 0;
                              }) >= 0;
}

Verdict Policy::Decide(Protocol protocol, const IpAddress& dst, uint16_t port,
                       const PinTable* pins, Instant now) const {
  if (config_.egress_none) return {false, Reason::kEgressNone, -1, {}};
  const std::vector<Rule>& rules = config_.rules;
  const IpAddress judged = Judged(dst);
  auto covers = [protocol, port](const Rule& r) {
    return Covers(r, protocol, port);
  };
  // The allow network rule, looked up once: the metadata and special
  // checks and the allowlist all use it.
  const int allow_cidr = allowlist_
                             ? allow_->MatchAddress(rules, judged, covers)
                             : -1;
  if (IsMetadata(judged) && allow_cidr < 0) {
    return {false, Reason::kMetadata, -1, {}};
  }
  if (!deny_->empty) {
    const int d = deny_->MatchAddress(rules, judged, covers);
    if (d >= 0) return {false, Reason::kDenyRule, d, {}};
  }
  std::optional<std::string_view> name;
  if (pins != nullptr) name = pins->Find(dst, now);
  if (name && !deny_->empty) {
    const int d = deny_->MatchName(rules, *name, covers);
    if (d >= 0) return {false, Reason::kDenyRule, d, std::string(*name)};
  }
  if (!allowlist_) return {true, Reason::kOpen, -1, {}};
  if (allow_cidr >= 0) return {true, Reason::kAllowRule, allow_cidr, {}};
  if (IsSpecial(judged)) return {false, Reason::kSpecialAddress, -1, {}};
  if (name) {
    const int a = allow_->MatchName(rules, *name, covers);
    if (a >= 0) return {true, Reason::kPinnedName, a, std::string(*name)};
  }
  return {false, Reason::kNotAllowed, -1, {}};
}

Policy::NameVerdict Policy::DecideName(std::string_view name,
                                       int* rule) const {
  if (rule != nullptr) *rule = -1;
  if (config_.egress_none) return NameVerdict::kDeny;
  // Lower case in a buffer on the stack: this runs for every DNS query.
  // Only the last 254 bytes can match: no rule's name is longer than 253
  // bytes, so an exact rule needs no more, and a wildcard's suffix starts
  // after a dot among them.
  if (!name.empty() && name.back() == '.') name.remove_suffix(1);
  if (name.size() > kMaxName + 1) {
    name.remove_prefix(name.size() - (kMaxName + 1));
  }
  char buffer[kMaxName + 1];
  for (size_t i = 0; i < name.size(); ++i) {
    buffer[i] = absl::ascii_tolower(static_cast<unsigned char>(name[i]));
  }
  const std::string_view canonical(buffer, name.size());
  const std::vector<Rule>& rules = config_.rules;
  // A deny for some ports or protocols only leaves the name to the others.
  const int d = deny_->MatchName(rules, canonical, [](const Rule& r) {
    return r.protocols == kAnyProtocol && r.port_lo == 0 &&
           r.port_hi == 65535;
  });
  if (d >= 0) {
    if (rule != nullptr) *rule = d;
    return NameVerdict::kDeny;
  }
  const int a = allow_->MatchName(rules, canonical,
                                  [](const Rule&) { return true; });
  if (a >= 0) {
    if (rule != nullptr) *rule = a;
    return NameVerdict::kAllow;
  }
  return NameVerdict::kUnlisted;
}

std::string Policy::Describe() const {
  std::string out;
  if (config_.egress_none) {
    out = "egress policy: none (no outbound flow, DNS included)";
  } else if (allowlist_) {
    absl::StrAppend(&out, "egress policy: allowlist, ", config_.rules.size(),
                    " rules; private, loopback, link-local and multicast "
                    "addresses only by an address rule");
  } else {
    absl::StrAppend(&out, "egress policy: open, ", config_.rules.size(),
                    " deny rules");
  }
  absl::StrAppend(&out,
                  "\n  metadata 169.254.169.254 and fd00:ec2::254 denied "
                  "unless an allow rule names them\n");
  for (size_t i = 0; i < config_.rules.size(); ++i) {
    absl::StrAppend(&out, "  ", i, ": ", config_.rules[i].text, "\n");
  }
  return out;
}

}  // namespace netstack::policy
