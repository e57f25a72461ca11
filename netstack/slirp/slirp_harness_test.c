/* libslirp.so.0 driven the way QEMU and slirp4netns drive it, and worse.
 *
 * The library is dlopen()ed and each function taken with dlvsym() at the
 * version node QEMU's binary imports it from, so a node or symbol out of
 * place fails here as it would fail QEMU's BIND_NOW load. Then a hostile
 * sequence: configs of every version and bad ones (v1 and v2 configs and
 * v1-3 callback tables end just before a PROT_NONE page, so a read past
 * the caller's version faults), forwards added and removed twice, bad
 * frames, polls with select_error, a DHCP discover that must come back as
 * an offer through send_packet, two instances at once, state save and
 * load, cleanup; NETSTACK_POLICY (a bad file refused with its line on
 * stderr, a guest's SYN let through or refused by it, also after the
 * stand-in rebuilt its netstack with the file gone). Under --config=asan
 * too.
 *
 * Usage: slirp_harness_test PATH_TO_LIBSLIRP_SO
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "netstack/slirp/libslirp.h"

static int failures;

#define CHECK(cond, ...)                                          \
  do {                                                            \
    if (!(cond)) {                                                \
      ++failures;                                                 \
      fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__,      \
              __LINE__, #cond);                                   \
      fprintf(stderr, __VA_ARGS__);                               \
      fprintf(stderr, "\n");                                      \
    }                                                             \
  } while (0)

/* The functions, as QEMU 7.2 and slirp4netns import them. */
static struct {
  __typeof__(slirp_new) *new_;
  __typeof__(slirp_init) *init;
  __typeof__(slirp_cleanup) *cleanup;
  __typeof__(slirp_pollfds_fill) *fill;
  __typeof__(slirp_pollfds_poll) *poll;
  __typeof__(slirp_input) *input;
  __typeof__(slirp_handle_timer) *handle_timer;
  __typeof__(slirp_add_hostfwd) *add_hostfwd;
  __typeof__(slirp_remove_hostfwd) *remove_hostfwd;
  __typeof__(slirp_add_hostxfwd) *add_hostxfwd;
  __typeof__(slirp_remove_hostxfwd) *remove_hostxfwd;
  __typeof__(slirp_add_exec) *add_exec;
  __typeof__(slirp_add_unix) *add_unix;
  __typeof__(slirp_add_guestfwd) *add_guestfwd;
  __typeof__(slirp_socket_can_recv) *socket_can_recv;
  __typeof__(slirp_socket_recv) *socket_recv;
  __typeof__(slirp_remove_guestfwd) *remove_guestfwd;
  __typeof__(slirp_connection_info) *connection_info;
  __typeof__(slirp_neighbor_info) *neighbor_info;
  __typeof__(slirp_state_save) *state_save;
  __typeof__(slirp_state_version) *state_version;
  __typeof__(slirp_state_load) *state_load;
  __typeof__(slirp_version_string) *version_string;
} L;

static void *Sym(void *lib, const char *name, const char *node) {
  void *p = dlvsym(lib, name, node);
  if (p == NULL) {
    fprintf(stderr, "dlvsym(%s, %s): %s\n", name, node, dlerror());
    exit(1);
  }
  return p;
}

static void Load(const char *path) {
  /* RTLD_NOW: every symbol resolves at load, as QEMU's BIND_NOW. */
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "dlopen(%s): %s\n", path, dlerror());
    exit(1);
  }
#define SYM(field, name, node) *(void **)&L.field = Sym(lib, name, node)
  SYM(new_, "slirp_new", "SLIRP_4.1");
  SYM(init, "slirp_init", "SLIRP_4.0");
  SYM(cleanup, "slirp_cleanup", "SLIRP_4.0");
  SYM(fill, "slirp_pollfds_fill", "SLIRP_4.0");
  SYM(poll, "slirp_pollfds_poll", "SLIRP_4.0");
  SYM(input, "slirp_input", "SLIRP_4.0");
  SYM(handle_timer, "slirp_handle_timer", "SLIRP_4.7");
  SYM(add_hostfwd, "slirp_add_hostfwd", "SLIRP_4.0");
  SYM(remove_hostfwd, "slirp_remove_hostfwd", "SLIRP_4.0");
  SYM(add_hostxfwd, "slirp_add_hostxfwd", "SLIRP_4.5");
  SYM(remove_hostxfwd, "slirp_remove_hostxfwd", "SLIRP_4.5");
  SYM(add_exec, "slirp_add_exec", "SLIRP_4.0");
  SYM(add_unix, "slirp_add_unix", "SLIRP_4.2");
  SYM(add_guestfwd, "slirp_add_guestfwd", "SLIRP_4.0");
  SYM(socket_can_recv, "slirp_socket_can_recv", "SLIRP_4.0");
  SYM(socket_recv, "slirp_socket_recv", "SLIRP_4.0");
  SYM(remove_guestfwd, "slirp_remove_guestfwd", "SLIRP_4.2");
  SYM(connection_info, "slirp_connection_info", "SLIRP_4.0");
  SYM(neighbor_info, "slirp_neighbor_info", "SLIRP_4.5");
  SYM(state_save, "slirp_state_save", "SLIRP_4.0");
  SYM(state_version, "slirp_state_version", "SLIRP_4.0");
  SYM(state_load, "slirp_state_load", "SLIRP_4.0");
  SYM(version_string, "slirp_version_string", "SLIRP_4.0");
#undef SYM
}

/* One emulated caller: what its callbacks saw. */
typedef struct Caller {
  Slirp *slirp;
  int version;
  int errors;
  char last_error[512];
  int frames;
  bool offer_seen;
  uint32_t offered;  /* yiaddr, network order */
  bool init_completed;
  bool timer_before_init;
  /* The poll array the caller shares with others: our index starts at
   * kPollBase, as in QEMU's main loop. */
  int added;
  int added_fd;
  bool revents_under_error;
  bool in_select_error;
  bool revents_bad_index;
  int revents_calls;
  bool arp_reply_seen;
  uint8_t gateway_mac[6];
  bool echo_reply_seen;
  uint32_t echo_reply_dst;
  bool na_seen;
  bool na_router;
  bool rst_seen;  /* a TCP RST to the guest */
} Caller;

enum { kPollBase = 7 };

