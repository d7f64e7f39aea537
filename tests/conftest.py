from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from compatmatrix.matrix import load_matrix
from compatmatrix.resolve import build_request
from compatmatrix.target import Platform, PythonTarget

from .clean_env import base_env, config_home, data_home, scrubbed, with_loopback

# A CI runner (or a shell that started this session in the background with &) may hand pytest SIGINT ignored; an
# ignored signal stays ignored across exec, so every compat the tests start would ignore Ctrl-C too and the tests that
# interrupt compat would wait in vain. The tests start their processes with Python's own default instead.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)



# Integration test files that start no ranks, namespaces, daemons or containers and judge no timing: installs into
# venvs, compat as a subprocess against FIXTURE environments and indexes, shells, TLS on loopback. They form a second
# group, which a second worker runs beside the unit tests, while the first group (every other integration test) runs on
# one worker, one at a time. Before 2026-12-07 all integration tests were one group and the unit worker sat idle for most
# of the run (bench/ci_durations.py shows each group's share from .ci/run's junit XML).
BESIDE = frozenset({
    "test_bounds.py", "test_cli.py", "test_cli_export.py", "test_compare_uv.py", "test_crosscheck.py", "test_doctor.py", "test_dockerfile.py",
    "test_env_exports.py", "test_export_sbatch.py", "test_export_skypilot.py", "test_extension_build.py", "test_fabric_report_browser.py", "test_fix_commands.py", "test_install.py",
    "test_install_hostile.py", "test_install_killpoints.py", "test_install_real.py", "test_install_review.py",
    "test_install_uv.py", "test_json_schemas.py", "test_matrix_health.py", "test_matrix_update.py", "test_matrix_verify.py",
    "test_network_choice.py", "test_one_plan_every_form.py", "test_packaging.py", "test_planner_errors.py",
    "test_precommit.py", "test_real_inputs.py", "test_runtime_wheels.py", "test_secrets.py", "test_system_oneccl.py",
    "test_tls_trust.py", "test_translate.py", "test_xdist_grouping.py",
})
SERIAL_GROUP, BESIDE_GROUP = "integration", "integration-beside"


def integration_group(path: Path) -> str:
    """The xdist group of an integration test in ``path``: BESIDE's files share the unit tests' worker."""
    return BESIDE_GROUP if path.name in BESIDE else SERIAL_GROUP


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the xdist_group marks into the test ids
def pytest_collection_modifyitems(config, items):
    """The README's test command runs two pytest-xdist workers with ``--dist loadgroup``. The integration tests that
    run real ranks, namespaces, daemons, containers or timings are one group, so one worker runs them all, one at a time
    and in order, and they never share the machine with each other; the integration tests of BESIDE's files are a
    second group, which xdist (its scopes ordered by number of tests, largest first, one to each worker at the start)
    gives the other worker, where the unit tests run too. A third worker and group for the Docker, Ray, real doctor and
    migrate files was tried (2026-12-08): their ranks and builds beside the timed tests made those fail under load.
    Without xdist the marks do nothing."""
    for item in items:
        if item.get_closest_marker("integration") is not None:
            group = integration_group(Path(str(item.fspath)))
            item.add_marker(pytest.mark.xdist_group(group))
            # named in --junitxml, so bench/ci_durations.py can add up each worker's share
            item.user_properties.append(("tier", group))


ROOT = Path(__file__).resolve().parents[1]
# shared/ sits beside the repository (CI's clone and the lead's tree); COMPAT_TEST_SHARED names it for a tree elsewhere
SHARED = Path(os.environ.get("COMPAT_TEST_SHARED") or ROOT.parent / "shared")
FIXTURES = Path(__file__).resolve().parent / "fixtures"
LINUX = Platform.from_tag("manylinux_2_28_x86_64")


@pytest.fixture(scope="session")
def matrix():
    """The real, bundled matrix."""
    return load_matrix()


@pytest.fixture(scope="session")
def mini_matrix():
    """FIXTURE matrix with made-up facts (tests/fixtures/mini_matrix.toml)."""
    return load_matrix(FIXTURES / "mini_matrix.toml")


