#include "tools/netstackd/services/echo_service.h"

#include <span>
#include <utility>

#include "absl/strings/str_cat.h"
#include "netstack/transport/errors.h"

namespace netstack::tools {

class EchoService::Connection {
 public:
  const tcp::TcpSocket& socket() const { return *socket_; }
  Connection(EchoService& service, std::unique_ptr<tcp::TcpSocket> socket)
      : service_(service),
        socket_(std::move(socket)),
        buffer_(new uint8_t[kBufferBytes]) {}

  void Start() {
    socket_->set_callback([this](uint32_t events) { OnEvent(events); });
    // Edge-triggered: data may have arrived before the callback was set.
    Pump();
  }

 private:
  void OnEvent(uint32_t events) {
    if (done_) return;
    if ((events & transport::event::kError) != 0 &&
        !socket_->TakeError().ok()) {
      Finish(/*error=*/true);
      return;
    }
    Pump();
  }

  // Write what is buffered, then read more; stop as soon as either side
  // would block (kWritable or kReadable resumes us).
  void Pump() {
    while (!done_) {
      while (head_ < tail_) {
        absl::StatusOr<size_t> n = socket_->Write(
            std::span<const uint8_t>(buffer_.get() + head_, tail_ - head_));
        if (!n.ok()) {
          if (!transport::IsWouldBlock(n.status())) Finish(/*error=*/true);
          return;
        }
        head_ += *n;
        service_.counters_.tcp_bytes += *n;
      }
      head_ = tail_ = 0;
      if (eof_) {
        Finish(/*error=*/false);
        return;
      }
      absl::StatusOr<size_t> n =
          socket_->Read(std::span<uint8_t>(buffer_.get(), kBufferBytes));
      if (!n.ok()) {
        if (!transport::IsWouldBlock(n.status())) Finish(/*error=*/true);
        return;
      }
      if (*n == 0) {
        eof_ = true;
      } else {
        tail_ = *n;
      }
    }
  }

  void Finish(bool error) {
    done_ = true;
    if (error) ++service_.counters_.tcp_errors;
    // Everything was echoed and the peer's FIN read: a graceful close (FIN
    // after the queued data). After an error, closing is all there is.
    socket_->Close();
    service_.conns_.Retire(this);
  }

  EchoService& service_;
  std::unique_ptr<tcp::TcpSocket> socket_;
  std::unique_ptr<uint8_t[]> buffer_;
  size_t head_ = 0;  // next byte to write
  size_t tail_ = 0;  // end of the bytes read
  bool eof_ = false;
  bool done_ = false;
};

absl::StatusOr<std::unique_ptr<EchoService>> EchoService::Start(
    ServiceContext& ctx, uint16_t port) {
  std::unique_ptr<EchoService> s(new EchoService(ctx));
  EchoService* self = s.get();
  auto listeners =
      TcpListeners::Open(*ctx.tcp, port, /*backlog=*/1024,
                         [self](std::unique_ptr<tcp::TcpSocket> c) {
                           self->Accept(std::move(c));
                         });
  if (!listeners.ok()) return listeners.status();
  s->listeners_ = std::move(*listeners);
  auto udp = BindUdpBoth(*ctx.udp, port);
  if (!udp.ok()) return udp.status();
  s->udp_ = std::move(*udp);
  for (auto& u : s->udp_) {
    udp::UdpSocket* raw = u.get();
    u->set_callback([self, raw](uint32_t events) {
      if ((events & transport::event::kReadable) != 0)
        self->OnUdpReadable(*raw);
    });
  }
  return s;
}

EchoService::EchoService(ServiceContext& ctx) : ctx_(ctx) {}

EchoService::~EchoService() = default;

void EchoService::Sweep() { conns_.Sweep(); }

void EchoService::Accept(std::unique_ptr<tcp::TcpSocket> s) {
  ++counters_.tcp_connections;
  conns_.Add(std::make_unique<Connection>(*this, std::move(s)))->Start();
}

void EchoService::OnUdpReadable(udp::UdpSocket& s) {
  uint8_t* datagram = datagram_.get();
  while (true) {
    absl::StatusOr<udp::RecvResult> r =
        s.RecvFrom(std::span<uint8_t>(datagram, kDatagramBytes));
    if (!r.ok()) return;  // WouldBlock: drained
    ++counters_.udp_datagrams;
    counters_.udp_bytes += r->bytes;
    if (!s.SendTo(std::span<const uint8_t>(datagram, r->bytes), r->from,
                  ctx_.now)
             .ok()) {
      ++counters_.udp_send_errors;
    }
  }
}

std::string EchoService::FormatCounters() const {
  return absl::StrCat(
      "service.echo.tcp_connections ", counters_.tcp_connections, "\n",
      "service.echo.tcp_open ", conns_.size(), "\n", "service.echo.tcp_bytes ",
      counters_.tcp_bytes, "\n", "service.echo.tcp_errors ",
      counters_.tcp_errors, "\n", "service.echo.udp_datagrams ",
      counters_.udp_datagrams, "\n", "service.echo.udp_bytes ",
      counters_.udp_bytes, "\n", "service.echo.udp_send_errors ",
      counters_.udp_send_errors, "\n");
}

std::string EchoService::FormatConnections() const {
  std::string out;
  conns_.ForEach([&](const Connection& c) {
    absl::StrAppend(&out,
                    DescribeConnection("service.echo.connection", c.socket()));
  });
  return out;
}

}  // namespace netstack::tools
