#!/usr/bin/env bash
# The hold-out split of ni220 (43 examples at every offline instance) for the population
# certificates P_C / P_H (paper, Remark E.4: on hold-out examples, not the test split): the base
# model with features, run.sh's corrections replayed on it, the report of the hold-out runs.
# Same settings as run.sh; run after it. The steps: ../protocol.sh.
set -euo pipefail
cd "$(dirname "$0")"
TASKS="ni220_text_pert"
source ../protocol.sh
holdout
