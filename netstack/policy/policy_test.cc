#include "netstack/policy/policy.h"

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "netstack/transport/address.h"

// Every operator new in this test binary is counted, so a test can say
// that a call allocates nothing (AllocationTest). The default operator
// new[] and the containers' allocations come through this one; the
// aligned forms are left to the library.
namespace {
std::atomic<uint64_t> g_allocations{0};
}  // namespace

void* operator new(size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) std::abort();  // built without exceptions
  return p;
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace netstack::policy {
namespace {

using ::testing::HasSubstr;
using transport::IpAddress;

IpAddress Ip(std::string_view text) {
  std::optional<IpAddress> a = IpAddress::Parse(text);
  EXPECT_TRUE(a.has_value()) << text;
  return a.value_or(IpAddress());
}

const Instant kT0 = absl::FromUnixSeconds(1'000'000);

Rule MustParse(std::string_view text, bool allow = true) {
  absl::StatusOr<Rule> r = ParseRule(text, allow);
  EXPECT_TRUE(r.ok()) << text << ": " << r.status();
  return r.ok() ? *r : Rule();
}

std::shared_ptr<const Policy> MakePolicy(std::string_view file) {
  absl::StatusOr<PolicyConfig> config = ParsePolicyFile(file);
  EXPECT_TRUE(config.ok()) << config.status();
  if (!config.ok()) return nullptr;
  absl::StatusOr<std::shared_ptr<const Policy>> p =
      Policy::Create(*std::move(config));
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *p : nullptr;
}

// ---- ParseRule: every form ----

TEST(ParseRuleTest, ExactName) {
  Rule r = MustParse("Example.COM.");
  EXPECT_TRUE(r.allow);
  EXPECT_EQ(r.target.kind, Target::Kind::kName);
  EXPECT_EQ(r.target.name, "example.com");
  EXPECT_EQ(r.protocols, kAnyProtocol);
  EXPECT_EQ(r.port_lo, 0);
  EXPECT_EQ(r.port_hi, 65535);
  EXPECT_EQ(r.text, "allow Example.COM.");
}

TEST(ParseRuleTest, Wildcard) {
  Rule r = MustParse("*.Example.com", /*allow=*/false);
  EXPECT_FALSE(r.allow);
  EXPECT_EQ(r.target.kind, Target::Kind::kWildcard);
  EXPECT_EQ(r.target.name, "example.com");
  EXPECT_EQ(r.text, "deny *.Example.com");
}

TEST(ParseRuleTest, Ipv4AddressAndCidr) {
  Rule r = MustParse("192.0.2.7");
  EXPECT_EQ(r.target.kind, Target::Kind::kCidr);
  EXPECT_EQ(r.target.address, Ip("192.0.2.7"));
  EXPECT_EQ(r.target.prefix_len, 32);
  r = MustParse("192.0.2.0/24");
  EXPECT_EQ(r.target.address, Ip("192.0.2.0"));
  EXPECT_EQ(r.target.prefix_len, 24);
  r = MustParse("0.0.0.0/0");
  EXPECT_EQ(r.target.prefix_len, 0);
}

TEST(ParseRuleTest, Ipv6InBracketsWithAndWithoutPort) {
  Rule r = MustParse("[2001:db8::/32]:443");
  EXPECT_EQ(r.target.kind, Target::Kind::kCidr);
  EXPECT_EQ(r.target.address, Ip("2001:db8::"));
  EXPECT_EQ(r.target.prefix_len, 32);
  EXPECT_EQ(r.port_lo, 443);
  EXPECT_EQ(r.port_hi, 443);
  r = MustParse("[2001:db8::1]");
  EXPECT_EQ(r.target.address, Ip("2001:db8::1"));
  EXPECT_EQ(r.target.prefix_len, 128);
  EXPECT_EQ(r.port_lo, 0);
  EXPECT_EQ(r.port_hi, 65535);
  // Without brackets and without a port, too.
  r = MustParse("2001:db8::/48");
  EXPECT_EQ(r.target.address, Ip("2001:db8::"));
  EXPECT_EQ(r.target.prefix_len, 48);
}

TEST(ParseRuleTest, EmbeddedIpv4CidrIsStoredAsIpv4) {
  // Such addresses are judged as their IPv4 address, so a rule written in
  // that form becomes the IPv4 rule it means.
  Rule r = MustParse("[::ffff:192.0.2.0/120]");
  EXPECT_EQ(r.target.address, Ip("192.0.2.0"));
  EXPECT_EQ(r.target.prefix_len, 24);
  r = MustParse("[64:ff9b::c000:201]");
  EXPECT_EQ(r.target.address, Ip("192.0.2.1"));
  EXPECT_EQ(r.target.prefix_len, 32);
  // ::1 is IPv6 loopback, not a compatible address.
  r = MustParse("[::1]");
  EXPECT_EQ(r.target.address, Ip("::1"));
}

TEST(ParseRuleTest, ProtocolsAndPorts) {
  Rule r = MustParse("tcp:example.com:443");
  EXPECT_EQ(r.protocols, kTcp);
  EXPECT_EQ(r.port_lo, 443);
  EXPECT_EQ(r.port_hi, 443);
  r = MustParse("UDP:192.0.2.0/24:5000-5999");
  EXPECT_EQ(r.protocols, kUdp);
  EXPECT_EQ(r.port_lo, 5000);
  EXPECT_EQ(r.port_hi, 5999);
  r = MustParse("icmp:192.0.2.1");
  EXPECT_EQ(r.protocols, kIcmp);
  // A port without a protocol: TCP and UDP (ICMP has no port).
  r = MustParse("example.com:53");
  EXPECT_EQ(r.protocols, kTcp | kUdp);
  r = MustParse("tcp:[2001:db8::1]:1-65535");
  EXPECT_EQ(r.port_lo, 1);
  EXPECT_EQ(r.port_hi, 65535);
  r = MustParse("*.example.com:8080");
  EXPECT_EQ(r.target.kind, Target::Kind::kWildcard);
  EXPECT_EQ(r.port_lo, 8080);
}

TEST(ParseRuleTest, Errors) {
  const char* bad[] = {
      "",
      "   ",
      "icmp:192.0.2.1:7",       // icmp takes no port
      "icmp:example.com:1-2",
      "192.0.2.7/24",           // host bits set
      "[2001:db8::1/32]",       // host bits set
      "192.0.2.0/33",
      "[2001:db8::/129]",
      "192.0.2.0/",
      "192.0.2.0/x",
      "192.0.2.256",            // not an address, and not a name
      "1.2.3",
      "example.com:0",          // port 0 matches no flow
      "example.com:70000",
      "example.com:",
      "example.com:9-8",
      "example.com:x",
      "example.com:1-",
      "[2001:db8::1",
      "[2001:db8::1]443",
      "[example.com]:443",
      "[192.0.2.1]",
      "2001:db8::1:443:x",
      "sctp:example.com",
      "tcp:",
      "*",
      "*.",
      "*.*.example.com",
      "a.*.example.com",
      "exa mple.com",
      "exa$mple.com",
      "-bad.example.com",
      ".example.com",
      "example..com",
      "example.com..",
      "192.0.2.1/24/8",
      "tcp:udp:example.com",
  };
  for (const char* text : bad) {
    absl::StatusOr<Rule> r = ParseRule(text, true);
    EXPECT_FALSE(r.ok()) << "'" << text << "' parsed";
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument)
          << text;
      EXPECT_FALSE(r.status().message().empty()) << text;
    }
  }
  // Length limits: a label of 64 bytes, a name of 254.
  std::string label64(64, 'a');
  EXPECT_FALSE(ParseRule(label64 + ".com", true).ok());
  EXPECT_TRUE(ParseRule(std::string(63, 'a') + ".com", true).ok());
  std::string name;
  while (name.size() < 250) name += "abcdefghi.";
  name += "xyz";  // 253 bytes
  ASSERT_EQ(name.size(), 253u);
  EXPECT_TRUE(ParseRule(name, true).ok());
  EXPECT_TRUE(ParseRule(name + ".", true).ok());  // trailing dot
  EXPECT_FALSE(ParseRule(name + "x", true).ok());
}

