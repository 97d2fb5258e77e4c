#!/bin/sh
# Builds the fuzz targets with libFuzzer and AddressSanitizer and runs each for a bounded
# time, then prints executions and crashes per target. Exits non-zero when any target found
# a crash (the input is kept under .build/fuzz/<target>-crash-*; see README.md).
#
#   FUZZ_SECONDS=60  seconds per target        FUZZ_TARGETS="url request ..."  which ones
#   SWIFT=swift      the swift command
set -u
cd "$(dirname "$0")"
SWIFT=${SWIFT:-swift}
SECONDS_PER_TARGET=${FUZZ_SECONDS:-60}
TARGETS=${FUZZ_TARGETS:-"url request record keys cursor schema"}
WORK=.build/fuzz

# ASan and libFuzzer's coverage on the command line reach every Swift module, so Depot's own
# code is instrumented and checked, not only the harness. libFuzzer itself (its main) is
# linked into DepotFuzz alone (Package.swift): -sanitize=fuzzer here would link it into
# the @Record macro's plugin executable too, which has no fuzz entry point and fails to link.
mkdir -p "$WORK"
echo "Building the fuzz targets (log: Fuzz/$WORK/build.log)..."
# Unless DEPOT_MACRO_PLUGIN names a built @Record plugin (the Makefile passes the debug
# build's, see Package.swift), the plugin is built with ASan and runs during the build: no
# leak report at its exit.
export ASAN_OPTIONS="detect_leaks=0:${ASAN_OPTIONS:-}"
if ! $SWIFT build -c debug -Xswiftc -sanitize=address -Xswiftc -sanitize-coverage=edge,trace-cmp,pc-table,inline-8bit-counters \
	--product DepotFuzz >"$WORK/build.log" 2>&1; then
	# The linker's notes about ASan's local symbols are noise; the errors are what matter.
	grep -v "ld.gold: warning: Cannot export local symbol" "$WORK/build.log" | tail -40
	exit 1
fi
BIN=.build/debug/DepotFuzz
# DepotFuzz depends on Depot without its PostgreSQL trait, as an application on SQLite or
# LMDB does: such an application must not link libpq (Package.swift, the trait).
if ldd "$BIN" | grep -q 'libpq\.so'; then
	echo "DepotFuzz links libpq although it depends on Depot without the PostgreSQL trait:"
	ldd "$BIN" | grep libpq
	exit 1
fi

# Leak reports would be the Swift runtime's caches; the Swift backtracer cannot run under ASan.
export ASAN_OPTIONS="detect_leaks=0:${ASAN_OPTIONS:-}"
export SWIFT_BACKTRACE=enable=no

status=0
summary=""
for target in $TARGETS; do
	mkdir -p "$WORK/$target"
	rm -f "$WORK/$target"-crash-* "$WORK/$target"-timeout-* "$WORK/$target"-oom-*
	log="$WORK/$target.log"
	# The targets' scratch stores; a crashed run cannot remove its own.
	rm -rf "$WORK/tmp" && mkdir -p "$WORK/tmp"
	dict=""
	[ -f "$target.dict" ] && dict="-dict=$target.dict"
	# New inputs go to the first folder (scratch); the committed seeds and regressions
	# (Corpus/<target>, read recursively) run first, every time.
	TMPDIR="$PWD/$WORK/tmp" "$BIN" "$target" "$WORK/$target" "Corpus/$target" -max_total_time="$SECONDS_PER_TARGET" -timeout=20 \
		-rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$WORK/$target-" $dict >"$log" 2>&1
	rc=$?
	executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
	found=$(ls "$WORK/$target"-crash-* "$WORK/$target"-timeout-* "$WORK/$target"-oom-* 2>/dev/null | wc -l)
	if [ "$rc" -ne 0 ] && [ "$found" -eq 0 ]; then found=1; fi
	line=$(printf "%-8s executions: %-9s crashes: %s" "$target" "${executions:-0}" "$found")
	echo "$line"
	summary="$summary$line\n"
	if [ "$found" -ne 0 ]; then
		status=1
		grep -E "property violated|Fatal error|runtime failure|ERROR: AddressSanitizer|ERROR: libFuzzer|SUMMARY" "$log" | head -3 | sed 's/^/    /'
		for file in "$WORK/$target"-crash-* "$WORK/$target"-timeout-* "$WORK/$target"-oom-*; do
			[ -f "$file" ] && echo "    input: Fuzz/$file (reproduce: Fuzz/$BIN $target Fuzz/$file; log: Fuzz/$log)"
		done
	fi
done
echo
echo "Fuzzing figures (${SECONDS_PER_TARGET}s per target):"
printf "$summary"
exit $status
