#include "link/netns.h"

#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "link/fd_test_util.h"
#include "link/fd_util.h"

namespace netstack::link {
namespace {

using testing::TestNetns;

ino_t InodeOf(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return 0;
  return st.st_ino;
}

ino_t ThreadNetns() { return InodeOf("/proc/thread-self/ns/net"); }

// The namespace a socket belongs to (SIOCGSKNS gives an fd for it).
ino_t SocketNetns(int sock) {
  UniqueFd ns(::ioctl(sock, SIOCGSKNS));
  if (!ns.valid()) return 0;
  struct stat st;
  if (::fstat(ns.get(), &st) != 0) return 0;
  return st.st_ino;
}

absl::StatusOr<int> OpenUdp() {
  const int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return ErrnoStatus(errno, "socket");
  return s;
}

class NetnsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(testing::IsRoot()) << testing::kNeedRoot;
    auto ns = TestNetns::Create();
    ASSERT_TRUE(ns.ok()) << ns.status();
    ns_ = std::move(*ns);
  }
  void TearDown() override { ns_.reset(); }

  std::unique_ptr<TestNetns> ns_;
};

TEST_F(NetnsTest, SocketIsCreatedInsideAndThreadSwitchesBack) {
  const ino_t home = ThreadNetns();
  const ino_t target = InodeOf(absl::StrCat(kNetnsDir, "/", ns_->name()));
  ASSERT_NE(home, 0u);
  ASSERT_NE(target, home);
  ino_t seen_inside = 0;
  absl::StatusOr<int> fd =
      OpenInNetns(ns_->name(), [&]() -> absl::StatusOr<int> {
        seen_inside = ThreadNetns();
        return OpenUdp();
      });
  ASSERT_TRUE(fd.ok()) << fd.status();
  UniqueFd sock(*fd);
  EXPECT_EQ(seen_inside, target);
  EXPECT_EQ(SocketNetns(sock.get()), target);  // the socket stays there
  EXPECT_EQ(ThreadNetns(), home);              // the thread came back
}

TEST_F(NetnsTest, SwitchesBackWhenOpenFails) {
  const ino_t home = ThreadNetns();
  absl::StatusOr<int> fd =
      OpenInNetns(ns_->name(), []() -> absl::StatusOr<int> {
        return absl::InternalError("open failed on purpose");
      });
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.status().message(), "open failed on purpose");
  EXPECT_EQ(ThreadNetns(), home);
}

TEST_F(NetnsTest, OtherThreadsStayWhereTheyAre) {
  const ino_t home = ThreadNetns();
  std::atomic<int> step{0};
  ino_t other = 0;
  std::thread t([&] {
    while (step.load() != 1) std::this_thread::yield();
    other = ThreadNetns();  // while the main thread is inside
    step.store(2);
  });
  ino_t inside = 0;
  absl::Status s = RunInNetns(ns_->name(), [&]() -> absl::Status {
    inside = ThreadNetns();
    step.store(1);
    while (step.load() != 2) std::this_thread::yield();
    return absl::OkStatus();
  });
  t.join();
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_NE(inside, home);
  EXPECT_EQ(other, home);
  EXPECT_EQ(ThreadNetns(), home);
}

TEST(NetnsErrorsTest, MissingNamespaceIsNotFound) {
  ASSERT_TRUE(testing::IsRoot()) << testing::kNeedRoot;
  const std::string name = testing::MissingNetnsName();
  bool ran = false;
  absl::StatusOr<int> fd = OpenInNetns(name, [&]() -> absl::StatusOr<int> {
    ran = true;
    return OpenUdp();
  });
  ASSERT_FALSE(fd.ok());
  EXPECT_FALSE(ran);
  EXPECT_TRUE(absl::IsNotFound(fd.status())) << fd.status();
  EXPECT_NE(std::string(fd.status().message())
                .find(absl::StrCat("netns '", name, "' does not exist")),
            std::string::npos)
      << fd.status();
}

TEST(NetnsErrorsTest, BadNamesAreRejected) {
  for (const char* name : {"..", ".", "a/b", "../../proc/1/ns/net"}) {
    absl::Status s =
        RunInNetns(name, []() -> absl::Status { return absl::OkStatus(); });
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << name << ": " << s;
  }
}

TEST(NetnsErrorsTest, EmptyNameRunsHere) {
  const ino_t home = ThreadNetns();
  ino_t inside = 0;
  absl::Status s = RunInNetns("", [&]() -> absl::Status {
    inside = ThreadNetns();
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(inside, home);
}

}  // namespace
}  // namespace netstack::link
