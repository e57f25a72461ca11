#!/usr/bin/env bash
# TCP under loss: the figures of issue #12 ("Must show" 3, 7 and 8) in one
# command, so that the same run can be repeated before and after the fixes.
#
#   1. fault interop: an echo of FAULT_BYTES (1 GiB) there and back through
#      netstackd at 1% and 5% loss (faults both ways: --fault_ingress),
#      IPv4 and IPv6: time, sha256 of both directions, netstackd's
#      retransmits and RTOs (TcpInfo of the connection, SIGUSR1) and the
#      kernel's (nstat in the peer namespace, ss -ti of the socket). A
#      transfer that stops is a figure too: "hung after N bytes back" when
#      nothing moved for HANG seconds while netstack had nothing in flight
#      (no timer of ours can restart it), "stalled after N bytes" when
#      nothing moved for STALL seconds at all (both ends in RTO backoff).
#      Then the issue's reproduction: a 5 MB socat echo over IPv4 at
#      --loss 0.02 with seeds 1, 2, 3 (socat gives up after HANG idle s).
#   2. RTOs per 100 MiB (RTO_BYTES) at 5% loss each way: netstack as the
#      sender (HTTP download by the kernel) and as the receiver (the kernel
#      writes into discard); from netstack's TcpInfo and the kernel's nstat.
#   3. tcp_benchmark --modes=host --latency=2ms --client --server at 5% and
#      1% loss (the same injector both ways) and the receiver/sender ratio
#      of the same run.
#
# Usage (root; builds first, makes its own namespaces and removes them on
# any exit):
#   bench/tcp_loss_figures.sh [OUTDIR]
# Environment: FAULT_BYTES (1 GiB), RTO_BYTES (100 MiB), HANG (30 s),
# STALL (300 s), TIMEOUT (3600 s per transfer), PARTS ("fault repro rto
# bench": a subset runs only those), FAULT_CASES ("1:4 1:6 5:4 5:6", loss
# percent:IP version), KERNEL_CC (the kernel peer's congestion control,
# set per socket; default: the VM's), PCAP=1 (netstackd --pcap per transfer, kept in
# OUTDIR), NO_BUILD=1 to skip the bazel build.
# Every transfer gets fresh namespaces nstlf<pid>k (the kernel) and
# nstlf<pid>s (netstackd runs there, on its end of the veth pair): no late
# segment of one transfer reaches the next netstackd, and the kernel's
# counters start from zero. tcp_benchmark builds its own tcpb<pid>a/b.
# No traffic leaves the machine.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${1:-/tmp/tcp_loss_figures.$$}
FAULT_BYTES=${FAULT_BYTES:-$((1 << 30))}
RTO_BYTES=${RTO_BYTES:-$((100 << 20))}
STALL=${STALL:-300}
HANG=${HANG:-30}
KERNEL_CC=${KERNEL_CC:-}
PCAP=${PCAP:-}
TIMEOUT=${TIMEOUT:-3600}
PARTS=${PARTS:-"fault repro rto bench"}
FAULT_CASES=${FAULT_CASES:-"1:4 1:6 5:4 5:6"}
BIN=bazel-out/k8-optopt/bin
ND=$BIN/tools/netstackd/netstackd
TB=$BIN/tools/tcp_benchmark/tcp_benchmark
KNS=nstlf$$k
SNS=nstlf$$s
NET4=10.86.0
NET6=fd00:86
ND_PID=
mkdir -p "$OUT"
TABLE=$OUT/table.tsv
: >"$TABLE"

[[ $(id -u) == 0 ]] || { echo "needs root" >&2; exit 1; }

cleanup() {
  if [[ -n $ND_PID ]] && kill -0 "$ND_PID" 2>/dev/null; then
    kill -TERM "$ND_PID" 2>/dev/null || true
    sleep 1
    kill -KILL "$ND_PID" 2>/dev/null || true
  fi
  ip netns del "$KNS" 2>/dev/null || true
  ip netns del "$SNS" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ -z ${NO_BUILD:-} ]]; then
  bazel build --config=opt --jobs=2 //tools/netstackd //tools/tcp_benchmark \
    2>&1 | grep -v linux-sandbox >&2
fi
COMMIT=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- netstack tools || echo +dirty)

row() {  # figure value command
  printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$TABLE"
  printf '  %-44s %-40s\n' "$1" "$2" >&2
}

# The kernel's side of a transfer: everything runs in $KNS.
PEER=$OUT/peer.py
cat >"$PEER" <<'EOF'
"""One transfer from the kernel's side, then netstackd's TcpInfo of the
connection (SIGUSR1, while the connection is still open) and ss -ti of
ours. Prints one JSON object."""
import hashlib, json, os, random, re, select, signal, socket, struct
import subprocess, sys, threading, time
import fcntl

