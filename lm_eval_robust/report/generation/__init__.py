"""Reports of the generation family: the Table-4-shaped summary of a layer sweep (``table``)
and the sweep itself (``sweep``)."""
