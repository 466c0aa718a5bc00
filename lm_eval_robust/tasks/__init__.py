"""Layer 2, task: examples, perturbations, prompts, docs and each task's ``process_results``.

The Natural Instructions tasks are the modules here (``settings`` parses the ``--metadata`` of
both families, ``specs``, ``data``, ``ni``, ``harness_task``); each other family is a subpackage:
``perturb`` (the perturbations every family applies), ``generation`` (the four generation tasks)
and ``wrap`` (perturbed variants of any lm-eval task).
"""
