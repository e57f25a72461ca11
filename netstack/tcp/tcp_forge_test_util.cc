#include "netstack/tcp/tcp_forge_test_util.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <span>

#include "netstack/transport/errors.h"
#include "netstack/wire/address.h"
#include "netstack/wire/bytes.h"
#include "netstack/wire/checksum.h"

namespace netstack::tcp::testing {

namespace {
// Offset of the TSval of the first Timestamps option (or the last, as a
// receiver takes it: netstack's parser and Linux's tcp_parse_options both
// keep the last one); 0 if there is none.
size_t FindTsval(const uint8_t* t, size_t l4_len, bool last) {
  const size_t doff = std::min<size_t>((t[12] >> 4) * 4u, l4_len);
  size_t found = 0;
  for (size_t i = 20; i < doff;) {
    if (t[i] == 0) break;
    if (t[i] == 1) {
      ++i;
      continue;
    }
    if (i + 1 >= doff || t[i + 1] < 2) break;
    if (t[i] == 8 && t[i + 1] == 10 && i + 10 <= doff) {
      found = i + 2;
      if (!last) break;
    }
    i += t[i + 1];
  }
  return found;
}

// The TSval a receiver takes from the segment at `t`, if any.
std::optional<uint32_t> TakenTsval(const uint8_t* t, size_t l4_len) {
  const size_t at = FindTsval(t, l4_len, /*last=*/true);
  if (at == 0) return std::nullopt;
  return wire::LoadBe32(t + at);
}
}  // namespace

size_t TsvalOffset(const uint8_t* t, size_t l4_len) {
  return FindTsval(t, l4_len, /*last=*/false);
}

bool ForgeTcpSegment(std::vector<uint8_t>& f,
                     absl::FunctionRef<uint64_t()> next) {
  if (f.size() < 14 + 20 + 20 || f[12] != 0x08 || f[13] != 0x00) return false;
  const size_t ihl = (f[14] & 0x0f) * 4u;
  if (f[14 + 9] != 6 || f.size() < 14 + ihl + 20) return false;
  // Strip the payload: keep the TCP header with its options.
  const size_t hdr = (f[14 + ihl + 12] >> 4) * 4u;
  if (hdr >= 20 && 14 + ihl + hdr <= f.size()) {
    f.resize(14 + ihl + hdr);
    const size_t ip_len = ihl + hdr;
    f[14 + 2] = static_cast<uint8_t>(ip_len >> 8);
    f[14 + 3] = static_cast<uint8_t>(ip_len);
    f[14 + 10] = f[14 + 11] = 0;
    const uint16_t ip_sum = wire::InternetChecksum(
        std::span<const uint8_t>(f.data() + 14, ihl));
    f[14 + 10] = static_cast<uint8_t>(ip_sum >> 8);
    f[14 + 11] = static_cast<uint8_t>(ip_sum);
  }
  uint8_t* t = f.data() + 14 + ihl;
  const size_t l4_len = f.size() - 14 - ihl;
  switch (next() % 10) {
    case 0:  // sequence number nearby
      wire::StoreBe32(t + 4, wire::LoadBe32(t + 4) + static_cast<uint32_t>(next() % 200000) -
                       100000);
      break;
    case 1:  // sequence number anywhere
      wire::StoreBe32(t + 4, static_cast<uint32_t>(next()));
      break;
    case 2:  // ack number nearby / anywhere
      wire::StoreBe32(t + 8, (next() & 1) ? static_cast<uint32_t>(next())
                                  : wire::LoadBe32(t + 8) + static_cast<uint32_t>(
                                                       next() % 100000) -
                                        50000);
      break;
    case 3:  // flags (a RST with the exact sequence number is a valid
             // reset, RFC 5961: that is case 8's job, off by at least one)
      // and FIN: a forged copy of a pure ACK has the exact sequence
      // number, and an exact-sequence FIN is a valid one)
      t[13] = static_cast<uint8_t>(next()) & ~0x05;
      break;
    case 4:  // window
      t[14] = static_cast<uint8_t>(next());
      t[15] = static_cast<uint8_t>(next());
      break;
    case 5:  // data offset: too small, or past the end (a smaller valid
             // offset would turn option bytes into plausible payload)
      t[12] = static_cast<uint8_t>(
          ((next() & 1) ? next() % 5 : 11 + next() % 5) << 4);
      break;
    case 6:  // an option byte, but not a TSval: an exact copy of a
             // genuine segment with a later TSval is indistinguishable
             // from the genuine one, and poisons TS.Recent in any TCP
             // (Linux too: every later genuine segment fails PAWS). The
             // more pure ACKs a receiver sends, the likelier that was.
      if (l4_len > 20) {
        size_t i = 20 + next() % std::min<size_t>(l4_len - 20, 40);
        if (const size_t ts = TsvalOffset(t, l4_len);
            ts != 0 && i >= ts && i < ts + 4) {
          i += 4;  // the TSecr instead
        }
        // Nor a byte that makes another TSval the one taken: a SACK
        // option's kind rewritten to 8, say, turns its left edge (a
        // sequence number) into a second Timestamps option, whose TSval
        // the receiver takes (the last one wins, in Linux too).
        const std::optional<uint32_t> taken = TakenTsval(t, l4_len);
        const uint8_t was = t[i];
        t[i] = static_cast<uint8_t>(next());
        if (const std::optional<uint32_t> now = TakenTsval(t, l4_len);
            now.has_value() && now != taken) {
          t[i] = was;
        }
      }
      break;
    case 7:  // truncate the TCP part (IP length left as is: stack drops)
      f.resize(14 + ihl + next() % 20);
      return true;
    case 8:  // RST or FIN with a nearby (never exact) sequence number
      t[13] = (next() & 1) ? 0x04 : 0x11;
      wire::StoreBe32(t + 4,
            wire::LoadBe32(t + 4) + 1 + static_cast<uint32_t>(next() % 100000));
      break;
    default:  // SYN into the connection
      t[13] = 0x02 | static_cast<uint8_t>(next() & 0x11);
      break;
  }
  wire::Ipv4Address src = wire::Ipv4Address::FromBytes(f.data() + 14 + 12);
  wire::Ipv4Address dst = wire::Ipv4Address::FromBytes(f.data() + 14 + 16);
  const size_t doff = (t[12] >> 4) * 4u;
  if (doff < 20 || doff > l4_len) return true;  // checksum stays stale
  t[16] = t[17] = 0;
  wire::ChecksumAccumulator acc;
  acc.Add(std::span<const uint8_t>(t, l4_len));
  acc.AddFolded(wire::Ipv4PseudoHeaderSum(src, dst, 6,
                                          static_cast<uint16_t>(l4_len)));
  const uint16_t sum = acc.Checksum();
  t[16] = static_cast<uint8_t>(sum >> 8);
  t[17] = static_cast<uint8_t>(sum);
  return true;
}

void ForgeFollowers(Network& net, std::function<bool()> forge,
                    std::function<uint64_t()> next, uint64_t& forged) {
  net.filter = [&net, forge = std::move(forge), next = std::move(next),
                &forged](WireFrame& f) {
    if (forge()) {
      WireFrame copy = f;
      if (ForgeTcpSegment(copy.bytes, next)) {
        ++forged;
        net.extra.push_back(std::move(copy));
      }
    }
    return true;
  };
}

std::optional<Connection> Connect(Network& net, TcpSocket& listener,
                                  const transport::SocketAddress& to,
                                  Duration limit) {
  Connection c;
  c.client = net.a().tcp->Open(to.ip.family());
  if (!c.client->Connect(to).ok()) return std::nullopt;
  const bool up = net.RunUntil([&] {
    if (c.server == nullptr) {
      auto s = listener.Accept();
      if (s.ok()) c.server = std::move(*s);
    }
    return c.server != nullptr && c.client->state() == TcpState::kEstablished;
  }, limit);
  if (!up) return std::nullopt;
  return c;
}

BulkTransfer::BulkTransfer(TcpSocket& client, TcpSocket& server, size_t total)
    : client_(client), server_(server), out_(total), in_(65536) {
  // Byte i is i * 7, a pattern of period 256: filled by copies of one
  // period. (The fuzz build instruments every iteration of a loop; a
  // byte loop here and in Pump's check were a third of
  // tcp_conn_fuzzer's time, perf.)
  std::array<uint8_t, 256> period;
  for (size_t i = 0; i < period.size(); ++i) {
    period[i] = static_cast<uint8_t>(i * 7);
  }
  for (size_t at = 0; at < total; at += period.size()) {
    std::memcpy(out_.data() + at, period.data(),
                std::min(period.size(), total - at));
  }
}

void BulkTransfer::Pump() {
  if (written_ < total()) {
    auto w = client_.Write(std::span<const uint8_t>(out_).subspan(written_));
    if (w.ok()) written_ += *w;
    if (!w.ok() && !transport::IsWouldBlock(w.status())) error_ = true;
  }
  while (true) {
    auto r = server_.Read(in_);
    if (!r.ok()) {
      if (!transport::IsWouldBlock(r.status())) error_ = true;
      break;
    }
    if (*r == 0) {
      // End of stream before every byte: a forged FIN at exactly RCV.NXT
      // is a valid one to any TCP, and the application is told.
      if (got_ < total()) error_ = true;
      break;
    }
    if (got_ + *r > total() ||
        std::memcmp(in_.data(), out_.data() + got_, *r) != 0) {
      corrupt_ = true;
    }
    got_ += *r;
  }
  if (client_.state() == TcpState::kClosed ||
      server_.state() == TcpState::kClosed) {
    error_ = true;
  }
}

}  // namespace netstack::tcp::testing