TEST(ParseRuleTest, ErrorsSayWhat) {
  EXPECT_THAT(ParseRule("icmp:192.0.2.1:7", true).status().message(),
              HasSubstr("port"));
  EXPECT_THAT(ParseRule("192.0.2.7/24", true).status().message(),
              HasSubstr("host bits"));
}

// ---- ParsePolicyFile ----

TEST(ParsePolicyFileTest, RulesCommentsAndEgressNone) {
  absl::StatusOr<PolicyConfig> c = ParsePolicyFile(
      "# a comment\n"
      "\n"
      "allow tcp:example.com:443   # trailing comment\r\n"
      "  deny 192.0.2.0/24\n"
      "\tallow *.example.org\n");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->rules.size(), 3u);
  EXPECT_FALSE(c->egress_none);
  EXPECT_TRUE(c->rules[0].allow);
  EXPECT_EQ(c->rules[0].text, "allow tcp:example.com:443");
  EXPECT_FALSE(c->rules[1].allow);
  EXPECT_EQ(c->rules[1].target.prefix_len, 24);
  EXPECT_EQ(c->rules[2].target.kind, Target::Kind::kWildcard);

  c = ParsePolicyFile("egress none\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->egress_none);
  EXPECT_TRUE(c->rules.empty());

  c = ParsePolicyFile("");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->rules.empty());
}

TEST(ParsePolicyFileTest, ErrorsNameTheLine) {
  struct Case {
    const char* file;
    const char* want;
  } cases[] = {
      {"allow example.com\n# x\npermit example.com\n", "line 3:"},
      {"allow example.com\nallow\n", "line 2:"},
      {"deny icmp:192.0.2.1:5\n", "line 1:"},
      {"\n\nallow 192.0.2.1/8\n", "line 3:"},
      {"egress some\n", "line 1:"},
      {"egress\n", "line 1:"},
      {"allow a.com b.com\n", "line 1:"},
      {"egress none extra\n", "line 1:"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<PolicyConfig> r = ParsePolicyFile(c.file);
    ASSERT_FALSE(r.ok()) << c.file;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr(c.want)) << c.file;
  }
}

// ---- Create ----

TEST(PolicyCreateTest, RefusesRulesThatCannotMatch) {
  PolicyConfig c;
  Rule r = MustParse("tcp:example.com:443");
  r.port_lo = 500;
  r.port_hi = 400;
  c.rules.push_back(r);
  EXPECT_FALSE(Policy::Create(c).ok());

  c.rules.clear();
  r = MustParse("192.0.2.0/24");
  r.target.prefix_len = 40;
  c.rules.push_back(r);
  EXPECT_FALSE(Policy::Create(c).ok());

  c.rules.clear();
  r = MustParse("example.com");
  r.protocols = 0;
  c.rules.push_back(r);
  EXPECT_FALSE(Policy::Create(c).ok());

  c.rules.clear();
  r = MustParse("example.com");
  r.target.name = "";
  c.rules.push_back(r);
  EXPECT_FALSE(Policy::Create(c).ok());

  c.rules.assign(Policy::kMaxRules + 1, MustParse("192.0.2.1"));
  EXPECT_FALSE(Policy::Create(c).ok());
}

// ---- Modes ----

TEST(DecideTest, OpenModeAllowsAllButDenyRulesAndMetadata) {
  std::shared_ptr<const Policy> p = Policy::Open();
  EXPECT_FALSE(p->allowlist());
  EXPECT_FALSE(p->egress_none());
  Verdict v = p->Decide(kTcp, Ip("198.51.100.1"), 80, nullptr, kT0);
  EXPECT_TRUE(v.allow);
  EXPECT_EQ(v.reason, Reason::kOpen);
  EXPECT_EQ(v.rule, -1);
  // Special addresses are not blocked in open mode...
  EXPECT_TRUE(p->Decide(kTcp, Ip("10.0.0.1"), 80, nullptr, kT0).allow);
  EXPECT_TRUE(p->Decide(kUdp, Ip("127.0.0.1"), 53, nullptr, kT0).allow);
  // ...but the metadata addresses are, in every form.
  for (const char* a : {"169.254.169.254", "fd00:ec2::254",
                        "::ffff:169.254.169.254", "64:ff9b::a9fe:a9fe",
                        "::a9fe:a9fe"}) {
    v = p->Decide(kTcp, Ip(a), 80, nullptr, kT0);
    EXPECT_FALSE(v.allow) << a;
    EXPECT_EQ(v.reason, Reason::kMetadata) << a;
  }
  EXPECT_TRUE(p->Decide(kTcp, Ip("169.254.169.253"), 80, nullptr, kT0).allow);

  std::shared_ptr<const Policy> d = MakePolicy("deny 198.51.100.0/24\n");
  ASSERT_NE(d, nullptr);
  EXPECT_FALSE(d->allowlist());
  v = d->Decide(kTcp, Ip("198.51.100.9"), 80, nullptr, kT0);
  EXPECT_FALSE(v.allow);
  EXPECT_EQ(v.reason, Reason::kDenyRule);
  EXPECT_EQ(v.rule, 0);
  EXPECT_TRUE(d->Decide(kTcp, Ip("198.51.101.9"), 80, nullptr, kT0).allow);
}

TEST(DecideTest, EgressNoneDeniesEverything) {
  std::shared_ptr<const Policy> p =
      MakePolicy("egress none\nallow 0.0.0.0/0\nallow [::/0]\n");
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(p->egress_none());
  for (const char* a : {"198.51.100.1", "10.0.0.1", "2001:db8::1"}) {
    Verdict v = p->Decide(kUdp, Ip(a), 53, nullptr, kT0);
    EXPECT_FALSE(v.allow) << a;
    EXPECT_EQ(v.reason, Reason::kEgressNone) << a;
  }
  EXPECT_EQ(p->DecideName("example.com"), Policy::NameVerdict::kDeny);
}

TEST(DecideTest, AllowlistMode) {
  std::shared_ptr<const Policy> p =
      MakePolicy("allow 198.51.100.0/24\nallow [2001:db8::/32]\n");
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(p->allowlist());
  Verdict v = p->Decide(kTcp, Ip("198.51.100.7"), 22, nullptr, kT0);
  EXPECT_TRUE(v.allow);
  EXPECT_EQ(v.reason, Reason::kAllowRule);
  EXPECT_EQ(v.rule, 0);
  v = p->Decide(kIcmp, Ip("2001:db8:1::1"), 0, nullptr, kT0);
  EXPECT_TRUE(v.allow);
  EXPECT_EQ(v.rule, 1);
  v = p->Decide(kTcp, Ip("203.0.113.1"), 22, nullptr, kT0);
  EXPECT_FALSE(v.allow);
  EXPECT_EQ(v.reason, Reason::kNotAllowed);
  EXPECT_EQ(v.rule, -1);
  v = p->Decide(kTcp, Ip("2001:db9::1"), 22, nullptr, kT0);
  EXPECT_FALSE(v.allow);
  EXPECT_EQ(v.reason, Reason::kNotAllowed);
}

