#!/usr/bin/env bash
# The mutation check (docs/design.md, "Mutation check"): mutmut plants small bugs in the core
# modules, one at a time, and runs each module's fast tests against every mutant; a mutant no test
# fails on is a "survivor", written with its diff to the output file. Not part of CI (too slow).
#
#   bash scripts/mutation.sh                                         # every core module, 30 minutes
#   bash scripts/mutation.sh --module glassroom/observe/anomalies.py --minutes 5
#   bash scripts/mutation.sh --out /tmp/survivors.txt --jobs 2
#
# It never touches the checkout it is started from: the tracked files are copied to a temporary
# folder (one per module) and mutated there. mutmut is installed into a virtual environment that
# sees the system's packages; glassroom's own dependencies are installed there too if missing.
# The modules share the time budget in turn (a module's unused time goes to the next); a module
# cut short lists its unrun mutants as "not checked". Exit 0 when the check ran (survivors or
# not), 2 on bad usage.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
MUTMUT_VERSION="3.8.1"   # pinned: the setup.cfg keys and the result format below are mutmut 3's
VENV="${MUTATION_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/glassroom-mutation/venv-mutmut-$MUTMUT_VERSION}"
MINUTES=30
JOBS="$(nproc 2>/dev/null || echo 2)"
OUT="$REPO/mutation-survivors.txt"
MODULES=()

# Each core module: its fast test files, and a -k expression choosing the tests that exercise it
# (in-process, seconds; the training runs of `glassroom train` happen in subprocesses, which
# mutmut cannot map to mutants).
#
# Bugs the suite once let through, and the test that catches each (each checked by planting it):
#   moe.py capacity rounded down            tests/model/test_capacity.py::test_capacity_rounds_a_fractional_share_up...
#   transformer.py rope_theta ignored       tests/model/test_transformer.py::test_rope_theta_sets_the_rotation_and_so_the_logits
#   mixture.py weights not renormalised     tests/data/test_mixture.py::test_unnormalised_weights_give_domain_shares...
#   downstream_link.py loss draws swapped   tests/ladder/test_downstream_link.py::test_a_skewed_band_maps_each_steps_loss...
#   journal.py digest without the step      tests/observe/test_journal.py::test_changing_any_single_field_of_any_journaled...
#   incidents.py newest step refused        tests/observe/test_incidents.py::test_an_incident_may_be_opened_at_the_first...
#   buckets.py last bucket dropped          tests/observe/test_tiles.py::test_every_view_keeps_the_last_bucket..., test_aligned_buckets...,
#                                           tests/web/test_downsample.py::test_the_published_overview_keeps_the_last_bucket...
#   trainer.py z-loss sign flipped          tests/train/test_trainer.py::test_the_logit_z_loss_is_added_to_the_objective_with_its_coefficient
#   trainer.py/resume.py detector state     tests/observe/test_anomalies.py::test_a_resumed_run_flags_exactly_what_the_uninterrupted_run_flags
# The last two are out of mutmut's reach (the z-loss tests build the tiny dataset with a worker pool,
# which hangs in mutmut's forked children; the resume test trains in subprocesses): the ordinary
# suite runs them.
declare -A FILES=(
  [glassroom/model/moe.py]="tests/model/test_transformer.py tests/model/test_moe.py tests/model/test_capacity.py"
  [glassroom/model/transformer.py]="tests/model/test_transformer.py"
  [glassroom/train/checkpoint.py]="tests/train/test_checkpoint.py"
  [glassroom/data/mixture.py]="tests/data/test_mixture.py"
  [glassroom/observe/anomalies.py]="tests/observe/test_anomalies.py"
  [glassroom/observe/redact.py]="tests/observe/test_redact.py tests/observe/test_redact_planted.py"
  [glassroom/ladder/fit.py]="tests/ladder/test_fit.py"
  [glassroom/ladder/downstream_link.py]="tests/ladder/test_downstream_link.py"
  [glassroom/observe/journal.py]="tests/observe/test_journal.py tests/observe/test_prediction.py"
  [glassroom/observe/incidents.py]="tests/observe/test_incidents.py"
  [glassroom/observe/buckets.py]="tests/observe/test_tiles.py tests/web/test_downsample.py tests/web/test_site_tiles.py"
)
declare -A SELECT=(
  [glassroom/model/moe.py]="test_transformer or projection or window or per_token_reference or capacity_rounds or apply_capacity or capacity_one or without_shared or dropless_and or eval_mode_is or drop_fraction_sums"
  [glassroom/model/transformer.py]="test_transformer or projection or window or rope"
  [glassroom/train/checkpoint.py]="checkpoints_save_verify"
  [glassroom/data/mixture.py]="test_mixture or epoch"
  [glassroom/observe/anomalies.py]="detector or spike_by_ratio or jump_in_the_param_norm or layer_that_changed"
  [glassroom/observe/redact.py]=""
  [glassroom/ladder/fit.py]="law or leave_largest or endpoint or intervals"
  [glassroom/ladder/downstream_link.py]="sigmoid or rises or fallback or prediction_intervals or band or bad_step or outside_its_own or split_normal or skewed"
  [glassroom/observe/journal.py]="test_journal or old_store_is_migrated"
  [glassroom/observe/incidents.py]="first_and_the_newest or open_update or errors_are_one_line or fold_ignores"
  [glassroom/observe/buckets.py]="keeps_the_last_bucket or aligned_buckets_hold or published_overview or spike_survives or planted_spike or zoom_returns or segments or chunks_put_back or int64"
)
CORE=(glassroom/model/moe.py glassroom/model/transformer.py glassroom/train/checkpoint.py glassroom/data/mixture.py
      glassroom/observe/anomalies.py glassroom/observe/redact.py glassroom/ladder/fit.py
      glassroom/ladder/downstream_link.py glassroom/observe/journal.py glassroom/observe/incidents.py
      glassroom/observe/buckets.py)

