#!/usr/bin/env bash
# Regenerates the packet-capture fixtures in this directory from real Linux
# traffic between two network namespaces joined by a veth pair:
#
#   ns A (client)  veth0 02:00:00:00:00:01  10.9.0.1/24  fd00:9::1/64
#   ns B (server)  veth0 02:00:00:00:00:02  10.9.0.2/24  fd00:9::2/64
#
#   http_ipv4.pcap  curl http://10.9.0.2/file     (ARP, TCP handshake, GET,
#                                                  multi-segment data, FIN)
#   http_ipv6.pcap  curl http://[fd00:9::2]/file  (NDP NS/NA, same TCP flow)
#   icmp.pcap       ping -c 2 to 10.9.0.2 and fd00:9::2 (ARP, NDP, echoes)
#
# and, next to each X.pcap, X.tshark.tsv: tshark's per-frame field values,
# which tests use as the expected output of our decoders.
#
# Usage (as root, on a machine with iproute2, ethtool, nginx, curl, ping,
# dumpcap and tshark):   tests/testdata/make_captures.sh [OUTPUT_DIR]
# OUTPUT_DIR defaults to the directory holding this script. Set KEEP_WORK=1
# to keep the temporary directory (nginx config and logs, raw captures).
#
# No traffic leaves the machine: every address used lives inside the two
# namespaces this script creates, and the namespaces have no other links.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT_DIR="$(mkdir -p "${1:-$SCRIPT_DIR}" && cd "${1:-$SCRIPT_DIR}" && pwd)"
readonly SCRIPT_DIR OUT_DIR

readonly NS_A="ns-cap-$$-a"
readonly NS_B="ns-cap-$$-b"
readonly MAC_A="02:00:00:00:00:01"
readonly MAC_B="02:00:00:00:00:02"
readonly IP4_A="10.9.0.1" IP4_B="10.9.0.2"
readonly IP6_A="fd00:9::1" IP6_B="fd00:9::2"
readonly IFACE="veth0"  # Name of the veth end inside each namespace.
# Fixed client ports, so that reruns differ only in ISNs, TCP timestamps and
# capture times.
readonly CLIENT_PORT4=40001 CLIENT_PORT6=40002

for tool in ip ethtool nginx curl ping dumpcap tshark sysctl; do
  command -v "$tool" >/dev/null || { echo "missing tool: $tool" >&2; exit 1; }
done
if [[ $EUID -ne 0 ]]; then
  echo "must run as root (creates network namespaces)" >&2
  exit 1
fi

WORK="$(mktemp -d /tmp/make_captures.XXXXXX)"
# Background processes inside a namespace: `ip netns exec` forks and waits
# for its child, so $! is the `ip` process, not the daemon. Each one is
# tracked as "<real pid> <ip netns exec pid>": we signal the real process
# and then wait for the wrapper, which reaps it.
NGINX=""
DUMPCAP=""

