"""The network interfaces that are up on this machine, by name (what oneCCL's key-value store can bind to).

Side effects: reads /sys/class/net/*/operstate.
"""

from __future__ import annotations

from pathlib import Path


def up_interfaces(sys_net: str = "/sys/class/net") -> list[str]:
    """Network interfaces that are up here (loopback's state is 'unknown'), by name."""
    found = []
    for entry in sorted(Path(sys_net).iterdir()) if Path(sys_net).is_dir() else []:
        try:
            state = (entry / "operstate").read_text().strip()
        except OSError:
            continue
        if state in ("up", "unknown"):
            found.append(entry.name)
    return found
