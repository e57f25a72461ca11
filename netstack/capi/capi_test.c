/* libnetstack's C API, driven from C through libnetstack.so.1 as an
 * embedder links it: bad configs and their messages, the callback link
 * (ARP and DHCP through netstack_input and send_frame), a stream link on
 * a socketpair, forwards added and removed, counters, stop, two
 * instances in one process, and the egress policy (policy_file,
 * NETSTACK_POLICY, a 1.0-sized config, netstack_set_policy_file).
 * netstack.h comes first: it compiles alone. */
#include "netstack/capi/netstack.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int failures = 0;

#define CHECK(cond)                                                     \
  do {                                                                  \
    if (!(cond)) {                                                      \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, \
              #cond);                                                   \
      ++failures;                                                       \
    }                                                                   \
  } while (0)

#define CHECK_CONTAINS(text, part)                                        \
  do {                                                                    \
    if (strstr((text), (part)) == NULL) {                                 \
      fprintf(stderr, "%s:%d: \"%s\" does not contain \"%s\"\n", __FILE__, \
              __LINE__, (text), (part));                                  \
      ++failures;                                                         \
    }                                                                     \
  } while (0)

/* ---- Frames from a guest ---------------------------------------------- */

static const uint8_t kGuestMac[6] = {0x52, 0x54, 0x00, 0x12, 0x34, 0x56};

static void put16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)(v >> 8);
  p[1] = (uint8_t)v;
}

static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }

/* Who has `target`? from 10.0.2.100. */
static size_t arp_request(uint8_t *f, const uint8_t target[4]) {
  static const uint8_t sender[4] = {10, 0, 2, 100};
  memset(f, 0xff, 6);
  memcpy(f + 6, kGuestMac, 6);
  put16(f + 12, 0x0806);
  uint8_t *a = f + 14;
  put16(a, 1);          /* Ethernet */
  put16(a + 2, 0x0800); /* IPv4 */
  a[4] = 6;
  a[5] = 4;
  put16(a + 6, 1); /* request */
  memcpy(a + 8, kGuestMac, 6);
  memcpy(a + 14, sender, 4);
  memset(a + 18, 0, 6);
  memcpy(a + 24, target, 4);
  return 14 + 28;
}

static uint16_t ip_checksum(const uint8_t *p, size_t len) {
  uint32_t sum = 0;
  for (size_t i = 0; i + 1 < len; i += 2) sum += get16(p + i);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return (uint16_t)~sum;
}

/* A DHCPDISCOVER from 0.0.0.0:68 to 255.255.255.255:67 (no UDP
 * checksum: optional in IPv4). */
static size_t dhcp_discover(uint8_t *f, uint32_t xid) {
  memset(f, 0, 14 + 20 + 8 + 244);
  memset(f, 0xff, 6);
  memcpy(f + 6, kGuestMac, 6);
  put16(f + 12, 0x0800);
  uint8_t *ip = f + 14;
  uint8_t *udp = ip + 20;
  uint8_t *bootp = udp + 8;
  size_t bootp_len = 240;
  bootp[0] = 1; /* BOOTREQUEST */
  bootp[1] = 1;
  bootp[2] = 6;
  bootp[4] = (uint8_t)(xid >> 24);
  bootp[5] = (uint8_t)(xid >> 16);
  bootp[6] = (uint8_t)(xid >> 8);
  bootp[7] = (uint8_t)xid;
  put16(bootp + 10, 0x8000); /* broadcast */
  memcpy(bootp + 28, kGuestMac, 6);
  bootp[236] = 99; /* magic cookie */
  bootp[237] = 130;
  bootp[238] = 83;
  bootp[239] = 99;
  bootp[bootp_len++] = 53; /* DHCP message type: DISCOVER */
  bootp[bootp_len++] = 1;
  bootp[bootp_len++] = 1;
  bootp[bootp_len++] = 255;
  const size_t udp_len = 8 + bootp_len;
  put16(udp, 68);
  put16(udp + 2, 67);
  put16(udp + 4, (uint16_t)udp_len);
  ip[0] = 0x45;
  put16(ip + 2, (uint16_t)(20 + udp_len));
  ip[8] = 64;
  ip[9] = 17;
  memset(ip + 16, 0xff, 4);
  put16(ip + 10, ip_checksum(ip, 20));
  return 14 + 20 + udp_len;
}

/* A TCP SYN from 10.0.2.100:`sport` to `dst`:`dport`, to the gateway's
 * MAC `gw_mac`. */