static ssize_t SendPacket(const void *buf, size_t len, void *opaque) {
  Caller *c = opaque;
  const uint8_t *p = buf;
  ++c->frames;
  CHECK(len >= 14, "frame of %zu bytes", len);
  if (len >= 42 && p[12] == 0x08 && p[13] == 0x06 && p[21] == 2) {
    c->arp_reply_seen = true;
    memcpy(c->gateway_mac, p + 22, 6);
  }
  /* A neighbour advertisement (IPv6, ICMPv6 136): its R flag. */
  if (len >= 14 + 40 + 24 && p[12] == 0x86 && p[13] == 0xdd &&
      p[14 + 6] == 58 && p[14 + 40] == 136) {
    c->na_seen = true;
    c->na_router = (p[14 + 40 + 4] & 0x80) != 0;
  }
  if (len >= 14 + 28 && p[12] == 0x08 && p[13] == 0x00 && p[14 + 9] == 1 &&
      p[14 + (p[14] & 0x0f) * 4] == 0) {
    c->echo_reply_seen = true;
    memcpy(&c->echo_reply_dst, p + 14 + 16, 4);
  }
  if (len >= 14 + 40 && p[12] == 0x08 && p[13] == 0x00 && p[14 + 9] == 6 &&
      len >= 14 + (size_t)(p[14] & 0x0f) * 4 + 14 &&
      (p[14 + (p[14] & 0x0f) * 4 + 13] & 0x04) != 0) {
    c->rst_seen = true;
  }
  /* A DHCP reply: IPv4, UDP 67 -> 68, BOOTP op 2, option 53 = 2. */
  if (len < 14 + 20 + 8 + 240 || p[12] != 0x08 || p[13] != 0x00) return len;
  const uint8_t *ip = p + 14;
  const size_t ihl = (ip[0] & 0x0f) * 4;
  if (ip[9] != 17 || len < 14 + ihl + 8 + 240) return len;
  const uint8_t *udp = ip + ihl;
  if (udp[0] != 0 || udp[1] != 67 || udp[2] != 0 || udp[3] != 68) return len;
  const uint8_t *bootp = udp + 8;
  const uint8_t *opt = bootp + 240;
  const uint8_t *end = p + len;
  while (opt + 2 <= end && opt[0] != 255) {
    if (opt[0] == 0) {
      ++opt;
      continue;
    }
    if (opt[0] == 53 && opt[1] == 1 && opt + 3 <= end && opt[2] == 2) {
      c->offer_seen = true;
      memcpy(&c->offered, bootp + 16, 4);
    }
    opt += 2 + opt[1];
  }
  return len;
}

static void GuestError(const char *msg, void *opaque) {
  Caller *c = opaque;
  ++c->errors;
  snprintf(c->last_error, sizeof c->last_error, "%s", msg);
}

static int64_t ClockNs(void *opaque) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void *TimerNew(SlirpTimerCb cb, void *cb_opaque, void *opaque) {
  return NULL;
}
static void TimerFree(void *timer, void *opaque) {}
static void TimerMod(void *timer, int64_t expire, void *opaque) {}
static void RegisterPollFd(int fd, void *opaque) {}
static void UnregisterPollFd(int fd, void *opaque) {}
static void Notify(void *opaque) {}

static void InitCompleted(Slirp *slirp, void *opaque) {
  Caller *c = opaque;
  c->init_completed = true;
  c->slirp = slirp;
  /* QEMU's timer_new_opaque reads what this sets. */
  CHECK(c->version >= 4, "init_completed for a version-%d caller",
        c->version);
}

static void *TimerNewOpaque(SlirpTimerId id, void *cb_opaque, void *opaque) {
  Caller *c = opaque;
  if (!c->init_completed) c->timer_before_init = true;
  return NULL;
}

static int AddPoll(int fd, int events, void *opaque) {
  Caller *c = opaque;
  CHECK(fd >= 0, "add_poll of fd %d", fd);
  c->added_fd = fd;
  return kPollBase + c->added++;
}

static int GetRevents(int idx, void *opaque) {
  Caller *c = opaque;
  ++c->revents_calls;
  if (c->in_select_error) c->revents_under_error = true;
  if (idx < kPollBase || idx >= kPollBase + c->added) {
    c->revents_bad_index = true;
  }
  return SLIRP_POLL_IN;
}

/* `size` bytes that end where a PROT_NONE page begins: a read past them
 * faults. */
static void *BeforeGuardPage(size_t size) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  uint8_t *base = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) abort();
  mprotect(base + page, page, PROT_NONE);
  memset(base, 0, page);
  return base + page - size;
}

static void FreeGuarded(void *p) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  uint8_t *base = (uint8_t *)((uintptr_t)p & ~(uintptr_t)(page - 1));
  munmap(base, 2 * page);
}

/* How many bytes of SlirpConfig a caller of `version` fills. */
static size_t ConfigLen(int version) {
  switch (version) {
    case 1: return offsetof(SlirpConfig, outbound_addr);
    case 2: return offsetof(SlirpConfig, disable_dns);
    default: return sizeof(SlirpConfig);
  }
}

/* QEMU's defaults (net/slirp.c): 10.0.2.0/24, host .2, DHCP from .15, DNS
 * .3, fec0::/64. Placed before a guard page as far as `version` goes; the
 * fields of later versions hold garbage where they fit. */
static SlirpConfig *QemuConfig(int version) {
  SlirpConfig *cfg = BeforeGuardPage(ConfigLen(version));
  cfg->version = version;
  cfg->in_enabled = true;
  inet_pton(AF_INET, "10.0.2.0", &cfg->vnetwork);
  inet_pton(AF_INET, "255.255.255.0", &cfg->vnetmask);
  inet_pton(AF_INET, "10.0.2.2", &cfg->vhost);
  cfg->in6_enabled = true;
  inet_pton(AF_INET6, "fec0::", &cfg->vprefix_addr6);
  cfg->vprefix_len = 64;
  inet_pton(AF_INET6, "fec0::2", &cfg->vhost6);
  inet_pton(AF_INET, "10.0.2.15", &cfg->vdhcp_start);
  inet_pton(AF_INET, "10.0.2.3", &cfg->vnameserver);
  inet_pton(AF_INET6, "fec0::3", &cfg->vnameserver6);
  if (version == 3) {
    /* A version-3 caller's struct ends before disable_dhcp; what lies
     * there must not turn DHCP off. */
    memset((uint8_t *)cfg + offsetof(SlirpConfig, disable_dhcp), 0xff, 1);
  }
  return cfg;
}

static SlirpCb *Callbacks(int version) {
  const size_t len =
      version >= 4 ? sizeof(SlirpCb) : offsetof(SlirpCb, init_completed);
  SlirpCb *cb = BeforeGuardPage(len);
  cb->send_packet = SendPacket;
  cb->guest_error = GuestError;
  cb->clock_get_ns = ClockNs;
  cb->timer_new = TimerNew;
  cb->timer_free = TimerFree;
  cb->timer_mod = TimerMod;
  cb->register_poll_fd = RegisterPollFd;
  cb->unregister_poll_fd = UnregisterPollFd;
  cb->notify = Notify;
  if (version >= 4) {
    cb->init_completed = InitCompleted;
    cb->timer_new_opaque = TimerNewOpaque;
  }
  return cb;
}

