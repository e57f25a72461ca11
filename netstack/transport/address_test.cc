#include "netstack/transport/address.h"

#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"

namespace netstack::transport {
namespace {

TEST(SocketAddressTest, ParsesAndFormatsBothFamilies) {
  auto a = SocketAddress::Parse("10.0.0.1:80");
  ASSERT_TRUE(a.has_value());
  EXPECT_TRUE(a->ip.is_v4());
  EXPECT_EQ(a->port, 80);
  EXPECT_EQ(a->ToString(), "10.0.0.1:80");
  auto b = SocketAddress::Parse("[fd00::1]:65535");
  ASSERT_TRUE(b.has_value());
  EXPECT_TRUE(b->ip.is_v6());
  EXPECT_EQ(b->ToString(), "[fd00::1]:65535");
}

TEST(SocketAddressTest, RejectsBadInput) {
  for (const char* bad : {"", "10.0.0.1", "10.0.0.1:", "10.0.0.1:65536",
                          "fd00::1:80", "[fd00::1]80", "[fd00::1]:x",
                          "host:80", "10.0.0.1:-1"}) {
    EXPECT_FALSE(SocketAddress::Parse(bad).has_value()) << bad;
  }
}

TEST(FourTupleTest, HashesDistinguishFamiliesAndPorts) {
  absl::flat_hash_set<FourTuple> set;
  const auto v4 = *IpAddress::Parse("10.0.0.1");
  const auto v6 = *IpAddress::Parse("::ffff:10.0.0.1");
  set.insert(FourTuple{{v4, 1}, {v4, 2}});
  set.insert(FourTuple{{v4, 2}, {v4, 1}});
  set.insert(FourTuple{{v6, 1}, {v6, 2}});
  EXPECT_EQ(set.size(), 3u);
  EXPECT_TRUE(set.contains(FourTuple{{v4, 1}, {v4, 2}}));
  EXPECT_FALSE(IpAddress(v4) == IpAddress(v6));
  EXPECT_TRUE(IpAddress().IsUnspecified());
}

}  // namespace
}  // namespace netstack::transport
