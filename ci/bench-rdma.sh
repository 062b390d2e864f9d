#!/bin/bash
# bench-rdma.sh: the RC engine alone (rdma.BenchmarkRC: two engines on an
# in-memory cable) beside the copy floor (BenchmarkRCCopyFloor, memmove of
# the same bytes) and the Ethernet engine's TSO (ethring
# BenchmarkDatapath/*/TSO-64KiB), run in turns in one go, and a table of
# medians (MB/s of payload) with each figure's ratio to the Ethernet TSO
# (inline) of the same run. Performance is compared, never asserted.
#
#   ci/bench-rdma.sh [-count N] [-benchtime D] [-base COMMIT]
#
# -base builds the rdma benchmarks of COMMIT too (with this tree's
# benchmark files, so both run the same driver) and runs them in turns with
# this tree's: before/after on one machine under the same load. Other
# programs on the cores move every figure; compare within one run only.
set -euo pipefail
cd "$(dirname "$0")/.."
count=5 benchtime=1s base=
while [ $# -gt 0 ]; do
	case $1 in
	-count) count=$2; shift 2 ;;
	-benchtime) benchtime=$2; shift 2 ;;
	-base) base=$2; shift 2 ;;
	*) echo "usage: $0 [-count N] [-benchtime D] [-base COMMIT]" >&2; exit 2 ;;
	esac
done
tmp=$(mktemp -d /tmp/bench-rdma.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/rdma.test" ./rdma
go test -c -o "$tmp/eth.test" ./ethring
if [ -n "$base" ]; then
	mkdir "$tmp/base"
	git archive "$base" | tar -x -C "$tmp/base"
	cp rdma/bench_test.go rdma/helper_test.go rdma/export_test.go "$tmp/base/rdma/"
	(cd "$tmp/base" && go test -c -o "$tmp/base.test" ./rdma)
fi
out=$tmp/out
for i in $(seq "$count"); do
	(cd ethring && nice "$tmp/eth.test" -test.run '^$' -test.benchtime "$benchtime" \
		-test.bench 'Datapath/inline/TSO|Datapath/threaded/TSO') | sed -n 's/^Benchmark/eth Benchmark/p' >>"$out"
	(cd rdma && nice "$tmp/rdma.test" -test.run '^$' -test.benchtime "$benchtime" \
		-test.bench 'RC') | sed -n 's/^Benchmark/new Benchmark/p' >>"$out"
	if [ -n "$base" ]; then
		(cd rdma && nice "$tmp/base.test" -test.run '^$' -test.benchtime "$benchtime" \
			-test.bench 'RC/') | sed -n 's/^Benchmark/base Benchmark/p' >>"$out"
	fi
done
# name -> MB/s (and cpu-µs/op) medians; ratios to the inline TSO.
awk -v base="$base" '
function median(s,   a, n, i, j, t) {
	n = split(s, a, " ")
	for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
	return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
}
{
	who = $1; name = $2; sub(/-[0-9]+$/, "", name); sub(/^Benchmark/, "", name)
	key = who " " name
	for (i = 3; i <= NF; i++) {
		if ($i == "MB/s") mb[key] = mb[key] " " $(i-1)
		if ($i == "cpu-µs/op") cpu[key] = cpu[key] " " $(i-1)
	}
	if (!(key in seen)) { seen[key] = 1; order[++n] = key }
}
END {
	tso = median(mb["eth Datapath/inline/TSO-64KiB"])
	printf "%-34s %10s %8s %10s", "benchmark (median MB/s)", "MB/s", "/TSO", "cpu-µs/op"
	if (base != "") printf " %10s %8s %10s", "base MB/s", "new/base", "base cpu"
	printf "\n"
	for (k = 1; k <= n; k++) {
		key = order[k]; split(key, p, " ")
		if (p[1] == "base") continue
		m = median(mb[key])
		printf "%-34s %10.0f %8.2f %10s", p[2], m, m / tso, (key in cpu) ? sprintf("%.1f", median(cpu[key])) : "-"
		bk = "base " p[2]
		if (base != "" && (bk in mb)) {
			bm = median(mb[bk])
			printf " %10.0f %8.2f %10s", bm, m / bm, (bk in cpu) ? sprintf("%.1f", median(cpu[bk])) : "-"
		}
		printf "\n"
	}
}' "$out"
