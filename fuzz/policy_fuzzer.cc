// The egress policy's parser and decision (netstack/policy/policy.h): a
// policy file and rules as the fuzzer writes them, then Decide on
// addresses made from the input. An input is:
//   a record (16-bit length, bytes): a policy file for ParsePolicyFile;
//   a count byte, then that many (mod 16) rules: a flags byte (bit 0:
//     allow) and a record, for ParseRule;
//   a count byte, then that many (mod 16) pins: an address, a record (the
//     name), a 16-bit TTL in seconds;
//   to the end: flows, each an address, a protocol byte, a 16-bit port and
//     a byte of seconds after the pins.
// An address is a form byte and its bytes: IPv4 (4), IPv6 (16), the three
// IPv4-embedding IPv6 forms (mapped, compatible, NAT64; 4), or one of a
// table of addresses the policy treats apart (metadata, loopback, ...).
//
// Checked:
//   - a rule ParseRule accepts is well formed (a protocol, lo <= hi, an
//     icmp: rule without a port, a lower-case name of 1..253 bytes without
//     a trailing dot, a network without host bits), its text is the verb
//     and what was parsed, and parsing that text again gives the same rule;
//   - Policy::Create accepts every config the parsers produce;
//   - Decide agrees with a linear reference over the rules (verdict,
//     reason, deciding rule, name), for both policies, with and without
//     the pins; the reason's allow flag is the verdict's;
//   - an embedded IPv6 form gets the verdict of its IPv4 address;
//   - DecideName's rule is one of the rules, of the verdict's kind;
//   - the pin table stays within its bound.
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fuzz/fuzz_check.h"
#include "netstack/base/time.h"
#include "netstack/policy/policy.h"
#include "netstack/transport/address.h"
#include "netstack/wire/address.h"