static size_t tcp_syn(uint8_t *f, const uint8_t gw_mac[6],
                      const uint8_t dst[4], uint16_t sport, uint16_t dport) {
  static const uint8_t src[4] = {10, 0, 2, 100};
  memset(f, 0, 14 + 40);
  memcpy(f, gw_mac, 6);
  memcpy(f + 6, kGuestMac, 6);
  put16(f + 12, 0x0800);
  uint8_t *ip = f + 14;
  uint8_t *tcp = ip + 20;
  ip[0] = 0x45;
  put16(ip + 2, 40);
  ip[8] = 64;
  ip[9] = 6;
  memcpy(ip + 12, src, 4);
  memcpy(ip + 16, dst, 4);
  put16(ip + 10, ip_checksum(ip, 20));
  put16(tcp, sport);
  put16(tcp + 2, dport);
  tcp[7] = 1;      /* seq 1 */
  tcp[12] = 0x50;  /* 20-byte header */
  tcp[13] = 0x02;  /* SYN */
  put16(tcp + 14, 65535);
  uint8_t pseudo[12 + 20];
  memcpy(pseudo, src, 4);
  memcpy(pseudo + 4, dst, 4);
  pseudo[8] = 0;
  pseudo[9] = 6;
  put16(pseudo + 10, 20);
  memcpy(pseudo + 12, tcp, 20);
  put16(tcp + 16, ip_checksum(pseudo, sizeof pseudo));
  return 14 + 40;
}

/* ---- What the library sends ------------------------------------------- */

/* Every frame counts; ARP and IPv4 ones are kept (the last of each),
 * since the router advertisements of the first turns come too. */
struct sink {
  int frames;
  int arp_frames;
  int ip4_frames;
  uint8_t last[2048]; /* the last ARP or IPv4 frame */
  size_t last_len;
  netstack_t *ns;      /* for the re-entrancy check */
  int nested_poll_rc;  /* netstack_poll from inside send_frame */
};

static int collect(const void *frame, size_t len, void *opaque) {
  struct sink *s = opaque;
  const uint8_t *f = frame;
  ++s->frames;
  if (len < 14) return 0;
  const uint16_t type = get16(f + 12);
  if (type == 0x0806) ++s->arp_frames;
  if (type == 0x0800) ++s->ip4_frames;
  if (type == 0x0806 || type == 0x0800) {
    s->last_len = len < sizeof s->last ? len : sizeof s->last;
    memcpy(s->last, frame, s->last_len);
  }
  if (s->ns != NULL) s->nested_poll_rc = netstack_poll(s->ns);
  return 0;
}

static void callback_config(netstack_config *cfg, struct sink *s) {
  netstack_config_init(cfg);
  cfg->link_type = NETSTACK_LINK_CALLBACK;
  cfg->send_frame = collect;
  cfg->opaque = s;
  /* No resolv.conf needed: nothing here resolves. */
  cfg->dns_upstreams = "127.0.0.1:5353";
}

static netstack_t *new_callback(struct sink *s) {
  netstack_config cfg;
  callback_config(&cfg, s);
  char err[256];
  netstack_t *ns = netstack_new(&cfg, err, sizeof err);
  if (ns == NULL) fprintf(stderr, "netstack_new: %s\n", err);
  return ns;
}

/* ---- Tests ------------------------------------------------------------- */

static void expect_refused(const netstack_config *cfg, const char *part) {
  char err[256] = "unchanged";
  netstack_t *ns = netstack_new(cfg, err, sizeof err);
  CHECK(ns == NULL);
  if (ns != NULL) {
    netstack_free(ns);
    return;
  }
  CHECK_CONTAINS(err, part);
}

