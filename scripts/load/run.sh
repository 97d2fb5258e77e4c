#!/usr/bin/env bash
# `make load`: the HTTP load benchmark. Starts the release build of Examples/PetClinic on
# loopback for each backend in turn, seeds it through its own API (one owner, LOAD_PETS pets
# by bulk import), warms it up, drives it with wrk through a fixed mix (scripts/load/mix.lua:
# 80 % reads by id, 10 % list pages, 10 % writes) for LOAD_SECONDS, then stops it with
# SIGTERM and checks it exits 0. Prints a table and writes LOAD_OUTPUT/results.json and
# report.md. Only loopback; every step is bounded in time.
#
#   LOAD_BACKENDS      backends, in order (default "memory sqlite lmdb"; add postgres with
#                      LOAD_POSTGRES_URL set, which `make load-postgres` does)
#   LOAD_SCENARIOS     what wrk sends, each measured in turn against the same server (default
#                      "mix list health": the mix, the list page alone, and GET /health,
#                      which touches no store and gives the machine's HTTP ceiling; also
#                      "lookup" and "create", the mix's other two requests alone, to see
#                      which of them makes the mix's tail)
#   LOAD_SECONDS       measured seconds per backend and scenario (15)
#   LOAD_CONNECTIONS   concurrent connections (32); LOAD_THREADS wrk threads (2)
#   LOAD_PETS          seeded pets (10000)
#   LOAD_OUTPUT        report folder (load-report)
#   LOAD_LOG_LEVEL     the server's log level (error); when set, each backend's server log
#                      is kept as LOAD_OUTPUT/<backend>-server.log (at debug, the stores log
#                      each WAL checkpoint and its duration, e.g.)
set -euo pipefail
cd "$(dirname "$0")/../.."

backends=${LOAD_BACKENDS:-memory sqlite lmdb}
scenarios=${LOAD_SCENARIOS:-mix list health}
for scenario in $scenarios; do
    case "$scenario" in mix|list|lookup|create|health) ;; *) echo "load: unknown scenario $scenario (mix, list, lookup, create, health)" >&2; exit 1 ;; esac
done
[ -n "${scenarios// }" ] || { echo "load: LOAD_SCENARIOS names no scenario (mix, list, lookup, create, health)" >&2; exit 1; }
seconds=${LOAD_SECONDS:-15}
connections=${LOAD_CONNECTIONS:-32}
threads=${LOAD_THREADS:-2}
pets=${LOAD_PETS:-10000}
output=${LOAD_OUTPUT:-load-report}
binary=${LOAD_BINARY:-Examples/PetClinic/.build/release/pet-clinic}
log_level=${LOAD_LOG_LEVEL:-error}
case "$log_level" in trace|debug|info|notice|warning|error|critical) ;; *) echo "load: LOAD_LOG_LEVEL is one of trace, debug, info, notice, warning, error, critical" >&2; exit 1 ;; esac

for tool in wrk curl; do
    command -v "$tool" >/dev/null || { echo "load: $tool is missing (make load installs it)" >&2; exit 1; }
done
[ -x "$binary" ] || { echo "load: $binary is missing (make load builds it)" >&2; exit 1; }
case "$seconds$connections$threads$pets" in *[!0-9]*) echo "load: LOAD_SECONDS, LOAD_CONNECTIONS, LOAD_THREADS and LOAD_PETS are whole numbers" >&2; exit 1 ;; esac

work=$(mktemp -d)
server=""
cleanup() {
    if [ -n "$server" ] && kill -0 "$server" 2>/dev/null; then kill -KILL "$server" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The seeded pets: ids 00000000-0000-4000-8000-<index in 12 hex digits>, which mix.lua reads
# back at random; one owner for all of them.
seed_file() {
    awk -v n="$pets" -v owner="$1" 'BEGIN {
        split("cat dog parrot", species, " ")
        printf "["
        for (i = 0; i < n; i++) {
            printf "%s{\"id\":\"00000000-0000-4000-8000-%012x\",\"ownerID\":\"%s\",\"name\":\"pet-%d\",\"species\":\"%s\",\"birthYear\":%d}", (i ? "," : ""), i, owner, i, species[i % 3 + 1], 2000 + i % 25
        }
        printf "]"
    }' > "$work/seed.json"
}

