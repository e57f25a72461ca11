// Every bulk mode of KernelNet over loopback: what SendBulk reports sent
// is what DiscardBulk reports received, through EOF, with the pipe-backed
// modes draining their pipes fully.
#include "tools/tcp_benchmark/kernel_net.h"

#include <memory>
#include <optional>
#include <tuple>

#include "gtest/gtest.h"
#include "netstack/transport/address.h"
#include "netstack/transport/errors.h"

namespace netstack::tools::bench {
namespace {

using ::testing::Combine;
using ::testing::Values;

class KernelNetModes
    : public ::testing::TestWithParam<std::tuple<RecvMode, SendMode>> {};

TEST_P(KernelNetModes, BulkBytesArriveAndCountsAgree) {
  KernelNetOptions o;
  o.recv_mode = std::get<0>(GetParam());
  o.send_mode = std::get<1>(GetParam());
  o.buffer_size = 64 * 1024;
  absl::StatusOr<std::unique_ptr<Net>> net = CreateKernelNet(o);
  ASSERT_TRUE(net.ok()) << net.status();
  eventloop::EventLoop& loop = (*net)->loop();

  auto any = *transport::SocketAddress::Parse("127.0.0.1:0");
  // Port 0 would need getsockname; use a fixed high port from the pid.
  any.port = static_cast<uint16_t>(20000 + getpid() % 20000);
  auto listener = (*net)->Listen(any, {});
  ASSERT_TRUE(listener.ok()) << listener.status();
  auto client = (*net)->Connect(any, {});
  ASSERT_TRUE(client.ok()) << client.status();

  std::unique_ptr<Stream> server;
  (*listener)->SetHandler([&] {
    auto s = (*listener)->Accept();
    if (s.ok()) server = *std::move(s);
  });
  constexpr uint64_t kTotal = 8 * 1024 * 1024 + 12345;
  uint64_t sent = 0, received = 0;
  bool eof = false;
  absl::Status failure;
  (*client)->SetHandler([&](uint32_t bits) {
    while (sent < kTotal && (bits & ready::kWritable)) {
      auto n = (*client)->SendBulk(std::min<uint64_t>(kTotal - sent, 100000));
      if (!n.ok()) {
        if (!transport::IsWouldBlock(n.status())) failure = n.status();
        return;
      }
      sent += *n;
    }
    if (sent == kTotal) {
      (*client)->WantWritable(false);
      (*client)->ShutdownWrite();
    }
  });
  (*client)->WantWritable(true);
  const Instant deadline = loop.Now() + absl::Seconds(20);
  while (!eof && failure.ok() && loop.Now() < deadline) {
    ASSERT_TRUE(loop.RunOnce(absl::Milliseconds(10)).ok());
    if (server == nullptr) continue;
    while (true) {
      auto n = server->DiscardBulk(1 << 20);
      if (!n.ok()) {
        if (!transport::IsWouldBlock(n.status())) failure = n.status();
        break;
      }
      if (*n == 0) {
        eof = true;
        break;
      }
      received += *n;
    }
  }
  ASSERT_TRUE(failure.ok()) << failure;
  EXPECT_TRUE(eof);
  EXPECT_EQ(sent, kTotal);
  EXPECT_EQ(received, kTotal);
  EXPECT_NE((*client)->Describe().find("127.0.0.1"), std::string::npos);
  server.reset();
  client->reset();
}

INSTANTIATE_TEST_SUITE_P(
    AllModes, KernelNetModes,
    Combine(Values(RecvMode::kPlain, RecvMode::kSplice),
            Values(SendMode::kPlain, SendMode::kVmsplice, SendMode::kSendfile)));

TEST(KernelNet, ConnectRefusedIsReportedAsAnError) {
  absl::StatusOr<std::unique_ptr<Net>> net = CreateKernelNet({});
  ASSERT_TRUE(net.ok());
  auto nobody = *transport::SocketAddress::Parse("127.0.0.1:1");
  auto stream = (*net)->Connect(nobody, {});
  ASSERT_TRUE(stream.ok());
  uint32_t seen = 0;
  (*stream)->SetHandler([&](uint32_t bits) { seen |= bits; });
  for (int i = 0; i < 100 && !(seen & ready::kError); ++i) {
    ASSERT_TRUE((*net)->loop().RunOnce(absl::Milliseconds(10)).ok());
  }
  EXPECT_TRUE(seen & ready::kError);
  uint8_t b;
  auto n = (*stream)->Read({&b, 1});
  EXPECT_EQ(transport::ErrnoOf(n.status()), ECONNREFUSED);
}

TEST(KernelNet, ParsesModeNames) {
  EXPECT_EQ(*ParseRecvMode("splice"), RecvMode::kSplice);
  EXPECT_EQ(*ParseSendMode("sendfile"), SendMode::kSendfile);
  EXPECT_FALSE(ParseRecvMode("vmsplice").ok());
  EXPECT_FALSE(ParseSendMode("").ok());
}

}  // namespace
}  // namespace netstack::tools::bench
