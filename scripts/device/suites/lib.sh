# shellcheck shell=bash
# Sourced by every suite file (after env.sh): the mode loop, failure tracking and the calls
# one suite makes of another. A suite file defines one function per mode, mode_<name> (a
# dash in the mode's name is an underscore in the function's), and ends with
#   run_modes SUITE DEFAULT_MODES -- "$@"
# Each mode runs in a subshell with OUT=$SUITE_OUT/<mode>, so that two modes never write the
# same file; a mode fails when a command it checks (track) failed.
SUITE_OUT=$OUT
FAILED=0

# track STATUS: counts a failure when STATUS is not 0; returns STATUS, so that the next `$?`
# still reads the command's status (`cmd > log 2>&1; track $?; echo "exit $?"`).
track() { [ "$1" = 0 ] || FAILED=$((FAILED + 1)); return "$1"; }

# unit_tests FILTER [MODE]: the unit suite's GPU tests with that gtest filter, results under
# $OUT/unit (the one place the GPU test binaries are run: suites/unit.sh).
unit_tests() {
  GTEST_FILTER="$1" OUT="$OUT/unit" BIN="$BIN" bash scripts/device/suites/unit.sh "${2:-gpu}"
  track $?
}

# NCCL from python3's site-packages (nvidia/nccl/lib) when the system has none.
nccl_path() {
  NCCL_SITE=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null || true)
  [ -n "$NCCL_SITE" ] && export LD_LIBRARY_PATH="$NCCL_SITE/lib:$LD_LIBRARY_PATH"
  return 0
}

run_modes() {  # SUITE "DEFAULT MODES" -- [MODE...]
  local suite=$1 defaults=$2 mode fn r t0 table=() bad=0
  shift 3
  [ $# -gt 0 ] || set -- $defaults
  for mode in "$@"; do
    fn=mode_${mode//-/_}
    if ! declare -F "$fn" > /dev/null; then
      echo "$suite: no mode '$mode' (modes: $(declare -F | awk '{print $3}' | sed -n 's/^mode_//p' | tr _ - | tr '\n' ' '))" >&2
      table+=("$suite:$mode  UNKNOWN MODE"); bad=1; continue
    fi
    echo "======== $suite:$mode  (results in $SUITE_OUT/$mode)"
    t0=$SECONDS
    ( OUT=$SUITE_OUT/$mode; mkdir -p "$OUT"; FAILED=0; "$fn"; [ "$FAILED" = 0 ] )
    r=$?
    [ $r = 0 ] || bad=1
    table+=("$(printf '%-28s %-6s %5d s' "$suite:$mode" "$([ $r = 0 ] && echo ok || echo FAILED)" $((SECONDS - t0)))")
  done
  echo "======== $suite"
  printf '%s\n' "${table[@]}" | tee "$SUITE_OUT/modes.txt"
  return $bad
}
