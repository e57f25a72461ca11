#include "netstack/backend/dns_config.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace netstack::backend {
namespace {

using transport::SocketAddress;

std::string S(const absl::StatusOr<SocketAddress>& a) {
  return a.ok() ? a->ToString() : "error";
}

TEST(ParseDnsUpstream, AcceptsAddressesWithAndWithoutPorts) {
  EXPECT_EQ(S(ParseDnsUpstream("127.0.0.53")), "127.0.0.53:53");
  EXPECT_EQ(S(ParseDnsUpstream("10.0.0.1:5353")), "10.0.0.1:5353");
  EXPECT_EQ(S(ParseDnsUpstream("fd00::1")), "[fd00::1]:53");
  EXPECT_EQ(S(ParseDnsUpstream("[fd00::1]")), "[fd00::1]:53");
  EXPECT_EQ(S(ParseDnsUpstream("[fd00::1]:5353")), "[fd00::1]:5353");
  EXPECT_EQ(S(ParseDnsUpstream("::1")), "[::1]:53");
}

TEST(ParseDnsUpstream, RejectsWhatIsNotAnAddressAndPort) {
  for (const char* bad :
       {"", "dns.example", "10.0.0.1:", "10.0.0.1:0", "10.0.0.1:65536",
        "10.0.0.1:53x", "10.0.0.1:+53", "[10.0.0.1]:53", "[fd00::1", "[fd00::1]53",
        "[fd00::1]:", "fe80::1%eth0", "0.0.0.0", "::", "1.2.3.4:99999999999",
        "1.2.3"}) {
    EXPECT_FALSE(ParseDnsUpstream(bad).ok()) << bad;
  }
}

TEST(ParseResolvConf, TakesNameserversInOrderAndSkipsTheRest) {
  std::vector<std::string> skipped;
  const auto got = ParseResolvConf(
      "# generated\r\n"
      "search example.com\n"
      "nameserver 127.0.0.53\r\n"
      "\tnameserver\t10.0.0.1   # the office\n"
      "nameserver fe80::1%eth0\n"
      ";nameserver 10.9.9.9\n"
      "nameserver\n"
      "nameserver dns.example\n"
      "nameserver 127.0.0.53\n"
      "options edns0 trust-ad\n"
      "nameserverx 10.1.1.1\n"
      "nameserver fd00::1",  // no final newline
      &skipped);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].ToString(), "127.0.0.53:53");
  EXPECT_EQ(got[1].ToString(), "10.0.0.1:53");
  EXPECT_EQ(got[2].ToString(), "[fd00::1]:53");
  EXPECT_EQ(skipped, (std::vector<std::string>{"fe80::1%eth0", "dns.example"}));
}

TEST(ParseResolvConf, HostileFilesAreBounded) {
  std::string text;
  for (int i = 0; i < 1000; ++i) {
    text += "nameserver 10.0." + std::to_string(i / 250) + "." +
            std::to_string(i % 250 + 1) + "\n";
  }
  text += std::string(100000, 'x');  // one endless line
  text.push_back('\0');
  text += "nameserver 10.0.0.1\n";
  std::vector<std::string> skipped;
  EXPECT_EQ(ParseResolvConf(text, &skipped).size(), kMaxNameservers);
  EXPECT_EQ(skipped.size(), 1000 - kMaxNameservers);
  EXPECT_TRUE(ParseResolvConf("").empty());
  EXPECT_TRUE(ParseResolvConf(std::string(5000, '\n')).empty());
}

TEST(ReadResolvConf, MissingFileIsAnError) {
  EXPECT_FALSE(ReadResolvConf("/nonexistent/resolv.conf").ok());
}

}  // namespace
}  // namespace netstack::backend
