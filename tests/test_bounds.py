"""Input that could grow without end or block for ever, refused with one sentence: a YAML alias bomb given to
``compat export --validate``, a FIFO or a huge CPU range in a recorded ``--sysfs-root``, and cgroup ``cpu.max`` values
no kernel writes. Each case ran past its limit (time, memory) or ended in the internal-error guard before.

The hostfile's bounds and the concurrent preflight are in tests/live/test_hosts_units.py.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from compatmatrix.environment import env_probe
from compatmatrix.errors import UsageError
from compatmatrix.placement.sysfs import read_machine
from compatmatrix.render.manifest import MAX_ALIAS_NODES, AliasLimitError, load_documents

from .conftest import run_compat

VM = Path(__file__).resolve().parent / "data" / "topologies" / "vm-1s-2c-nosmt"
LAUNCH = ("launch", "--print", "--launcher", "torchrun", "--nproc-per-node", "1")


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """The billion laughs in YAML: each level lists the previous one ``width`` times (9 levels: 9^9 strings), ~450 bytes."""
    lines = ['l0: &l0 ["lol"]']
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels + 1)]
    lines += ["kind: PyTorchJob", "apiVersion: kubeflow.org/v1", f"metadata: {{name: *l{levels}}}"]
    return "\n".join(lines) + "\n"


# --- YAML: aliases may add a bounded number of nodes ----------------------------------------------------------------


def test_an_alias_bomb_is_refused_at_once_with_one_sentence(tmp_path):
    bomb = tmp_path / "job.yaml"
    bomb.write_text(alias_bomb())
    assert bomb.stat().st_size < 1024
    started = time.monotonic()
    done = run_compat("export", "--validate", str(bomb), timeout=60)  # before: past 120 s and 5 GB
    assert time.monotonic() - started < 30
    assert done.returncode == 2, done.stderr
    assert f"--validate {bomb} is not read: its aliases expand it by more than {MAX_ALIAS_NODES:,} nodes" in done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr


def test_aliases_that_add_a_little_still_read_as_yaml_reads_them():
    text = "base: &b {image: x, env: [{name: A, value: '1'}]}\nmaster: *b\nworker: {<<: *b, image: z}\n"
    assert load_documents(text) == [yaml.safe_load(text)]
    shared = "\n".join([f"k{i}: *a" for i in range(MAX_ALIAS_NODES // 4)])
    assert len(load_documents("a: &a [1, 2, 3]\n" + shared)[0]) == MAX_ALIAS_NODES // 4 + 1  # 4 nodes per alias: at the limit
    with pytest.raises(AliasLimitError, match="expand it by more than"):
        load_documents("a: &a [1, 2, 3]\n" + shared + "\nover: *a\n")


def test_the_alias_budget_is_for_the_whole_file_not_per_document():
    document = "a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9]\n" + "\n".join(f"k{i}: *a" for i in range(MAX_ALIAS_NODES // 20)) + "\n"
    assert len(load_documents(document)) == 1
    with pytest.raises(AliasLimitError):
        load_documents(document + "---\n" + document + "---\n" + document)


@pytest.mark.parametrize("text", ["a: &a [*a]\n", "a: &a {b: *a}\n", "a: &a [1, [2, *a]]\n"])
def test_an_alias_inside_its_own_anchor_is_refused(text):
    with pytest.raises(AliasLimitError, match="refers to a node that contains it"):
        load_documents(text)


# --- sysfs: regular files only, CPU numbers capped ------------------------------------------------------------------


def recorded(tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    shutil.copytree(VM, root)
    return root


@pytest.mark.parametrize("name", ["devices/system/cpu/online", "devices/system/cpu/cpu1/topology/core_id",
                                  "devices/system/node/node0/cpulist", "fs/cgroup/cpu.max", "fs/cgroup/cpu/cpu.cfs_quota_us"])
def test_a_fifo_in_the_recording_is_refused_without_blocking(tmp_path, name):
    root = recorded(tmp_path)
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.unlink()
    os.mkfifo(path)
    started = time.monotonic()
    done = run_compat(*LAUNCH, "--sysfs-root", str(root), "--", "train.py", timeout=60)  # before: blocked for ever in open()
    assert time.monotonic() - started < 30
    assert done.returncode == 2 and "internal error" not in done.stderr
    assert str(path.relative_to(root)).split("/")[-1] in done.stderr


def test_read_text_refuses_what_is_not_a_regular_file(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert env_probe.read_text(str(fifo)) is None and env_probe.read_text(str(tmp_path)) is None
    assert env_probe.read_metadata(str(fifo)) == (None, None)  # a dist-info METADATA that is a FIFO: doctor blocked too
    assert env_probe.read_text("/dev/zero", 10) is None  # a device reads without end
    (tmp_path / "file").write_text("0-3\n")
    assert env_probe.read_text(str(tmp_path / "file")) == "0-3\n"


@pytest.mark.parametrize("text", ["0-4294967295", "65536", "0-65536", ",".join(["0-40000"] * 3), "1" * 40, "0-²"])
def test_cpu_lists_beyond_the_cap_are_refused_before_they_are_expanded(text):
    started = time.monotonic()
    assert env_probe.cpu_list(text) is None
    assert time.monotonic() - started < 1


def test_cpu_lists_up_to_the_cap_still_read():
    assert env_probe.cpu_list(f"0-{env_probe.MAX_CPUS - 1}") == list(range(env_probe.MAX_CPUS))
    assert env_probe.cpu_list("0-3,8192,9000-9001") == [0, 1, 2, 3, 8192, 9000, 9001]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 70000), st.integers(0, 3000)), min_size=1, max_size=6))
def test_cpu_lists_read_as_their_ranges_below_the_cap_and_are_refused_above(ranges):
    text = ",".join(f"{first}-{first + extra}" if extra else str(first) for first, extra in ranges)
    named = sum(extra + 1 for _, extra in ranges)
    highest = max(first + extra for first, extra in ranges)
    expected = sorted({cpu for first, extra in ranges for cpu in range(first, first + extra + 1)})
    assert env_probe.cpu_list(text) == (expected if highest < env_probe.MAX_CPUS and named <= env_probe.MAX_CPUS else None)


def test_a_huge_online_range_is_one_sentence_naming_the_file(tmp_path):
    root = recorded(tmp_path)
    (root / "devices/system/cpu/online").write_text("0-4294967295\n")
    done = run_compat(*LAUNCH, "--sysfs-root", str(root), "--", "train.py", timeout=60)  # before: MemoryError in the guard
    assert done.returncode == 2, done.stderr
    assert "devices/system/cpu/online is missing, not a regular file, or not a CPU list of numbers below 65536" in done.stderr


# --- cgroup cpu.max / cfs_*: typed, each odd value a sentence -------------------------------------------------------


@pytest.mark.parametrize("text, quota", [("max\n", None), ("max 100000\n", None), ("800000 100000\n", 8.0), ("50000 100000", 0.5)])
def test_cpu_max_as_the_kernel_writes_it(text, quota):
    assert env_probe.cpu_max_quota(text) == (quota, None)


ODD_CPU_MAX = ["0 100000", "-100000 100000", "1e400 100000", "nan 100000", "inf 1", "", "garbage", "100000 100000 7", "100000 0",
               "100000", "max 0", "max 100000 1", "9" * 30 + " 100000", "100000 1e6", "\x1b[31m 100000"]


@pytest.mark.parametrize("text", ODD_CPU_MAX)
def test_odd_cpu_max_values_are_a_problem_not_a_quota(text):
    quota, problem = env_probe.cpu_max_quota(text)
    assert quota is None and problem.startswith("holds ")
    assert "\x1b" not in problem  # quoted with repr(): no escape sequence reaches the terminal


@pytest.mark.parametrize("text", ["1e400 100000", "nan 100000", "0 100000", "-5 100000", "garbage", "", "100000 100000 7"])
def test_a_recorded_odd_cpu_max_is_one_sentence_naming_the_file(tmp_path, text):
    root = recorded(tmp_path)
    (root / "fs/cgroup").mkdir(parents=True)
    (root / "fs/cgroup/cpu.max").write_text(text + "\n")
    done = run_compat(*LAUNCH, "--sysfs-root", str(root), "--", "train.py")  # before: inf / nan ended in the guard, 0 and -5 passed
    assert done.returncode == 2, done.stdout
    assert "internal error" not in done.stderr
    assert f"The cgroup quota recorded in {root} cannot be read: {root}/fs/cgroup/cpu.max holds {text.strip()!r}" in done.stderr


@pytest.mark.parametrize("quota, period, problem", [
    ("250000", "100000", None), ("-1", "100000", None), ("-1", None, None),
    ("0", "100000", "cpu.cfs_quota_us holds '0'"), ("1e400", "100000", "cpu.cfs_quota_us holds '1e400'"),
    ("250000", "0", "cpu.cfs_period_us holds '0'"), ("250000", None, "cpu.cfs_period_us holds ''"),
])
def test_cgroup_v1_files_are_typed_too(quota, period, problem):
    found, said = env_probe.cfs_quota(quota, period)
    assert (said or "").startswith(problem or "") and (said is None) == (problem is None)
    assert found == (2.5 if quota == "250000" and problem is None else None)


def test_read_machine_names_the_odd_file_in_a_usage_error(tmp_path):
    root = recorded(tmp_path)
    (root / "fs/cgroup/cpu").mkdir(parents=True)
    (root / "fs/cgroup/cpu/cpu.cfs_quota_us").write_text("250000\n")
    (root / "fs/cgroup/cpu/cpu.cfs_period_us").write_text("x\n")
    with pytest.raises(UsageError, match=r"fs/cgroup/cpu/cpu.cfs_period_us holds 'x'"):
        read_machine(str(root))
