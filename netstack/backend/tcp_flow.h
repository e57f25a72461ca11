// One guest TCP flow relayed to a host socket (docs/BACKEND.md "Flow
// lifecycle").
//
//   connecting: the guest's SYN is held by the TCP layer; a non-blocking
//     host connect() runs. Its outcome is applied at the next
//     Backend::Sweep: success answers the SYN (AcceptHeld), a failure
//     refuses it as the guest's kernel would see it (RST, ICMP
//     unreachable, or silence for a timeout).
//   relaying: bytes both ways, without a user-space copy. Guest to host:
//     the netstack socket's receive views go out in one sendmsg with an
//     iovec each. Host to guest: recv into the backend's shared chunk
//     arena, written into the netstack socket as a view. Each direction
//     holds a bounded amount: while the host socket is full the flow
//     reads no more from the guest (its window closes); while the guest
//     socket's send queue is full the host socket is not read; while the
//     arena has no room (only the chunk pool's receive reserve is left)
//     the host socket is not read either, until acks free chunks.
//   ended: the reason is counted; the host fd is closed exactly once
//     (abortively, SO_LINGER 0, when the guest reset); the Backend frees
//     the flow at its next Sweep.
#ifndef NETSTACK_BACKEND_TCP_FLOW_H_
#define NETSTACK_BACKEND_TCP_FLOW_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "netstack/backend/backend.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/payload_view.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/tcp/tcp_socket.h"
#include "netstack/transport/address.h"

namespace netstack::backend {

class TcpFlow : public eventloop::Handler {
 public:
  // `tuple` is the guest's flow as the stack sees it (local = the
  // destination the guest named, remote = the guest).
  TcpFlow(Backend& backend, const transport::FourTuple& tuple);
  TcpFlow(const TcpFlow&) = delete;
  TcpFlow& operator=(const TcpFlow&) = delete;
  // Closes the host fd if it is still open (abortively) and the guest
  // socket (RST) if the flow had not ended.
  ~TcpFlow() override;

  // Starts the host connect to `host` (non-blocking). Whatever happens,
  // the outcome is applied at the next Sweep, never from inside the TCP
  // layer's receive path. `egress`: the egress policy admitted it (not the
  // gateway's host loopback): SetEgressPolicy judges it again, and its
  // end goes to the flow log.
  void Start(const transport::SocketAddress& host, bool egress, Instant now);
  // A new egress policy denies it: RST to the guest (its held SYN, or its
  // connection), abortive close on the host (FlowEnd::kPolicyReset).
  void ResetForPolicy();
  // Judged by the egress policy (Start's `egress`), and where it goes.
  bool egress() const { return egress_; }
  // The name whose pin admitted it (policy::Reason::kPinnedName), kept so
  // that a policy change judges it by that name, not by whether the pin
  // has expired since: a pin admits new flows for its TTL, and an open
  // flow it admitted stays while a rule still allows the name.
  void set_pinned_name(std::string name) { pinned_name_ = std::move(name); }
  const std::string& pinned_name() const { return pinned_name_; }
  const transport::SocketAddress& host_destination() const { return host_; }
  // The other way (Backend::AdoptInboundTcp): `host_fd` is a connected
  // host socket of an inbound forward, `sock` a netstack connection
  // toward the guest, connecting. Relaying starts once the guest accepts;
  // if it refuses, the host socket is reset.
  void StartInbound(int host_fd, std::unique_ptr<tcp::TcpSocket> sock);
  // Also counts this flow's bytes (and, while it lives, one active) in
  // `counts`: its forward's.
  void CountInbound(std::shared_ptr<InboundTcpCounts> counts) {
    ++counts->active;
    inbound_counts_ = std::move(counts);
  }
  // Applies a finished connect; true when the flow has ended and may be
  // freed.
  bool Sweep(Instant now);
  bool ended() const { return phase_ == Phase::kEnded; }
  // Started by StartInbound (the backend's inbound share).
  bool inbound() const { return inbound_; }
  // Bytes the flow holds between the two sockets: guest-to-host views
  // the host socket has not taken, the guest socket's unread bytes and
  // its send queue (unsent and unacked). Bounded by BackendLimits and
  // the guest socket's receive window.
  uint64_t buffered_bytes() const;

