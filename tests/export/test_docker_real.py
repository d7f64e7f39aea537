"""examples/Dockerfile built for REAL by a REAL Docker engine (tests/docker_engine.py), then compat run inside the image.

The build: the project's own base image (Debian 12 by debootstrap, standing in for python:3.11-slim, which no registry
here can serve), ``docker build --network host`` of examples/Dockerfile with PROFILE=stock and torch 2.13.0, the CPU
wheel of this machine served by a local PEP 503 index on 127.0.0.1 as the pytorch-cpu host (the PyTorch CPU index
itself cannot be reached here); every other package (transformers, accelerate, torch's dependencies, compat's own)
comes from PyPI through whatever proxy the machine uses. Nothing here is a fixture: real torch ranks, real gloo, the
real Trainer, inside real containers.

Inside the image: ``compat check`` passes, exec-form commands find the training venv first on PATH (the PATH lesson of
the first real build), ``compat doctor --live`` passes in a container with no network but lo, and two containers,
joined by a veth pair the test moves into them, train together as two nodes under torchrun.

Skips with the reason where a Docker engine cannot be run (not root, no docker.io/debootstrap), PyPI cannot be reached,
or the local torch wheel is not on this machine. The engine, its images and containers are removed at the end.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid

import jsonschema
import pytest

from ..clean_env import base_env
from ..conftest import ROOT
from ..docker_engine import DockerEngine, DockerUnavailable
from ..install.test_install_real import pypi_unreachable
from ..local_torch import local_torch_index

pytestmark = [pytest.mark.integration, pytest.mark.network]
SCHEMA = json.loads((ROOT / "compatmatrix" / "schemas" / "findings-v1.json").read_text())
TORCH = "torch==2.13.0"
BUILD_TIMEOUT_S = 2400
IMAGE = "compat-test-stock:latest"
TRAIN = "/opt/train/bin/python"
COMPAT = "/opt/compat/bin/compat"
# the commands of the processes alive in a container, but the one asking (the image has no ps)
LIVE_PROCESSES = """
import os
me = os.getpid()
for pid in sorted(int(p) for p in os.listdir("/proc") if p.isdigit()):
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        line = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\\0", b" ").decode().strip()
    except OSError:
        continue  # ended meanwhile
    if pid != 1 and pid != me and state != "Z" and line != "sleep infinity":
        print(line or "?")
"""


def processes_left(engine, name, timeout=20.0):
    """The command lines alive in container ``name`` besides its PID 1, once they stop changing (bounded wait)."""
    deadline = time.monotonic() + timeout
    while True:
        left = [line for line in engine.docker("exec", name, "python3", "-c", LIVE_PROCESSES).stdout.splitlines() if line.strip()]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


@pytest.fixture(scope="module")
def engine():
    try:
        made = DockerEngine()
    except DockerUnavailable as exc:
        pytest.skip(f"a Docker engine cannot be run here: {exc}")
    yield made
    made.close()


@pytest.fixture(scope="module")
def torch_index(tmp_path_factory):
    """A local PEP 503 index on 127.0.0.1 serving this machine's real CPU torch wheel as the pytorch-cpu host."""
    with local_torch_index(tmp_path_factory.mktemp("torch-wheel"), tmp_path_factory.mktemp("torch-index"), TORCH) as index:
        yield index


GENERATED = "compat-test-generated:latest"


class Builds:
    """The module's two ``docker build``s, started together: each waits on PyPI, on the local index and on its own
    layer commits much of its time, so the second no longer waits for the first (two builds one after the other were
    ~300 s each on a 2-core machine). Each build's output goes to a file (two builds' output would fill a pipe)."""

    def __init__(self, engine, folder):
        self.engine, self.folder, self.running, self.started = engine, folder, {}, {}

    def start(self, tag, *args):
        log = open(self.folder / f"{tag.split(':')[0]}.log", "wb")
        self.started[tag] = time.monotonic()
        self.running[tag] = (subprocess.Popen([self.engine.client, "build", "--network", "host", "-t", tag, *args], env=self.engine.env(),
                                              stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True), log)

    def wait(self, tag):
        process, log = self.running[tag]
        try:
            process.wait(timeout=max(1.0, BUILD_TIMEOUT_S - (time.monotonic() - self.started[tag])))
        finally:
            log.close()
        output = (self.folder / f"{tag.split(':')[0]}.log").read_text(errors="replace")
        assert process.returncode == 0, f"docker build of {tag} failed (exit {process.returncode}):\n{output[-6000:]}"
        print(f"docker build of {tag}: {time.monotonic() - self.started[tag]:.0f} s (the two builds at once)")
        return tag

    def stop(self):
        for process, log in self.running.values():
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass  # it ended between the poll and the kill
                process.wait(timeout=30)
            log.close()