static uint16_t IpChecksum(const uint8_t *p, size_t len) {
  uint32_t sum = 0;
  for (size_t i = 0; i + 1 < len; i += 2) sum += (uint32_t)(p[i] << 8 | p[i + 1]);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return (uint16_t)~sum;
}

/* A DHCPDISCOVER from 52:54:00:12:34:56, as a guest's first frame. */
static size_t DhcpDiscover(uint8_t *f) {
  static const uint8_t mac[6] = {0x52, 0x54, 0x00, 0x12, 0x34, 0x56};
  memset(f, 0, 342);
  memset(f, 0xff, 6);
  memcpy(f + 6, mac, 6);
  f[12] = 0x08;
  uint8_t *ip = f + 14;
  const size_t bootp_len = 240 + 3 + 1 + 56;  /* options, end, padding */
  const size_t udp_len = 8 + bootp_len;
  const size_t ip_len = 20 + udp_len;
  ip[0] = 0x45;
  ip[2] = (uint8_t)(ip_len >> 8);
  ip[3] = (uint8_t)ip_len;
  ip[8] = 64;
  ip[9] = 17;
  memset(ip + 16, 0xff, 4);
  const uint16_t sum = IpChecksum(ip, 20);
  ip[10] = (uint8_t)(sum >> 8);
  ip[11] = (uint8_t)sum;
  uint8_t *udp = ip + 20;
  udp[1] = 68;
  udp[3] = 67;
  udp[4] = (uint8_t)(udp_len >> 8);
  udp[5] = (uint8_t)udp_len;
  uint8_t *b = udp + 8;
  b[0] = 1;
  b[1] = 1;
  b[2] = 6;
  b[4] = 0x12;
  b[5] = 0x34;
  b[6] = 0x56;
  b[7] = 0x78;
  memcpy(b + 28, mac, 6);
  b[236] = 99;
  b[237] = 130;
  b[238] = 83;
  b[239] = 99;
  b[240] = 53;
  b[241] = 1;
  b[242] = 1;
  b[243] = 255;
  return 14 + ip_len;
}

/* An empty UDP datagram from the lease to `dst`:53, which no DNS server
 * would answer even if it got through. */
static size_t UdpToPort53(uint8_t *f, const char *dst) {
  memset(f, 0, 14 + 28);
  memset(f, 0x52, 6);
  f[6] = 0x52;
  f[7] = 0x54;
  f[12] = 0x08;
  uint8_t *ip = f + 14;
  ip[0] = 0x45;
  ip[3] = 28;
  ip[8] = 64;
  ip[9] = 17;
  inet_pton(AF_INET, "10.0.2.15", ip + 12);
  inet_pton(AF_INET, dst, ip + 16);
  const uint16_t sum = IpChecksum(ip, 20);
  ip[10] = (uint8_t)(sum >> 8);
  ip[11] = (uint8_t)sum;
  ip[20] = 0x30;
  ip[21] = 0x39;
  ip[23] = 53;
  ip[25] = 8;
  return 14 + 28;
}

/* An ARP request from `src` for 10.0.2.2. */
static size_t ArpRequest(uint8_t *f, const char *src) {
  static const uint8_t mac[6] = {0x52, 0x54, 0x00, 0x12, 0x34, 0x56};
  memset(f, 0, 42);
  memset(f, 0xff, 6);
  memcpy(f + 6, mac, 6);
  f[12] = 0x08;
  f[13] = 0x06;
  const uint8_t arp[8] = {0, 1, 8, 0, 6, 4, 0, 1};
  memcpy(f + 14, arp, 8);
  memcpy(f + 22, mac, 6);
  inet_pton(AF_INET, src, f + 28);
  inet_pton(AF_INET, "10.0.2.2", f + 38);
  return 42;
}

/* An ICMP echo request from `src` to 10.0.2.2, to `dst_mac`. */
static size_t EchoRequest(uint8_t *f, const char *src, const uint8_t *dst_mac) {
  static const uint8_t mac[6] = {0x52, 0x54, 0x00, 0x12, 0x34, 0x56};
  memset(f, 0, 14 + 28);
  memcpy(f, dst_mac, 6);
  memcpy(f + 6, mac, 6);
  f[12] = 0x08;
  uint8_t *ip = f + 14;
  ip[0] = 0x45;
  ip[3] = 28;
  ip[8] = 64;
  ip[9] = 1;
  inet_pton(AF_INET, src, ip + 12);
  inet_pton(AF_INET, "10.0.2.2", ip + 16);
  uint16_t sum = IpChecksum(ip, 20);
  ip[10] = (uint8_t)(sum >> 8);
  ip[11] = (uint8_t)sum;
  uint8_t *icmp = ip + 20;
  icmp[0] = 8;
  icmp[5] = 1;
  icmp[7] = 1;
  sum = IpChecksum(icmp, 8);
  icmp[2] = (uint8_t)(sum >> 8);
  icmp[3] = (uint8_t)sum;
  return 14 + 28;
}

/* A neighbour solicitation from the guest's link-local address for the
 * gateway's (fe80::5055:aff:fe00:202, from its MAC 52:55:0a:00:02:02), as
 * the guest's NUD probes its default router. */
static size_t NeighborSolicitation(uint8_t *f) {
  static const uint8_t mac[6] = {0x52, 0x54, 0x00, 0x12, 0x34, 0x56};
  const size_t icmp_len = 24 + 8;
  memset(f, 0, 14 + 40 + icmp_len);
  const uint8_t dst_mac[6] = {0x33, 0x33, 0xff, 0x00, 0x02, 0x02};
  memcpy(f, dst_mac, 6);
  memcpy(f + 6, mac, 6);
  f[12] = 0x86;
  f[13] = 0xdd;
  uint8_t *ip = f + 14;
  ip[0] = 0x60;
  ip[5] = (uint8_t)icmp_len;
  ip[6] = 58;
  ip[7] = 255;
  inet_pton(AF_INET6, "fe80::5054:ff:fe12:3456", ip + 8);
  inet_pton(AF_INET6, "ff02::1:ff00:202", ip + 24);
  uint8_t *icmp = ip + 40;
  icmp[0] = 135;
  inet_pton(AF_INET6, "fe80::5055:aff:fe00:202", icmp + 8);
  icmp[24] = 1;  /* source link-layer address */
  icmp[25] = 1;
  memcpy(icmp + 26, mac, 6);
  /* Checksum over the pseudo-header (addresses, length, next header). */
  uint8_t pseudo[40 + 32];
  memset(pseudo, 0, sizeof pseudo);
  memcpy(pseudo, ip + 8, 32);
  pseudo[35] = (uint8_t)icmp_len;
  pseudo[39] = 58;
  memcpy(pseudo + 40, icmp, icmp_len);
  const uint16_t sum = IpChecksum(pseudo, sizeof pseudo);
  icmp[2] = (uint8_t)(sum >> 8);
  icmp[3] = (uint8_t)sum;
  return 14 + 40 + icmp_len;
}

