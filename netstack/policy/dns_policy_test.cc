#include "netstack/policy/dns_policy.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "netstack/transport/address.h"
#include "netstack/wire/address.h"

namespace netstack::policy {
namespace {

using ::testing::ElementsAre;
using transport::IpAddress;

const Instant kT0 = absl::FromUnixSeconds(1'000'000);
constexpr uint16_t kA = 1, kNs = 2, kCname = 5, kSoa = 6, kMx = 15, kAaaa = 28,
                   kTxt = 16;

IpAddress Ip(std::string_view text) {
  std::optional<IpAddress> a = IpAddress::Parse(text);
  EXPECT_TRUE(a.has_value()) << text;
  return a.value_or(IpAddress());
}

std::shared_ptr<const Policy> MakePolicy(std::string_view file) {
  absl::StatusOr<PolicyConfig> config = ParsePolicyFile(file);
  EXPECT_TRUE(config.ok()) << config.status();
  if (!config.ok()) return Policy::Open();
  absl::StatusOr<std::shared_ptr<const Policy>> p =
      Policy::Create(*std::move(config));
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *p : Policy::Open();
}

// The allowlist most tests use: rule 0 example.com, 1 *.allowed.test,
// 2 blocked.allowed.test (denied), 3 10.9.0.0/16 (an explicit private
// range).
std::shared_ptr<const Policy> Allowlist() {
  return MakePolicy(
      "allow example.com\n"
      "allow *.allowed.test\n"
      "deny blocked.allowed.test\n"
      "allow 10.9.0.0/16\n");
}

// ---- A DNS message builder, by hand: names are written as labels and,
// if `pointer` >= 0, end in a pointer to that offset instead of the root.

class Msg {
 public:
  explicit Msg(uint16_t id = 0x1234, uint8_t flags2 = 0x81,
               uint8_t flags3 = 0x80) {
    m_ = {static_cast<uint8_t>(id >> 8),
          static_cast<uint8_t>(id),
          flags2,
          flags3,
          0,
          0,
          0,
          0,
          0,
          0,
          0,
          0};
  }
  // Appends a name; returns where it starts.
  size_t Name(std::string_view dotted, int pointer = -1) {
    const size_t at = m_.size();
    while (!dotted.empty()) {
      const std::string_view label = dotted.substr(0, dotted.find('.'));
      m_.push_back(static_cast<uint8_t>(label.size()));
      m_.insert(m_.end(), label.begin(), label.end());
      dotted.remove_prefix(std::min(dotted.size(), label.size() + 1));
    }
    if (pointer >= 0) {
      m_.push_back(static_cast<uint8_t>(0xc0 | pointer >> 8));
      m_.push_back(static_cast<uint8_t>(pointer));
    } else {
      m_.push_back(0);
    }
    return at;
  }
  // The question: its name at 12.
  Msg& Question(std::string_view name, uint16_t type = kA) {
    Name(name);
    U16(type);
    U16(1);
    return *this;
  }
  // After an owner name: TYPE, CLASS IN, TTL, then RDATA from `rdata`
  // (which appends it), its length patched in.
  template <typename F>
  Msg& Rr(uint16_t type, uint32_t ttl, F&& rdata, uint16_t klass = 1) {
    U16(type);
    U16(klass);
    U16(static_cast<uint16_t>(ttl >> 16));
    U16(static_cast<uint16_t>(ttl));
    const size_t len_at = m_.size();
    U16(0);
    rdata(*this);
    const size_t len = m_.size() - len_at - 2;
    m_[len_at] = static_cast<uint8_t>(len >> 8);
    m_[len_at + 1] = static_cast<uint8_t>(len);
    return *this;
  }
  Msg& A(std::string_view owner, int owner_pointer, std::string_view ip,
         uint32_t ttl = 300) {
    Name(owner, owner_pointer);
    const IpAddress a = Ip(ip);
    return Rr(a.is_v4() ? kA : kAaaa, ttl, [&](Msg& m) {
      if (a.is_v4()) {
        m.Bytes(std::vector<uint8_t>(a.v4().bytes.begin(), a.v4().bytes.end()));
      } else {
        m.Bytes(std::vector<uint8_t>(a.v6().bytes.begin(), a.v6().bytes.end()));
      }
    });
  }
  // A CNAME: returns where its target's name starts.
  size_t Cname(std::string_view owner, int owner_pointer,
               std::string_view target, int target_pointer = -1) {
    Name(owner, owner_pointer);
    size_t at = 0;
    Rr(kCname, 300, [&](Msg& m) { at = m.Name(target, target_pointer); });
    return at;
  }
  void U16(uint16_t v) {
    m_.push_back(static_cast<uint8_t>(v >> 8));
    m_.push_back(static_cast<uint8_t>(v));
  }
  void Bytes(const std::vector<uint8_t>& b) {
    m_.insert(m_.end(), b.begin(), b.end());
  }
  Msg& Counts(uint16_t qd, uint16_t an, uint16_t ns = 0, uint16_t ar = 0) {
    for (int i = 0; i < 4; ++i) {
      const uint16_t v = i == 0 ? qd : i == 1 ? an : i == 2 ? ns : ar;
      m_[4 + 2 * i] = static_cast<uint8_t>(v >> 8);
      m_[5 + 2 * i] = static_cast<uint8_t>(v);
    }
    return *this;
  }
  size_t size() const { return m_.size(); }
  std::vector<uint8_t>& bytes() { return m_; }

