"""Perturbed variants of any lm-eval task, resolved by name (``<task>_robust_text``,
``<task>_robust_format``), and the generic way of pointing a stock task config at local files:
the task layer's part.

``names`` parses a variant's name, ``settings`` reads its ``--metadata`` settings, ``parts`` finds
the format parts of a rendered prompt and re-renders them, ``local_data`` rewrites a stock config
to read local files, ``convert`` converts BIG-bench ``task.json`` files to the hub schema. The
harness task class (:mod:`lm_eval_robust.harness.wrap_task`) and the name resolution
(:mod:`lm_eval_robust.harness.wrap_resolve`) are registration; the aggregations
(:mod:`lm_eval_robust.stats.wrap_metrics`) are aggregation.
"""
