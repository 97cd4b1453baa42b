#!/usr/bin/env bash
# Suite `bench`: the engine benchmarks on the full trellis2-shape-1024 synthetic checkpoint and
# the benchmark payloads (prepare_model.sh; /tmp/s3d, kept while the machine stays warm).
# Each mode is about one 10-minute device call; each writes under $OUT/<mode> (logs in
# logs.tgz / results.tgz, the reports beside them) and prints its table last.
#   paths         `sparse3d bench` of PATHS ("pure_eager beyond") over the 10 default payloads,
#                 2 repeats interleaved, the instrumented loop on 1 of the 15 protocol steps,
#                 no PyTorch baseline (report STEM, library-bench; BENCH_TIMEOUT 460); then
#                 `bench-kernels` when KERNELS is set.
#   engine        `sparse3d profile` of one forward (full model, smallest asset), an ncu
#                 cross-check of the launch count (tiny model, .deps/golden_in), and `bench` of
#                 pure_eager over the 10 default payloads (serial CFG, 3 repeats).
#   torch         the PyTorch baseline (tools/torch_ref, eager) over the 10 default payloads by
#                 the same rules (3 repeats), a second engine run on three payloads, and
#                 torch.compile on the smallest and largest payload (COMPILE=0: not).
#                 `sparse3d bench-report` merges it with engine's report afterwards.
#   service       the README's headline: `bench --protocol both` per path (PATHS, "beyond fast"),
#                 each a fresh engine with an empty qualification cache, a warm-up request,
#                 every payload's first request, then the repeated protocol, then the PyTorch
#                 baseline (--service) in the same run. REPEATS (1), ASSETS (default),
#                 WARMUP_TOKENS (0), INSTRUMENT_STEPS (1), TORCH=0 (no baseline), TIMEOUT_S (480).
#   null          the null-context paths against pure_eager over the 10 default payloads.
#   beyond        `beyond` against pure_eager, canonical_cache_combined and beyond without
#                 graphs over the 10 default payloads (2 repeats).
#   beyond-ablate leave-one-out over `beyond` (each flag off in turn) at three token counts.
#   cfg-ablate    leave-one-out of batched_cfg against serial CFG on the smallest, middle and
#                 largest payload, nvidia-smi sampling the clocks.
#   throughput    multi-asset batching: `bench --batch 2 4 8` at a small and a mid token count,
#                 canonical_cache_combined and beyond.
#   graph-choice  `run --graph-choice` on the committed beyond bench at two token counts, and a
#                 per-op profile of one beyond forward.
#   first-request what a request at a token count the engine has not met costs against its
#                 repeat (sparse3d run per path: RUNS, "beyond fast", PATH or PATH@B with B the
#                 smallest cuDNN sequence-length bucket; SAMPLER, released), then guidance 1.
#                 TESTS (a gtest filter): those GPU tests first (suite unit).
#   fusion        the fused kernels' bandwidth vs the copy bandwidth (bench-kernels) and
#                 `sparse3d profile` of one forward for pure_eager and kernel_fusion.
#   fast          the tolerance kernels, searched plans, chunked MLP and memory, in FAST_PARTS
#                 (default "kernels bench torch lowmem"; also memory, ablate, limited):
#                 kernels  bench-kernels at 3,664 and 30,227 tokens
#                 bench    pure_eager, beyond, fast over the 10 default payloads (about 7 min)
#                 memory   the three paths on the smallest and largest payload (peaks)
#                 ablate   leave-one-out over fast's flags on the smallest and middle payload
#                 limited  fast under --max-device-memory per asset (LIMITS="asset:GiB ...")
#                 torch    the PyTorch model on the 10 payloads (time and peak), merged report
#                 lowmem   49,152 tokens: fast vs low_memory, and low_memory under 8 GiB
#   dense         the dense sparse-structure model (trellis2-ss-16, `dense` payloads):
#                 pure_eager, beyond and the oracle's PyTorch eager, released_sparse_structure
#                 settings, plus multi-structure batches BATCH ("2 4 8"; empty: none).
# Default: paths.
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 1
source scripts/device/env.sh
source scripts/device/suites/lib.sh