def generated_context(folder):
    """`compat export dockerfile --profile stock torch==2.13.0` and compat's own wheel in compat-dist/ (the step the
    file's comment names): the build context a user makes."""
    written = subprocess.run([sys.executable, "-m", "compatmatrix", "export", "dockerfile", "--profile", "stock", TORCH],
                             capture_output=True, text=True, timeout=120, env=base_env(), check=False)
    assert written.returncode == 0, written.stderr
    (folder / "Dockerfile").write_text(written.stdout)
    wheel = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(folder / "compat-dist"), str(ROOT)],
                           capture_output=True, text=True, timeout=600, env=base_env(), check=False)
    assert wheel.returncode == 0, wheel.stderr[-2000:]
    return folder


@pytest.fixture(scope="module")
def builds(engine, torch_index, tmp_path_factory):
    why = pypi_unreachable()
    if why:
        pytest.skip(f"PyPI cannot be reached from this machine: {why}")
    base = engine.base_image()
    context = generated_context(tmp_path_factory.mktemp("generated-context"))
    made = Builds(engine, tmp_path_factory.mktemp("build-logs"))
    try:
        made.start(IMAGE, "-f", str(ROOT / "examples" / "Dockerfile"), "--build-arg", f"BASE={base}", "--build-arg", "PROFILE=stock",
                   "--build-arg", f"PINS={TORCH}", "--build-arg", "RANKS_PER_NODE=2",
                   "--build-arg", f"COMPAT_INDEX_PYTORCH_CPU={torch_index.host_url('pytorch-cpu')}", str(ROOT))
        made.start(GENERATED, "--build-arg", f"BASE={base}", "--build-arg", f"COMPAT_INDEX_PYTORCH_CPU={torch_index.host_url('pytorch-cpu')}",
                   str(context))
        yield made
    finally:
        made.stop()


@pytest.fixture(scope="module")
def image(builds):
    """examples/Dockerfile with PROFILE=stock and torch 2.13.0, built for real."""
    return builds.wait(IMAGE)


def run_in(engine, image, argv, network="none", extra=(), timeout=600, check=False):
    return engine.docker("run", "--rm", "--network", network, *extra, image, *argv, timeout=timeout, check=check)


def findings(done):
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads(done.stdout)
    jsonschema.validate(data, SCHEMA)
    return {c["id"]: c for c in data["checks"]}, data


def test_compat_check_passes_inside_the_built_image(engine, image):
    done = run_in(engine, image, [COMPAT, "check", "--python", TRAIN, "--ranks-per-node", "2", "--json"])
    checks, _ = findings(done)
    assert done.returncode == 0, {k: v["summary"] for k, v in checks.items() if v["status"] not in ("pass", "skip", "info")}
    installed = run_in(engine, image, [TRAIN, "-c", "import torch, transformers, accelerate; print(torch.__version__, transformers.__version__, accelerate.__version__)"])
    assert installed.returncode == 0 and installed.stdout.split()[0] == "2.13.0+cpu", installed.stderr[-2000:]


def test_exec_form_commands_find_the_training_venv_first(engine, image):
    # the first real build's defect: compat env froze the build-time PATH, and the entrypoint dropped /opt/train/bin
    which = run_in(engine, image, ["bash", "-c", "command -v python torchrun; echo \"$PATH\""])
    assert which.returncode == 0, which.stderr
    python, torchrun, path = which.stdout.split()
    assert (python, torchrun) == ("/opt/train/bin/python", "/opt/train/bin/torchrun")
    assert path.split(":")[0] == "/opt/train/bin" and "/usr/bin" in path.split(":")
    exec_form = run_in(engine, image, ["torchrun", "--help"])
    assert exec_form.returncode == 0 and "--nproc-per-node" in exec_form.stdout.replace("_", "-"), exec_form.stderr[-1000:]
    # a PATH the user gives at run time is extended, not replaced
    given = run_in(engine, image, ["bash", "-c", "echo \"$PATH\""], extra=("-e", "PATH=/custom/bin:/usr/bin:/bin"))
    assert "/custom/bin" in given.stdout.strip().split(":"), given.stdout


def test_doctor_live_passes_in_a_container_with_only_loopback(engine, image):
    done = run_in(engine, image, [COMPAT, "doctor", "--live", "--json", "--python", TRAIN, "--nproc-per-node", "2"], timeout=900)
    checks, data = findings(done)
    bad = {k: v["summary"] for k, v in checks.items() if v["status"] == "fail"}
    assert done.returncode == 0 and not bad, bad
    assert checks["live.trainer"]["status"] == "pass" and checks["live.allreduce"]["status"] == "pass"
    assert len({r["params_sha256"] for r in data["live"]["ranks"]}) == 1


