#include "bench/splice_bench_util.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <utility>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace netstack::bench {
namespace {

struct StartPipe {
  Fd read_end;
  Fd write_end;
};

StartPipe MakeStartPipe() {
  int fds[2];
  EXPECT_EQ(pipe2(fds, O_CLOEXEC), 0) << strerror(errno);
  return StartPipe{Fd(fds[0]), Fd(fds[1])};
}

bool Reaped(pid_t pid) {
  errno = 0;
  return waitpid(pid, nullptr, WNOHANG) < 0 && errno == ECHILD;
}

ChildOptions Options(ChildRole role, size_t chunk, uint64_t total) {
  ChildOptions o;
  o.role = role;
  o.chunk_size = chunk;
  o.total_bytes = total;
  return o;
}

// The writer and the reader talk directly over one connection: the
// harness without a relay.
void DirectTransfer(SocketKind kind, size_t chunk, uint64_t total) {
  absl::StatusOr<SocketPair> pair = MakeSocketPair(kind, "");
  ASSERT_TRUE(pair.ok()) << pair.status();
  StartPipe start = MakeStartPipe();
  absl::StatusOr<ChildProcess> writer = ChildProcess::Spawn(
      Options(ChildRole::kWriter, chunk, total), std::move(pair->relay_end),
      std::move(start.read_end));
  ASSERT_TRUE(writer.ok()) << writer.status();
  absl::StatusOr<ChildProcess> reader =
      ChildProcess::Spawn(Options(ChildRole::kReader, chunk, total),
                          std::move(pair->child_end), Fd());
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_EQ(write(start.write_end.get(), "g", 1), 1);
  const pid_t writer_pid = writer->pid();
  absl::StatusOr<ChildResult> w = writer->Wait(absl::Seconds(30));
  absl::StatusOr<ChildResult> r = reader->Wait(absl::Seconds(30));
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(w->exit_code, kChildOk) << DescribeChildResult(*w);
  EXPECT_EQ(r->exit_code, kChildOk) << DescribeChildResult(*r);
  EXPECT_TRUE(Reaped(writer_pid));
}

TEST(SpliceBenchUtil, DirectTransferUnix) {
  DirectTransfer(SocketKind::kUnix, 1024, 4 << 20);
}

TEST(SpliceBenchUtil, DirectTransferTcp) {
  DirectTransfer(SocketKind::kTcp, 65536, 64 << 20);
}

TEST(SpliceBenchUtil, DirectTransferPartialLastChunk) {
  DirectTransfer(SocketKind::kTcp, 4096, 10000);
}

std::string Congestion(int fd) {
  char name[32] = {};
  socklen_t len = sizeof(name);
  if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0) {
    return strerror(errno);
  }
  return std::string(name, strnlen(name, len));
}

TEST(SpliceBenchUtil, TcpCongestionOnBothEnds) {
  absl::StatusOr<SocketPair> pair = MakeSocketPair(SocketKind::kTcp, "reno");
  ASSERT_TRUE(pair.ok()) << pair.status();
  EXPECT_EQ(Congestion(pair->relay_end.get()), "reno");
  EXPECT_EQ(Congestion(pair->child_end.get()), "reno");
  EXPECT_FALSE(MakeSocketPair(SocketKind::kTcp, "no-such-cc").ok());
  // UNIX sockets have none and ignore the option.
  EXPECT_TRUE(MakeSocketPair(SocketKind::kUnix, "reno").ok());
}

TEST(SpliceBenchUtil, ReaderReportsWrongCount) {
  absl::StatusOr<SocketPair> pair = MakeSocketPair(SocketKind::kUnix, "");
  ASSERT_TRUE(pair.ok()) << pair.status();
  absl::StatusOr<ChildProcess> reader = ChildProcess::Spawn(
      Options(ChildRole::kReader, 1024, 100), std::move(pair->child_end), Fd());
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_EQ(write(pair->relay_end.get(), "abc", 3), 3);
  pair->relay_end.Reset();
  absl::StatusOr<ChildResult> r = reader->Wait(absl::Seconds(30));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, kChildWrongCount);
}