mode, host, port, nbytes, seed = sys.argv[1:6]
port, nbytes, seed = int(port), int(nbytes), int(seed)
nd_pid, nd_log, stall, timeout = int(sys.argv[6]), sys.argv[7], float(sys.argv[8]), float(sys.argv[9])
hang = float(sys.argv[10])
expect_sha = sys.argv[11] if len(sys.argv) > 11 else ""
fam = socket.AF_INET6 if ":" in host else socket.AF_INET
res = {"mode": mode, "host": host, "sent": 0, "received": 0}
last = [time.time()]

def gen(n, seed):
    r = random.Random(seed)
    while n > 0:
        c = r.randbytes(min(1 << 20, n))
        n -= len(c)
        yield c

def nd_dump(port):
    """netstackd's per-connection line for our port (SIGUSR1)."""
    marker = "counters (SIGUSR1):"
    before = open(nd_log, errors="replace").read().count(marker)
    os.kill(nd_pid, signal.SIGUSR1)
    for _ in range(100):
        time.sleep(0.05)
        text = open(nd_log, errors="replace").read()
        if text.count(marker) > before:
            time.sleep(0.2)
            text = open(nd_log, errors="replace").read()
            block = text.split(marker)[before + 1]
            lines = [l for l in block.splitlines() if ".connection " in l]
            return "\n".join(lines)
    return ""

def ss_line(lport):
    out = subprocess.run(["ss", "-tinH", "sport", "=", f":{lport}"],
                         capture_output=True, text=True).stdout
    return " ".join(out.split())

s = socket.socket(fam, socket.SOCK_STREAM)
if os.environ.get("KERNEL_CC"):  # the kernel's congestion control, per socket
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, os.environ["KERNEL_CC"].encode())
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
s.settimeout(10)
s.connect((host, port))
s.settimeout(None)
lport = s.getsockname()[1]
start = time.time()
sent_sha, recv_sha = hashlib.sha256(), hashlib.sha256()
done_writing = threading.Event()

def writer(data_iter):
    try:
        for c in data_iter:
            sent_sha.update(c)
            s.sendall(c)
            res["sent"] += len(c)
            last[0] = time.time()
    except OSError as e:
        res["write_error"] = str(e)
    done_writing.set()

want = 0
if mode == "echo":
    want = nbytes
    threading.Thread(target=writer, args=(gen(nbytes, seed),), daemon=True).start()
elif mode == "discard":
    threading.Thread(target=writer, args=(gen(nbytes, seed),), daemon=True).start()