/* A TCP SYN from `src`:40000 to `dst`:`port`, to `dst_mac`. */
static size_t TcpSyn(uint8_t *f, const char *src, struct in_addr dst, int port,
                     const uint8_t *dst_mac) {
  static const uint8_t mac[6] = {0x52, 0x54, 0x00, 0x12, 0x34, 0x56};
  memset(f, 0, 14 + 40);
  memcpy(f, dst_mac, 6);
  memcpy(f + 6, mac, 6);
  f[12] = 0x08;
  uint8_t *ip = f + 14;
  ip[0] = 0x45;
  ip[3] = 40;
  ip[8] = 64;
  ip[9] = 6;
  inet_pton(AF_INET, src, ip + 12);
  memcpy(ip + 16, &dst, 4);
  uint16_t sum = IpChecksum(ip, 20);
  ip[10] = (uint8_t)(sum >> 8);
  ip[11] = (uint8_t)sum;
  uint8_t *tcp = ip + 20;
  tcp[0] = 40000 >> 8;
  tcp[1] = 40000 & 0xff;
  tcp[2] = (uint8_t)(port >> 8);
  tcp[3] = (uint8_t)port;
  tcp[7] = 1;          /* seq 1 */
  tcp[12] = 5 << 4;
  tcp[13] = 0x02;      /* SYN */
  tcp[14] = 0xff;
  tcp[15] = 0xff;
  uint8_t pseudo[12 + 20];
  memcpy(pseudo, ip + 12, 8);
  pseudo[8] = 0;
  pseudo[9] = 6;
  pseudo[10] = 0;
  pseudo[11] = 20;
  memcpy(pseudo + 12, tcp, 20);
  sum = IpChecksum(pseudo, sizeof pseudo);
  tcp[16] = (uint8_t)(sum >> 8);
  tcp[17] = (uint8_t)sum;
  return 14 + 40;
}

static bool InfoHas(Slirp *s, const char *text) {
  char *info = L.connection_info(s);
  const bool has = info != NULL && strstr(info, text) != NULL;
  if (!has) fprintf(stderr, "connection_info:\n%s", info ? info : "(null)");
  free(info);
  return has;
}

/* One turn of the caller's loop, as QEMU's: fill, no real poll (the
 * revents are made up), poll. */
static uint32_t Turn(Caller *c, int select_error) {
  uint32_t timeout = UINT32_MAX;
  c->added = 0;
  L.fill(c->slirp, &timeout, AddPoll, c);
  CHECK(c->added <= 1, "add_poll called %d times", c->added);
  c->in_select_error = select_error != 0;
  L.poll(c->slirp, select_error, GetRevents, c);
  c->in_select_error = false;
  return timeout;
}

/* Runs turns for up to 2 s of real time until `done`. */
static void TurnUntil(Caller *c, bool *done) {
  for (int i = 0; i < 200 && !*done; ++i) {
    Turn(c, i % 2);
    if (!*done) usleep(10000);
  }
}

static Slirp *New(Caller *c, int version, SlirpConfig **cfg_out,
                  SlirpCb **cb_out) {
  memset(c, 0, sizeof *c);
  c->version = version;
  SlirpConfig *cfg = QemuConfig(version);
  SlirpCb *cb = Callbacks(version);
  Slirp *s = L.new_(cfg, cb, c);
  if (version >= 4) {
    CHECK(s == NULL || c->init_completed,
          "init_completed not called by slirp_new (version %d)", version);
    CHECK(c->slirp == s, "init_completed got another Slirp");
  }
  CHECK(!c->timer_before_init, "timer_new_opaque before init_completed");
  c->slirp = s;
  *cfg_out = cfg;
  *cb_out = cb;
  return s;
}

static void Release(Slirp *s, SlirpConfig *cfg, SlirpCb *cb) {
  L.cleanup(s);
  FreeGuarded(cfg);
  FreeGuarded(cb);
}

static void BadConfigs(void) {
  Caller c;
  memset(&c, 0, sizeof c);
  SlirpCb *cb = Callbacks(4);
  CHECK(L.new_(NULL, cb, &c) == NULL, "a NULL config made a Slirp");
  const uint32_t bad[] = {0, 5, 6, 1000, UINT32_MAX};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    SlirpConfig *cfg = QemuConfig(4);
    cfg->version = bad[i];
    const int before = c.errors;
    CHECK(L.new_(cfg, cb, &c) == NULL, "version %u made a Slirp", bad[i]);
    CHECK(c.errors > before, "version %u refused silently", bad[i]);
    CHECK(!c.init_completed, "init_completed for a refused config");
    FreeGuarded(cfg);
  }
  /* A netmask with holes. */
  SlirpConfig *cfg = QemuConfig(4);
  inet_pton(AF_INET, "255.0.255.0", &cfg->vnetmask);
  CHECK(L.new_(cfg, cb, &c) == NULL, "a netmask with holes made a Slirp");
  FreeGuarded(cfg);
  FreeGuarded(cb);
}

/* A DHCP discover gets an offer of vdhcp_start, through send_packet. */
static void Dhcp(Caller *c, bool want_offer) {
  uint8_t frame[400];
  const size_t len = DhcpDiscover(frame);
  L.input(c->slirp, frame, (int)len);
  /* libslirp answers inside slirp_input, and QEMU relies on it (its main
   * loop may sleep in poll() meanwhile): so must this library. */
  const bool at_once = c->offer_seen;
  TurnUntil(c, &c->offer_seen);
  if (want_offer) {
    CHECK(at_once, "the offer waited for a poll (version %d)", c->version);
  }
  if (!want_offer) {
    CHECK(!c->offer_seen, "an offer with DHCP disabled");
    return;
  }
  CHECK(c->offer_seen, "no DHCP offer (version %d, %d frames sent)",
        c->version, c->frames);
  char got[INET_ADDRSTRLEN] = "";
  inet_ntop(AF_INET, &c->offered, got, sizeof got);
  CHECK(strcmp(got, "10.0.2.15") == 0, "offered %s, not 10.0.2.15", got);
}