TEST(SpliceBenchUtil, WriterWithoutStartByteExits) {
  absl::StatusOr<SocketPair> pair = MakeSocketPair(SocketKind::kUnix, "");
  ASSERT_TRUE(pair.ok()) << pair.status();
  StartPipe start = MakeStartPipe();
  absl::StatusOr<ChildProcess> writer = ChildProcess::Spawn(
      Options(ChildRole::kWriter, 1024, 1024), std::move(pair->child_end),
      std::move(start.read_end));
  ASSERT_TRUE(writer.ok()) << writer.status();
  start.write_end.Reset();
  absl::StatusOr<ChildResult> w = writer->Wait(absl::Seconds(30));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->exit_code, kChildNoStart);
}

// A child that never finishes: the one that inherits a socket must not keep
// any other fd, or EOF would never reach its peer. Here the writer waits for
// a start byte forever; the destructor must kill and reap it.
TEST(SpliceBenchUtil, DestructorKillsAndReaps) {
  absl::StatusOr<SocketPair> pair = MakeSocketPair(SocketKind::kTcp, "");
  ASSERT_TRUE(pair.ok()) << pair.status();
  StartPipe start = MakeStartPipe();
  pid_t pid = -1;
  {
    absl::StatusOr<ChildProcess> writer = ChildProcess::Spawn(
        Options(ChildRole::kWriter, 1024, 1024), std::move(pair->child_end),
        std::move(start.read_end));
    ASSERT_TRUE(writer.ok()) << writer.status();
    pid = writer->pid();
  }
  EXPECT_TRUE(Reaped(pid));
}

TEST(SpliceBenchUtil, WaitTimesOutKillsAndReaps) {
  absl::StatusOr<SocketPair> pair = MakeSocketPair(SocketKind::kUnix, "");
  ASSERT_TRUE(pair.ok()) << pair.status();
  StartPipe start = MakeStartPipe();
  absl::StatusOr<ChildProcess> writer = ChildProcess::Spawn(
      Options(ChildRole::kWriter, 1024, 1024), std::move(pair->child_end),
      std::move(start.read_end));
  ASSERT_TRUE(writer.ok()) << writer.status();
  const pid_t pid = writer->pid();
  absl::StatusOr<ChildResult> w = writer->Wait(absl::Milliseconds(50));
  EXPECT_EQ(w.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(Reaped(pid));
}

// The reader's EOF reaches the parent only if no child kept a copy of the
// parent's end: the reader closes every fd it does not use.
TEST(SpliceBenchUtil, ChildKeepsNoOtherFd) {
  absl::StatusOr<SocketPair> a = MakeSocketPair(SocketKind::kUnix, "");
  absl::StatusOr<SocketPair> b = MakeSocketPair(SocketKind::kUnix, "");
  ASSERT_TRUE(a.ok() && b.ok());
  absl::StatusOr<ChildProcess> reader = ChildProcess::Spawn(
      Options(ChildRole::kReader, 1024, 0), std::move(b->child_end), Fd());
  ASSERT_TRUE(reader.ok()) << reader.status();
  // The reader inherited a copy of a->child_end without a CLOEXEC-less exec;
  // after we close ours, a read on a->relay_end must see EOF.
  a->child_end.Reset();
  pollfd pfd = {a->relay_end.get(), POLLIN, 0};
  ASSERT_EQ(poll(&pfd, 1, 10000), 1) << "no EOF: a child kept the fd";
  char c;
  EXPECT_EQ(read(a->relay_end.get(), &c, 1), 0);
  b->relay_end.Reset();
  absl::StatusOr<ChildResult> r = reader->Wait(absl::Seconds(30));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, kChildOk);
}

}  // namespace
}  // namespace netstack::bench
