// A decorator that records every frame crossing a link endpoint, in both
// directions, into a pcap file (libpcap, LINKTYPE_ETHERNET, microsecond
// timestamps). Open the file with tshark/Wireshark, or with
// tools/pcap_inspect.
//
//   auto sniffer = SnifferEndpoint::Create(std::move(tap), "/tmp/x.pcap");
//   if (!sniffer.ok()) return sniffer.status();
//   stack.AttachLink(**sniffer);
//
// What is recorded, and when:
//   - Inbound: every frame the inner endpoint delivers, before it is passed
//     on to this endpoint's receiver, stamped with the `now` of that
//     delivery.
//   - Outbound: every packet the inner endpoint consumes from the chain
//     given to Transmit (sent, or dropped by the inner endpoint), stamped
//     with Transmit's `now`. A packet the inner endpoint leaves in the
//     chain (its fd would block) is recorded once, by the later Transmit
//     that consumes it, so a retried packet never appears twice.
//     Outgoing packets are scattered (headers + payload views); they are
//     flattened into one reused scratch buffer before pcap_dump, which
//     grows to the largest chain seen and then stops allocating.
//   - Frames longer than the snaplen (65535) are cut to it; the record
//     keeps the original length.
// The file is flushed at most `flush_interval` after a frame was written
// (checked in Transmit, on delivery and in Poll; NextDeadline() asks for a
// Poll when a flush is due), on Flush(), and when the sniffer is
// destroyed.
//
// Everything else (capabilities, fds, OnReadable, Poll, NextDeadline,
// stats) is forwarded to the inner endpoint. The sniffer owns the inner
// endpoint; keep a raw pointer before moving it in if you need to reach it
// (e.g. a ChannelEndpoint's InjectFrame).
#ifndef NETSTACK_LINK_SNIFFER_ENDPOINT_H_
#define NETSTACK_LINK_SNIFFER_ENDPOINT_H_

#include <pcap/pcap.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "netstack/base/time.h"
#include "netstack/buffer/packet.h"
#include "netstack/link/link_endpoint.h"

namespace netstack::link {

struct SnifferOptions {
  // Longest time a written frame may sit in stdio's buffer.
  Duration flush_interval = absl::Seconds(1);
};

class SnifferEndpoint final : public LinkEndpoint {
 public:
  // A GSO super-frame is up to 65,535 bytes of IP packet plus its
  // Ethernet header (and a 64 KiB TAP frame): tcpdump's default snap
  // length records them whole.
  static constexpr int kSnapLen = 262144;

  // Wraps `inner` (owned) and creates (truncates) the pcap file at `path`.
  // Errors: InvalidArgument if `inner` is null or the flush interval is
  // not positive; a status naming the path and libpcap's reason if the
  // file cannot be opened for writing.
  static absl::StatusOr<std::unique_ptr<SnifferEndpoint>> Create(
      std::unique_ptr<LinkEndpoint> inner, const std::string& path,
      const SnifferOptions& options = {});

  SnifferEndpoint(const SnifferEndpoint&) = delete;
  SnifferEndpoint& operator=(const SnifferEndpoint&) = delete;
  // Flushes and closes the file, then destroys the inner endpoint.
  ~SnifferEndpoint() override;

  // LinkEndpoint.
  LinkCapabilities Capabilities() const override;
  void Attach(LinkReceiver* receiver) override;
  size_t Transmit(buffer::PacketChain& chain, Instant now) override;
  int ReadFd() const override;
  void OnReadable(Instant now) override;
  int WriteFd() const override;
  Instant NextDeadline() const override;
  void Poll(Instant now) override;
  LinkStats Stats() const override;
  // "sniffer(pcap:<path>) -> <inner name>"
  std::string Name() const override;

  // Writes buffered records to the file now. False if the write failed
  // (disk full, ...); later frames are still attempted.
  bool Flush();

  LinkEndpoint& inner() { return *inner_; }
  // Records written so far, per direction.
  uint64_t frames_in() const { return frames_in_; }
  uint64_t frames_out() const { return frames_out_; }
  // Failed flushes (the file is incomplete).
  uint64_t write_errors() const { return write_errors_; }

 private:
  // Receives from the inner endpoint, records, and passes frames on.
  class Tap final : public LinkReceiver {
   public:
    explicit Tap(SnifferEndpoint* owner) : owner_(owner) {}
    void DeliverFrames(std::span<InboundFrame> frames, Instant now) override;

   private:
    SnifferEndpoint* const owner_;
  };
  // Where one outgoing packet's bytes sit in scratch_.
  struct Record {
    size_t offset;
    uint32_t caplen;
    uint32_t len;
  };

  SnifferEndpoint(std::unique_ptr<LinkEndpoint> inner, std::string path,
                  const SnifferOptions& options, pcap_t* pcap,
                  pcap_dumper_t* dumper);

  void Dump(std::span<const uint8_t> bytes, uint32_t wire_len, Instant now);
  void MaybeFlush(Instant now);

  std::unique_ptr<LinkEndpoint> inner_;
  const std::string path_;
  const SnifferOptions options_;
  pcap_t* const pcap_;
  pcap_dumper_t* const dumper_;
  Tap tap_{this};
  LinkReceiver* receiver_ = nullptr;

  // Records written since the last flush, and when the first of them was.
  bool dirty_ = false;
  Instant dirty_since_ = kNever;

  // Reused for every outgoing chain: the flattened packets and where each
  // one is.
  std::vector<uint8_t> scratch_;
  std::vector<Record> records_;

  uint64_t frames_in_ = 0;
  uint64_t frames_out_ = 0;
  uint64_t write_errors_ = 0;
};

}  // namespace netstack::link

#endif  // NETSTACK_LINK_SNIFFER_ENDPOINT_H_
