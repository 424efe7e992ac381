#!/usr/bin/env bash
# User-space instructions per relayed frame, bare relay against voxgate, counted by callgrind.
#
# `bench run` times CPU per frame, and on a shared or virtual machine two runs of the same binary
# differ by several per cent. An instruction count does not drift: this runs one short `bench run`
# per target with the target (the bench's relay, then voxgate) under valgrind's callgrind, counts
# only inside an 8 s window of its N-session phase, and divides by the frames it wrote in that
# window (calls of tungstenite's `Frame::format_into_buf`, one per frame sent). It counts user
# space only: system calls and the kernel's share are not in it (`bench run` has those).
#
# memset is listed apart: valgrind counts each byte of a `rep stosb` (glibc's memset above 2 KiB)
# as an instruction, which overstates its cost many times over.
#
#   bench/callgrind.sh [SESSIONS] [VOXGATE]    # default 10 and target/production/voxgate
#
# Needs valgrind (`apt-get install valgrind`) and a production build with symbols, the plain one
# (`cargo build --profile production --workspace --bins`): the profile-guided build that ships
# (scripts/build-pgo) inlines `Frame::format_into_buf`, the frame counter, and the script stops
# with no frames counted. About 2 minutes. The servers are stopped with SIGTERM and must drain
# and exit under valgrind within the bench's grace (15 s).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
sessions=${1:-10}
voxgate=$(realpath "${2:-$root/target/production/voxgate}")
bench=$root/target/production/bench
command -v valgrind >/dev/null || { echo "needs valgrind: apt-get install valgrind" >&2; exit 1; }
[[ -x $bench && -x $voxgate ]] || { echo "build first: cargo build --profile production --workspace --bins" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
grind="valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=$work/out.%p"
# `bench run` starts "voxgate" with a cleared environment but for the upstream's URL: the relay is
# started in its place through the same door, so both run under the same load generator, on as
# many threads (`--threads 0`: one per CPU, voxgate's default, unless the session threads are set).
printf '#!/bin/sh\nexec %s %q relay --upstream "$VOXGATE_UPSTREAM__URL" --threads "${VOXGATE_SERVER__SESSION_THREADS:-0}"\n' "$grind" "$bench" > "$work/relay"
printf '#!/bin/sh\nexec %s %q "$@"\n' "$grind" "$voxgate" > "$work/voxgate"
chmod +x "$work/relay" "$work/voxgate"

for target in relay voxgate; do
    "$bench" run --sessions "$sessions" --no-capacity --idle-sessions 0 --tool-calls 0 --rounds 1 \
        --warmup 2 --measure 14 --clock spread --voxgate "$work/$target" > "$work/$target.md" 2> "$work/$target.err" &
    run=$!
    until grep -q "voxgate N=" "$work/$target.err"; do
        kill -0 "$run" 2>/dev/null || { cat "$work/$target.err" >&2; exit 1; }
        sleep 0.2
    done
    sleep 4
    pid=$(pgrep -n -f -- "--callgrind-out-file=$work/")
    callgrind_control -i on "$pid" > /dev/null 2>&1
    sleep 8
    callgrind_control -d "$pid" > /dev/null 2>&1
    callgrind_control -i off "$pid" > /dev/null 2>&1
    wait "$run" || { cat "$work/$target.err" >&2; exit 1; }
    mv "$(ls "$work"/out.*.1)" "$work/$target.cg"
    rm -f "$work"/out.*
done

python3 - "$work/relay.cg" "$work/voxgate.cg" "$sessions" <<'EOF'
import re, sys

def count(path):
    """Total instructions, memset's, and calls of Frame::format_into_buf (frames written)."""
    names, fn, total, memset, frames, callee = {}, None, 0, 0, 0, None
    for line in open(path):
        m = re.match(r'(c?fn)=\((\d+)\)(?: (.*))?', line)
        if m:
            kind, key, name = m.groups()
            if name:
                names[key] = name
            if kind == 'fn':
                fn = names[key]
            else:
                callee = names[key]
            continue
        if line.startswith('calls='):
            if callee and 'Frame::format_into_buf' in callee and 'format_into_buf' not in fn:
                frames += int(line.split()[0][len('calls='):])
            callee = 'inclusive'
            continue
        if line[:1] in '0123456789+-*':
            if callee == 'inclusive':
                callee = None
                continue
            parts = line.split()
            ir = int(parts[1]) if len(parts) > 1 else 0
            total += ir
            if 'memset' in (fn or ''):
                memset += ir
    return total, memset, frames

rows = {}
for target, path in zip(('bare relay', 'voxgate'), sys.argv[1:3]):
    total, memset, frames = count(path)
    if frames == 0:
        sys.exit(f"{target}: no calls of Frame::format_into_buf counted (a profile-guided build inlines it: use the plain production build)")
    rows[target] = (total / frames, (total - memset) / frames, memset / frames, frames)
print(f"User-space instructions per relayed frame (callgrind), N = {sys.argv[3]}, spread clock:\n")
print("| target | frames counted | all | without memset | memset |")
print("|---|---:|---:|---:|---:|")
for target, (all_, rest, memset, frames) in rows.items():
    print(f"| {target} | {frames:,} | {all_:,.0f} | {rest:,.0f} | {memset:,.0f} |")
relay, vox = rows['bare relay'], rows['voxgate']
print(f"| voxgate ÷ relay | | {vox[0] / relay[0]:.2f}× | {vox[1] / relay[1]:.2f}× | |")
EOF