 private:
  std::vector<uint8_t> m_;
};

// ---- An independent reader for the results: every record as text,
// "section owner TYPE rdata" (names decompressed; A/AAAA as addresses;
// CNAME/NS as a name; SOA as its two names; anything else as a length).

std::string ReadNameForTest(const std::vector<uint8_t>& m, size_t at,
                            size_t* end) {
  std::string out;
  bool jumped = false;
  for (int hops = 0; hops < 64; ++hops) {
    if (at >= m.size()) return "<past end>";
    const uint8_t b = m[at];
    if ((b & 0xc0) == 0xc0) {
      if (!jumped) *end = at + 2;
      jumped = true;
      at = static_cast<size_t>(b & 0x3f) << 8 | m[at + 1];
      continue;
    }
    if (b == 0) {
      if (!jumped) *end = at + 1;
      return out.empty() ? "." : out;
    }
    if (!out.empty()) out += '.';
    out.append(reinterpret_cast<const char*>(&m[at + 1]), b);
    at += 1 + b;
  }
  return "<loop>";
}

std::vector<std::string> Records(const std::vector<uint8_t>& m) {
  std::vector<std::string> out;
  size_t at = 12;
  size_t end;
  for (int q = 0; q < (m[4] << 8 | m[5]); ++q) {
    ReadNameForTest(m, at, &end);
    at = end + 4;
  }
  const char* kSection[] = {"an", "ns", "ar"};
  for (int s = 0; s < 3; ++s) {
    const int n = m[6 + 2 * s] << 8 | m[7 + 2 * s];
    for (int i = 0; i < n; ++i) {
      const std::string owner = ReadNameForTest(m, at, &end);
      at = end;
      if (at + 10 > m.size()) {
        out.push_back("<truncated>");
        return out;
      }
      const uint16_t type = m[at] << 8 | m[at + 1];
      const uint16_t len = m[at + 8] << 8 | m[at + 9];
      const size_t rdata = at + 10;
      std::string text;
      if (type == kA && len == 4) {
        text = IpAddress(wire::Ipv4Address::FromBytes(&m[rdata])).ToString();
      } else if (type == kAaaa && len == 16) {
        text = IpAddress(wire::Ipv6Address::FromBytes(&m[rdata])).ToString();
      } else if (type == kCname || type == kNs) {
        text = ReadNameForTest(m, rdata, &end);
      } else if (type == kSoa) {
        text = ReadNameForTest(m, rdata, &end);
        text += " " + ReadNameForTest(m, end, &end);
      } else {
        text = absl::StrCat(len, " octets");
      }
      out.push_back(
          absl::StrCat(kSection[s], " ", owner, " ", type, " ", text));
      at = rdata + len;
    }
  }
  return out;
}

std::optional<std::string> PinnedFor(const PinTable& pins, std::string_view ip,
                                     Instant now = kT0) {
  std::optional<std::string_view> n = pins.Find(Ip(ip), now);
  if (!n) return std::nullopt;
  return std::string(*n);
}

// ---- QuestionNameText ----

std::string Text(const std::vector<uint8_t>& wire) {
  std::array<char, kNameTextMax> buf;
  return std::string(QuestionNameText(wire, buf));
}

TEST(QuestionNameTextTest, LowerCaseDottedWithoutTheRoot) {
  EXPECT_EQ(Text({3,   'W', 'w', 'W', 7,   'E', 'x', 'a', 'm', 'p', 'l',
                  'e', 3,   'C', 'O', 'M', 0,   0,   1,   0,   1}),
            "www.example.com");
  EXPECT_EQ(Text({0, 0, 1}), ".");
}

// A label holding a dot must not read as two labels: [x.example][com] is
// a name under com, not under example.com.
TEST(QuestionNameTextTest, ADotInsideALabelIsEscaped) {
  EXPECT_EQ(Text({9, 'x', '.', 'e', 'x', 'a', 'm', 'p', 'l', 'e', 3, 'c', 'o',
                  'm', 0}),
            "x\\046example.com");
  EXPECT_EQ(Text({3, 'a', ' ', 0xff, 1, '\\', 0}), "a\\032\\255.\\092");
}

TEST(QuestionNameTextTest, MalformedNamesGiveNothing) {
  EXPECT_EQ(Text({}), "");
  EXPECT_EQ(Text({3, 'a', 'b'}), "");       // past the end
  EXPECT_EQ(Text({3, 'a', 'b', 'c'}), "");  // no root
  EXPECT_EQ(Text({0xc0, 0x0c}), "");        // a pointer
  EXPECT_EQ(Text({0x40, 'a', 0}), "");      // label type 01
  std::vector<uint8_t> long_name;
  for (int i = 0; i < 5; ++i) {
    long_name.push_back(63);
    long_name.insert(long_name.end(), 63, 'a');
  }
  long_name.push_back(0);
  EXPECT_EQ(Text(long_name), "");  // 321 octets
  // The longest name (255 octets, 0xff everywhere: 4 characters each)
  // fits the text buffer.
  std::vector<uint8_t> longest;
  for (int i = 0; i < 3; ++i) {
    longest.push_back(63);
    longest.insert(longest.end(), 63, 0xff);
  }
  longest.push_back(61);
  longest.insert(longest.end(), 61, 0xff);
  longest.push_back(0);
  ASSERT_EQ(longest.size(), 255u);
  EXPECT_EQ(Text(longest).size(), (3 * 63 + 61) * 4 + 3);
}

// ---- DecideQuery ----

TEST(DecideQueryTest, AllowlistDeniesWhatNoRuleAllowsAndWhatARuleDenies) {
  const auto p = Allowlist();
  DnsPolicyCounters c;
  Verdict v;
  EXPECT_EQ(DecideQuery(*p, "example.com", c, &v), QueryAction::kForward);
  EXPECT_TRUE(v.allow);
  EXPECT_EQ(v.reason, Reason::kAllowRule);
  EXPECT_EQ(v.rule, 0);
  EXPECT_EQ(DecideQuery(*p, "WWW.Allowed.Test.", c, &v), QueryAction::kForward);
  EXPECT_EQ(v.rule, 1);
  EXPECT_EQ(DecideQuery(*p, "blocked.allowed.test", c, &v),
            QueryAction::kNxdomain);
  EXPECT_FALSE(v.allow);
  EXPECT_EQ(v.reason, Reason::kDenyRule);
  EXPECT_EQ(v.rule, 2);
  EXPECT_EQ(DecideQuery(*p, "www.example.com", c, &v),
            QueryAction::kNxdomain);  // exact: not below
  EXPECT_EQ(v.reason, Reason::kNotAllowed);
  EXPECT_EQ(v.rule, -1);
  EXPECT_EQ(DecideQuery(*p, "allowed.test", c, &v),
            QueryAction::kNxdomain);  // *.: not the apex
  // A label with a dot in it is not two labels.
  EXPECT_EQ(DecideQuery(*p, "x\\046allowed.test", c), QueryAction::kNxdomain);
  EXPECT_EQ(c.queries_denied, 4u);
}

TEST(DecideQueryTest, OpenModeForwardsAllButDeniedNames) {
  DnsPolicyCounters c;
  Verdict v;
  EXPECT_EQ(DecideQuery(*Policy::Open(), "anything.test", c, &v),
            QueryAction::kForward);
  EXPECT_EQ(v.reason, Reason::kOpen);
  const auto p = MakePolicy("deny *.ads.test\n");
  EXPECT_EQ(DecideQuery(*p, "x.ads.test", c, &v), QueryAction::kNxdomain);
  EXPECT_EQ(v.reason, Reason::kDenyRule);
  EXPECT_EQ(DecideQuery(*p, "ads.test", c), QueryAction::kForward);
  EXPECT_EQ(c.queries_denied, 1u);
}

TEST(DecideQueryTest, EgressNoneDeniesEveryName) {
  const auto p = MakePolicy("egress none\nallow example.com\n");
  DnsPolicyCounters c;
  Verdict v;
  EXPECT_EQ(DecideQuery(*p, "example.com", c, &v), QueryAction::kNxdomain);
  EXPECT_EQ(v.reason, Reason::kEgressNone);
  EXPECT_EQ(c.queries_denied, 1u);
}

// ---- WriteNxdomain ----

TEST(WriteNxdomainTest, TheQuestionWithQrRaAndRcode3) {
  Msg q(0xbeef, /*flags2=*/0x01, /*flags3=*/0x20);  // RD; AD
  q.Question("blocked.allowed.test", kAaaa);
  q.Counts(1, 0, 0, 1);  // an OPT record it had is not repeated
  q.Name("");
  q.Rr(41, 0, [](Msg&) {});
  std::vector<uint8_t> out(512, 0xee);
  const size_t n = WriteNxdomain(q.bytes(), out);
  const size_t question_end = 12 + 22 + 4;
  ASSERT_EQ(n, question_end);
  out.resize(n);
  EXPECT_EQ(out[0], 0xbe);
  EXPECT_EQ(out[1], 0xef);
  EXPECT_EQ(out[2], 0x81);  // QR, QUERY, RD
  EXPECT_EQ(out[3], 0x83);  // RA, NXDOMAIN
  EXPECT_THAT(std::vector<uint8_t>(out.begin() + 4, out.begin() + 12),
              ElementsAre(0, 1, 0, 0, 0, 0, 0, 0));
  EXPECT_TRUE(std::equal(out.begin() + 12, out.end(), q.bytes().begin() + 12));
}

TEST(WriteNxdomainTest, NothingWithoutOneReadableQuestionOrRoom) {
  std::vector<uint8_t> out(512);
  Msg q;
  q.Question("a.test").Counts(1, 0);
  EXPECT_EQ(WriteNxdomain(q.bytes(), std::span<uint8_t>(out).first(23)), 0u);
  EXPECT_EQ(WriteNxdomain(q.bytes(), std::span<uint8_t>(out).first(24)), 24u);
  EXPECT_EQ(WriteNxdomain(std::span(q.bytes()).first(23), out), 0u);
  EXPECT_EQ(WriteNxdomain(std::span(q.bytes()).first(11), out), 0u);
  Msg two;
  two.Question("a.test").Counts(2, 0);
  EXPECT_EQ(WriteNxdomain(two.bytes(), out), 0u);
  Msg pointer;
  pointer.Name("a", 12);
  pointer.U16(1);
  pointer.U16(1);
  pointer.Counts(1, 0);
  EXPECT_EQ(WriteNxdomain(pointer.bytes(), out), 0u);
}

// ---- FilterAnswer ----

class FilterAnswerTest : public ::testing::Test {
 protected:
  // Filters m for `qname` under policy_; returns the new length.
  size_t Filter(Msg& m, std::string_view qname) {
    std::vector<uint8_t>& b = m.bytes();
    const size_t len = b.size();
    b.resize(len + 64, 0xee);  // room past the message, never used
    const size_t n =
        FilterAnswer(*policy_, &pins_, kT0, qname, b, len, counters_);
    EXPECT_TRUE(std::all_of(b.begin() + len, b.end(),
                            [](uint8_t c) { return c == 0xee; }));
    b.resize(n == 0 ? len : n);
    return n;
  }

