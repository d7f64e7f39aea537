"""TEST HOSTS made on this machine: network namespaces joined by a veth pair, each with its own host name, PID
space and /etc/hosts, reached through a remote shell of their own (tests/netns_door.py).

Host i of a cluster is the network namespace ``cmt<pid>x<n>-<name>`` with ``eth0`` at 10.213.<k>.<i>/24 (the
addresses exist only inside those namespaces; traffic goes only between them and over their loopback), ``lo`` up,
and ``/etc/netns/<namespace>/hosts`` naming every host (``ip netns exec`` puts it over /etc/hosts there). Its first
process is ``unshare --uts --pid --fork --mount-proc`` running tests/netns_door.py as PID 1 with the host name
set: every command run on the host is a child of that door, as with sshd. The whole file system is shared (the
"shared file system" of a cluster: the worker, the run folder and the environments are at the same path on every
host); /proc is each host's own.

Everything is torn down by ``close()`` (a pytest finalizer): the door is killed, which ends every process of the
host's PID namespace, then the namespaces and their /etc/netns folders are removed. Namespaces left by a test
session that died are removed by the next one. Every wait is bounded.

Needs root with CAP_SYS_ADMIN and CAP_NET_ADMIN, iproute2 (``ip``) and util-linux (``unshare``); ``nft`` for the
firewall test. ``NetnsUnavailable`` says why not, and the tests skip with that reason.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from .procs import _alive  # noqa: F401 (one /proc liveness rule for every test helper)

DOOR = Path(__file__).with_name("netns_door.py")
PREFIX = "cmt"
COMMAND_TIMEOUT_S = 20.0
START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 15.0


class NetnsUnavailable(RuntimeError):
    """Test hosts cannot be made here (not root, no CAP_NET_ADMIN, no iproute2): the tests skip with this reason."""


def _run(argv: Sequence[str], timeout: float = COMMAND_TIMEOUT_S, check: bool = True, stdin: Optional[str] = None) -> subprocess.CompletedProcess:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False, input=stdin)
    if check and done.returncode != 0:
        raise NetnsUnavailable(f"`{' '.join(argv)}` failed (exit {done.returncode}): {(done.stderr or done.stdout).strip()[-300:]}")
    return done




def why_unavailable() -> Optional[str]:
    """None when test hosts can be made here, else the reason (for pytest.skip)."""
    if os.geteuid() != 0:
        return "test hosts need root (network, UTS and PID namespaces)"
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (apt-get install -y {'iproute2' if tool == 'ip' else 'util-linux'}; .ci/run installs it)"
    return None


def netns_pids(namespace: str) -> list[int]:
    done = _run(["ip", "netns", "pids", namespace], check=False)
    return [int(word) for word in done.stdout.split() if word.isdigit()]


def remove_stale() -> None:
    """Namespaces a test session that died left behind (its pid is in the name): kill what runs there, remove them."""
    done = _run(["ip", "netns", "list"], check=False)
    for line in done.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        match = re.match(rf"{PREFIX}(\d+)x\d+-", name)
        if not match or _alive(int(match.group(1))):
            continue
        for pid in netns_pids(name):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _run(["ip", "netns", "del", name], check=False)
        shutil.rmtree(f"/etc/netns/{name}", ignore_errors=True)


@dataclass
class Host:
    name: str
    namespace: str
    address: str
    socket: str
    init: Optional[subprocess.Popen] = None
    log: Optional[Path] = None

    @property
    def door_pid(self) -> Optional[int]:
        if self.init is None:
            return None
        try:
            children = Path(f"/proc/{self.init.pid}/task/{self.init.pid}/children").read_text().split()
        except OSError:
            return None
        return int(children[0]) if children else None


@dataclass
class HostSpec:
    """How one host differs from a plain one."""

    resolves: Mapping[str, str] = field(default_factory=dict)  # host name -> address in this host's /etc/hosts
    login_env: Mapping[str, str] = field(default_factory=dict)  # variables its remote shell gives every command
    cpuinfo: Optional[str] = None  # text put over /proc/cpuinfo on this host (a different CPU)


_counter = 0


class Cluster:
    """Two test hosts joined by a veth pair, or more joined by a bridge in a namespace of its own (each host's eth0 is
    one end of a veth whose other end is a port of the bridge), on one 10.213.<k>.0/24 network. Use as a context
    manager, or call close()."""

    def __init__(self, names: Sequence[str] = ("node1", "node2"), specs: Optional[Mapping[str, HostSpec]] = None) -> None:
        global _counter
        why = why_unavailable()
        if why:
            raise NetnsUnavailable(why)
        if len(names) < 2 or len(names) > 250:
            raise ValueError("a cluster has 2 to 250 hosts")
        _counter += 1
        self.folder = Path(tempfile.mkdtemp(prefix="cmt-hosts-"))
        self.specs = dict(specs or {})
        subnet = f"10.213.{random.randint(1, 250)}"
        tag = f"{PREFIX}{os.getpid()}x{_counter}"
        self.hosts = {name: Host(name, f"{tag}-{name}", f"{subnet}.{index + 1}", str(self.folder / f"{name}.sock"))
                      for index, name in enumerate(names)}
        self.rsh = str(self.folder / "rsh")
        self.switch = f"{tag}-switch" if len(names) > 2 else None  # more than two hosts: one bridge joins them, each by its own veth
        try:
            remove_stale()
            self._create()
        except BaseException:
            self.close()
            raise

    # --- making and removing -----------------------------------------------------------------------------------

    def _create(self) -> None:
        for host in self.hosts.values():
            _run(["ip", "netns", "add", host.namespace])
        if self.switch is None:
            first, second = self.hosts.values()
            _run(["ip", "link", "add", "eth0", "netns", first.namespace, "type", "veth", "peer", "name", "eth0", "netns", second.namespace])
        else:
            _run(["ip", "netns", "add", self.switch])
            _run(["ip", "-n", self.switch, "link", "add", "br0", "type", "bridge"])
            _run(["ip", "-n", self.switch, "link", "set", "br0", "up"])
            for index, host in enumerate(self.hosts.values()):
                _run(["ip", "link", "add", "eth0", "netns", host.namespace, "type", "veth", "peer", "name", f"port{index}", "netns", self.switch])
                _run(["ip", "-n", self.switch, "link", "set", f"port{index}", "master", "br0"])
                _run(["ip", "-n", self.switch, "link", "set", f"port{index}", "up"])
        for host in self.hosts.values():
            _run(["ip", "-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", "eth0"])
            _run(["ip", "-n", host.namespace, "link", "set", "lo", "up"])
            _run(["ip", "-n", host.namespace, "link", "set", "eth0", "up"])
            spec = self.specs.get(host.name, HostSpec())
            names = {h.name: h.address for h in self.hosts.values()}
            names.update(spec.resolves)
            etc = Path("/etc/netns") / host.namespace
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text("127.0.0.1 localhost\n" + "".join(f"{address} {name}\n" for name, address in names.items()))
        self._wait_for_carrier()
        (self.folder / "rsh").write_text(f"#!/bin/sh\n# TEST remote shell: runs the command on a test host, called like ssh\nexec {sys.executable} {DOOR} rsh {self.folder} \"$@\"\n")
        os.chmod(self.rsh, 0o755)
        for host in self.hosts.values():
            self._start_door(host)

    def _wait_for_carrier(self) -> None:
        """Each host's eth0 is operationally up before the hosts are handed out: a veth reads 'down' or 'lowerlayerdown' for a
        moment after both ends are set up, and compat (rightly) lists only interfaces that are up (bounded wait)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        waiting = list(self.hosts.values())
        while waiting:
            waiting = [h for h in waiting if " UP " not in f" {_run(['ip', '-n', h.namespace, '-br', 'link', 'show', 'eth0']).stdout} "]
            if waiting and time.monotonic() > deadline:
                raise RuntimeError(f"eth0 of {', '.join(h.name for h in waiting)} is not up {START_TIMEOUT_S:g} s after it was set up")
            if waiting:
                time.sleep(0.05)

    def _start_door(self, host: Host) -> None:
        spec = self.specs.get(host.name, HostSpec())
        cpuinfo = ""
        if spec.cpuinfo is not None:
            path = self.folder / f"{host.name}.cpuinfo"
            path.write_text(spec.cpuinfo)
            cpuinfo = f"mount --bind {path} /proc/cpuinfo || exit 3; "
        env = [f"{k}={v}" for k, v in spec.login_env.items()]
        script = f"hostname {host.name} || exit 3; {cpuinfo}exec \"$0\" \"$@\""
        host.log = self.folder / f"{host.name}.log"
        with open(host.log, "wb") as log:
            host.init = subprocess.Popen(
                ["ip", "netns", "exec", host.namespace, "unshare", "--uts", "--pid", "--fork", "--mount-proc", "--kill-child", "--",
                 "/bin/sh", "-c", script, sys.executable, str(DOOR), "door", host.socket, *env],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not os.path.exists(host.socket):
            if host.init.poll() is not None or time.monotonic() > deadline:
                raise NetnsUnavailable(f"test host {host.name} did not start: {host.log.read_text(errors='replace').strip()[-300:] or 'no output'}")
            time.sleep(0.05)

    def close(self) -> None:
        for host in self.hosts.values():
            if host.init is not None and host.init.poll() is None:
                host.init.send_signal(signal.SIGKILL)  # unshare --kill-child: its child, PID 1 of the host, dies, and with it the host's processes
        for host in self.hosts.values():
            if host.init is not None:
                try:
                    host.init.wait(timeout=STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    pass
        for host in self.hosts.values():
            deadline = time.monotonic() + STOP_TIMEOUT_S
            while netns_pids(host.namespace) and time.monotonic() < deadline:
                for pid in netns_pids(host.namespace):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                time.sleep(0.1)
            _run(["ip", "netns", "del", host.namespace], check=False)
            shutil.rmtree(f"/etc/netns/{host.namespace}", ignore_errors=True)
        if getattr(self, "switch", None):
            _run(["ip", "netns", "del", self.switch], check=False)
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- using the hosts -----------------------------------------------------------------------------------------

    def popen(self, host: str, argv: Sequence[str], env: Mapping[str, str], cwd: str = "/tmp") -> subprocess.Popen:
        """Start argv on ``host`` with this environment (sent along: the tests' way to run compat there); the
        returned process is the local client, whose stdout/stderr are the remote command's."""
        return subprocess.Popen([sys.executable, str(DOOR), "exec", "--send-env", "--cwd", cwd, self.hosts[host].socket, "--", *argv],
                                env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def run(self, host: str, argv: Sequence[str], env: Mapping[str, str], timeout: float = 60.0) -> subprocess.CompletedProcess:
        process = self.popen(host, argv, env)
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate(timeout=10)
            raise AssertionError(f"{' '.join(argv)} on {host} did not finish within {timeout:g} s: {err[-2000:]}") from None
        return subprocess.CompletedProcess(list(argv), process.returncode, out, err)

    def processes(self, host: str) -> list[int]:
        """Live processes on ``host`` besides its door (and the unshare above it)."""
        entry = self.hosts[host]
        keep = {entry.door_pid, entry.init.pid if entry.init else None}
        return [pid for pid in netns_pids(entry.namespace) if pid not in keep and _alive(pid)]

    def wait_idle(self, timeout: float = 15.0) -> dict[str, list[str]]:
        """{host: [command lines]} of what is still running on the hosts after ``timeout`` (bounded wait; empty = none)."""
        deadline = time.monotonic() + timeout
        while True:
            left = {name: self.processes(name) for name in self.hosts}
            if not any(left.values()) or time.monotonic() >= deadline:
                return {name: [_cmdline(pid) for pid in pids] for name, pids in left.items() if pids}
            time.sleep(0.2)

    def block_port(self, host: str, port: int) -> None:
        """Drop every TCP packet to ``port`` arriving at ``host`` (nft, inside that host's namespace only)."""
        if shutil.which("nft") is None:
            raise NetnsUnavailable("`nft` is not installed (apt-get install -y nftables; .ci/run installs it)")
        rules = f"table inet cmtest {{\n chain input {{\n  type filter hook input priority 0; policy accept;\n  tcp dport {port} drop\n }}\n}}\n"
        _run(["ip", "netns", "exec", self.hosts[host].namespace, "nft", "-f", "-"], stdin=rules)

    def drop_packets(self, host: str, percent: int) -> None:
        """Drop ``percent``% of the TCP packets arriving at and leaving ``host``, at random (nft numgen, inside its namespace only): a lossy
        cable, port or policer."""
        if shutil.which("nft") is None:
            raise NetnsUnavailable("`nft` is not installed (apt-get install -y nftables; .ci/run installs it)")
        rule = f"meta l4proto tcp numgen random mod 100 < {int(percent)} drop"
        rules = (f"table inet cmloss {{\n chain input {{\n  type filter hook input priority 0; policy accept;\n  {rule}\n }}\n"
                 f" chain output {{\n  type filter hook output priority 0; policy accept;\n  {rule}\n }}\n}}\n")
        _run(["ip", "netns", "exec", self.hosts[host].namespace, "nft", "-f", "-"], stdin=rules)

    def drop_link_packets(self, host: str, peer: str, percent: int) -> None:
        """Drop ``percent``% of the TCP packets between ``host`` and ``peer`` only, both ways, at random (nft numgen in
        ``host``'s namespace, matched on ``peer``'s address): one lossy link, every other link of both hosts clean."""
        if shutil.which("nft") is None:
            raise NetnsUnavailable("`nft` is not installed (apt-get install -y nftables; .ci/run installs it)")
        other = self.hosts[peer].address
        rule = f"meta l4proto tcp numgen random mod 100 < {int(percent)} drop"
        rules = (f"table inet cmlinkloss {{\n chain input {{\n  type filter hook input priority 0; policy accept;\n  ip saddr {other} {rule}\n }}\n"
                 f" chain output {{\n  type filter hook output priority 0; policy accept;\n  ip daddr {other} {rule}\n }}\n}}\n")
        _run(["ip", "netns", "exec", self.hosts[host].namespace, "nft", "-f", "-"], stdin=rules)

    def limit_link_rate(self, host: str, peer: str, rate: str = "20mbit") -> None:
        """Shape what ``host`` sends to ``peer`` only to ``rate`` (tc in ``host``'s namespace: an htb root on eth0 whose
        default class passes everything, a second class whose leaf is a tbf at ``rate``, and a u32 filter that sends
        ``peer``'s address there; the kernel here has htb, tbf and u32, not prio): one slow link; the pair test counts
        a link's slower direction."""
        if shutil.which("tc") is None:
            raise NetnsUnavailable("`tc` is not installed (apt-get install -y iproute2)")
        tc = ["ip", "netns", "exec", self.hosts[host].namespace, "tc"]
        _run([*tc, "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb", "default", "10"])
        for classid in ("1:10", "1:20"):
            _run([*tc, "class", "add", "dev", "eth0", "parent", "1:", "classid", classid, "htb", "rate", "10gbit", "quantum", "60000"])
        _run([*tc, "qdisc", "add", "dev", "eth0", "parent", "1:20", "handle", "20:", "tbf", "rate", rate, "burst", "32kbit", "latency", "50ms"])
        _run([*tc, "filter", "add", "dev", "eth0", "parent", "1:", "protocol", "ip", "prio", "1", "u32",
              "match", "ip", "dst", f"{self.hosts[peer].address}/32", "flowid", "1:20"])

    def set_mtu(self, host: str, mtu: int) -> None:
        """Set ``host``'s eth0 MTU (inside its namespace only): a host configured unlike the others."""
        _run(["ip", "netns", "exec", self.hosts[host].namespace, "ip", "link", "set", "dev", "eth0", "mtu", str(int(mtu))])

    def limit_rate(self, host: str, rate: str = "10mbit") -> None:
        """Shape everything ``host`` sends to ``rate`` (tc tbf on its eth0, inside its namespace): a slow cable or port."""
        if shutil.which("tc") is None:
            raise NetnsUnavailable("`tc` is not installed (apt-get install -y iproute2)")
        _run(["ip", "netns", "exec", self.hosts[host].namespace, "tc", "qdisc", "add", "dev", "eth0", "root", "tbf",
              "rate", rate, "burst", "32kbit", "latency", "50ms"])

    def address(self, host: str) -> str:
        return self.hosts[host].address


def _cmdline(pid: int) -> str:
    try:
        return f"{pid}: " + Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return f"{pid}: (gone)"
