#!/usr/bin/env bash
# Device call 1 of the benchmark: `sparse3d profile` of one forward (full model, smallest
# asset), an ncu cross-check of the launch count (tiny model), and `sparse3d bench` of
# pure_eager over the 10 default payloads (15 steps, CFG 7.5 every step, serial CFG,
# 3 repeats). The PyTorch baseline runs in bench_torch.sh (one device call each fits the
# 10-minute limit); `sparse3d bench-report` merges them afterwards.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
source scripts/device/prepare_model.sh
$BIN/sparse3d info --json > "$OUT/fingerprint.json"
$BIN/sparse3d profile --checkpoint $W/shape.json --manifest $W/pl/manifest.json --asset $SMALL \
  --path pure_eager > "$OUT/profile-$SMALL.md" 2>&1
tail -n 4 "$OUT/profile-$SMALL.md"
G=.deps/golden_in
$BIN/sparse3d profile --checkpoint $G/tiny.json --manifest $G/payloads/manifest.json \
  --asset a02-box-250 --path pure_eager > "$OUT/profile-tiny.md" 2>&1
ncu --clock-control none --metrics gpu__time_duration.sum --csv $BIN/sparse3d profile \
  --checkpoint $G/tiny.json --manifest $G/payloads/manifest.json --asset a02-box-250 \
  --path pure_eager > "$OUT/ncu-tiny.csv" 2> "$OUT/ncu-tiny.err"
python3 - "$OUT/ncu-tiny.csv" "$OUT/profile-tiny.md" <<'PY' | tee "$OUT/ncu-crosscheck.txt"
import csv, sys, re
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
head, body = rows[0], rows[1:]
ids = {r[head.index("ID")] for r in body}
eng = re.search(r"launches in the whole process: (\d+)", open(sys.argv[2]).read())
print(f"ncu kernels in the whole process: {len(ids)}; engine launch counter: {eng.group(1) if eng else '?'}")
PY
$BIN/sparse3d bench --protocol repeated --checkpoint $W/shape.json --manifest $W/pl/manifest.json --assets default \
  --paths pure_eager --repeats 3 --warmup 1 --no-torch --out "$OUT" --stem bench-engine \
  > "$OUT/bench-engine.log" 2>&1
echo "bench exit $?"
grep -E "peaks|estimated" "$OUT/bench-engine.log"
tail -n 40 "$OUT/bench-engine.md"
# At most 8 files come back: the report, and everything else in one archive.
(cd "$OUT" && tar -czf logs.tgz *.log *.csv *.err *.txt profile-*.md fingerprint.json && \
  rm -f *.log *.csv *.err *.txt profile-*.md)