  std::shared_ptr<const Policy> policy_ = Allowlist();
  PinTable pins_;
  DnsPolicyCounters counters_;
};

TEST_F(FilterAnswerTest, AnAllowedNamesAddressesArePinnedForTheirTtl) {
  Msg m;
  m.Question("www.allowed.test");
  m.A("", 12, "203.0.113.5", 300);
  m.A("", 12, "2001:db8::5", 30);
  m.Counts(1, 2);
  const std::vector<uint8_t> before = m.bytes();
  EXPECT_EQ(Filter(m, "www.allowed.test"), before.size());
  EXPECT_EQ(m.bytes(), before);  // nothing to strip: untouched
  EXPECT_EQ(PinnedFor(pins_, "203.0.113.5"), "www.allowed.test");
  EXPECT_EQ(PinnedFor(pins_, "2001:db8::5"), "www.allowed.test");
  const absl::Duration grace = PinTable::kPinGrace;
  EXPECT_TRUE(PinnedFor(pins_, "2001:db8::5", kT0 + absl::Seconds(29) + grace)
                  .has_value());
  EXPECT_FALSE(PinnedFor(pins_, "2001:db8::5", kT0 + absl::Seconds(31) + grace)
                   .has_value());
  EXPECT_TRUE(PinnedFor(pins_, "203.0.113.5", kT0 + absl::Seconds(299) + grace)
                  .has_value());
  EXPECT_EQ(counters_.answers_pinned, 1u);
  EXPECT_EQ(counters_.addresses_pinned, 2u);
  EXPECT_EQ(counters_.records_stripped, 0u);
}

TEST_F(FilterAnswerTest, TtlsAreCappedAtADayAndZeroStillPinsForTheGrace) {
  Msg m;
  m.Question("example.com");
  m.A("", 12, "203.0.113.1", 10 * 86400);
  m.A("", 12, "203.0.113.2", 0);
  m.A("", 12, "203.0.113.3", 0x80000000u);  // RFC 2181 8: zero
  m.Counts(1, 3);
  ASSERT_NE(Filter(m, "Example.COM."), 0u);
  const absl::Duration grace = PinTable::kPinGrace;
  EXPECT_TRUE(PinnedFor(pins_, "203.0.113.1", kT0 + absl::Hours(23) + grace)
                  .has_value());
  EXPECT_FALSE(PinnedFor(pins_, "203.0.113.1", kT0 + absl::Hours(25) + grace)
                   .has_value());
  EXPECT_TRUE(PinnedFor(pins_, "203.0.113.2", kT0 + grace - absl::Seconds(1))
                  .has_value());
  EXPECT_FALSE(PinnedFor(pins_, "203.0.113.2", kT0 + grace + absl::Seconds(1))
                   .has_value());
  EXPECT_FALSE(PinnedFor(pins_, "203.0.113.3", kT0 + grace + absl::Seconds(1))
                   .has_value());
  EXPECT_EQ(PinnedFor(pins_, "203.0.113.1"), "example.com");
}

// The chain from the question, in any record order and letter case; an
// address of a name outside it is not pinned.
TEST_F(FilterAnswerTest, CnameChainsAreFollowedFromTheQuestion) {
  Msg m;
  m.Question("www.allowed.test");
  m.A("E1.CDN.NET", -1, "203.0.113.7");  // before the CNAMEs naming it
  const size_t edge = m.Cname("", 12, "edge.cdn.net");
  m.Cname("", static_cast<int>(edge), "e1.cdn.net");
  m.A("other.net", -1, "203.0.113.9");
  m.Counts(1, 4);
  ASSERT_EQ(Filter(m, "www.allowed.test"), m.size());
  EXPECT_EQ(PinnedFor(pins_, "203.0.113.7"), "www.allowed.test");
  EXPECT_FALSE(PinnedFor(pins_, "203.0.113.9").has_value());
  EXPECT_EQ(counters_.addresses_pinned, 1u);
}

TEST_F(FilterAnswerTest, ACnameLoopEnds) {
  Msg m;
  m.Question("a.allowed.test");
  const size_t b = m.Cname("", 12, "b.allowed.test");
  m.Cname("", static_cast<int>(b), "a.allowed.test");
  m.A("", static_cast<int>(b), "203.0.113.8");
  m.Counts(1, 3);
  ASSERT_EQ(Filter(m, "a.allowed.test"), m.size());
  EXPECT_EQ(PinnedFor(pins_, "203.0.113.8"), "a.allowed.test");
}

// Additional data for names outside the chain (glue, a second question's
// worth) pins nothing; nor does an answer for a name only open mode
// forwards.
TEST_F(FilterAnswerTest, OnlyTheAnswerSectionOfAnAllowedNamePins) {
  Msg m;
  m.Question("example.com", kMx);
  m.Name("", 12);
  m.Rr(kMx, 300, [](Msg& r) {
    r.U16(10);
    r.Name("mail", 12);
  });
  m.A("", 12, "203.0.113.20");  // the question's own A, in additional
  m.Counts(1, 1, 0, 1);
  ASSERT_EQ(Filter(m, "example.com"), m.size());
  EXPECT_FALSE(PinnedFor(pins_, "203.0.113.20").has_value());
  EXPECT_EQ(counters_.answers_pinned, 0u);

  policy_ = MakePolicy("deny blocked.test\n");
  Msg o;
  o.Question("example.com");
  o.A("", 12, "203.0.113.21");
  o.Counts(1, 1);
  ASSERT_EQ(Filter(o, "example.com"), o.size());
  EXPECT_FALSE(PinnedFor(pins_, "203.0.113.21").has_value());
}

// The rebinding case: an allowed name answering loopback and private
// addresses. They go from every section; 10.9.0.5 stays (a CIDR rule
// allows it), and so does the public address. Records after a removed
// one move down with their pointers.
TEST_F(FilterAnswerTest, SpecialAddressesAreStrippedFromEverySection) {
  Msg m;
  m.Question("www.allowed.test");
  m.A("", 12, "127.0.0.1");
  const size_t cdn = m.Cname("", 12, "cdn.allowed.test");
  m.A("", static_cast<int>(cdn), "10.0.0.1");
  m.A("", static_cast<int>(cdn), "203.0.113.5");
  m.A("", static_cast<int>(cdn), "::ffff:192.168.1.1");  // mapped: judged v4
  m.A("", static_cast<int>(cdn), "10.9.0.5");
  // Authority: an NS whose name later records point to.
  const size_t ns_owner = m.Name("allowed.test");
  size_t ns_name = 0;
  m.Rr(kNs, 300,
       [&](Msg& r) { ns_name = r.Name("ns1", static_cast<int>(ns_owner)); });
  // Additional: the NS's glue, one private and one public, and an OPT.
  m.A("", static_cast<int>(ns_name), "192.168.0.53");
  m.A("", static_cast<int>(ns_name), "fe80::1");
  m.A("", static_cast<int>(ns_name), "198.51.100.53");
  m.Name("");
  m.Rr(41, 0, [](Msg&) {});
  m.Counts(1, 6, 1, 4);
  const size_t before = m.size();
  const size_t n = Filter(m, "www.allowed.test");
  ASSERT_NE(n, 0u);
  EXPECT_EQ(n, before - 3 * 16 - 2 * 28);
  EXPECT_THAT(
      Records(m.bytes()),
      ElementsAre("an www.allowed.test 5 cdn.allowed.test",
                  "an cdn.allowed.test 1 203.0.113.5",
                  "an cdn.allowed.test 1 10.9.0.5",
                  "ns allowed.test 2 ns1.allowed.test",
                  "ar ns1.allowed.test 1 198.51.100.53", "ar . 41 0 octets"));
  EXPECT_EQ(counters_.records_stripped, 5u);
  EXPECT_EQ(PinnedFor(pins_, "203.0.113.5"), "www.allowed.test");
  EXPECT_EQ(PinnedFor(pins_, "10.9.0.5"), "www.allowed.test");
  EXPECT_FALSE(PinnedFor(pins_, "127.0.0.1").has_value());
  EXPECT_FALSE(PinnedFor(pins_, "10.0.0.1").has_value());
  // What is left is a well-formed answer: filtering it again changes
  // nothing.
  const std::vector<uint8_t> once = m.bytes();
  EXPECT_EQ(Filter(m, "www.allowed.test"), once.size());
  EXPECT_EQ(m.bytes(), once);
}

// A pointer in an SOA's RDATA, after a removed record, moves with it.
TEST_F(FilterAnswerTest, PointersInsideRdataAreMovedToo) {
  Msg m;
  m.Question("www.allowed.test", kAaaa);
  m.A("", 12, "::1");
  const size_t zone = m.Name("zone.test");
  m.Rr(kSoa, 300, [&](Msg& r) {
    r.Name("ns", static_cast<int>(zone));
    r.Name("hostmaster", static_cast<int>(zone));
    for (int i = 0; i < 10; ++i) r.U16(0);
  });
  m.Counts(1, 1, 1);
  ASSERT_NE(Filter(m, "www.allowed.test"), 0u);
  EXPECT_THAT(Records(m.bytes()),
              ElementsAre("ns zone.test 6 ns.zone.test hostmaster.zone.test"));
}

// A removed record whose owner is spelled out, and a later record that
// points into it: the answer cannot lose the one and keep the other.
TEST_F(FilterAnswerTest, APointerIntoARemovedNameGivesServfail) {
  Msg m;
  m.Question("www.allowed.test");
  const size_t owner = m.Name("private.allowed.test");
  m.Rr(kA, 300, [](Msg& r) { r.Bytes({10, 0, 0, 1}); });
  m.Name("", static_cast<int>(owner));
  m.Rr(kTxt, 300, [](Msg& r) { r.Bytes({1, 'x'}); });
  m.Counts(1, 0, 0, 2);
  EXPECT_EQ(Filter(m, "www.allowed.test"), 0u);
  EXPECT_EQ(counters_.answers_malformed, 1u);
}

// Open mode denies no special address: the answer passes as it is.
TEST_F(FilterAnswerTest, OpenModeLeavesAnswersAlone) {
  policy_ = Policy::Open();
  Msg m;
  m.Question("localhost.test");
  m.A("", 12, "127.0.0.1");
  m.Counts(1, 1);
  const std::vector<uint8_t> before = m.bytes();
  EXPECT_EQ(Filter(m, "localhost.test"), before.size());
  EXPECT_EQ(m.bytes(), before);
  EXPECT_EQ(pins_.size(), 0u);
}

// Each malformed answer: SERVFAIL (0) for an allowed name; as it is for
// a name the allowlist does not list (a policy replaced in flight).
TEST_F(FilterAnswerTest, MalformedAnswers) {
  struct Case {
    const char* what;
    std::function<void(Msg&)> build;
  };
  const std::vector<Case> cases = {
      {"a record cut short",
       [](Msg& m) {
         m.A("", 12, "203.0.113.1");
         m.Counts(1, 1);
         m.bytes().pop_back();
       }},
      {"more records counted than sent",
       [](Msg& m) {
         m.A("", 12, "203.0.113.1");
         m.Counts(1, 2);
       }},
      {"RDLENGTH past the end",
       [](Msg& m) {
         m.A("", 12, "203.0.113.1");
         m.Counts(1, 1);
         m.bytes()[m.size() - 5] = 9;
       }},
      {"an A of 5 octets",
       [](Msg& m) {
         m.Name("", 12);
         m.Rr(kA, 1, [](Msg& r) { r.Bytes({1, 2, 3, 4, 5}); });
         m.Counts(1, 1);
       }},
      {"a pointer to itself",
       [](Msg& m) {
         const size_t at = m.size();
         m.Name("", static_cast<int>(at));
         m.Rr(kA, 1, [](Msg& r) { r.Bytes({1, 2, 3, 4}); });
         m.Counts(1, 1);
       }},
      {"a pointer forward",
       [](Msg& m) {
         m.Name("", static_cast<int>(m.size() + 2));
         m.Name("x");
         m.Rr(kA, 1, [](Msg& r) { r.Bytes({1, 2, 3, 4}); });
         m.Counts(1, 1);
       }},
      {"a pointer into the header",
       [](Msg& m) {
         m.Name("", 4);
         m.Rr(kA, 1, [](Msg& r) { r.Bytes({1, 2, 3, 4}); });
         m.Counts(1, 1);
       }},
      {"a loop through an earlier record's data",
       [](Msg& m) {
         // A TXT holds a pointer to the next owner, which points at it.
         m.Name("", 12);
         size_t txt = 0;
         m.Rr(kTxt, 1, [&](Msg& r) {
           txt = r.size();
           r.Bytes({0xc0, 0});
         });
         const size_t owner = m.size();
         m.bytes()[txt + 1] = static_cast<uint8_t>(owner);
         m.Name("", static_cast<int>(txt));
         m.Rr(kA, 1, [](Msg& r) { r.Bytes({1, 2, 3, 4}); });
         m.Counts(1, 2);
       }},
      {"a pointer into a type's opaque RDATA",
       [](Msg& m) {
         // Type 254 carries no names (RFC 3597 4): the bytes that read as
         // one there would not move with the records.
         m.Name("", 12);
         size_t data = 0;
         m.Rr(254, 1, [&](Msg& r) { data = r.Name("x", 12); });
         m.Name("", static_cast<int>(data));
         m.Rr(kA, 1, [](Msg& r) { r.Bytes({1, 2, 3, 4}); });
         m.Counts(1, 2);
       }},
      {"a pointer into a record's fixed part",
       [](Msg& m) {
         m.A("", 12, "203.0.113.1");
         m.Name("", static_cast<int>(m.size() - 8));  // its TTL
         m.Rr(kA, 1, [](Msg& r) { r.Bytes({1, 2, 3, 4}); });
         m.Counts(1, 2);
       }},
      {"an extended label type",
       [](Msg& m) {
         m.Bytes({0x41, 0});
         m.Rr(kA, 1, [](Msg& r) { r.Bytes({1, 2, 3, 4}); });
         m.Counts(1, 1);
       }},
      {"a CNAME whose target runs past its RDATA",
       [](Msg& m) {
         m.Name("", 12);
         m.Rr(kCname, 1, [](Msg& r) { r.Name("target", 12); });
         m.Counts(1, 1);
         m.bytes()[m.size() - 10] -= 1;  // RDLENGTH one short
         m.bytes().pop_back();
       }},
      {"an SOA without its 20 octets",
       [](Msg& m) {
         m.Name("", 12);
         m.Rr(kSoa, 1, [](Msg& r) {
           r.Name("", 12);
           r.Name("", 12);
         });
         m.Counts(1, 0, 1);
       }},
      {"a name of 270 octets",
       [](Msg& m) {
         std::string name;
         for (int i = 0; i < 4; ++i) name += std::string(62, 'a') + ".";
         m.Name(name, 12);  // 252 + the question's 18
         m.Rr(kA, 1, [](Msg& r) { r.Bytes({1, 2, 3, 4}); });
         m.Counts(1, 1);
       }},
      {"two questions",
       [](Msg& m) { m.Question("www.allowed.test").Counts(2, 0); }},
      {"a query, not an answer", [](Msg& m) { m.bytes()[2] = 0x01; }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Msg m;
    m.Question("www.allowed.test");
    m.Counts(1, 0);
    c.build(m);
    const std::vector<uint8_t> before = m.bytes();
    counters_ = {};
    EXPECT_EQ(Filter(m, "www.allowed.test"), 0u);
    EXPECT_EQ(counters_.answers_malformed, 1u);
    // The same bytes for a name the allowlist does not list.
    Msg u;
    u.bytes() = before;
    EXPECT_EQ(Filter(u, "www.allowed.test.unlisted"), before.size());
    EXPECT_EQ(u.bytes(), before);
    EXPECT_EQ(pins_.size(), 0u);
  }
}

TEST_F(FilterAnswerTest, AnAnswerToAnotherNameIsMalformed) {
  Msg m;
  m.Question("www.allowed.test");
  m.A("", 12, "203.0.113.1");
  m.Counts(1, 1);
  EXPECT_EQ(Filter(m, "ww2.allowed.test"), 0u);
  EXPECT_EQ(pins_.size(), 0u);
}

// A truncated UDP answer (TC=1) cut in the middle of a record: the
// guest gets the header and question only, TC still set, and asks again
// over TCP.
TEST_F(FilterAnswerTest, ATruncatedAnswerThatDoesNotParseLosesItsRecords) {
  Msg m(0x1234, /*flags2=*/0x83);  // QR, TC, RD
  m.Question("www.allowed.test");
  m.A("", 12, "127.0.0.1");
  m.A("", 12, "203.0.113.1");
  m.Counts(1, 3);
  m.bytes().resize(m.size() - 3);
  EXPECT_EQ(Filter(m, "www.allowed.test"), 12u + 18 + 4);
  EXPECT_EQ(m.bytes()[2], 0x83);
  EXPECT_EQ(m.bytes()[7], 0);  // ANCOUNT
  EXPECT_EQ(pins_.size(), 0u);
}

// Octets after the last record (none from a sane server) stay, after the
// records, when a record before them goes.
TEST_F(FilterAnswerTest, TrailingOctetsFollowTheRecords) {
  Msg m;
  m.Question("www.allowed.test");
  m.A("", 12, "127.0.0.1");
  m.A("", 12, "203.0.113.1");
  m.Counts(1, 2);
  m.Bytes({0xab, 0xcd});
  const size_t n = Filter(m, "www.allowed.test");
  ASSERT_EQ(n, 12u + 22 + 16 + 2);
  EXPECT_EQ(m.bytes()[n - 2], 0xab);
  EXPECT_EQ(m.bytes()[n - 1], 0xcd);
  EXPECT_THAT(Records(m.bytes()),
              ElementsAre("an www.allowed.test 1 203.0.113.1"));
}

TEST_F(FilterAnswerTest, WithoutAPinTableNothingIsPinnedButRebindingGoes) {
  Msg m;
  m.Question("www.allowed.test");
  m.A("", 12, "127.0.0.1");
  m.A("", 12, "203.0.113.1");
  m.Counts(1, 2);
  const size_t len = m.size();
  const size_t n = FilterAnswer(*policy_, nullptr, kT0, "www.allowed.test",
                                m.bytes(), len, counters_);
  EXPECT_EQ(n, len - 16);
  EXPECT_EQ(counters_.records_stripped, 1u);
  EXPECT_EQ(counters_.addresses_pinned, 0u);
}

}  // namespace
}  // namespace netstack::policy