TEST(DecideTest, DenyBeatsAllow) {
  // The allow rule comes first and is wider; the deny still wins.
  std::shared_ptr<const Policy> p = MakePolicy(
      "allow 198.51.100.0/24\n"
      "deny 198.51.100.128/25\n"
      "allow example.com\n"
      "deny tcp:example.com:25\n");
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(p->Decide(kTcp, Ip("198.51.100.1"), 80, nullptr, kT0).allow);
  Verdict v = p->Decide(kTcp, Ip("198.51.100.200"), 80, nullptr, kT0);
  EXPECT_FALSE(v.allow);
  EXPECT_EQ(v.reason, Reason::kDenyRule);
  EXPECT_EQ(v.rule, 1);

  PinTable pins;
  pins.Pin(Ip("203.0.113.5"), "example.com", absl::Seconds(30), kT0);
  v = p->Decide(kTcp, Ip("203.0.113.5"), 25, &pins, kT0);
  EXPECT_FALSE(v.allow);
  EXPECT_EQ(v.reason, Reason::kDenyRule);
  EXPECT_EQ(v.rule, 3);
  EXPECT_EQ(v.name, "example.com");
  v = p->Decide(kTcp, Ip("203.0.113.5"), 443, &pins, kT0);
  EXPECT_TRUE(v.allow);
  EXPECT_EQ(v.reason, Reason::kPinnedName);
  EXPECT_EQ(v.rule, 2);
  EXPECT_EQ(v.name, "example.com");
}

// ---- Special and metadata addresses in each mode ----

TEST(SpecialTest, IsSpecial) {
  for (const char* a :
       {"127.0.0.1", "127.255.0.1", "10.1.2.3", "172.16.0.1", "172.31.255.255",
        "192.168.1.1", "100.64.0.1", "100.127.255.255", "169.254.1.1",
        "224.0.0.1", "239.255.255.255", "255.255.255.255", "0.0.0.0",
        "0.1.2.3", "::", "::1", "fc00::1", "fdff::1", "fe80::1",
        "febf::1", "ff02::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1",
        "::10.0.0.1", "64:ff9b::a00:1", "64:ff9b::7f00:1"}) {
    EXPECT_TRUE(Policy::IsSpecial(Ip(a))) << a;
  }
  for (const char* a :
       {"198.51.100.1", "172.32.0.1", "172.15.255.255", "100.128.0.1",
        "100.63.255.255", "192.169.0.1", "11.0.0.1", "223.255.255.255",
        "2001:db8::1", "fec0::1", "fe00::1", "::ffff:198.51.100.1",
        "64:ff9b::c633:6401", "::c633:6401", "64:ff9b:1::a00:1"}) {
    EXPECT_FALSE(Policy::IsSpecial(Ip(a))) << a;
  }
}

TEST(SpecialTest, AllowlistDeniesSpecialUnlessCidrNamesIt) {
  std::shared_ptr<const Policy> p = MakePolicy(
      "allow example.com\n"
      "allow tcp:10.0.0.0/8:5432\n"
      "allow [fd00::/8]\n");
  ASSERT_NE(p, nullptr);
  PinTable pins;
  // A name pinned to a special address never admits it (rebinding).
  pins.Pin(Ip("127.0.0.1"), "example.com", absl::Seconds(60), kT0);
  pins.Pin(Ip("192.168.0.1"), "example.com", absl::Seconds(60), kT0);
  pins.Pin(Ip("::ffff:127.0.0.1"), "example.com", absl::Seconds(60), kT0);
  for (const char* a : {"127.0.0.1", "192.168.0.1", "::ffff:127.0.0.1"}) {
    Verdict v = p->Decide(kTcp, Ip(a), 80, &pins, kT0);
    EXPECT_FALSE(v.allow) << a;
    EXPECT_EQ(v.reason, Reason::kSpecialAddress) << a;
  }
  // A CIDR rule admits, with its protocol and port.
  Verdict v = p->Decide(kTcp, Ip("10.1.2.3"), 5432, &pins, kT0);
  EXPECT_TRUE(v.allow);
  EXPECT_EQ(v.reason, Reason::kAllowRule);
  EXPECT_EQ(v.rule, 1);
  EXPECT_TRUE(p->Decide(kTcp, Ip("::ffff:10.1.2.3"), 5432, &pins, kT0).allow);
  v = p->Decide(kTcp, Ip("10.1.2.3"), 5433, &pins, kT0);
  EXPECT_FALSE(v.allow);
  EXPECT_EQ(v.reason, Reason::kSpecialAddress);
  EXPECT_FALSE(p->Decide(kUdp, Ip("10.1.2.3"), 5432, &pins, kT0).allow);
  EXPECT_TRUE(p->Decide(kUdp, Ip("fd12::1"), 53, &pins, kT0).allow);

  EXPECT_TRUE(p->ExplicitlyAllowed(Ip("10.9.9.9"), kTcp));
  EXPECT_TRUE(p->ExplicitlyAllowed(Ip("::ffff:10.9.9.9"), kTcp));
  EXPECT_FALSE(p->ExplicitlyAllowed(Ip("10.9.9.9"), kUdp));
  EXPECT_FALSE(p->ExplicitlyAllowed(Ip("127.0.0.1"), kTcp));
  EXPECT_TRUE(p->ExplicitlyAllowed(Ip("fd00::5"), kUdp));
}

TEST(SpecialTest, MetadataOnlyByExplicitAllow) {
  // Allowlist: the metadata address needs a rule that contains it; the
  // link-local CIDR here does, for TCP port 80 only.
  std::shared_ptr<const Policy> p =
      MakePolicy("allow tcp:169.254.0.0/16:80\nallow [fd00:ec2::254]\n");
  ASSERT_NE(p, nullptr);
  Verdict v = p->Decide(kTcp, Ip("169.254.169.254"), 80, nullptr, kT0);
  EXPECT_TRUE(v.allow);
  EXPECT_EQ(v.reason, Reason::kAllowRule);
  v = p->Decide(kTcp, Ip("169.254.169.254"), 443, nullptr, kT0);
  EXPECT_FALSE(v.allow);
  EXPECT_EQ(v.reason, Reason::kMetadata);
  EXPECT_TRUE(p->Decide(kUdp, Ip("fd00:ec2::254"), 53, nullptr, kT0).allow);

  // Open mode with an explicit allow of it: allowed (the allow rule makes
  // it an allowlist, so use a deny to stay open and check a name rule
  // never admits it).
  std::shared_ptr<const Policy> q = MakePolicy("allow metadata.example\n");
  ASSERT_NE(q, nullptr);
  PinTable pins;
  pins.Pin(Ip("169.254.169.254"), "metadata.example", absl::Seconds(60), kT0);
  v = q->Decide(kTcp, Ip("169.254.169.254"), 80, &pins, kT0);
  EXPECT_FALSE(v.allow);
  EXPECT_EQ(v.reason, Reason::kMetadata);

  // A deny rule still beats the explicit allow of the metadata address.
  std::shared_ptr<const Policy> r =
      MakePolicy("allow 169.254.169.254\ndeny 169.254.0.0/16\n");
  ASSERT_NE(r, nullptr);
  v = r->Decide(kTcp, Ip("169.254.169.254"), 80, nullptr, kT0);
  EXPECT_FALSE(v.allow);
  EXPECT_EQ(v.reason, Reason::kDenyRule);
}

// ---- IPv4 embedded in IPv6 ----

