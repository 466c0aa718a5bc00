#!/usr/bin/env bash
# Does rescoring from the recorded features (fp32.sh) give what debiased_hf now computes live?
# Runs the first 63 docs of the base run's task with the base run's settings and compares each
# doc's label log-likelihoods with fp32/base_run's (paired by example and perturbation).
set -euo pipefail
cd "$(dirname "$0")"
export LM_EVAL_ROBUST_DATA_DIR="${LM_EVAL_ROBUST_DATA_DIR:-../../../shared/data}"
rm -rf fp32/live_check
lm_eval --model debiased_hf --model_args pretrained=qwen2.5-coder-1.5b-instruct,prefix_cache=true \
  --tasks ni220_text_pert --metadata '{"n_perturbations": 20, "n_examples": 1000, "text_scope": "query"}' \
  --batch_size 8 --limit 63 --log_samples --output_path fp32/live_check > fp32/live_check.log 2>&1
python - <<'PY'
import glob, gzip, json
import numpy as np

def load(pattern):
    out = {}
    for f in glob.glob(pattern):
        op = gzip.open if f.endswith(".gz") else open
        with op(f, "rt") as fh:
            for line in fh:
                s = json.loads(line)
                k = (s["doc"]["example_id"], s["doc"]["pert_id"])
                out[k] = np.array([float(r[0][0]) for r in s["resps"]])
    return out

live = load("fp32/live_check/*/samples_*.jsonl*")
res = load("fp32/base_run/*/samples_*.jsonl*")
diff_ll = [np.abs(v - res[k]).max() for k, v in live.items()]
diff_m = [abs((v[1] - v[0]) - (res[k][1] - res[k][0])) for k, v in live.items()]
same = sum(int(np.argmax(v) == np.argmax(res[k])) for k, v in live.items())
ties = sum(int(v[0] == v[1]) for v in live.values())
print(f"docs compared: {len(live)}; same prediction: {same}; exact ties live: {ties}")
print(f"max |ll live - ll rescored|: {max(diff_ll):.3g}; max |margin difference|: {max(diff_m):.3g}")
PY