cleanup() {
  local rc=$?
  set +e
  stop_bg "$DUMPCAP"
  stop_bg "$NGINX"
  # Deleting a namespace also deletes its veth end (and thereby the peer).
  ip netns del "$NS_A" 2>/dev/null
  ip netns del "$NS_B" 2>/dev/null
  if [[ -n "${KEEP_WORK:-}" ]]; then
    echo "kept $WORK" >&2
  else
    rm -rf "$WORK"
  fi
  if [[ $rc -ne 0 ]]; then
    echo "make_captures.sh: FAILED (exit $rc); namespaces removed" >&2
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

in_a() { ip netns exec "$NS_A" "$@"; }
in_b() { ip netns exec "$NS_B" "$@"; }

# start_bg NS LOG CMD...: runs CMD in namespace NS in the background with
# stdout/stderr to LOG; sets BG to "<real pid> <wrapper pid>".
start_bg() {
  local ns="$1" log="$2" pidfile="$WORK/bg.pid" real=""
  shift 2
  rm -f "$pidfile"
  # shellcheck disable=SC2016  # $$ and $@ are for the inner shell.
  ip netns exec "$ns" bash -c 'echo $$ >"$0"; exec "$@"' "$pidfile" "$@" \
    </dev/null >"$log" 2>&1 &
  local wrapper=$!
  for _ in $(seq 100); do
    [[ -s "$pidfile" ]] && real="$(<"$pidfile")" && break
    sleep 0.02
  done
  [[ -n "$real" ]] || { echo "could not start $1" >&2; return 1; }
  BG="$real $wrapper"
}

# stop_bg "<real pid> <wrapper pid>": SIGTERM and wait; no-op if empty.
stop_bg() {
  [[ -n "$1" ]] || return 0
  local real wrapper
  read -r real wrapper <<<"$1"
  kill -TERM "$real" 2>/dev/null || true
  wait "$wrapper" 2>/dev/null || true
}

# --- Namespaces and the veth pair ------------------------------------------

ip netns add "$NS_A"
ip netns add "$NS_B"
# Created directly inside the namespaces under unique names, then renamed.
ip link add "vca$$" address "$MAC_A" netns "$NS_A" type veth \
  peer name "vcb$$" address "$MAC_B" netns "$NS_B"
ip -n "$NS_A" link set "vca$$" name "$IFACE"
ip -n "$NS_B" link set "vcb$$" name "$IFACE"

for ns in "$NS_A" "$NS_B"; do
  # Keep the link quiet apart from the traffic we generate: no link-local
  # address (so no DAD for it and no router solicitations), no RAs.
  ip netns exec "$ns" sysctl -qw \
    "net.ipv6.conf.$IFACE.addr_gen_mode=1" \
    "net.ipv6.conf.$IFACE.accept_ra=0" \
    "net.ipv6.conf.$IFACE.router_solicitations=0"
  # Real checksums on the wire: with TX checksum offload on, veth hands the
  # tap (and the peer) CHECKSUM_PARTIAL packets whose TCP/UDP checksum field
  # only holds the pseudo-header sum. Turning TX checksumming off also turns
  # off SG/TSO; GSO/GRO are turned off too so that every captured frame is a
  # real MTU-sized frame, not a 64 KB super-packet.
  ip netns exec "$ns" ethtool -K "$IFACE" tx off rx off >/dev/null
  ip netns exec "$ns" ethtool -K "$IFACE" gso off gro off >/dev/null 2>&1 || true
  ip -n "$ns" link set lo up
done

ip -n "$NS_A" addr add "$IP4_A/24" dev "$IFACE"
ip -n "$NS_B" addr add "$IP4_B/24" dev "$IFACE"
ip -n "$NS_A" -6 addr add "$IP6_A/64" dev "$IFACE" nodad
ip -n "$NS_B" -6 addr add "$IP6_B/64" dev "$IFACE" nodad
ip -n "$NS_A" link set "$IFACE" up
ip -n "$NS_B" link set "$IFACE" up

# --- nginx in ns B ----------------------------------------------------------

mkdir -p "$WORK/www" "$WORK/nginx"
# 6000 bytes of deterministic text: 100 lines of exactly 60 bytes. With a
# 1500-byte MTU (MSS 1448 with TCP timestamps) the response needs 5 segments.
for i in $(seq -w 0 99); do
  printf 'netstack capture fixture line %s: 0123456789abcdefghijklmno\n' "$i"
done >"$WORK/www/file"
if [[ $(stat -c %s "$WORK/www/file") -ne 6000 ]]; then
  echo "generated file is not 6000 bytes" >&2
  exit 1
fi
chmod -R a+rX "$WORK"

cat >"$WORK/nginx/nginx.conf" <<EOF
# Single process running as root: no worker user, no /var paths.
daemon off;
master_process off;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log;
events { worker_connections 64; }
http {
  access_log $WORK/nginx/access.log;
  client_body_temp_path $WORK/nginx/body;
  proxy_temp_path $WORK/nginx/proxy;
  fastcgi_temp_path $WORK/nginx/fastcgi;
  uwsgi_temp_path $WORK/nginx/uwsgi;
  scgi_temp_path $WORK/nginx/scgi;
  default_type application/octet-stream;
  server_tokens off;
  gzip off;
  sendfile off;
  server {
    listen $IP4_B:80;
    listen [$IP6_B]:80;
    root $WORK/www;
  }
}
EOF

start_bg "$NS_B" "$WORK/nginx/stderr.log" \
  nginx -p "$WORK/nginx" -e "$WORK/nginx/error.log" -c "$WORK/nginx/nginx.conf"
NGINX="$BG"
for _ in $(seq 100); do
  if in_b bash -c "exec 3<>/dev/tcp/$IP4_B/80" 2>/dev/null &&
     in_b bash -c "exec 3<>/dev/tcp/$IP6_B/80" 2>/dev/null; then
    break
  fi
  if ! kill -0 "${NGINX%% *}" 2>/dev/null; then
    cat "$WORK/nginx/stderr.log" "$WORK/nginx/error.log" >&2
    exit 1
  fi
  sleep 0.05
done
# Those readiness probes went over B's loopback, never over the veth.

# Let the multicast listener reports triggered by adding the IPv6 addresses
# (solicited-node groups, sent twice within about a second) die down before
# any capture starts.
sleep 2

# --- Capturing ----------------------------------------------------------------

flush_neighbours() {
  local ns
  for ns in "$NS_A" "$NS_B"; do
    ip -n "$ns" -4 neigh flush dev "$IFACE"
    ip -n "$ns" -6 neigh flush dev "$IFACE"
  done
}

start_capture() {  # $1: output pcap path
  local out="$1"
  rm -f "$out" "$WORK/dumpcap.err"
  # -P: classic pcap (not pcapng); default snaplen is the maximum (262144);
  # veth has Ethernet (DLT_EN10MB) link type.
  start_bg "$NS_A" "$WORK/dumpcap.err" dumpcap -q -P -i "$IFACE" -w "$out"
  DUMPCAP="$BG"
  for _ in $(seq 200); do
    if grep -q "Capturing on" "$WORK/dumpcap.err" 2>/dev/null &&
       [[ -s "$out" ]]; then
      sleep 0.2
      return 0
    fi
    kill -0 "${DUMPCAP%% *}" 2>/dev/null || break
    sleep 0.05
  done
  cat "$WORK/dumpcap.err" >&2
  echo "dumpcap did not start" >&2
  return 1
}

stop_capture() {
  sleep 0.5  # Let the last ACK arrive.
  stop_bg "$DUMPCAP"
  DUMPCAP=""
  grep -q "Packets captured" "$WORK/dumpcap.err" ||
    { cat "$WORK/dumpcap.err" >&2; echo "dumpcap did not stop cleanly" >&2; return 1; }
}

capture() {  # $1: pcap name; rest: command to run in ns A
  local name="$1"
  shift
  flush_neighbours
  start_capture "$WORK/$name"
  in_a "$@"
  stop_capture
}

readonly CURL=(curl --silent --show-error --fail --noproxy '*' --max-time 10
               --output /dev/null)
capture http_ipv4.pcap "${CURL[@]}" --local-port "$CLIENT_PORT4" \
  "http://$IP4_B/file"
capture http_ipv6.pcap "${CURL[@]}" --local-port "$CLIENT_PORT6" \
  "http://[$IP6_B]/file"
capture icmp.pcap bash -c \
  "ping -4 -n -q -c 2 -i 0.2 -W 2 $IP4_B >/dev/null &&
   ping -6 -n -q -c 2 -i 0.2 -W 2 $IP6_B >/dev/null"

# --- Expected values from tshark ---------------------------------------------

readonly FIELDS=(
  frame.number eth.src eth.dst eth.type
  arp.opcode arp.src.proto_ipv4 arp.dst.proto_ipv4
  ip.src ip.dst ip.proto ipv6.src ipv6.dst ipv6.nxt
  tcp.srcport tcp.dstport tcp.seq_raw tcp.ack_raw tcp.flags
  tcp.window_size_value tcp.len udp.srcport udp.dstport
  icmp.type icmpv6.type tcp.checksum.status
)

for name in http_ipv4 http_ipv6 icmp; do
  args=()
  for f in "${FIELDS[@]}"; do args+=(-e "$f"); done
  tshark -n -r "$WORK/$name.pcap" -o tcp.check_checksum:TRUE \
    -T fields -E header=y -E separator=/t -E occurrence=f "${args[@]}" \
    >"$WORK/$name.tshark.tsv" 2>/dev/null
done

# --- Sanity checks -------------------------------------------------------------

readonly CHECK_ALL=(-o ip.check_checksum:TRUE -o tcp.check_checksum:TRUE
                   -o udp.check_checksum:TRUE)
count() { tshark -n "${CHECK_ALL[@]}" -r "$WORK/$1" -Y "$2" 2>/dev/null | wc -l; }
require() {  # $1: pcap, $2: display filter, $3: what
  local n
  n="$(count "$1" "$2")"
  if [[ "$n" -eq 0 ]]; then
    echo "CHECK FAILED: $1 has no $3 ($2)" >&2
    exit 1
  fi
  printf '  %-15s %3d x %s\n' "$1" "$n" "$3"
}

echo "checks:"
for pair in "http_ipv4.pcap ip" "http_ipv6.pcap ipv6"; do
  read -r pcap fam <<<"$pair"
  require "$pcap" "$fam && tcp.flags == 0x002" "SYN"
  require "$pcap" "$fam && tcp.flags == 0x012" "SYN-ACK"
  require "$pcap" "$fam && tcp.len > 1000 && tcp.srcport == 80" "data segment"
  require "$pcap" "$fam && tcp.flags.fin == 1 && tcp.srcport == 80" "server FIN"
  require "$pcap" "$fam && tcp.flags.fin == 1 && tcp.dstport == 80" "client FIN"
  require "$pcap" "http.request.method == \"GET\"" "GET"
  require "$pcap" "http.response.code == 200" "200 OK"
  require "$pcap" "tcp.checksum.status == 1" "good TCP checksum"
  if [[ "$(count "$pcap" "tcp.checksum.status != 1")" -ne 0 ]]; then
    echo "CHECK FAILED: $pcap has a TCP checksum that is not good" >&2
    exit 1
  fi
done
require http_ipv4.pcap "arp.opcode == 1" "ARP request"
require http_ipv4.pcap "arp.opcode == 2" "ARP reply"
require http_ipv6.pcap "icmpv6.type == 135" "NDP NS"
require http_ipv6.pcap "icmpv6.type == 136" "NDP NA"
require icmp.pcap "arp.opcode == 1" "ARP request"
require icmp.pcap "arp.opcode == 2" "ARP reply"
require icmp.pcap "icmpv6.type == 135" "NDP NS"
require icmp.pcap "icmpv6.type == 136" "NDP NA"
require icmp.pcap "icmp.type == 8" "ICMP echo request"
require icmp.pcap "icmp.type == 0" "ICMP echo reply"
require icmp.pcap "icmpv6.type == 128" "ICMPv6 echo request"
require icmp.pcap "icmpv6.type == 129" "ICMPv6 echo reply"
for pcap in http_ipv4.pcap http_ipv6.pcap icmp.pcap; do
  # Nothing but our own traffic: no MLD, no router solicitations.
  if [[ "$(count "$pcap" "icmpv6.type == 143 || icmpv6.type == 133")" -ne 0 ]]; then
    echo "CHECK FAILED: $pcap contains MLD or RS noise" >&2
    exit 1
  fi
  if [[ "$(count "$pcap" "ip.checksum.status == 0 || icmp.checksum.status == 0 ||
                          icmpv6.checksum.status == 0 || udp.checksum.status == 0 ||
                          tcp.checksum.status == 0")" -ne 0 ]]; then
    echo "CHECK FAILED: $pcap has a bad checksum" >&2
    exit 1
  fi
  rows=$(($(wc -l <"$WORK/${pcap%.pcap}.tshark.tsv") - 1))
  frames="$(count "$pcap" "frame")"
  [[ "$rows" -eq "$frames" ]] || { echo "tsv rows != frames for $pcap" >&2; exit 1; }
  printf '  %-15s %3d frames\n' "$pcap" "$frames"
done

for name in http_ipv4 http_ipv6 icmp; do
  cp "$WORK/$name.pcap" "$WORK/$name.tshark.tsv" "$OUT_DIR/"
  chmod 0644 "$OUT_DIR/$name.pcap" "$OUT_DIR/$name.tshark.tsv"
done
echo "wrote $OUT_DIR/{http_ipv4,http_ipv6,icmp}.{pcap,tshark.tsv}"