TEST(EmbeddedTest, MappedCompatAndNat64AreJudgedAsIpv4) {
  std::shared_ptr<const Policy> p = MakePolicy("deny 192.0.2.0/24\n");
  ASSERT_NE(p, nullptr);
  for (const char* a : {"192.0.2.1", "::ffff:192.0.2.1", "64:ff9b::c000:201",
                        "::192.0.2.1"}) {
    Verdict v = p->Decide(kTcp, Ip(a), 443, nullptr, kT0);
    EXPECT_FALSE(v.allow) << a;
    EXPECT_EQ(v.reason, Reason::kDenyRule) << a;
  }
  // Outside the embedding prefixes an address is just IPv6.
  EXPECT_TRUE(p->Decide(kTcp, Ip("64:ff9b:1::c000:201"), 443, nullptr, kT0)
                  .allow);
  EXPECT_TRUE(p->Decide(kTcp, Ip("2001:db8::c000:201"), 443, nullptr, kT0)
                  .allow);

  // Allow rules too: an IPv4 allow admits the mapped form.
  std::shared_ptr<const Policy> q = MakePolicy("allow tcp:198.51.100.0/24\n");
  ASSERT_NE(q, nullptr);
  Verdict v = q->Decide(kTcp, Ip("64:ff9b::c633:6405"), 443, nullptr, kT0);
  EXPECT_TRUE(v.allow);
  EXPECT_EQ(v.reason, Reason::kAllowRule);
  EXPECT_TRUE(q->Decide(kTcp, Ip("::ffff:198.51.100.5"), 1, nullptr, kT0)
                  .allow);
  // A rule written in the mapped form catches the plain IPv4 address.
  std::shared_ptr<const Policy> r = MakePolicy("deny [::ffff:192.0.2.0/120]\n");
  ASSERT_NE(r, nullptr);
  EXPECT_FALSE(r->Decide(kTcp, Ip("192.0.2.9"), 1, nullptr, kT0).allow);
  EXPECT_FALSE(r->Decide(kTcp, Ip("64:ff9b::c000:209"), 1, nullptr, kT0).allow);
}

TEST(EmbeddedTest, PinOfTheMappedFormDoesNotAdmitSpecial) {
  std::shared_ptr<const Policy> p = MakePolicy("allow example.com\n");
  ASSERT_NE(p, nullptr);
  PinTable pins;
  pins.Pin(Ip("64:ff9b::a00:1"), "example.com", absl::Seconds(60), kT0);
  Verdict v = p->Decide(kTcp, Ip("64:ff9b::a00:1"), 443, &pins, kT0);
  EXPECT_FALSE(v.allow);
  EXPECT_EQ(v.reason, Reason::kSpecialAddress);
}

// ---- Pins ----

TEST(PinTest, NameRuleAdmitsOnlyPinnedAddresses) {
  std::shared_ptr<const Policy> p =
      MakePolicy("allow example.com\nallow *.example.org\n");
  ASSERT_NE(p, nullptr);
  PinTable pins;
  IpAddress a = Ip("198.51.100.10");
  Verdict v = p->Decide(kTcp, a, 443, &pins, kT0);
  EXPECT_FALSE(v.allow);
  EXPECT_EQ(v.reason, Reason::kNotAllowed);
  EXPECT_FALSE(p->Decide(kTcp, a, 443, nullptr, kT0).allow);

  pins.Pin(a, "EXAMPLE.com.", absl::Seconds(10), kT0);
  v = p->Decide(kTcp, a, 443, &pins, kT0);
  EXPECT_TRUE(v.allow);
  EXPECT_EQ(v.reason, Reason::kPinnedName);
  EXPECT_EQ(v.rule, 0);
  EXPECT_EQ(v.name, "example.com");

  // Wildcard: any depth below, not the apex.
  IpAddress b = Ip("2001:db8::10");
  pins.Pin(b, "a.b.example.org", absl::Seconds(10), kT0);
  v = p->Decide(kUdp, b, 443, &pins, kT0);
  EXPECT_TRUE(v.allow);
  EXPECT_EQ(v.rule, 1);
  pins.Pin(b, "example.org", absl::Seconds(10), kT0);
  EXPECT_FALSE(p->Decide(kUdp, b, 443, &pins, kT0).allow);
  pins.Pin(b, "badexample.org", absl::Seconds(10), kT0);
  EXPECT_FALSE(p->Decide(kUdp, b, 443, &pins, kT0).allow);
  // A pin for a name no rule allows admits nothing.
  pins.Pin(b, "example.net", absl::Seconds(10), kT0);
  EXPECT_FALSE(p->Decide(kUdp, b, 443, &pins, kT0).allow);
}

TEST(PinTest, ExpiresAfterTtlPlusGrace) {
  std::shared_ptr<const Policy> p = MakePolicy("allow example.com\n");
  ASSERT_NE(p, nullptr);
  PinTable pins;
  IpAddress a = Ip("198.51.100.10");
  pins.Pin(a, "example.com", absl::Seconds(30), kT0);
  const Instant edge = kT0 + absl::Seconds(30) + PinTable::kPinGrace;
  EXPECT_TRUE(pins.Find(a, edge - absl::Milliseconds(1)).has_value());
  EXPECT_TRUE(
      p->Decide(kTcp, a, 443, &pins, edge - absl::Milliseconds(1)).allow);
  // Find ignores an expired pin before Expire drops it.
  EXPECT_FALSE(pins.Find(a, edge).has_value());
  EXPECT_EQ(pins.size(), 1u);
  Verdict v = p->Decide(kTcp, a, 443, &pins, edge);
  EXPECT_FALSE(v.allow);
  EXPECT_EQ(v.reason, Reason::kNotAllowed);
  pins.Expire(edge);
  EXPECT_EQ(pins.size(), 0u);
  EXPECT_EQ(pins.evicted(), 0u);  // expiry is not eviction
}

TEST(PinTest, LaterPinExtendsAndTakesTheLatestName) {
  PinTable pins;
  IpAddress a = Ip("198.51.100.10");
  pins.Pin(a, "a.example", absl::Seconds(10), kT0);
  pins.Pin(a, "b.example", absl::Seconds(100), kT0 + absl::Seconds(5));
  EXPECT_EQ(pins.size(), 1u);
  std::optional<std::string_view> n =
      pins.Find(a, kT0 + absl::Seconds(100) + PinTable::kPinGrace);
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(*n, "b.example");
  // A shorter later pin does not cut the longer one short.
  pins.Pin(a, "c.example", absl::Seconds(1), kT0 + absl::Seconds(6));
  n = pins.Find(a, kT0 + absl::Seconds(100) + PinTable::kPinGrace);
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(*n, "c.example");
  pins.Clear();
  EXPECT_EQ(pins.size(), 0u);
  EXPECT_FALSE(pins.Find(a, kT0).has_value());
}

TEST(PinTest, BoundedEvictsTheEntryThatExpiresFirst) {
  PinTable pins(3);
  pins.Pin(Ip("198.51.100.1"), "one.example", absl::Seconds(300), kT0);
  pins.Pin(Ip("198.51.100.2"), "two.example", absl::Seconds(100), kT0);
  pins.Pin(Ip("198.51.100.3"), "three.example", absl::Seconds(200), kT0);
  EXPECT_EQ(pins.size(), 3u);
  pins.Pin(Ip("198.51.100.4"), "four.example", absl::Seconds(50), kT0);
  EXPECT_EQ(pins.size(), 3u);
  EXPECT_EQ(pins.evicted(), 1u);
  EXPECT_FALSE(pins.Find(Ip("198.51.100.2"), kT0).has_value());
  EXPECT_TRUE(pins.Find(Ip("198.51.100.1"), kT0).has_value());
  EXPECT_TRUE(pins.Find(Ip("198.51.100.3"), kT0).has_value());
  EXPECT_TRUE(pins.Find(Ip("198.51.100.4"), kT0).has_value());
  // Re-pinning a present address evicts nothing.
  pins.Pin(Ip("198.51.100.4"), "four.example", absl::Seconds(500), kT0);
  EXPECT_EQ(pins.evicted(), 1u);
  // Many more: the bound holds.
  for (uint32_t i = 0; i < 1000; ++i) {
    pins.Pin(IpAddress(wire::Ipv4Address::FromU32(0xcb007100 + i)), "x.example",
             absl::Seconds(1000 + i), kT0);
    ASSERT_LE(pins.size(), 3u);
  }
  EXPECT_EQ(pins.evicted(), 1001u);
  // The three survivors are the three that expire last.
  EXPECT_TRUE(pins.Find(IpAddress(wire::Ipv4Address::FromU32(0xcb007100 + 999)),
                        kT0)
                  .has_value());
  EXPECT_TRUE(pins.Find(IpAddress(wire::Ipv4Address::FromU32(0xcb007100 + 997)),
                        kT0)
                  .has_value());
}

