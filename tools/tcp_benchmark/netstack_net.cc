#include "tools/tcp_benchmark/netstack_net.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "netstack/buffer/chunk.h"
#include "netstack/eventloop/timer_wheel.h"
#include "netstack/runtime/runtime.h"
#include "netstack/tcp/tcp_layer.h"
#include "netstack/tcp/tcp_socket.h"
#include "netstack/transport/errors.h"
#include "tools/tcp_benchmark/flags.h"
#include "tools/tcp_benchmark/netstack_link.h"

namespace netstack::tools::bench {

namespace {

// Bulk data is sent as views of one chunk filled once; each SendBulk
// queues views of at most this many bytes (a whole chunk: one view per
// 64 KiB super-segment).
constexpr uint32_t kBulkView = buffer::kChunkSize;
// Views moved out per ReadViews call when discarding.
constexpr size_t kDiscardViews = 64;

absl::StatusOr<tcp::ConnectionOptions> ConnectionOptionsFromFlags(
    const tcp::ConnectionOptions& defaults) {
  tcp::ConnectionOptions o = defaults;
  o.sack = absl::GetFlag(FLAGS_sack);
  const std::string cc = absl::GetFlag(FLAGS_cc);
  if (cc == "reno" || cc == "newreno") {
    o.congestion = tcp::CongestionAlgorithm::kNewReno;
  } else if (cc == "cubic" || cc.empty()) {
    o.congestion = tcp::CongestionAlgorithm::kCubic;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--cc: '", cc, "' is not reno or cubic"));
  }
  return o;
}

class NetstackNetImpl;

// A TcpSocket as a bench::Stream.
class NetstackStream final : public Stream {
 public:
  NetstackStream(NetstackNetImpl& net, std::unique_ptr<tcp::TcpSocket> s);
  ~NetstackStream() override { Close(); }

  absl::StatusOr<size_t> Read(std::span<uint8_t> out) override {
    if (!socket_) return transport::NotConnected();
    return socket_->Read(out);
  }
  absl::StatusOr<size_t> Write(std::span<const uint8_t> in) override {
    if (!socket_) return transport::NotConnected();
    return socket_->Write(in);
  }
  absl::StatusOr<size_t> SendBulk(size_t max) override;
  absl::StatusOr<size_t> DiscardBulk(size_t max) override;
  void SetHandler(Handler handler) override;
  void WantWritable(bool want) override;
  void ShutdownWrite() override {
    if (socket_) (void)socket_->Shutdown(false, true);
  }
  void Close() override;
  StreamInfo Info() const override;
  std::string Describe() const override;

 private:
  void OnEvents(uint32_t events);

  NetstackNetImpl& net_;
  std::unique_ptr<tcp::TcpSocket> socket_;
  Handler handler_;
  bool want_writable_ = false;
  // Fires a writable callback when WantWritable(true) finds the socket
  // writable already (the layer reports only changes).
  eventloop::Timer kick_;
  std::array<buffer::PayloadView, kDiscardViews> views_;
};

// One or two listening TcpSockets as a bench::Listener: a wildcard
// address listens on both families when the stack has addresses of both
// (netstack has no dual-stack sockets; the kernel's [::] takes IPv4 too).
class NetstackListener final : public Listener {
 public:
  NetstackListener(NetstackNetImpl& net,
                   std::vector<std::unique_ptr<tcp::TcpSocket>> sockets)
      : net_(net), sockets_(std::move(sockets)) {}
  ~NetstackListener() override {
    for (auto& s : sockets_) s->set_callback(nullptr);
  }
  absl::StatusOr<std::unique_ptr<Stream>> Accept() override;
  void SetHandler(Handler handler) override {
    handler_ = std::move(handler);
    for (auto& s : sockets_) {
      s->set_callback([this](uint32_t events) {
        if ((events & transport::event::kReadable) != 0 && handler_) {
          handler_();
        }
      });
    }
  }

 private:
  NetstackNetImpl& net_;
  std::vector<std::unique_ptr<tcp::TcpSocket>> sockets_;
  Handler handler_;
};

class NetstackNetImpl final : public Net {
 public:
  static absl::StatusOr<std::unique_ptr<NetstackNetImpl>> Create();
  ~NetstackNetImpl() override;

  eventloop::EventLoop& loop() override { return rt_->loop(); }
  absl::StatusOr<std::unique_ptr<Listener>> Listen(
      const transport::SocketAddress& local,
      const StreamOptions& options) override;
  absl::StatusOr<std::unique_ptr<Stream>> Connect(
      const transport::SocketAddress& remote,
      const StreamOptions& options) override;
  std::string Describe() const override {
    return absl::StrCat("netstack (", rt_->link().Name(), ")");
  }
  std::string FormatCounters() const override;
  void Linger(Duration max) override;

