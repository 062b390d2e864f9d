#!/usr/bin/env bash
# The VM suite under load, the way a shared CI machine runs it: STRESS_RUNS
# (default 3) back-to-back `go test -count=1 ./ci/` runs with STRESS_HOGS
# (default: half the CPUs, at least one) busy loops beside them. Each run's
# output goes to out/stress/run-N.log; at the end a table says, per run,
# how long it took, what passed and which tests failed. A flake shows up
# here before CI finds it; fix it at its cause, never by a longer timeout
# alone. Exits non-zero if any run failed.
#
#   STRESS_RUNS   runs (default 3)
#   STRESS_HOGS   CPU hogs beside the runs (default nproc/2, at least 1)
#   STRESS_RUN    -run regexp of the VM tests (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${STRESS_RUNS:-3}"
hogs="${STRESS_HOGS:-$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))}"
pattern="${STRESS_RUN:-.}"
out=out/stress
mkdir -p "$out"

hog_pids=()
stop_hogs() {
	for p in "${hog_pids[@]}"; do kill "$p" 2>/dev/null || true; done
}
trap stop_hogs EXIT
for _ in $(seq "$hogs"); do
	# A plain busy loop: the load a neighbour's build puts on the host.
	sh -c 'while :; do :; done' &
	hog_pids+=($!)
done
echo "stress-ci: $runs runs of ./ci/ (-run '$pattern') beside $hogs CPU hog(s) on $(nproc) CPUs; logs in $out/"

# One build first, so the runs measure the tests and not the compiler.
go run ./cmd/npfnic images >/dev/null

failed=0
summary=()
for i in $(seq "$runs"); do
	log="$out/run-$i.log"
	start=$(date +%s)
	load0=$(cut -d' ' -f1 /proc/loadavg)
	rc=0
	NPFNIC_REQUIRE_TOOLS=1 go test -count=1 -timeout 90m -v -run "$pattern" ./ci/ >"$log" 2>&1 || rc=$?
	secs=$(( $(date +%s) - start ))
	pass=$(grep -c '^--- PASS' "$log" || true)
	skip=$(grep -c '^--- SKIP' "$log" || true)
	fails=$(grep '^--- FAIL' "$log" | awk '{print $3}' | paste -sd, - || true)
	if [ "$rc" -ne 0 ]; then
		failed=$((failed + 1))
		[ -n "$fails" ] || fails="exit $rc (see $log)"
	fi
	line=$(printf '%-4s %6ss  load %s→%s  passed %3s  skipped %2s  failed: %s' \
		"$i" "$secs" "$load0" "$(cut -d' ' -f1 /proc/loadavg)" "$pass" "$skip" "${fails:-none}")
	summary+=("$line")
	echo "stress-ci: run $line"
done

echo
echo "run  time     host load      result"
printf '%s\n' "${summary[@]}"
echo "stress-ci: $((runs - failed)) of $runs runs passed"
[ "$failed" -eq 0 ]