TEST(PinTest, ExpiredEntriesMakeRoomWithoutEviction) {
  PinTable pins(2);
  pins.Pin(Ip("198.51.100.1"), "a.example", absl::Seconds(1), kT0);
  pins.Pin(Ip("198.51.100.2"), "b.example", absl::Seconds(1), kT0);
  const Instant later = kT0 + absl::Hours(1);
  pins.Pin(Ip("198.51.100.3"), "c.example", absl::Seconds(1), later);
  pins.Pin(Ip("198.51.100.4"), "d.example", absl::Seconds(1), later);
  EXPECT_EQ(pins.size(), 2u);
  EXPECT_EQ(pins.evicted(), 0u);
}

TEST(PinTest, NamePinnedThenRuleRemovedByNewPolicy) {
  std::shared_ptr<const Policy> before =
      MakePolicy("allow example.com\nallow example.net\n");
  std::shared_ptr<const Policy> after = MakePolicy("allow example.net\n");
  ASSERT_NE(before, nullptr);
  ASSERT_NE(after, nullptr);
  PinTable pins;
  IpAddress a = Ip("198.51.100.10");
  pins.Pin(a, "example.com", absl::Seconds(300), kT0);
  EXPECT_TRUE(before->Decide(kTcp, a, 443, &pins, kT0).allow);
  Verdict v = after->Decide(kTcp, a, 443, &pins, kT0);
  EXPECT_FALSE(v.allow);
  EXPECT_EQ(v.reason, Reason::kNotAllowed);
}

// ---- Ports and protocols ----

TEST(PortsTest, EachRuleMatchesItsProtocolAndPorts) {
  std::shared_ptr<const Policy> p = MakePolicy(
      "allow tcp:198.51.100.1:443\n"
      "allow udp:198.51.100.2:5000-5999\n"
      "allow icmp:198.51.100.3\n"
      "allow 198.51.100.4:53\n"
      "allow tcp:example.com:443\n");
  ASSERT_NE(p, nullptr);
  auto ok = [&](Protocol proto, const char* a, uint16_t port,
                const PinTable* pins = nullptr) {
    return p->Decide(proto, Ip(a), port, pins, kT0).allow;
  };
  EXPECT_TRUE(ok(kTcp, "198.51.100.1", 443));
  EXPECT_FALSE(ok(kTcp, "198.51.100.1", 444));
  EXPECT_FALSE(ok(kUdp, "198.51.100.1", 443));
  EXPECT_FALSE(ok(kIcmp, "198.51.100.1", 0));
  EXPECT_TRUE(ok(kUdp, "198.51.100.2", 5000));
  EXPECT_TRUE(ok(kUdp, "198.51.100.2", 5999));
  EXPECT_FALSE(ok(kUdp, "198.51.100.2", 4999));
  EXPECT_FALSE(ok(kUdp, "198.51.100.2", 6000));
  EXPECT_FALSE(ok(kTcp, "198.51.100.2", 5000));
  EXPECT_TRUE(ok(kIcmp, "198.51.100.3", 0));
  EXPECT_FALSE(ok(kTcp, "198.51.100.3", 80));
  EXPECT_TRUE(ok(kTcp, "198.51.100.4", 53));
  EXPECT_TRUE(ok(kUdp, "198.51.100.4", 53));
  EXPECT_FALSE(ok(kIcmp, "198.51.100.4", 0));
  EXPECT_FALSE(ok(kUdp, "198.51.100.4", 54));
  PinTable pins;
  pins.Pin(Ip("198.51.100.9"), "example.com", absl::Seconds(60), kT0);
  EXPECT_TRUE(ok(kTcp, "198.51.100.9", 443, &pins));
  EXPECT_FALSE(ok(kTcp, "198.51.100.9", 80, &pins));
  EXPECT_FALSE(ok(kUdp, "198.51.100.9", 443, &pins));
}

TEST(PortsTest, DenyWithPortLeavesOtherPorts) {
  std::shared_ptr<const Policy> p =
      MakePolicy("deny tcp:198.51.100.0/24:25\ndeny udp:[2001:db8::/32]\n");
  ASSERT_NE(p, nullptr);
  EXPECT_FALSE(p->Decide(kTcp, Ip("198.51.100.1"), 25, nullptr, kT0).allow);
  EXPECT_TRUE(p->Decide(kTcp, Ip("198.51.100.1"), 26, nullptr, kT0).allow);
  EXPECT_TRUE(p->Decide(kUdp, Ip("198.51.100.1"), 25, nullptr, kT0).allow);
  EXPECT_FALSE(p->Decide(kUdp, Ip("2001:db8::1"), 9, nullptr, kT0).allow);
  EXPECT_TRUE(p->Decide(kTcp, Ip("2001:db8::1"), 9, nullptr, kT0).allow);
}

// ---- DecideName ----

TEST(DecideNameTest, DenyAllowUnlisted) {
  std::shared_ptr<const Policy> p = MakePolicy(
      "allow *.example.com\n"
      "deny bad.example.com\n"
      "allow tcp:api.example.org:443\n"
      "deny *.evil.example.com\n"
      "deny tcp:mail.example.com:25\n");
  ASSERT_NE(p, nullptr);
  int rule = -2;
  EXPECT_EQ(p->DecideName("www.example.com", &rule),
            Policy::NameVerdict::kAllow);
  EXPECT_EQ(rule, 0);
  EXPECT_EQ(p->DecideName("WWW.Example.COM.", &rule),
            Policy::NameVerdict::kAllow);
  EXPECT_EQ(p->DecideName("bad.example.com", &rule),
            Policy::NameVerdict::kDeny);
  EXPECT_EQ(rule, 1);
  EXPECT_EQ(p->DecideName("x.y.evil.example.com", &rule),
            Policy::NameVerdict::kDeny);
  EXPECT_EQ(rule, 3);
  EXPECT_EQ(p->DecideName("api.example.org", &rule),
            Policy::NameVerdict::kAllow);
  EXPECT_EQ(rule, 2);
  // A deny for one port only does not deny the name.
  EXPECT_EQ(p->DecideName("mail.example.com", &rule),
            Policy::NameVerdict::kAllow);
  rule = -2;
  EXPECT_EQ(p->DecideName("example.com", &rule),
            Policy::NameVerdict::kUnlisted);
  EXPECT_EQ(rule, -1);
  EXPECT_EQ(p->DecideName("example.net"), Policy::NameVerdict::kUnlisted);
  EXPECT_EQ(p->DecideName(""), Policy::NameVerdict::kUnlisted);
  EXPECT_EQ(p->DecideName("."), Policy::NameVerdict::kUnlisted);
}

// ---- ReasonName, Describe ----

TEST(ReasonTest, Names) {
  EXPECT_EQ(ReasonName(Reason::kOpen), "open");
  EXPECT_EQ(ReasonName(Reason::kAllowRule), "allow_rule");
  EXPECT_EQ(ReasonName(Reason::kPinnedName), "pinned_name");
  EXPECT_EQ(ReasonName(Reason::kDenyRule), "deny_rule");
  EXPECT_EQ(ReasonName(Reason::kNotAllowed), "not_allowed");
  EXPECT_EQ(ReasonName(Reason::kEgressNone), "egress_none");
  EXPECT_EQ(ReasonName(Reason::kSpecialAddress), "special_address");
  EXPECT_EQ(ReasonName(Reason::kMetadata), "metadata");
}

