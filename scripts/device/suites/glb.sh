#!/usr/bin/env bash
# Suite `glb`: the GLB export against TRELLIS.2's original (docs/EXPORT.md, "Measuring").
#   export    sparse3d's `export-glb` against TRELLIS.2's own to_glb + export, on the same
#             decoder-like inputs made from real meshes, in the same run, each judged
#             (tools/glb_judge/README.md). First the mesh GPU tests (suite unit, mode mesh;
#             GPU_TESTS=0: not).
#             Carried (git-ignored; see docs/EXPORT.md "Measuring"):
#               .deps/glb/bin/   sparse3d and sparse3d_mesh_gpu_tests (else sparse3d_gpu_tests),
#                                built on the development machine and stripped (GLB_BIN: another;
#                                carrying .deps/glb replaces the whole folder there, so they must
#                                be in it here, or be unpacked into it in the same command)
#               .deps/glb/lib/   its runtime libraries the GPU image lacks (meshoptimizer,
#                                libwebp, libpng), copied from the development machine
#               .deps/glb/sources/*.safetensors  the source meshes (tools/glb_judge/sources.py)
#               .deps/glb/wheels/  trimesh and pygltflib wheels, for the judge and the original
#               .deps/baseline/site/ (or $BASELINE/site)  TRELLIS.2's export packages (o_voxel,
#                                cumesh, flex_gemm, nvdiffrast), prebuilt for this machine's
#                                PyTorch; without them only sparse3d's side runs
#             Environment: RES (1024), SETTINGS ("500000:2048 1000000:4096"), CASES (all
#             sources), REMESH (1), ORIGINAL (1), ORIGINAL_CASES (empty: every run; else the tags,
#             such as spider_500000_2048, for which the original runs too), REQUIRE_ORIGINAL (0;
#             1: stop at once when it does not import), BASELINE (.deps/baseline), JUDGE (1; the
#             judges run at the end, JUDGE_JOBS (8) at a time, with JUDGE_ARGS, each for at most
#             JUDGE_TIMEOUT_S, TIMEOUT_S by default), TIMEOUT_S per run (300), DEADLINE_S (540: no run starts after this many seconds, and the judges
#             get what is left of 590 s; every log and JSON is also copied to $OUT/res as it is
#             written, to RES_OUT: $OUT/res by default; the device tool brings back no file
#             more than three folders down, so a call that may be cut short gives a shallow one,
#             e.g. RES_OUT=$OUT/res at the top of the call's $OUT), SPARSE3D_MESH_TIMINGS (1:
#             sub-stage times in each of our logs), OURS_ARGS (more arguments for our
#             export-glb, such as "--atlas conformal"), KEEP_GLBS (tags whose GLBs, ours and
#             the original's, come back xz-compressed as $OUT/{ours,orig}_TAG.glb.xz).
#             A run of the original that fails is reported with its exit status (124: killed
#             at TIMEOUT_S; 128 + N: killed by signal N). Writes glb_export.tar.gz (every JSON, log and view) and
#             glb_export_table.md; prints the table last.
#             TRELLIS.2's export packages are built on the GPU machine from their published
#             sources by a recipe kept beside them in .deps/baseline, not in this repository:
#             the code-search library's terms forbid committing a recipe that builds code
#             fetched through it (docs/EXPORT.md, "Measuring").
#   cavities  mode export twice on the same inputs in one call: first the default export, timed
#             only (no original, no judge; the mesh GPU tests first, unless GPU_TESTS=0), into
#             $OUT/default/; then with --remesh-drop-cavities (docs/EXPORT.md, "Cavities"), with
#             the original (ORIGINAL_CASES) and the judges, into $OUT/fill/. Each prints its
#             table, the fill's last. The time limits are per run: keep DEFAULT_DEADLINE_S (150),
#             DEADLINE_S and JUDGE_TIMEOUT_S such that both fit in the call.
#   simplifiers  mode export twice on the same inputs in one call: first with the reference
#             simplifier (--simplifier meshoptimizer), timed and judged (REF_JUDGE=0: timed
#             only) but without the original (REF_DEADLINE_S, 200), into $OUT/reference/; then
#             the default (the shaped collapse, docs/EXPORT.md "Simplification") with the
#             original (ORIGINAL_CASES) and the judges, into $OUT/shaped/. Each prints its
#             table, the default's last.
# Default: export.
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 1
source scripts/device/env.sh
source scripts/device/suites/lib.sh

