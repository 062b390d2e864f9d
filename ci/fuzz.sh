#!/usr/bin/env bash
# Runs every Fuzz target of every package for FUZZTIME (default 10s) and
# prints, per target and in total, the executions and executions per second
# that go's fuzzer reported, with the host's load average before and after
# (the figures depend on what else runs on the machine).
#
#   FUZZTIME          -fuzztime of each target (default 10s)
#   FUZZMINIMIZETIME  -fuzzminimizetime (default 100x): go minimizes every
#                     input that finds new coverage, and every failing
#                     one, for up to 60 s by default, in time quadratic in
#                     the input's length, fuzzing little meanwhile. Early
#                     in a run new inputs come every second, so that was
#                     most of the run: FuzzConfigWrite from an empty cache,
#                     15 s at load 5.4 on 2 CPUs, made 1.4k execs/s and
#                     found 10 new inputs at 60s, 4.4k and 31 at 1s, 27k
#                     and 51 at 100x, 34k and 57 at 0. 100 tries still cut
#                     a failing input's tail; it is kept either way.
#   FUZZ              only targets whose "package Target" matches this
#                     extended regular expression (default: all)
#
# go's fuzz coordinator discards its workers' stderr, so a worker that dies
# outside the fuzz function (a fatal error, a panic on another goroutine)
# leaves only "fuzzing process hung or terminated unexpectedly". Each
# worker writes what the runtime says when it dies to a file in
# out/fuzz-crash/ (NPFNIC_FUZZ_CRASH_DIR, fuzzseed.KeepCrashOutput); this
# script prints such a file beside the failure and keeps it.
#
# A failing input is always written to the package's testdata/fuzz/TARGET/
# directory, and that fails this script, as does a target that fails to
# build or set up. Go 1.26's fuzz coordinator can also end a healthy run
# with "context deadline exceeded" when -fuzztime expires while a worker is
# busy (golang/go#75804, fixed in Go 1.27); such a run leaves no input
# behind and is reported, not failed.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${FUZZTIME:-10s}"
minimizetime="${FUZZMINIMIZETIME:-100x}"
only="${FUZZ:-}"
status=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
rows=()
crashdir="$PWD/out/fuzz-crash"
mkdir -p "$crashdir"
export NPFNIC_FUZZ_CRASH_DIR="$crashdir"
# crashes prints the runtime's reports of the workers that died, and drops
# the empty files of the ones that did not.
crashes() {
	find "$crashdir" -type f -empty -delete
	for c in "$crashdir"/*; do
		[ -f "$c" ] || continue
		echo "fuzz: a worker died; the runtime said ($c):"
		sed -n '1,60p' "$c"
	done
}
inputs() { if [ -d "$1" ]; then find "$1" -type f | wc -l; else echo 0; fi; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

# seconds turns go's elapsed durations (45s, 2m30s, 1h0m5s) into seconds.
seconds() {
	awk -v d="$1" 'BEGIN {
		s = 0
		while (match(d, /^[0-9.]+[hms]/)) {
			n = substr(d, 1, RLENGTH - 1); u = substr(d, RLENGTH, 1)
			s += n * (u == "h" ? 3600 : u == "m" ? 60 : 1)
			d = substr(d, RLENGTH + 1)
		}
		print s
	}'
}

loadBefore=$(load)
nprocs=$(nproc)
for pkg in $(go list ./...); do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	for f in $( (grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null || true) | sed 's/^func //'); do
		name="${pkg#github.com/npfnic/npfnic/} $f"
		if [ -n "$only" ] && ! [[ "$name" =~ $only ]]; then
			continue
		fi
		corpus="$dir/testdata/fuzz/$f"
		before=$(inputs "$corpus")
		echo "fuzz $name ($fuzztime)"
		result=ok
		if ! go test -run '^$' -fuzz "^$f\$" -fuzztime "$fuzztime" -fuzzminimizetime "$minimizetime" "$pkg" 2>&1 | tee "$log"; then
			after=$(inputs "$corpus")
			if [ "$after" -gt "$before" ]; then
				echo "fuzz: $f found a failing input, kept in $corpus"
				result=FAIL
				status=1
			elif grep -q 'context deadline exceeded' "$log"; then
				echo "fuzz: $f stopped at the -fuzztime deadline with no failing input (golang/go#75804); not a failure"
				result=deadline
			else
				echo "fuzz: $f failed without a failing input (build or setup error)"
				result=FAIL
				status=1
			fi
		fi
		# The last progress line has the totals:
		# "fuzz: elapsed: 1m0s, execs: 1234567 (20576/sec), new interesting: ..."
		last=$(grep -E '^fuzz: elapsed: [0-9hms.]+, execs: [0-9]+ ' "$log" | tail -n 1 || true)
		execs=0 secs=0
		if [ -n "$last" ]; then
			execs=$(sed -E 's/.*execs: ([0-9]+) .*/\1/' <<<"$last")
			secs=$(seconds "$(sed -E 's/^fuzz: elapsed: ([0-9hms.]+),.*/\1/' <<<"$last")")
		fi
		crashes
		rows+=("$name|$execs|$secs|$result")
	done
done
loadAfter=$(load)

echo
echo "fuzz summary: FUZZTIME=$fuzztime FUZZMINIMIZETIME=$minimizetime, $nprocs CPUs, load average $loadBefore before, $loadAfter after"
printf '%-34s %12s %8s %10s  %s\n' target execs seconds execs/s result
totalExecs=0 totalSecs=0
for r in "${rows[@]}"; do
	IFS='|' read -r name execs secs result <<<"$r"
	rate=$(awk -v n="$execs" -v s="$secs" 'BEGIN { printf "%d", (s > 0 ? n / s : 0) }')
	printf '%-34s %12d %8d %10d  %s\n' "$name" "$execs" "$secs" "$rate" "$result"
	totalExecs=$((totalExecs + execs))
	totalSecs=$(awk -v a="$totalSecs" -v b="$secs" 'BEGIN { print a + b }')
done
rate=$(awk -v n="$totalExecs" -v s="$totalSecs" 'BEGIN { printf "%d", (s > 0 ? n / s : 0) }')
printf '%-34s %12d %8d %10d  %s\n' total "$totalExecs" "$totalSecs" "$rate" "$([ $status = 0 ] && echo ok || echo FAIL)"
exit $status