def _join(engine, names, subnet):
    """A veth pair between two running containers' network namespaces, eth0 = 10.<subnet>.0.<i+1>/24 in each."""
    pids = [engine.container_pid(name) for name in names]
    subprocess.run(["ip", "link", "add", "eth0", "netns", str(pids[0]), "type", "veth", "peer", "name", "eth0", "netns", str(pids[1])],
                   check=True, timeout=30, capture_output=True)
    for i, pid in enumerate(pids):
        for argv in (["ip", "addr", "add", f"10.{subnet}.0.{i + 1}/24", "dev", "eth0"], ["ip", "link", "set", "eth0", "up"]):
            subprocess.run(["nsenter", "-t", str(pid), "-n", *argv], check=True, timeout=30, capture_output=True)


def test_two_containers_train_together_as_two_nodes(engine, image):
    if subprocess.run(["ip", "-V"], capture_output=True, timeout=30, check=False).returncode != 0:
        pytest.skip("iproute2 (ip) is not installed")
    subnet = 215 + random.randrange(30)
    tag = uuid.uuid4().hex[:8]
    names = [f"cmt-{tag}-node1", f"cmt-{tag}-node2"]
    hosts = [arg for i, name in enumerate(("node1", "node2")) for arg in ("--add-host", f"{name}:10.{subnet}.0.{i + 1}")]
    try:
        for host, name in zip(("node1", "node2"), names):
            engine.docker("run", "-d", "--init", "--network", "none", "--hostname", host, "--name", name, *hosts, image, "sleep", "infinity")
        _join(engine, names, subnet)
        port = str(29000 + random.randrange(2000))
        common = [COMPAT, "doctor", "--live", "--json", "--only", "live", "--python", TRAIN, "--launcher", "torchrun", "--nnodes", "2",
                  "--nproc-per-node", "1", "--master-addr", "node1", "--master-port", port]
        runs = [engine.popen("exec", name, *common, "--node-rank", str(rank)) for rank, name in enumerate(names)]
        outputs = []
        for run in runs:
            out, err = run.communicate(timeout=600)
            outputs.append(subprocess.CompletedProcess(run.args, run.returncode, out, err))
        for host, done in zip(("node1", "node2"), outputs):
            checks, data = findings(done)
            bad = {k: v["summary"] for k, v in checks.items() if v["status"] == "fail"}
            assert done.returncode == 0 and not bad, (host, bad)
            assert checks["live.world"]["summary"].startswith("1 ranks here joined a group of 2"), checks["live.world"]["summary"]
            assert data["live"]["hosts"] == [host]
        ranks = [r for done in outputs for r in json.loads(done.stdout)["live"]["ranks"]]
        assert sorted(r["rank"] for r in ranks) == [0, 1]
        assert len({r["params_sha256"] for r in ranks}) == 1 and ranks[0]["params_sha256"]
        for name in names:  # nothing of the run is left in either container
            assert processes_left(engine, name) == [], name
    finally:
        engine.docker("rm", "-f", *names, timeout=60, check=False)


# --- the Dockerfile `compat export dockerfile` writes, built as a user builds it ------------------------------------


def test_the_generated_dockerfile_builds_and_its_image_checks(engine, builds):
    """`compat export dockerfile --profile stock torch==2.13.0` into a build context with compat's wheel in compat-dist/
    (the step its comment names), built for real (the module's second build): the build runs compat install, compat env
    and compat check itself, so a build that ends is a checked image; then the exec-form and the interpreter the
    container's commands get."""
    tag = builds.wait(GENERATED)
    which = run_in(engine, tag, ["bash", "-c", "command -v python torchrun"])
    assert which.returncode == 0 and which.stdout.split() == ["/opt/train/bin/python", "/opt/train/bin/torchrun"], which.stdout + which.stderr
    # one rank per container: the generated file's default (RANKS_PER_NODE=1), which its thread settings were written for
    done = run_in(engine, tag, [COMPAT, "check", "--python", TRAIN, "--ranks-per-node", "1", "--json"])
    checks, _ = findings(done)
    assert done.returncode == 0, {k: v["summary"] for k, v in checks.items() if v["status"] not in ("pass", "skip", "info")}
    exec_form = run_in(engine, tag, ["torchrun", "--help"])
    assert exec_form.returncode == 0, exec_form.stderr[-1000:]
