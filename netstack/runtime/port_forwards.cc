#include "netstack/runtime/port_forwards.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "boost/intrusive/list.hpp"
#include "link/fd_util.h"
#include "link/netns.h"
#include "netstack/backend/udp_flows.h"
#include "netstack/backend/udp_host_socket.h"
#include "netstack/base/dcheck.h"

namespace netstack::runtime {
namespace {

using link::ErrnoStatus;
using link::UniqueFd;

using backend::FromSockaddr;
using backend::ToSockaddr;

transport::IpAddress Loopback(bool v4) {
  return v4 ? transport::IpAddress(wire::Ipv4Address::FromU32(0x7f000001))
            : transport::IpAddress(*wire::Ipv6Address::Parse("::1"));
}

bool IsLoopback(const transport::IpAddress& a) {
  return a.is_v4() ? a.v4().bytes[0] == 127 : a == Loopback(false);
}

// Closes an accepted client's socket with a RST (SO_LINGER 0).
void Reset(int fd) {
  const linger l{1, 0};
  (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  (void)close(fd);
}

}  // namespace

struct PortForwards::Forward {
  uint64_t id = 0;
  std::string spec;
  bool udp = false;
  std::vector<ForwardRule> rules;
  std::vector<std::unique_ptr<Listener>> listeners;
  std::vector<std::unique_ptr<UdpListener>> udp_listeners;
  ForwardCounters counters;
  // -u through the stack: what its flows in the backend's table moved.
  backend::InboundUdpCounts udp_stack;
  // -t through the stack: what its flows moved (they may outlive this).
  std::shared_ptr<backend::InboundTcpCounts> tcp_stack =
      std::make_shared<backend::InboundTcpCounts>();
};

// recvmmsg/sendmmsg arrays: kSize datagrams of up to 64 KiB (the largest
// UDP payload fits; a bigger one cannot arrive). 2 MiB, made once.
struct PortForwards::UdpBatch {
  static constexpr int kSize = 32;
  static constexpr size_t kDatagram = 65536;
  std::unique_ptr<uint8_t[]> data{new uint8_t[kSize * kDatagram]};
  mmsghdr msgs[kSize];
  iovec iov[kSize];
  sockaddr_storage names[kSize];

  // Ready to receive kSize datagrams (with their source addresses when
  // `named`).
  void PrepareReceive(bool named) {
    for (int i = 0; i < kSize; ++i) {
      iov[i] = {data.get() + i * kDatagram, kDatagram};
      std::memset(&msgs[i], 0, sizeof(msgs[i]));
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
      if (named) {
        msgs[i].msg_hdr.msg_name = &names[i];
        msgs[i].msg_hdr.msg_namelen = sizeof(names[i]);
      }
    }
  }
};

// A -u client flow on the socket path: for one client address, a socket
// made in the guest's namespace and connected to its loopback at the
// guest port.
struct PortForwards::UdpFlow : eventloop::Handler {
  UdpFlow(UdpListener& l, const transport::SocketAddress& c)
      : listener(l), client(c) {}
  void OnReadable(Instant now) override;
  // An ICMP error on the connected socket (the guest's port is closed):
  // reading SO_ERROR clears it; the datagram that caused it is lost.
  void OnError(Instant now, uint32_t) override {
    int err = 0;
    socklen_t len = sizeof(err);
    (void)getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
  }
  UdpListener& listener;
  const transport::SocketAddress client;
  sockaddr_storage name;
  socklen_t name_len = 0;
  UniqueFd fd;
  Instant last_active;
  bool replied = false;  // the guest has sent on it
  // On UdpClientFlows' unreplied or replied list.
  boost::intrusive::list_member_hook<> lru;
};

// The client flows of every -u forward on the socket path: the limit, and
// two lists, least recently active first, of the flows the guest has not
// answered (they close after the unreplied timeout) and of those it has
// (the idle timeout). Expiry looks at the two fronts only; activity and
// an answer are O(1) relinks, with no allocation. A full table evicts the
// front of the first list, else of the second: a new client always gets
// in, and a flood of ports the guest never answers (one host has 64 Ki of
// them, and a spoofer more) takes no answered flow while it lasts.
class PortForwards::UdpClientFlows {
 public:
  UdpClientFlows(eventloop::EventLoop& loop, size_t max_flows,
                 Duration idle_timeout, Duration unreplied_timeout)
      : loop_(loop),
        max_flows_(max_flows),
        idle_timeout_(idle_timeout),
        unreplied_timeout_(std::min(unreplied_timeout, idle_timeout)) {
    expiry_.set_callback([this](Instant now) { Expire(now); });
  }
  // Every listener closed its flows first.
  ~UdpClientFlows() { NETSTACK_DCHECK(unreplied_.empty() && replied_.empty()); }