static void BadFrames(Caller *c) {
  uint8_t junk[70000];
  for (size_t i = 0; i < sizeof junk; ++i) junk[i] = (uint8_t)(i * 131 + 7);
  L.input(c->slirp, NULL, 0);
  L.input(c->slirp, NULL, 100);
  L.input(c->slirp, junk, -1);
  L.input(c->slirp, junk, 0);
  L.input(c->slirp, junk, 1);
  L.input(c->slirp, junk, 13);
  L.input(c->slirp, junk, 14);
  L.input(c->slirp, junk, (int)sizeof junk);
  /* IPv4 and IPv6 EtherTypes with truncated and lying headers. */
  uint8_t f[80];
  memcpy(f, junk, sizeof f);
  f[12] = 0x08;
  f[13] = 0x00;
  f[14] = 0x4f;  /* IHL 60 in a 66-byte packet */
  L.input(c->slirp, f, 34);
  L.input(c->slirp, f, (int)sizeof f);
  f[12] = 0x86;
  f[13] = 0xdd;
  f[14] = 0x60;
  L.input(c->slirp, f, 54);
  f[12] = 0x08;
  f[13] = 0x06;  /* ARP, truncated */
  L.input(c->slirp, f, 20);
  Turn(c, 0);
  Turn(c, 1);
}

/* A port the kernel just had free on 127.0.0.1 (or ::1). */
static int FreePortOf(int family, int type) {
  int fd = socket(family, type, 0);
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  socklen_t len;
  if (family == AF_INET) {
    struct sockaddr_in *a = (struct sockaddr_in *)&ss;
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    len = sizeof *a;
  } else {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_loopback;
    len = sizeof *a;
  }
  if (fd < 0 || bind(fd, (struct sockaddr *)&ss, len) != 0 ||
      getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
    abort();
  }
  close(fd);
  return ntohs(family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                  : ((struct sockaddr_in6 *)&ss)->sin6_port);
}

static int FreePort(int type) { return FreePortOf(AF_INET, type); }

static void Forwards(Caller *c) {
  struct in_addr lo, any, lease, other;
  inet_pton(AF_INET, "127.0.0.1", &lo);
  any.s_addr = htonl(INADDR_ANY);
  inet_pton(AF_INET, "10.0.2.15", &lease);
  inet_pton(AF_INET, "10.0.2.99", &other);
  for (int udp = 0; udp <= 1; ++udp) {
    const int port = FreePort(udp ? SOCK_DGRAM : SOCK_STREAM);
    /* QEMU's hostfwd=tcp:127.0.0.1:PORT-:80: guest 0.0.0.0 is the lease. */
    CHECK(L.add_hostfwd(c->slirp, udp, lo, port, any, 80) == 0,
          "add %d:%d: %s", udp, port, c->last_error);
    CHECK(L.add_hostfwd(c->slirp, udp, lo, port, any, 80) == -1,
          "the same forward twice");
    char *info = L.connection_info(c->slirp);
    CHECK(info != NULL && strstr(info, "HOST_FORWARD") != NULL,
          "connection_info lists no forward: %s", info ? info : "(null)");
    CHECK(info != NULL && strstr(info, "Protocol[State]") != NULL,
          "connection_info has no header");
    free(info);  /* QEMU's g_free */
    CHECK(L.remove_hostfwd(c->slirp, udp, lo, port) == 0, "remove");
    CHECK(L.remove_hostfwd(c->slirp, udp, lo, port) == -1, "remove twice");
    CHECK(L.remove_hostfwd(c->slirp, !udp, lo, port) == -1,
          "remove of the other protocol");
    /* slirp4netns's default: any address, to the lease by address. */
    CHECK(L.add_hostfwd(c->slirp, udp, any, port, lease, 8080) == 0,
          "add any: %s", c->last_error);
    CHECK(L.remove_hostfwd(c->slirp, udp, lo, port) == -1,
          "removed by another bind address");
    CHECK(L.remove_hostfwd(c->slirp, udp, any, port) == 0, "remove any");
    CHECK(L.add_hostfwd(c->slirp, udp, lo, port, other, 80) == -1,
          "a forward to a guest address that is not the lease");
    CHECK(L.add_hostfwd(c->slirp, udp, lo, 0, any, 80) == -1, "port 0");
    CHECK(L.add_hostfwd(c->slirp, udp, lo, 70000, any, 80) == -1,
          "port 70000");
    CHECK(L.add_hostfwd(c->slirp, udp, lo, port, any, -5) == -1,
          "guest port -5");
  }
  /* hostxfwd, IPv6 loopback to the lease. */
  const int port = FreePortOf(AF_INET6, SOCK_STREAM);
  struct sockaddr_in6 h6 = {.sin6_family = AF_INET6,
                            .sin6_port = htons(port)};
  h6.sin6_addr = in6addr_loopback;
  struct sockaddr_in g4 = {.sin_family = AF_INET, .sin_port = htons(22)};
  CHECK(L.add_hostxfwd(c->slirp, (struct sockaddr *)&h6, sizeof h6,
                       (struct sockaddr *)&g4, sizeof g4, 0) == 0,
        "hostxfwd [::1]: %s", c->last_error);
  CHECK(L.remove_hostxfwd(c->slirp, (struct sockaddr *)&h6, sizeof h6,
                          SLIRP_HOSTFWD_UDP) == -1,
        "hostxfwd removed as UDP");
  CHECK(L.remove_hostxfwd(c->slirp, (struct sockaddr *)&h6, sizeof h6, 0) ==
            0, "remove hostxfwd");
  CHECK(L.remove_hostxfwd(c->slirp, (struct sockaddr *)&h6, sizeof h6, 0) ==
            -1, "remove hostxfwd twice");
  CHECK(L.add_hostxfwd(c->slirp, (struct sockaddr *)&h6, 4,
                       (struct sockaddr *)&g4, sizeof g4, 0) == -1,
        "a 4-byte sockaddr");
  CHECK(L.add_hostxfwd(c->slirp, NULL, 0, NULL, 0, 0) == -1, "NULLs");
  /* A forward left in place: cleanup must close it. */
  CHECK(L.add_hostfwd(c->slirp, 0, lo, FreePort(SOCK_STREAM), any, 80) == 0,
        "a forward left for cleanup");
}

static void Guestfwd(Caller *c) {
  struct in_addr g;
  inet_pton(AF_INET, "10.0.2.100", &g);
  c->last_error[0] = '\0';
  CHECK(L.add_exec(c->slirp, "cat", &g, 4321) == -1, "add_exec");
  CHECK(strstr(c->last_error, "docs/SLIRP.md") != NULL,
        "add_exec's message: %s", c->last_error);
  CHECK(L.add_unix(c->slirp, "/nonexistent", &g, 4321) == -1, "add_unix");
  CHECK(L.add_guestfwd(c->slirp, NULL, NULL, &g, 4321) == -1,
        "add_guestfwd");
  CHECK(L.remove_guestfwd(c->slirp, g, 4321) == -1, "remove_guestfwd");
  CHECK(L.socket_can_recv(c->slirp, g, 4321) == 0, "socket_can_recv");
  L.socket_recv(c->slirp, g, 4321, (const uint8_t *)"x", 1);
  L.handle_timer(c->slirp, SLIRP_TIMER_RA, NULL);
  L.handle_timer(c->slirp, (SlirpTimerId)99, NULL);
}

