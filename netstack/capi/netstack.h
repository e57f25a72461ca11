/* libnetstack: netstack's network backend as a C library.
 *
 * A netstack_t gives one guest (a VM, a container's network namespace)
 * its network: a gateway at 10.0.2.2 and fd00::2 (by default) that
 * answers DHCP, router advertisements and DNS, and turns the guest's TCP,
 * UDP and ping flows into the host's own sockets. Port forwards bring
 * host connections in.
 *
 *   netstack_config cfg;
 *   netstack_config_init(&cfg);
 *   cfg.link_fd = tap_fd;                 // a TAP; or a callback link
 *   cfg.link_type = NETSTACK_LINK_TAP;
 *   char err[256];
 *   netstack_t *ns = netstack_new(&cfg, err, sizeof err);
 *   if (!ns) { fprintf(stderr, "%s\n", err); ... }
 *   uint64_t id;
 *   netstack_forward_add(ns, NETSTACK_TCP, "127.0.0.1/8080:80", &id);
 *   netstack_run(ns);                     // or poll it from your loop
 *   netstack_free(ns);
 *
 * The guest link, two ways:
 *   - an fd: a TAP (with or without a vnet header: the library checks,
 *     and uses host GSO when it can), or a connected stream socket in
 *     QEMU's framing (each frame after its length, 4 bytes big-endian:
 *     `-netdev stream`). The library reads and writes it in batches.
 *   - callbacks: the embedder owns the device. It hands each frame it
 *     reads to netstack_input(), and the library calls
 *     config.send_frame() for each frame to the guest.
 *
 * Driving it, two ways:
 *   - netstack_run() runs the library's own loop in the calling thread
 *     until netstack_stop();
 *   - or the caller's loop: wait until netstack_fd() is readable or
 *     netstack_next_deadline_ns() has come (CLOCK_MONOTONIC), then call
 *     netstack_poll(). netstack_fd() stands for every fd the library
 *     watches (it is an epoll fd).
 *
 * Threads: a netstack_t is used by one thread at a time (the caller
 * serialises; nothing inside is locked). The only exception is
 * netstack_stop(), which any thread and a signal handler may call.
 * Nothing is global: two netstack_t in one process are independent.
 *
 * Errors: functions that can fail return 0 or a negative errno value
 * (-EINVAL for bad input, -ENOENT for an unknown id, ...), and
 * netstack_last_error() says why in words. netstack_new() writes its
 * reason into the caller's buffer. Nothing the guest sends makes a call
 * fail: a bad frame is dropped and counted.
 *
 * ABI: only netstack_* symbols are exported (libnetstack.so.1). Structs
 * the caller fills carry their own size, so fields can be added at the
 * end without breaking callers built against an older header. A caller
 * built against a newer header may pass a larger struct: the library
 * takes it as long as every field it does not know is zero, and refuses
 * it otherwise (it cannot do what those fields ask).
 *
 * Build: cc app.c $(pkg-config --cflags --libs netstack)
 * (docs/EMBEDDING.md: the whole example, and how to install).
 */
#ifndef NETSTACK_CAPI_NETSTACK_H_
#define NETSTACK_CAPI_NETSTACK_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NETSTACK_VERSION_MAJOR 1
#define NETSTACK_VERSION_MINOR 1

#if defined(__GNUC__)
#define NETSTACK_API __attribute__((visibility("default")))
#else
#define NETSTACK_API
#endif

/* The handle. (Its tag is not `netstack`, which C++ code of the library
 * itself uses as a namespace.) */
typedef struct netstack_instance netstack_t;

enum netstack_link_type {
  /* No fd: frames through netstack_input() and config.send_frame. */
  NETSTACK_LINK_CALLBACK = 0,
  /* link_fd is a TAP (IFF_TAP | IFF_NO_PI; IFF_VNET_HDR is detected). */
  NETSTACK_LINK_TAP = 1,
  /* link_fd is a connected stream socket, QEMU's length-prefixed frames. */
  NETSTACK_LINK_STREAM = 2,
  /* link_fd is a connected vhost-user socket (QEMU's -chardev socket,
   * -netdev vhost-user); the library is the vhost-user-net back-end and
   * reads and writes the guest's virtqueues in its shared memory. */
  NETSTACK_LINK_VHOST_USER = 3,
};

enum netstack_proto {
  NETSTACK_TCP = 1,
  NETSTACK_UDP = 2,
};