def make_request(matrix, python="3.11", *requirements, profile=None, with_=(), platform=LINUX):
    return build_request(matrix, PythonTarget.parse(python), platform, profile, with_, requirements)


@pytest.fixture(autouse=True)
def scrubbed_environment(monkeypatch):
    """In-process tests run without what the CI shell exported (tests/clean_env.py): the variables base_env() removes
    are removed from os.environ, XDG_CONFIG_HOME and XDG_DATA_HOME are this session's, and no_proxy names the loopback addresses."""
    for name in [name for name in os.environ if scrubbed(name)]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", config_home())
    monkeypatch.setenv("XDG_DATA_HOME", data_home())
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.setenv(name, with_loopback(os.environ.get(name, "")))
    yield
    # what compat reads once per process must not carry one in-process test's settings into the next (a test's
    # PIP_PROXY=http://proxy:3128 sent a later real install's pip to a proxy that does not exist)
    pipconfig = sys.modules.get("compatmatrix.install.pipconfig")
    if pipconfig is not None:
        pipconfig.forget()


def run_compat(*args, env_extra=None, drop=(), timeout=120):
    """Run the installed `compat` entry point as a user would (a real subprocess), from the scrubbed base environment
    (tests/clean_env.py); ``drop`` removes variables, ``env_extra`` sets them (None removes)."""
    env = base_env(env_extra, drop)
    return subprocess.run(
        [sys.executable, "-m", "compatmatrix", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def pyenv_python(minor: str) -> str | None:
    """The pyenv interpreter for CPython 3.<minor>, if this machine has it."""
    root = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    versions = Path(root) / "versions"
    if not versions.is_dir():
        return None
    for entry in sorted(versions.iterdir(), reverse=True):
        if entry.name.startswith(f"3.{minor}.") and (entry / "bin" / "python").exists():
            return str(entry / "bin" / "python")
    return None


# The cached real environments (tests/real_envs.py), shared by the doctor and live tests. Built on first use; their tests
# skip, with the reason, where a local wheel they need is missing (torch 2.13.0 is a cp311 wheel from pip's find-links).


def real_env_or_skip(name: str):
    from .real_envs import RealEnvUnavailable, real_env

    try:
        return real_env(name)
    except RealEnvUnavailable as exc:
        pytest.skip(f"real environment {name}: {exc}")


@pytest.fixture(scope="session")
def ipex280_torch213():
    return real_env_or_skip("torch213-ipex280")


@pytest.fixture(scope="session")
def ipex250_torch213():
    return real_env_or_skip("torch213-ipex250")


@pytest.fixture(scope="session")
def ipex280_torch280():
    return real_env_or_skip("torch280-ipex280")


@pytest.fixture(scope="session")
def stock_torch213():
    return real_env_or_skip("torch213-stock")


# The FIXTURE stack index and the template venv the install fault tests start from (tests/install_helpers.py).


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """The FIXTURE stack index, served on 127.0.0.1 for the module."""
    from .install_helpers import served, stack_index

    with served(stack_index(tmp_path_factory.mktemp("stack"))) as index:
        yield index


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    from .install_helpers import template_venv

    return template_venv(tmp_path_factory.mktemp("template") / "venv")


@pytest.fixture
def venv(template, tmp_path):
    from .install_helpers import copy_venv

    return copy_venv(template, tmp_path / "venv")


@pytest.fixture(scope="session")
def slurm_cluster():
    """A REAL two-node Slurm cluster (tests/slurm_cluster.py): slurmctld + one slurmd per network namespace, munged;
    one per session, stopped and removed at its end. Skips, with the reason, without root or Slurm."""
    from .slurm_cluster import SlurmCluster, SlurmUnavailable

    try:
        cluster = SlurmCluster()
    except SlurmUnavailable as exc:
        pytest.skip(f"Slurm test cluster: {exc}")
    try:
        yield cluster
    finally:
        cluster.close()