usage() {
  echo "usage: bash scripts/mutation.sh [--module PATH]... [--minutes N] [--jobs N] [--out FILE]" >&2
  echo "  modules: ${CORE[*]}" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case "$1" in
    --module) [ $# -ge 2 ] || usage; MODULES+=("$2"); shift 2 ;;
    --minutes) [ $# -ge 2 ] && [[ "$2" =~ ^[0-9]+$ ]] && [ "$2" -ge 1 ] || { echo "error: --minutes takes a whole number of minutes, 1 or more" >&2; exit 2; }
               MINUTES="$2"; shift 2 ;;
    --jobs) [ $# -ge 2 ] && [[ "$2" =~ ^[0-9]+$ ]] && [ "$2" -ge 1 ] || { echo "error: --jobs takes a whole number, 1 or more" >&2; exit 2; }
            JOBS="$2"; shift 2 ;;
    --out) [ $# -ge 2 ] || usage; OUT="$(realpath -m "$2")"; shift 2 ;;
    -h|--help) usage ;;
    *) echo "error: unknown argument $1" >&2; usage ;;
  esac
done
[ ${#MODULES[@]} -gt 0 ] || MODULES=("${CORE[@]}")
for m in "${MODULES[@]}"; do
  [ -n "${FILES[$m]:-}" ] || { echo "error: $m is not a core module with a test selection (${CORE[*]})" >&2; exit 2; }
  [ -f "$REPO/$m" ] || { echo "error: $REPO/$m does not exist" >&2; exit 2; }
done
: > "$OUT" 2>/dev/null || { echo "error: cannot write $OUT; give --out a writable file" >&2; exit 2; }

# ---------------------------------------------------------------- the tool
if [ ! -x "$VENV/bin/mutmut" ]; then
  echo "installing mutmut==$MUTMUT_VERSION into $VENV" >&2
  python3 -m venv --system-site-packages "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "mutmut==$MUTMUT_VERSION"
fi
if ! "$VENV/bin/python" -c "import torch, numpy, scipy, starlette, yaml, pytest, tokenizers, websockets" 2>/dev/null; then
  echo "installing glassroom's dependencies into $VENV" >&2
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e "$REPO[test]"
fi
MUTMUT="$VENV/bin/mutmut"

# ---------------------------------------------------------------- one module at a time
WORK="$(mktemp -d "${TMPDIR:-/tmp}/glassroom-mutation.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
DEADLINE=$(( $(date +%s) + MINUTES * 60 ))

copy_tree() {  # the tracked files as they are in the working tree (in a fresh clone: as committed)
  mkdir -p "$1"
  if git -C "$REPO" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    (cd "$REPO" && git ls-files -z | tar --null -T - -cf - 2>/dev/null) | tar -xf - -C "$1"
  else
    (cd "$REPO" && tar --exclude=.git -cf - .) | tar -xf - -C "$1"
  fi
  rm -f "$1/setup.cfg"
}

{
  echo "# mutation check $(date -u '+%Y-%m-%d %H:%M UTC'), mutmut $MUTMUT_VERSION, ${MINUTES} min, $JOBS jobs (scripts/mutation.sh)"
  echo "# per module: killed / survived / no tests / timeout / not checked (time ran out); survivors' diffs below"
  echo
} > "$WORK/summary"

left_modules=${#MODULES[@]}
for module in "${MODULES[@]}"; do
  now=$(date +%s)
  share=$(( (DEADLINE - now) / left_modules ))
  left_modules=$(( left_modules - 1 ))
  name="$(basename "$module" .py)"
  dir="$WORK/$name"
  if [ "$share" -lt 20 ]; then
    echo "$module: not run (no time left)" | tee -a "$WORK/summary" >&2
    continue
  fi
  copy_tree "$dir"
  {
    echo "[mutmut]"
    echo "source_paths=glassroom"
    echo "only_mutate=$module"
    echo "also_copy="
    echo "    tests"
    echo "    experiments"
    echo "pytest_add_cli_args_test_selection="
    for f in ${FILES[$module]}; do echo "    $f"; done
    echo "pytest_add_cli_args="
    echo "    -p"
    echo "    no:cacheprovider"
    if [ -n "${SELECT[$module]}" ]; then
      echo "    -k"
      echo "    ${SELECT[$module]}"
    fi
  } > "$dir/setup.cfg"
  echo "$module: mutating against ${FILES[$module]}${SELECT[$module]:+ -k '${SELECT[$module]}'} (${share}s)" >&2
  set +e
  (cd "$dir" && OMP_NUM_THREADS=1 timeout --kill-after=20 "$share" "$MUTMUT" run --max-children "$JOBS" \
     > "$WORK/$name.log" 2>&1)
  rc=$?
  set -e
  (cd "$dir" && "$MUTMUT" results --all true > "$WORK/$name.results" 2>/dev/null) || true
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ]; then
    echo "$module: mutmut failed (exit $rc); the end of its log:" >&2
    tail -c 2000 "$WORK/$name.log" | tr '\r' '\n' | tail -15 >&2
  fi
  count() { grep -c ": $1\$" "$WORK/$name.results" || true; }
  line="$module: killed $(count killed), survived $(count survived), no tests $(count 'no tests'), timeout $(count timeout), not checked $(count 'not checked')"
  [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && line="$line (time ran out)"
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] && line="$line (mutmut failed, exit $rc)"
  echo "$line" | tee -a "$WORK/summary" >&2
  for mutant in $(grep -E ': (survived|timeout|suspicious)$' "$WORK/$name.results" | sed 's/^ *//; s/: [a-z ]*$//'); do
    (cd "$dir" && "$MUTMUT" show "$mutant" 2>/dev/null) >> "$WORK/diffs" || true
    echo >> "$WORK/diffs"
  done
  rm -rf "$dir"
done

cat "$WORK/summary" > "$OUT"
echo >> "$OUT"
[ -f "$WORK/diffs" ] && cat "$WORK/diffs" >> "$OUT"
survivors=$(grep -c '^# .*: \(survived\|timeout\|suspicious\)$' "$OUT" || true)
echo "$survivors surviving mutants written to $OUT" >&2