rows=()
for backend in $backends; do
    case "$backend" in
        memory) url="memory:" ;;
        sqlite) url="sqlite://$work/clinic.sqlite" ;;
        lmdb) url="lmdb://$work/clinic.lmdb" ;;
        postgres)
            [ -n "${LOAD_POSTGRES_URL:-}" ] || { echo "load: postgres needs LOAD_POSTGRES_URL" >&2; exit 1; }
            separator='?'; case "$LOAD_POSTGRES_URL" in *\?*) separator='&' ;; esac
            url="$LOAD_POSTGRES_URL${separator}schema=load_$(date +%s)" ;;
        *) echo "load: unknown backend $backend (memory, sqlite, lmdb, postgres)" >&2; exit 1 ;;
    esac
    echo "== $backend"
    DEPOT_STORE_URL="$url" PORT=0 LOG_LEVEL="$log_level" "$binary" > "$work/$backend.out" 2> "$work/$backend.err" &
    server=$!
    port=""
    for _ in $(seq 1 600); do
        port=$(sed -n 's/^pet-clinic listening on .*:\([0-9]*\)$/\1/p' "$work/$backend.out" | head -n 1)
        [ -n "$port" ] && break
        kill -0 "$server" 2>/dev/null || { echo "load: the server ended before listening:" >&2; cat "$work/$backend.err" >&2; exit 1; }
        sleep 0.1
    done
    [ -n "$port" ] || { echo "load: the server did not listen within 60 s" >&2; exit 1; }
    base="http://127.0.0.1:$port"

    owner=$(curl -sf --max-time 10 "$base/owners" -H 'content-type: application/json' -d '{"name":"Load","city":"Loopback"}' | sed -n 's/.*"id":"\([^"]*\)".*/\1/p')
    [ -n "$owner" ] || { echo "load: could not create the owner" >&2; exit 1; }
    seed_file "$owner"
    curl -sf --max-time 120 "$base/pets/import" -H 'content-type: application/json' --data-binary "@$work/seed.json" > "$work/import.json" \
        || { echo "load: the seed import failed" >&2; exit 1; }

    # Per scenario: a warm-up (not measured), then the measured run.
    lines=()
    for scenario in $scenarios; do
        SCENARIO=$scenario PETS=$pets OWNER=$owner wrk -t"$threads" -c"$connections" -d3s --timeout 5s -s scripts/load/mix.lua "$base" > /dev/null
        SCENARIO=$scenario PETS=$pets OWNER=$owner wrk -t"$threads" -c"$connections" -d"${seconds}s" --timeout 5s --latency -s scripts/load/mix.lua "$base" > "$work/$backend-$scenario.wrk"
        line=$(sed -n 's/^LOAD //p' "$work/$backend-$scenario.wrk")
        [ -n "$line" ] || { echo "load: wrk printed no summary:" >&2; cat "$work/$backend-$scenario.wrk" >&2; exit 1; }
        echo "   $scenario: $line"
        lines+=("$scenario $line")
    done

    kill -TERM "$server"
    status=0
    wait "$server" || status=$?
    server=""
    if [ -n "${LOAD_LOG_LEVEL:-}" ]; then
        mkdir -p "$output"
        cp "$work/$backend.err" "$output/$backend-server.log"
    fi
    for entry in "${lines[@]}"; do
        scenario=${entry%% *}
        fields=${entry#* \{}
        rows+=("{\"backend\":\"$backend\",\"scenario\":\"$scenario\",${fields%\}},\"shutdownStatus\":$status}")
    done
    echo "   exit after SIGTERM: $status"
    [ "$status" = 0 ] || { echo "load: the server exited $status after SIGTERM:" >&2; tail -20 "$work/$backend.err" >&2; exit 1; }
done

cores=$(nproc)
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
mkdir -p "$output"
{
    printf '{"date":"%s","cores":%s,"cpu":"%s","seconds":%s,"connections":%s,"wrkThreads":%s,"seededPets":%s,' \
        "$date" "$cores" "${cpu//\"/}" "$seconds" "$connections" "$threads" "$pets"
    printf '"mix":"80%% GET /pets/{id}, 10%% GET /pets?species=&sort=name&limit=20, 10%% POST /pets","results":['
    (IFS=,; printf '%s' "${rows[*]}")
    printf ']}\n'
} > "$output/results.json"

table() {
    echo "| backend | scenario | requests/s | p50 | p90 | p99 | max | errors |"
    echo "|---|---|---:|---:|---:|---:|---:|---:|"
    for row in "${rows[@]}"; do
        echo "$row" | awk '{
            match($0, /"backend":"[^"]*"/); b = substr($0, RSTART + 11, RLENGTH - 12)
            match($0, /"scenario":"[^"]*"/); sc = substr($0, RSTART + 12, RLENGTH - 13)
            split("requestsPerSecond p50us p90us p99us maxus errors", keys, " ")
            for (k in keys) { if (match($0, "\"" keys[k] "\":[0-9.]+")) v[keys[k]] = substr($0, RSTART + length(keys[k]) + 3, RLENGTH - length(keys[k]) - 3) }
            printf "| %s | %s | %.0f | %.2f ms | %.2f ms | %.2f ms | %.1f ms | %d |\n", b, sc, v["requestsPerSecond"], v["p50us"] / 1000, v["p90us"] / 1000, v["p99us"] / 1000, v["maxus"] / 1000, v["errors"]
        }'
    done
}
{
    echo "# PetClinic under HTTP load"
    echo
    echo "$date; $cores cores ($cpu); wrk -t$threads -c$connections, ${seconds} s per backend and scenario after a 3 s warm-up;"
    echo "$pets pets seeded; scenarios: mix (80 % GET /pets/{id}, 10 % a page of 20 by species and name, 10 % POST /pets),"
    echo "list (the page alone), lookup (GET /pets/{id} alone), create (POST /pets alone), health (GET /health, no store:"
    echo "the HTTP ceiling), those asked for, each against the same server in turn."
    echo "Server and wrk share the machine's cores; errors count socket errors and non-2xx answers."
    echo
    table
} > "$output/report.md"
echo
table
echo
echo "Wrote $output/results.json and $output/report.md"
