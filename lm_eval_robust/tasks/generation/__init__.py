"""Perturbed generation tasks (NQ-open, GSM8K, TriviaQA, XSum): the task layer's part.

* :mod:`.data`: the four datasets, from a local data directory or their canonical online source;
* :mod:`.tasks`: prompts (few-shot as the harness's own tasks), docs, per-doc results;
* :mod:`.metrics`: exact match (answer aliases, GSM8K final number), token F1 and ROUGE.

The rest of the family sits in its own layers: the YAMLs in
:mod:`lm_eval_robust.requests.generation_yamls`, intermediate-layer debiasing in
:mod:`lm_eval_robust.scoring.generation`, the layer-sweep table in
:mod:`lm_eval_robust.report.generation`; ``lm-eval-robust fit --layer`` is
:mod:`lm_eval_robust.cli.fit_layers`.
"""
