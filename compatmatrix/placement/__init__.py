"""Where each rank runs: the machine's CPU topology, a per-rank plan of cores and threads, and its binding handed to
the launcher that carries it out (``compat launch``; the thread advice of ``compat doctor`` and ``compat env``).

reader (sysfs.py, or the environment probe) -> Machine (topology.py) -> plan_ranks (plan.py) -> Plan
  -> launch_environment (environment.py) + compose (binding.py: the launcher's bound(), launchers/) -> Invocation
  -> render.py (text, JSON) | launchers/run.py

Everything but sysfs.py and service.py is pure.
"""
