#include "tools/splice_proxy/socket_address.h"

#include <netinet/in.h>
#include <sys/un.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace netstack::tools {
namespace {

using ::testing::HasSubstr;

std::string RoundTrip(const std::string& text) {
  auto a = SocketAddress::Parse(text);
  EXPECT_TRUE(a.ok()) << text << ": " << a.status();
  return a.ok() ? a->ToString() : "";
}

std::string Error(const std::string& text) {
  auto a = SocketAddress::Parse(text);
  EXPECT_FALSE(a.ok()) << text << " parsed as " << a->ToString();
  return a.ok() ? "" : std::string(a.status().message());
}

TEST(SocketAddressTest, Ipv4) {
  auto a = SocketAddress::Parse("127.0.0.1:8080");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->family(), AF_INET);
  EXPECT_EQ(a->port(), 8080);
  EXPECT_EQ(a->length(), sizeof(sockaddr_in));
  EXPECT_FALSE(a->is_wildcard());
  EXPECT_EQ(a->ToString(), "127.0.0.1:8080");
  EXPECT_TRUE(SocketAddress::Parse("0.0.0.0:0")->is_wildcard());
  EXPECT_TRUE(SocketAddress::Parse("127.1.2.3:1")->is_loopback());
  EXPECT_FALSE(SocketAddress::Parse("128.0.0.1:1")->is_loopback());
  EXPECT_FALSE(SocketAddress::Parse("unix:/x")->is_loopback());
  EXPECT_EQ(RoundTrip("255.255.255.255:65535"), "255.255.255.255:65535");
}

TEST(SocketAddressTest, Ipv6) {
  auto a = SocketAddress::Parse("[::1]:443");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->family(), AF_INET6);
  EXPECT_EQ(a->port(), 443);
  EXPECT_EQ(a->length(), sizeof(sockaddr_in6));
  EXPECT_EQ(RoundTrip("[0:0:0:0:0:0:0:1]:443"), "[::1]:443");
  EXPECT_TRUE(SocketAddress::Parse("[::]:1")->is_wildcard());
  EXPECT_TRUE(SocketAddress::Parse("[::1]:1")->is_loopback());
  EXPECT_FALSE(SocketAddress::Parse("[::2]:1")->is_loopback());
  // Scope by index; index 1 is the loopback interface, printed by name.
  EXPECT_EQ(RoundTrip("[fe80::1%1]:80"), "[fe80::1%lo]:80");
  EXPECT_EQ(RoundTrip("[fe80::1%lo]:80"), "[fe80::1%lo]:80");
}

TEST(SocketAddressTest, Unix) {
  auto a = SocketAddress::Parse("unix:/tmp/x.sock");
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->is_unix());
  EXPECT_FALSE(a->is_abstract());
  EXPECT_EQ(a->unix_path(), "/tmp/x.sock");
  EXPECT_EQ(a->port(), 0);
  EXPECT_EQ(a->length(), offsetof(sockaddr_un, sun_path) + 12);
  EXPECT_EQ(a->ToString(), "unix:/tmp/x.sock");
  EXPECT_EQ(RoundTrip("unix:relative/path"), "unix:relative/path");
  const std::string longest(SocketAddress::kMaxUnixPath, 'p');
  EXPECT_EQ(RoundTrip("unix:" + longest), "unix:" + longest);
}

TEST(SocketAddressTest, UnixAbstract) {
  auto a = SocketAddress::Parse("unix:@proxy");
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->is_abstract());
  EXPECT_EQ(a->unix_path(), "");
  // No NUL terminator: the name is exactly the bytes after sun_path[0].
  EXPECT_EQ(a->length(), offsetof(sockaddr_un, sun_path) + 6);
  EXPECT_EQ(a->ToString(), "unix:@proxy");
}

TEST(SocketAddressTest, UnnamedUnixPeer) {
  sockaddr_un un = {};
  un.sun_family = AF_UNIX;
  const auto a = SocketAddress::FromSockaddr(
      reinterpret_cast<const sockaddr*>(&un), sizeof(sa_family_t));
  EXPECT_EQ(a.ToString(), "unix:(unnamed)");
}

TEST(SocketAddressTest, Errors) {
  EXPECT_THAT(Error(""), HasSubstr("empty"));
  EXPECT_THAT(Error("127.0.0.1"), HasSubstr("no ':PORT'"));
  EXPECT_THAT(Error("127.0.0.1:"), HasSubstr("port is not a number"));
  EXPECT_THAT(Error("127.0.0.1:65536"), HasSubstr("port is not a number"));
  EXPECT_THAT(Error("127.0.0.1:-1"), HasSubstr("port is not a number"));
  EXPECT_THAT(Error("127.0.0.1:8o"), HasSubstr("port is not a number"));
  EXPECT_THAT(Error("127.0.0.1:000080"), HasSubstr("port is not a number"));
  EXPECT_THAT(Error("1.2.3:80"), HasSubstr("'1.2.3' is not an IPv4 address"));
  EXPECT_THAT(Error("localhost:80"), HasSubstr("host names are not resolved"));
  EXPECT_THAT(Error(":80"), HasSubstr("no address before ':'"));
  EXPECT_THAT(Error("::1:80"), HasSubstr("needs brackets"));
  EXPECT_THAT(Error("[::1]80"), HasSubstr("no ':PORT' after ']'"));
  EXPECT_THAT(Error("[::1"), HasSubstr("no ']'"));
  EXPECT_THAT(Error("[::g]:80"), HasSubstr("not an IPv6 address"));
  EXPECT_THAT(Error("[1.2.3.4]:80"), HasSubstr("not an IPv6 address"));
  EXPECT_THAT(Error("[fe80::1%nosuchif0]:80"),
              HasSubstr("no interface named 'nosuchif0'"));
  EXPECT_THAT(Error("unix:"), HasSubstr("empty unix: path"));
  EXPECT_THAT(Error("unix:@"), HasSubstr("empty abstract name"));
  EXPECT_THAT(
      Error("unix:" + std::string(SocketAddress::kMaxUnixPath + 1, 'p')),
      HasSubstr("the limit is 107"));
  // Every message shows the accepted forms.
  EXPECT_THAT(Error("nonsense"),
              HasSubstr("want ADDR:PORT, [V6ADDR]:PORT or unix:PATH"));
}

TEST(SocketAddressTest, Equality) {
  EXPECT_EQ(*SocketAddress::Parse("[::1]:80"),
            *SocketAddress::Parse("[0::1]:80"));
  EXPECT_FALSE(*SocketAddress::Parse("[::1]:80") ==
               *SocketAddress::Parse("[::1]:81"));
  EXPECT_FALSE(*SocketAddress::Parse("127.0.0.1:80") ==
               *SocketAddress::Parse("127.0.0.2:80"));
  EXPECT_EQ(*SocketAddress::Parse("unix:/a"), *SocketAddress::Parse("unix:/a"));
  EXPECT_FALSE(*SocketAddress::Parse("unix:/a") ==
               *SocketAddress::Parse("unix:@a"));
}

}  // namespace
}  // namespace netstack::tools