mode_export() {
  BIN=${GLB_BIN:-.deps/glb/bin}
  RES=${RES:-1024}
  SETTINGS=${SETTINGS:-500000:2048 1000000:4096}
  REMESH=${REMESH:-1}
  TIMEOUT_S=${TIMEOUT_S:-300}
  B=${BASELINE:-.deps/baseline}  # the original's prebuilt packages: site/ and wheels/
  W=/tmp/glb_export
  DEADLINE_S=${DEADLINE_S:-540}
  export SPARSE3D_MESH_TIMINGS=${SPARSE3D_MESH_TIMINGS:-1}  # sub-stage times in each log
  started=$(date +%s)
  late() { [ $(( $(date +%s) - started )) -ge "$DEADLINE_S" ]; }
  rm -rf "$W"; mkdir -p "$W/cases" "$W/glb" "$W/res"
  export LD_LIBRARY_PATH="$PWD/.deps/glb/lib:$LD_LIBRARY_PATH"
  if ls .deps/glb/wheels/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .deps/glb/wheels/*.whl \
      > "$W/pip.log" 2>&1 || echo "judge wheels: install failed (tail $W/pip.log)"
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
  fi
  HAVE_ORIGINAL=0
  if [ "${ORIGINAL:-1}" = 1 ] && [ -d $B/site ]; then
    # The original's pure-Python needs (easydict, plyfile, zstandard, filelock; trimesh comes with
    # the judge's wheels) and FlexGEMM's autotune cache, writable.
    ls $B/wheels/*.whl 2>/dev/null | grep -v trimesh | xargs -r python3 -m pip install -q \
      --no-index --no-deps --no-compile --target /tmp/site >> "$W/pip.log" 2>&1
    cp $B/site/flex_gemm_autotune_cache.json /tmp/flex_gemm_autotune_cache.json 2>/dev/null &&
      export FLEX_GEMM_AUTOTUNE_CACHE_PATH=/tmp/flex_gemm_autotune_cache.json
    export PYTHONPATH="/tmp/site:$PWD/$B/site:${PYTHONPATH:-}"
    if python3 -c "import o_voxel.postprocess, cumesh, flex_gemm, nvdiffrast.torch" > "$W/import.log" 2>&1; then
      HAVE_ORIGINAL=1
    else
      echo "original: import failed: $(tail -1 "$W/import.log")"
    fi
  fi
  if [ "${REQUIRE_ORIGINAL:-0}" = 1 ] && [ $HAVE_ORIGINAL = 0 ]; then
    tail -n 25 "$W/import.log" 2>/dev/null; echo "REQUIRE_ORIGINAL=1 and the original does not import"; exit 3
  fi
  echo "machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1); $(nproc) cores; torch $(python3 -c 'import torch; print(torch.__version__)')"
  "$BIN/sparse3d" --version
  if [ "${GPU_TESTS:-1}" = 1 ] && { [ -x "$BIN/sparse3d_mesh_gpu_tests" ] || [ -x "$BIN/sparse3d_gpu_tests" ]; }; then
    unit_tests 'MeshGpu.*' mesh
  fi

  gpu_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; }
  IDLE_MIB=$(gpu_used)
  settle_gpu() {
    local t0=$SECONDS
    while [ $(( SECONDS - t0 )) -lt 20 ] && [ "$(gpu_used)" -gt $(( IDLE_MIB + 256 )) ]; do sleep 0.5; done
    echo "  (device memory in use $(gpu_used) MiB after $(( SECONDS - t0 )) s; $IDLE_MIB at the start)"
  }

  remesh_flags=(--remesh --remesh-band 1 --remesh-project 0)
  orig_flags=(--remesh --remesh-band 1 --remesh-project 0)
  [ "$REMESH" = 1 ] || { remesh_flags=(--no-remesh); orig_flags=(); }

  for src in .deps/glb/sources/*.safetensors; do
    name=$(basename "$src" .safetensors)
    [ -n "${CASES:-}" ] && [[ " $CASES " != *" $name "* ]] && continue
    t0=$(date +%s.%N)
    "$BIN/sparse3d" make-glb-input --source "$src" --resolution "$RES" --out "$W/cases/$name.safetensors" \
      > "$W/res/make_$name.log" 2>&1 || { echo "make-glb-input $name failed: $(tail -1 "$W/res/make_$name.log")"; continue; }
    echo "case $name: $(head -1 "$W/res/make_$name.log" | sed 's/^wrote [^:]*: //') in $(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}") s"
    for s in $SETTINGS; do
      target=${s%%:*}; tex=${s##*:}; tag="${name}_${target}_${tex}"
      if late; then echo "skipped $tag: past DEADLINE_S=$DEADLINE_S"; continue; fi
      # sparse3d, the device's memory in use polled every 20 ms (its peak against the original's).
      nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 20 > "$W/res/ours_$tag.mem" 2>/dev/null &
      poller=$!
      timeout "$TIMEOUT_S" "$BIN/sparse3d" export-glb --input "$W/cases/$name.safetensors" --out "$W/glb/ours_$tag.glb" \
        --decimation-target "$target" --texture-size "$tex" "${remesh_flags[@]}" ${OURS_ARGS:-} \
        > "$W/res/ours_$tag.log" 2>&1 || { track 1; echo "ours $tag failed: $(tail -1 "$W/res/ours_$tag.log")"; }
      kill $poller 2>/dev/null; wait $poller 2>/dev/null
      if [ $HAVE_ORIGINAL = 1 ] && [ -n "${ORIGINAL_CASES:-}" ] && [[ " $ORIGINAL_CASES " != *" $tag "* ]]; then
        :  # the original only for the tags in ORIGINAL_CASES
      elif [ $HAVE_ORIGINAL = 1 ] && late; then
        echo "original $tag skipped: past DEADLINE_S=$DEADLINE_S"
      elif [ $HAVE_ORIGINAL = 1 ]; then
        timeout "$TIMEOUT_S" python3 tools/glb_judge/run_original.py --case "$W/cases/$name.safetensors" \
          --out "$W/glb/orig_$tag.glb" --decimation-target "$target" --texture-size "$tex" \
          "${orig_flags[@]}" --json "$W/res/orig_$tag.json" > "$W/res/orig_$tag.log" 2>&1
        rc=$?  # 124: killed at TIMEOUT_S; 128 + N: signal N (a crash)
        if [ $rc != 0 ]; then
          echo "original $tag failed (exit $rc): $(tail -1 "$W/res/orig_$tag.log" | cut -c1-200)"
          # A killed run's GPU context can outlive its process for a while: the next export
          # (ours) waits until the device's memory in use is back near where the suite started
          # (at most 20 s), or it shares the GPU with the teardown (0.67 s more in one bake on
          # 2026-12-04).
          settle_gpu
        fi
      fi
      if [ "${JUDGE:-1}" = 1 ]; then  # judged at the end, several at a time
        glbs="--glb sparse3d=$W/glb/ours_$tag.glb"
        [ -f "$W/glb/orig_$tag.glb" ] && glbs="$glbs --glb original=$W/glb/orig_$tag.glb"
        echo "timeout \$JUDGE_TIMEOUT python3 tools/glb_judge/judge.py --case $W/cases/$name.safetensors $glbs --target-faces $target --out $W/res/judge_$tag ${JUDGE_ARGS:---samples 300000 --texture-samples 100000 --view-size 320} > $W/res/judge_$tag.log 2>&1 || echo judge $tag failed" >> "$W/judges.sh"
      fi
      mkdir -p "${RES_OUT:-$OUT/res}" && cp "$W"/res/*.log "$W"/res/*.json "${RES_OUT:-$OUT/res}/" 2>/dev/null
    done
  done
  if [ -f "$W/judges.sh" ]; then
    t0=$(date +%s)
    export JUDGE_TIMEOUT=$(( 590 - (t0 - started) ))
    [ "$JUDGE_TIMEOUT" -gt "${JUDGE_TIMEOUT_S:-$TIMEOUT_S}" ] && JUDGE_TIMEOUT=${JUDGE_TIMEOUT_S:-$TIMEOUT_S}
    [ "$JUDGE_TIMEOUT" -lt 10 ] && JUDGE_TIMEOUT=10
    xargs -P "${JUDGE_JOBS:-8}" -I{} bash -c '{}' < "$W/judges.sh"
    echo "judges: $(wc -l < "$W/judges.sh") in $(( $(date +%s) - t0 )) s"
  fi
  python3 tools/glb_judge/table.py "$W/res" > "$OUT/glb_export_table.md" 2> "$W/res/table.err" ||
    echo "table failed: $(tail -1 "$W/res/table.err")"
  tar -czf "$OUT/glb_export.tar.gz" -C "$W" --exclude='*.png' res
  tar -czf "$OUT/glb_views.tar.gz" -C "$W" $(cd "$W" && ls res/judge_*/views_*.png 2>/dev/null)
  for tag in ${KEEP_GLBS:-}; do  # both sides' GLBs of these runs come back, xz-compressed
    for g in "$W"/glb/orig_$tag.glb "$W"/glb/ours_$tag.glb; do
      [ -f "$g" ] && xz -T0 -6 -c "$g" > "$OUT/$(basename "$g").xz"
    done
  done
  cat "$OUT/glb_export_table.md"
}