TEST(DescribeTest, ShowsModeMetadataAndRules) {
  std::string open = Policy::Open()->Describe();
  EXPECT_THAT(open, HasSubstr("open"));
  EXPECT_THAT(open, HasSubstr("169.254.169.254"));
  EXPECT_THAT(open, HasSubstr("fd00:ec2::254"));
  std::shared_ptr<const Policy> p =
      MakePolicy("allow tcp:example.com:443\ndeny 192.0.2.0/24\n");
  ASSERT_NE(p, nullptr);
  std::string d = p->Describe();
  EXPECT_THAT(d, HasSubstr("allowlist"));
  EXPECT_THAT(d, HasSubstr("allow tcp:example.com:443"));
  EXPECT_THAT(d, HasSubstr("deny 192.0.2.0/24"));
  std::shared_ptr<const Policy> n = MakePolicy("egress none\n");
  ASSERT_NE(n, nullptr);
  EXPECT_THAT(n->Describe(), HasSubstr("none"));
}

// ---- A big policy ----

// 1,000 rules of every kind: 250 exact names, 250 wildcards, 250 IPv4
// CIDRs of mixed lengths, 250 IPv6 CIDRs; every fourth of each is a deny.
std::string BigPolicy() {
  std::string f;
  for (int i = 0; i < 250; ++i) {
    const char* verb = i % 4 == 3 ? "deny" : "allow";
    absl::StrAppend(&f, verb, " tcp:host", i, ".example.com:443\n");
    absl::StrAppend(&f, verb, " *.zone", i, ".example.net\n");
    // 11.i.0.0/16 for even i, 12.0.i.0/24 for odd i.
    if (i % 2 == 0) {
      absl::StrAppend(&f, verb, " 11.", i, ".0.0/16\n");
    } else {
      absl::StrAppend(&f, verb, " udp:12.0.", i, ".0/24:1000-2000\n");
    }
    absl::StrAppendFormat(&f, "%s [2001:db8:%x::/48]\n", verb, i);
  }
  return f;
}

TEST(BigPolicyTest, ThousandRulesDecideCorrectly) {
  std::shared_ptr<const Policy> p = MakePolicy(BigPolicy());
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(p->rules().size(), 1000u);
  PinTable pins;
  for (int i = 0; i < 250; ++i) {
    const bool deny = i % 4 == 3;
    SCOPED_TRACE(i);
    IpAddress host(wire::Ipv4Address::FromU32(0xc6336400u + i));  // 198.51.100.i
    pins.Pin(host, absl::StrCat("host", i, ".example.com"), absl::Seconds(60),
             kT0);
    Verdict v = p->Decide(kTcp, host, 443, &pins, kT0);
    EXPECT_EQ(v.allow, !deny);
    EXPECT_EQ(v.rule, 4 * i);
    EXPECT_EQ(v.reason, deny ? Reason::kDenyRule : Reason::kPinnedName);
    EXPECT_FALSE(p->Decide(kTcp, host, 80, &pins, kT0).allow);

    IpAddress z(wire::Ipv4Address::FromU32(0xcb007100u + i));  // 203.0.113.i
    pins.Pin(z, absl::StrCat("a.b.zone", i, ".example.net"), absl::Seconds(60),
             kT0);
    v = p->Decide(kUdp, z, 53, &pins, kT0);
    EXPECT_EQ(v.allow, !deny);
    EXPECT_EQ(v.rule, 4 * i + 1);

    IpAddress c = i % 2 == 0
                      ? IpAddress(wire::Ipv4Address::FromU32(
                            (11u << 24) | (uint32_t(i) << 16) | 0x0102))
                      : IpAddress(wire::Ipv4Address::FromU32(
                            (12u << 24) | (uint32_t(i) << 8) | 7));
    v = p->Decide(kUdp, c, 1500, nullptr, kT0);
    EXPECT_EQ(v.allow, !deny);
    EXPECT_EQ(v.rule, 4 * i + 2);
    if (i % 2 == 1) {
      EXPECT_FALSE(p->Decide(kUdp, c, 2001, nullptr, kT0).allow);
    }

    IpAddress s =
        Ip(absl::StrFormat("2001:db8:%x:1::1", i));
    v = p->Decide(kTcp, s, 22, nullptr, kT0);
    EXPECT_EQ(v.allow, !deny);
    EXPECT_EQ(v.rule, 4 * i + 3);
  }
  EXPECT_FALSE(p->Decide(kTcp, Ip("198.51.101.1"), 443, &pins, kT0).allow);
  EXPECT_FALSE(p->Decide(kTcp, Ip("2001:db9::1"), 443, &pins, kT0).allow);
  EXPECT_EQ(p->DecideName("host5.example.com"), Policy::NameVerdict::kAllow);
  EXPECT_EQ(p->DecideName("x.zone7.example.net"), Policy::NameVerdict::kDeny);
  EXPECT_EQ(p->DecideName("zone7.example.net"), Policy::NameVerdict::kUnlisted);
}

// Not a pass/fail figure: how long Decide takes with the 1,000-rule
// policy, printed for the record (NETSTACK_POLICY_BENCH=1 for more calls).
TEST(BigPolicyTest, DecideCost) {
  std::shared_ptr<const Policy> p = MakePolicy(BigPolicy());
  ASSERT_NE(p, nullptr);
  PinTable pins;
  std::vector<IpAddress> addrs;
  for (int i = 0; i < 250; ++i) {
    IpAddress host(wire::Ipv4Address::FromU32(0xc6336400u + i));
    pins.Pin(host, absl::StrCat("host", i, ".example.com"), absl::Seconds(60),
             kT0);
    addrs.push_back(host);
    addrs.push_back(IpAddress(wire::Ipv4Address::FromU32(0x08080800u + i)));
    addrs.push_back(Ip(absl::StrFormat("2001:db8:%x:1::1", i)));
  }
  const int rounds = std::getenv("NETSTACK_POLICY_BENCH") ? 4000 : 100;
  auto time = [&](const Policy& policy, const char* what) {
    uint64_t allowed = 0;
    auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < rounds; ++r) {
      for (const IpAddress& a : addrs) {
        allowed += policy.Decide(kTcp, a, 443, &pins, kT0).allow;
      }
    }
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                  std::chrono::steady_clock::now() - start)
                  .count();
    const double calls = double(rounds) * addrs.size();
    std::printf("Decide, %s: %.0f ns per call (%.0f calls)\n", what,
                ns / calls, calls);
    return allowed;
  };
  // 188 of 250 host names and 188 of 250 IPv6 /48s are allowed.
  EXPECT_EQ(time(*p, "1,000 rules"), uint64_t(rounds) * (188 + 188));
  EXPECT_EQ(time(*Policy::Open(), "no rule"), uint64_t(rounds) * 750);

  // DecideName, once per DNS query: exact names, wildcards' names and
  // names no rule lists, in mixed case.
  std::vector<std::string> names;
  for (int i = 0; i < 250; ++i) {
    names.push_back(absl::StrCat("Host", i, ".example.com"));
    names.push_back(absl::StrCat("www.a.zone", i, ".example.net."));
    names.push_back(absl::StrCat("x", i, ".example.org"));
  }
  auto time_names = [&](const Policy& policy, const char* what) {
    uint64_t allowed = 0;
    auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < rounds; ++r) {
      for (const std::string& n : names) {
        allowed += policy.DecideName(n) == Policy::NameVerdict::kAllow;
      }
    }
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                  std::chrono::steady_clock::now() - start)
                  .count();
    const double calls = double(rounds) * names.size();
    std::printf("DecideName, %s: %.0f ns per call (%.0f calls)\n", what,
                ns / calls, calls);
    return allowed;
  };
  // host4 and zone4 are allowed, for 188 of every 250 i (not i % 4 == 3;
  // tcp:hostI:443 allows the name).
  EXPECT_EQ(time_names(*p, "1,000 rules"), uint64_t(rounds) * (188 + 188));
  EXPECT_EQ(time_names(*Policy::Open(), "no rule"), 0u);
}


// ---- The index against the linear definition ----

// What Decide and DecideName mean, one rule at a time in rule order, with
// no index: the definition the index must agree with.
class LinearPolicy {
 public:
  explicit LinearPolicy(PolicyConfig config) : c_(std::move(config)) {
    for (const Rule& r : c_.rules) allowlist_ |= r.allow;
  }