namespace netstack::policy {
namespace {

using fuzz::FuzzInput;
using transport::IpAddress;

constexpr size_t kMaxPins = 8;
const Instant kT0 = absl::FromUnixSeconds(1'700'000'000);

std::string_view AsText(std::span<const uint8_t> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

IpAddress V6From(const uint8_t* prefix12, const uint8_t* v4) {
  wire::Ipv6Address a;
  std::memcpy(a.bytes.data(), prefix12, 12);
  std::memcpy(a.bytes.data() + 12, v4, 4);
  return a;
}

const uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
const uint8_t kCompat[12] = {};
const uint8_t kNat64[12] = {0, 0x64, 0xff, 0x9b};

const char* const kSpecial[] = {
    "169.254.169.254", "fd00:ec2::254", "127.0.0.1",   "::1",
    "::",              "0.0.0.0",       "10.0.0.1",    "255.255.255.255",
    "224.0.0.1",       "ff02::1",       "fe80::1",     "192.168.1.1",
    "100.64.0.1",      "172.16.0.1",    "192.0.2.1",   "2001:db8::1",
    "::2",             "::ffff:0.0.0.0", "64:ff9b::",  "198.51.100.7",
};

IpAddress ReadAddress(FuzzInput& in) {
  uint8_t b[16] = {};
  switch (in.U8() % 6) {
    case 0: {
      for (int i = 0; i < 4; ++i) b[i] = in.U8();
      return wire::Ipv4Address::FromBytes(b);
    }
    case 1: {
      for (int i = 0; i < 16; ++i) b[i] = in.U8();
      wire::Ipv6Address a;
      std::memcpy(a.bytes.data(), b, 16);
      return a;
    }
    case 2:
    case 3:
    case 4: {
      const int form = in.U8() % 3;
      for (int i = 0; i < 4; ++i) b[i] = in.U8();
      return V6From(form == 0 ? kMapped : form == 1 ? kCompat : kNat64, b);
    }
    default:
      return *IpAddress::Parse(
          kSpecial[in.U8() % (sizeof(kSpecial) / sizeof(kSpecial[0]))]);
  }
}

// The IPv4 address an embedding IPv6 address stands for, written apart
// from policy.cc's.
std::optional<IpAddress> Embedded(const IpAddress& a) {
  if (!a.is_v6()) return std::nullopt;
  const uint8_t* p = a.v6().bytes.data();
  const bool low96_zero = std::memcmp(p, kCompat, 10) == 0;
  const bool mapped = low96_zero && p[10] == 0xff && p[11] == 0xff;
  bool compat = std::memcmp(p, kCompat, 12) == 0;
  if (compat) {
    uint32_t v = (uint32_t{p[12]} << 24) | (p[13] << 16) | (p[14] << 8) | p[15];
    compat = v > 1;
  }
  const bool nat64 = std::memcmp(p, kNat64, 12) == 0;
  if (!mapped && !compat && !nat64) return std::nullopt;
  return IpAddress(wire::Ipv4Address::FromBytes(p + 12));
}

IpAddress Judged(const IpAddress& a) { return Embedded(a).value_or(a); }

bool Contains(const Target& t, const IpAddress& a) {
  if (t.kind != Target::Kind::kCidr || t.address.is_v4() != a.is_v4()) {
    return false;
  }
  const uint8_t* x = a.is_v4() ? a.v4().bytes.data() : a.v6().bytes.data();
  const uint8_t* y =
      t.address.is_v4() ? t.address.v4().bytes.data() : t.address.v6().bytes.data();
  for (int bit = 0; bit < t.prefix_len; ++bit) {
    const uint8_t m = 0x80 >> (bit % 8);
    if ((x[bit / 8] & m) != (y[bit / 8] & m)) return false;
  }
  return true;
}

bool NameMatches(const Target& t, std::string_view name) {
  if (t.kind == Target::Kind::kName) return name == t.name;
  if (t.kind != Target::Kind::kWildcard) return false;
  return name.size() > t.name.size() + 1 &&
         name.substr(name.size() - t.name.size()) == t.name &&
         name[name.size() - t.name.size() - 1] == '.';
}

bool Covers(const Rule& r, Protocol p, uint16_t port) {
  return (r.protocols & p) != 0 && port >= r.port_lo && port <= r.port_hi;
}

bool IsMetadata(const IpAddress& j) {
  return j == *IpAddress::Parse("169.254.169.254") ||
         j == *IpAddress::Parse("fd00:ec2::254");
}

// Decide's order, one rule at a time.
Verdict Reference(const Policy& policy, Protocol p, const IpAddress& dst,
                  uint16_t port, const PinTable* pins, Instant now) {
  if (policy.egress_none()) return {false, Reason::kEgressNone, -1, {}};
  const std::vector<Rule>& rules = policy.rules();
  const IpAddress j = Judged(dst);
  auto first = [&](bool allow, auto pred) {
    for (size_t i = 0; i < rules.size(); ++i) {
      if (rules[i].allow == allow && Covers(rules[i], p, port) &&
          pred(rules[i])) {
        return static_cast<int>(i);
      }
    }
    return -1;
  };
  auto by_address = [&](const Rule& r) { return Contains(r.target, j); };
  const int allow_cidr = first(true, by_address);
  if (IsMetadata(j) && allow_cidr < 0) return {false, Reason::kMetadata, -1, {}};
  if (int d = first(false, by_address); d >= 0) {
    return {false, Reason::kDenyRule, d, {}};
  }
  std::optional<std::string_view> name;
  if (pins != nullptr) name = pins->Find(dst, now);
  auto by_name = [&](const Rule& r) { return NameMatches(r.target, *name); };
  if (name) {
    if (int d = first(false, by_name); d >= 0) {
      return {false, Reason::kDenyRule, d, std::string(*name)};
    }
  }
  if (!policy.allowlist()) return {true, Reason::kOpen, -1, {}};
  if (allow_cidr >= 0) return {true, Reason::kAllowRule, allow_cidr, {}};
  if (Policy::IsSpecial(j)) return {false, Reason::kSpecialAddress, -1, {}};
  if (name) {
    if (int a = first(true, by_name); a >= 0) {
      return {true, Reason::kPinnedName, a, std::string(*name)};
    }
  }
  return {false, Reason::kNotAllowed, -1, {}};
}

bool ReasonAllows(Reason r) {
  switch (r) {
#define NETSTACK_POLICY_ALLOWS(e, name, allow) \
  case Reason::e:                              \
    return allow;
    NETSTACK_POLICY_REASONS(NETSTACK_POLICY_ALLOWS)
#undef NETSTACK_POLICY_ALLOWS
  }
  return false;
}

bool Same(const Verdict& a, const Verdict& b) {
  return a.allow == b.allow && a.reason == b.reason && a.rule == b.rule &&
         a.name == b.name;
}

void CheckRule(const Rule& r) {
  FUZZ_CHECK(r.protocols != 0 && (r.protocols & ~kAnyProtocol) == 0);
  FUZZ_CHECK(r.port_lo <= r.port_hi);
  if (r.protocols & kIcmp) FUZZ_CHECK(r.port_lo == 0 && r.port_hi == 65535);
  std::string_view verb = r.allow ? "allow " : "deny ";
  FUZZ_CHECK(std::string_view(r.text).substr(0, verb.size()) == verb);
  if (r.target.kind == Target::Kind::kCidr) {
    FUZZ_CHECK(r.target.prefix_len <= (r.target.address.is_v4() ? 32 : 128));
    FUZZ_CHECK(Contains(r.target, r.target.address));
    // No host bits: the network is the only address of itself with them
    // all zero, so the address with the next bit flipped (if any) is out.
  } else {
    const std::string& n = r.target.name;
    FUZZ_CHECK(!n.empty() && n.size() <= 253 && n.back() != '.');
    for (char c : n) FUZZ_CHECK(!(c >= 'A' && c <= 'Z'));
  }
  // The text parses again to the same rule.
  absl::StatusOr<Rule> again =
      ParseRule(std::string_view(r.text).substr(verb.size()), r.allow);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again->protocols == r.protocols && again->port_lo == r.port_lo &&
             again->port_hi == r.port_hi &&
             again->target.kind == r.target.kind &&
             again->target.name == r.target.name &&
             again->target.address == r.target.address &&
             again->target.prefix_len == r.target.prefix_len &&
             again->text == r.text);
}

std::shared_ptr<const Policy> MustCreate(PolicyConfig config) {
  for (const Rule& r : config.rules) CheckRule(r);
  absl::StatusOr<std::shared_ptr<const Policy>> p =
      Policy::Create(std::move(config));
  FUZZ_CHECK(p.ok());
  FUZZ_CHECK(!(*p)->Describe().empty());
  return *p;
}

void CheckDecide(const Policy& policy, Protocol proto, const IpAddress& dst,
                 uint16_t port, const PinTable& pins, Instant now) {
  for (const PinTable* t : {static_cast<const PinTable*>(nullptr), &pins}) {
    const Verdict v = policy.Decide(proto, dst, port, t, now);
    FUZZ_CHECK(v.allow == ReasonAllows(v.reason));
    FUZZ_CHECK(!ReasonName(v.reason).empty());
    FUZZ_CHECK(v.rule >= -1 && v.rule < static_cast<int>(policy.rules().size()));
    if (v.rule >= 0) FUZZ_CHECK(policy.rules()[v.rule].allow == v.allow);
    FUZZ_CHECK(Same(v, Reference(policy, proto, dst, port, t, now)));
    if (v.allow && policy.allowlist() && Policy::IsSpecial(dst)) {
      FUZZ_CHECK(v.reason == Reason::kAllowRule);
      FUZZ_CHECK(policy.ExplicitlyAllowed(dst, proto));
    }
  }
  // The embedded forms are judged as their IPv4 address (no pins: a pin
  // is for the address the guest was answered with, as it was).
  if (std::optional<IpAddress> v4 = Embedded(dst)) {
    FUZZ_CHECK(Same(policy.Decide(proto, dst, port, nullptr, now),
                    policy.Decide(proto, *v4, port, nullptr, now)));
    FUZZ_CHECK(Policy::IsSpecial(dst) == Policy::IsSpecial(*v4));
  }
}

void CheckName(const Policy& policy, std::string_view name) {
  int rule = -2;
  const Policy::NameVerdict v = policy.DecideName(name, &rule);
  if (v == Policy::NameVerdict::kUnlisted) {
    FUZZ_CHECK(rule == -1);
    return;
  }
  if (policy.egress_none() && v == Policy::NameVerdict::kDeny) return;
  FUZZ_CHECK(rule >= 0 && rule < static_cast<int>(policy.rules().size()));
  FUZZ_CHECK(policy.rules()[rule].allow == (v == Policy::NameVerdict::kAllow));
}

}  // namespace
}  // namespace netstack::policy

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace netstack::policy;
  netstack::fuzz::FuzzInput in(data, size);