mode_cavities() {
  local out=$OUT
  mkdir -p "$out/default" "$out/fill"
  OUT=$out/default RES_OUT=$out/default/res ORIGINAL=0 JUDGE=0 KEEP_GLBS= \
    DEADLINE_S=${DEFAULT_DEADLINE_S:-150} mode_export > "$out/default/log.txt" 2>&1
  echo "== the default export (timed only): $out/default/glb_export_table.md"
  cat "$out/default/glb_export_table.md" 2>/dev/null
  echo "== with --remesh-drop-cavities"
  OUT=$out/fill RES_OUT=$out/fill/res GPU_TESTS=0 \
    OURS_ARGS="${OURS_ARGS:-} --remesh-drop-cavities" mode_export
}

mode_simplifiers() {
  local out=$OUT
  mkdir -p "$out/reference" "$out/shaped"
  OUT=$out/reference RES_OUT=$out/reference/res ORIGINAL=0 KEEP_GLBS= JUDGE=${REF_JUDGE:-1} \
    OURS_ARGS="${OURS_ARGS:-} --simplifier meshoptimizer" \
    DEADLINE_S=${REF_DEADLINE_S:-200} mode_export > "$out/reference/log.txt" 2>&1
  echo "== the reference simplifier (meshoptimizer): $out/reference/glb_export_table.md"
  cat "$out/reference/glb_export_table.md" 2>/dev/null
  echo "== the default (the shaped collapse)"
  OUT=$out/shaped RES_OUT=$out/shaped/res GPU_TESTS=0 mode_export
}

run_modes glb export -- "$@"
