"""Side effects that look at an environment: run a probe with another interpreter, parse what it says."""