/* A growable buffer for state save and load. */
typedef struct Stream {
  uint8_t data[4096];
  size_t len, pos;
} Stream;

static ssize_t StreamWrite(const void *buf, size_t len, void *opaque) {
  Stream *s = opaque;
  if (s->len + len > sizeof s->data) return -1;
  memcpy(s->data + s->len, buf, len);
  s->len += len;
  return (ssize_t)len;
}

static ssize_t StreamRead(void *buf, size_t len, void *opaque) {
  Stream *s = opaque;
  if (len > s->len - s->pos) len = s->len - s->pos;
  memcpy(buf, s->data + s->pos, len);
  s->pos += len;
  return (ssize_t)len;
}

static void State(Caller *from, Caller *to) {
  Stream st = {0};
  L.state_save(from->slirp, StreamWrite, &st);
  CHECK(st.len > 0, "state_save wrote nothing");
  CHECK(L.state_load(to->slirp, L.state_version(), StreamRead, &st) == 0,
        "load of our own state: %s", to->last_error);
  CHECK(st.pos == st.len, "load read %zu of %zu bytes", st.pos, st.len);
  st.pos = 0;
  CHECK(L.state_load(to->slirp, 3, StreamRead, &st) != 0,
        "load of version 3");
  /* A stream that is not ours (libslirp's, say). */
  Stream junk = {.len = 64};
  memset(junk.data, 0x5a, 64);
  CHECK(L.state_load(to->slirp, L.state_version(), StreamRead, &junk) != 0,
        "load of another library's state");
  Stream empty = {0};
  CHECK(L.state_load(to->slirp, L.state_version(), StreamRead, &empty) != 0,
        "load of an empty stream");
}

/* An IPv4 address of this machine that is not loopback, or false. A
 * connection to it never leaves the machine. */
static bool LocalAddress(struct in_addr *out) {
  struct ifaddrs *list;
  if (getifaddrs(&list) != 0) return false;
  bool found = false;
  for (struct ifaddrs *i = list; i != NULL && !found; i = i->ifa_next) {
    if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET) continue;
    const struct in_addr a = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
    if ((ntohl(a.s_addr) >> 24) == 127) continue;
    *out = a;
    found = true;
  }
  freeifaddrs(list);
  return found;
}

/* Whether a guest SYN to a listener of this process on `local` is
 * connected through, within 1 s. */
static bool GuestReaches(int restricted, struct in_addr local) {
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr = local;
  socklen_t len = sizeof a;
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) != 0 ||
      listen(lfd, 4) != 0 ||
      getsockname(lfd, (struct sockaddr *)&a, &len) != 0) {
    abort();
  }
  fcntl(lfd, F_SETFL, O_NONBLOCK);
  Caller c;
  memset(&c, 0, sizeof c);
  c.version = 4;
  SlirpConfig *cfg = QemuConfig(4);
  cfg->restricted = restricted;
  SlirpCb *cb = Callbacks(4);
  c.slirp = L.new_(cfg, cb, &c);
  bool reached = false;
  if (c.slirp != NULL) {
    uint8_t f[64];
    L.input(c.slirp, f, (int)ArpRequest(f, "10.0.2.15"));
    TurnUntil(&c, &c.arp_reply_seen);
    L.input(c.slirp, f,
            (int)TcpSyn(f, "10.0.2.15", local, ntohs(a.sin_port),
                        c.gateway_mac));
    for (int i = 0; i < 100 && !reached; ++i) {
      Turn(&c, 0);
      const int fd = accept(lfd, NULL, NULL);
      if (fd >= 0) {
        reached = true;
        close(fd);
      }
      usleep(10000);
    }
  }
  Release(c.slirp, cfg, cb);
  close(lfd);
  return reached;
}

/* ---- NETSTACK_POLICY ---------------------------------------------------- */

static char policy_dir[] = "/tmp/slirp-policy-XXXXXX";

/* Writes `text` to the file `name` in policy_dir; returns its path. */
static const char *PolicyFile(const char *name, const char *text) {
  static char path[4][96];
  static int next;
  char *p = path[next++ % 4];
  snprintf(p, sizeof path[0], "%s/%s", policy_dir, name);
  FILE *f = fopen(p, "w");
  if (f == NULL) abort();
  fputs(text, f);
  fclose(f);
  return p;
}

/* slirp_new under NETSTACK_POLICY=`path`, with what it wrote to stderr
 * in `err`. */
static Slirp *NewUnderPolicy(Caller *c, SlirpConfig *cfg, SlirpCb *cb,
                             const char *path, char *err, size_t errlen) {
  fflush(stderr);
  const int saved = dup(2);
  char tmpl[] = "/tmp/slirp-stderr-XXXXXX";
  const int fd = mkstemp(tmpl);
  if (saved < 0 || fd < 0) abort();
  unlink(tmpl);
  dup2(fd, 2);
  setenv("NETSTACK_POLICY", path, 1);
  Slirp *s = L.new_(cfg, cb, c);
  unsetenv("NETSTACK_POLICY");
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  const ssize_t n = pread(fd, err, errlen - 1, 0);
  err[n > 0 ? n : 0] = '\0';
  close(fd);
  return s;
}

/* A bad NETSTACK_POLICY: slirp_new returns NULL, and says on stderr which
 * file and which line. */
static void PolicyBadFiles(void) {
  const char *bad = PolicyFile("bad", "# ok so far\nallow 10.0.0.0/33\n");
  const char *missing = "/nonexistent-dir/policy";
  const char *paths[] = {bad, missing};
  for (int i = 0; i < 2; ++i) {
    Caller c;
    memset(&c, 0, sizeof c);
    c.version = 4;
    SlirpConfig *cfg = QemuConfig(4);
    SlirpCb *cb = Callbacks(4);
    char err[1024];
    c.slirp = NewUnderPolicy(&c, cfg, cb, paths[i], err, sizeof err);
    CHECK(c.slirp == NULL, "slirp_new took NETSTACK_POLICY=%s", paths[i]);
    CHECK(strstr(err, "NETSTACK_POLICY") != NULL &&
              strstr(err, paths[i]) != NULL,
          "stderr does not name the file: '%s'", err);
    CHECK(i != 0 || strstr(err, "line 2: ") != NULL,
          "stderr does not name the line: '%s'", err);
    Release(c.slirp, cfg, cb);
  }
}

/* Whether a SYN from the guest `src` (10.0.2.15, the lease, or .100, which
 * makes the stand-in build its netstack anew) reaches a listener of this
 * process on `local`, under the policy file `path`; *rst: whether the
 * guest got an RST instead. With `remove`, the file is gone before the
 * guest's first frame (slirp4netns's sandbox takes the filesystem away
 * after slirp_new): the policy read at slirp_new must hold on. */
