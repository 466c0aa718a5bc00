"""Layer 1, base: what every layer may use (errors, defaults, the atomic writer, input checks,
offline model files, the task directory, the harness names of our metrics and tasks, the vLLM
metadata alias). Knows nothing of tasks or models."""
