#!/usr/bin/env bash
# Ridge with β = the residual mean (fit --beta mean) beside the paper's midpoint rule, on the
# same train features, replayed on the same base run (report_beta_mean/). Run after run.sh.
# Exploratory: the rule was added after run.sh showed ridge hurting ni1297.
# The steps: ../protocol.sh.
set -euo pipefail
cd "$(dirname "$0")"
TASKS="ni069_text_pert ni1297_text_pert"
source ../protocol.sh
beta_mean
