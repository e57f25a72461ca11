// End-to-end transfers between two netstack TCP layers on the fake clock,
// clean and under loss, duplication and reordering: every byte arrives,
// in order, and both sides close cleanly.
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "netstack/tcp/tcp_test_util.h"

namespace netstack::tcp {
namespace {

using testing::Network;

uint8_t Pattern(uint64_t i) { return static_cast<uint8_t>((i * 131) >> 3); }

struct TransferParams {
  bool v6;
  double loss;
  double duplicate;
  Duration jitter;
  size_t bytes;
  CongestionAlgorithm cc;
  bool sack;
};

class TransferTest : public ::testing::TestWithParam<TransferParams> {};

TEST_P(TransferTest, AllBytesArriveInOrderAndBothSidesClose) {
  const TransferParams& p = GetParam();
  TcpLayerOptions o;
  o.connection.congestion = p.cc;
  o.connection.sack = p.sack;
  Network net(o);
  net.loss = p.loss;
  net.duplicate = p.duplicate;
  net.delay = absl::Milliseconds(5);
  net.jitter = p.jitter;
  const auto family = p.v6 ? transport::Family::kIpv6 : transport::Family::kIpv4;
  const transport::IpAddress server_ip = p.v6 ? net.b().v6() : net.b().v4();

  auto listener = net.b().tcp->Open(family);
  ASSERT_TRUE(listener->Bind({server_ip, 5001}).ok());
  ASSERT_TRUE(listener->Listen(16).ok());
  auto client = net.a().tcp->Open(family);
  ASSERT_TRUE(client->Connect({server_ip, 5001}).ok());

  std::unique_ptr<TcpSocket> server;
  ASSERT_TRUE(net.RunUntil([&] {
    auto s = listener->Accept();
    if (s.ok()) server = std::move(*s);
    return server != nullptr &&
           client->state() == TcpState::kEstablished;
  }, absl::Seconds(30)));

  uint64_t written = 0;
  uint64_t read = 0;
  bool mismatch = false;
  bool client_closed = false;
  bool eof = false;
  std::vector<uint8_t> buf(256 * 1024);
  const bool done = net.RunUntil([&] {
    while (written < p.bytes) {
      const size_t n = std::min<uint64_t>(buf.size(), p.bytes - written);
      for (size_t i = 0; i < n; ++i) buf[i] = Pattern(written + i);
      auto w = client->Write(std::span<const uint8_t>(buf.data(), n));
      if (!w.ok()) break;
      written += *w;
      if (*w < n) break;
    }
    if (written == p.bytes && !client_closed) {
      EXPECT_TRUE(client->Shutdown(false, true).ok());
      client_closed = true;
    }
    std::vector<uint8_t> in(128 * 1024);
    while (true) {
      auto r = server->Read(in);
      if (!r.ok()) break;
      if (*r == 0) {
        eof = true;
        break;
      }
      for (size_t i = 0; i < *r; ++i) {
        if (in[i] != Pattern(read + i)) mismatch = true;
      }
      read += *r;
    }
    return eof;
  }, absl::Seconds(600));
  ASSERT_TRUE(done) << "read " << read << " of " << p.bytes << "\nclient "
                    << client->Info().ToString() << "\nserver "
                    << server->Info().ToString();
  EXPECT_FALSE(mismatch);
  EXPECT_EQ(read, p.bytes);
  server->Close();
  // Both ends finish: the client sits in TIME_WAIT, then everything goes.
  ASSERT_TRUE(net.RunUntil([&] {
    return client->state() == TcpState::kTimeWait ||
           client->state() == TcpState::kClosed;
  }, absl::Seconds(120)))
      << StateName(client->state());
  const TcpInfo info = client->Info();
  if (p.loss > 0) {
    EXPECT_GT(info.retransmits, 0u);
  }
  client.reset();
  server.reset();
  net.RunFor(absl::Seconds(130));
  EXPECT_EQ(net.a().tcp->connection_count(), 0u)
      << net.a().tcp->FormatCounters();
  EXPECT_EQ(net.b().tcp->connection_count(), 0u)
      << net.b().tcp->FormatCounters();
}

INSTANTIATE_TEST_SUITE_P(
    Transfers, TransferTest,
    ::testing::Values(
        TransferParams{false, 0, 0, absl::ZeroDuration(), 4 << 20,
                       CongestionAlgorithm::kCubic, true},
        TransferParams{true, 0, 0, absl::ZeroDuration(), 4 << 20,
                       CongestionAlgorithm::kNewReno, true},
        TransferParams{false, 0.01, 0, absl::ZeroDuration(), 4 << 20,
                       CongestionAlgorithm::kCubic, true},
        TransferParams{false, 0.05, 0, absl::ZeroDuration(), 2 << 20,
                       CongestionAlgorithm::kCubic, true},
        TransferParams{false, 0.05, 0, absl::ZeroDuration(), 2 << 20,
                       CongestionAlgorithm::kNewReno, false},
        TransferParams{true, 0.01, 0.01, absl::Milliseconds(3), 2 << 20,
                       CongestionAlgorithm::kCubic, true}));

}  // namespace
}  // namespace netstack::tcp