elif mode == "http":
    s.sendall(b"GET /blob.bin HTTP/1.1\r\nHost: netstackd\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        b = s.recv(65536)
        if not b:
            break
        head += b
    hdr, _, body = head.partition(b"\r\n\r\n")
    want = int(re.search(rb"Content-Length: (\d+)", hdr, re.I).group(1))
    recv_sha.update(body)
    res["received"] = len(body)

status = "ok"
checked = [0.0]
while True:
    now = time.time()
    if mode == "discard":
        outq = struct.unpack("i", fcntl.ioctl(s, 0x5411, b"\0\0\0\0"))[0]  # TIOCOUTQ
        if done_writing.is_set() and outq == 0:
            break
        time.sleep(0.05)
        if outq:
            pass
    else:
        if res["received"] >= want:
            break
        r, _, _ = select.select([s], [], [], 0.5)
        if r:
            b = s.recv(1 << 20)
            if not b:
                status = "closed"
                break
            recv_sha.update(b)
            res["received"] += len(b)
            last[0] = time.time()
    idle = now - last[0]
    if idle > stall:
        status = "stalled"
        break
    if idle > hang and now - checked[0] > hang:
        # Nothing moved for `hang` s: a hang if netstack has nothing in
        # flight (no retransmission timer of ours will fire), else an RTO
        # backoff that may still recover: wait up to `stall`.
        checked[0] = now
        m = re.search(r"in_flight=(\d+)", nd_dump(port))
        if m and int(m.group(1)) == 0 and mode != "discard":
            status = "hung"
            break
    if now - start > timeout:
        status = "timeout"
        break
res["seconds"] = round(last[0] - start if status != "ok" else time.time() - start, 3)
res["status"] = status
res["netstackd"] = nd_dump(port)
res["ss"] = ss_line(lport)
if mode == "echo":
    res["sha_ok"] = (status == "ok" and res["received"] == res["sent"] == nbytes
                     and recv_sha.hexdigest() == sent_sha.hexdigest())
elif mode == "http":
    res["sha_ok"] = status == "ok" and recv_sha.hexdigest() == expect_sha
else:
    res["sha_ok"] = None  # discard: nothing comes back; TIOCOUTQ 0 = all acked
s.close()
print(json.dumps(res))
EOF

MKFILE=$OUT/mkfile.py
cat >"$MKFILE" <<'EOF'
import hashlib, random, sys
path, n, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
r, h = random.Random(seed), hashlib.sha256()
with open(path, "wb") as f:
    while n > 0:
        c = r.randbytes(min(1 << 20, n)); n -= len(c); h.update(c); f.write(c)
print(h.hexdigest())
EOF

topology() {
  teardown
  ip netns add "$KNS"
  ip netns add "$SNS"
  ip -n "$KNS" link set lo up
  ip -n "$SNS" link set lo up
  ip link add nst0 netns "$KNS" type veth peer name nst1 netns "$SNS"
  ip netns exec "$SNS" sysctl -q -w net.ipv6.conf.nst1.disable_ipv6=1
  ip -n "$SNS" link set nst1 up
  # netstackd receives at most MTU-sized frames without GSO: keep the
  # kernel's TSO/GSO super-frames off the veth (as the interop tests do).
  ip netns exec "$KNS" ethtool -K nst0 tso off gso off gro off >/dev/null
  ip -n "$KNS" addr add "$NET4.1/24" dev nst0
  ip -n "$KNS" addr add "$NET6::1/64" dev nst0 nodad
  ip -n "$KNS" link set nst0 up
  # Nothing may leave this machine: each namespace holds only lo and its
  # end of the pair, and neither has a default route.
  for ns in "$KNS" "$SNS"; do
    local links
    links=$(ip -n "$ns" -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 |
      sort | tr '\n' ' ')
    case "$links" in
      "lo nst0 " | "lo nst1 ") ;;
      *) echo "tcp_loss_figures: namespace $ns has links: $links" >&2; exit 1 ;;
    esac
    if ip -n "$ns" route show default | grep -q . ||
        ip -n "$ns" -6 route show default | grep -q .; then
      echo "tcp_loss_figures: namespace $ns has a default route" >&2; exit 1
    fi
  done
}
teardown() {
  ip netns del "$KNS" 2>/dev/null || true
  ip netns del "$SNS" 2>/dev/null || true
}

# kernel counters of the peer namespace: "TcpRetransSegs TcpExtTCPTimeouts
# TcpExtTCPLossProbes"
kstat() {
  ip netns exec "$KNS" awk '
    $1 != prev { split($0, names); prev = $1; next }
    { for (i = 2; i <= NF; i++) v[$1 names[i]] = $i; prev = "" }
    END { printf "%d %d %d\n", v["Tcp:RetransSegs"], v["TcpExt:TCPTimeouts"],
          v["TcpExt:TCPLossProbes"] }' /proc/net/snmp /proc/net/netstat
}

start_netstackd() {  # log, then netstackd flags
  local log=$1
  shift
  ND_CMD="ip netns exec $SNS $ND --packet nst1 --addr=$NET4.2/24 --addr6=$NET6::2/64 $*"
  ip netns exec "$SNS" "$ND" --packet nst1 --addr="$NET4.2/24" \
    --addr6="$NET6::2/64" "$@" >"$log" 2>&1 &
  ND_PID=$!
  for _ in $(seq 100); do
    grep -q "running on" "$log" && return 0
    kill -0 "$ND_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "netstackd did not start:" >&2
  cat "$log" >&2
  exit 1
}

stop_netstackd() {
  kill -TERM "$ND_PID" 2>/dev/null || true
  wait "$ND_PID" 2>/dev/null || true
  ND_PID=
}

# The exit counters of a netstackd log: one value.
nd_counter() {
  sed -n '/counters (exit):/,$p' "$1" | awk -v k="$2" '
    $1 == k { v = $2 }
    $1 ~ /:$/ { p = substr($1, 1, length($1) - 1)
      for (i = 2; i <= NF; i++) { split($i, kv, "="); if (p "." kv[1] == k) v = kv[2] } }
    END { print (v == "" ? 0 : v) }'
}

