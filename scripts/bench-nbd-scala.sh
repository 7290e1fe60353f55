#!/usr/bin/env bash
# Serves `scala` 4+1 over five files on one reactor with `flashrig serve nbd` and runs six
# parallel fio nbd jobs against it (random reads and writes, 4-128 KiB requests, queue depth
# 16 each), then prints the read and write latency (mean, p50, p99, p99.9, max) and the rates.
# This is the served run of issue 16's "Performance" paragraph (docs/benchmarks.md, "`scala`
# served over NBD").
#
#   scripts/bench-nbd-scala.sh                    # release build, 30 s
#   RUNTIME=10 scripts/bench-nbd-scala.sh         # shorter
#   FLASHRIG=/path/to/flashrig SKIP_BUILD=1 scripts/bench-nbd-scala.sh
#   STATS=out.json scripts/bench-nbd-scala.sh     # keep the stack's counters (flashrig serve --stats)
#   DIR=/mnt/disk scripts/bench-nbd-scala.sh      # where the member files go (default: a
#                                                 # scratch directory under /var/tmp)
#
# Needs fio with the nbd engine (libnbd). The members are created fresh for every run and
# removed afterwards; the server is stopped with SIGINT (it flushes the array first).
set -euo pipefail
cd "$(dirname "$0")/.."

RUNTIME=${RUNTIME:-30}
MEMBER=${MEMBER:-1GiB}
JOBS=${JOBS:-6}
QD=${QD:-16}
BSSPLIT=${BSSPLIT:-4k/20:8k/16:16k/16:32k/16:64k/16:128k/16}

command -v fio >/dev/null || { echo "bench-nbd-scala: fio is not installed" >&2; exit 2; }
fio --enghelp=nbd 2>/dev/null | grep -q uri || { echo "bench-nbd-scala: fio has no nbd engine" >&2; exit 2; }

if [ -z "${SKIP_BUILD:-}" ]; then
    cargo build --release -q
fi
FLASHRIG=${FLASHRIG:-$PWD/target/release/flashrig}

WORK=$(mktemp -d "${DIR:-/var/tmp}/flashrig-nbd-scala.XXXXXX")
SERVER_PID=""
cleanup() {
    if [ -n "$SERVER_PID" ]; then kill -INT "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

cat > "$WORK/scala.toml" <<TOML
runtime = "real"
reactors = 1
[device]
type = "scala"
k = 4
m = 1
chunk = "64KiB"
member = { type = "file", path = "$WORK/disk{i}.img", size = "$MEMBER", md_bytes = 16 }
TOML

"$FLASHRIG" serve nbd "$WORK/scala.toml" --socket "$WORK/nbd.sock" --stats "$WORK/stats.json" \
    2>"$WORK/server.log" &
SERVER_PID=$!
URI=""
for _ in $(seq 600); do
    URI=$(sed -n 's/^serving .* at \([^ ]*\) on .*/\1/p' "$WORK/server.log")
    [ -n "$URI" ] && break
    sleep 0.05
done
[ -n "$URI" ] || { echo "bench-nbd-scala: the server did not start:" >&2; cat "$WORK/server.log" >&2; exit 1; }

fio --name=mixed --ioengine=nbd --uri="$URI" --rw=randrw --bssplit="$BSSPLIT" \
    --iodepth="$QD" --numjobs="$JOBS" --group_reporting --runtime="$RUNTIME" --time_based \
    --output-format=json --output="$WORK/fio.json" >/dev/null

python3 - "$WORK/fio.json" <<'PY'
import json, sys
job = json.load(open(sys.argv[1]))["jobs"][0]
print("| direction | IOPS | MiB/s | mean ms | p50 ms | p99 ms | p99.9 ms | max ms |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for d in ("read", "write"):
    s = job[d]
    lat = s["clat_ns"]
    pct = lat.get("percentile", {})
    ms = lambda ns: ns / 1e6
    print(f"| {d} | {s['iops']:.0f} | {s['bw'] / 1024:.1f} | {ms(lat['mean']):.1f} | "
          f"{ms(pct.get('50.000000', 0)):.1f} | {ms(pct.get('99.000000', 0)):.1f} | "
          f"{ms(pct.get('99.900000', 0)):.1f} | {ms(lat['max']):.1f} |")
PY

# The server writes the stack's counters when it stops: what the engine did meanwhile.
kill -INT "$SERVER_PID"
wait "$SERVER_PID" || true
SERVER_PID=""
if [ -n "${STATS:-}" ]; then cp "$WORK/stats.json" "$STATS"; fi
python3 - "$WORK/stats.json" <<'PY'
import json, sys
top = json.load(open(sys.argv[1]))
c = top.get("counters", {})
keys = [k for k in sorted(c) if any(w in k for w in ("conver", "gc", "checkpoint", "grant", "recall"))]
print("scala counters: " + ", ".join(f"{k} {c[k]}" for k in keys))
PY