mode_paths() {
  source scripts/device/prepare_model.sh
  PATHS=${PATHS:-"pure_eager beyond"}
  STEM=${STEM:-library-bench}
  $BIN/sparse3d info > "$OUT/fingerprint.txt" 2>&1
  timeout ${BENCH_TIMEOUT:-460} $BIN/sparse3d bench --protocol repeated --checkpoint $W/shape.json --manifest $W/pl/manifest.json \
    --assets default --paths $PATHS --repeats 2 --warmup 1 --instrument-steps 1 --no-torch \
    --out "$OUT" --stem $STEM > "$OUT/bench.log" 2>&1
  track $?; echo "bench exit $?"
  grep -iE "peaks|estimated|fallback|warning|error" "$OUT/bench.log" | head -12
  if [ -n "${KERNELS:-}" ]; then
    timeout 60 $BIN/sparse3d bench-kernels --checkpoint $W/shape.json --out "$OUT" > "$OUT/kernels.log" 2>&1
    track $?; echo "bench-kernels exit $?"
  fi
  (cd "$OUT" && tar -czf logs.tgz *.log && rm -f *.log)
  sed -n '/## Denoise latency/,/## Null/p' "$OUT/$STEM.md" | head -40
}

mode_engine() {
  source scripts/device/prepare_model.sh
  $BIN/sparse3d info --json > "$OUT/fingerprint.json"
  $BIN/sparse3d profile --checkpoint $W/shape.json --manifest $W/pl/manifest.json --asset $SMALL \
    --path pure_eager > "$OUT/profile-$SMALL.md" 2>&1
  track $?
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
  track $?; echo "bench exit $?"
  grep -E "peaks|estimated" "$OUT/bench-engine.log"
  tail -n 40 "$OUT/bench-engine.md"
  (cd "$OUT" && tar -czf logs.tgz *.log *.csv *.err *.txt profile-*.md fingerprint.json && \
    rm -f *.log *.csv *.err *.txt profile-*.md)
}