# TcpInfo field of the connection line (the JSON's "netstackd").
info_field() {  # json field
  python3 -c 'import json,re,sys
j = json.loads(sys.argv[1]); m = re.search(r"\b" + sys.argv[2] + r"=(\S+)", j["netstackd"])
print(m.group(1) if m else "?")' "$1" "$2"
}
jget() { python3 -c 'import json,sys; print(json.loads(sys.argv[1]).get(sys.argv[2]))' "$1" "$2"; }
ss_retrans() {  # "retrans:a/b" of ss -ti, b = the socket's total
  python3 -c 'import json,re,sys
m = re.search(r"retrans:\d+/(\d+)", json.loads(sys.argv[1])["ss"]); print(m.group(1) if m else 0)' "$1"
}

# One transfer through a fresh netstackd. Sets J (the peer's JSON), K0/K1
# (kernel counters before/after), LOG.
transfer() {  # name mode family port bytes seed loss [expect_sha]
  local name=$1 mode=$2 fam=$3 port=$4 bytes=$5 seed=$6 loss=$7 sha=${8:-}
  local host=$NET4.2
  [[ $fam == 6 ]] && host=$NET6::2
  LOG=$OUT/$name.netstackd.log
  local pcap=()
  [[ -n $PCAP ]] && pcap=(--pcap="$OUT/$name.pcap")
  topology
  start_netstackd "$LOG" --loss="$loss" --fault_ingress --seed="$seed" \
    --echo-port=7 --discard-port=9 --http-root="$OUT/www" --http-port=80 "${pcap[@]}"
  K0=$(kstat)
  PEER_CMD="ip netns exec $KNS python3 peer.py $mode $host $port $bytes"
  J=$(ip netns exec "$KNS" env KERNEL_CC="$KERNEL_CC" python3 "$PEER" "$mode" "$host" "$port" "$bytes" \
    "$seed" "$ND_PID" "$LOG" "$STALL" "$TIMEOUT" "$HANG" "$sha")
  K1=$(kstat)
  stop_netstackd
  teardown
  echo "$J" >"$OUT/$name.json"
  echo "kernel before/after (RetransSegs Timeouts LossProbes): $K0 / $K1" >>"$OUT/$name.json"
}
kdelta() {  # field index 1..3
  local a b
  a=$(echo "$K0" | cut -d' ' -f"$1")
  b=$(echo "$K1" | cut -d' ' -f"$1")
  echo $((b - a))
}

mkdir -p "$OUT/www"
echo "== commit $COMMIT, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), kernel cc ${KERNEL_CC:-$(sysctl -n net.ipv4.tcp_congestion_control) (VM default)}, out $OUT" >&2

