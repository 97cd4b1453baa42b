#!/usr/bin/env bash
# Suite `faults`: fault injection and hostile inputs.
#   sweep     FaultsGpu.*: every device allocation and every plan build of a cold request
#             failed in turn (alone on the GPU, under `timeout $FAULT_LIMIT`, 300).
#   refusal   the CLI's memory-estimate refusal: the tiny checkpoint (.deps/golden_in, carried)
#             under --max-device-memory 0.0001.
#   estimate  the same check on the full trellis2-shape-1024 preset, largest default payload,
#             --max-device-memory 4.
#   fuzz      (CPU only, 16 cores) scripts/fuzz.sh --long over the five fuzz targets at once,
#             FUZZ_RUNS (10,000,000) executions each, from the fuzzers built on the CPU machine
#             (clang is not on the device): carry build-fuzz/prebuilt.tar.xz, made by
#               tar cJf build-fuzz/prebuilt.tar.xz -C build-fuzz fuzz_safetensors fuzz_config \
#                   fuzz_manifest fuzz_asset fuzz_cli corpus
#             Jobs per target (16 cores in all) follow each target's speed; CAP seconds (510)
#             bound each; ONLY=<target> runs one target on every core. Writes <target>.log,
#             corpus.tar.xz (the corpus after the run, to keep), summary.txt.
# Default: sweep refusal.
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 1
source scripts/device/env.sh
source scripts/device/suites/lib.sh

mode_sweep() {
  timeout "${FAULT_LIMIT:-300}" "$BIN/sparse3d_gpu_tests" --gtest_filter='FaultsGpu.*' > "$OUT/faults.log" 2>&1
  track $?
  echo "faults rc $?: $(grep -E "faults: |per cold request" "$OUT/faults.log" | tr '\n' ';')"
  echo "faults tests: $(grep -E "^\[ +(OK|FAILED) +\] [A-Z]" "$OUT/faults.log" | tr '\n' ';')"
}

mode_refusal() {
  G=.deps/golden_in
  $BIN/sparse3d run --checkpoint $G/tiny.json --manifest $G/payloads/manifest.json --asset a02-box-250 \
    --max-device-memory 0.0001 --out /tmp/oom > "$OUT/oom.log" 2>&1
  local rc=$?
  [ $rc != 0 ] && grep -q error "$OUT/oom.log" || track 1  # the run must be refused
  echo "memory refusal exit $rc: $(grep error "$OUT/oom.log")"
}

mode_estimate() {
  source scripts/device/prepare_model.sh
  $BIN/sparse3d run --checkpoint $W/shape.json --manifest $W/pl/manifest.json --asset $LARGE \
    --max-device-memory 4 > "$OUT/oom.log" 2>&1
  echo "memory estimate check (--max-device-memory 4, $LARGE): exit $? : $(tail -n 1 "$OUT/oom.log")"
}

mode_fuzz() {
  export FUZZ_BUILD=build-fuzz FUZZ_PREBUILT=1 FUZZ_RUNS=${FUZZ_RUNS:-10000000}
  tar xJf build-fuzz/prebuilt.tar.xz -C build-fuzz || { track 1; return; }
  python3 fuzz/make_seeds.py build-fuzz/seeds && touch build-fuzz/seeds/.done
  declare -A jobs=([fuzz_safetensors]=3 [fuzz_config]=2 [fuzz_manifest]=3 [fuzz_asset]=4 [fuzz_cli]=4)
  # ONLY=<target>: that one target on every core.
  if [ -n "${ONLY:-}" ]; then declare -A jobs=([$ONLY]=$(nproc)); fi
  local start t secs
  start=$(date +%s)
  for t in "${!jobs[@]}"; do
    FUZZ_JOBS=${jobs[$t]} FUZZ_SECONDS=${CAP:-510} scripts/fuzz.sh --long "$t" > "$OUT/$t.log" 2>&1 &
  done
  wait
  secs=$(( $(date +%s) - start ))
  for t in "${!jobs[@]}"; do
    { echo "== job 0 log tail:"; tail -25 "build-fuzz/logs/$t/fuzz-0.log"; } >> "$OUT/$t.log" 2>&1
    grep -qE "^== $t: FINDING" "$OUT/$t.log" && track 1
  done
  tar cJf "$OUT/corpus.tar.xz" -C build-fuzz corpus
  { echo "fuzz --long on $(nproc) cores, ${secs}s, FUZZ_RUNS=$FUZZ_RUNS per target, $(date -u +%FT%TZ)"
    for t in "${!jobs[@]}"; do
      echo "$t (${jobs[$t]} jobs): $(grep -E "^== $t: (no findings|FINDING|[0-9]+ large)" "$OUT/$t.log" | sed "s/^== $t: //" | tr '\n' ';')"
    done; } | tee "$OUT/summary.txt"
}

run_modes faults "sweep refusal" -- "$@"
