#include "netstack/sandbox/pid_namespace_fence.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "link/fd_util.h"

namespace netstack::sandbox {
namespace {

using link::UniqueFd;

// Where the client that connects runs, against a fence on the PID
// namespace of a child of ours (CMD's init, here a plain process).
enum class Where {
  kInit,            // the fenced namespace's first process
  kChildOfInit,     // a process it forked
  kNested,          // pid 1 of a namespace made inside the fenced one
  kOtherNamespace,  // a namespace below ours that is not the fenced one
  kHere,            // this process (the operator)
};

std::string Name(Where w) {
  switch (w) {
    case Where::kInit:
      return "Init";
    case Where::kChildOfInit:
      return "ChildOfInit";
    case Where::kNested:
      return "Nested";
    case Where::kOtherNamespace:
      return "OtherNamespace";
    case Where::kHere:
      return "Here";
  }
  return "?";
}

// fork() into a new PID namespace, where the child is pid 1.
pid_t CloneNewPid() {
  return static_cast<pid_t>(syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, nullptr,
                                    nullptr, nullptr, nullptr));
}

// A listening socket, and helpers that fork clients into namespaces.
class FenceFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (PID namespaces)";
    addr_.sun_family = AF_UNIX;
    const std::string name = absl::StrCat("nst-fence-test-", getpid());
    std::memcpy(addr_.sun_path + 1, name.data(), name.size());
    addr_len_ = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 +
                                       name.size());
    listener_ = UniqueFd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    ASSERT_EQ(
        bind(listener_.get(), reinterpret_cast<sockaddr*>(&addr_), addr_len_),
        0)
        << std::strerror(errno);
    ASSERT_EQ(listen(listener_.get(), 8), 0);
    int ready[2];
    int hold[2];
    ASSERT_EQ(pipe2(ready, O_CLOEXEC), 0);
    ASSERT_EQ(pipe2(hold, O_CLOEXEC), 0);
    ready_r_ = UniqueFd(ready[0]);
    ready_w_ = UniqueFd(ready[1]);
    hold_r_ = UniqueFd(hold[0]);
    hold_w_ = UniqueFd(hold[1]);
  }

  void TearDown() override {
    hold_w_.reset();  // every child may end now
    for (pid_t pid : children_) waitpid(pid, nullptr, 0);
  }

  // In a child: connects, says so, and stays until the test ends (so that
  // its namespace can still be looked at).
  void ConnectAndHold() {
    hold_w_.reset();
    const int s = socket(AF_UNIX, SOCK_STREAM, 0);
    if (connect(s, reinterpret_cast<sockaddr*>(&addr_), addr_len_) != 0) {
      _exit(2);
    }
    (void)!write(ready_w_.get(), "c", 1);
    char b;
    (void)!read(hold_r_.get(), &b, 1);
  }
  // In a child: stays until the test ends, reaping its own children.
  void Hold() {
    hold_w_.reset();
    char b;
    (void)!read(hold_r_.get(), &b, 1);
    while (wait(nullptr) > 0) {
    }
  }
  // A child of ours in a new PID namespace running `body`, then Hold().
  pid_t Spawn(const std::function<void()>& body) {
    const pid_t pid = CloneNewPid();
    if (pid == 0) {
      body();
      Hold();
      _exit(0);
    }
    if (pid > 0) children_.push_back(pid);
    return pid;
  }
  // Forks inside a child: the grandchild runs `body` and holds.
  void ForkThen(const std::function<void()>& body) {
    if (fork() == 0) {
      body();
      Hold();
      _exit(0);
    }
  }

  sockaddr_un addr_{};
  socklen_t addr_len_ = 0;
  UniqueFd listener_;
  UniqueFd ready_r_, ready_w_, hold_r_, hold_w_;
  std::vector<pid_t> children_;
};

class PidNamespaceFenceTest
    : public FenceFixture,
      public ::testing::WithParamInterface<std::tuple<Where, bool>> {};

// The parameter: force_proc.
class GoneClientTest : public FenceFixture,
                       public ::testing::WithParamInterface<bool> {};