  std::vector<std::shared_ptr<const Policy>> policies;
  absl::StatusOr<PolicyConfig> file = ParsePolicyFile(AsText(in.Record()));
  if (file.ok()) policies.push_back(MustCreate(*std::move(file)));

  PolicyConfig config;
  for (int n = in.U8() % 16; n > 0; --n) {
    const bool allow = in.Bool();
    absl::StatusOr<Rule> rule = ParseRule(AsText(in.Record()), allow);
    if (rule.ok()) config.rules.push_back(*std::move(rule));
  }
  policies.push_back(MustCreate(config));
  policies.push_back(Policy::Open());

  PinTable pins(kMaxPins);
  std::vector<std::string> names;
  for (int n = in.U8() % 16; n > 0; --n) {
    const IpAddress a = ReadAddress(in);
    names.emplace_back(AsText(in.Record()));
    pins.Pin(a, names.back(), absl::Seconds(in.U16()), kT0);
    FUZZ_CHECK(pins.size() <= kMaxPins);
    FUZZ_CHECK(pins.Find(a, kT0).has_value());
  }
  for (const auto& p : policies) {
    for (const std::string& name : names) CheckName(*p, name);
  }
  while (!in.done()) {
    const IpAddress dst = ReadAddress(in);
    const uint8_t pb = in.U8() % 3;
    const Protocol proto = pb == 0 ? kTcp : pb == 1 ? kUdp : kIcmp;
    const uint16_t port = proto == kIcmp ? 0 : in.U16();
    const netstack::Instant now = kT0 + absl::Seconds(in.U8()) * 4;
    for (const auto& p : policies) CheckDecide(*p, proto, dst, port, pins, now);
  }
  pins.Expire(kT0 + absl::Hours(100));
  FUZZ_CHECK(pins.size() == 0);
  return 0;
}
