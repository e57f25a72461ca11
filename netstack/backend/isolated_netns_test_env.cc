// Linked into every in-process test of the backend that opens host
// sockets: before any test runs, the process moves into a network
// namespace of its own (unshare, as root) with only `lo` up, and asserts
// that it holds no other interface and no route but loopback's. So a
// flow a test relays can reach nothing beyond this process's namespace,
// whatever address it names. A failed assertion here fails the binary
// before its first test.
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace netstack::backend {
namespace {

// Lines of /proc/net/route (IPv4) or /proc/net/ipv6_route naming a device
// other than lo.
int NonLoopbackRoutes(const char* path, int device_column) {
  std::ifstream in(path);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string field;
    for (int i = 0; i <= device_column && fields >> field; ++i) {
    }
    if (!field.empty() && field != "lo" && field != "Iface") ++n;
  }
  return n;
}

class IsolatedNetns : public ::testing::Environment {
 public:
  void SetUp() override {
    ASSERT_EQ(unshare(CLONE_NEWNET), 0)
        << "needs root for a network namespace of its own: "
        << std::strerror(errno);
    const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
    ifr.ifr_flags = IFF_UP | IFF_LOOPBACK | IFF_RUNNING;
    const int rc = ioctl(fd, SIOCSIFFLAGS, &ifr);
    close(fd);
    ASSERT_EQ(rc, 0) << "lo up: " << std::strerror(errno);
    struct if_nameindex* names = if_nameindex();
    ASSERT_NE(names, nullptr);
    int interfaces = 0;
    for (struct if_nameindex* i = names; i->if_index != 0; ++i) {
      EXPECT_STREQ(i->if_name, "lo") << "an interface other than lo";
      ++interfaces;
    }
    if_freenameindex(names);
    ASSERT_EQ(interfaces, 1);
    ASSERT_EQ(NonLoopbackRoutes("/proc/net/route", 0), 0);
    ASSERT_EQ(NonLoopbackRoutes("/proc/net/ipv6_route", 9), 0);
  }
};

const auto* const kIsolatedNetns =
    ::testing::AddGlobalTestEnvironment(new IsolatedNetns);

}  // namespace
}  // namespace netstack::backend