  Verdict Decide(Protocol protocol, const IpAddress& dst, uint16_t port,
                 const PinTable* pins, Instant now) const {
    if (c_.egress_none) return {false, Reason::kEgressNone, -1, {}};
    const IpAddress judged = Judged(dst);
    const int allow_cidr =
        First(true, [&](const Rule& r) {
          return IsCidr(r) && Contains(r.target, judged) &&
                 Covers(r, protocol, port);
        });
    if (IsMetadata(judged) && allow_cidr < 0) {
      return {false, Reason::kMetadata, -1, {}};
    }
    const int d = First(false, [&](const Rule& r) {
      return IsCidr(r) && Contains(r.target, judged) &&
             Covers(r, protocol, port);
    });
    if (d >= 0) return {false, Reason::kDenyRule, d, {}};
    std::optional<std::string_view> name;
    if (pins != nullptr) name = pins->Find(dst, now);
    if (name) {
      const int dn = First(false, [&](const Rule& r) {
        return NameMatches(r, *name) && Covers(r, protocol, port);
      });
      if (dn >= 0) return {false, Reason::kDenyRule, dn, std::string(*name)};
    }
    if (!allowlist_) return {true, Reason::kOpen, -1, {}};
    if (allow_cidr >= 0) return {true, Reason::kAllowRule, allow_cidr, {}};
    if (Policy::IsSpecial(judged)) {
      return {false, Reason::kSpecialAddress, -1, {}};
    }
    if (name) {
      const int a = First(true, [&](const Rule& r) {
        return NameMatches(r, *name) && Covers(r, protocol, port);
      });
      if (a >= 0) return {true, Reason::kPinnedName, a, std::string(*name)};
    }
    return {false, Reason::kNotAllowed, -1, {}};
  }

  Policy::NameVerdict DecideName(std::string_view name, int* rule) const {
    *rule = -1;
    if (c_.egress_none) return Policy::NameVerdict::kDeny;
    const int d = First(false, [&](const Rule& r) {
      return NameMatches(r, name) && r.protocols == kAnyProtocol &&
             r.port_lo == 0 && r.port_hi == 65535;
    });
    if (d >= 0) {
      *rule = d;
      return Policy::NameVerdict::kDeny;
    }
    const int a = First(true, [&](const Rule& r) {
      return NameMatches(r, name);
    });
    if (a >= 0) {
      *rule = a;
      return Policy::NameVerdict::kAllow;
    }
    return Policy::NameVerdict::kUnlisted;
  }

 private:
  template <typename Pred>
  int First(bool allow, Pred pred) const {
    for (size_t i = 0; i < c_.rules.size(); ++i) {
      if (c_.rules[i].allow == allow && pred(c_.rules[i])) {
        return static_cast<int>(i);
      }
    }
    return -1;
  }
  static bool IsCidr(const Rule& r) {
    return r.target.kind == Target::Kind::kCidr;
  }
  static bool Covers(const Rule& r, Protocol protocol, uint16_t port) {
    return (r.protocols & protocol) != 0 && r.port_lo <= port &&
           port <= r.port_hi;
  }
  // The IPv4 address an IPv6 one carries (mapped ::ffff:0:0/96,
  // compatible ::/96 but :: and ::1, NAT64 64:ff9b::/96), or the address.
  static IpAddress Judged(const IpAddress& a) {
    if (!a.is_v6()) return a;
    const auto& b = a.v6().bytes;
    auto zero = [&](int from, int to) {
      for (int i = from; i < to; ++i) {
        if (b[i] != 0) return false;
      }
      return true;
    };
    const bool mapped = zero(0, 10) && b[10] == 0xff && b[11] == 0xff;
    const bool compat = zero(0, 12) && !(zero(12, 15) && b[15] <= 1);
    const bool nat64 = b[0] == 0 && b[1] == 0x64 && b[2] == 0xff &&
                       b[3] == 0x9b && zero(4, 12);
    if (!mapped && !compat && !nat64) return a;
    return IpAddress(wire::Ipv4Address::FromBytes(b.data() + 12));
  }
  static bool IsMetadata(const IpAddress& judged) {
    return judged.ToString() == "169.254.169.254" ||
           judged.ToString() == "fd00:ec2::254";
  }
  // Whether the first prefix_len bits of `a` are the network's.
  static bool Contains(const Target& t, const IpAddress& a) {
    if (t.address.is_v4() != a.is_v4()) return false;
    const uint8_t* net = a.is_v4() ? t.address.v4().bytes.data()
                                   : t.address.v6().bytes.data();
    const uint8_t* x = a.is_v4() ? a.v4().bytes.data() : a.v6().bytes.data();
    for (int bit = 0; bit < t.prefix_len; ++bit) {
      const uint8_t m = 0x80 >> (bit % 8);
      if ((net[bit / 8] & m) != (x[bit / 8] & m)) return false;
    }
    return true;
  }
  // Case-blind, one trailing dot ignored: `name` is the rule's name, or
  // for *.SUFFIX ends in ".SUFFIX" with at least one label before it.
  static bool NameMatches(const Rule& r, std::string_view name) {
    if (r.target.kind == Target::Kind::kCidr) return false;
    if (!name.empty() && name.back() == '.') name.remove_suffix(1);
    std::string lower(name);
    for (char& c : lower) c = absl::ascii_tolower(static_cast<unsigned char>(c));
    const std::string& rn = r.target.name;
    if (r.target.kind == Target::Kind::kName) return lower == rn;
    return lower.size() > rn.size() + 1 &&
           lower.compare(lower.size() - rn.size(), rn.size(), rn) == 0 &&
           lower[lower.size() - rn.size() - 1] == '.';
  }

  PolicyConfig c_;
  bool allowlist_ = false;
};

// Random rules and flows drawn from small pools, so that rules overlap,
// shadow each other and meet the special and embedded addresses.
class RandomPolicies {
 public:
  explicit RandomPolicies(uint32_t seed) : rng_(seed) {}

  int Pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  template <typename T, size_t N>
  const T& PickOf(const T (&a)[N]) { return a[Pick(N)]; }