static bool PolicyReaches(struct in_addr local, const char *path,
                          const char *src, bool remove, bool *rst) {
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr = local;
  socklen_t len = sizeof a;
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) != 0 ||
      listen(lfd, 4) != 0 ||
      getsockname(lfd, (struct sockaddr *)&a, &len) != 0) {
    abort();
  }
  fcntl(lfd, F_SETFL, O_NONBLOCK);
  Caller c;
  memset(&c, 0, sizeof c);
  c.version = 1;
  SlirpConfig *cfg = QemuConfig(1);
  SlirpCb *cb = Callbacks(1);
  char err[1024];
  c.slirp = NewUnderPolicy(&c, cfg, cb, path, err, sizeof err);
  CHECK(c.slirp != NULL, "NETSTACK_POLICY=%s refused: %s", path, err);
  if (remove) unlink(path);
  bool reached = false;
  if (c.slirp != NULL) {
    uint8_t f[64];
    L.input(c.slirp, f, (int)ArpRequest(f, src));
    TurnUntil(&c, &c.arp_reply_seen);
    L.input(c.slirp, f,
            (int)TcpSyn(f, src, local, ntohs(a.sin_port), c.gateway_mac));
    for (int i = 0; i < 100 && !reached && !c.rst_seen; ++i) {
      Turn(&c, 0);
      const int fd = accept(lfd, NULL, NULL);
      if (fd >= 0) {
        reached = true;
        close(fd);
      }
      usleep(10000);
    }
  }
  *rst = c.rst_seen;
  Release(c.slirp, cfg, cb);
  close(lfd);
  return reached;
}

/* NETSTACK_POLICY judges the guest's flows, on every instance: an
 * allowlist that names this machine's address lets the SYN through; one
 * that does not refuses it with an RST. Also when the guest is not at the
 * lease and the file is gone by then. */
