#!/usr/bin/env bash
# What the device trace costs on the RX fast path: BenchmarkRxFrame built
# with the trace's hooks (tracing off, and on) and without them
# (-tags npfnic_notrace), ROUNDS interleaved rounds, medians in ns/frame.
# Usage: bash ci/bench-trace-cost.sh [ROUNDS]   (default 10)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-10}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go test -c -o "$dir/with" .
go test -c -tags npfnic_notrace -o "$dir/without" .
for i in $(seq "$rounds"); do
	for b in without with; do
		"$dir/$b" -test.run '^$' -test.bench 'RxFrame' -test.benchtime 1s |
			awk -v b="$b" '/^BenchmarkRxFrame/ { sub(/-[0-9]+$/, "", $1); print b, $1, $3 }'
	done
	echo "round $i/$rounds" >&2
done >"$dir/runs"
echo "BenchmarkRxFrame, median ns/frame of $rounds interleaved rounds (load $(cut -d' ' -f1-3 /proc/loadavg)):"
awk '{ v[$1" "$2] = v[$1" "$2] " " $3 } END { for (k in v) print k, v[k] }' "$dir/runs" | sort |
	while read -r build mode vals; do
		med=$(tr ' ' '\n' <<<"$vals" | grep . | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
		printf '  %-8s %-40s %8.1f\n' "$build" "$mode" "$med"
	done
