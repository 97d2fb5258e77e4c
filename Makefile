# Depot's two commands. Both install the C libraries first when pkg-config cannot find
# them (apt-get; sudo when not root), so they work on a fresh Debian/Ubuntu machine that
# has the Swift toolchain. The tests also start a throwaway PostgreSQL server
# (scripts/postgres-test-server.sh, which installs the server the same way when missing).

SWIFT ?= swift
# Depot's own builds turn its PostgreSQL trait on (tests, the depot command, the benchmark
# and the example all use the PostgreSQL backend); an application chooses for itself.
TRAITS := --traits PostgreSQL
# Depot's own programs (the benchmark, the release-build conformance run, the reliability
# tests' helper processes, the SQLite disk-fault tests) are a package of their own, Tools/,
# which turns the trait on in its dependency on this one. It builds in this package's build
# folder: the modules both packages use are compiled once, with the same flags, and the
# helpers land beside the test runner, where the reliability tests look for them (so Tools
# is built before this package's tests run).
TOOLS := --package-path Tools
# The @Record macro's expansion tests, a package of their own (see its Package.swift for
# why), also built in this package's build folder, on the host swift-syntax the macro
# already needs. Not run under Thread Sanitizer: they transform syntax on one thread.
MACRO_TESTS := --package-path Tools/MacroTests
# Builds other than the plain debug one (release, Thread Sanitizer, the fuzzers' ASan) load
# the debug build's @Record plugin (DEPOT_MACRO_PLUGIN, read by the manifests) rather than
# have SwiftPM compile swift-syntax once more, optimized or instrumented, for a plugin that
# only expands source while compiling and is linked into nothing: that compile was most of
# a release build's time, and the code built is the same. The plugin is a file target,
# built only when it is missing or older than the macro's sources or the manifest (a
# `swift build` that finds it current still loads every manifest first). Every command of
# such a build sets the variable, so that SwiftPM sees one manifest and reuses one build.
# SwiftPM does not see the plugin as an input, so a change to Sources/DepotMacros would
# leave an incremental build's old expansions in place: the release build recompiles
# everything then (FRESH_RELEASE_BUILD's checksum covers it), and the TSan and fuzz builds
# touch the files that name @Record (MACRO_EXPANSIONS_CURRENT, given the build folder) so
# that they are compiled again.
MACRO_PLUGIN_PATH := $(CURDIR)/.build/debug/DepotMacros-tool
# What a recipe runs first to have a current plugin (a no-op when it is).
MACRO_PLUGIN := @$(MAKE) -s --no-print-directory $(MACRO_PLUGIN_PATH)
# A checksum of every file under the paths given, in a fixed order: what tells a build
# whether its sources changed since the one before.
SOURCES_CHECKSUM = find $(1) -type f -print0 | LC_ALL=C sort -z | xargs -0 cat | cksum
define MACRO_EXPANSIONS_CURRENT
	@sum=$$($(call SOURCES_CHECKSUM,Sources/DepotMacros)); \
	if [ -d $(1) ] && [ "$$(cat $(1)/macro-sources.cksum 2>/dev/null)" != "$$sum" ]; then \
		echo "The @Record macro changed since $(1) was built: its users compile again."; \
		grep -rlE --include='*.swift' '@Record' Sources Tests Tools/Sources Fuzz/Sources | xargs -r touch; \
	fi; \
	mkdir -p $(1) && echo "$$sum" > $(1)/macro-sources.cksum
endef
WITH_PLUGIN := DEPOT_MACRO_PLUGIN=$(MACRO_PLUGIN_PATH)
RELEASE := $(WITH_PLUGIN) $(SWIFT)
SUDO := $(shell [ "$$(id -u)" = "0" ] || echo sudo)

.PHONY: deps warnings test test-tsan tsan-build stress fuzz release-build bench bench-smoke bench-table readme-check conformance bench-postgres benchmarks postgres-server postgres-stop example-test load load-postgres load-deps docs

