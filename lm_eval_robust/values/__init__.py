"""Layer 5, per-doc values: what the model left per prompt, read back (feature shards, tie
credit, completeness of a run, a run's samples paired by doc)."""
