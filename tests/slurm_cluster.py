"""A REAL two-node Slurm cluster made on this machine: Debian's slurmctld and slurmd (slurm-wlm) and munged, the
nodes being the network namespaces of tests/netns_hosts.py (a veth pair, each end with its address and its host name
in the namespace's hosts file).

* munged runs once, in the root namespace, on a socket, key and log of its own in the cluster's folder (Debian's
  munge service is not used); slurm.conf names that socket (AuthInfo=socket=).
* slurmctld runs on the first node, one slurmd per node (``slurmd -N NAME``), each started as
  ``nsenter --net=/run/netns/NS unshare --uts --mount`` with the namespace's hosts file bound over /etc/hosts and its
  host name set. ``ip netns exec`` is not used: it remounts /sys, and slurmd then finds no cgroup file system. A
  namespace needs an address besides ``lo`` (slurmctld loops on getaddrinfo of its own name otherwise): the veth's.
* ProctrackType=proctrack/linuxproc and TaskPlugin=task/none (no cgroups needed); JobAcctGatherType=none.
* Clients (srun, sbatch, scontrol, sinfo) run in the first node's namespace with SLURM_CONF set (``run``).

``close()`` stops the daemons (SIGTERM, then SIGKILL after a bounded wait), then munged, then the namespaces
(netns_hosts.Cluster.close kills anything still running in them), and removes the folder. Every wait is bounded.

Needs root, the netns tools, and slurmctld/slurmd/srun/sbatch/scontrol/munged (.ci/run installs slurm-wlm and munge);
``SlurmUnavailable`` says why not, and the tests skip with that reason.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Optional

from .netns_hosts import Cluster, NetnsUnavailable
from .netns_hosts import why_unavailable as netns_why_unavailable

TOOLS = ("slurmctld", "slurmd", "srun", "sbatch", "scontrol", "sinfo", "munged", "nsenter", "unshare")
START_TIMEOUT_S = 45.0
STOP_TIMEOUT_S = 10.0


class SlurmUnavailable(RuntimeError):
    """A Slurm cluster cannot be made here (not root, Slurm or munge not installed): the tests skip with this reason."""


def why_unavailable() -> Optional[str]:
    why = netns_why_unavailable()
    if why:
        return why
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not installed (apt-get install -y slurm-wlm munge; .ci/run installs them)"
    return None


def _stop(process: Optional[subprocess.Popen]) -> None:
    if process is None or process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=STOP_TIMEOUT_S)


class SlurmCluster:
    def __init__(self, names: Sequence[str] = ("node1", "node2")) -> None:
        why = why_unavailable()
        if why:
            raise SlurmUnavailable(why)
        self.munged: Optional[subprocess.Popen] = None
        self.daemons: list[subprocess.Popen] = []
        try:
            self.hosts = Cluster(names)
        except NetnsUnavailable as exc:
            raise SlurmUnavailable(str(exc)) from None
        self.names = tuple(names)
        self.folder = self.hosts.folder / "slurm"
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    # --- making and removing -------------------------------------------------------------------------------------

    def _start(self) -> None:
        folder = self.folder
        (folder / "munge").mkdir(parents=True)
        (folder / "state").mkdir()
        os.chmod(folder / "munge", 0o700)
        key = folder / "munge" / "key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o600)
        self.munge_socket = str(folder / "munge" / "sock")
        self.munged = subprocess.Popen(
            ["munged", "--foreground", "--force", f"--socket={self.munge_socket}", f"--key-file={key}", f"--log-file={folder / 'munge' / 'log'}",
             f"--pid-file={folder / 'munge' / 'pid'}", f"--seed-file={folder / 'munge' / 'seed'}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self._wait(lambda: os.path.exists(self.munge_socket), "munged made no socket", self.munged)
        for name in self.names:
            (folder / name / "spool").mkdir(parents=True)
        self.conf = folder / "slurm.conf"
        self.conf.write_text(self._conf())
        first = self.names[0]
        self.daemons.append(self._daemon(first, ["slurmctld", "-D", "-i"], "slurmctld"))
        for name in self.names:
            self.daemons.append(self._daemon(name, ["slurmd", "-D", "-N", name], "slurmd"))
        self._wait(lambda: self.states() == {name: "idle" for name in self.names}, "the nodes did not come up idle", None)

    def _conf(self) -> str:
        folder = self.folder
        cpus = os.cpu_count() or 1
        first = self.names[0]
        nodes = "".join(f"NodeName={name} NodeAddr={self.hosts.address(name)} CPUs={cpus} State=UNKNOWN\n" for name in self.names)
        return (f"ClusterName=cmtest\nSlurmctldHost={first}({self.hosts.address(first)})\nSlurmUser=root\nSlurmdUser=root\n"
                f"AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket={self.munge_socket}\n"
                "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nJobAcctGatherType=jobacct_gather/none\n"
                "AccountingStorageType=accounting_storage/none\nSchedulerType=sched/builtin\nSelectType=select/cons_tres\n"
                "SelectTypeParameters=CR_CPU\nMpiDefault=none\nReturnToService=2\nSlurmdTimeout=30\nInactiveLimit=0\nKillWait=5\n"
                f"StateSaveLocation={folder / 'state'}\nSlurmdSpoolDir={folder}/%n/spool\nSlurmctldPidFile={folder / 'slurmctld.pid'}\n"
                f"SlurmdPidFile={folder}/%n/slurmd.pid\nSlurmctldLogFile={folder / 'slurmctld.log'}\nSlurmdLogFile={folder}/%n/slurmd.log\n"
                f"SlurmctldPort=6817\nSlurmdPort=6818\n{nodes}"
                "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE\n")

    def _daemon(self, host: str, argv: Sequence[str], what: str) -> subprocess.Popen:
        namespace = self.hosts.hosts[host].namespace
        script = f'mount --bind /etc/netns/{namespace}/hosts /etc/hosts && hostname {host} && exec "$@"'
        with open(self.folder / f"{host}.{what}.out", "wb") as out:
            return subprocess.Popen(["nsenter", f"--net=/run/netns/{namespace}", "unshare", "--uts", "--mount", "--propagation", "private",
                                     "sh", "-c", script, "sh", *argv], env=self.env(), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)

    def _wait(self, ready, what: str, process: Optional[subprocess.Popen]) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready():
            dead = [p for p in ([process] if process else self.daemons) if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "; ".join(f"{p.name}: {p.read_text(errors='replace').strip()[-300:]}" for p in self.folder.glob("*.out"))
                raise SlurmUnavailable(f"the test Slurm cluster did not start ({what}): {logs or 'no output'}")
            time.sleep(0.2)

    def close(self) -> None:
        try:
            if self.daemons and self.daemons[0].poll() is None:
                self.run(["scancel", "--full", "--quiet", "--user=root"], timeout=STOP_TIMEOUT_S, check=False)
        except (subprocess.TimeoutExpired, OSError):
            pass
        for process in reversed(self.daemons):
            _stop(process)
        _stop(self.munged)
        hosts = getattr(self, "hosts", None)
        if hosts is not None:
            hosts.close()  # kills whatever is left in the namespaces, removes them and the folder

    # --- using the cluster -----------------------------------------------------------------------------------------

    def env(self, base: Optional[Mapping[str, str]] = None) -> dict[str, str]:
        env = dict(os.environ if base is None else base)
        env["SLURM_CONF"] = str(self.conf) if hasattr(self, "conf") else ""
        return env

    def run(self, argv: Sequence[str], env: Optional[Mapping[str, str]] = None, timeout: float = 60.0, check: bool = False,
            cwd: Optional[str] = None) -> subprocess.CompletedProcess:
        """argv on the first node (a client of the cluster: srun, sbatch, scontrol), bounded by ``timeout``."""
        namespace = self.hosts.hosts[self.names[0]].namespace
        process = subprocess.Popen(["nsenter", f"--net=/run/netns/{namespace}", *argv], env=self.env(env), cwd=cwd, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate(timeout=STOP_TIMEOUT_S)
            raise AssertionError(f"{' '.join(argv)} did not finish within {timeout:g} s: {err[-2000:]}") from None
        done = subprocess.CompletedProcess(list(argv), process.returncode, out, err)
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} failed ({done.returncode}): {err[-2000:]}")
        return done

    def states(self) -> dict[str, str]:
        """{node: its state as sinfo says it (idle, alloc, drain, down...)}."""
        done = self.run(["sinfo", "--noheader", "--Node", "--format=%N %t"], timeout=15.0)
        return dict(line.split()[:2] for line in done.stdout.splitlines() if len(line.split()) >= 2)

    def wait_idle(self, timeout: float = 30.0) -> None:
        """Until every node is idle again (a job's end is seen by slurmctld a moment after srun returns)."""
        deadline = time.monotonic() + timeout
        while self.states() != {name: "idle" for name in self.names}:
            if time.monotonic() > deadline:
                raise AssertionError(f"the nodes are not idle after {timeout:g} s: {self.states()}")
            time.sleep(0.3)

    def processes(self) -> dict[str, list[str]]:
        """What runs on the nodes besides the daemons and the doors (a job's leftovers)."""
        keep = {p.pid for p in self.daemons}
        left = {}
        for name in self.names:
            pids = [pid for pid in self.hosts.processes(name) if pid not in keep and not _is_daemon(pid)]
            if pids:
                left[name] = [_cmdline(pid) for pid in pids]
        return left


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "(gone)"


def _is_daemon(pid: int) -> bool:
    line = _cmdline(pid)
    if "slurmscriptd" in line:
        return True
    return bool(line.split()) and os.path.basename(line.split()[0]) in ("slurmctld", "slurmd")
