"""Layer 3, requests: what the harness reads to build requests, the task YAMLs in ``task_yamls/``
(``ni_yamls`` writes them all, ``generation_yamls`` the generation family's part)."""