  // Makes room for one more flow, closing one if the table is full
  // (counted on its forward); false if there is none to close.
  bool MakeRoom();
  // A new flow, not answered yet.
  void Link(UdpFlow& flow, Instant now) {
    flow.last_active = now;
    unreplied_.push_back(flow);
    // Activity only moves the fronts' deadlines later (the timer then
    // fires early and looks again); a new flow may need an earlier one.
    const Instant deadline = now + unreplied_timeout_;
    if (!expiry_.scheduled() || expiry_.deadline() > deadline) {
      loop_.timers().Schedule(expiry_, deadline);
    }
  }
  void Unlink(UdpFlow& flow) {
    List& list = ListOf(flow);
    list.erase(list.iterator_to(flow));
  }
  void Touch(UdpFlow& flow, Instant now) {
    flow.last_active = now;
    List& list = ListOf(flow);
    list.splice(list.end(), list, list.iterator_to(flow));
  }
  // The guest sent on `flow`: it has the idle timeout from now on.
  void MarkReplied(UdpFlow& flow) {
    if (flow.replied) return;
    unreplied_.erase(unreplied_.iterator_to(flow));
    flow.replied = true;
    replied_.push_back(flow);
  }

 private:
  using List = boost::intrusive::list<
      UdpFlow,
      boost::intrusive::member_hook<
          UdpFlow, boost::intrusive::list_member_hook<>, &UdpFlow::lru>>;
  List& ListOf(const UdpFlow& flow) {
    return flow.replied ? replied_ : unreplied_;
  }
  size_t size() const { return unreplied_.size() + replied_.size(); }
  void Expire(Instant now);

  eventloop::EventLoop& loop_;
  const size_t max_flows_;
  const Duration idle_timeout_;
  const Duration unreplied_timeout_;
  List unreplied_;
  List replied_;
  eventloop::Timer expiry_;
};

// A UDP forward's bound socket on the host, and per client address a
// flow (UdpFlow). Clients' datagrams go out of their flow's socket; the
// guest's replies, read from it, go back from the bound socket to that
// client.
class PortForwards::UdpListener : public eventloop::Handler {
 public:
  UdpListener(PortForwards& owner, Forward& f, const ForwardRule& rule,
              UniqueFd fd, int family)
      : owner_(owner), f_(f), rule_(rule), fd_(std::move(fd)), family_(family) {
    if (!owner_.udp_via_socket()) {
      table_ = owner_.options_.backend->udp_flows();
      const backend::AddressPlan& plan = owner_.options_.backend->plan();
      guest_ = {transport::IpAddress(plan.lease4), rule_.guest_port};
      gateway_ = transport::IpAddress(plan.gateway4);
    }
  }
  ~UdpListener() override {
    if (table_ != nullptr) table_->CloseInbound(fd_.get());
    while (!flows_.empty()) Close(*flows_.begin()->second, Why::kRemoved);
    if (owner_.options_.loop->IsRegistered(fd_.get())) {
      (void)owner_.options_.loop->Remove(fd_.get());
    }
  }
  int fd() const { return fd_.get(); }

  // Clients to the guest.
  void OnReadable(Instant now) override {
    if (table_ != nullptr) {
      // Through the stack: the backend's flow table reads, keeps the
      // client flows and sends the replies back from fd_.
      return table_->ReadInbound(fd_.get(), guest_, gateway_, f_.udp_stack,
                                 now);
    }
    UdpBatch& b = *owner_.udp_batch_;
    // A bounded number of batches per wake-up: a flood on one forward
    // does not starve the loop.
    for (int round = 0; round < 4; ++round) {
      b.PrepareReceive(/*named=*/true);
      const int n =
          recvmmsg(fd_.get(), b.msgs, UdpBatch::kSize, MSG_DONTWAIT, nullptr);
      if (n <= 0) return;
      for (int i = 0; i < n; ++i) {
        std::optional<transport::SocketAddress> client =
            FromSockaddr(b.names[i], b.msgs[i].msg_hdr.msg_namelen);
        if (!client) continue;
        UdpFlow* flow =
            FindOrOpen(*client, b.names[i], b.msgs[i].msg_hdr.msg_namelen, now);
        if (flow == nullptr) continue;  // counted
        const size_t len = b.msgs[i].msg_len;
        if (send(flow->fd.get(), b.iov[i].iov_base, len, MSG_DONTWAIT) < 0) {
          ++f_.counters.udp_dropped;
          continue;
        }
        ++f_.counters.datagrams_to_guest;
        f_.counters.bytes_to_guest += len;
        owner_.udp_client_flows_->Touch(*flow, now);
      }
      if (n < UdpBatch::kSize) return;
    }
  }

