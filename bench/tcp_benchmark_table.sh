#!/usr/bin/env bash
# The full tcp_benchmark matrix: netstack with GSO off, software and host,
# at MTU 1500 and 9000, as sender and as receiver, each against the
# kernel-to-kernel baseline of the same MTU measured in the same run; then
# a plot of it. Needs root (namespaces, veth, AF_PACKET).
#
#   bench/tcp_benchmark_table.sh [OUT_PREFIX] [extra driver flags...]
#
# Writes OUT_PREFIX.json (the driver's --json), OUT_PREFIX.txt (its
# stderr: interval lines and the table) and OUT_PREFIX.png. OUT_PREFIX
# defaults to /tmp/tcp_benchmark; DURATION (seconds, default 10) sets each
# measurement's length.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-/tmp/tcp_benchmark}
shift || true
duration=${DURATION:-10}

cd "$top"
bazel build --config=opt //tools/tcp_benchmark:tcp_benchmark 2>&1 |
  grep -v linux-sandbox >&2
bin="$top/bazel-out/k8-optopt/bin/tools/tcp_benchmark/tcp_benchmark"

status=0
"$bin" --client --server --modes=off,sw,host --mtus=1500,9000 \
  --duration="$duration" --json "$@" >"$out.json" 2> >(tee "$out.txt" >&2) ||
  status=$?
if ((status != 0)); then
  echo "tcp_benchmark_table: the driver exited with $status" \
    "(failed rows carry an \"error\" in $out.json); plotting the rest" >&2
fi
/usr/bin/python3 "$top/bench/plot_tcp_benchmark.py" -o "$out.png" "$out.json" >/dev/null
echo "$out.json $out.txt $out.png"
exit "$status"
