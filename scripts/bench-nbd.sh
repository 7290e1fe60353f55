#!/usr/bin/env bash
# Benchmarks `flashrig serve nbd` beside `nbdkit memory 1G` with fio's nbd engine (libnbd), over
# TCP on loopback and over a Unix socket, and prints a Markdown table.
#
#   scripts/bench-nbd.sh                # release build, 10 s per measurement
#   RUNTIME=3 scripts/bench-nbd.sh      # shorter
#   SERVERS="nbdkit ram-r1" TRANSPORTS=unix scripts/bench-nbd.sh
#
# Servers: nbdkit (memory 1G), ram-r1 and ram-r2 (flashrig, a 1 GiB `ram` device on 1 or 2
# reactors), scala (flashrig, `scala` 4+1 over 256 MiB `ram` members, md_bytes = 16, 2
# reactors). Each export is filled once with 1 MiB sequential writes before it is measured, so
# no measurement pays for first-touch allocation. Jobs, one fio connection each, time-based:
#   4k-randwrite-qd32, 64k-write-qd8, 1m-write-qd8, 4k-randread-qd32.
# Needs fio (with the nbd engine), nbdkit, nbdinfo. Runs only on 127.0.0.1 and in a scratch
# directory, and stops every server it started.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNTIME=${RUNTIME:-10}
SERVERS=${SERVERS:-"nbdkit ram-r1 ram-r2 scala"}
TRANSPORTS=${TRANSPORTS:-"tcp unix"}
PORT=${PORT:-10909}

for t in fio nbdkit nbdinfo; do
    command -v "$t" >/dev/null || { echo "bench-nbd: $t is not installed" >&2; exit 2; }
done
fio --enghelp=nbd 2>/dev/null | grep -q uri || { echo "bench-nbd: fio has no nbd engine" >&2; exit 2; }

if [ -z "${SKIP_BUILD:-}" ]; then
    cargo build --release -q
fi
FLASHRIG=${FLASHRIG:-$PWD/target/release/flashrig}

WORK=$(mktemp -d)
SERVER_PID=""
cleanup() {
    if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

cat > "$WORK/ram-r1.toml" <<TOML
runtime = "real"
reactors = 1
[device]
type = "ram"
capacity = "1GiB"
TOML
sed 's/^reactors = 1/reactors = 2/' "$WORK/ram-r1.toml" > "$WORK/ram-r2.toml"
cat > "$WORK/scala.toml" <<TOML
runtime = "real"
reactors = 2
[device]
type = "scala"
k = 4
m = 1
chunk = "64KiB"
member = { type = "ram", capacity = "256MiB", md_bytes = 16 }
TOML

# Starts server $1 on transport $2; sets URI and SERVER_PID.
start_server() {
    local name=$1 transport=$2
    local sock="$WORK/$name.sock"
    rm -f "$sock"
    if [ "$name" = nbdkit ]; then
        if [ "$transport" = tcp ]; then
            nbdkit -f -i 127.0.0.1 -p "$PORT" memory 1G 2>"$WORK/server.log" &
            URI="nbd://127.0.0.1:$PORT/"
        else
            nbdkit -f -U "$sock" memory 1G 2>"$WORK/server.log" &
            URI="nbd+unix:///?socket=$sock"
        fi
        SERVER_PID=$!
        for _ in $(seq 200); do nbdinfo --size "$URI" >/dev/null 2>&1 && return 0; sleep 0.05; done
    else
        if [ "$transport" = tcp ]; then
            "$FLASHRIG" serve nbd "$WORK/$name.toml" --tcp "127.0.0.1:$PORT" 2>"$WORK/server.log" &
        else
            "$FLASHRIG" serve nbd "$WORK/$name.toml" --socket "$sock" 2>"$WORK/server.log" &
        fi
        SERVER_PID=$!
        for _ in $(seq 600); do
            URI=$(sed -n 's/^serving .* at \([^ ]*\) on .*/\1/p' "$WORK/server.log")
            [ -n "$URI" ] && return 0
            sleep 0.05
        done
    fi
    echo "bench-nbd: $name did not start:" >&2; cat "$WORK/server.log" >&2; exit 1
}

stop_server() {
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
}

# fio on $URI: $1 rw, $2 bs, $3 iodepth; prints "IOPS MiB/s" (terse format: read fields 7-8,
# write fields 48-49, bandwidth in KiB/s).
run_fio() {
    local rw=$1 bs=$2 qd=$3 extra=("${@:4}")
    fio --name=bench --ioengine=nbd --uri="$URI" --rw="$rw" --bs="$bs" --iodepth="$qd" \
        --size="$SIZE" --output-format=terse --terse-version=3 "${extra[@]}" \
        | awk -F';' '$1 == 3 && NF > 100 { r_bw=$7; r_iops=$8; w_bw=$48; w_iops=$49;
                       if (w_iops > 0) printf "%d %.0f\n", w_iops, w_bw/1024;
                       else printf "%d %.0f\n", r_iops, r_bw/1024 }'
}

timed() { run_fio "$@" --runtime="$RUNTIME" --time_based --ramp_time=1; }

fmt_iops() { awk -v x="$1" 'BEGIN { printf "%.0fk", x/1000 }'; }

echo "| server | transport | 4k randwrite QD32 IOPS | 64k write QD8 MiB/s | 1M write QD8 MiB/s | 4k randread QD32 IOPS |"
echo "|---|---|---:|---:|---:|---:|"
for server in $SERVERS; do
    for transport in $TRANSPORTS; do
        start_server "$server" "$transport"
        SIZE=$(nbdinfo --size "$URI")
        # Fill the export once.
        run_fio write 1M 8 >/dev/null
        read -r rw4 _ < <(timed randwrite 4k 32)
        read -r _ bw64 < <(timed write 64k 8)
        read -r _ bw1m < <(timed write 1M 8)
        read -r rr4 _ < <(timed randread 4k 32)
        stop_server
        case $server in
            nbdkit) label="nbdkit memory 1G" ;;
            ram-r1) label="flashrig ram 1 GiB, 1 reactor" ;;
            ram-r2) label="flashrig ram 1 GiB, 2 reactors" ;;
            scala) label="flashrig scala 4+1 over ram, 2 reactors" ;;
            *) label=$server ;;
        esac
        echo "| $label | $transport | $(fmt_iops "$rw4") | $bw64 | $bw1m | $(fmt_iops "$rr4") |"
    done
done
