#include "link/sniffer_endpoint.h"

#include <fcntl.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "link/frame_util.h"

namespace netstack::link {

absl::StatusOr<std::unique_ptr<SnifferEndpoint>> SnifferEndpoint::Create(
    std::unique_ptr<LinkEndpoint> inner, const std::string& path,
    const SnifferOptions& options) {
  if (inner == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("sniffer(pcap:", path, "): no inner endpoint to wrap"));
  }
  if (options.flush_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sniffer(pcap:", path, "): flush_interval ",
        absl::FormatDuration(options.flush_interval), " must be positive"));
  }
  pcap_t* pcap = pcap_open_dead(DLT_EN10MB, kSnapLen);
  if (pcap == nullptr) {
    return absl::InternalError(absl::StrCat(
        "sniffer(pcap:", path, "): pcap_open_dead(DLT_EN10MB) failed"));
  }
  // Opened here with O_CLOEXEC and handed to libpcap: pcap_dump_open's
  // fopen(path, "w") has no close-on-exec, and the file would go on to
  // whatever this process starts (netstackd's CMD, issue #30).
  const int fd = ::open(path.c_str(),
                        O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  FILE* file = fd < 0 ? nullptr : ::fdopen(fd, "w");
  if (file == nullptr) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    pcap_close(pcap);
    return absl::InvalidArgumentError(
        absl::StrCat("sniffer: cannot open pcap file '", path,
                     "' for writing: ", std::strerror(err)));
  }
  pcap_dumper_t* dumper = pcap_dump_fopen(pcap, file);
  if (dumper == nullptr) {
    absl::Status status = absl::InvalidArgumentError(
        absl::StrCat("sniffer: cannot write pcap file '", path,
                     "': ", pcap_geterr(pcap)));
    std::fclose(file);
    pcap_close(pcap);
    return status;
  }
  return std::unique_ptr<SnifferEndpoint>(
      new SnifferEndpoint(std::move(inner), path, options, pcap, dumper));
}

SnifferEndpoint::SnifferEndpoint(std::unique_ptr<LinkEndpoint> inner,
                                 std::string path,
                                 const SnifferOptions& options, pcap_t* pcap,
                                 pcap_dumper_t* dumper)
    : inner_(std::move(inner)),
      path_(std::move(path)),
      options_(options),
      pcap_(pcap),
      dumper_(dumper) {
  // Enough for a 64-packet chain of full-size frames before any growth.
  scratch_.resize(64 * 1514);
  records_.reserve(64);
  inner_->Attach(&tap_);
}

SnifferEndpoint::~SnifferEndpoint() {
  Flush();
  pcap_dump_close(dumper_);
  pcap_close(pcap_);
  // The inner endpoint must not call back into a half-destroyed sniffer.
  inner_->Attach(nullptr);
}

LinkCapabilities SnifferEndpoint::Capabilities() const {
  LinkCapabilities caps = inner_->Capabilities();
  // The stack then completes single segments' checksums, so the capture
  // shows them right (super-segments keep the pseudo-header sum, as in a
  // capture of the kernel's TSO).
  caps.tx_checksum_offload = false;
  return caps;
}

void SnifferEndpoint::Attach(LinkReceiver* receiver) { receiver_ = receiver; }

void SnifferEndpoint::Dump(std::span<const uint8_t> bytes, uint32_t wire_len,
                           Instant now) {
  pcap_pkthdr header{};
  header.ts = absl::ToTimeval(now);
  header.caplen = static_cast<bpf_u_int32>(
      std::min<size_t>(bytes.size(), static_cast<size_t>(kSnapLen)));
  header.len = wire_len;
  pcap_dump(reinterpret_cast<u_char*>(dumper_), &header, bytes.data());
  if (!dirty_) {
    dirty_ = true;
    dirty_since_ = now;
  }
}

size_t SnifferEndpoint::Transmit(buffer::PacketChain& chain, Instant now) {
  // Flatten the whole chain first: the inner endpoint releases the packets
  // it consumes, and only it knows how many that will be.
  records_.clear();
  size_t total = 0;
  for (const buffer::PacketBuffer& packet : chain) {
    total += std::min<size_t>(packet.size(), kSnapLen);
  }
  if (scratch_.size() < total) scratch_.resize(total);
  size_t offset = 0;
  for (const buffer::PacketBuffer& packet : chain) {
    const size_t caplen = std::min<size_t>(packet.size(), kSnapLen);
    CopyPacketBytes(packet,
                    std::span<uint8_t>(scratch_.data() + offset, caplen));
    records_.push_back(Record{offset, static_cast<uint32_t>(caplen),
                              static_cast<uint32_t>(packet.size())});
    offset += caplen;
  }

  const size_t before = chain.size();
  const size_t sent = inner_->Transmit(chain, now);
  // Transmit pops a prefix of the chain: those packets were consumed.
  const size_t consumed = std::min(before - chain.size(), records_.size());
  for (size_t i = 0; i < consumed; ++i) {
    const Record& r = records_[i];
    Dump(std::span<const uint8_t>(scratch_.data() + r.offset, r.caplen), r.len,
         now);
    ++frames_out_;
  }
  MaybeFlush(now);
  return sent;
}

void SnifferEndpoint::Tap::DeliverFrames(std::span<InboundFrame> frames,
                                         Instant now) {
  SnifferEndpoint& s = *owner_;
  for (const InboundFrame& f : frames) {
    s.Dump(f.frame.bytes(), f.frame.size(), now);
    ++s.frames_in_;
  }
  s.MaybeFlush(now);
  if (s.receiver_ != nullptr) s.receiver_->DeliverFrames(frames, now);
}

int SnifferEndpoint::ReadFd() const { return inner_->ReadFd(); }

void SnifferEndpoint::OnReadable(Instant now) { inner_->OnReadable(now); }

int SnifferEndpoint::WriteFd() const { return inner_->WriteFd(); }

Instant SnifferEndpoint::NextDeadline() const {
  Instant deadline = inner_->NextDeadline();
  if (dirty_) {
    deadline = std::min(deadline, dirty_since_ + options_.flush_interval);
  }
  return deadline;
}

void SnifferEndpoint::Poll(Instant now) {
  inner_->Poll(now);
  MaybeFlush(now);
}

LinkStats SnifferEndpoint::Stats() const { return inner_->Stats(); }

std::string SnifferEndpoint::Name() const {
  return absl::StrCat("sniffer(pcap:", path_, ") -> ", inner_->Name());
}

void SnifferEndpoint::MaybeFlush(Instant now) {
  if (dirty_ && now >= dirty_since_ + options_.flush_interval) Flush();
}

bool SnifferEndpoint::Flush() {
  dirty_ = false;
  dirty_since_ = kNever;
  if (pcap_dump_flush(dumper_) != 0) {
    ++write_errors_;
    return false;
  }
  return true;
}

}  // namespace netstack::link