  // The guest to one client.
  void FromGuest(UdpFlow& flow, Instant now) {
    UdpBatch& b = *owner_.udp_batch_;
    for (int round = 0; round < 4; ++round) {
      b.PrepareReceive(/*named=*/false);
      const int n = recvmmsg(flow.fd.get(), b.msgs, UdpBatch::kSize,
                             MSG_DONTWAIT, nullptr);
      if (n <= 0) return;  // EAGAIN, or a pending error (now cleared)
      for (int i = 0; i < n; ++i) {
        b.iov[i].iov_len = b.msgs[i].msg_len;
        b.msgs[i].msg_hdr.msg_name = &flow.name;
        b.msgs[i].msg_hdr.msg_namelen = flow.name_len;
      }
      int sent = 0;
      while (sent < n) {
        const int m =
            sendmmsg(fd_.get(), b.msgs + sent, n - sent, MSG_DONTWAIT);
        if (m <= 0) break;
        sent += m;
      }
      for (int i = 0; i < sent; ++i) {
        f_.counters.bytes_from_guest += b.msgs[i].msg_len;
      }
      f_.counters.datagrams_from_guest += sent;
      f_.counters.udp_dropped += n - sent;
      owner_.udp_client_flows_->MarkReplied(flow);
      owner_.udp_client_flows_->Touch(flow, now);
      if (n < UdpBatch::kSize) return;
    }
  }

  // Why a flow closes, for its forward's counters.
  enum class Why { kIdle, kEvicted, kRemoved };
  // Closes `flow` (destroys it).
  void Close(UdpFlow& flow, Why why) {
    switch (why) {
      case Why::kIdle:
        ++f_.counters.udp_expired;
        if (!flow.replied) ++f_.counters.udp_expired_unreplied;
        break;
      case Why::kEvicted:
        ++(flow.replied ? f_.counters.udp_evicted_replied
                        : f_.counters.udp_evicted_unreplied);
        break;
      case Why::kRemoved:
        break;
    }
    (void)owner_.options_.loop->Remove(flow.fd.get());
    owner_.udp_client_flows_->Unlink(flow);
    --f_.counters.active;
    // A copy: the key lives in the flow the erase destroys.
    const transport::SocketAddress client = flow.client;
    flows_.erase(client);
  }

 private:
  UdpFlow* FindOrOpen(const transport::SocketAddress& client,
                      const sockaddr_storage& name, socklen_t name_len,
                      Instant now) {
    if (auto it = flows_.find(client); it != flows_.end()) {
      return it->second.get();
    }
    UdpClientFlows& table = *owner_.udp_client_flows_;
    if (!table.MakeRoom()) {
      ++f_.counters.udp_refused_limit;
      return nullptr;
    }
    absl::StatusOr<int> s = owner_.guest_sockets_->Take(
        link::NetnsSockets::KindOf(/*tcp=*/false, family_ == AF_INET));
    UniqueFd fd(s.ok() ? *s : -1);
    sockaddr_storage guest;
    const socklen_t guest_len =
        ToSockaddr({Loopback(family_ == AF_INET), rule_.guest_port}, guest);
    if (!s.ok() || connect(fd.get(), reinterpret_cast<const sockaddr*>(&guest),
                           guest_len) != 0) {
      ++f_.counters.udp_dropped;
      ++f_.counters.failed;
      return nullptr;
    }
    auto flow = std::make_unique<UdpFlow>(*this, client);
    flow->name = name;
    flow->name_len = name_len;
    flow->fd = std::move(fd);
    if (!owner_.options_.loop
             ->Add(flow->fd.get(), eventloop::EventLoop::kReadable, flow.get())
             .ok()) {
      ++f_.counters.udp_dropped;
      ++f_.counters.failed;
      return nullptr;
    }
    UdpFlow* raw = flow.get();
    table.Link(*raw, now);
    flows_.emplace(client, std::move(flow));
    ++f_.counters.accepted;
    ++f_.counters.active;
    return raw;
  }

