#!/usr/bin/env bash
# Instructions per received packet (ICMP echo request -> reply) from
# callgrind: two runs differing by 10,000 packets, so set-up cancels out.
# Usage: bench/callgrind_rx.sh   (builds with --config=opt first)
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build --config=opt //bench:stack_rx_callgrind >&2
bin=bazel-out/k8-optopt/bin/bench/stack_rx_callgrind
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ir() {
  valgrind --tool=callgrind --callgrind-out-file="$tmp/out" "$bin" "$1" "$2" \
    >/dev/null 2>"$tmp/log"
  awk '/^summary:/ {print $2}' "$tmp/out"
}
for family in 4 6; do
  a=$(ir "$family" 1024)
  b=$(ir "$family" 11264)
  echo "IPv$family: $(( (b - a) / 10240 )) instructions per packet" \
       "(Ir $a for 1024 packets, $b for 11264)"
done