if [[ " $PARTS " == *" fault "* ]]; then
  echo "== 1. fault interop: echo $FAULT_BYTES bytes there and back" >&2
  for c in $FAULT_CASES; do
    pct=${c%:*} fam=${c#*:}
    loss=$(printf '0.%02d' "$pct")
    name=echo-v$fam-loss$pct
    transfer "$name" echo "$fam" 7 "$FAULT_BYTES" 7 "$loss"
    st=$(jget "$J" status)
    cmd="netstackd --loss=$loss --fault_ingress --seed=7 --echo-port=7; peer: echo $FAULT_BYTES B over IPv$fam"
    if [[ $st == ok ]]; then
      v="$(jget "$J" seconds) s, sha $( [[ $(jget "$J" sha_ok) == True ]] && echo equal || echo DIFFERENT)"
    else
      idle=$HANG
      [[ $st == hung ]] || idle=$STALL
      v="$st after $(jget "$J" received) B back ($(jget "$J" sent) B sent; ${idle}s idle, netstack $(info_field "$J" in_flight) B in flight rto $(info_field "$J" rto))"
    fi
    row "$name time" "$v" "$cmd"
    row "$name netstack retransmits (exit counter)" "$(nd_counter "$LOG" tcp.retransmits)" "$cmd"
    row "$name netstack RTOs (TcpInfo timeouts)" "$(info_field "$J" timeouts)" "$cmd"
    row "$name netstack drop.fragmentation_needed" "$(nd_counter "$LOG" drop.fragmentation_needed)" "$cmd"
    row "$name kernel RetransSegs / RTOs / TLPs" "$(kdelta 1) / $(kdelta 2) / $(kdelta 3)" "$cmd"
    row "$name kernel ss -ti total retrans" "$(ss_retrans "$J")" "$cmd"
    row "$name injector dropped egress/ingress" "$(nd_counter "$LOG" fault.egress.dropped)/$(nd_counter "$LOG" fault.ingress.dropped)" "$cmd"
  done
fi

if [[ " $PARTS " == *" repro "* ]]; then
  echo "== 1b. the issue's reproduction: socat echo of 5 MB over IPv4, loss 0.02 both ways" >&2
  head -c 5000000 /dev/urandom >"$OUT/repro.in"
  for seed in 1 2 3; do
    LOG=$OUT/repro-seed$seed.netstackd.log
    topology
    start_netstackd "$LOG" --loss=0.02 --fault_ingress --seed=$seed --echo-port=7
    t0=$(date +%s.%N)
    ip netns exec "$KNS" timeout 300 socat -b 131072 -T "$HANG" STDIO "TCP4:$NET4.2:7" \
      <"$OUT/repro.in" >"$OUT/repro-seed$seed.out" 2>/dev/null || true
    t1=$(date +%s.%N)
    stop_netstackd
    teardown
    got=$(stat -c %s "$OUT/repro-seed$seed.out")
    if cmp -s "$OUT/repro.in" "$OUT/repro-seed$seed.out"; then
      v="complete, $(printf '%.1f' "$(echo "$t1 - $t0" | bc)") s, bytes equal"
    else
      v="hung: $got of 5000000 B back (socat -T $HANG idle exit)"
    fi
    cmd="netstackd --loss=0.02 --fault_ingress --seed=$seed --echo-port=7; ip netns exec K socat -b 131072 -T $HANG STDIO TCP4:$NET4.2:7 < 5MB"
    row "repro socat echo v4 loss2 seed$seed" "$v" "$cmd"
    row "repro seed$seed drop.fragmentation_needed" "$(nd_counter "$LOG" drop.fragmentation_needed)" "$cmd"
  done
fi

if [[ " $PARTS " == *" rto "* ]]; then
  echo "== 2. RTOs per $RTO_BYTES bytes at 5% loss each way" >&2
  sha=$(python3 "$MKFILE" "$OUT/www/blob.bin" "$RTO_BYTES" 43)
  transfer rto-sender http 4 80 "$RTO_BYTES" 11 0.05 "$sha"
  cmd="netstackd --loss=0.05 --fault_ingress --seed=11 --http-root; peer: GET $RTO_BYTES B over IPv4"
  row "rto netstack sender: time" "$(jget "$J" status) $(jget "$J" seconds) s, sha_ok $(jget "$J" sha_ok)" "$cmd"
  row "rto netstack sender: RTOs (TcpInfo timeouts)" "$(info_field "$J" timeouts)" "$cmd"
  row "rto netstack sender: retransmits / TLPs" "$(info_field "$J" retransmits) / $(info_field "$J" tlp)" "$cmd"
  row "rto netstack sender: kernel RTOs (receiver)" "$(kdelta 2)" "$cmd"
  transfer rto-receiver discard 4 9 "$RTO_BYTES" 11 0.05
  cmd="netstackd --loss=0.05 --fault_ingress --seed=11 --discard-port=9; peer: writes $RTO_BYTES B over IPv4"
  row "rto netstack receiver: time" "$(jget "$J" status) $(jget "$J" seconds) s" "$cmd"
  row "rto netstack receiver: kernel sender RTOs (nstat)" "$(kdelta 2)" "$cmd"
  row "rto netstack receiver: kernel RetransSegs / TLPs" "$(kdelta 1) / $(kdelta 3)" "$cmd"
  row "rto netstack receiver: kernel ss -ti total retrans" "$(ss_retrans "$J")" "$cmd"
  row "rto netstack receiver: netstack RTOs (TcpInfo)" "$(info_field "$J" timeouts)" "$cmd"
  rm -f "$OUT/www/blob.bin"
fi

if [[ " $PARTS " == *" bench "* ]]; then
  echo "== 3. tcp_benchmark, host GSO, latency 2 ms, loss both ways" >&2
  for loss in 0.05 0.01; do
    cmd="$TB --modes=host --loss=$loss --latency=2ms --client --server --kernel_baseline=false --json"
    $cmd >"$OUT/bench-$loss.json" 2>"$OUT/bench-$loss.log"
    read -r snd rcv < <(python3 -c 'import json,sys
rows = json.load(open(sys.argv[1]))
g = {r["netstack_role"]: r["gbps"] for r in rows if r["mode"] == "host"}
print(g["sender"], g["receiver"])' "$OUT/bench-$loss.json")
    row "bench loss $loss --client (netstack sender) Gbit/s" "$snd" "$cmd"
    row "bench loss $loss --server (netstack receiver) Gbit/s" "$rcv" "$cmd"
    row "bench loss $loss receiver/sender" "$(python3 -c "print(f'{$rcv / $snd:.2f}x')")" "$cmd"
  done
fi

echo >&2
echo "== TCP under loss, commit $COMMIT, load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
column -t -s $'\t' "$TABLE"