# Installs libsqlite3-dev, liblmdb-dev, libpq-dev (every build links libpq, for the
# PostgreSQL backend) and the command-line tools the tests use. The PostgreSQL server is
# installed by scripts/postgres-test-server.sh, only where tests start one.
deps:
	@missing=""; \
	command -v pkg-config >/dev/null 2>&1 || missing="$$missing pkg-config"; \
	pkg-config --exists sqlite3 2>/dev/null || missing="$$missing libsqlite3-dev"; \
	pkg-config --exists lmdb 2>/dev/null || missing="$$missing liblmdb-dev"; \
	pkg-config --exists libpq 2>/dev/null || missing="$$missing libpq-dev"; \
	command -v sqlite3 >/dev/null 2>&1 || missing="$$missing sqlite3"; \
	command -v mdb_stat >/dev/null 2>&1 || missing="$$missing lmdb-utils"; \
	if [ -n "$$missing" ]; then \
		echo "Installing:$$missing"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

# The @Record plugin (see MACRO_PLUGIN_PATH above).
$(MACRO_PLUGIN_PATH): Package.swift $(shell find Sources/DepotMacros -type f)
	$(SWIFT) build $(TRAITS) --scratch-path .build --product DepotMacros
	@touch $@

# Builds Depot's own targets and tests with every compiler warning an error.
# DEPOT_WARNINGS_AS_ERRORS=1 makes Package.swift add -warnings-as-errors to this package's
# targets only; its dependencies are compiled as always (their warnings are not ours, and
# their modules are not rebuilt). .ci/run sets the variable for all of its builds, so they
# share one set of flags; a build without it recompiles Depot's own modules once.
warnings: deps
	DEPOT_WARNINGS_AS_ERRORS=1 $(SWIFT) build $(TRAITS) --build-tests
	DEPOT_WARNINGS_AS_ERRORS=1 $(SWIFT) build $(TOOLS) --scratch-path .build --build-tests
	DEPOT_WARNINGS_AS_ERRORS=1 $(SWIFT) build $(MACRO_TESTS) --scratch-path .build --build-tests

# Runs `swift test` (or the command in WITH_POSTGRES_RUN) with a throwaway PostgreSQL
# server in WITH_POSTGRES_DIR: DEPOT_TEST_POSTGRES_URL tells the tests where it is, and
# DEPOT_REQUIRE_POSTGRES=1 makes them fail, not skip, when they cannot reach it. The server
# is stopped afterwards even when the tests fail or are interrupted, and the tests' exit
# status is kept. Every start begins with an empty cluster. With WITH_POSTGRES_STANDBY=yes
# the server gets a streaming standby, and DEPOT_TEST_POSTGRES_CLUSTER_URL names both (the
# replica tests need it, and fail without it when DEPOT_REQUIRE_POSTGRES_STANDBY=1).
POSTGRES_SERVER := scripts/postgres-test-server.sh
define WITH_POSTGRES
	@url=$$($(POSTGRES_SERVER) start $(WITH_POSTGRES_DIR) | tail -n 1) && [ -n "$$url" ] || exit 1; \
	trap '$(POSTGRES_SERVER) stop $(WITH_POSTGRES_DIR)' EXIT; trap 'exit 130' INT; trap 'exit 143' TERM; \
	echo "PostgreSQL test server: $$url"; \
	cluster=""; if [ "$(WITH_POSTGRES_STANDBY)" = yes ]; then \
		$(POSTGRES_SERVER) standby $(WITH_POSTGRES_DIR) > /dev/null && cluster=$$($(POSTGRES_SERVER) cluster-url $(WITH_POSTGRES_DIR)) || exit 1; \
		echo "PostgreSQL primary and standby: $$cluster"; \
		export DEPOT_TEST_POSTGRES_CLUSTER_URL="$$cluster" DEPOT_REQUIRE_POSTGRES_STANDBY=1; \
	fi; \
	echo "$(WITH_POSTGRES_RUN)"; \
	DEPOT_TEST_POSTGRES_URL="$$url" DEPOT_REQUIRE_POSTGRES=1 $(WITH_POSTGRES_RUN)
