/* libslirp 4.7's ABI, as netstack's libslirp.so.0 provides it.
 *
 * This is our own statement of the interface that QEMU's `-netdev user`
 * and slirp4netns compile against (Debian 12's libslirp-dev 4.7.0). A
 * program built against libslirp's header runs on netstack's
 * libslirp.so.0 unchanged, so every type here must have libslirp's layout
 * to the byte: the structs' offsets are checked below against the table in
 * integrations.md 2c/2d (x86-64).
 *
 * What the library does with each field and call, and what it does not
 * do (guestfwd, TFTP, migration with libslirp), is in docs/SLIRP.md.
 *
 * Threads: a Slirp is used by one thread at a time, as libslirp's. Two
 * Slirp in one process are independent: nothing is global.
 */
#ifndef NETSTACK_SLIRP_LIBSLIRP_H_
#define NETSTACK_SLIRP_LIBSLIRP_H_

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct Slirp Slirp;

/* Events for SlirpAddPollCb and from SlirpGetREventsCb. */
enum {
  SLIRP_POLL_IN = 1 << 0,
  SLIRP_POLL_OUT = 1 << 1,
  SLIRP_POLL_PRI = 1 << 2,
  SLIRP_POLL_ERR = 1 << 3,
  SLIRP_POLL_HUP = 1 << 4,
};

typedef ssize_t (*SlirpReadCb)(void *buf, size_t len, void *opaque);
typedef ssize_t (*SlirpWriteCb)(const void *buf, size_t len, void *opaque);
typedef void (*SlirpTimerCb)(void *opaque);
/* Adds `fd` to the caller's poll set; returns its index there (any
 * non-negative number: QEMU's array is shared with other users). */
typedef int (*SlirpAddPollCb)(int fd, int events, void *opaque);
/* The revents of the entry `idx` that SlirpAddPollCb returned. */
typedef int (*SlirpGetREventsCb)(int idx, void *opaque);

typedef enum SlirpTimerId {
  SLIRP_TIMER_RA,
  SLIRP_TIMER_NUM,
} SlirpTimerId;

/* The caller's side. Fields after `notify` are read only from callers
 * whose SlirpConfig.version is 4 or more. */
typedef struct SlirpCb {
  /* One Ethernet frame to the guest; may be called from inside
   * slirp_input(). A negative return counts the frame as dropped. */
  SlirpWriteCb send_packet;
  /* A message about something the caller or the guest got wrong. */
  void (*guest_error)(const char *msg, void *opaque);
  int64_t (*clock_get_ns)(void *opaque);
  void *(*timer_new)(SlirpTimerCb cb, void *cb_opaque, void *opaque);
  void (*timer_free)(void *timer, void *opaque);
  void (*timer_mod)(void *timer, int64_t expire_time_ms, void *opaque);
  void (*register_poll_fd)(int fd, void *opaque);
  void (*unregister_poll_fd)(int fd, void *opaque);
  void (*notify)(void *opaque);
  /* Version 4. */
  void (*init_completed)(Slirp *slirp, void *opaque);
  void *(*timer_new_opaque)(SlirpTimerId id, void *cb_opaque, void *opaque);
} SlirpCb;

#define SLIRP_CONFIG_VERSION_MIN 1
#define SLIRP_CONFIG_VERSION_MAX 4

/* `version` says which groups below the caller filled; nothing past its
 * group is read. */
typedef struct SlirpConfig {
  uint32_t version;
  /* Version 1. */
  int restricted;
  bool in_enabled;
  struct in_addr vnetwork;
  struct in_addr vnetmask;
  struct in_addr vhost;
  bool in6_enabled;
  struct in6_addr vprefix_addr6;
  uint8_t vprefix_len;
  struct in6_addr vhost6;
  const char *vhostname;
  const char *tftp_server_name;
  const char *tftp_path;
  const char *bootfile;
  struct in_addr vdhcp_start;
  struct in_addr vnameserver;
  struct in6_addr vnameserver6;
  const char **vdnssearch;
  const char *vdomainname;
  size_t if_mtu; /* 0: 1500 */
  size_t if_mru; /* 0: 1500 */
  bool disable_host_loopback;
  bool enable_emu;
  /* Version 2. */
  struct sockaddr_in *outbound_addr;
  struct sockaddr_in6 *outbound_addr6;
  /* Version 3. */
  bool disable_dns;
  /* Version 4. */
  bool disable_dhcp;
} SlirpConfig;