  PortForwards& owner_;
  Forward& f_;
  const ForwardRule& rule_;
  UniqueFd fd_;
  const int family_;
  absl::flat_hash_map<transport::SocketAddress, std::unique_ptr<UdpFlow>>
      flows_;
  // Through the stack (else null): the table, the guest's address, the
  // source for clients the guest cannot see as themselves.
  backend::UdpFlowTable* table_ = nullptr;
  transport::SocketAddress guest_;
  transport::IpAddress gateway_;
};

void PortForwards::UdpFlow::OnReadable(Instant now) {
  listener.FromGuest(*this, now);
}

bool PortForwards::UdpClientFlows::MakeRoom() {
  if (size() < max_flows_) return true;
  // As Linux's conntrack early_drop, an unanswered flow goes first. An
  // answered one goes only when every flow is answered: the new client
  // still gets in, and the flow lost is the one idle longest.
  List& from = !unreplied_.empty() ? unreplied_ : replied_;
  if (from.empty()) return false;
  UdpFlow& victim = from.front();
  victim.listener.Close(victim, UdpListener::Why::kEvicted);
  return true;
}

void PortForwards::UdpClientFlows::Expire(Instant now) {
  for (const auto& [list, timeout] :
       {std::pair{&unreplied_, unreplied_timeout_},
        std::pair{&replied_, idle_timeout_}}) {
    while (!list->empty() && list->front().last_active + timeout <= now) {
      UdpFlow& flow = list->front();
      flow.listener.Close(flow, UdpListener::Why::kIdle);
    }
  }
  Instant next = kNever;
  if (!unreplied_.empty()) {
    next = unreplied_.front().last_active + unreplied_timeout_;
  }
  if (!replied_.empty()) {
    next = std::min(next, replied_.front().last_active + idle_timeout_);
  }
  if (next != kNever) loop_.timers().Schedule(expiry_, next);
}

// A listening socket of a forward (TCP or UNIX stream; UDP: the bound
// socket whose datagrams go to the guest).
class PortForwards::Listener : public eventloop::Handler {
 public:
  // `socket_file`: a unix: forward's socket file, which goes with it.
  Listener(PortForwards& owner, Forward& f, const ForwardRule& rule,
           UniqueFd fd, link::DirEntryRef socket_file)
      : owner_(owner),
        f_(f),
        rule_(rule),
        fd_(std::move(fd)),
        socket_file_(std::move(socket_file)) {
    resume_.set_callback([this](Instant) {
      (void)owner_.options_.loop->Modify(fd_.get(),
                                         eventloop::EventLoop::kReadable);
    });
  }
  ~Listener() override {
    if (owner_.options_.loop->IsRegistered(fd_.get())) {
      (void)owner_.options_.loop->Remove(fd_.get());
    }
    if (socket_file_.valid()) (void)socket_file_.Unlink();
  }
  int fd() const { return fd_.get(); }

  void OnReadable(Instant now) override {
    // A bounded batch per wake-up, so that a connect storm on one
    // forward does not starve the rest of the loop.
    for (int i = 0; i < 64; ++i) {
      sockaddr_storage ss;
      socklen_t len = sizeof(ss);
      const int c = accept4(fd_.get(), reinterpret_cast<sockaddr*>(&ss), &len,
                            SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (c < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        // EAGAIN: done; EMFILE/ENFILE/ENOBUFS: the next wake-up tries again.
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          // Out of fds or memory: the client stays in the backlog, and
          // the socket stays readable. Stop watching it for a while
          // rather than spin on it.
          ++f_.counters.accept_errors;
          (void)owner_.options_.loop->Modify(fd_.get(), 0);
          owner_.options_.loop->timers().Schedule(
              resume_, now + absl::Milliseconds(100));
        }
        return;
      }
      std::optional<transport::SocketAddress> client = FromSockaddr(ss, len);
      owner_.OnAccept(f_, rule_, c,
                      client.value_or(transport::SocketAddress{}));
    }
  }