static void PolicyJudges(void) {
  struct in_addr local;
  if (!LocalAddress(&local)) {
    fprintf(stderr, "no non-loopback IPv4 address: the policy checks "
            "skipped\n");
    return;
  }
  char rule[64];
  char text[128];
  inet_ntop(AF_INET, &local, rule, sizeof rule);
  snprintf(text, sizeof text, "allow %s\n", rule);
  const char *srcs[] = {"10.0.2.15", "10.0.2.100"};
  for (int i = 0; i < 2; ++i) {
    bool rst = false;
    const char *allow = PolicyFile("allow", text);
    CHECK(PolicyReaches(local, allow, srcs[i], i == 1, &rst),
          "'allow %s' did not let %s connect", rule, srcs[i]);
    CHECK(!rst, "RST under 'allow %s'", rule);
    const char *other = PolicyFile("other", "allow 192.0.2.1\n");
    CHECK(!PolicyReaches(local, other, srcs[i], i == 1, &rst),
          "'allow 192.0.2.1' let %s connect to %s", srcs[i], rule);
    CHECK(rst, "no RST for a refused SYN from %s", srcs[i]);
  }
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s LIBSLIRP_SO\n", argv[0]);
    return 2;
  }
  Load(argv[1]);
  /* The environment must not steer the other checks. */
  unsetenv("NETSTACK_POLICY");
  CHECK(L.state_version() == 4, "state_version %d", L.state_version());
  CHECK(L.version_string() != NULL && L.version_string()[0] != '\0',
        "version_string");
  L.cleanup(NULL);

  BadConfigs();

  /* Each config version, one at a time: slirp4netns's 1-3, QEMU's 4. */
  for (int version = 1; version <= 4; ++version) {
    Caller c;
    SlirpConfig *cfg;
    SlirpCb *cb;
    Slirp *s = New(&c, version, &cfg, &cb);
    CHECK(s != NULL, "version %d refused: %s", version, c.last_error);
    if (s == NULL) continue;
    /* The poll contract. */
    uint32_t timeout = 5000;
    c.added = 0;
    L.fill(s, &timeout, AddPoll, &c);
    CHECK(c.added == 1, "add_poll called %d times", c.added);
    CHECK(timeout <= 5000, "timeout raised to %u", timeout);
    c.in_select_error = true;
    L.poll(s, 1, GetRevents, &c);
    c.in_select_error = false;
    CHECK(!c.revents_under_error, "get_revents called with select_error");
    L.poll(s, 0, GetRevents, &c);
    CHECK(!c.revents_bad_index, "get_revents of an index not ours");
    Dhcp(&c, true);
    /* Idle turns: with select_error the revents are never asked for;
     * without, they are (the library has nothing due by time then). */
    for (int i = 0; i < 20; ++i) {
      Turn(&c, 1);
      usleep(1000);
    }
    c.revents_calls = 0;
    for (int i = 0; i < 20; ++i) {
      Turn(&c, 0);
      usleep(1000);
    }
    CHECK(c.revents_calls > 0, "get_revents never called in 20 idle turns");
    CHECK(!c.revents_under_error, "get_revents called with select_error");
    CHECK(!c.revents_bad_index, "get_revents of an index not ours");
    BadFrames(&c);
    Forwards(&c);
    Guestfwd(&c);
    char *n = L.neighbor_info(s);
    CHECK(n != NULL, "neighbor_info");
    free(n);
    Release(s, cfg, cb);
  }

  /* disable_dhcp (version 4): no offer. */
  {
    Caller c;
    memset(&c, 0, sizeof c);
    c.version = 4;
    SlirpConfig *cfg = QemuConfig(4);
    cfg->disable_dhcp = true;
    SlirpCb *cb = Callbacks(4);
    c.slirp = L.new_(cfg, cb, &c);
    CHECK(c.slirp != NULL, "disable_dhcp refused: %s", c.last_error);
    if (c.slirp != NULL) Dhcp(&c, false);
    Release(c.slirp, cfg, cb);
  }

  /* disable_dns (version 3, slirp4netns --disable-dns) and restricted:
   * nothing to the DNS address reaches netstack. */
  for (int restricted = 0; restricted <= 1; ++restricted) {
    Caller c;
    memset(&c, 0, sizeof c);
    c.version = 3;
    SlirpConfig *cfg = QemuConfig(3);
    cfg->disable_dns = !restricted;
    cfg->restricted = restricted;
    SlirpCb *cb = Callbacks(3);
    c.slirp = L.new_(cfg, cb, &c);
    CHECK(c.slirp != NULL, "disable_dns/restricted refused: %s",
          c.last_error);
    if (c.slirp != NULL) {
      uint8_t f[64];
      L.input(c.slirp, f, (int)UdpToPort53(f, "10.0.2.3"));
      Turn(&c, 0);
      CHECK(InfoHas(c.slirp, " 1 dns_disabled"),
            "a datagram to 10.0.2.3:53 went through (restricted %d)",
            restricted);
      Dhcp(&c, true);
    }
    Release(c.slirp, cfg, cb);
  }

  /* slirp4netns: vdhcp_start is .15, but --configure puts the guest at
   * .100 and its API forwards to .100. The guest's first address is
   * taken, whether a forward or a frame names it first. */
  for (int forward_first = 0; forward_first <= 1; ++forward_first) {
    Caller c;
    memset(&c, 0, sizeof c);
    c.version = 1;
    SlirpConfig *cfg = QemuConfig(1);
    SlirpCb *cb = Callbacks(1);
    c.slirp = L.new_(cfg, cb, &c);
    CHECK(c.slirp != NULL, "version 1: %s", c.last_error);
    if (c.slirp != NULL) {
      struct in_addr lo, g100, g15;
      inet_pton(AF_INET, "127.0.0.1", &lo);
      inet_pton(AF_INET, "10.0.2.100", &g100);
      inet_pton(AF_INET, "10.0.2.15", &g15);
      const int port = FreePort(SOCK_STREAM);
      if (forward_first) {
        CHECK(L.add_hostfwd(c.slirp, 0, lo, port, g100, 80) == 0,
              "a forward to 10.0.2.100: %s", c.last_error);
      }
      uint8_t f[64];
      L.input(c.slirp, f, (int)ArpRequest(f, "10.0.2.100"));
      TurnUntil(&c, &c.arp_reply_seen);
      CHECK(c.arp_reply_seen, "no ARP reply for 10.0.2.100");
      L.input(c.slirp, f, (int)EchoRequest(f, "10.0.2.100", c.gateway_mac));
      TurnUntil(&c, &c.echo_reply_seen);
      CHECK(c.echo_reply_seen, "no echo reply to 10.0.2.100 (forward "
            "first: %d)", forward_first);
      char dst[INET_ADDRSTRLEN] = "";
      inet_ntop(AF_INET, &c.echo_reply_dst, dst, sizeof dst);
      CHECK(!c.echo_reply_seen || strcmp(dst, "10.0.2.100") == 0,
            "echo reply to %s", dst);
      if (!forward_first) {
        CHECK(L.add_hostfwd(c.slirp, 0, lo, port, g100, 80) == 0,
              "a forward to 10.0.2.100 after its frames: %s", c.last_error);
      }
      CHECK(InfoHas(c.slirp, "10.0.2.100"), "the forward goes elsewhere");
      CHECK(L.add_hostfwd(c.slirp, 0, lo, FreePort(SOCK_STREAM), g15, 80) ==
                -1, "a forward to .15 once the guest is .100");
      CHECK(L.remove_hostfwd(c.slirp, 0, lo, port) == 0,
            "remove the forward to .100");
    }
    Release(c.slirp, cfg, cb);
  }

  /* The gateway is the guest's router: its neighbour advertisements say
   * so (R), or the guest's NUD probe of it takes the default route away
   * (RFC 4861 7.2.5), as it did to slirp4netns's guest after a ping. */
  {
    Caller c;
    SlirpConfig *cfg;
    SlirpCb *cb;
    Slirp *s = New(&c, 4, &cfg, &cb);
    if (s != NULL) {
      uint8_t f[128];
      L.input(s, f, (int)NeighborSolicitation(f));
      TurnUntil(&c, &c.na_seen);
      CHECK(c.na_seen, "no neighbour advertisement for the gateway");
      CHECK(!c.na_seen || c.na_router,
            "the gateway's neighbour advertisement has no R flag");
    }
    Release(s, cfg, cb);
  }

  /* restricted: the guest's own connections reach nothing, even on this
   * machine; without it the same SYN connects (the check can fail). */
  {
    struct in_addr local;
    if (LocalAddress(&local)) {
      CHECK(GuestReaches(0, local), "an unrestricted guest's SYN did not "
            "connect to a local listener");
      CHECK(!GuestReaches(1, local), "a restricted guest connected out");
    } else {
      fprintf(stderr, "no non-loopback IPv4 address: restricted's "
              "outbound check skipped\n");
    }
  }

  /* Two instances at once, interleaved: nothing is shared. */
  {
    Caller a, b;
    SlirpConfig *cfg_a, *cfg_b;
    SlirpCb *cb_a, *cb_b;
    Slirp *sa = New(&a, 4, &cfg_a, &cb_a);
    Slirp *sb = New(&b, 1, &cfg_b, &cb_b);
    CHECK(sa != NULL && sb != NULL && sa != sb, "two instances");
    if (sa != NULL && sb != NULL) {
      const int port = FreePort(SOCK_STREAM);
      struct in_addr lo, any = {0};
      inet_pton(AF_INET, "127.0.0.1", &lo);
      CHECK(L.add_hostfwd(sa, 0, lo, port, any, 80) == 0, "a's forward");
      CHECK(L.remove_hostfwd(sb, 0, lo, port) == -1,
            "b removed a's forward");
      Dhcp(&a, true);
      CHECK(b.frames == 0, "b sent %d frames for a's input", b.frames);
      Dhcp(&b, true);
      State(&a, &b);
      L.cleanup(sa);
      sa = NULL;
      /* b still runs after a is gone. */
      b.offer_seen = false;
      Dhcp(&b, true);
    }
    Release(sa, cfg_a, cb_a);
    Release(sb, cfg_b, cb_b);
  }

  if (mkdtemp(policy_dir) == NULL) abort();
  PolicyBadFiles();
  PolicyJudges();
  for (int i = 0; i < 3; ++i) {
    static const char *const kNames[] = {"bad", "allow", "other"};
    char path[96];
    snprintf(path, sizeof path, "%s/%s", policy_dir, kNames[i]);
    unlink(path);
  }
  CHECK(rmdir(policy_dir) == 0, "%s is left", policy_dir);

  /* slirp_init: the version-1 config as arguments. */
  {
    Caller c;
    memset(&c, 0, sizeof c);
    c.version = 1;
    SlirpConfig *cfg = QemuConfig(1);
    SlirpCb *cb = Callbacks(1);
    c.slirp = L.init(0, true, cfg->vnetwork, cfg->vnetmask, cfg->vhost, true,
                     cfg->vprefix_addr6, cfg->vprefix_len, cfg->vhost6, NULL,
                     NULL, NULL, NULL, cfg->vdhcp_start, cfg->vnameserver,
                     cfg->vnameserver6, NULL, NULL, cb, &c);
    CHECK(c.slirp != NULL, "slirp_init: %s", c.last_error);
    if (c.slirp != NULL) Dhcp(&c, true);
    Release(c.slirp, cfg, cb);
  }

  if (failures != 0) {
    fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  printf("all checks passed\n");
  return 0;
}
