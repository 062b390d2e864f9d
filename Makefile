# npfnic: the two commands of the README, and their parts.
#   make run   - the main job: build everything, boot a guest with the NIC, bind the driver
#   make test  - every test: unit tests, VM tests in QEMU, fuzzers (briefly)
# Both install what they need (Debian packages, QEMU 11, the guest kernel, Go
# modules) on the first run and reuse the cache (~/.cache/npfnic) after.

GO       ?= go
FUZZTIME ?= 3s
FUZZMINIMIZETIME ?= 100x
FUZZ ?=
export PATH := $(PATH):/usr/local/go/bin

.PHONY: run test images unit vmtest vmtest-full fuzz vet checkpatch soak stress-ci conformance

run: images
	$(GO) run ./cmd/npfnic demo

test: vet checkpatch images unit vmtest fuzz

# The guest driver stays checkpatch-clean (kernel style).
checkpatch:
	bash ci/checkpatch.sh

images:
	$(GO) run ./cmd/npfnic images

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }

# The fast tests: every package but ci/, whose tests boot real guests.
# Some still need root (taps, namespaces, raw sockets); NPFNIC_REQUIRE_TOOLS
# turns a missing prerequisite into a failure instead of a skip.
unit:
	NPFNIC_REQUIRE_TOOLS=1 $(GO) test -count=1 -timeout 20m $$($(GO) list ./... | grep -v -e '/ci$$' -e '/ci/')

# The VM tests: ci/ boots guests in QEMU with the images, under
# NPFNIC_ACCEL=kvm|tcg|auto (default auto: KVM where a probe guest boots
# under it, else TCG).
vmtest: images
	NPFNIC_REQUIRE_TOOLS=1 $(GO) test -count=1 -timeout 40m -v ./ci/...

# The VM tests with the repeats make test leaves out to stay within 25
# minutes (NPFNIC_VM_FULL=1: the hostile user space between two npfnics,
# every iSER and NVMe-oF pairing, 64 MiB of Ethernet integrity, the whole
# ODP fork churn and odp=all's ib_write_bw, overcommit's pinned steps).
vmtest-full: images
	NPFNIC_VM_FULL=1 NPFNIC_REQUIRE_TOOLS=1 $(GO) test -count=1 -timeout 60m -v ./ci/...

# The soaks, long (make test runs 5 rounds of each). SOAK=eth (the
# default): SOAK_ROUNDS rounds of rmmod/insmod, ip link down/up, ethtool -G
# and cool, with a guest reset every 10 rounds, under iperf3 both ways,
# rotating the RX policies. SOAK=rdma: an npfnic guest and an rdma_rxe
# guest under perftest both ways while npfnic's side cycles QP churn, MR
# churn, kills mid-transfer, rmmod with live contexts and device resets
# (SOAK_PARAMS: npfnic.ko's module parameters there, e.g. rx_policy=backup).
SOAK ?= eth
SOAK_PARAMS ?=
SOAK_ROUNDS ?= 500
soak_test_eth := TestTeardownUnderTraffic
soak_test_rdma := TestRDMASoak
soak: images
	@test -n "$(soak_test_$(SOAK))" || { echo "SOAK=$(SOAK): want eth or rdma"; exit 1; }
	NPFNIC_SOAK_ROUNDS=$(SOAK_ROUNDS) NPFNIC_RDMA_SOAK_PARAMS='$(SOAK_PARAMS)' NPFNIC_REQUIRE_TOOLS=1 $(GO) test -count=1 -timeout 24h -v -run '^$(soak_test_$(SOAK))$$' ./ci/

# rdma-core's own test suite (Debian's pyverbs tests) on npfnic and on
# rdma_rxe, one guest each, side by side (npfnic exp conformance, 2 to 3
# minutes per device under TCG): every test's status, the goals, npfnic's
# failures and the skips rxe does not take, in out/exp/conformance.
# CONFORMANCE_ARGS adds flags: -devices npfnic, -k tests.test_odp. ...
CONFORMANCE_ARGS ?=
conformance: images
	$(GO) run ./cmd/npfnic exp conformance $(CONFORMANCE_ARGS)

# Every Fuzz target of every package, FUZZTIME each, then a table of execs
# and execs/s per target (ci/fuzz.sh; FUZZ=REGEX picks targets,
# FUZZMINIMIZETIME bounds go's minimization of new inputs).
fuzz:
	FUZZTIME=$(FUZZTIME) FUZZMINIMIZETIME=$(FUZZMINIMIZETIME) FUZZ='$(FUZZ)' bash ci/fuzz.sh

# The VM suite three times back to back beside CPU hogs, as a loaded CI
# machine runs it: finds the flakes before CI does (ci/stress.sh;
# STRESS_RUNS, STRESS_HOGS, STRESS_RUN).
stress-ci: images
	bash ci/stress.sh
