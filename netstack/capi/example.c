/* libnetstack's example: give a network namespace its network.
 *
 *   example NETNS_PATH TAP_NAME [DNS_UPSTREAM [FORWARD...]]
 *
 * Opens a TAP named TAP_NAME inside the namespace NETNS_PATH (such as
 * /var/run/netns/guest or /proc/PID/ns/net), and serves it from this
 * process's own namespace: the guest gets DHCP and router advertisements
 * for 10.0.2.0/24 and fd00::/64, a gateway at 10.0.2.2 and DNS at
 * 10.0.2.3, and every connection it opens becomes a socket of this
 * process. The guest's side of the TAP is the guest's to bring up and
 * configure (DHCP, or addresses by hand: docs/EMBEDDING.md). Each
 * FORWARD brings host connections to the guest: a TCP spec
 * ("127.0.0.1/8080:80"), or "udp:" and a UDP one ("udp:5353:53").
 * Runs until SIGINT or SIGTERM, then prints its counters.
 *
 *   cc example.c $(pkg-config --cflags --libs netstack) -o example
 *
 * Needs CAP_SYS_ADMIN (setns) and CAP_NET_ADMIN in the guest's namespace
 * (the TAP). docs/EMBEDDING.md shows the part between the [example]
 * lines. */
// [example]
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <netstack.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

/* The TAP, opened inside `netns_path` and returned to this namespace (an
 * fd keeps its device, wherever the process goes). IFF_VNET_HDR lets the
 * library use host GSO: 64 KiB segments both ways. -1 on error. */
static int open_tap_in(const char *netns_path, const char *name) {
  int self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  int guest = open(netns_path, O_RDONLY | O_CLOEXEC);
  int tap = -1;
  if (self < 0 || guest < 0) {
    perror(self < 0 ? "/proc/self/ns/net" : netns_path);
    goto out;
  }
  if (setns(guest, CLONE_NEWNET) != 0) {
    perror("setns (guest)");
    goto out;
  }
  tap = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
  if (tap >= 0) {
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", name);
    if (ioctl(tap, TUNSETIFF, &ifr) != 0) {
      perror("TUNSETIFF");
      close(tap);
      tap = -1;
    }
  } else {
    perror("/dev/net/tun");
  }
  if (setns(self, CLONE_NEWNET) != 0) {
    /* Still in the guest's namespace: serving from here would give the
     * guest nothing it does not have. */
    perror("setns (back)");
    if (tap >= 0) close(tap);
    tap = -1;
  }
out:
  if (self >= 0) close(self);
  if (guest >= 0) close(guest);
  return tap;
}

static netstack_t *the_netstack;

static void on_signal(int sig) {
  (void)sig;
  netstack_stop(the_netstack); /* async-signal-safe */
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr,
            "usage: %s NETNS_PATH TAP_NAME [DNS_UPSTREAM [[udp:]SPEC...]]\n",
            argv[0]);
    return 2;
  }
  int tap = open_tap_in(argv[1], argv[2]);
  if (tap < 0) return 1;

  netstack_config cfg;
  netstack_config_init(&cfg);
  cfg.link_type = NETSTACK_LINK_TAP;
  cfg.link_fd = tap; /* the library's from here on */
  if (argc > 3) cfg.dns_upstreams = argv[3]; /* else /etc/resolv.conf's */
  char err[256];
  netstack_t *ns = netstack_new(&cfg, err, sizeof err);
  if (ns == NULL) {
    fprintf(stderr, "netstack_new: %s\n", err);
    return 1;
  }
  for (int i = 4; i < argc; ++i) {
    const int udp = strncmp(argv[i], "udp:", 4) == 0;
    uint64_t id;
    int rc = netstack_forward_add(ns, udp ? NETSTACK_UDP : NETSTACK_TCP,
                                  udp ? argv[i] + 4 : argv[i], &id);
    if (rc != 0) {
      fprintf(stderr, "forward %s: %s (%s)\n", argv[i],
              netstack_last_error(ns), strerror(-rc));
      netstack_free(ns);
      return 1;
    }
  }

  the_netstack = ns;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  printf("netstack %s: serving %s in %s\n", netstack_version(), argv[2],
         argv[1]);
  fflush(stdout);

  int rc = netstack_run(ns);
  if (rc != 0) fprintf(stderr, "netstack_run: %s\n", netstack_last_error(ns));

  /* The counters: ask for the length, then the text. */
  size_t len = netstack_counters(ns, NULL, 0);
  char *text = malloc(len + 1);
  if (text != NULL) {
    netstack_counters(ns, text, len + 1);
    fputs(text, stdout);
    free(text);
  }
  netstack_free(ns);
  return rc == 0 ? 0 : 1;
}
// [example]
