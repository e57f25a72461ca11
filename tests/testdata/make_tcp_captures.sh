#!/usr/bin/env bash
# Regenerates the TCP fixtures in this directory: the Linux kernel in a
# network namespace talking to netstackd over a veth pair, captured by
# netstackd's own --pcap on its link.
#
#   ns K (kernel)    veth0 02:00:00:00:00:01  10.9.1.1/24   (python3 client)
#   ns S (netstackd) veth0 02:00:00:00:00:02  10.9.1.2/24   netstackd --packet
#                                                           echo :7 discard :9
#
#   tcp_handshake_transfer.pcap  the kernel connects from port 40011 to echo
#       (:7), sends 40000 bytes, reads the 40000 echoed bytes, shuts down
#       its side and reads to EOF: ARP, handshake, transfer both ways, FINs.
#   tcp_lossy_transfer.pcap  the kernel connects from port 40012 to discard
#       (:9) and sends 1 MiB, then shuts down and reads to EOF, while
#       netstackd runs with --loss=$LOSS --fault_ingress --seed=$SEED: its
#       fault injector drops frames in BOTH directions (netstackd has no
#       ingress-only switch; --fault_ingress adds ingress to egress).
#
# Next to each X.pcap this writes X.tshark.tsv (tshark's per-frame fields,
# the same columns as make_captures.sh writes) and X.netstackd.txt: the
# netstackd command line and the counters it printed at exit (stack, TCP,
# services, fault injector), which the replay test checks against its own.
#
# Where --pcap sits: netstackd stacks its link as
#     stack -> fault injector -> pcap sniffer -> AF_PACKET socket
# so the capture is the WIRE view: an inbound frame is recorded BEFORE the
# injector may drop it (the capture holds frames the stack never saw), and
# an outbound frame is recorded AFTER the injector (a frame the stack sent
# but the injector dropped is not in the capture). The injector is
# deterministic (its loss decisions are one random stream per direction
# from --seed, drawn once per frame in arrival order), so
# tests/tcp_replay_test.cc puts the same injector with the same seed under
# the replayed stack and so knows which frames were dropped; it checks the
# drop counts against the fault.* counters in X.netstackd.txt.
#
# Usage (as root; needs iproute2, ethtool, python3, tshark, and bazel to
# build netstackd unless NETSTACKD points at a binary):
#   tests/testdata/make_tcp_captures.sh [OUTPUT_DIR]
# OUTPUT_DIR defaults to this directory. KEEP_WORK=1 keeps the temporary
# directory (raw captures, netstackd logs). LOSS and SEED override the
# lossy capture's fault settings (defaults 0.02 and 8).
#
# Reproducibility: MACs, addresses, ports, byte counts, the payload bytes
# (a fixed pattern), the fault seed and netstackd's pools/options are fixed.
# ISNs (netstackd keys them from getrandom, the kernel from its secret and
# clock), TCP timestamps and capture times change every run, and the frame
# sequence of the lossy transfer (so which frames the seeded injector hits)
# depends on the kernel's timing. The replay test works from whatever a run
# produced.
#
# No traffic leaves the machine: every address used lives inside the two
# namespaces this script creates, and they have no other links.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT_DIR="$(mkdir -p "${1:-$SCRIPT_DIR}" && cd "${1:-$SCRIPT_DIR}" && pwd)"
REPO="$(cd "$SCRIPT_DIR/../.." && pwd)"
readonly SCRIPT_DIR OUT_DIR REPO

readonly NS_K="ns-tcpcap-$$-k"
readonly NS_S="ns-tcpcap-$$-s"
readonly MAC_K="02:00:00:00:00:01"
readonly MAC_S="02:00:00:00:00:02"
readonly IP_K="10.9.1.1" IP_S="10.9.1.2"
readonly IFACE="veth0"
readonly ECHO_PORT=7 DISCARD_PORT=9
readonly ECHO_CLIENT_PORT=40011 DISCARD_CLIENT_PORT=40012
readonly ECHO_BYTES=40000 DISCARD_BYTES=1048576
readonly LOSS="${LOSS:-0.02}" SEED="${SEED:-8}"