// Inside the fenced namespace, or nested below it: refused, saying so.
// Elsewhere (this process, a namespace beside it): admitted. Both ways
// (the kernel's pid translation where it has it, and /proc) give the same
// answers.
TEST_P(PidNamespaceFenceTest, RefusesThePeersInsideOnly) {
  const auto [where, force_proc] = GetParam();
  const bool inside = where == Where::kInit || where == Where::kChildOfInit ||
                      where == Where::kNested;
  const pid_t init = Spawn([&] {
    if (where == Where::kInit) ConnectAndHold();
    if (where == Where::kChildOfInit) ForkThen([&] { ConnectAndHold(); });
    if (where == Where::kNested) {
      if (CloneNewPid() == 0) {
        ConnectAndHold();
        _exit(0);
      }
    }
  });
  ASSERT_GT(init, 0) << std::strerror(errno);
  if (where == Where::kOtherNamespace) {
    ASSERT_GT(Spawn([&] { ConnectAndHold(); }), 0);
  }
  UniqueFd here;
  if (where == Where::kHere) {
    here = UniqueFd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    ASSERT_EQ(
        connect(here.get(), reinterpret_cast<sockaddr*>(&addr_), addr_len_), 0);
  } else {
    char b;
    ASSERT_EQ(read(ready_r_.get(), &b, 1), 1) << "the client did not connect";
  }

  PidNamespaceFence::Options o;
  o.force_proc = force_proc;
  auto fence = PidNamespaceFence::Below(init, o);
  ASSERT_TRUE(fence.ok()) << fence.status();
  if (force_proc) {
    EXPECT_EQ((*fence)->method(), PidNamespaceFence::Method::kProc);
    EXPECT_GE((*fence)->proc_dir_fd(), 0);
  } else if ((*fence)->method() == PidNamespaceFence::Method::kProc) {
    std::fprintf(stderr,
                 "this kernel has no NS_GET_TGID_IN_PIDNS: the "
                 "/proc way only\n");
  } else {
    EXPECT_EQ((*fence)->proc_dir_fd(), -1);
  }
  UniqueFd peer(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
  ASSERT_TRUE(peer.valid());
  const absl::Status s = (*fence)->CheckPeer(peer.get());
  if (inside) {
    EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
    EXPECT_NE(s.message().find("inside CMD's PID namespace"), std::string::npos)
        << s;
  } else {
    EXPECT_TRUE(s.ok()) << s;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Peers, PidNamespaceFenceTest,
    ::testing::Combine(::testing::Values(Where::kInit, Where::kChildOfInit,
                                         Where::kNested, Where::kOtherNamespace,
                                         Where::kHere),
                       ::testing::Bool()),
    [](const auto& info) {
      return Name(std::get<0>(info.param)) +
             (std::get<1>(info.param) ? "Proc" : "Translate");
    });

// A client that connected and is gone (reaped) by the time it is
// checked: its pid could be anyone's now, so it is refused. (Before Linux
// 6.13 the translating way cannot tell, and admits it.)
TEST_P(GoneClientTest, IsRefused) {
  const bool force_proc = GetParam();
  const pid_t init = Spawn([] {});
  ASSERT_GT(init, 0);
  const pid_t gone = fork();
  if (gone == 0) {
    const int s = socket(AF_UNIX, SOCK_STREAM, 0);
    _exit(connect(s, reinterpret_cast<sockaddr*>(&addr_), addr_len_) == 0 ? 0
                                                                          : 1);
  }
  ASSERT_GT(gone, 0);
  int status = 0;
  ASSERT_EQ(waitpid(gone, &status, 0), gone);
  ASSERT_EQ(status, 0);
  PidNamespaceFence::Options o;
  o.force_proc = force_proc;
  auto fence = PidNamespaceFence::Below(init, o);
  ASSERT_TRUE(fence.ok()) << fence.status();
  UniqueFd peer(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
  ASSERT_TRUE(peer.valid());
  const absl::Status s = (*fence)->CheckPeer(peer.get());
  UniqueFd self(static_cast<int>(syscall(SYS_pidfd_open, getpid(), 0)));
  unsigned char info[64] = {1};  // PIDFD_INFO_PID
  if (!force_proc &&
      ioctl(self.get(), 0xc040ff0b /* PIDFD_GET_INFO */, info) != 0) {
    GTEST_SKIP() << "no PIDFD_GET_INFO (Linux 6.13): " << s;
  }
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
}

INSTANTIATE_TEST_SUITE_P(Ways, GoneClientTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "Proc" : "Translate";
                         });

// Nothing to fence: our own namespace, and a process that is not there.
TEST(PidNamespaceFenceSetup, SaysWhyItCannotFence) {
  auto own = PidNamespaceFence::Below(getpid());
  EXPECT_TRUE(absl::IsFailedPrecondition(own.status())) << own.status();
  EXPECT_NE(own.status().message().find("netstackd's own PID namespace"),
            std::string::npos)
      << own.status();
  // Past pid_max (4194304 at most).
  auto none = PidNamespaceFence::Below(5000000);
  EXPECT_TRUE(absl::IsNotFound(none.status())) << none.status();
  PidNamespaceFence::Options o;
  o.force_proc = true;
  none = PidNamespaceFence::Below(5000000, o);
  EXPECT_TRUE(absl::IsNotFound(none.status())) << none.status();
}

}  // namespace
}  // namespace netstack::sandbox