endef

# Runs every test (the conformance suite against every backend included, PostgreSQL on a
# throwaway server; the Tools package's fault tests; the macro's expansion tests), then each fuzz target for a few seconds: the committed seeds and crash
# regressions, and a little more.
# The tests that restart a PostgreSQL server of their own run after the others, in a run of
# their own (no second build): beside every other suite at once on 2 cores, the stores'
# queues they wait on (which share the global queue's threads with every test's blocking
# work) took minutes to get a thread, and the restart test ran past its time limit.
ISOLATED_TESTS := PostgresRestartTests|PostgresFailoverTests
test: WITH_POSTGRES_DIR = .build/postgres
test: WITH_POSTGRES_STANDBY = yes
test: WITH_POSTGRES_RUN = $(SWIFT) test $(TRAITS) --skip '$(ISOLATED_TESTS)' && DEPOT_TEST_POSTGRES_URL="$$url" DEPOT_REQUIRE_POSTGRES=1 $(SWIFT) test $(TRAITS) --skip-build --filter '$(ISOLATED_TESTS)'
test: deps
	$(SWIFT) build $(TOOLS) --scratch-path .build --build-tests
	$(WITH_POSTGRES)
	$(SWIFT) test $(TOOLS) --scratch-path .build --skip-build
	$(SWIFT) test $(MACRO_TESTS) --scratch-path .build
	$(MACRO_PLUGIN)
	$(call MACRO_EXPANSIONS_CURRENT,Fuzz/.build)
	$(WITH_PLUGIN) FUZZ_SECONDS=$(FUZZ_TEST_SECONDS) SWIFT=$(SWIFT) Fuzz/fuzz.sh

# The same tests under Thread Sanitizer, in a build folder of their own (with a server of
# its own, so that it can run beside `make test`). DEPOT_TSAN=1 tells the reliability tests
# to run at their smallest size (TSan is 5-15 times slower). At most TSAN_TEST_WIDTH test
# cases run at once (Swift Testing starts every case at once otherwise: over 500 conformance
# cases alone). On 2 cores under TSan, that backlog on the global queue held a check's next
# step back for over a minute, and checks that wait a minute for a store's thread to start
# their transaction failed; the checks themselves still run their own work concurrently.
# The build is a target of its own (tsan-build), so that CI can run it beside the release
# build: they use different build folders, and each spends much of its time in one module's
# compile that keeps one core busy.
TSAN_TEST_WIDTH ?= 8
test-tsan: WITH_POSTGRES_DIR = .build-tsan/postgres
test-tsan: WITH_POSTGRES_RUN = DEPOT_TSAN=1 SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH=$(TSAN_TEST_WIDTH) $(WITH_PLUGIN) $(SWIFT) test $(TRAITS) --sanitize=thread --scratch-path .build-tsan --skip-build
test-tsan: tsan-build
	$(WITH_POSTGRES)
	$(WITH_PLUGIN) $(SWIFT) test $(TOOLS) --scratch-path .build-tsan --sanitize=thread --skip-build

# Everything test-tsan runs, built with Thread Sanitizer: Tools first (its helpers land
# beside the test runner), then this package's tests.
tsan-build: deps
	$(MACRO_PLUGIN)
	$(call MACRO_EXPANSIONS_CURRENT,.build-tsan)
	$(WITH_PLUGIN) $(SWIFT) build $(TOOLS) --scratch-path .build-tsan --sanitize=thread --build-tests
	$(WITH_PLUGIN) $(SWIFT) build $(TRAITS) --scratch-path .build-tsan --sanitize=thread --build-tests

