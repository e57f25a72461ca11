#!/usr/bin/env bash
# Copy-avoidance benchmark on kernel loopback: what copying to and from
# user memory costs tcp_benchmark's kernel stack.
#
#   bazel run --config=opt //tools/tcp_benchmark:copy_avoidance
#   DURATION=10 REPS=3 STREAMS=1 bazel run --config=opt //tools/tcp_benchmark:copy_avoidance
#
# Receive: the same plain sender, receiver --recv_mode plain vs splice.
# Send: the same plain receiver, sender --send_mode plain vs vmsplice vs
# sendfile. Each comparison runs in this one invocation, alternating the
# modes REPS times; it prints throughput and CPU per GB moved (CPU seconds
# of the measured side per GB, getrusage as iperf3 reports it), the medians,
# and the ratios to plain (> 1 means the mode is better: faster, or less
# CPU per GB).
set -euo pipefail

DURATION=${DURATION:-5}
REPS=${REPS:-3}
STREAMS=${STREAMS:-1}

bin=${TCP_BENCHMARK:-}
if [[ -z $bin ]]; then
  for c in "${RUNFILES_DIR:-$0.runfiles}/netstack/tools/tcp_benchmark/tcp_benchmark" \
           "$(dirname "$0")/tcp_benchmark"; do
    if [[ -x $c ]]; then bin=$c; break; fi
  done
fi
[[ -x $bin ]] || { echo "copy_avoidance: tcp_benchmark not found" >&2; exit 1; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_listening() {  # port
  for _ in $(seq 200); do
    if grep -qi ":$(printf '%04X' "$1") .* 0A " /proc/net/tcp /proc/net/tcp6; then
      return 0
    fi
    sleep 0.05
  done
  echo "copy_avoidance: server did not listen on $1" >&2
  return 1
}

# run RECV_MODE SEND_MODE -> one JSON line (the client's summary)
run() {
  local port server_pid out
  port=$(free_port)
  "$bin" --role=server --stack=kernel --port="$port" --one_off \
    --recv_mode="$1" --interval=0 >/dev/null 2>&1 &
  server_pid=$!
  wait_listening "$port"
  out=$("$bin" --role=client --stack=kernel --connect="127.0.0.1:$port" \
    --duration="$DURATION" --streams="$STREAMS" --send_mode="$2" \
    --interval=0 --json 2>/dev/null)
  wait "$server_pid"
  echo "$out"
}

results=$(mktemp)
trap 'rm -f "$results"' EXIT
echo "copy_avoidance: kernel loopback, ${DURATION}s per run, $STREAMS stream(s), $REPS rep(s), $(nproc) CPUs, $(uname -r)"
for rep in $(seq "$REPS"); do
  for recv in plain splice; do
    echo "recv $recv $(run "$recv" plain)" >>"$results"
  done
  for send in plain vmsplice sendfile; do
    echo "send $send $(run plain "$send")" >>"$results"
  done
done

python3 - "$results" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    side, mode, doc = line.split(" ", 2)
    d = json.loads(doc)
    cpu = d["receiver_cpu_util"] if side == "recv" else d["sender_cpu_util"]
    gb = d["bytes"] / 1e9
    # CPU seconds of the measured side per GB received.
    cpu_per_gb = cpu / 100 * d["seconds"] / gb if gb else float("inf")
    rows.setdefault((side, mode), []).append((d["gbps"], cpu, cpu_per_gb))

def med(side, mode, i):
    return statistics.median(r[i] for r in rows[(side, mode)])

for side, modes, who in (("recv", ("plain", "splice"), "receiver"),
                         ("send", ("plain", "vmsplice", "sendfile"), "sender")):
    print(f"\n{side}: {who} side measured (medians of {len(rows[(side, 'plain')])})")
    print(f"  {'mode':9} {'Gbit/s':>8} {who+' CPU %':>14} {'CPU s/GB':>9} "
          f"{'thru x':>7} {'CPU/GB x':>9}")
    for m in modes:
        g, c, cg = med(side, m, 0), med(side, m, 1), med(side, m, 2)
        gp, cgp = med(side, "plain", 0), med(side, "plain", 2)
        print(f"  {m:9} {g:8.2f} {c:14.1f} {cg:9.3f} {g/gp:7.2f} {cgp/cg:9.2f}")
PY