for tool in ip ethtool python3 tshark sysctl; do
  command -v "$tool" >/dev/null || { echo "missing tool: $tool" >&2; exit 1; }
done
if [[ $EUID -ne 0 ]]; then
  echo "must run as root (creates network namespaces)" >&2
  exit 1
fi
if [[ -z "${NETSTACKD:-}" ]]; then
  (cd "$REPO" && bazel build //tools/netstackd 2>&1 | grep -v linux-sandbox | tail -1)
  NETSTACKD="$REPO/bazel-bin/tools/netstackd/netstackd"
fi
[[ -x "$NETSTACKD" ]] || { echo "no netstackd at $NETSTACKD" >&2; exit 1; }
readonly NETSTACKD

WORK="$(mktemp -d /tmp/make_tcp_captures.XXXXXX)"
ND_PID=""

cleanup() {
  local rc=$?
  set +e
  if [[ -n "$ND_PID" ]]; then
    kill -TERM "$ND_PID" 2>/dev/null
    wait "$ND_PID" 2>/dev/null
  fi
  ip netns del "$NS_K" 2>/dev/null
  ip netns del "$NS_S" 2>/dev/null
  if [[ -n "${KEEP_WORK:-}" ]]; then
    echo "kept $WORK" >&2
  else
    rm -rf "$WORK"
  fi
  if [[ $rc -ne 0 ]]; then
    echo "make_tcp_captures.sh: FAILED (exit $rc); namespaces removed" >&2
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

in_k() { ip netns exec "$NS_K" "$@"; }

# --- Namespaces and the veth pair ------------------------------------------

ip netns add "$NS_K"
ip netns add "$NS_S"
ip link add "vtk$$" address "$MAC_K" netns "$NS_K" type veth \
  peer name "vts$$" address "$MAC_S" netns "$NS_S"
ip -n "$NS_K" link set "vtk$$" name "$IFACE"
ip -n "$NS_S" link set "vts$$" name "$IFACE"
for ns in "$NS_K" "$NS_S"; do
  # IPv4 only and quiet: no IPv6 on the link at all (no DAD, RS or MLD).
  ip netns exec "$ns" sysctl -qw "net.ipv6.conf.$IFACE.disable_ipv6=1"
  # Real checksums and MTU-sized frames (see README.md): no TX checksum
  # offload (it also disables SG/TSO), no GSO, no GRO, on both ends.
  ip netns exec "$ns" ethtool -K "$IFACE" tx off rx off >/dev/null
  ip netns exec "$ns" ethtool -K "$IFACE" tso off gso off gro off \
    >/dev/null 2>&1 || true
  ip -n "$ns" link set lo up
  ip -n "$ns" link set "$IFACE" up
done
# The kernel's end only; the stack's end belongs to netstackd (AF_PACKET)
# and has no address.
ip -n "$NS_K" addr add "$IP_K/24" dev "$IFACE"

# --- netstackd ----------------------------------------------------------------

ND_ARGS=()
# start_netstackd PCAP LOG EXTRA_FLAGS...
start_netstackd() {
  local pcap="$1" log="$2"
  shift 2
  ND_ARGS=(--packet "$IFACE" --netns "$NS_S" --mac "$MAC_S"
           --addr "$IP_S/24" --echo-port "$ECHO_PORT"
           --discard-port "$DISCARD_PORT" --pcap "$pcap" "$@")
  "$NETSTACKD" "${ND_ARGS[@]}" </dev/null >"$log" 2>&1 &
  ND_PID=$!
  for _ in $(seq 200); do
    grep -q "running on" "$log" 2>/dev/null && return 0
    kill -0 "$ND_PID" 2>/dev/null || break
    sleep 0.05
  done
  cat "$log" >&2
  echo "netstackd did not start" >&2
  return 1
}

# stop_netstackd LOG OUT_COUNTERS: SIGTERM (flushes the pcap), then keeps
# the command line and the exit counters.
stop_netstackd() {
  local log="$1" out="$2"
  kill -TERM "$ND_PID"
  wait "$ND_PID" || { cat "$log" >&2; echo "netstackd failed" >&2; return 1; }
  ND_PID=""
  {
    echo "# netstackd ${ND_ARGS[*]}"
    echo "# counters printed at exit:"
    sed -n '/counters (exit):/,$p' "$log" | tail -n +2 |
      grep -E '^[a-z0-9_.]+ [0-9]+$|^[a-z0-9_.]+: ' | grep -v '^netstackd:'
  } >"$out"
}

# The client, in ns K: connect from a fixed port, send COUNT pattern bytes
# (byte i is (i * 7 + i / 251) mod 256), optionally read them back (echo),
# then shut down the sending side and read to EOF, so the capture holds the
# whole teardown. Exits non-zero on a short or wrong echo or a timeout.
readonly CLIENT='
import socket, sys
host, port, lport, count, echo = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "echo"
data = bytes(((i * 7 + i // 251) & 0xff) for i in range(count))
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.settimeout(60)
s.bind(("0.0.0.0", lport))
s.connect((host, port))
s.sendall(data)
if echo:
    got = bytearray()
    while len(got) < count:
        chunk = s.recv(65536)
        if not chunk:
            sys.exit("echo ended after %d bytes" % len(got))
        got += chunk
    if bytes(got) != data:
        sys.exit("echo differs")
s.shutdown(socket.SHUT_WR)
extra = 0
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    extra += len(chunk)
s.close()
if extra:
    sys.exit("%d unexpected bytes after the echo" % extra)
'

# capture NAME PORT LOCAL_PORT BYTES MODE [NETSTACKD FAULT FLAGS...]
capture() {
  local name="$1" port="$2" lport="$3" bytes="$4" mode="$5"
  shift 5
  ip -n "$NS_K" -4 neigh flush dev "$IFACE"
  start_netstackd "$WORK/$name.pcap" "$WORK/$name.log" "$@"
  in_k python3 -c "$CLIENT" "$IP_S" "$port" "$lport" "$bytes" "$mode"
  sleep 0.5  # Let the last ACK reach netstackd.
  stop_netstackd "$WORK/$name.log" "$WORK/$name.netstackd.txt"
}

capture tcp_handshake_transfer "$ECHO_PORT" "$ECHO_CLIENT_PORT" \
  "$ECHO_BYTES" echo
capture tcp_lossy_transfer "$DISCARD_PORT" "$DISCARD_CLIENT_PORT" \
  "$DISCARD_BYTES" discard --loss="$LOSS" --fault_ingress --seed="$SEED"

# --- Expected values from tshark ---------------------------------------------

# The same columns as make_captures.sh (tests/pcap_fixture_test checks them).
readonly FIELDS=(
  frame.number eth.src eth.dst eth.type
  arp.opcode arp.src.proto_ipv4 arp.dst.proto_ipv4
  ip.src ip.dst ip.proto ipv6.src ipv6.dst ipv6.nxt
  tcp.srcport tcp.dstport tcp.seq_raw tcp.ack_raw tcp.flags
  tcp.window_size_value tcp.len udp.srcport udp.dstport
  icmp.type icmpv6.type tcp.checksum.status
)
readonly NAMES=(tcp_handshake_transfer tcp_lossy_transfer)

for name in "${NAMES[@]}"; do
  args=()
  for f in "${FIELDS[@]}"; do args+=(-e "$f"); done
  tshark -n -r "$WORK/$name.pcap" -o tcp.check_checksum:TRUE \
    -T fields -E header=y -E separator=/t -E occurrence=f "${args[@]}" \
    >"$WORK/$name.tshark.tsv" 2>/dev/null
done

# --- Sanity checks -------------------------------------------------------------

readonly CHECK_ALL=(-o ip.check_checksum:TRUE -o tcp.check_checksum:TRUE)
count() { tshark -n "${CHECK_ALL[@]}" -r "$WORK/$1" -Y "$2" 2>/dev/null | wc -l; }
require() {  # $1: pcap, $2: display filter, $3: what
  local n
  n="$(count "$1" "$2")"
  if [[ "$n" -eq 0 ]]; then
    echo "CHECK FAILED: $1 has no $3 ($2)" >&2
    exit 1
  fi
  printf '  %-28s %4d x %s\n' "$1" "$n" "$3"
}
counter() {  # $1: name, $2: counter
  awk -v c="$2" '$1 == c { print $2 }' "$WORK/$1.netstackd.txt"
}

echo "checks:"
for name in "${NAMES[@]}"; do
  pcap="$name.pcap"
  require "$pcap" "arp.opcode == 1" "ARP request"
  require "$pcap" "arp.opcode == 2" "ARP reply"
  require "$pcap" "tcp.flags == 0x002" "SYN"
  require "$pcap" "tcp.flags == 0x012" "SYN-ACK"
  require "$pcap" "tcp.len > 1000 && tcp.srcport >= 40000" "kernel data segment"
  require "$pcap" "tcp.flags.fin == 1 && tcp.srcport >= 40000" "kernel FIN"
  require "$pcap" "tcp.flags.fin == 1 && tcp.srcport < 40000" "netstack FIN"
  require "$pcap" "tcp.checksum.status == 1" "good TCP checksum"
  if [[ "$(count "$pcap" "ip.checksum.status == 0 || tcp.checksum.status != 1 ||
                         ipv6 || (eth.type != 0x0800 && eth.type != 0x0806)")" -ne 0 ]]; then
    echo "CHECK FAILED: $pcap has a bad checksum or non-IPv4/ARP noise" >&2
    exit 1
  fi
  if [[ "$(count "$pcap" "frame.len > 1514")" -ne 0 ]]; then
    echo "CHECK FAILED: $pcap has frames above the MTU (offloads on?)" >&2
    exit 1
  fi
  rows=$(($(wc -l <"$WORK/$name.tshark.tsv") - 1))
  frames="$(count "$pcap" "frame")"
  [[ "$rows" -eq "$frames" ]] || { echo "tsv rows != frames for $pcap" >&2; exit 1; }
  printf '  %-28s %4d frames\n' "$pcap" "$frames"
done
require tcp_handshake_transfer.pcap "tcp.len > 1000 && tcp.srcport == $ECHO_PORT" \
  "echoed data segment"
require tcp_lossy_transfer.pcap "tcp.options.sack_le && tcp.srcport == $DISCARD_PORT" \
  "netstack ACK with SACK blocks"
require tcp_lossy_transfer.pcap "tcp.analysis.retransmission || tcp.analysis.fast_retransmission" \
  "kernel retransmission"
dropped_in="$(counter tcp_lossy_transfer fault.ingress.dropped)"
dropped_out="$(counter tcp_lossy_transfer fault.egress.dropped)"
if [[ -z "$dropped_in" || "$dropped_in" -eq 0 ]]; then
  echo "CHECK FAILED: the injector dropped no inbound frame" >&2
  exit 1
fi
echo "  tcp_lossy_transfer: injector dropped $dropped_in inbound, $dropped_out outbound frames"
size="$(stat -c %s "$WORK/tcp_handshake_transfer.pcap")"
if [[ "$size" -ge 200000 ]]; then
  echo "CHECK FAILED: tcp_handshake_transfer.pcap is $size bytes (>= 200 KB)" >&2
  exit 1
fi

for name in "${NAMES[@]}"; do
  for f in "$name.pcap" "$name.tshark.tsv" "$name.netstackd.txt"; do
    cp "$WORK/$f" "$OUT_DIR/"
    chmod 0644 "$OUT_DIR/$f"
  done
done
echo "wrote $OUT_DIR/{${NAMES[0]},${NAMES[1]}}.{pcap,tshark.tsv,netstackd.txt}"