# The reliability tests at full size: 200 SIGKILL points per backend and durability, 10,000
# differential cases, 5,000 transfers per writer (on every backend, PostgreSQL on a throwaway
# server started for the run, as `make test` does), 300 random files per backend. Prints one
# figure line per area (kill points survived, operations, bad inputs, cases) at the end;
# any loss or mismatch fails the run. The groups run one after another after one build,
# not in one `swift test`: the crash tests' helper processes and the differential cases
# compete for the cores and slow the whole run far more than running the groups in turn.
STRESS_GROUPS := 'CrashTests|ConcurrencyTests' 'DifferentialTests|DifferentialRegressionTests|BadFileTests' 'HostileValueTests|LMDBFaultInjectionTests|ReliabilityTests\.RegressionTests' 'PostgresFailoverTests'
stress: deps
	@mkdir -p .build; echo "Running the reliability tests at full size (log: .build/depot-stress.log)..."; \
	{ $(SWIFT) build $(TOOLS) --scratch-path .build --build-tests && $(SWIFT) build $(TRAITS) --build-tests; } > .build/depot-stress.log 2>&1 || { tail -40 .build/depot-stress.log; exit 1; }; \
	url=$$($(POSTGRES_SERVER) start .build/postgres-stress 2>> .build/depot-stress.log | tail -n 1) && [ -n "$$url" ] || { tail -20 .build/depot-stress.log; exit 1; }; \
	trap '$(POSTGRES_SERVER) stop .build/postgres-stress >> .build/depot-stress.log 2>&1' EXIT; trap 'exit 130' INT; trap 'exit 143' TERM; \
	status=0; for group in $(STRESS_GROUPS); do \
		echo "  $$group"; \
		DEPOT_TEST_POSTGRES_URL="$$url" DEPOT_REQUIRE_POSTGRES=1 DEPOT_STRESS=full $(SWIFT) test $(TRAITS) --skip-build --filter "$$group" >> .build/depot-stress.log 2>&1 || status=1; \
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
	$(MACRO_PLUGIN)
	$(call MACRO_EXPANSIONS_CURRENT,Fuzz/.build)
	$(WITH_PLUGIN) FUZZ_SECONDS=$(FUZZ_SECONDS) SWIFT=$(SWIFT) Fuzz/fuzz.sh

# The DocC documentation of every library (swift-docc-plugin), into
# .build/plugins/Swift-DocC/outputs. Any warning (a broken symbol link, an undocumented
# parameter) fails it, and so does a public symbol without a summary line
# (scripts/doc-summaries.py reads the symbol graphs the plugin extracted). About 20 s once
# the debug build exists (CI runs it after `make test`). DepotSQL is left out: it has no
# public symbols. Not --enable-inherited-docs: it would show DepotCore's documentation of
# Store's requirements on each store, but their symbol links resolve only in DepotCore's
# archive, so every other archive fails with unresolved links.
DOC_TARGETS := DepotCore DepotSQLite DepotLMDB DepotPostgres Depot DepotServiceLifecycle DepotCommands DepotTesting
docs: deps
	$(SWIFT) package $(TRAITS) --disable-sandbox generate-documentation $(addprefix --target ,$(DOC_TARGETS)) --warnings-as-errors
	scripts/doc-summaries.py $(DOC_TARGETS)

# Before a release build of Depot's programs: when any file under Sources/ or Package.swift
# (or Tools/'s) changed since the last such build, every Swift source of both packages is
# touched, so that every module of them is compiled again (their dependencies are not). SwiftPM recompiles a
# module only when the modules it imports directly changed their interface; a program that
# inlined code of a module further down kept that code's old layout after an edit there
# (seen on Swift 6.3.1: DepotCore changed, Depot's interface did not, depot-bench was only
# relinked, and once crashed on a layout it no longer had). About a minute more, once.
# Without an earlier release build there is nothing stale and nothing is touched (touching
# would make the next debug build, `make example-test`'s in CI, compile Depot again).
define FRESH_RELEASE_BUILD
	$(MACRO_PLUGIN)
	@sum=$$($(call SOURCES_CHECKSUM,Sources Package.swift Tools/Sources Tools/Package.swift)); \
	if [ "$$(cat .build/release-sources.cksum 2>/dev/null)" != "$$sum" ]; then \
		if [ -d .build/release ]; then find Sources Tools/Sources -name '*.swift' -exec touch {} +; fi; \
		$(RELEASE) build $(TOOLS) --scratch-path .build -c release || exit 1; \
		echo "$$sum" > .build/release-sources.cksum; \
	fi
