"""Perturbed generation tasks (NQ-open, GSM8K, TriviaQA, XSum) and intermediate-layer debiasing.

* :mod:`.data`: the four datasets, from a local data directory or their canonical online source;
* :mod:`.tasks`: prompts (few-shot as the harness's own tasks), docs, per-doc results;
* :mod:`.metrics`: exact match (answer aliases, GSM8K final number), token F1 and ROUGE;
* :mod:`.layers`: decoder layers, prompt encoding and last-prompt-token state collection, the
  debiasing hook context;
* :mod:`.fit`: the layer correction (PCA of clean-perturbed differences + ridge), its file format;
* :mod:`.table`: the Table-4-shaped summary of a layer sweep's runs.

``lm-eval-robust fit --layer`` is :mod:`lm_eval_robust.cli.fit_layers`.
"""