/* A frame to the guest (callback link): one whole Ethernet frame, at
 * most mtu + 18 bytes, checksums complete. `frame` is valid only during
 * the call. Return 0 when sent, or -1 to have it counted as dropped
 * (link.tx_dropped). It may call netstack_input() (the frame waits for
 * the next turn) but no other function on this netstack_t. */
typedef int (*netstack_send_frame_fn)(const void *frame, size_t len,
                                      void *opaque);

typedef struct netstack_config {
  /* sizeof(netstack_config) as the caller's header has it: set by
   * netstack_config_init(). The library reads no field past it. */
  uint32_t size;

  /* The guest link. */
  int link_type;        /* enum netstack_link_type */
  int link_fd;          /* TAP or STREAM: the fd, owned by the library
                           from netstack_new() on (closed by
                           netstack_free(), and on a failed new). */
  netstack_send_frame_fn send_frame; /* CALLBACK: required */
  void *opaque;         /* passed to send_frame */
  uint32_t mtu;         /* the guest's IP MTU, announced by DHCP and RA;
                           0: 65520 (TAP, STREAM), 1500 (CALLBACK).
                           1280..65520 (IPv6's minimum). */
  const char *mac;      /* the gateway's MAC "52:55:0a:00:02:02"; NULL:
                           derived */

  /* The address plan (NULL: the default). Gateway host 2, DNS host 3,
   * the guest's lease host 100, unless set below. */
  const char *net4;      /* "10.0.2.0/24" */
  const char *net6;      /* "fd00::/64"; the guest takes one by SLAAC */
  const char *gateway4;  /* in net4 */
  const char *dns4;      /* in net4 */
  const char *lease4;    /* the DHCP lease, in net4 */
  const char *gateway6;  /* in net6 */
  const char *dns6;      /* in net6 */

  /* What the guest may reach. */
  int host_loopback;     /* nonzero: the gateway address reaches the
                            host's 127.0.0.1 and ::1 */
  int disable_dns;       /* nonzero: no DNS forwarder at dns4/dns6 (and
                            no upstream or resolv_conf needed) */
  int disable_dhcp;      /* nonzero: no DHCPv4 server; the guest is
                            configured by other means (RAs stay) */
  const char *outbound_addr4; /* source address of host sockets */
  const char *outbound_addr6;
  /* DNS upstreams, comma-separated "ADDR[:PORT]" ("[v6]:port" for IPv6);
   * NULL: the nameservers of resolv_conf. */
  const char *dns_upstreams;
  const char *resolv_conf; /* NULL: /etc/resolv.conf */

  /* Limits (0: the default): the guest's own TCP and UDP flows. */
  uint32_t max_tcp_flows;  /* 4096 */
  uint32_t max_udp_flows;  /* 1024 */

  /* A pcap of the guest link (the frames as the wire sees them). */
  const char *pcap_path;

  /* Fields added after 1.0 go here, at the end. */

  /* Connections through the forwards at once (the host's clients); past
   * it a client is reset at once (forward.N.refused_limit). 0: 1024. */
  uint32_t max_forward_conns;
  /* A UDP flow with no datagram either way for this long closes.
   * 0: 180000 (3 minutes). At least 1000. */
  uint32_t udp_timeout_ms;
  /* A guest that acknowledges nothing for this long loses its TCP flow.
   * 0: off (TCP's own retransmission limit, about 15 minutes). At least
   * 1000. */
  uint32_t tcp_guest_timeout_ms;

  /* 1.1: the egress policy (docs/POLICY.md), a file in netstackd's
   * `--policy FILE` syntax: "allow RULE", "deny RULE" or "egress none" a
   * line, '#' comments. NULL: the file the environment variable
   * NETSTACK_POLICY names, if it is set and not empty (for a caller that
   * cannot pass a config, such as QEMU through the libslirp stand-in; a
   * caller built against 1.0, whose struct ends before this field, gets
   * it too). "": no policy, and NETSTACK_POLICY is not read. Without a
   * policy the guest reaches everything but the cloud metadata addresses.
   * A file that cannot be read or does not parse fails netstack_new(),
   * with an error that names the file and the line ("NETSTACK_POLICY
   * /etc/p: line 3: ..."): never an open network when a policy was asked
   * for. The file is read once; netstack_set_policy_file() reads one
   * again. */
  const char *policy_file;
} netstack_config;

/* Fills `cfg` with the defaults and its size. */
NETSTACK_API void netstack_config_init(netstack_config *cfg);