mode_torch() {
  source scripts/device/prepare_model.sh
  args=(--checkpoint $W/shape.json --manifest $W/pl/manifest.json --steps 15 --rescale-t 3 --cfg 7.5
        --interval 0 1 --guidance-rescale 0 --cfg-mode serial --device cuda --time --quiet)
  assets=(); for a in $DEFAULT_ASSETS; do assets+=(--asset $a); done
  python3 tools/torch_ref/run.py "${args[@]}" "${assets[@]}" --warmup 1 --repeat 3 \
    --timing-json "$OUT/torch-eager.json" > "$OUT/torch-eager.log" 2>&1
  track $?; echo "torch eager exit $?"; grep -E "median" "$OUT/torch-eager.log" | tail -n 10
  $BIN/sparse3d bench --protocol repeated --checkpoint $W/shape.json --manifest $W/pl/manifest.json \
    --assets $SMALL $MID $LARGE --paths pure_eager --repeats 3 --warmup 1 --no-torch \
    --out "$OUT" --stem bench-engine-rerun > "$OUT/bench-engine-rerun.log" 2>&1
  track $?; echo "engine rerun exit $?"
  if [ "${COMPILE:-1}" = 1 ]; then
    python3 tools/torch_ref/run.py "${args[@]}" --asset $SMALL --asset $LARGE --warmup 1 --repeat 2 \
      --compile blocks --timing-json "$OUT/torch-compile.json" > "$OUT/torch-compile.log" 2>&1
    track $?; echo "torch compile exit $?"; tail -n 3 "$OUT/torch-compile.log"
  fi
  tar -C "$OUT" -czf "$OUT/logs.tgz" torch-eager.log bench-engine-rerun.log $( [ -f "$OUT/torch-compile.log" ] && echo torch-compile.log)
  rm -f "$OUT"/*.log
}

mode_service() {
  source scripts/device/prepare_model.sh
  R=$OUT/r; mkdir -p $R
  $BIN/sparse3d info > $R/fingerprint.txt 2>&1
  summary=("machine: $(nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader 2>/dev/null | head -1)")
  torch=(--torch tools/torch_ref/run.py --python python3)
  [ "${TORCH:-1}" = 0 ] && torch=(--no-torch)
  rm -f /tmp/sparse3d_torch_eager.json /tmp/sparse3d_torch_eager.json.log
  t0=$(date +%s)
  timeout "${TIMEOUT_S:-480}" $BIN/sparse3d bench --checkpoint $W/shape.json \
    --manifest $W/pl/manifest.json --assets ${ASSETS:-default} --paths ${PATHS:-beyond fast} \
    --protocol both --repeats "${REPEATS:-1}" --warmup 1 --instrument-steps "${INSTRUMENT_STEPS:-1}" \
    --warmup-tokens "${WARMUP_TOKENS:-0}" "${torch[@]}" --out $R --stem service > $R/service.log 2>&1
  rc=$?
  track $rc
  summary+=("sparse3d bench --protocol both: exit $rc after $(( $(date +%s) - t0 )) s$( [ $rc = 124 ] && echo ' (TIMED OUT: the engine-only report is kept)')")
  [ -f /tmp/sparse3d_torch_eager.json ] && cp /tmp/sparse3d_torch_eager.json $R/torch-eager-service.json
  [ -f /tmp/sparse3d_torch_eager.json.log ] && cp /tmp/sparse3d_torch_eager.json.log $R/torch-eager-service.log
  tar -C $R -czf "$OUT/results.tgz" .
  echo "---- summary"
  printf '%s\n' "${summary[@]}"
  grep -E "^\[warm-up\]|did not run|^sparse3d: error" $R/service.log | head -8
  sed -n '/^fallbacks:/,/^$/p' $R/service.log | head -8
  if [ -f $R/service.md ]; then
    grep -E "^- Settings" $R/service.md | cut -c1-400
    echo
    # Where the first requests spent their time, then the two headline tables last.
    sed -n '/^## Service protocol: inside/,/^## Repeated protocol/p' $R/service.md | grep -E "^\|"
    echo
    sed -n '/^## Service protocol: each asset/,/^## Service protocol: inside/p' $R/service.md |
      grep -E "^\||^## Service protocol: (each|speedup)"
  else
    echo "no report (see $R/service.log):"; tail -20 $R/service.log
  fi
}

mode_null() {
  source scripts/device/prepare_model.sh
  $BIN/sparse3d bench --protocol repeated --checkpoint $W/shape.json --manifest $W/pl/manifest.json --assets default \
    --paths pure_eager prior_exact_null canonical_cache_null canonical_cache_null+cond_kv_cache \
    --repeats 2 --warmup 1 --instrument-steps 1 --no-torch --out "$OUT" --stem null-context \
    > "$OUT/bench-null.log" 2>&1
  track $?; echo "bench exit $?"
  grep -E "peaks|estimated|qualif|M =|fallback" "$OUT/bench-null.log" | head -12
  sed -n '/## Summary/,/## How/p' "$OUT/null-context.md"
  (cd "$OUT" && tar -czf logs.tgz *.log && rm -f *.log)
}

mode_beyond() {
  source scripts/device/prepare_model.sh
  timeout 500 $BIN/sparse3d bench --protocol repeated --checkpoint $W/shape.json --manifest $W/pl/manifest.json --assets default \
    --paths pure_eager canonical_cache_combined beyond beyond-cuda_graphs \
    --also-compare canonical_cache_combined \
    --repeats 2 --warmup 1 --instrument-steps 1 --no-torch --out "$OUT" --stem beyond \
    > "$OUT/bench-beyond.log" 2>&1
  track $?; echo "bench exit $?"
  grep -iE "fallback|warning|error" "$OUT/bench-beyond.log" | head
  sed -n '/## Denoise latency/,/## Null/p' "$OUT/beyond.md"
  (cd "$OUT" && tar -czf logs.tgz *.log && rm -f *.log)
}

mode_beyond_ablate() {
  source scripts/device/prepare_model.sh
  timeout $(( 575 - SECONDS > 60 ? 575 - SECONDS : 60 )) $BIN/sparse3d bench --protocol repeated --checkpoint $W/shape.json --manifest $W/pl/manifest.json \
    --assets a00-sphere-3664 a04-sphere-9360 a07-blob-18912 --paths beyond --ablate \
    --repeats 2 --warmup 1 --instrument-steps 1 --no-torch --out "$OUT" --stem beyond-ablate \
    > "$OUT/bench-ablate.log" 2>&1
  track $?; echo "bench exit $?"
  grep -iE "fallback|warning|error" "$OUT/bench-ablate.log" | head
  sed -n '/## Leave-one-out/,/## Null/p' "$OUT/beyond-ablate.md"
  (cd "$OUT" && tar -czf logs.tgz *.log && rm -f *.log)
}

mode_cfg_ablate() {
  source scripts/device/prepare_model.sh
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu \
    --format=csv -lms 1000 > "$OUT/clocks.csv" 2>&1 &
  smi=$!
  $BIN/sparse3d bench --protocol repeated --checkpoint $W/shape.json --manifest $W/pl/manifest.json \
    --assets $SMALL $MID $LARGE --paths pure_eager+batched_cfg --ablate --repeats 3 --warmup 1 \
    --no-torch --out "$OUT" --stem bench-ablate > "$OUT/bench-ablate.log" 2>&1
  track $?; echo "bench exit $?"
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
}

mode_throughput() {
  source scripts/device/prepare_model.sh
  timeout $(( 410 - SECONDS > 60 ? 410 - SECONDS : 60 )) $BIN/sparse3d bench --protocol repeated --checkpoint $W/shape.json --manifest $W/pl/manifest.json \
    --assets $SMALL $MID --paths canonical_cache_combined beyond \
    --batch 2 4 8 --repeats 2 --warmup 1 --instrument-steps 1 --no-torch --out "$OUT" \
    --stem throughput > "$OUT/bench-throughput.log" 2>&1
  track $?; echo "bench exit $?"
  sed -n '/## Throughput/,/## Null/p' "$OUT/throughput.md"
  (cd "$OUT" && tar -czf logs.tgz *.log && rm -f *.log)
}

mode_graph_choice() {
  source scripts/device/prepare_model.sh
  timeout 120 $BIN/sparse3d run --checkpoint $W/shape.json --manifest $W/pl/manifest.json \
    --asset a00-sphere-3664 --asset a05-torus-11833 --path beyond \
    --graph-choice bench/results/2026-11-29-h200-beyond.json --out "$OUT/latents" \
    > "$OUT/run-graph-choice.log" 2>&1
  track $?; echo "run exit $?"
  grep -vE "step +[0-9]+/" "$OUT/run-graph-choice.log" | tail -14
  rm -rf "$OUT/latents"
  timeout 60 $BIN/sparse3d profile --checkpoint $W/shape.json --manifest $W/pl/manifest.json \
    --asset a00-sphere-3664 --path beyond-cuda_graphs > "$OUT/profile-beyond.md" 2>&1
  track $?; echo "profile exit $?"
  tail -25 "$OUT/profile-beyond.md"
}

mode_first_request() {
  source scripts/device/prepare_model.sh
  RUNS=${RUNS:-"beyond fast"}
  [ -n "${TESTS:-}" ] && unit_tests "$TESTS"
  $BIN/sparse3d info > "$OUT/fingerprint.txt" 2>&1
  # Warm-up: the long-tail's first asset (35,000 tokens), outside the default set.
  WARM=$(python3 -c "import json;print([a['name'] for a in json.load(open('$W/pl/manifest.json'))['assets'] if a['set']!='default'][0])")
  assets=(--asset "$WARM")
  for a in $DEFAULT_ASSETS; do assets+=(--asset "$a" --asset "$a"); done
  table=$OUT/first_request.txt; : > "$table"
  for run in $RUNS; do
    p=${run%@*}; bucket=default; [ "$run" != "$p" ] && bucket=${run#*@}
    env_bucket=(); [ "$bucket" != default ] && env_bucket=(SPARSE3D_SDPA_MIN_BUCKET=$bucket)
    log=$OUT/first_request_$p-$bucket.log
    rm -rf /tmp/s3d-fr-cache
    env "${env_bucket[@]}" timeout 500 $BIN/sparse3d run --checkpoint $W/shape.json --manifest $W/pl/manifest.json \
      --path "$p" --sampler "${SAMPLER:-released}" --cache-dir /tmp/s3d-fr-cache --out /tmp/fr-out \
      "${assets[@]}" > "$log" 2>&1
    track $?; echo "run $p (smallest attention bucket $bucket) exit $?" >> "$table"
    python3 - "$log" "$run" >> "$table" <<'PY'
import re, sys
log, path = sys.argv[1], sys.argv[2]
calls = []  # (asset, whole, null, first_use)
for line in open(log):
    m = re.match(r"\[(\S+)\] whole call ([\d.]+) s: null context ([\d.]+) s; first use: (.*)$", line)
    if m: calls.append((m.group(1), float(m.group(2)), float(m.group(3)), m.group(4)))
print(f"{path}: asset, first call s, repeat s, first/repeat, null ctx s (first), first-use work (first)")
for i in range(1, len(calls) - 1, 2):
    (a, w1, n1, f1), (_, w2, _, _) = calls[i], calls[i + 1]
    print(f"  {a:22s} {w1:8.3f} {w2:8.3f} {w1 / w2:6.3f}x {n1:7.3f}  {f1}")
if calls: print(f"  warm-up {calls[0][0]}: {calls[0][1]:.3f} s, null ctx {calls[0][2]:.3f} s; {calls[0][3]}")
PY
  done
  # Guidance 1 on every step (TRELLIS.2's texture stage): no null context, no qualification.
  rm -rf /tmp/s3d-fr-cache
  $BIN/sparse3d run --checkpoint $W/shape.json --manifest $W/pl/manifest.json --cfg 1 \
    --cache-dir /tmp/s3d-fr-cache --out /tmp/fr-out --asset $SMALL --asset $MID > "$OUT/first_request_cfg1.log" 2>&1
  track $?
  echo "guidance 1 exit $?: $(grep -c 'qualified on the device' "$OUT/first_request_cfg1.log") qualifications, $(grep -c 'null context:' "$OUT/first_request_cfg1.log") probes; $(grep 'whole call' "$OUT/first_request_cfg1.log" | sed 's/^/  /' | tr '\n' ' ')" >> "$table"
  cat "$table"
}

mode_fusion() {
  source scripts/device/prepare_model.sh
  $BIN/sparse3d info > "$OUT/fingerprint.txt"
  $BIN/sparse3d bench-kernels --checkpoint $W/shape.json --out "$OUT" --stem kernels > "$OUT/bench-kernels.log" 2>&1
  track $?; echo "bench-kernels exit $?"; grep -E "^\| |Copy" "$OUT/kernels.md"
  for p in pure_eager kernel_fusion; do
    $BIN/sparse3d profile --checkpoint $W/shape.json --manifest $W/pl/manifest.json --asset $SMALL \
      --path $p > "$OUT/profile-$p.md" 2>&1
    track $?; echo "profile $p exit $?: $(grep -E 'launches' "$OUT/profile-$p.md" | head -3 | tr '\n' ' ')"
  done
  (cd "$OUT" && tar -czf logs.tgz *.log fingerprint.txt profile-*.md && rm -f *.log profile-*.md fingerprint.txt)
}

mode_fast() {
  source scripts/device/prepare_model.sh
  PARTS=${FAST_PARTS:-"kernels bench torch lowmem"}  # one call cannot hold them all: see docs
  R=$OUT/r; mkdir -p $R
  $BIN/sparse3d info > $R/fingerprint.txt 2>&1
  pack() { tar -C $R -czf "$OUT/results.tgz" . ; }
  summary=()
  has() { [[ " $PARTS " == *" $1 "* ]]; }
  if has kernels; then
    $BIN/sparse3d bench-kernels --checkpoint $W/shape.json --tokens 3664 30227 --out $R --stem kernels > $R/kernels.log 2>&1
    track $?; summary+=("bench-kernels exit $?")
    pack
  fi
  if has bench; then
    timeout 560 $BIN/sparse3d bench --protocol repeated --checkpoint $W/shape.json --manifest $W/pl/manifest.json \
      --assets default --paths pure_eager beyond fast --repeats 1 --warmup 1 --instrument-steps 1 \
      --no-torch --out $R --stem fast > $R/bench.log 2>&1
    track $?; summary+=("bench exit $?")
    pack
  fi
  if has memory; then
    # Memory only: the smallest and largest payload, each path once after a warm-up.
    timeout 200 $BIN/sparse3d bench --protocol repeated --checkpoint $W/shape.json --manifest $W/pl/manifest.json \
      --assets $SMALL $LARGE --paths pure_eager beyond fast --repeats 1 --warmup 1 \
      --instrument-steps 1 --no-torch --out $R --stem memory > $R/memory.log 2>&1
    track $?; summary+=("memory bench exit $?")
    pack
  fi
  if has ablate; then
    timeout 200 $BIN/sparse3d bench --protocol repeated --checkpoint $W/shape.json --manifest $W/pl/manifest.json \
      --assets $SMALL $MID --paths fast --repeats 1 --warmup 1 --instrument-steps 1 --ablate \
      --ablate-flags fast_modulated_layernorm fast_qk_rmsnorm_rope fast_qk_rmsnorm_cross tuned_gemm tuned_attention \
      --no-torch --out $R --stem fast-ablate > $R/ablate.log 2>&1
    track $?; summary+=("leave-one-out exit $?")
    pack
  fi
  if has limited; then
    for pair in ${LIMITS:-}; do
      a=${pair%%:*}; g=${pair##*:}
      timeout 90 $BIN/sparse3d run --checkpoint $W/shape.json --manifest $W/pl/manifest.json \
        --asset $a --path fast --sampler protocol --max-device-memory $g --out /tmp/lim-$a \
        > $R/limited-$a.log 2>&1
      summary+=("fast under $g GiB, $a: exit $?: $(grep -E 'device memory|fallback' $R/limited-$a.log | tr '\n' ' ' | cut -c1-400)")
    done
    pack
  fi
  if has torch; then
    args=(--checkpoint $W/shape.json --manifest $W/pl/manifest.json --steps 15 --rescale-t 3 --cfg 7.5
          --interval 0 1 --guidance-rescale 0 --cfg-mode serial --device cuda --time --quiet)
    assets=(); for a in $DEFAULT_ASSETS; do assets+=(--asset $a); done
    timeout 240 python3 tools/torch_ref/run.py "${args[@]}" "${assets[@]}" --warmup 1 --repeat 1 \
      --timing-json $R/torch-eager.json > $R/torch-eager.log 2>&1
    track $?; summary+=("torch eager exit $?")
    if [ -f $R/fast.json ] && [ -f $R/torch-eager.json ]; then
      $BIN/sparse3d bench-report --result $R/fast.json --torch-timing $R/torch-eager.json \
        --out $R --stem fast-with-torch > $R/report.log 2>&1
      track $?; summary+=("merged report exit $?")
    fi
    pack
  fi
  if has lowmem; then
    [ -f $W/pl49/manifest.json ] || $BIN/sparse3d make-payloads --set benchmark --tokens 49152 \
      --out $W/pl49 >> $R/make.log 2>&1
    timeout 300 $BIN/sparse3d bench --protocol repeated --checkpoint $W/shape.json --manifest $W/pl49/manifest.json \
      --paths fast low_memory --repeats 1 --warmup 1 --instrument-steps 1 --no-torch \
      --out $R --stem lowmem-49152 > $R/lowmem.log 2>&1
    track $?; summary+=("low-memory bench exit $?")
    A49=$(python3 -c "import json;print(json.load(open('$W/pl49/manifest.json'))['assets'][0]['name'])")
    timeout 120 $BIN/sparse3d run --checkpoint $W/shape.json --manifest $W/pl49/manifest.json \
      --asset $A49 --path low_memory --max-device-memory 8 --out /tmp/lm8 > $R/lowmem-run-8gib.log 2>&1
    track $?; summary+=("low_memory run under 8 GiB exit $?: $(grep -i 'device memory' $R/lowmem-run-8gib.log | tail -n 1)")
    pack
  fi
  echo "---- summary"
  for s in "${summary[@]}"; do echo "$s"; done
  [ -f $R/kernels.md ] && grep -E "^\| (fast|qk|head|modulated|layer)" $R/kernels.md | head -12
  [ -f $R/fast.md ] && sed -n '/## Summary: default/,/^$/p' $R/fast.md | head -8
  [ -f $R/fast.md ] && sed -n '/## Wall \/ ideal/,/## Device memory/p' $R/fast.md | tail -n 14 | head -13
  [ -f $R/fast-with-torch.md ] && sed -n '/## Device memory per asset/,/^## [A-Z]/p' $R/fast-with-torch.md | head -16
  [ -f $R/memory.md ] && sed -n '/## Device memory per asset/,/^## [A-Z]/p' $R/memory.md | head -9
  [ -f $R/lowmem-49152.md ] && sed -n '/## Denoise latency/,/^## Summary/p' $R/lowmem-49152.md | head -8
  [ -f $R/lowmem-49152.md ] && sed -n '/## Device memory per asset/,/^## [A-Z]/p' $R/lowmem-49152.md | head -8
  return 0
}

mode_dense() {
  W=/tmp/s3d; mkdir -p $W
  R=$OUT/r; mkdir -p $R
  $BIN/sparse3d info > "$R/fingerprint.txt" 2>&1
  [ -f $W/ss.json ] || $BIN/sparse3d make-checkpoint --preset trellis2-ss-16 --seed 1 --out $W/ss > /dev/null 2>&1
  [ -f $W/dense/manifest.json ] || $BIN/sparse3d make-payloads --set dense --out $W/dense > /dev/null 2>&1
  BATCH=${BATCH-2 4 8}
  $BIN/sparse3d bench --protocol repeated --checkpoint $W/ss.json --manifest $W/dense/manifest.json --paths pure_eager beyond \
    --sampler released_sparse_structure --warmup 1 --repeats 3 ${BATCH:+--batch $BATCH} --python python3 \
    --out "$R" --stem bench-dense > "$R/bench-dense.log" 2>&1
  track $?; echo "bench dense exit $?"
  grep -E "speedup|geomean|x$|ratio" "$R/bench-dense.md" 2>/dev/null | head -n 25
  tar -C "$OUT" -czf "$OUT/results.tgz" r && rm -rf $R
}

run_modes bench paths -- "$@"
