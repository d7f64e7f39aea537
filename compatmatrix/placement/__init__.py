"""Where each rank runs: the machine's CPU topology, a per-rank plan of cores and threads, and the launcher
command that carries it out (``compat launch``; the thread advice of ``compat doctor`` and ``compat env``).

reader (sysfs.py, or the environment probe) -> Machine (topology.py) -> plan_ranks (plan.py) -> Plan
  -> launch_environment (environment.py) + compose (launchers.py) -> Invocation -> render.py (text, JSON) | run.py

Everything but sysfs.py and run.py is pure.
"""
