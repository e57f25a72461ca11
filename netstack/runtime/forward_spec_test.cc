#include "netstack/runtime/forward_spec.h"

#include "gtest/gtest.h"

namespace netstack::runtime {
namespace {

std::vector<ForwardRule> Rules(std::string_view spec, bool udp = false) {
  auto r = ParseForwardSpec(udp, spec);
  EXPECT_TRUE(r.ok()) << spec << ": " << r.status();
  return r.ok() ? *r : std::vector<ForwardRule>{};
}

std::string Error(std::string_view spec, bool udp = false) {
  auto r = ParseForwardSpec(udp, spec);
  EXPECT_FALSE(r.ok()) << spec;
  return r.ok() ? "" : std::string(r.status().message());
}

TEST(ParseForwardSpec, OnePortGoesToTheSamePortOnEveryAddress) {
  const auto r = Rules("8080");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].host_port, 8080);
  EXPECT_EQ(r[0].guest_port, 8080);
  EXPECT_FALSE(r[0].bind.has_value());
  EXPECT_FALSE(r[0].udp);
  EXPECT_TRUE(r[0].unix_path.empty());
}

TEST(ParseForwardSpec, HostToGuestPort) {
  const auto r = Rules("8080:80", /*udp=*/true);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].host_port, 8080);
  EXPECT_EQ(r[0].guest_port, 80);
  EXPECT_TRUE(r[0].udp);
}

TEST(ParseForwardSpec, BindAddressesOfBothFamilies) {
  auto r = Rules("127.0.0.1/8080:80");
  ASSERT_EQ(r.size(), 1u);
  ASSERT_TRUE(r[0].bind.has_value());
  EXPECT_EQ(r[0].bind->ToString(), "127.0.0.1");
  r = Rules("::1/8080");
  ASSERT_EQ(r.size(), 1u);
  ASSERT_TRUE(r[0].bind.has_value());
  EXPECT_TRUE(r[0].bind->is_v6());
  EXPECT_EQ(r[0].guest_port, 8080);
  r = Rules("[2001:db8::1]/22:2222");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].bind->ToString(), "2001:db8::1");
  EXPECT_EQ(r[0].guest_port, 2222);
}

TEST(ParseForwardSpec, RangesMapPortByPort) {
  auto r = Rules("8000-8002:9000-9002");
  ASSERT_EQ(r.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(r[i].host_port, 8000 + i);
    EXPECT_EQ(r[i].guest_port, 9000 + i);
  }
  // A single guest port starts the guest range.
  r = Rules("10.0.0.1/8000-8002:9000");
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[2].guest_port, 9002);
  EXPECT_EQ(r[2].bind->ToString(), "10.0.0.1");
  // No guest port: the same range.
  r = Rules("5000-5001");
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[1].guest_port, 5001);
}

TEST(ParseForwardSpec, UnixSocketToAGuestPort) {
  const auto r = Rules("unix:/run/app.sock:80");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].unix_path, "/run/app.sock");
  EXPECT_EQ(r[0].guest_port, 80);
  // A path with a colon in it: the port is after the last one.
  EXPECT_EQ(Rules("unix:/tmp/a:b:8080")[0].unix_path, "/tmp/a:b");
}

TEST(ParseForwardSpec, BadSpecsSayWhatIsWrong) {
  EXPECT_EQ(Error(""), "no port");
  EXPECT_EQ(Error("0"), "bad host port '0' (want 1-65535)");
  EXPECT_EQ(Error("65536"), "bad host port '65536' (want 1-65535)");
  EXPECT_EQ(Error("80x"), "bad host port '80x' (want 1-65535)");
  EXPECT_EQ(Error("8080:"), "bad guest port '' (want 1-65535)");
  EXPECT_EQ(Error("9000-8000"), "host range 9000-8000 ends before it starts");
  EXPECT_EQ(Error("8000-8002:9000-9001"),
            "the host range has 3 ports and the guest range 2");
  EXPECT_EQ(Error("65000-65010:65530"),
            "the guest range would pass port 65535");
  EXPECT_EQ(Error("1-2000"), "2000 ports; one spec may name at most 1024");
  EXPECT_EQ(Error("localhost/80"), "'localhost' is not an IP address");
  EXPECT_EQ(Error("unix:/x:80", /*udp=*/true), "unix: forwards are TCP only");
  EXPECT_EQ(Error("unix:80"), "want unix:PATH:GUEST_PORT");
  EXPECT_EQ(Error("unix:/x:0"), "bad guest port (want 1-65535)");
  EXPECT_EQ(Error("8000-:80"), "bad host range end ''");
}

}  // namespace
}  // namespace netstack::runtime
