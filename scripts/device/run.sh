#!/usr/bin/env bash
# The one entry point of the device scripts: runs the named suites, in order, on the lent GPU
# machine over a copy of this tree (scripts/device/README.md).
#   scripts/device/run.sh SUITE[:MODE[,MODE...]] [SUITE...]
# Each suite is scripts/device/suites/SUITE.sh; its modes and settings are in its header.
# Results: $OUT/SUITE/MODE/ (OUT: /tmp/out). Exit status: non-zero when any suite failed.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1

SUITES=(build unit sanitizers faults bench pipeline parity glb python multi-gpu)
declare -A DESC=(
  [build]="build on the device when no carried binaries run there (modes: auto, force)"
  [unit]="the GPU test binaries, sparse3d_gpu_tests (GTEST_FILTER) and sparse3d_mesh_gpu_tests (modes: gpu mesh, full)"
  [sanitizers]="compute-sanitizer over the GPU tests (modes: memcheck; memcheck-small|fused|dense|fast; nocache, graphs, demo)"
  [faults]="fault injection and hostile inputs (modes: sweep refusal; estimate, fuzz)"
  [bench]="the engine benchmarks (modes: paths; engine, torch, service, null, beyond, beyond-ablate, cfg-ablate, throughput, graph-choice, first-request, fusion, fast, dense)"
  [pipeline]="TRELLIS.2's pipeline end to end against the drop-in, and its memory (modes: e2e; memory)"
  [parity]="every path bit for bit against a reference build, start-up, the PyTorch oracle (modes: reference; oracle, dense, texture, golden, golden-dense)"
  [glb]="the GLB export against TRELLIS.2's original, and building the original (modes: export; cavities, simplifiers, original)"
  [python]="the wheel and package checks on the GPU (modes: package; wheels, cli, comfyui)"
  [multi-gpu]="sequence parallelism on two or more GPUs (modes: tests bench)"
)

usage() {
  echo "usage: scripts/device/run.sh SUITE[:MODE[,MODE...]] [SUITE...]   (-h, --help: this)"
  echo "Runs each suite in order; results under \$OUT/SUITE (OUT: /tmp/out); the first mode(s)"
  echo "listed are the default. Settings come from the environment (scripts/device/README.md)."
  echo "suites:"
  local s
  for s in "${SUITES[@]}"; do printf '  %-11s %s\n' "$s" "${DESC[$s]}"; done
}

# The suite name nearest to $1 (edit distance), for "did you mean".
nearest() {
  printf '%s\n' "${SUITES[@]}" | awk -v w="$1" '
    function dist(a, b,   i, j, m, n, d, c) {
      m = length(a); n = length(b)
      for (i = 0; i <= m; i++) d[i, 0] = i
      for (j = 0; j <= n; j++) d[0, j] = j
      for (i = 1; i <= m; i++) for (j = 1; j <= n; j++) {
        c = (substr(a, i, 1) == substr(b, j, 1)) ? 0 : 1
        d[i, j] = d[i-1, j] + 1
        if (d[i, j-1] + 1 < d[i, j]) d[i, j] = d[i, j-1] + 1
        if (d[i-1, j-1] + c < d[i, j]) d[i, j] = d[i-1, j-1] + c
      }
      return d[m, n]
    }
    { x = dist(w, $0); if (index($0, w) == 1 || index(w, $0) == 1) x = 0
      if (best == "" || x < bx) { best = $0; bx = x } }
    END { print best }'
}

[ $# -gt 0 ] || { usage; exit 2; }
for arg in "$@"; do
  case $arg in -h|--help) usage; exit 0;; esac
  name=${arg%%:*}
  if [ -z "${DESC[$name]+x}" ]; then
    echo "run.sh: no suite '$name'; did you mean '$(nearest "$name")'?" >&2
    usage >&2
    exit 2
  fi
  [ "$arg" = "$name" ] && continue
  IFS=, read -r -a modes <<< "${arg#*:}"
  for m in "${modes[@]}"; do
    case "$name:$m" in sanitizers:nocache|sanitizers:graphs|sanitizers:demo) continue;; esac
    if ! grep -q "^mode_${m//-/_}()" "scripts/device/suites/$name.sh"; then
      echo "run.sh: suite $name has no mode '$m'; its modes: $(sed -n 's/^mode_\([a-z_]*\)().*/\1/p' "scripts/device/suites/$name.sh" | tr _ - | tr '\n' ' ')" >&2
      exit 2
    fi
  done
done

ROOT_OUT=${OUT:-/tmp/out}
mkdir -p "$ROOT_OUT"
lines=()
failed=0
for arg in "$@"; do
  name=${arg%%:*}
  modes=(); [ "$arg" != "$name" ] && IFS=, read -r -a modes <<< "${arg#*:}"
  dir=$ROOT_OUT/$name; [ ${#modes[@]} -gt 0 ] && [ -e "$dir" ] && dir=$dir-$(IFS=-; echo "${modes[*]}")
  echo "################ $arg  (results in $dir)"
  t0=$SECONDS
  OUT=$dir bash "scripts/device/suites/$name.sh" "${modes[@]}"
  rc=$?
  [ $rc = 0 ] || failed=1
  lines+=("$(printf '%-36s %-7s %5d s  %s' "$arg" "$([ $rc = 0 ] && echo ok || echo "FAILED")" $((SECONDS - t0)) "$dir")")
done
echo "################ summary"
printf '%s\n' "${lines[@]}" | tee "$ROOT_OUT/run_summary.txt"
exit $failed
