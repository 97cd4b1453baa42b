#!/usr/bin/env bash
# Device call (CPU only, 16 cores): scripts/fuzz.sh --long over the five fuzz targets at
# once, 10,000,000 executions each (FUZZ_RUNS), from the fuzzers built on the CPU machine
# (clang is not on the device): carry build-fuzz/prebuilt.tar.xz, made by
#   tar cJf build-fuzz/prebuilt.tar.xz -C build-fuzz fuzz_safetensors fuzz_config \
#       fuzz_manifest fuzz_asset fuzz_cli corpus
# Jobs per target (16 cores in all) follow each target's speed; CAP seconds bound each;
# ONLY=<target> runs one target on every core.
# Writes to $OUT: <target>.log (fuzz.sh's output and the first job log's stats),
# corpus.tar.xz (the corpus after the run, to keep), summary.txt (printed last).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
export FUZZ_BUILD=build-fuzz FUZZ_PREBUILT=1 FUZZ_RUNS=${FUZZ_RUNS:-10000000}
tar xJf build-fuzz/prebuilt.tar.xz -C build-fuzz
python3 fuzz/make_seeds.py build-fuzz/seeds && touch build-fuzz/seeds/.done
declare -A jobs=([fuzz_safetensors]=3 [fuzz_config]=2 [fuzz_manifest]=3 [fuzz_asset]=4 [fuzz_cli]=4)
# ONLY=<target>: that one target on every core.
if [ -n "${ONLY:-}" ]; then declare -A jobs=([$ONLY]=$(nproc)); fi
start=$(date +%s)
for t in "${!jobs[@]}"; do
  FUZZ_JOBS=${jobs[$t]} FUZZ_SECONDS=${CAP:-510} scripts/fuzz.sh --long "$t" > "$OUT/$t.log" 2>&1 &
done
wait
secs=$(( $(date +%s) - start ))
for t in "${!jobs[@]}"; do
  { echo "== job 0 log tail:"; tail -25 "build-fuzz/logs/$t/fuzz-0.log"; } >> "$OUT/$t.log" 2>&1
done
tar cJf "$OUT/corpus.tar.xz" -C build-fuzz corpus
{ echo "fuzz --long on $(nproc) cores, ${secs}s, FUZZ_RUNS=$FUZZ_RUNS per target, $(date -u +%FT%TZ)"
  for t in "${!jobs[@]}"; do
    echo "$t (${jobs[$t]} jobs): $(grep -E "^== $t: (no findings|FINDING|[0-9]+ large)" "$OUT/$t.log" | sed "s/^== $t: //" | tr '\n' ';')"
  done; } | tee "$OUT/summary.txt"
