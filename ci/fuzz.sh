#!/usr/bin/env bash
# Runs every Fuzz target of every package for FUZZTIME (default 10s).
#
# A failing input is always written to the package's testdata/fuzz/TARGET/
# directory, and that is what fails this script. Go 1.26's fuzz coordinator
# can also end a healthy run with "context deadline exceeded" when -fuzztime
# expires while a worker is busy (golang/go#75804, fixed in Go 1.27); such a
# run leaves no input behind and is reported, not failed.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${FUZZTIME:-10s}"
status=0
inputs() { if [ -d "$1" ]; then find "$1" -type f | wc -l; else echo 0; fi; }
for pkg in $(go list ./...); do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	for f in $( (grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null || true) | sed 's/^func //'); do
		corpus="$dir/testdata/fuzz/$f"
		before=$(inputs "$corpus")
		echo "fuzz $pkg $f ($fuzztime)"
		if go test -run '^$' -fuzz "^$f\$" -fuzztime "$fuzztime" "$pkg"; then
			continue
		fi
		after=$(inputs "$corpus")
		if [ "$after" -gt "$before" ]; then
			echo "fuzz: $f found a failing input, kept in $corpus"
			status=1
		else
			echo "fuzz: $f stopped at the -fuzztime deadline with no failing input (golang/go#75804); not a failure"
		fi
	done
done
exit $status
