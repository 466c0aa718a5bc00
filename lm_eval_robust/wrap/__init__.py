"""Perturbed variants of any lm-eval task, resolved by name (``<task>_robust_text``,
``<task>_robust_format``), and the generic way of pointing a stock task config at local files.

``names`` parses a variant's name, ``settings`` reads its ``--metadata`` settings, ``parts`` finds
the format parts of a rendered prompt and re-renders them, ``local_data`` rewrites a stock config
to read local files, ``bigbench`` converts BIG-bench ``task.json`` files to the hub schema,
``task`` is the harness task class, ``metrics`` its aggregations and ``resolve`` teaches lm-eval's
``TaskManager`` the names.
"""
