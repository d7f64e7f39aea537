"""Read a machine from a folder shaped like /sys (a recorded copy, ``compat launch --sysfs-root DIR``): its CPU
topology (devices/system/cpu, devices/system/node) and, when recorded, its cgroup quota (fs/cgroup/cpu.max, or
fs/cgroup/cpu/cpu.cfs_quota_us + cpu.cfs_period_us). The recorded machine's own affinity is not in sysfs: every
online CPU counts as allowed. The live machine comes from the environment probe instead (placement.topology
.machine_from_snapshot), which reads /sys with the same function.

Only regular files are read (a FIFO or a device is refused without blocking), each up to a small size; a CPU list
naming a CPU at or above env_probe.MAX_CPUS and a cgroup file the kernel could not have written are refused with a
sentence naming the file.

Side effects: reads files under the folder.
"""

from __future__ import annotations

from pathlib import Path

from ..environment import env_probe
from ..errors import UsageError, path_refused, shown
from .topology import Machine, TopologyError, topology_from_probe


def read_machine(sys_root: str) -> Machine:
    root = Path(sys_root)
    cpu = root / "devices" / "system" / "cpu"
    why = path_refused(sys_root)
    if why is None:
        try:
            shaped = cpu.is_dir()
        except OSError as exc:  # ENAMETOOLONG below the root (the whole path over PATH_MAX), ...
            why = path_refused(str(cpu)) or f"cannot be looked at ({exc.strerror})"
    if why is not None:  # a name over NAME_MAX, a path over PATH_MAX, a missing folder: one sentence, never an OSError
        raise UsageError(f"--sysfs-root {shown(sys_root, 160)} {why}.", "Pass the folder of a recorded copy of /sys (by a shorter path if it is long).")
    if not shaped:
        raise UsageError(f"--sysfs-root {shown(sys_root, 160)} has no devices/system/cpu folder: it is not shaped like /sys.",
                         "Pass a folder holding devices/system/cpu/online, devices/system/cpu/cpuN/topology/ and devices/system/node/nodeN/cpulist (a copy of /sys).")
    data = env_probe.cpu_topology(str(root))
    try:
        topology = topology_from_probe(data, str(root))
    except TopologyError as exc:
        raise UsageError(f"The topology recorded in {sys_root} cannot be read: {exc}.", "Record the files again from the machine's /sys (cp --parents keeps the layout).") from None
    quota, problems = env_probe.read_cgroup_quota(str(root), own_path=False)
    if problems:
        raise UsageError(f"The cgroup quota recorded in {shown(sys_root, 200)} cannot be read: {problems[0]}.",
                         "Copy the cgroup files again from the machine (cat /sys/fs/cgroup/cpu.max), or remove them to plan without a quota.")
    return Machine(topology, frozenset(topology.cpus), quota)
