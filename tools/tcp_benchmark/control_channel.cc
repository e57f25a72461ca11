#include "tools/tcp_benchmark/control_channel.h"

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "netstack/transport/errors.h"

namespace netstack::tools::bench {

ControlChannel::ControlChannel(std::unique_ptr<Stream> stream,
                               Callbacks callbacks, bool connecting)
    : stream_(std::move(stream)), callbacks_(std::move(callbacks)),
      connecting_(connecting) {
  stream_->SetHandler([this](uint32_t bits) { OnReady(bits); });
  if (connecting_) stream_->WantWritable(true);
}

ControlChannel::~ControlChannel() { Close(); }

void ControlChannel::Close() {
  if (closed_) return;
  closed_ = true;
  stream_->Close();
}

std::string ControlChannel::Describe() const { return stream_->Describe(); }

absl::Status ControlChannel::Send(const std::string& bytes) {
  if (closed_) return transport::NotConnected();
  out_ += bytes;
  if (connecting_) return absl::OkStatus();  // sent once connected
  absl::Status s = Flush();
  if (!s.ok()) Close();
  return s;
}

absl::Status ControlChannel::Flush() {
  while (!out_.empty()) {
    absl::StatusOr<size_t> n = stream_->Write(
        {reinterpret_cast<const uint8_t*>(out_.data()), out_.size()});
    if (!n.ok()) {
      if (transport::IsWouldBlock(n.status())) break;
      return n.status();
    }
    out_.erase(0, *n);
  }
  stream_->WantWritable(!out_.empty());
  return absl::OkStatus();
}

absl::Status ControlChannel::ReadAll() {
  // Control messages are small; a bounded number of reads per event keeps
  // a peer that floods the control connection from starving the rest.
  uint8_t buf[16384];
  for (int i = 0; i < 16 && !eof_; ++i) {
    absl::StatusOr<size_t> n = stream_->Read(buf);
    if (!n.ok()) {
      if (transport::IsWouldBlock(n.status())) return absl::OkStatus();
      return n.status();
    }
    if (*n == 0) {
      eof_ = true;
      break;
    }
    reader_.Append({reinterpret_cast<const char*>(buf), *n});
    if (reader_.buffered() > iperf3::kMaxJsonMessage + 16) {
      return absl::ResourceExhaustedError(
          "peer sent more on the control connection than any message holds");
    }
  }
  return absl::OkStatus();
}

void ControlChannel::Fail(absl::Status status) {
  Close();
  if (callbacks_.on_failure) callbacks_.on_failure(std::move(status));
}

void ControlChannel::OnReady(uint32_t bits) {
  if (closed_) return;
  if (connecting_) {
    if (bits & ready::kError) {
      uint8_t byte;
      absl::StatusOr<size_t> n = stream_->Read({&byte, 1});
      return Fail(n.ok() ? absl::UnavailableError("connect failed")
                         : n.status());
    }
    if (!(bits & ready::kWritable)) return;
    connecting_ = false;
    if (absl::Status s = Flush(); !s.ok()) return Fail(s);
    if (callbacks_.on_connected) callbacks_.on_connected();
    if (closed_) return;
  } else if (bits & ready::kWritable) {
    if (absl::Status s = Flush(); !s.ok()) return Fail(s);
  }
  if (bits & (ready::kReadable | ready::kError | ready::kHangup)) {
    const bool had_eof = eof_;
    absl::Status s = ReadAll();
    if (!s.ok()) {
      // A peer that writes its last word (ACCESS_DENIED, say) and closes
      // with our bytes unread resets the connection: let the owner see
      // what did arrive before the error.
      if (reader_.buffered() > 0 && callbacks_.on_input) callbacks_.on_input();
      if (!closed_) Fail(s);
      return;
    }
    if (had_eof) {
      // Level-triggered readiness at EOF would call us every turn: the
      // owner has seen the EOF once, stop listening.
      Close();
      return;
    }
    if (callbacks_.on_input) callbacks_.on_input();
  }
}

}  // namespace netstack::tools::bench
