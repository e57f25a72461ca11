#include "netstack/udp/port_table.h"

#include <vector>

#include "gtest/gtest.h"

namespace netstack::udp {
namespace {

using transport::IpAddress;
using transport::SocketAddress;

IpAddress Ip(const char* text) { return *IpAddress::Parse(text); }
SocketAddress Sa(const char* text) { return *SocketAddress::Parse(text); }

PortBinding Binding(const char* ip, uint16_t port, bool reuse = false) {
  PortBinding b;
  b.local_ip = Ip(ip);
  b.local_port = port;
  b.reuse_address = reuse;
  return b;
}

TEST(PortTableTest, OverlappingAddressesConflict) {
  PortTable t;
  PortBinding specific = Binding("10.0.0.1", 53);
  t.Insert(&specific);
  EXPECT_TRUE(t.Conflicts(Ip("10.0.0.1"), 53, false));
  EXPECT_TRUE(t.Conflicts(Ip("0.0.0.0"), 53, false));  // any covers it
  EXPECT_FALSE(t.Conflicts(Ip("10.0.0.2"), 53, false));
  EXPECT_FALSE(t.Conflicts(Ip("10.0.0.1"), 54, false));

  PortTable u;
  PortBinding any = Binding("0.0.0.0", 53);
  u.Insert(&any);
  EXPECT_TRUE(u.Conflicts(Ip("10.0.0.2"), 53, false));
  EXPECT_TRUE(u.Conflicts(Ip("0.0.0.0"), 53, false));
}

TEST(PortTableTest, ReuseAddressNeedsBothSides) {
  PortTable t;
  PortBinding a = Binding("0.0.0.0", 5000, /*reuse=*/true);
  t.Insert(&a);
  EXPECT_FALSE(t.Conflicts(Ip("0.0.0.0"), 5000, true));
  EXPECT_TRUE(t.Conflicts(Ip("0.0.0.0"), 5000, false));
  PortBinding b = Binding("0.0.0.0", 5000, /*reuse=*/false);
  PortTable u;
  u.Insert(&b);
  EXPECT_TRUE(u.Conflicts(Ip("0.0.0.0"), 5000, true));
}

TEST(PortTableTest, LookupPrefersFourTupleThenAddressThenAny) {
  PortTable t;
  PortBinding any = Binding("0.0.0.0", 4433, true);
  PortBinding addr = Binding("10.0.0.1", 4433, true);
  PortBinding conn = Binding("0.0.0.0", 4433, true);
  conn.remote = Sa("10.0.0.9:1111");
  t.Insert(&any);
  t.Insert(&addr);
  t.Insert(&conn);
  const IpAddress dst = Ip("10.0.0.1");
  EXPECT_EQ(t.Lookup(dst, 4433, Sa("10.0.0.9:1111")), &conn);
  EXPECT_EQ(t.Lookup(dst, 4433, Sa("10.0.0.9:2222")), &addr);
  EXPECT_EQ(t.Lookup(Ip("10.0.0.2"), 4433, Sa("10.0.0.9:2222")), &any);
  EXPECT_EQ(t.Lookup(dst, 4434, Sa("10.0.0.9:1111")), nullptr);

  // Without the wildcard, another destination matches nothing, and the
  // connected binding never takes another peer's datagram.
  t.Remove(&any);
  EXPECT_EQ(t.Lookup(Ip("10.0.0.2"), 4433, Sa("10.0.0.9:2222")), nullptr);
  t.Remove(&addr);
  EXPECT_EQ(t.Lookup(dst, 4433, Sa("10.0.0.9:2222")), nullptr);
  EXPECT_EQ(t.size(), 1u);
  t.Remove(&conn);
  EXPECT_TRUE(t.IsFree(4433));
}

TEST(PortTableTest, TiesGoToTheEarliestBinding) {
  PortTable t;
  PortBinding first = Binding("0.0.0.0", 7, true);
  PortBinding second = Binding("0.0.0.0", 7, true);
  t.Insert(&first);
  t.Insert(&second);
  EXPECT_EQ(t.Lookup(Ip("10.0.0.1"), 7, Sa("10.0.0.9:1")), &first);
  std::vector<PortBinding*> all;
  EXPECT_EQ(t.ForEachMatch(Ip("10.0.0.255"), 7, Sa("10.0.0.9:1"),
                           [&](PortBinding& b) { all.push_back(&b); }),
            2u);
  EXPECT_EQ(all, (std::vector<PortBinding*>{&first, &second}));
  t.Remove(&first);
  EXPECT_EQ(t.Lookup(Ip("10.0.0.1"), 7, Sa("10.0.0.9:1")), &second);
}

TEST(PortTableTest, ForEachMatchSkipsBindingsForOtherAddressesOrPeers) {
  PortTable t;
  PortBinding any = Binding("0.0.0.0", 67, true);
  PortBinding unicast = Binding("10.0.0.1", 67, true);
  PortBinding other_peer = Binding("0.0.0.0", 67, true);
  other_peer.remote = Sa("10.0.0.50:68");
  t.Insert(&any);
  t.Insert(&unicast);
  t.Insert(&other_peer);
  std::vector<PortBinding*> got;
  t.ForEachMatch(Ip("255.255.255.255"), 67, Sa("10.0.0.9:68"),
                 [&](PortBinding& b) { got.push_back(&b); });
  EXPECT_EQ(got, std::vector<PortBinding*>{&any});
}

TEST(PortTableTest, FindFreePortScansFromStartAndWraps) {
  PortTable t;
  PortBinding a = Binding("0.0.0.0", 102);
  PortBinding b = Binding("10.0.0.1", 103);  // any address uses the port
  PortBinding c = Binding("0.0.0.0", 100);
  t.Insert(&a);
  t.Insert(&b);
  t.Insert(&c);
  // From 102: 102 and 103 are taken, wrap to 100 (taken), then 101.
  EXPECT_EQ(t.FindFreePort(100, 103, 102), std::optional<uint16_t>(101));
  EXPECT_EQ(t.FindFreePort(100, 103, 101), std::optional<uint16_t>(101));
  PortBinding d = Binding("0.0.0.0", 101);
  t.Insert(&d);
  EXPECT_EQ(t.FindFreePort(100, 103, 100), std::nullopt);
  t.Remove(&c);
  EXPECT_EQ(t.FindFreePort(100, 103, 103), std::optional<uint16_t>(100));
  // The whole 16-bit range, ending at 65535, wraps without overflow.
  PortBinding top = Binding("0.0.0.0", 65535);
  t.Insert(&top);
  EXPECT_EQ(t.FindFreePort(65534, 65535, 65535),
            std::optional<uint16_t>(65534));
}

}  // namespace
}  // namespace netstack::udp