#if defined(__x86_64__)
#ifdef __cplusplus
#define NETSTACK_SLIRP_ASSERT(c, m) static_assert(c, m)
#else
#define NETSTACK_SLIRP_ASSERT(c, m) _Static_assert(c, m)
#endif
#define NETSTACK_SLIRP_AT(T, f, off) \
  NETSTACK_SLIRP_ASSERT(offsetof(T, f) == (off), #T "." #f " at " #off)
NETSTACK_SLIRP_AT(SlirpConfig, version, 0);
NETSTACK_SLIRP_AT(SlirpConfig, restricted, 4);
NETSTACK_SLIRP_AT(SlirpConfig, in_enabled, 8);
NETSTACK_SLIRP_AT(SlirpConfig, vnetwork, 12);
NETSTACK_SLIRP_AT(SlirpConfig, vnetmask, 16);
NETSTACK_SLIRP_AT(SlirpConfig, vhost, 20);
NETSTACK_SLIRP_AT(SlirpConfig, in6_enabled, 24);
NETSTACK_SLIRP_AT(SlirpConfig, vprefix_addr6, 28);
NETSTACK_SLIRP_AT(SlirpConfig, vprefix_len, 44);
NETSTACK_SLIRP_AT(SlirpConfig, vhost6, 48);
NETSTACK_SLIRP_AT(SlirpConfig, vhostname, 64);
NETSTACK_SLIRP_AT(SlirpConfig, tftp_server_name, 72);
NETSTACK_SLIRP_AT(SlirpConfig, tftp_path, 80);
NETSTACK_SLIRP_AT(SlirpConfig, bootfile, 88);
NETSTACK_SLIRP_AT(SlirpConfig, vdhcp_start, 96);
NETSTACK_SLIRP_AT(SlirpConfig, vnameserver, 100);
NETSTACK_SLIRP_AT(SlirpConfig, vnameserver6, 104);
NETSTACK_SLIRP_AT(SlirpConfig, vdnssearch, 120);
NETSTACK_SLIRP_AT(SlirpConfig, vdomainname, 128);
NETSTACK_SLIRP_AT(SlirpConfig, if_mtu, 136);
NETSTACK_SLIRP_AT(SlirpConfig, if_mru, 144);
NETSTACK_SLIRP_AT(SlirpConfig, disable_host_loopback, 152);
NETSTACK_SLIRP_AT(SlirpConfig, enable_emu, 153);
NETSTACK_SLIRP_AT(SlirpConfig, outbound_addr, 160);
NETSTACK_SLIRP_AT(SlirpConfig, outbound_addr6, 168);
NETSTACK_SLIRP_AT(SlirpConfig, disable_dns, 176);
NETSTACK_SLIRP_AT(SlirpConfig, disable_dhcp, 177);
NETSTACK_SLIRP_ASSERT(sizeof(SlirpConfig) == 184, "SlirpConfig is 184 bytes");
NETSTACK_SLIRP_AT(SlirpCb, send_packet, 0);
NETSTACK_SLIRP_AT(SlirpCb, guest_error, 8);
NETSTACK_SLIRP_AT(SlirpCb, clock_get_ns, 16);
NETSTACK_SLIRP_AT(SlirpCb, timer_new, 24);
NETSTACK_SLIRP_AT(SlirpCb, timer_free, 32);
NETSTACK_SLIRP_AT(SlirpCb, timer_mod, 40);
NETSTACK_SLIRP_AT(SlirpCb, register_poll_fd, 48);
NETSTACK_SLIRP_AT(SlirpCb, unregister_poll_fd, 56);
NETSTACK_SLIRP_AT(SlirpCb, notify, 64);
NETSTACK_SLIRP_AT(SlirpCb, init_completed, 72);
NETSTACK_SLIRP_AT(SlirpCb, timer_new_opaque, 80);
#undef NETSTACK_SLIRP_AT
#undef NETSTACK_SLIRP_ASSERT
#endif /* __x86_64__ */

/* Creation and teardown. slirp_new() returns NULL for a NULL or
 * out-of-range config (reported through cb->guest_error when there is
 * one) and when the network cannot be built (the reason likewise).
 * slirp_init() is the version-1 config as arguments. */
Slirp *slirp_new(const SlirpConfig *cfg, const SlirpCb *callbacks,
                 void *opaque);
Slirp *slirp_init(int restricted, bool in_enabled, struct in_addr vnetwork,
                  struct in_addr vnetmask, struct in_addr vhost,
                  bool in6_enabled, struct in6_addr vprefix_addr6,
                  uint8_t vprefix_len, struct in6_addr vhost6,
                  const char *vhostname, const char *tftp_server_name,
                  const char *tftp_path, const char *bootfile,
                  struct in_addr vdhcp_start, struct in_addr vnameserver,
                  struct in6_addr vnameserver6, const char **vdnssearch,
                  const char *vdomainname, const SlirpCb *callbacks,
                  void *opaque);
void slirp_cleanup(Slirp *slirp);

/* The caller's loop. fill adds the fd(s) to watch through add_poll and
 * lowers *timeout (ms) to the library's next deadline; poll then runs
 * the library's turn. With select_error set, poll never calls
 * get_revents. */
void slirp_pollfds_fill(Slirp *slirp, uint32_t *timeout,
                        SlirpAddPollCb add_poll, void *opaque);
void slirp_pollfds_poll(Slirp *slirp, int select_error,
                        SlirpGetREventsCb get_revents, void *opaque);

/* One Ethernet frame from the guest. */
void slirp_input(Slirp *slirp, const uint8_t *pkt, int pkt_len);
/* A timer made through timer_new_opaque expired (this library makes
 * none, so this does nothing). */
void slirp_handle_timer(Slirp *slirp, SlirpTimerId id, void *cb_opaque);

/* Host -> guest forwards. 0, or -1 (a bind that failed, an unknown
 * forward). guest_addr 0.0.0.0 is the DHCP lease. */
int slirp_add_hostfwd(Slirp *slirp, int is_udp, struct in_addr host_addr,
                      int host_port, struct in_addr guest_addr,
                      int guest_port);
int slirp_remove_hostfwd(Slirp *slirp, int is_udp, struct in_addr host_addr,
                         int host_port);

#define SLIRP_HOSTFWD_UDP 1
#define SLIRP_HOSTFWD_V6ONLY 2
int slirp_add_hostxfwd(Slirp *slirp, const struct sockaddr *haddr,
                       socklen_t haddrlen, const struct sockaddr *gaddr,
                       socklen_t gaddrlen, int flags);
int slirp_remove_hostxfwd(Slirp *slirp, const struct sockaddr *haddr,
                          socklen_t haddrlen, int flags);

/* Guest -> host services on a virtual address (QEMU's guestfwd= and
 * smb=). Not provided: they return -1 and say so through guest_error
 * (docs/SLIRP.md, "guestfwd"). */
int slirp_add_exec(Slirp *slirp, const char *cmdline,
                   struct in_addr *guest_addr, int guest_port);
int slirp_add_unix(Slirp *slirp, const char *unixsock,
                   struct in_addr *guest_addr, int guest_port);
int slirp_add_guestfwd(Slirp *slirp, SlirpWriteCb write_cb, void *opaque,
                       struct in_addr *guest_addr, int guest_port);
size_t slirp_socket_can_recv(Slirp *slirp, struct in_addr guest_addr,
                             int guest_port);
void slirp_socket_recv(Slirp *slirp, struct in_addr guest_addr,
                       int guest_port, const uint8_t *buf, int size);
int slirp_remove_guestfwd(Slirp *slirp, struct in_addr guest_addr,
                          int guest_port);

/* Text for QEMU's `info usernet`, from malloc() (free() or g_free()). */
char *slirp_connection_info(Slirp *slirp);
char *slirp_neighbor_info(Slirp *slirp);

/* Migration. The stream is ours, not libslirp's: see docs/SLIRP.md. */
void slirp_state_save(Slirp *s, SlirpWriteCb write_cb, void *opaque);
int slirp_state_version(void);
int slirp_state_load(Slirp *s, int version_id, SlirpReadCb read_cb,
                     void *opaque);

const char *slirp_version_string(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NETSTACK_SLIRP_LIBSLIRP_H_ */
