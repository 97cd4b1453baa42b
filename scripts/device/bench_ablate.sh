#!/usr/bin/env bash
# Device call: `sparse3d bench --ablate` on three payloads (smallest, middle, largest) with
# batched CFG on, i.e. leave-one-out of batched_cfg against serial CFG, while nvidia-smi
# samples the clocks: its pure_eager cells are also a third run for the run-to-run check.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
source scripts/device/prepare_model.sh
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu \
  --format=csv -lms 1000 > "$OUT/clocks.csv" 2>&1 &
smi=$!
$BIN/sparse3d bench --protocol repeated --checkpoint $W/shape.json --manifest $W/pl/manifest.json \
  --assets $SMALL $MID $LARGE --paths pure_eager+batched_cfg --ablate --repeats 3 --warmup 1 \
  --no-torch --out "$OUT" --stem bench-ablate > "$OUT/bench-ablate.log" 2>&1
echo "bench exit $?"
kill $smi
python3 - "$OUT/clocks.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))[1:]
sm = [float(r[1].split()[0]) for r in rows if len(r) > 4 and r[1].strip()[0].isdigit()]
pw = [float(r[3].split()[0]) for r in rows if len(r) > 4 and r[3].strip()[0].isdigit()]
tc = [float(r[4]) for r in rows if len(r) > 4 and r[4].strip().isdigit()]
busy = [s for s, p in zip(sm, pw) if p > 200] or sm or [0]
pw = pw or [0]; tc = tc or [0]
print(f"samples {len(sm)}; SM clock under load (power > 200 W): min {min(busy):.0f} median {sorted(busy)[len(busy)//2]:.0f} max {max(busy):.0f} MHz; power max {max(pw):.0f} W; temperature {min(tc):.0f}-{max(tc):.0f} C")
PY
sed -n '/## Leave-one-out/,$p' "$OUT/bench-ablate.md" | head -20
(cd "$OUT" && tar -czf logs.tgz *.log clocks.csv && rm -f *.log clocks.csv)
