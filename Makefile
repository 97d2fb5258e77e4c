# Depot's two commands. Both install the C libraries first when pkg-config cannot find
# them (apt-get; sudo when not root), so they work on a fresh Debian/Ubuntu machine that
# has the Swift toolchain.

SWIFT ?= swift
SUDO := $(shell [ "$$(id -u)" = "0" ] || echo sudo)

.PHONY: deps test test-tsan stress fuzz bench bench-smoke benchmarks

# Installs libsqlite3-dev, liblmdb-dev and the command-line tools the tests use.
deps:
	@missing=""; \
	command -v pkg-config >/dev/null 2>&1 || missing="$$missing pkg-config"; \
	pkg-config --exists sqlite3 2>/dev/null || missing="$$missing libsqlite3-dev"; \
	pkg-config --exists lmdb 2>/dev/null || missing="$$missing liblmdb-dev"; \
	command -v sqlite3 >/dev/null 2>&1 || missing="$$missing sqlite3"; \
	command -v mdb_stat >/dev/null 2>&1 || missing="$$missing lmdb-utils"; \
	if [ -n "$$missing" ]; then \
		echo "Installing:$$missing"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

# Runs every test (the conformance suite against every backend included), then each fuzz
# target for a few seconds: the committed seeds and crash regressions, and a little more.
test: deps
	$(SWIFT) test
	FUZZ_SECONDS=$(FUZZ_TEST_SECONDS) SWIFT=$(SWIFT) Fuzz/fuzz.sh

# The same tests under Thread Sanitizer, in a build folder of their own. DEPOT_TSAN=1 tells
# the reliability tests to run at their smallest size (TSan is 5-15 times slower).
test-tsan: deps
	DEPOT_TSAN=1 $(SWIFT) test --sanitize=thread --scratch-path .build-tsan

# The reliability tests at full size: 200 SIGKILL points per backend and durability, 10,000
# differential cases, 5,000 transfers per writer, 300 random files per backend. Prints one
# figure line per area (kill points survived, operations, bad inputs, cases) at the end;
# any loss or mismatch fails the run. The areas run one group after another, after one
# build: run all at once in one `swift test`, the crash tests' helper processes and the
# differential cases competed for 2 cores and a run exceeded 25 minutes; one group after
# another the whole takes about 4 minutes here.
STRESS_GROUPS := 'CrashTests|ConcurrencyTests' 'DifferentialTests|DifferentialRegressionTests|BadFileTests' 'HostileValueTests|LMDBFaultInjectionTests|ReliabilityTests\.RegressionTests'
stress: deps
	@mkdir -p .build; echo "Running the reliability tests at full size (log: .build/depot-stress.log)..."; \
	$(SWIFT) build --build-tests > .build/depot-stress.log 2>&1 || { tail -40 .build/depot-stress.log; exit 1; }; \
	status=0; for group in $(STRESS_GROUPS); do \
		echo "  $$group"; \
		DEPOT_STRESS=full $(SWIFT) test --skip-build --filter "$$group" >> .build/depot-stress.log 2>&1 || status=1; \
	done; \
	grep -E "✘|error:" .build/depot-stress.log | head -40; \
	echo; echo "Reliability figures:"; grep -h "^depot-reliability:" .build/depot-stress.log | sort; \
	grep -E "^✔ Test run|^✘ Test run" .build/depot-stress.log; exit $$status

# Coverage-guided fuzzing (libFuzzer + AddressSanitizer, Fuzz/): builds the targets, runs
# each for FUZZ_SECONDS, prints executions and crashes per target; any crash fails the run
# and its input is kept under Fuzz/.build/fuzz. FUZZ_TARGETS picks targets (Fuzz/README.md).
FUZZ_SECONDS ?= 60
FUZZ_TEST_SECONDS ?= 3
fuzz: deps
	FUZZ_SECONDS=$(FUZZ_SECONDS) SWIFT=$(SWIFT) Fuzz/fuzz.sh

# The main job: every backend beside the raw engines, release build, about a minute.
bench: deps
	$(SWIFT) run -c release depot-bench --output depot-bench-report

# A small run that proves the benchmark still works and its checksums hold (CI).
bench-smoke: deps
	$(SWIFT) run -c release depot-bench --records 2000 --repetitions 1 --output .build/depot-bench-smoke

# The package-benchmark suites (regression tracking, GRDB comparison), from Benchmarks/.
benchmarks: deps
	cd Benchmarks && $(SWIFT) package --disable-sandbox benchmark