/* Builds a backend. NULL on error, with the reason in `err` (always
 * NUL-terminated when errlen > 0). */
NETSTACK_API netstack_t *netstack_new(const netstack_config *cfg, char *err,
                         size_t errlen);
/* Closes every flow and socket and frees everything. NULL is allowed.
 * Not from inside a callback of `ns`, nor while netstack_run() runs. */
NETSTACK_API void netstack_free(netstack_t *ns);

/* Why the most recent failing call on `ns` failed; "" if none has.
 * Valid until the next call on `ns`. */
NETSTACK_API const char *netstack_last_error(const netstack_t *ns);

/* The library's own loop: runs until netstack_stop(). 0, or -errno. */
NETSTACK_API int netstack_run(netstack_t *ns);
/* Makes netstack_run() return after its current turn, or at once if it
 * is not running yet. Safe from any thread and from a signal handler (it
 * writes to an eventfd). */
NETSTACK_API void netstack_stop(netstack_t *ns);

/* The caller's loop. */
NETSTACK_API int netstack_fd(const netstack_t *ns);
/* CLOCK_MONOTONIC ns of the next timed work; 0: at once; INT64_MAX:
 * none. */
NETSTACK_API int64_t netstack_next_deadline_ns(const netstack_t *ns);
/* One turn, without blocking. 0, or -errno (-EBUSY from inside a
 * callback of this netstack_t). */
NETSTACK_API int netstack_poll(netstack_t *ns);

/* Callback link: one Ethernet frame from the guest, copied (the buffer
 * is free again on return). 0, or -EINVAL when this is not a callback
 * link. A frame the stack cannot use (runt, larger than mtu + 18) is
 * dropped and counted (link.rx_dropped), not refused.
 * The frame is handled at the next turn: netstack_next_deadline_ns()
 * returns 0 while frames wait, so call netstack_poll() after a batch of
 * input. Once 64 frames wait, netstack_input() runs the turn itself, so
 * send_frame may be called from inside. */
NETSTACK_API int netstack_input(netstack_t *ns, const void *frame, size_t len);

/* Host -> guest forwards, as netstackd's -t and -u take them:
 * "[BIND_ADDR/]HOST_PORT[-END][:GUEST_PORT[-END]]", for example "8080",
 * "127.0.0.1/8080:80", "[::1]/2222:22", "5000-5009". Without BIND_ADDR
 * both families listen. proto is NETSTACK_TCP or NETSTACK_UDP. On
 * success *id names the forward (id may be NULL). Errors: -EINVAL (a bad
 * spec or proto), -EADDRINUSE (a port is taken: none of the spec's
 * listeners stay open), -EACCES (a port below 1024 without the right).
 * A forward reaches the guest's DHCP lease (lease4) through the stack.
 * Removing one closes its listeners; its connections run to their end.
 * -ENOENT for an unknown id. */
NETSTACK_API int netstack_forward_add(netstack_t *ns, int proto, const char *spec,
                         uint64_t *id);
NETSTACK_API int netstack_forward_remove(netstack_t *ns, uint64_t id);

/* Every counter, one "name value\n" line each, NUL-terminated. Returns
 * the length the whole text needs (without the NUL); writes at most
 * len bytes. */
NETSTACK_API size_t netstack_counters(const netstack_t *ns, char *buf, size_t len);
/* One counter by name ("backend.tcp_flows_opened", "link.rx_frames");
 * 0, or -ENOENT if there is none. */
NETSTACK_API int netstack_counter(const netstack_t *ns, const char *name,
                     uint64_t *value);

/* 1.1: replaces the egress policy with the file at `path` (NULL or "":
 * no policy, as without policy_file and NETSTACK_POLICY), read now. Every
 * open outbound flow is judged again: a TCP flow the new policy denies is
 * reset (an RST to the guest), a UDP or ping flow is closed; the others
 * are not touched. *reset (may be NULL) gets how many ended. A file that
 * cannot be read or does not parse returns -EINVAL (or the open's -errno)
 * and leaves the policy in force; netstack_last_error() names the file
 * and the line. Not from inside a callback (-EBUSY). */
NETSTACK_API int netstack_set_policy_file(netstack_t *ns, const char *path,
                                          uint64_t *reset);

/* "1.1.0" */
NETSTACK_API const char *netstack_version(void);

#ifdef __cplusplus
}
#endif

#endif /* NETSTACK_CAPI_NETSTACK_H_ */