endef

# Where a run's record goes: docs/benchmarks/<UTC date and time>-<commit>/ (results.json,
# report.md, chart.svg), "-dirty" after the commit when tracked files have uncommitted
# changes. BENCH_RECORD=folder names another. The README's table of verdicts is made from
# the latest records by `make bench-table`.
BENCH_COMMIT = $(shell git rev-parse --short=7 HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)
BENCH_RECORD ?= docs/benchmarks/$(shell date -u +%Y-%m-%d-%H%M%S)-$(BENCH_COMMIT)
BENCH_POSTGRES_RECORD ?= docs/benchmarks/$(shell date -u +%Y-%m-%d-%H%M%S)-$(BENCH_COMMIT)-postgres

# The release build of Depot's programs alone (bench, bench-smoke and conformance make it
# themselves when it is missing or stale), for running depot-bench by hand.
release-build: deps
	$(FRESH_RELEASE_BUILD)

# The main job: every backend beside the raw engines, release build, about a minute. Its
# record goes to BENCH_RECORD.
bench: deps
	$(FRESH_RELEASE_BUILD)
	$(RELEASE) run $(TOOLS) --scratch-path .build -c release depot-bench --output "$(BENCH_RECORD)" --commit "$(BENCH_COMMIT)"

# A small run that proves the benchmark still works and its checksums hold (CI). A release
# build, as `make bench` (nothing is timed): it is CI's only run
# of the release build, whose awaited calls resume through unsafe continuations where debug
# builds (and so the tests) use checked ones, and the optimizer has crashed code that
# debug builds ran fine (a specialized read, on Swift 6.3.1).
bench-smoke: deps
	$(FRESH_RELEASE_BUILD)
	$(RELEASE) run $(TOOLS) --scratch-path .build -c release depot-bench --records 2000 --repetitions 1 --output .build/depot-bench-smoke

# The conformance suite against the release build (the tests run a debug build), on every
# backend: PostgreSQL on a throwaway server, as `make test`. CI runs it after bench-smoke,
# whose release build it reuses: about a minute. Any failed check fails it.
conformance: WITH_POSTGRES_DIR = .build/postgres-conformance
conformance: WITH_POSTGRES_RUN = $(RELEASE) run $(TOOLS) --scratch-path .build -c release depot-conformance --backends memory,sqlite,sqlite-memory,lmdb,postgres
conformance: deps
	$(FRESH_RELEASE_BUILD)
	$(WITH_POSTGRES)

# The backend comparison for PostgreSQL: Depot's postgres store beside libpq used directly,
# on a throwaway server on this machine (its fsync is off: commits cost what the server's
# work costs, not the disk's). Release build. 20,000 cats and 3 repetitions: every statement
# is a round trip to a server process that shares the machine's cores, so 100,000 cats
# took over ten minutes a run. The list pages (W8, W8e, W8n, W8c) read 100,000 pets, as on
# the embedded backends: at 20,000 a species holds 1,250 pets, too few for the page read
# through the composite index to stand apart from the one that sorts the species' pets.
# Its record goes to BENCH_POSTGRES_RECORD.
POSTGRES_BENCH_RECORDS ?= 20000
POSTGRES_BENCH_PETS ?= 100000
bench-postgres: deps
	$(FRESH_RELEASE_BUILD)
	@url=$$($(POSTGRES_SERVER) start .build/postgres-bench | tail -n 1) && [ -n "$$url" ] || exit 1; \
	trap '$(POSTGRES_SERVER) stop .build/postgres-bench' EXIT; trap 'exit 130' INT; trap 'exit 143' TERM; \
	$(RELEASE) run $(TOOLS) --scratch-path .build -c release depot-bench --backends postgres,raw-postgres --postgres-url "$$url" --records $(POSTGRES_BENCH_RECORDS) --pets $(POSTGRES_BENCH_PETS) --repetitions 3 --output "$(BENCH_POSTGRES_RECORD)" --commit "$(BENCH_COMMIT)"