  // eventloop::Handler (the host socket).
  void OnReadable(Instant now) override;
  void OnWritable(Instant now) override;
  void OnError(Instant now, uint32_t epoll_events) override;

  // The backend's arena has room again (Backend::WaitForChunk).
  void ChunkAvailable();
  // The egress limiter's timer: the bytes this flow waited for are there.
  void EgressResumed();
  // recv() into the arena's chunk only while this much of it is left.
  static constexpr uint32_t kMinRecvRoom = 4096;

 private:
  std::shared_ptr<InboundTcpCounts> inbound_counts_;
  enum class Phase : uint8_t {
    kConnecting,       // the host connect() runs
    kConnectDone,      // ... and finished: Sweep applies it
    kGuestConnecting,  // inbound: our SYN to the guest is out
    kRelaying,
    kEnded,
  };
  static constexpr size_t kMaxViews = 64;

  void ConnectDone(int error);
  void Accept(Instant now);
  void Refuse(int error, Instant now);
  void OnGuestEvents(uint32_t events);
  void Pump();
  // Each returns false if the flow ended.
  bool PumpGuestToHost();
  bool PumpHostToGuest();
  void MaybeFinish();
  // host_abortive: SO_LINGER 0 before close; guest_reset: RST the guest.
  void End(FlowEnd why, bool host_abortive, bool guest_reset);
  // Ends the flow for an error the guest's socket reported (its RST:
  // guest_reset; anything else: guest_error), resetting the host side.
  void EndOnGuestError(const absl::Status& e);
  void CloseHost(bool abortive);
  void UpdateInterest();

  Backend& backend_;
  const transport::FourTuple tuple_;
  Phase phase_ = Phase::kConnecting;
  int connect_error_ = 0;
  int fd_ = -1;
  uint32_t interest_ = 0;
  std::unique_ptr<tcp::TcpSocket> sock_;
  // Guest-to-host bytes read from the netstack socket and not yet taken
  // by the host socket: views [pending_first_, pending_n_).
  std::array<buffer::PayloadView, kMaxViews> pending_;
  size_t pending_first_ = 0;
  size_t pending_n_ = 0;
  bool host_full_ = false;  // the last sendmsg was short or EAGAIN
  bool waiting_for_chunk_ = false;  // on the backend's chunk_waiters_
  // Waiting for the egress byte rate (EgressLimiter::Wait): nothing moves
  // to the host until EgressResumed, and the guest's window closes.
  bool egress_waiting_ = false;
  bool guest_eof_ = false;      // the guest's FIN was read
  bool host_wr_shut_ = false;   // ... and relayed (shutdown SHUT_WR)
  bool host_eof_ = false;       // the host's EOF was read and relayed
  // False after a short recv or EAGAIN emptied the host socket, until
  // epoll says it is readable again: a Pump for the guest's sake (its
  // bytes, its ACKs) then asks the host nothing (issue #34: a TCP_RR
  // transaction made 1.2 recv calls, 0.2 of them EAGAIN).
  bool host_readable_ = true;
  bool in_pump_ = false;
  bool inbound_ = false;
  // The egress policy's: Start's `egress` and `host`; when it started and
  // its bytes each way, for the flow log.
  bool egress_ = false;
  transport::SocketAddress host_;
  std::string pinned_name_;
  Instant started_;
  uint64_t bytes_out_ = 0;
  uint64_t bytes_in_ = 0;
};

}  // namespace netstack::backend

#endif  // NETSTACK_BACKEND_TCP_FLOW_H_
