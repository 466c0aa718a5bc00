#!/usr/bin/env bash
# Run the non-integration test suite against older lm-eval releases of the supported range.
#
#   scripts/check_lm_eval_versions.sh              # the older supported releases: 0.4.11 0.4.12
#   scripts/check_lm_eval_versions.sh 0.4.12       # just one
#
# For each release: a venv under $LM_EVAL_VERSIONS_DIR (default .lm-eval-venvs/, kept between
# runs; FRESH=1 rebuilds it) with torch==2.13.0 (the CPU build from local disk), that lm-eval, the
# project (`pip install ".[test]"`, reinstalled every run) and then
# `pytest -q -p no:cacheprovider -m "not integration" tests`. CI (.ci/run) covers the newest
# release. Prints one summary line per release; exits non-zero if any release fails.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"

VERSIONS=("$@")
if [ "${#VERSIONS[@]}" -eq 0 ]; then
    VERSIONS=(0.4.11 0.4.12)
fi
BASE="${LM_EVAL_VERSIONS_DIR:-$ROOT/.lm-eval-venvs}"
export LM_EVAL_ROBUST_DATA_DIR="${LM_EVAL_ROBUST_DATA_DIR:-$ROOT/../shared/data}"
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
unset PYTHONPATH VIRTUAL_ENV

summary=()
status=0
for version in "${VERSIONS[@]}"; do
    venv="$BASE/lm-eval-$version"
    log="$BASE/lm-eval-$version.log"
    mkdir -p "$BASE"
    echo "== lm-eval $version: $venv (log: $log)"
    if [ -n "${FRESH:-}" ] || [ ! -x "$venv/bin/python" ]; then
        rm -rf "$venv"
        python3 -m venv "$venv"
    fi
    constraints="$venv/constraints.txt"
    printf 'torch==2.13.0\nlm-eval==%s\n' "$version" >"$constraints"
    if ! {
        "$venv/bin/python" -m pip install --quiet -c "$constraints" torch "lm-eval==$version" \
            ".[test]" &&
            "$venv/bin/python" -m pip install --quiet --no-deps --force-reinstall . &&
            "$venv/bin/python" -c "import importlib.metadata as md, sys; \
v = md.version('lm-eval'); sys.exit(v != '$version' and f'lm-eval {v} installed')"
    } >"$log" 2>&1; then
        summary+=("lm-eval $version: INSTALL FAILED (see $log)")
        status=1
        continue
    fi
    "$venv/bin/pytest" -q -p no:cacheprovider -m "not integration" tests >>"$log" 2>&1
    rc=$?
    summary+=("lm-eval $version: $(tail -n 1 "$log") (exit $rc)")
    # pytest exits 5 when nothing was collected: a failure here too.
    if [ "$rc" -ne 0 ]; then
        status=1
    fi
done

printf '%s\n' "${summary[@]}"
exit "$status"
