"""compat tune: the search space of launch configurations, the correctness proof against a single-process reference."""