  // One chunk of filler, shared by every bulk send.
  const buffer::PayloadView& filler() const { return filler_; }

 private:
  NetstackNetImpl() = default;
  absl::Status Start();
  absl::StatusOr<std::unique_ptr<tcp::TcpSocket>> OpenSocket(
      const transport::SocketAddress& a, const StreamOptions& options);

  std::unique_ptr<runtime::Runtime> rt_;
  GsoMode gso_mode_ = GsoMode::kOff;
  buffer::PayloadView filler_;  // a chunk of rt_'s pool: goes first
};

NetstackStream::NetstackStream(NetstackNetImpl& net,
                               std::unique_ptr<tcp::TcpSocket> s)
    : net_(net), socket_(std::move(s)) {
  socket_->set_callback([this](uint32_t events) { OnEvents(events); });
}

void NetstackStream::Close() {
  if (!socket_) return;
  socket_->set_callback(nullptr);
  socket_->Close();
  socket_.reset();
  // Not kick_.set_callback(): Close() may run inside kick_'s own callback.
  net_.loop().timers().Cancel(kick_);
}

void NetstackStream::OnEvents(uint32_t events) {
  if (!want_writable_) events &= ~transport::event::kWritable;
  if (events != 0 && handler_) handler_(events);
}

void NetstackStream::SetHandler(Handler handler) {
  handler_ = std::move(handler);
}

void NetstackStream::WantWritable(bool want) {
  want_writable_ = want;
  if (!want || !socket_) return;
  if ((socket_->Events() & transport::event::kWritable) != 0 &&
      !kick_.scheduled()) {
    kick_.set_callback([this](Instant) {
      if (socket_ && want_writable_) {
        OnEvents(socket_->Events());
      }
    });
    net_.loop().timers().Schedule(kick_, net_.loop().Now());
  }
}

absl::StatusOr<size_t> NetstackStream::SendBulk(size_t max) {
  if (!socket_) return transport::NotConnected();
  size_t sent = 0;
  const buffer::PayloadView& filler = net_.filler();
  while (sent < max) {
    const uint32_t n =
        static_cast<uint32_t>(std::min<size_t>(max - sent, kBulkView));
    absl::Status s = socket_->WriteView(filler.Subview(0, n));
    if (!s.ok()) {
      if (sent > 0 && transport::IsWouldBlock(s)) break;
      return s;
    }
    sent += n;
  }
  return sent;
}

absl::StatusOr<size_t> NetstackStream::DiscardBulk(size_t max) {
  if (!socket_) return transport::NotConnected();
  size_t got_views = 0;
  absl::StatusOr<size_t> got =
      socket_->ReadViews(std::span(views_), max, &got_views);
  for (size_t i = 0; i < got_views; ++i) views_[i] = buffer::PayloadView();
  return got;
}

StreamInfo NetstackStream::Info() const {
  StreamInfo info;
  if (!socket_) return info;
  const tcp::TcpInfo t = socket_->Info();
  info.retransmits = t.retransmits;
  info.snd_cwnd_bytes = t.cwnd * t.mss;
  info.rtt_us = static_cast<uint32_t>(absl::ToInt64Microseconds(t.rtt));
  return info;
}

std::string NetstackStream::Describe() const {
  if (!socket_) return "closed";
  return absl::StrCat(socket_->local_address().ToString(), " -> ",
                      socket_->remote_address().ToString());
}

absl::StatusOr<std::unique_ptr<Stream>> NetstackListener::Accept() {
  absl::Status last = transport::WouldBlock();
  for (auto& listening : sockets_) {
    absl::StatusOr<std::unique_ptr<tcp::TcpSocket>> s = listening->Accept();
    if (s.ok()) {
      return std::unique_ptr<Stream>(
          std::make_unique<NetstackStream>(net_, std::move(*s)));
    }
    if (!transport::IsWouldBlock(s.status())) last = s.status();
  }
  return last;
}

absl::StatusOr<std::unique_ptr<NetstackNetImpl>> NetstackNetImpl::Create() {
  std::unique_ptr<NetstackNetImpl> net(new NetstackNetImpl());
  if (absl::Status s = net->Start(); !s.ok()) return s;
  return net;
}

absl::Status NetstackNetImpl::Start() {
  runtime::RuntimeOptions o;
  o.chunks = 2048;  // 128 MiB of payload at most
  o.packets = 32768;
  absl::StatusOr<GsoMode> mode = LinkOptionsFromFlags(o);
  if (!mode.ok()) return mode.status();
  gso_mode_ = *mode;
  absl::StatusOr<tcp::ConnectionOptions> conn =
      ConnectionOptionsFromFlags(o.tcp.connection);
  if (!conn.ok()) return conn.status();
  o.tcp.connection = *conn;
  absl::StatusOr<std::unique_ptr<runtime::Runtime>> rt =
      runtime::Runtime::Create(std::move(o));
  if (!rt.ok()) return rt.status();
  rt_ = *std::move(rt);

  buffer::ChunkRef chunk = rt_->chunks().Allocate();
  if (!chunk) return absl::ResourceExhaustedError("no chunk for the filler");
  std::span<uint8_t> bytes = chunk->mutable_data();
  for (size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<uint8_t>('0' + i % 10);
  }
  filler_ = buffer::PayloadView(std::move(chunk), 0, buffer::kChunkSize);
  return absl::OkStatus();
}

NetstackNetImpl::~NetstackNetImpl() = default;

absl::StatusOr<std::unique_ptr<tcp::TcpSocket>> NetstackNetImpl::OpenSocket(
    const transport::SocketAddress& a, const StreamOptions& options) {
  std::unique_ptr<tcp::TcpSocket> s = rt_->tcp().Open(a.ip.family());
  tcp::ConnectionOptions o = s->options();
  if (options.congestion_control == "reno") {
    o.congestion = tcp::CongestionAlgorithm::kNewReno;
  } else if (options.congestion_control == "cubic") {
    o.congestion = tcp::CongestionAlgorithm::kCubic;
  }
  if (options.send_buffer > 0) {
    o.send_buffer = static_cast<uint32_t>(options.send_buffer);
  }
  if (options.receive_buffer > 0) {
    o.max_receive_buffer = static_cast<uint32_t>(options.receive_buffer);
  }
  o.nodelay = options.no_delay;
  if (absl::Status st = s->SetOptions(o); !st.ok()) return st;
  return s;
}

absl::StatusOr<std::unique_ptr<Listener>> NetstackNetImpl::Listen(
    const transport::SocketAddress& local, const StreamOptions& options) {
  std::vector<transport::SocketAddress> addresses = {local};
  if (local.ip.IsUnspecified()) {
    const bool v4 = !absl::GetFlag(FLAGS_addr).empty();
    const bool v6 = !absl::GetFlag(FLAGS_addr6).empty();
    addresses.clear();
    if (v4) addresses.push_back({*transport::IpAddress::Parse("0.0.0.0"),
                                 local.port});
    if (v6) addresses.push_back({*transport::IpAddress::Parse("::"),
                                 local.port});
  }
  std::vector<std::unique_ptr<tcp::TcpSocket>> sockets;
  for (const transport::SocketAddress& a : addresses) {
    absl::StatusOr<std::unique_ptr<tcp::TcpSocket>> s = OpenSocket(a, options);
    if (!s.ok()) return s.status();
    if (absl::Status st = (*s)->Bind(a); !st.ok()) return st;
    if (absl::Status st = (*s)->Listen(128); !st.ok()) return st;
    sockets.push_back(std::move(*s));
  }
  if (sockets.empty()) {
    return absl::InvalidArgumentError("no address to listen on");
  }
  return std::unique_ptr<Listener>(
      std::make_unique<NetstackListener>(*this, std::move(sockets)));
}

absl::StatusOr<std::unique_ptr<Stream>> NetstackNetImpl::Connect(
    const transport::SocketAddress& remote, const StreamOptions& options) {
  absl::StatusOr<std::unique_ptr<tcp::TcpSocket>> s =
      OpenSocket(remote, options);
  if (!s.ok()) return s.status();
  if (absl::Status st = (*s)->Connect(remote); !st.ok()) return st;
  return std::unique_ptr<Stream>(
      std::make_unique<NetstackStream>(*this, std::move(*s)));
}

void NetstackNetImpl::Linger(Duration max) {
  eventloop::EventLoop& loop = rt_->loop();
  const Instant deadline = loop.Now() + max;
  while (rt_->tcp().ConnectionsWithPendingOutput() > 0 &&
         loop.Now() < deadline) {
    if (!loop.RunOnce(absl::Milliseconds(10)).ok()) return;
  }
}

std::string NetstackNetImpl::FormatCounters() const {
  std::string text = rt_->stack().FormatCounters();
  absl::StrAppend(&text, rt_->tcp().FormatCounters());
  if (!text.empty() && text.back() != '\n') text.push_back('\n');
  absl::StrAppend(&text, FormatLinkCounters(*rt_, gso_mode_));
  return text;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Net>> CreateNetstackNetFromFlags() {
  absl::StatusOr<std::unique_ptr<NetstackNetImpl>> net =
      NetstackNetImpl::Create();
  if (!net.ok()) return net.status();
  return std::unique_ptr<Net>(std::move(*net));
}

}  // namespace netstack::tools::bench