  std::string Name(int min_labels, int max_labels) {
    static const char* kLabels[] = {"a", "b", "www", "x-1", "example", "test"};
    const int n = min_labels + Pick(max_labels - min_labels + 1);
    std::string out;
    for (int i = 0; i < n; ++i) {
      absl::StrAppend(&out, i ? "." : "", PickOf(kLabels));
    }
    return out;
  }
  // An address from the pools, as text: IPv4, plain IPv6, and IPv4 in
  // the mapped, compatible and NAT64 forms.
  std::string Address() {
    static const char* kV4[] = {"198.51.100.1", "198.51.100.7",
                                "198.51.101.9", "203.0.113.5",
                                "10.1.2.3",     "127.0.0.1",
                                "169.254.169.254", "0.0.0.0"};
    static const char* kV6[] = {"2001:db8::1", "2001:db8::7", "2001:db8:1::9",
                                "fd00:ec2::254", "fc00::1", "::1", "::",
                                "fe80::1"};
    switch (Pick(5)) {
      case 0: case 1: return PickOf(kV4);
      case 2: return PickOf(kV6);
      case 3: return absl::StrCat("::ffff:", PickOf(kV4));
      default: return absl::StrCat(Pick(2) ? "64:ff9b::" : "::", PickOf(kV4));
    }
  }
  // The network of `address`/len, host bits cleared, in rule syntax.
  std::string Cidr() {
    const IpAddress a = Ip(Address());
    static const int kLen4[] = {0, 8, 16, 23, 24, 31, 32};
    static const int kLen6[] = {0, 32, 48, 96, 100, 120, 127, 128};
    const int len = a.is_v4() ? PickOf(kLen4) : PickOf(kLen6);
    std::array<uint8_t, 16> b{};
    const int bits = a.is_v4() ? 32 : 128;
    std::memcpy(b.data(),
                a.is_v4() ? a.v4().bytes.data() : a.v6().bytes.data(),
                bits / 8);
    for (int bit = len; bit < bits; ++bit) b[bit / 8] &= ~(0x80 >> (bit % 8));
    const IpAddress net =
        a.is_v4() ? IpAddress(wire::Ipv4Address::FromBytes(b.data()))
                  : IpAddress(wire::Ipv6Address::FromBytes(b.data()));
    const std::string text = absl::StrCat(net.ToString(), "/", len);
    return a.is_v4() ? text : absl::StrCat("[", text, "]");
  }
  std::string RuleText() {
    static const char* kProto[] = {"", "", "tcp:", "udp:", "icmp:"};
    static const char* kPorts[] = {"", "", ":443", ":53", ":22-80",
                                   ":80-443", ":1-65535"};
    const std::string proto = PickOf(kProto);
    std::string target;
    switch (Pick(3)) {
      case 0: target = Name(1, 3); break;
      case 1: target = absl::StrCat("*.", Name(1, 2)); break;
      default: target = Cidr(); break;
    }
    const std::string ports = proto == "icmp:" ? "" : PickOf(kPorts);
    return absl::StrCat(Pick(10) < 3 ? "deny " : "allow ", proto, target,
                        ports, "\n");
  }
  std::string File(int rules) {
    std::string f;
    // Some policies are open (deny rules only), a few are egress none.
    const bool open = Pick(4) == 0;
    for (int i = 0; i < rules; ++i) {
      std::string line = RuleText();
      if (open && absl::StartsWith(line, "allow ")) line.replace(0, 5, "deny");
      f += line;
    }
    if (Pick(20) == 0) f += "egress none\n";
    return f;
  }
  // A name as a guest may ask it: any case, maybe a trailing dot.
  std::string QueryName() {
    std::string n = Name(1, 4);
    for (char& c : n) {
      if (Pick(4) == 0) c = absl::ascii_toupper(static_cast<unsigned char>(c));
    }
    if (Pick(4) == 0) n += ".";
    // Now and then longer than any name can be (253 bytes): only its
    // tail can match a wildcard.
    if (Pick(20) == 0) n = absl::StrCat(std::string(Pick(3), 'q'),
                                        std::string(Pick(2) ? 250 : 240, 'a'),
                                        ".", n);
    return n;
  }

 private:
  std::mt19937 rng_;
};

std::string Show(const Verdict& v) {
  return absl::StrCat(v.allow ? "allow " : "deny ",
                      std::string(ReasonName(v.reason)),
                      " rule ", v.rule, " name '", v.name, "'");
}

// Thousands of random policies and flows: the index (Decide, DecideName)
// and the linear definition agree on the verdict, the reason, the rule
// and the name. NETSTACK_POLICY_SEED=N draws another set.
TEST(IndexEquivalenceTest, AgreesWithTheLinearDefinition) {
  const char* env = std::getenv("NETSTACK_POLICY_SEED");
  const uint32_t seed = env ? static_cast<uint32_t>(std::atoi(env)) : 33;
  RandomPolicies gen(seed);
  int compared = 0, allowed = 0, by_rule = 0, by_name = 0;
  for (int round = 0; round < 300; ++round) {
    const std::string file = gen.File(1 + gen.Pick(40));
    SCOPED_TRACE(absl::StrCat("seed ", seed, " round ", round, "\n", file));
    absl::StatusOr<PolicyConfig> config = ParsePolicyFile(file);
    ASSERT_TRUE(config.ok()) << config.status();
    LinearPolicy linear(*config);
    absl::StatusOr<std::shared_ptr<const Policy>> p = Policy::Create(*config);
    ASSERT_TRUE(p.ok()) << p.status();
    PinTable pins;
    std::vector<std::string> pinned;
    for (int i = 0; i < 12; ++i) {
      pinned.push_back(gen.Address());
      pins.Pin(Ip(pinned.back()), gen.Pick(2) ? gen.QueryName() : gen.Name(1, 3),
               absl::Seconds(gen.Pick(120)), kT0);
    }
    for (int q = 0; q < 200; ++q) {
      static const Protocol kProtocols[] = {kTcp, kUdp, kIcmp};
      static const uint16_t kPortsAsked[] = {22, 53, 80, 443, 1000, 65535};
      const Protocol proto = gen.PickOf(kProtocols);
      const uint16_t port = proto == kIcmp ? 0 : gen.PickOf(kPortsAsked);
      const IpAddress dst =
          Ip(gen.Pick(3) ? gen.Address() : pinned[gen.Pick(pinned.size())]);
      const Instant now = kT0 + absl::Seconds(gen.Pick(240));
      const PinTable* with = gen.Pick(5) ? &pins : nullptr;
      const Verdict want = linear.Decide(proto, dst, port, with, now);
      const Verdict got = (*p)->Decide(proto, dst, port, with, now);
      ASSERT_EQ(Show(got), Show(want))
          << "Decide " << dst.ToString() << " port " << port << " protocol "
          << int(proto);
      const std::string name = gen.QueryName();
      int want_rule = -2, got_rule = -2;
      const Policy::NameVerdict wn = linear.DecideName(name, &want_rule);
      const Policy::NameVerdict gn = (*p)->DecideName(name, &got_rule);
      ASSERT_EQ(int(gn), int(wn)) << "DecideName " << name;
      ASSERT_EQ(got_rule, want_rule) << "DecideName " << name;
      ++compared;
      allowed += want.allow;
      by_rule += want.rule >= 0;
      by_name += want.reason == Reason::kPinnedName;
    }
  }
  // The draw reaches every kind of verdict, not only the default ones.
  EXPECT_EQ(compared, 300 * 200);
  EXPECT_GT(allowed, compared / 10);
  EXPECT_GT(by_rule, compared / 10);
  EXPECT_GT(by_name, 200);
}

// ---- Allocations ----

// The calls made for every new flow and every DNS query allocate
// nothing, with the 1,000-rule policy: a verdict by address, a refusal,
// and a name asked in any case, with a trailing dot, and too long to be
// a rule's.
TEST(AllocationTest, DecideAndDecideNameAllocateNothing) {
  std::shared_ptr<const Policy> p = MakePolicy(BigPolicy());
  ASSERT_NE(p, nullptr);
  PinTable pins;
  pins.Pin(Ip("198.51.101.1"), "not-a-rule.example.org", absl::Seconds(60),
           kT0);
  const IpAddress cidr = Ip("11.4.1.2");         // allow 11.4.0.0/16
  const IpAddress v6 = Ip("2001:db8:7:1::1");    // deny [2001:db8:7::/48]
  const IpAddress other = Ip("198.51.101.1");    // pinned, no rule
  const std::string long_name(300, 'a');
  const std::string names[] = {"a.b.zone4.example.net", "HOST8.Example.COM.",
                               "x.y.zone7.example.net", "unlisted.example.org",
                               long_name, "", "."};
  uint64_t allowed = 0;
  const uint64_t before = g_allocations.load();
  for (int i = 0; i < 100; ++i) {
    allowed += p->Decide(kUdp, cidr, 1500, &pins, kT0).allow;
    allowed += p->Decide(kTcp, v6, 22, &pins, kT0).allow;
    allowed += p->Decide(kTcp, other, 443, &pins, kT0).allow;
    for (const std::string& n : names) {
      int rule = -1;
      allowed += p->DecideName(n, &rule) == Policy::NameVerdict::kAllow;
    }
  }
  EXPECT_EQ(g_allocations.load() - before, 0u);
  // 11.4/16 allowed; a.b.zone4.example.net and host8.example.com.
  EXPECT_EQ(allowed, 100u * 3);
}

}  // namespace
}  // namespace netstack::policy
