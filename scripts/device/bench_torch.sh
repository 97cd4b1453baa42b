#!/usr/bin/env bash
# Device call 2 of the benchmark: the PyTorch baseline (tools/torch_ref, eager) over the 10
# default payloads by the same rules (15 steps, CFG 7.5 every step, serial CFG, warm-up,
# 3 repeats), a second engine run on three payloads (do two runs of the same path agree
# within their spread?), and torch.compile on the smallest and largest payload.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
source scripts/device/prepare_model.sh
args=(--checkpoint $W/shape.json --manifest $W/pl/manifest.json --steps 15 --rescale-t 3 --cfg 7.5
      --interval 0 1 --guidance-rescale 0 --cfg-mode serial --device cuda --time --quiet)
assets=(); for a in $DEFAULT_ASSETS; do assets+=(--asset $a); done
python3 tools/torch_ref/run.py "${args[@]}" "${assets[@]}" --warmup 1 --repeat 3 \
  --timing-json "$OUT/torch-eager.json" > "$OUT/torch-eager.log" 2>&1
echo "torch eager exit $?"; grep -E "median" "$OUT/torch-eager.log" | tail -n 10
$BIN/sparse3d bench --protocol repeated --checkpoint $W/shape.json --manifest $W/pl/manifest.json \
  --assets $SMALL $MID $LARGE --paths pure_eager --repeats 3 --warmup 1 --no-torch \
  --out "$OUT" --stem bench-engine-rerun > "$OUT/bench-engine-rerun.log" 2>&1
echo "engine rerun exit $?"
if [ "${COMPILE:-1}" = 1 ]; then
  python3 tools/torch_ref/run.py "${args[@]}" --asset $SMALL --asset $LARGE --warmup 1 --repeat 2 \
    --compile blocks --timing-json "$OUT/torch-compile.json" > "$OUT/torch-compile.log" 2>&1
  echo "torch compile exit $?"; tail -n 3 "$OUT/torch-compile.log"
fi
tar -C "$OUT" -czf "$OUT/logs.tgz" torch-eager.log bench-engine-rerun.log $( [ -f "$OUT/torch-compile.log" ] && echo torch-compile.log)
rm -f "$OUT"/*.log
