"""A REAL Docker engine for the tests: Debian's dockerd, started by the test session, and a base image made here.

No registry is reachable from the machines the tests run on, so nothing is pulled: the base image is a minimal
Debian 12 made with ``debootstrap`` (python3, python3-venv, ca-certificates; ``python`` linked to python3, as in
``python:3.11-slim``) and loaded with ``docker import``. The debootstrap folder is cached as a tar file in the tests'
cache ($COMPAT_TEST_CACHE, tests/real_envs.py); the engine, its images and its containers are not: every session
starts its own ``dockerd`` on a private socket with a private data folder, and ``close()`` removes the containers,
the images, the daemon (which also stops when the test process dies: PR_SET_PDEATHSIG), the containerd it started
and the folder; a folder left by a session that was killed is swept by the next one. The daemon reads an empty
configuration file of its own (not /etc/docker/daemon.json) and, should the machine run a system containerd, keeps
its containers in containerd namespaces of its own; dockerd still writes its key to /etc/docker/key.json and
plugin sockets under /run/docker.

The daemon runs with ``--bridge=none --iptables=false --ip6tables=false``: it makes no network, touches no firewall
rule, and containers have either the host's network (``--network host``: builds reach the package registry and the
FIXTURE index on 127.0.0.1 as pip does on this machine) or none (``--network none``, plus the veth pairs a test
moves into them). When the machine names a CA bundle (PIP_CERT, SSL_CERT_FILE, REQUESTS_CA_BUNDLE, or pip's
``cert``: a TLS-intercepting proxy), it becomes the image's /etc/ssl/certs/ca-certificates.crt, so pip and compat in
the image trust what they trust here.

Needs root, dockerd, docker and debootstrap (``.ci/run`` installs docker.io and debootstrap); ``DockerUnavailable``
says why not, and the tests skip with that reason. Every wait is bounded.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Optional

from compatmatrix.processes import die_with_parent

from .real_envs import CACHE

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
COMMAND_TIMEOUT_S = 120.0
DEBOOTSTRAP_TIMEOUT_S = 1200.0
BASE_TAG = "compat-test-base:bookworm"
# the cache key of the base folder: change it when the recipe below changes
BASE_RECIPE = ("bookworm", "minbase", ("python3", "python3-venv", "ca-certificates"), "python->python3", 1)
MIRROR = "http://deb.debian.org/debian"


class DockerUnavailable(RuntimeError):
    """A Docker engine cannot be run here (not root, no dockerd/docker/debootstrap, the daemon does not start)."""


def _client() -> Optional[str]:
    # Debian's client matches Debian's daemon (docker.io); a newer client elsewhere on PATH also speaks its API
    for candidate in ("/usr/bin/docker", shutil.which("docker")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def why_unavailable() -> Optional[str]:
    """None when a Docker engine can be run here, else the reason (for pytest.skip)."""
    if os.geteuid() != 0:
        return "dockerd needs root"
    missing = [name for name, found in (("dockerd", shutil.which("dockerd")), ("docker", _client()), ("debootstrap", shutil.which("debootstrap")))
               if not found]
    if missing:
        return f"{', '.join(missing)} not installed (Debian: apt-get install docker.io debootstrap; .ci/run does this)"
    return None


def machine_ca_bundle(env: Mapping[str, str] = os.environ) -> Optional[Path]:
    """The CA bundle this machine names for pip and requests, if any (the first that is a file)."""
    names = [env.get(key, "") for key in ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")]
    try:
        listing = subprocess.run(["pip", "config", "get", "global.cert"], capture_output=True, text=True, timeout=30, check=False).stdout
        names.append(listing.strip())
    except (OSError, subprocess.TimeoutExpired):
        pass
    for name in names:
        if name and Path(name).is_file():
            return Path(name)
    return None


class DockerEngine:
    """dockerd on a private socket; ``docker(...)`` runs the client against it."""

    def __init__(self) -> None:
        why = why_unavailable()
        if why:
            raise DockerUnavailable(why)
        self.client = _client()
        sweep_stale()
        # short paths: the socket path must fit in sun_path (108 bytes)
        self.root = Path(tempfile.mkdtemp(prefix="cmtd-", dir="/tmp"))
        self.socket = self.root / "d.sock"
        self.log = self.root / "dockerd.log"
        (self.root / "daemon.json").write_text("{}\n")  # not the machine's /etc/docker/daemon.json
        # containerd takes [A-Za-z0-9]+ joined by single '.', '_' or '-': mkdtemp's suffix may end in '_' (CI once drew
        # "cmt152454mh8i_" and every build failed), so only its letters and digits are kept
        space = f"cmt{os.getpid()}{''.join(c for c in self.root.name[-6:].lower() if c.isalnum())}"
        argv = ["dockerd", "--config-file", str(self.root / "daemon.json"), "--bridge=none", "--iptables=false", "--ip6tables=false",
                "--storage-driver=overlay2", "--data-root", str(self.root / "data"), "--exec-root", str(self.root / "x"),
                "--pidfile", str(self.root / "d.pid"), "--host", f"unix://{self.socket}",
                # a system containerd, if the machine runs one, keeps this engine's containers in namespaces of their own
                "--containerd-namespace", space, "--containerd-plugins-namespace", space + "p"]
        with open(self.log, "wb") as log:
            # dockerd gets SIGTERM when the test process dies (even by SIGKILL), and then stops its containers itself
            self.daemon = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                           preexec_fn=die_with_parent)
        try:
            self._wait_until_up()
        except BaseException:
            self.close()
            raise

    def _wait_until_up(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.daemon.poll() is not None:
                said = self.log.read_text(errors="replace")[-1500:]
                raise DockerUnavailable(f"dockerd exited with {self.daemon.returncode}: {said}")
            try:
                done = self.docker("version", "--format", "{{.Server.Version}}", timeout=10, check=False)
            except subprocess.TimeoutExpired:
                done = subprocess.CompletedProcess([], 1, "", "docker version timed out")
            if done.returncode == 0:
                self.server_version = done.stdout.strip()
                return
            if time.monotonic() > deadline:
                raise DockerUnavailable(f"dockerd did not answer within {START_TIMEOUT_S:.0f} s: {done.stderr.strip()[-300:]}")
            time.sleep(0.5)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({"DOCKER_HOST": f"unix://{self.socket}", "DOCKER_BUILDKIT": "0", "DOCKER_CONFIG": str(self.root / "client")})
        return env

    def docker(self, *args: str, timeout: float = COMMAND_TIMEOUT_S, check: bool = True, stdin: Optional[bytes] = None) -> subprocess.CompletedProcess:
        """The client against this engine; text output. A failure with check=True raises with what docker said."""
        done = subprocess.run([self.client, *args], capture_output=True, timeout=timeout, check=False, env=self.env(),
                              input=stdin, text=stdin is None)
        if check and done.returncode != 0:
            err = done.stderr if isinstance(done.stderr, str) else done.stderr.decode(errors="replace")
            out = done.stdout if isinstance(done.stdout, str) else done.stdout.decode(errors="replace")
            raise AssertionError(f"docker {' '.join(args[:3])} … failed (exit {done.returncode}):\n{out[-4000:]}\n{err[-3000:]}")
        return done

    def popen(self, *args: str, **kwargs) -> subprocess.Popen:
        return subprocess.Popen([self.client, *args], env=self.env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, **kwargs)

    def base_image(self) -> str:
        """BASE_TAG, imported from the cached debootstrap folder (made first if needed), with the machine's CA bundle."""
        tarball = base_rootfs()
        with open(tarball, "rb") as stream:
            done = subprocess.run([self.client, "import", "-", BASE_TAG + "-rootfs"], stdin=stream, capture_output=True, text=True,
                                  timeout=600, check=False, env=self.env())
        if done.returncode != 0:
            raise AssertionError(f"docker import failed: {done.stderr[-2000:]}")
        context = Path(tempfile.mkdtemp(prefix="ctx-", dir=self.root))
        lines = [f"FROM {BASE_TAG}-rootfs", 'ENV LANG=C.UTF-8 PATH="/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"']
        bundle = machine_ca_bundle()
        if bundle is not None:
            shutil.copyfile(bundle, context / "machine-ca.pem")
            lines.append("COPY machine-ca.pem /etc/ssl/certs/ca-certificates.crt")
        (context / "Dockerfile").write_text("\n".join(lines) + "\nCMD [\"bash\"]\n")
        self.docker("build", "--network", "none", "-t", BASE_TAG, str(context), timeout=600)
        return BASE_TAG

    def container_pid(self, name: str) -> int:
        return int(self.docker("inspect", "--format", "{{.State.Pid}}", name).stdout.strip())

    def close(self) -> None:
        """Remove every container, stop the daemon (its whole process group), delete its folder (its images with it)."""
        if self.daemon.poll() is None:
            try:
                ids = self.docker("ps", "-aq", timeout=30, check=False).stdout.split()
                if ids:
                    self.docker("rm", "-f", *ids, timeout=60, check=False)
                # no `docker rmi`: the images go with the engine's data root below, at once (rmi took ~90 s, layer by layer)
            except subprocess.TimeoutExpired:
                pass
            for sig, wait in ((signal.SIGTERM, STOP_TIMEOUT_S), (signal.SIGKILL, 10.0)):
                try:
                    os.killpg(self.daemon.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.daemon.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        _kill_holders(self.root)  # containerd and its shims run in process groups of their own
        self._remove_root()

    def _remove_root(self) -> None:
        _remove_folder(self.root)


def _kill_holders(root: Path) -> None:
    """SIGKILL every process whose command line names ``root`` (containerd, its shims): bounded, by /proc."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(root) in line:
            try:
                os.kill(int(entry.name), signal.SIGKILL)
            except OSError:
                pass


def _remove_folder(root: Path) -> None:
    # overlay and shm mounts a killed daemon may have left: unmount before deleting (bounded)
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines() if line.split()[1].startswith(str(root))]
    for mount in sorted(mounts, key=len, reverse=True):
        subprocess.run(["umount", "-l", mount], capture_output=True, timeout=30, check=False)
    shutil.rmtree(root, ignore_errors=True)


def sweep_stale() -> None:
    """Engines of earlier sessions that died: a /tmp/cmtd-* folder whose dockerd is gone is unmounted and removed."""
    for root in Path("/tmp").glob("cmtd-*"):
        try:
            pid = int((root / "d.pid").read_text().strip())
            os.kill(pid, 0)
            continue  # its dockerd is alive: another session's
        except (OSError, ValueError):
            pass
        _kill_holders(root)
        _remove_folder(root)


def base_rootfs() -> Path:
    """The cached tar of a minimal Debian 12 made by debootstrap (made once: ~45 s and ~100 MB on a fast mirror)."""
    import fcntl
    import hashlib

    key = hashlib.sha256(repr(BASE_RECIPE).encode()).hexdigest()[:12]
    folder = CACHE / "docker-base"
    folder.mkdir(parents=True, exist_ok=True)
    tarball = folder / f"debian-bookworm-{key}.tar"
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if tarball.is_file():
            return tarball
        work = Path(tempfile.mkdtemp(prefix="debootstrap-", dir=folder))
        try:
            rootfs = work / "rootfs"
            suite, variant, packages, _, _ = BASE_RECIPE
            done = subprocess.run(["debootstrap", f"--variant={variant}", f"--include={','.join(packages)}", suite, str(rootfs), MIRROR],
                                  capture_output=True, text=True, timeout=DEBOOTSTRAP_TIMEOUT_S, check=False)
            if done.returncode != 0:
                raise DockerUnavailable(f"debootstrap of Debian {suite} failed (exit {done.returncode}): {(done.stderr or done.stdout)[-600:]}")
            (rootfs / "usr/local/bin/python").symlink_to("/usr/bin/python3")
            for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
                for entry in (rootfs / cache).glob("*.deb" if "archives" in cache else "*_*"):
                    entry.unlink()
            part = tarball.with_suffix(".part")
            subprocess.run(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(part), "."], check=True, timeout=600, capture_output=True)
            part.rename(tarball)
            return tarball
        finally:
            shutil.rmtree(work, ignore_errors=True)


def run_argv(image: str, argv: Sequence[str], network: str = "none", name: Optional[str] = None, extra: Sequence[str] = ()) -> list[str]:
    """``docker run`` arguments for a command in ``image`` (removed when it ends)."""
    return ["run", "--rm", "--network", network, *(["--name", name] if name else []), *extra, image, *argv]