static void test_bad_configs(void) {
  struct sink s = {0};
  netstack_config cfg;
  char err[256] = "unchanged";

  CHECK(netstack_new(NULL, err, sizeof err) == NULL);
  CHECK_CONTAINS(err, "config is NULL");

  callback_config(&cfg, &s);
  cfg.size = 0;
  expect_refused(&cfg, "config size 0 is smaller");
  expect_refused(&cfg, "netstack_config_init");

  callback_config(&cfg, &s);
  cfg.net4 = "10.0.2.0/33";
  expect_refused(&cfg, "net4: bad IPv4 CIDR '10.0.2.0/33'");

  callback_config(&cfg, &s);
  cfg.net6 = "fd00::";
  expect_refused(&cfg, "net6: bad IPv6 prefix 'fd00::'");

  callback_config(&cfg, &s);
  cfg.gateway4 = "192.168.1.2";
  expect_refused(&cfg, "gateway4: 192.168.1.2 is not a host of 10.0.2.0/24");

  callback_config(&cfg, &s);
  cfg.lease4 = "10.0.2.2";
  expect_refused(&cfg, "lease4 10.0.2.2 is the gateway's");

  callback_config(&cfg, &s);
  cfg.send_frame = NULL;
  expect_refused(&cfg, "a callback link needs send_frame");

  callback_config(&cfg, &s);
  cfg.mtu = 576;
  expect_refused(&cfg, "mtu 576 out of range [1280, 65520]");

  callback_config(&cfg, &s);
  cfg.mac = "52:55:0a";
  expect_refused(&cfg, "mac: '52:55:0a' is not an Ethernet address");

  callback_config(&cfg, &s);
  cfg.dns_upstreams = "127.0.0.1:53,nameserver.example";
  expect_refused(&cfg, "dns_upstreams:");

  callback_config(&cfg, &s);
  cfg.outbound_addr4 = "::1";
  expect_refused(&cfg, "outbound_addr4: '::1' is not an IPv4 address");

  callback_config(&cfg, &s);
  cfg.udp_timeout_ms = 10;
  expect_refused(&cfg, "udp_timeout_ms 10 is below 1000");

  callback_config(&cfg, &s);
  cfg.max_tcp_flows = 2000000;
  expect_refused(&cfg, "max_tcp_flows 2000000 out of range [1, 1000000]");

  callback_config(&cfg, &s);
  cfg.pcap_path = "/nonexistent-dir/x.pcap";
  expect_refused(&cfg, "--pcap: ");

  callback_config(&cfg, &s);
  cfg.link_type = 9;
  expect_refused(&cfg, "link_type 9");

  callback_config(&cfg, &s);
  cfg.link_fd = 0;
  expect_refused(&cfg, "a callback link takes -1");

  /* A TAP link on something that is no TAP: refused, and the fd, which
   * the library owns from netstack_new on, is closed. */
  int fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  CHECK(fd >= 0);
  callback_config(&cfg, &s);
  cfg.link_type = NETSTACK_LINK_TAP;
  cfg.link_fd = fd;
  expect_refused(&cfg, "is not a TAP (TUNGETIFF)");
  CHECK(fcntl(fd, F_GETFD) == -1 && errno == EBADF);

  /* ... also when the config fails before the link is looked at. */
  int sv[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  callback_config(&cfg, &s);
  cfg.link_type = NETSTACK_LINK_STREAM;
  cfg.link_fd = sv[0];
  cfg.net4 = "bad";
  expect_refused(&cfg, "net4: bad IPv4 CIDR 'bad'");
  CHECK(fcntl(sv[0], F_GETFD) == -1 && errno == EBADF);
  close(sv[1]);

  /* A caller built against a newer header: unknown fields that are zero
   * are fine, others are refused. */
  struct {
    netstack_config cfg;
    uint64_t newer_field;
  } big;
  memset(&big, 0, sizeof big);
  callback_config(&big.cfg, &s);
  big.cfg.size = sizeof big;
  netstack_t *ns = netstack_new(&big.cfg, err, sizeof err);
  CHECK(ns != NULL);
  netstack_free(ns);
  big.newer_field = 1;
  expect_refused(&big.cfg, "config has fields past this library's");

  /* A short error buffer is cut and still terminated. */
  callback_config(&cfg, &s);
  cfg.net4 = "nonsense";
  char small[8];
  memset(small, 'x', sizeof small);
  CHECK(netstack_new(&cfg, small, sizeof small) == NULL);
  CHECK(strcmp(small, "net4: b") == 0);
}

static void test_arp_and_dhcp_through_callbacks(void) {
  struct sink s = {0};
  netstack_t *ns = new_callback(&s);
  CHECK(ns != NULL);
  if (ns == NULL) return;
  CHECK(netstack_fd(ns) >= 0);

  uint8_t f[600];
  static const uint8_t gw[4] = {10, 0, 2, 2};
  size_t len = arp_request(f, gw);
  CHECK(netstack_input(ns, f, len) == 0);
  /* Handled at the next turn; the caller is told to poll now. */
  CHECK(s.arp_frames == 0);
  CHECK(netstack_next_deadline_ns(ns) == 0);
  CHECK(netstack_poll(ns) == 0);
  CHECK(s.arp_frames == 1);
  CHECK(s.last_len >= 42);
  CHECK(get16(s.last + 12) == 0x0806);
  CHECK(get16(s.last + 14 + 6) == 2); /* reply */
  CHECK(memcmp(s.last, kGuestMac, 6) == 0);
  CHECK(memcmp(s.last + 14 + 14, gw, 4) == 0);
  uint64_t v = 0;
  CHECK(netstack_counter(ns, "link.rx_frames", &v) == 0 && v == 1);
  CHECK(netstack_counter(ns, "link.tx_frames", &v) == 0 &&
        v == (uint64_t)s.frames);

  /* DHCPDISCOVER -> OFFER of 10.0.2.100 from 10.0.2.2. */
  len = dhcp_discover(f, 0x1234abcd);
  CHECK(netstack_input(ns, f, len) == 0);
  CHECK(netstack_poll(ns) == 0);
  CHECK(s.ip4_frames == 1);
  const uint8_t *ip = s.last + 14;
  const uint8_t *bootp = ip + 20 + 8;
  static const uint8_t lease[4] = {10, 0, 2, 100};
  CHECK(get16(s.last + 12) == 0x0800);
  CHECK(ip[9] == 17);
  CHECK(get16(ip + 20) == 67 && get16(ip + 22) == 68);
  CHECK(bootp[0] == 2); /* BOOTREPLY */
  CHECK(bootp[4] == 0x12 && bootp[7] == 0xcd);
  CHECK(memcmp(bootp + 16, lease, 4) == 0);

  /* A runt is dropped and counted, not refused. */
  CHECK(netstack_input(ns, f, 5) == 0);
  CHECK(netstack_poll(ns) == 0);
  CHECK(netstack_counter(ns, "link.rx_runts", &v) == 0 && v == 1);
  CHECK(netstack_counter(ns, "link.rx_dropped", &v) == 0 && v == 1);
  CHECK(netstack_input(ns, NULL, 10) == -EINVAL);
  CHECK_CONTAINS(netstack_last_error(ns), "frame is NULL");

  /* A turn from inside send_frame would re-enter the loop: -EBUSY. */
  s.ns = ns;
  s.nested_poll_rc = 1;
  len = arp_request(f, gw);
  netstack_input(ns, f, len);
  CHECK(netstack_poll(ns) == 0);
  CHECK(s.nested_poll_rc == -EBUSY);
  CHECK_CONTAINS(netstack_last_error(ns), "from inside a callback");
  s.ns = NULL;

  /* 64 frames queued run their turn from netstack_input itself. */
  s.arp_frames = 0;
  for (int i = 0; i < 64; ++i) netstack_input(ns, f, len);
  CHECK(s.arp_frames == 64);
  netstack_free(ns);
}

/* disable_dhcp: a DISCOVER gets no OFFER (the guest is configured by
 * other means); disable_dns: no forwarder, so no upstream or resolv.conf
 * is needed at all. */
static void test_dhcp_and_dns_off(void) {
  struct sink s = {0};
  netstack_config cfg;
  callback_config(&cfg, &s);
  cfg.disable_dhcp = 1;
  cfg.disable_dns = 1;
  cfg.dns_upstreams = NULL;
  cfg.resolv_conf = "/nonexistent/resolv.conf";
  char err[256];
  netstack_t *ns = netstack_new(&cfg, err, sizeof err);
  CHECK(ns != NULL);
  if (ns == NULL) {
    fprintf(stderr, "netstack_new: %s\n", err);
    return;
  }
  uint8_t f[600];
  size_t len = dhcp_discover(f, 0x1234abcd);
  CHECK(netstack_input(ns, f, len) == 0);
  CHECK(netstack_poll(ns) == 0);
  CHECK(s.ip4_frames == 0);
  netstack_free(ns);
}

/* pcap_path records the guest link: the ARP request and its reply. */
static void test_pcap(void) {
  char path[] = "/tmp/capi_test_pcap_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  close(fd);
  struct sink s = {0};
  netstack_config cfg;
  callback_config(&cfg, &s);
  cfg.pcap_path = path;
  char err[256];
  netstack_t *ns = netstack_new(&cfg, err, sizeof err);
  CHECK(ns != NULL);
  if (ns != NULL) {
    uint8_t f[64];
    static const uint8_t gw[4] = {10, 0, 2, 2};
    const size_t len = arp_request(f, gw);
    netstack_input(ns, f, len);
    netstack_poll(ns);
    CHECK(s.arp_frames == 1);
    netstack_free(ns); /* flushes the file */
  }
  FILE *p = fopen(path, "rb");
  CHECK(p != NULL);
  if (p != NULL) {
    static uint8_t buf[1 << 16];
    const size_t n = fread(buf, 1, sizeof buf, p);
    fclose(p);
    /* The global header, then at least the two ARP records (16 bytes of
     * record header each, 42 bytes of frame). */
    CHECK(n >= 24 + 2 * (16 + 42));
    const uint32_t magic = (uint32_t)buf[0] | (uint32_t)buf[1] << 8 |
                           (uint32_t)buf[2] << 16 | (uint32_t)buf[3] << 24;
    CHECK(magic == 0xa1b2c3d4 || magic == 0xa1b23c4d);
    /* The request as it came in is in there. */
    uint8_t want[64];
    static const uint8_t gw[4] = {10, 0, 2, 2};
    const size_t len = arp_request(want, gw);
    int found = 0;
    for (size_t i = 24; i + len <= n && !found; ++i) {
      found = memcmp(buf + i, want, len) == 0;
    }
    CHECK(found);
  }
  unlink(path);
}

static void test_stream_link(void) {
  int sv[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  netstack_config cfg;
  netstack_config_init(&cfg);
  cfg.link_type = NETSTACK_LINK_STREAM;
  cfg.link_fd = sv[0];
  cfg.dns_upstreams = "127.0.0.1:5353";
  cfg.mtu = 1500;
  char err[256];
  netstack_t *ns = netstack_new(&cfg, err, sizeof err);
  CHECK(ns != NULL);
  if (ns == NULL) {
    fprintf(stderr, "stream: %s\n", err);
    return;
  }
  uint8_t f[4 + 64];
  static const uint8_t gw[4] = {10, 0, 2, 2};
  const size_t len = arp_request(f + 4, gw);
  f[0] = f[1] = 0;
  put16(f + 2, (uint16_t)len);
  CHECK(write(sv[1], f, 4 + len) == (ssize_t)(4 + len));
  CHECK(netstack_input(ns, f, len) == -EINVAL);
  CHECK_CONTAINS(netstack_last_error(ns), "not a callback link");
  /* The caller's loop: wait on netstack_fd(), then poll. */
  /* Frames come back in the same framing; look for the ARP reply among
   * them (router advertisements come too). */
  static uint8_t buf[1 << 16];
  size_t have = 0;
  int arp_replies = 0;
  for (int i = 0; i < 50 && arp_replies == 0; ++i) {
    struct pollfd p = {.fd = netstack_fd(ns), .events = POLLIN};
    poll(&p, 1, 20);
    CHECK(netstack_poll(ns) == 0);
    ssize_t got = recv(sv[1], buf + have, sizeof buf - have, MSG_DONTWAIT);
    if (got > 0) have += (size_t)got;
    size_t off = 0;
    while (have - off >= 4) {
      const size_t flen = (size_t)get16(buf + off + 2) | (size_t)get16(buf + off) << 16;
      if (have - off < 4 + flen) break;
      const uint8_t *fr = buf + off + 4;
      if (flen >= 42 && get16(fr + 12) == 0x0806 && get16(fr + 20) == 2) {
        ++arp_replies;
      }
      off += 4 + flen;
    }
    memmove(buf, buf + off, have - off);
    have -= off;
  }
  CHECK(arp_replies == 1);
  netstack_free(ns);
  close(sv[1]);
}

/* NETSTACK_LINK_VHOST_USER: the library answers a vhost-user front-end
 * on the socket (link/vhost_user_endpoint_test.cc drives the rings). */
static void test_vhost_user_link(void) {
  int sv[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  netstack_config cfg;
  netstack_config_init(&cfg);
  cfg.link_type = NETSTACK_LINK_VHOST_USER;
  cfg.link_fd = sv[0];
  cfg.dns_upstreams = "127.0.0.1:5353";
  char err[256];
  netstack_t *ns = netstack_new(&cfg, err, sizeof err);
  CHECK(ns != NULL);
  if (ns == NULL) {
    fprintf(stderr, "vhost-user: %s\n", err);
    close(sv[1]);
    return;
  }
  /* VHOST_USER_GET_FEATURES (1), version 1, no payload. */
  const uint32_t get_features[3] = {1, 1, 0};
  CHECK(write(sv[1], get_features, sizeof get_features) ==
        (ssize_t)sizeof get_features);
  uint8_t reply[20];
  ssize_t got = 0;
  for (int i = 0; i < 50 && got < (ssize_t)sizeof reply; ++i) {
    struct pollfd p = {.fd = netstack_fd(ns), .events = POLLIN};
    poll(&p, 1, 20);
    CHECK(netstack_poll(ns) == 0);
    ssize_t n = recv(sv[1], reply + got, sizeof reply - (size_t)got,
                     MSG_DONTWAIT);
    if (n > 0) got += n;
  }
  CHECK(got == (ssize_t)sizeof reply);
  uint32_t head[3];
  uint64_t features;
  memcpy(head, reply, sizeof head);
  memcpy(&features, reply + 12, sizeof features);
  CHECK(head[0] == 1 && head[1] == (1 | 4) && head[2] == 8);
  CHECK((features >> 32 & 1) == 1); /* VIRTIO_F_VERSION_1 */
  CHECK((features >> 11 & 1) == 1); /* VIRTIO_NET_F_HOST_TSO4 */
  netstack_free(ns);
  close(sv[1]);
}

/* A port on 127.0.0.1 that nobody holds right now. */
static int free_port(int family) {
  int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  socklen_t sl;
  if (family == AF_INET) {
    struct sockaddr_in *a = (struct sockaddr_in *)&ss;
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sl = sizeof *a;
  } else {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_loopback;
    sl = sizeof *a;
  }
  if (bind(fd, (struct sockaddr *)&ss, sl) != 0) {
    close(fd);
    return -1;
  }
  getsockname(fd, (struct sockaddr *)&ss, &sl);
  close(fd);
  return ntohs(family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                 : ((struct sockaddr_in6 *)&ss)->sin6_port);
}

static void test_forwards(void) {
  struct sink s = {0};
  netstack_t *ns = new_callback(&s);
  CHECK(ns != NULL);
  if (ns == NULL) return;
  char spec[64];
  const int p4 = free_port(AF_INET);
  CHECK(p4 > 0);
  snprintf(spec, sizeof spec, "127.0.0.1/%d:80", p4);
  uint64_t tcp4 = 0, again = 0, udp4 = 0, tcp6 = 0;
  int rc;
  CHECK(netstack_forward_add(ns, NETSTACK_TCP, spec, &tcp4) == 0);
  CHECK(tcp4 != 0);
  /* The same port again: taken. */
  rc = netstack_forward_add(ns, NETSTACK_TCP, spec, &again);
  if (rc != -EADDRINUSE) {
    fprintf(stderr, "again: %d %s\n", rc, netstack_last_error(ns));
  }
  CHECK(rc == -EADDRINUSE);
  CHECK_CONTAINS(netstack_last_error(ns), "Address already in use");
  /* UDP on the same numbers is another port; a range of two. */
  snprintf(spec, sizeof spec, "127.0.0.1/%d-%d:5000", p4, p4 + 1);
  rc = netstack_forward_add(ns, NETSTACK_UDP, spec, &udp4);
  CHECK(rc == 0 || rc == -EADDRINUSE); /* p4 + 1 may be someone's */
  const int p6 = free_port(AF_INET6);
  if (p6 > 0) { /* a host without ::1 skips IPv6 */
    snprintf(spec, sizeof spec, "[::1]/%d:22", p6);
    CHECK(netstack_forward_add(ns, NETSTACK_TCP, spec, &tcp6) == 0);
    CHECK(netstack_forward_remove(ns, tcp6) == 0);
  }

  CHECK(netstack_forward_add(ns, NETSTACK_TCP, "80-", NULL) == -EINVAL);
  CHECK_CONTAINS(netstack_last_error(ns), "-t 80-:");
  CHECK(netstack_forward_add(ns, 7, "8080", NULL) == -EINVAL);
  CHECK_CONTAINS(netstack_last_error(ns), "proto 7");
  CHECK(netstack_forward_add(ns, NETSTACK_TCP, NULL, NULL) == -EINVAL);

  CHECK(netstack_forward_remove(ns, tcp4) == 0);
  CHECK(netstack_forward_remove(ns, tcp4) == -ENOENT);
  CHECK(netstack_forward_remove(ns, 999999) == -ENOENT);
  /* Removed: the port is free again. */
  snprintf(spec, sizeof spec, "127.0.0.1/%d:80", p4);
  CHECK(netstack_forward_add(ns, NETSTACK_TCP, spec, &again) == 0);
  CHECK(again != tcp4);
  netstack_free(ns);
}

static void test_counters(void) {
  struct sink s = {0};
  netstack_t *ns = new_callback(&s);
  CHECK(ns != NULL);
  if (ns == NULL) return;
  const size_t need = netstack_counters(ns, NULL, 0);
  CHECK(need > 0);
  char *all = malloc(need + 1);
  CHECK(netstack_counters(ns, all, need + 1) == need);
  CHECK(strlen(all) == need);
  CHECK_CONTAINS(all, "backend.tcp_flows_opened 0\n");
  CHECK_CONTAINS(all, "link.rx_frames 0\n");
  free(all);
  char small[10];
  CHECK(netstack_counters(ns, small, sizeof small) == need);
  CHECK(strlen(small) == sizeof small - 1);
  uint64_t v = 42;
  CHECK(netstack_counter(ns, "backend.tcp_flows_opened", &v) == 0 && v == 0);
  CHECK(netstack_counter(ns, "backend.tcp_flows", &v) == -ENOENT);
  CHECK_CONTAINS(netstack_last_error(ns), "no counter 'backend.tcp_flows'");
  CHECK(netstack_counter(ns, NULL, &v) == -EINVAL);
  CHECK(strcmp(netstack_version(), "1.1.0") == 0);
  netstack_free(ns);
  netstack_free(NULL);
}

static void *stop_later(void *arg) {
  struct timespec ts = {0, 50 * 1000 * 1000};
  nanosleep(&ts, NULL);
  netstack_stop(arg);
  return NULL;
}

static void test_run_and_stop(void) {
  struct sink s = {0};
  netstack_t *ns = new_callback(&s);
  CHECK(ns != NULL);
  if (ns == NULL) return;
  /* A stop before run: run returns at once, and the next run waits. */
  netstack_stop(ns);
  CHECK(netstack_run(ns) == 0);
  pthread_t t;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  CHECK(pthread_create(&t, NULL, stop_later, ns) == 0);
  CHECK(netstack_run(ns) == 0);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  pthread_join(t, NULL);
  const double waited =
      (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
  CHECK(waited >= 0.04);
  netstack_free(ns);
}

/* Two instances, two plans: each answers for its own gateway, through its
 * own callback, and the other sees nothing. */
static void test_two_instances(void) {
  struct sink s1 = {0}, s2 = {0};
  netstack_config cfg;
  char err[256];
  callback_config(&cfg, &s1);
  netstack_t *a = netstack_new(&cfg, err, sizeof err);
  callback_config(&cfg, &s2);
  cfg.net4 = "10.9.0.0/16";
  netstack_t *b = netstack_new(&cfg, err, sizeof err);
  CHECK(a != NULL && b != NULL);
  if (a == NULL || b == NULL) return;
  CHECK(netstack_fd(a) != netstack_fd(b));
  uint8_t f[64];
  static const uint8_t gw_a[4] = {10, 0, 2, 2};
  static const uint8_t gw_b[4] = {10, 9, 0, 2};
  /* b's gateway asked of a: no answer. */
  size_t len = arp_request(f, gw_b);
  netstack_input(a, f, len);
  netstack_poll(a);
  netstack_poll(b);
  CHECK(s1.arp_frames == 0 && s2.arp_frames == 0);
  netstack_input(b, f, len);
  netstack_poll(b);
  CHECK(s2.arp_frames == 1 && s1.arp_frames == 0);
  CHECK(memcmp(s2.last + 28, gw_b, 4) == 0);
  len = arp_request(f, gw_a);
  netstack_input(a, f, len);
  netstack_poll(a);
  CHECK(s1.arp_frames == 1 && s2.arp_frames == 1);
  CHECK(memcmp(s1.last + 28, gw_a, 4) == 0);
  uint64_t va = 0, vb = 0;
  CHECK(netstack_counter(a, "link.rx_frames", &va) == 0);
  CHECK(netstack_counter(b, "link.rx_frames", &vb) == 0);
  CHECK(va == 2 && vb == 1);
  netstack_free(a);
  /* b outlives a. */
  netstack_input(b, f, len);
  CHECK(netstack_poll(b) == 0);
  netstack_free(b);
}

/* ---- The egress policy (policy_file, NETSTACK_POLICY) ------------------ */

static char policy_dir[] = "/tmp/capi-policy-XXXXXX";
static char good_policy[64], bad_policy[64], other_policy[64];

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (f == NULL) return;
  fputs(text, f);
  fclose(f);
}

static void make_policy_files(void) {
  CHECK(mkdtemp(policy_dir) != NULL);
  snprintf(good_policy, sizeof good_policy, "%s/good", policy_dir);
  snprintf(bad_policy, sizeof bad_policy, "%s/bad", policy_dir);
  snprintf(other_policy, sizeof other_policy, "%s/other", policy_dir);
  write_file(good_policy, "# only one address\nallow 198.51.100.1\n");
  write_file(bad_policy, "allow 198.51.100.1\nallow 198.51.100.0/33\n");
  write_file(other_policy, "allow 198.51.100.2\n");
}

static void remove_policy_files(void) {
  unlink(good_policy);
  unlink(bad_policy);
  unlink(other_policy);
  rmdir(policy_dir);
}

/* The gateway's MAC, from its answer to an ARP request of the guest's
 * (which also teaches the stack the guest's MAC). */
static void learn_gateway(netstack_t *ns, struct sink *s, uint8_t mac[6]) {
  static const uint8_t gw[4] = {10, 0, 2, 2};
  uint8_t f[64];
  size_t len = arp_request(f, gw);
  netstack_input(ns, f, len);
  netstack_poll(ns);
  CHECK(s->arp_frames >= 1);
  memcpy(mac, s->last + 14 + 8, 6);
}

/* A SYN to `dst`:80: 1 when the stack answered it with an RST at once
 * (the policy refused it), 0 otherwise. */
static int syn_gets_rst(netstack_t *ns, struct sink *s, const uint8_t mac[6],
                        const uint8_t dst[4], uint16_t sport) {
  uint8_t f[64];
  size_t len = tcp_syn(f, mac, dst, sport, 80);
  s->last_len = 0;
  netstack_input(ns, f, len);
  netstack_poll(ns);
  if (s->last_len < 14 + 40 || get16(s->last + 12) != 0x0800) return 0;
  const uint8_t *ip = s->last + 14;
  const uint8_t *tcp = ip + (ip[0] & 0x0f) * 4;
  return ip[9] == 6 && memcmp(ip + 12, dst, 4) == 0 &&
         get16(tcp) == 80 && get16(tcp + 2) == sport && (tcp[13] & 0x04);
}

static uint64_t counter(netstack_t *ns, const char *name) {
  uint64_t v = UINT64_MAX;
  CHECK(netstack_counter(ns, name, &v) == 0);
  return v;
}

/* A callback netstack whose own flows can never leave this machine: its
 * host sockets bind 192.0.2.1 (TEST-NET-1), which no host here holds. */
static void policy_config(netstack_config *cfg, struct sink *s) {
  callback_config(cfg, s);
  cfg->outbound_addr4 = "192.0.2.1";
}

static void test_policy_file_errors(void) {
  struct sink s = {0};
  netstack_config cfg;
  char want[160];

  unsetenv("NETSTACK_POLICY");
  policy_config(&cfg, &s);
  cfg.policy_file = bad_policy;
  snprintf(want, sizeof want, "policy_file %s: line 2: ", bad_policy);
  expect_refused(&cfg, want);

  policy_config(&cfg, &s);
  cfg.policy_file = "/nonexistent-dir/policy";
  expect_refused(&cfg, "policy_file /nonexistent-dir/policy: open directory");

  /* NULL: NETSTACK_POLICY names the file. */
  setenv("NETSTACK_POLICY", bad_policy, 1);
  policy_config(&cfg, &s);
  snprintf(want, sizeof want, "NETSTACK_POLICY %s: line 2: ", bad_policy);
  expect_refused(&cfg, want);
  setenv("NETSTACK_POLICY", "/nonexistent-dir/policy", 1);
  expect_refused(&cfg, "NETSTACK_POLICY /nonexistent-dir/policy: ");

  /* "": no policy, the environment not read. */
  cfg.policy_file = "";
  netstack_t *ns = netstack_new(&cfg, NULL, 0);
  CHECK(ns != NULL);
  netstack_free(ns);

  /* A caller built against 1.0: its struct ends before policy_file, and
   * the library reads nothing past its size (what lies there here is a
   * bad file's name). NETSTACK_POLICY still applies to it. */
  policy_config(&cfg, &s);
  cfg.policy_file = bad_policy;
  cfg.size = (uint32_t)offsetof(netstack_config, policy_file);
  unsetenv("NETSTACK_POLICY");
  char err[256] = "";
  ns = netstack_new(&cfg, err, sizeof err);
  CHECK(ns != NULL);
  if (ns == NULL) fprintf(stderr, "1.0-sized config: %s\n", err);
  netstack_free(ns);
  setenv("NETSTACK_POLICY", bad_policy, 1);
  snprintf(want, sizeof want, "NETSTACK_POLICY %s: line 2: ", bad_policy);
  expect_refused(&cfg, want);
  unsetenv("NETSTACK_POLICY");
}

/* The policy judges the guest's SYNs: 198.51.100.2 is refused with an RST
 * at once (backend.policy.refused.not_allowed), 198.51.100.1 is allowed
 * (its connect then fails at the unbindable source, which is not the
 * policy's doing). By the field, by NETSTACK_POLICY, and by a 1.0-sized
 * config with NETSTACK_POLICY. */
static void test_policy_refuses_and_allows(void) {
  static const uint8_t allowed[4] = {198, 51, 100, 1};
  static const uint8_t denied[4] = {198, 51, 100, 2};
  for (int how = 0; how < 3; ++how) {
    struct sink s = {0};
    netstack_config cfg;
    policy_config(&cfg, &s);
    if (how == 0) {
      unsetenv("NETSTACK_POLICY");
      cfg.policy_file = good_policy;
    } else {
      setenv("NETSTACK_POLICY", good_policy, 1);
      if (how == 2) cfg.size = (uint32_t)offsetof(netstack_config, policy_file);
    }
    char err[256] = "";
    netstack_t *ns = netstack_new(&cfg, err, sizeof err);
    unsetenv("NETSTACK_POLICY");
    CHECK(ns != NULL);
    if (ns == NULL) {
      fprintf(stderr, "policy %d: %s\n", how, err);
      continue;
    }
    uint8_t mac[6];
    learn_gateway(ns, &s, mac);
    CHECK(syn_gets_rst(ns, &s, mac, denied, 40000));
    CHECK(counter(ns, "backend.policy.refused.not_allowed") == 1);
    CHECK(counter(ns, "backend.policy.allowed") == 0);
    syn_gets_rst(ns, &s, mac, allowed, 40001);
    CHECK(counter(ns, "backend.policy.allowed") == 1);
    CHECK(counter(ns, "backend.policy.refused.not_allowed") == 1);
    netstack_free(ns);
  }
  /* The control: without a policy the same SYN is allowed. */
  struct sink s = {0};
  netstack_config cfg;
  policy_config(&cfg, &s);
  netstack_t *ns = netstack_new(&cfg, NULL, 0);
  CHECK(ns != NULL);
  if (ns == NULL) return;
  uint8_t mac[6];
  learn_gateway(ns, &s, mac);
  syn_gets_rst(ns, &s, mac, denied, 40000);
  CHECK(counter(ns, "backend.policy.allowed") == 1);
  CHECK(counter(ns, "backend.policy.refused.not_allowed") == 0);
  netstack_free(ns);
}

/* netstack_set_policy_file: a new file applies to the next SYN; a bad one
 * is refused with its line and changes nothing; NULL is no policy. */
static void test_set_policy_file(void) {
  static const uint8_t one[4] = {198, 51, 100, 1};
  static const uint8_t two[4] = {198, 51, 100, 2};
  struct sink s = {0};
  netstack_config cfg;
  policy_config(&cfg, &s);
  cfg.policy_file = good_policy;
  netstack_t *ns = netstack_new(&cfg, NULL, 0);
  CHECK(ns != NULL);
  if (ns == NULL) return;
  uint8_t mac[6];
  learn_gateway(ns, &s, mac);
  CHECK(syn_gets_rst(ns, &s, mac, two, 41000));

  uint64_t reset = 99;
  CHECK(netstack_set_policy_file(ns, other_policy, &reset) == 0);
  CHECK(reset == 0);
  CHECK(syn_gets_rst(ns, &s, mac, one, 41001));
  CHECK(counter(ns, "backend.policy.refused.not_allowed") == 2);

  char want[160];
  CHECK(netstack_set_policy_file(ns, bad_policy, &reset) == -EINVAL);
  snprintf(want, sizeof want, "%s: line 2: ", bad_policy);
  CHECK_CONTAINS(netstack_last_error(ns), want);
  CHECK(syn_gets_rst(ns, &s, mac, one, 41002)); /* other_policy stays */
  CHECK(netstack_set_policy_file(ns, "/nonexistent-dir/p", NULL) < 0);
  CHECK_CONTAINS(netstack_last_error(ns), "/nonexistent-dir/p: ");

  CHECK(netstack_set_policy_file(ns, NULL, NULL) == 0);
  const uint64_t allowed = counter(ns, "backend.policy.allowed");
  syn_gets_rst(ns, &s, mac, one, 41003);
  CHECK(counter(ns, "backend.policy.allowed") == allowed + 1);
  CHECK(counter(ns, "backend.policy.refused.not_allowed") == 3);
  CHECK(netstack_set_policy_file(NULL, NULL, NULL) == -EINVAL);
  netstack_free(ns);
}

int main(void) {
  /* The environment must not steer the other tests. */
  unsetenv("NETSTACK_POLICY");
  test_bad_configs();
  test_arp_and_dhcp_through_callbacks();
  test_dhcp_and_dns_off();
  test_pcap();
  test_stream_link();
  test_vhost_user_link();
  test_forwards();
  test_counters();
  test_run_and_stop();
  test_two_instances();
  make_policy_files();
  test_policy_file_errors();
  test_policy_refuses_and_allows();
  test_set_policy_file();
  remove_policy_files();
  if (failures != 0) {
    fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  printf("all checks passed\n");
  return 0;
}