# The examples: the outside engine of "Writing a backend" (Examples/SortedArrayEngine, a
# package of its own so that it reaches Depot's public API only; its source is a link to
# Tests/OutsideEngineTests/SortedArrayEngine.swift, which `swift test` runs too), through
# the conformance suite; and the example service (Examples/PetClinic, a package of its own that depends on Depot by
# path): its API tests on memory, SQLite, LMDB and PostgreSQL (a throwaway server), and the
# built server process stopped with SIGTERM under load. It builds in this package's .build,
# where the modules it shares with `make test` (Depot, swift-syntax, the rest of Depot's
# dependencies) are already built with the same flags and are not compiled again: only
# Hummingbird, swift-nio(-ssl) and the example itself are (about 2.5 minutes here, against
# about 5 in a folder of its own).
example-test: WITH_POSTGRES_DIR = .build/postgres-example
example-test: WITH_POSTGRES_RUN = $(SWIFT) test --package-path Examples/PetClinic --scratch-path .build
example-test: deps
	$(WITH_POSTGRES)
	$(SWIFT) test --package-path Examples/SortedArrayEngine --scratch-path .build

load-deps:
	@missing=""; \
	command -v wrk >/dev/null 2>&1 || missing="$$missing wrk"; \
	command -v curl >/dev/null 2>&1 || missing="$$missing curl"; \
	if [ -n "$$missing" ]; then \
		echo "Installing:$$missing"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

# The HTTP load benchmark (scripts/load/run.sh): the example in release mode on loopback,
# one backend after another (memory, SQLite, LMDB), driven by wrk through 80 % reads by id,
# 10 % list pages and 10 % writes for LOAD_SECONDS (15) each, then the list page alone and
# GET /health (the HTTP ceiling) against the same server; prints requests/s, p50/p99
# latency and errors, and writes load-report/{results.json,report.md}. About 3 minutes after
# the build.
load: deps load-deps
	$(SWIFT) build -c release --package-path Examples/PetClinic --product pet-clinic
	scripts/load/run.sh

# The same with PostgreSQL as a fourth backend, on a throwaway server (fsync off).
load-postgres: deps load-deps
	$(SWIFT) build -c release --package-path Examples/PetClinic --product pet-clinic
	@url=$$($(POSTGRES_SERVER) start .build/postgres-load | tail -n 1) && [ -n "$$url" ] || exit 1; \
	trap '$(POSTGRES_SERVER) stop .build/postgres-load' EXIT; trap 'exit 130' INT; trap 'exit 143' TERM; \
	LOAD_BACKENDS="memory sqlite lmdb postgres" LOAD_POSTGRES_URL="$$url" LOAD_OUTPUT=load-report-postgres scripts/load/run.sh

# A throwaway PostgreSQL server for running tests by hand: prints the URL to put in
# DEPOT_TEST_POSTGRES_URL (its data is wiped at every start); postgres-stop stops it.
postgres-server:
	@$(POSTGRES_SERVER) start .build/postgres

postgres-stop:
	@$(POSTGRES_SERVER) stop .build/postgres

# The README's table of performance verdicts, made from the latest three records under
# docs/benchmarks/ by scripts/bench-table.py and written between its marker comments.
bench-table:
	scripts/bench-table.py --write

# What CI checks before it builds anything: the README's table is the one the records make,
# and every relative link of the README and of docs/benchmarks/README.md names a file.
readme-check:
	scripts/bench-table.py --check
	scripts/check-links.py README.md docs/benchmarks/README.md

# The package-benchmark suites (regression tracking, GRDB comparison), from Benchmarks/.
benchmarks: deps
	cd Benchmarks && $(SWIFT) package --disable-sandbox benchmark
