// netstack's libslirp ABI (netstack/slirp/) as QEMU drives it, with the
// guest's frames from the input: slirp_new with QEMU's version-4 config,
// then each frame through slirp_input and the caller's fill/poll turns
// (with and without select_error) between them, connection_info now and
// then, and slirp_cleanup.
//
// The guest's frames may name any host address, and the library turns
// them into real host sockets; so before the first input this process's
// thread moves into a network namespace of its own (unshare), where
// nothing is routed and no packet can leave the machine. No namespace,
// no run.
//
// An input is a script of records: one byte of op, two bytes of length
// (big-endian), then that many bytes of frame (less if the input ends).
// The op's low bits pick what follows the frame: a fill and poll, one
// with select_error, or connection_info.
//
// Checked (FUZZ_CHECK): every frame to the guest is a whole Ethernet
// frame no longer than the MTU allows (QEMU's NICs drop longer ones); the
// fill adds at most one fd and never raises the timeout; connection_info
// is a NUL-terminated text with its header.
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <cstdint>

#include "fuzz/fuzz_check.h"
#include "netstack/slirp/libslirp.h"

namespace {

constexpr size_t kMtu = 1500;

void EnterOwnNetworkNamespace() {
  static bool done = false;
  if (done) return;
  if (unshare(CLONE_NEWNET) != 0 &&
      unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0) {
    perror("slirp_fuzzer: unshare(CLONE_NEWNET): refusing to run with the "
           "host's network");
    abort();
  }
  done = true;
}

struct Harness {
  int frames = 0;
  int added = 0;
};

ssize_t SendPacket(const void* buf, size_t len, void* opaque) {
  static_cast<Harness*>(opaque)->frames++;
  FUZZ_CHECK(buf != nullptr);
  FUZZ_CHECK(len >= 14);
  FUZZ_CHECK(len <= kMtu + 14);
  return static_cast<ssize_t>(len);
}

void GuestError(const char* msg, void* opaque) { FUZZ_CHECK(msg != nullptr); }

int64_t ClockNs(void* opaque) { return 0; }

int AddPoll(int fd, int events, void* opaque) {
  FUZZ_CHECK(fd >= 0);
  return 100 + static_cast<Harness*>(opaque)->added++;
}

int GetRevents(int idx, void* opaque) {
  FUZZ_CHECK(idx >= 100);
  return SLIRP_POLL_IN;
}

void Turn(Slirp* s, Harness& h, int select_error) {
  uint32_t timeout = 1000;
  h.added = 0;
  slirp_pollfds_fill(s, &timeout, AddPoll, &h);
  FUZZ_CHECK(h.added <= 1);
  FUZZ_CHECK(timeout <= 1000);
  slirp_pollfds_poll(s, select_error, GetRevents, &h);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  EnterOwnNetworkNamespace();
  SlirpConfig cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.version = 4;
  cfg.in_enabled = true;
  inet_pton(AF_INET, "10.0.2.0", &cfg.vnetwork);
  inet_pton(AF_INET, "255.255.255.0", &cfg.vnetmask);
  inet_pton(AF_INET, "10.0.2.2", &cfg.vhost);
  cfg.in6_enabled = true;
  inet_pton(AF_INET6, "fec0::", &cfg.vprefix_addr6);
  cfg.vprefix_len = 64;
  inet_pton(AF_INET6, "fec0::2", &cfg.vhost6);
  inet_pton(AF_INET, "10.0.2.15", &cfg.vdhcp_start);
  inet_pton(AF_INET, "10.0.2.3", &cfg.vnameserver);
  inet_pton(AF_INET6, "fec0::3", &cfg.vnameserver6);
  cfg.if_mtu = kMtu;
  SlirpCb cb;
  memset(&cb, 0, sizeof cb);
  cb.send_packet = SendPacket;
  cb.guest_error = GuestError;
  cb.clock_get_ns = ClockNs;
  Harness h;
  Slirp* s = slirp_new(&cfg, &cb, &h);
  FUZZ_CHECK(s != nullptr);

  size_t pos = 0;
  while (pos + 3 <= size) {
    const uint8_t op = data[pos];
    size_t len = size_t{data[pos + 1]} << 8 | data[pos + 2];
    pos += 3;
    if (len > size - pos) len = size - pos;
    slirp_input(s, data + pos, static_cast<int>(len));
    pos += len;
    switch (op & 3) {
      case 0:
        Turn(s, h, 0);
        break;
      case 1:
        Turn(s, h, 1);
        break;
      case 2: {
        char* info = slirp_connection_info(s);
        FUZZ_CHECK(info != nullptr);
        FUZZ_CHECK(strstr(info, "Protocol[State]") != nullptr);
        free(info);
        break;
      }
      default:
        break;  // frames back to back, as a burst from the NIC
    }
  }
  Turn(s, h, 0);
  slirp_cleanup(s);
  return 0;
}