 private:
  PortForwards& owner_;
  Forward& f_;
  const ForwardRule& rule_;
  UniqueFd fd_;
  link::DirEntryRef socket_file_;  // rule_.unix_path, by its directory
  eventloop::Timer resume_;        // watches the socket again after an error
};

// The guest side of a spliced connection while its connect() runs.
class PortForwards::SpliceConnect : public eventloop::Handler {
 public:
  SpliceConnect(PortForwards& owner, uint64_t forward_id, int client_fd,
                int guest_fd)
      : owner_(owner), id_(forward_id), client_(client_fd), guest_(guest_fd) {}
  ~SpliceConnect() override {
    if (guest_.valid() && owner_.options_.loop->IsRegistered(guest_.get())) {
      (void)owner_.options_.loop->Remove(guest_.get());
    }
    if (client_.valid()) {
      const linger l{1, 0};
      (void)setsockopt(client_.get(), SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    }
  }
  int guest_fd() const { return guest_.get(); }

  void OnWritable(Instant now) override { Finish(); }
  void OnError(Instant now, uint32_t) override { Finish(); }

  // The connect finished (or failed): hand both to a relay, or reset the
  // client. Destroys this.
  void Finish() {
    int err = 0;
    socklen_t len = sizeof(err);
    (void)getsockopt(guest_.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    (void)owner_.options_.loop->Remove(guest_.get());
    PortForwards& owner = owner_;
    std::unique_ptr<SpliceConnect> self =
        std::move(owner.connecting_.find(this)->second);
    owner.connecting_.erase(this);
    if (err != 0) {
      owner.SpliceEnded(id_, /*failed=*/true);
      return;  // self resets the client
    }
    owner.StartRelay(id_, client_.release(), guest_.release());
  }

 private:
  PortForwards& owner_;
  const uint64_t id_;
  UniqueFd client_;
  UniqueFd guest_;
};

PortForwards::PortForwards(const Options& options)
    : options_(options), pipes_(forward::PipePool::Options{}) {
  if (spliced()) {
    auto made = link::NetnsSockets::Create(options_.guest_netns_fd);
    if (made.ok()) {
      guest_sockets_ = *std::move(made);
    } else {
      guest_sockets_error_ = made.status();
    }
  }
}

PortForwards::~PortForwards() {
  connecting_.clear();
  relays_.clear();
  forwards_.clear();
}

bool PortForwards::spliced() const {
  return options_.guest_netns_fd >= 0 && options_.path != ForwardPath::kStack;
}

bool PortForwards::udp_via_socket() const { return spliced(); }

ForwardCounters* PortForwards::CountersOf(uint64_t id) {
  auto it = forwards_.find(id);
  return it == forwards_.end() ? nullptr : &it->second->counters;
}

namespace {

// Where one rule listens: a UNIX path, BIND_ADDR, or both families' any.
struct ListenAddress {
  int family;
  sockaddr_storage ss;
  socklen_t len;
  std::string label;
};

absl::StatusOr<std::vector<ListenAddress>> ListenAddresses(
    const std::string& spec, const ForwardRule& rule) {
  std::vector<ListenAddress> out;
  if (!rule.unix_path.empty()) {
    ListenAddress a{AF_UNIX, {}, sizeof(sockaddr_un), rule.unix_path};
    auto* un = reinterpret_cast<sockaddr_un*>(&a.ss);
    un->sun_family = AF_UNIX;
    if (rule.unix_path.size() >= sizeof(un->sun_path)) {
      return absl::InvalidArgumentError(
          absl::StrCat(spec, ": UNIX socket path too long"));
    }
    std::memcpy(un->sun_path, rule.unix_path.data(), rule.unix_path.size());
    out.push_back(a);
    return out;
  }
  std::vector<transport::SocketAddress> binds;
  if (rule.bind) {
    binds.push_back({*rule.bind, rule.host_port});
  } else {
    binds.push_back(
        {transport::IpAddress(wire::Ipv4Address()), rule.host_port});
    binds.push_back(
        {transport::IpAddress(wire::Ipv6Address()), rule.host_port});
  }
  for (const transport::SocketAddress& bind : binds) {
    ListenAddress a{
        bind.ip.is_v4() ? AF_INET : AF_INET6, {}, 0, bind.ToString()};
    a.len = ToSockaddr(bind, a.ss);
    out.push_back(a);
  }
  return out;
}

// A listening socket's fd, before its bind. A TCP listener takes
// SO_REUSEADDR so that netstackd can listen again while the last run's
// connections sit in TIME_WAIT; no other socket may listen on the port
// meanwhile. A UDP socket never does: there the option only lets every
// socket that sets it share the port, whoever owns it, and the newest one
// would get the clients' datagrams (review 2026-12-06, finding 6). UDP
// has no TIME_WAIT to wait out.
absl::StatusOr<UniqueFd> ListenSocket(const std::string& spec, int family,
                                      bool udp) {
  UniqueFd fd(socket(
      family, (udp ? SOCK_DGRAM : SOCK_STREAM) | SOCK_NONBLOCK | SOCK_CLOEXEC,
      0));
  if (!fd.valid()) return ErrnoStatus(errno, absl::StrCat(spec, ": socket"));
  const int one = 1;
  if (family != AF_UNIX && !udp) {
    (void)setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  }
  if (family == AF_INET6) {
    (void)setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
  }
  return fd;
}

}  // namespace

absl::Status PortForwards::CanAdd(const std::string& spec,
                                  const std::vector<ForwardRule>& rules) const {
  if (rules.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(spec, ": no ports"));
  }
  if (options_.path == ForwardPath::kSplice && options_.guest_netns_fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(spec,
                     ": --forward-path=splice needs a guest namespace (-- CMD, "
                     "--netns-pid, --netns); a VM guest is reached through the "
                     "stack"));
  }
  if (!guest_sockets_error_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(spec, ": ", guest_sockets_error_.message()));
  }
  if (rules.front().udp && !udp_via_socket() &&
      (options_.backend == nullptr ||
       options_.backend->udp_flows() == nullptr)) {
    return absl::FailedPreconditionError(
        absl::StrCat(spec,
                     ": UDP through the stack needs the backend's UDP "
                     "flow table"));
  }
  for (const ForwardRule& rule : rules) {
    if (!rule.unix_path.empty() && filesystem_detached_) {
      return absl::FailedPreconditionError(absl::StrCat(
          spec,
          ": a unix: forward can only be given on the command line: "
          "after setup netstackd has no filesystem (--sandbox=on, "
          "docs/SECURITY.md)"));
    }
  }
  return absl::OkStatus();
}

void PortForwards::EnsureUdpClientFlows() {
  if (udp_batch_) return;
  udp_batch_ = std::make_unique<UdpBatch>();
  const backend::BackendLimits* limits =
      options_.backend != nullptr ? &options_.backend->config().limits
                                  : nullptr;
  udp_client_flows_ = std::make_unique<UdpClientFlows>(
      *options_.loop,
      options_.max_udp_flows.value_or(limits != nullptr ? limits->max_udp_flows
                                                        : 1024),
      options_.udp_idle_timeout.value_or(
          limits != nullptr ? limits->udp_idle_timeout : absl::Seconds(180)),
      options_.udp_unreplied_timeout);
}

absl::Status PortForwards::Listen(Forward& f, const ForwardRule& rule,
                                  int family, const sockaddr_storage& ss,
                                  socklen_t len, const std::string& label) {
  absl::StatusOr<UniqueFd> fd = ListenSocket(f.spec, family, f.udp);
  if (!fd.ok()) return fd.status();
  // A unix: forward's socket file, by its directory, opened before the
  // bind: it can be removed after the root has moved (the filesystem
  // detached after setup), and is removed if the setup fails later.
  link::DirEntryRef socket_file;
  if (family == AF_UNIX) {
    absl::StatusOr<link::DirEntryRef> e = link::DirEntryRef::Of(rule.unix_path);
    if (!e.ok()) {
      return absl::Status(e.status().code(),
                          absl::StrCat(f.spec, ": ", e.status().message()));
    }
    socket_file = *std::move(e);
  }
  const char* what = f.udp ? ": bind " : ": listen on ";
  if (bind(fd->get(), reinterpret_cast<const sockaddr*>(&ss), len) != 0) {
    return ErrnoStatus(errno, absl::StrCat(f.spec, what, label));
  }
  if (!f.udp && listen(fd->get(), 1024) != 0) {
    const int e = errno;
    if (socket_file.valid()) (void)socket_file.Unlink();
    return ErrnoStatus(e, absl::StrCat(f.spec, what, label));
  }
  if (f.udp) {
    auto u =
        std::make_unique<UdpListener>(*this, f, rule, *std::move(fd), family);
    if (absl::Status s = options_.loop->Add(
            u->fd(), eventloop::EventLoop::kReadable, u.get());
        !s.ok()) {
      return s;
    }
    f.udp_listeners.push_back(std::move(u));
    return absl::OkStatus();
  }
  auto l = std::make_unique<Listener>(*this, f, rule, *std::move(fd),
                                      std::move(socket_file));
  if (absl::Status s =
          options_.loop->Add(l->fd(), eventloop::EventLoop::kReadable, l.get());
      !s.ok()) {
    return s;
  }
  f.listeners.push_back(std::move(l));
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> PortForwards::Add(
    const std::string& spec, const std::vector<ForwardRule>& rules) {
  if (absl::Status s = CanAdd(spec, rules); !s.ok()) return s;
  auto f = std::make_unique<Forward>();
  f->id = next_id_;
  f->spec = spec;
  f->udp = rules.front().udp;
  f->rules = rules;
  if (f->udp && udp_via_socket()) EnsureUdpClientFlows();
  for (const ForwardRule& rule : f->rules) {
    absl::StatusOr<std::vector<ListenAddress>> addrs =
        ListenAddresses(spec, rule);
    if (!addrs.ok()) return addrs.status();
    for (const ListenAddress& a : *addrs) {
      if (absl::Status s = Listen(*f, rule, a.family, a.ss, a.len, a.label);
          !s.ok()) {
        return s;
      }
    }
  }
  ++next_id_;
  const uint64_t id = f->id;
  forwards_.emplace(id, std::move(f));
  return id;
}

absl::Status PortForwards::Remove(uint64_t id) {
  auto it = forwards_.find(id);
  if (it == forwards_.end()) {
    return absl::NotFoundError(absl::StrCat("no forward ", id));
  }
  forwards_.erase(it);
  return absl::OkStatus();
}

void PortForwards::OnAccept(Forward& f, const ForwardRule& rule, int fd,
                            const transport::SocketAddress& client) {
  // A connection past a limit is reset now: left in the backlog it would
  // only wait, and hold back the clients behind it. Through the stack a
  // forward's connections are its flows in the backend, and their total
  // is the backend's inbound share (AdoptInboundTcp refuses past it).
  const uint64_t active = spliced() ? f.counters.active : f.tcp_stack->active;
  if (active >= options_.max_conns_per_forward ||
      (spliced() && spliced_conns_ >= options_.max_conns)) {
    ++f.counters.refused_limit;
    return Reset(fd);
  }
  const int one = 1;
  if (rule.unix_path.empty()) {
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  if (spliced()) {
    // The family toward the guest's loopback: the client's (a UNIX
    // client: IPv4).
    const bool v4 = rule.unix_path.empty() ? client.ip.is_v4() : true;
    ++f.counters.accepted;
    ++f.counters.active;
    ++spliced_conns_;
    return StartSplice(f, rule, fd, v4 ? AF_INET : AF_INET6);
  }
  // Through the stack, to the guest's IPv4 lease (the address it surely
  // has: its IPv6 one is its own SLAAC choice), from the client's own
  // address when that is an IPv4 address off this host's loopback, else
  // from the gateway. The relay does not care that the two legs' families
  // differ.
  const backend::AddressPlan& plan = options_.backend->plan();
  transport::SocketAddress source{transport::IpAddress(plan.gateway4), 0};
  if (rule.unix_path.empty() && client.ip.is_v4() && !IsLoopback(client.ip) &&
      !client.ip.IsUnspecified()) {
    source = client;
  }
  const transport::SocketAddress guest{transport::IpAddress(plan.lease4),
                                       rule.guest_port};
  const absl::Status s =
      options_.backend->AdoptInboundTcp(fd, source, guest, f.tcp_stack);
  if (absl::IsResourceExhausted(s)) {  // a flow limit; the client is reset
    ++f.counters.refused_limit;
    return;
  }
  ++f.counters.accepted;
  if (!s.ok()) ++f.counters.failed;
}

void PortForwards::StartSplice(Forward& f, const ForwardRule& rule, int fd,
                               int family) {
  // The guest-side socket was made in the guest's namespace; connect()
  // runs here (a socket keeps its namespace).
  absl::StatusOr<int> made = guest_sockets_->Take(
      link::NetnsSockets::KindOf(/*tcp=*/true, family == AF_INET));
  const int guest = made.ok() ? *made : -1;
  auto fail = [&] {
    SpliceEnded(f.id, /*failed=*/true);
    Reset(fd);
  };
  if (!made.ok()) return fail();
  const int one = 1;
  (void)setsockopt(guest, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  sockaddr_storage ss;
  const socklen_t len =
      ToSockaddr({Loopback(family == AF_INET), rule.guest_port}, ss);
  if (connect(guest, reinterpret_cast<const sockaddr*>(&ss), len) == 0) {
    return StartRelay(f.id, fd, guest);
  }
  if (errno != EINPROGRESS) {
    (void)close(guest);
    return fail();
  }
  auto pending = std::make_unique<SpliceConnect>(*this, f.id, fd, guest);
  SpliceConnect* p = pending.get();
  if (!options_.loop->Add(guest, eventloop::EventLoop::kWritable, p).ok()) {
    SpliceEnded(f.id, /*failed=*/true);
    return;  // pending's destructor resets the client
  }
  connecting_.emplace(p, std::move(pending));
}

void PortForwards::StartRelay(uint64_t forward_id, int client_fd,
                              int guest_fd) {
  forward::RelayOptions o;
  o.mode = options_.relay_mode;
  auto relay = forward::Relay::Create(
      *options_.loop, pipes_, client_fd, guest_fd, o,
      [this, forward_id](forward::Relay& r, absl::Status) {
        RelayDone(r, forward_id);
      });
  if (!relay.ok()) {
    SpliceEnded(forward_id, /*failed=*/true);
    return;
  }
  forward::Relay* r = relay->get();
  relays_.emplace(r, RelayEntry{std::move(*relay), forward_id});
}

void PortForwards::RelayDone(forward::Relay& relay, uint64_t forward_id) {
  if (ForwardCounters* c = CountersOf(forward_id)) {
    const forward::RelayStats& s = relay.stats();
    c->bytes_to_guest += s.a_to_b.bytes;
    c->bytes_from_guest += s.b_to_a.bytes;
    c->spliced_bytes += s.a_to_b.splice_bytes + s.b_to_a.splice_bytes;
  }
  SpliceEnded(forward_id, /*failed=*/false);
  relays_.erase(&relay);  // destroys the relay: nothing after this
}

void PortForwards::SpliceEnded(uint64_t forward_id, bool failed) {
  --spliced_conns_;
  if (ForwardCounters* c = CountersOf(forward_id)) {
    if (failed) ++c->failed;
    --c->active;
  }
}

std::vector<ForwardInfo> PortForwards::List() const {
  std::vector<ForwardInfo> out;
  for (const auto& [id, f] : forwards_) {
    ForwardInfo i;
    i.id = id;
    i.spec = f->spec;
    i.udp = f->udp;
    i.path = !spliced() ? "stack" : f->udp ? "socket" : "splice";
    i.listeners = f->listeners.size() + f->udp_listeners.size();
    i.counters = f->counters;
    const backend::InboundUdpCounts& u = f->udp_stack;
    i.counters.accepted += u.flows_opened;
    i.counters.active += u.flows_open;
    i.counters.datagrams_to_guest += u.datagrams_to_guest;
    i.counters.bytes_to_guest += u.bytes_to_guest;
    i.counters.datagrams_from_guest += u.datagrams_from_guest;
    i.counters.bytes_from_guest += u.bytes_from_guest;
    i.counters.udp_refused_limit += u.refused_limit;
    i.counters.udp_dropped += u.dropped;
    i.counters.udp_expired += u.flows_expired;
    i.counters.udp_expired_unreplied += u.flows_expired_unreplied;
    i.counters.udp_evicted_unreplied += u.flows_evicted_unreplied;
    i.counters.udp_evicted_replied +=
        u.flows_evicted - u.flows_evicted_unreplied;
    i.counters.active += f->tcp_stack->active;
    i.counters.bytes_to_guest += f->tcp_stack->bytes_to_guest;
    i.counters.bytes_from_guest += f->tcp_stack->bytes_from_guest;
    for (const auto& [r, e] : relays_) {
      if (e.forward_id != id) continue;
      const forward::RelayStats& s = r->stats();
      i.counters.bytes_to_guest += s.a_to_b.bytes;
      i.counters.bytes_from_guest += s.b_to_a.bytes;
      i.counters.spliced_bytes += s.a_to_b.splice_bytes + s.b_to_a.splice_bytes;
    }
    out.push_back(std::move(i));
  }
  return out;
}

std::string PortForwards::FormatCounters() const {
  std::string out;
  for (const ForwardInfo& i : List()) {
    const std::string p = absl::StrCat("forward.", i.id, ".");
    absl::StrAppend(&out, p, "spec ", i.udp ? "-u " : "-t ", i.spec, "\n", p,
                    "path ", i.path, "\n", p, "accepted ", i.counters.accepted,
                    "\n", p, "failed ", i.counters.failed, "\n", p, "active ",
                    i.counters.active, "\n", p, "bytes_to_guest ",
                    i.counters.bytes_to_guest, "\n", p, "bytes_from_guest ",
                    i.counters.bytes_from_guest, "\n", p, "spliced_bytes ",
                    i.counters.spliced_bytes, "\n", p, "accept_errors ",
                    i.counters.accept_errors, "\n");
    if (!i.udp) {
      absl::StrAppend(&out, p, "refused_limit ", i.counters.refused_limit,
                      "\n");
    }
    if (i.udp) {
      absl::StrAppend(
          &out, p, "datagrams_to_guest ", i.counters.datagrams_to_guest, "\n",
          p, "datagrams_from_guest ", i.counters.datagrams_from_guest, "\n", p,
          "udp_refused_limit ", i.counters.udp_refused_limit, "\n", p,
          "udp_dropped ", i.counters.udp_dropped, "\n", p, "udp_expired ",
          i.counters.udp_expired, "\n", p, "udp_expired_unreplied ",
          i.counters.udp_expired_unreplied, "\n", p, "udp_evicted_unreplied ",
          i.counters.udp_evicted_unreplied, "\n", p, "udp_evicted_replied ",
          i.counters.udp_evicted_replied, "\n");
    }
  }
  return out;
}

}  // namespace netstack::runtime
