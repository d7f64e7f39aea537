"""compat tune's pure core: the search space on RECORDED topologies (tests/data/topologies: the 2-socket 56-core Xeon
with SMT, a 1-socket 8-core machine, that machine under a cgroup quota of 3 CPUs, this machine's 2-CPU VM), and the
correctness proof against a single-process reference (tolerances from the dtype's unit roundoff, a perturbed
gradient rejected).

Nothing here depends on the machine running the tests.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.version import Version

from compatmatrix.placement.sysfs import read_machine
from compatmatrix.placement.topology import Machine
from compatmatrix.tune.space import Costs, Installed, reference_seconds, search_space

TOPOLOGIES = Path(__file__).resolve().parent / "data" / "topologies"
XEON = TOPOLOGIES / "xeon-2s-28c-ht-2numa"
DESKTOP = TOPOLOGIES / "desktop-1s-8c-nosmt"
VM = TOPOLOGIES / "vm-1s-2c-nosmt"

EVERYTHING = Installed(Version("2.8.0"), ccl_bindings=True, native_bf16=True)  # torch 2.8 + IPEX + bindings on a bf16 CPU
PLAIN = Installed(Version("2.13.0"), ccl_bindings=False, native_bf16=False)  # torch 2.13 CPU alone, no bf16
OLD = Installed(Version("1.13.1"), ccl_bindings=False, native_bf16=False)
ROOMY = 10_000.0  # a budget that prunes nothing


def quota_limited(tmp_path, quota: str = "300000 100000") -> Machine:
    """The 8-core recording with a cgroup v2 quota written into a copy (docker --cpus=3)."""
    root = tmp_path / "sys"
    shutil.copytree(DESKTOP, root)
    (root / "fs" / "cgroup").mkdir(parents=True)
    (root / "fs" / "cgroup" / "cpu.max").write_text(quota + "\n")
    return read_machine(str(root))


def by_name(space):
    return {c.name: c for c in space.configurations}


def reasons(space):
    return {p.name: p.reason for p in space.pruned}


# --- the search space ----------------------------------------------------------------------------------------


def test_the_xeon_with_everything_installed_starts_from_the_plans_default():
    space = search_space(read_machine(str(XEON)), EVERYTHING, ROOMY)
    first = space.configurations[0]
    assert first.default and space.default == first
    # one rank per NUMA node (= per socket), 27 OpenMP threads + 1 oneCCL worker core each: compat launch's plan
    assert (first.name, first.layout, first.omp_threads, first.ccl_workers) == ("2r-27t-ccl1w-fp32", "one per socket = one per NUMA node", 27, 1)
    names = set(by_name(space))
    assert {"1r-56t-fp32", "2r-28t-ccl0w-fp32", "2r-28t-gloo-fp32", "4r-13t-ccl1w-fp32", "8r-6t-ccl1w-fp32", "2r-27t-ccl1w-bf16",
            "2r-27t-ccl1w-fp32-compile"} <= names
    # the ones one dimension away from the default come before those two away
    order = [c.name for c in space.configurations]
    assert order.index("2r-27t-ccl1w-bf16") < order.index("4r-13t-ccl1w-bf16")


def test_hyperthreads_oversubscribe_the_xeons_physical_cores_and_are_pruned_with_the_arithmetic():
    space = search_space(read_machine(str(XEON)), EVERYTHING, ROOMY)
    why = reasons(space)
    assert why["2r-55t-ccl1w (with the hyperthreads)"] == (
        "oversubscribes the physical cores: 2 x (55 OpenMP threads + 1 worker core) = 112 > the 56 this process may use")
    assert why["1r-112t (with the hyperthreads)"].endswith("= 112 > the 56 this process may use")
    assert not any(name.startswith(("2r-55t", "1r-112t")) for name in by_name(space))


def test_torch_2_13_without_bindings_or_bf16_on_the_xeon():
    space = search_space(read_machine(str(XEON)), PLAIN, ROOMY)
    why = reasons(space)
    assert "no native bf16" in why["bf16"] and "oneCCL bindings" in why["ccl"]
    assert {c.backend for c in space.configurations} == {None, "gloo"} and {c.dtype for c in space.configurations} == {"fp32"}
    assert {c.ccl_workers for c in space.configurations} == {0}
    assert space.default is not None and space.default.name == "2r-28t-gloo-fp32"
    assert sorted({c.ranks for c in space.configurations}) == [1, 2, 4, 8]


def test_torch_before_2_0_has_no_compile():
    space = search_space(read_machine(str(XEON)), OLD, ROOMY)
    assert not any(c.compile for c in space.configurations)
    assert reasons(space)["compile"] == "torch.compile needs torch 2.0 or newer; torch 1.13.1 is installed"


def test_the_8_core_desktop_one_process_is_the_default_and_two_ranks_share_the_socket():
    space = search_space(read_machine(str(DESKTOP)), EVERYTHING, ROOMY)
    configs = by_name(space)
    assert space.default is not None and space.default.name == "1r-8t-fp32" and space.default.backend is None
    assert configs["2r-3t-ccl1w-fp32"].layout == "two per NUMA node"  # 2 x (3 threads + 1 worker core) = 8
    assert configs["2r-4t-ccl0w-fp32"].omp_threads == 4 and configs["4r-1t-ccl1w-fp32"].omp_threads == 1
    assert not any("with the hyperthreads" in name for name in reasons(space))  # no SMT: nothing to oversubscribe with


def test_a_cgroup_quota_of_3_cpus_caps_every_configuration(tmp_path):
    machine = quota_limited(tmp_path)
    assert machine.core_budget == 3
    space = search_space(machine, EVERYTHING, ROOMY)
    assert all(c.busy_cores <= 3 for c in space.configurations)
    assert by_name(space)["1r-3t-fp32"].default
    why = reasons(space)
    assert why["2r-ccl1w"].startswith("2 ranks with 1 oneCCL worker core each need 4 physical cores, but this process may use 3")
    assert why["4 ranks (four per NUMA node)"] == "4 ranks need 4 physical cores, one each; this process may use 3"
    assert {c.name for c in space.configurations if c.ranks == 2 and not c.compile and c.dtype == "fp32"} == {"2r-1t-ccl0w-fp32", "2r-1t-gloo-fp32"}


def test_this_machines_recording_two_cores():
    space = search_space(read_machine(str(VM)), PLAIN, ROOMY)
    assert [c.name for c in space.configurations] == ["1r-2t-fp32", "1r-2t-fp32-compile", "2r-1t-gloo-fp32", "2r-1t-gloo-fp32-compile"]


def test_the_budget_keeps_the_default_first_and_names_what_it_cut():
    costs = Costs(start=5.0, measure=5.0, compile=30.0)
    budget = reference_seconds(costs) + 2 * 10.0  # the reference and two eager configurations
    space = search_space(read_machine(str(XEON)), PLAIN, budget, costs)
    assert [c.name for c in space.configurations] == ["2r-28t-gloo-fp32", "4r-14t-gloo-fp32"]
    assert space.estimated == budget
    cut = reasons(space)
    assert cut["8r-7t-gloo-fp32"] == "over the budget: 10 s estimated, 0 s of 30 s left"
    assert cut["2r-28t-gloo-fp32-compile"].startswith("over the budget: 40 s estimated")


def test_a_bf16_configuration_pays_for_its_own_reference():
    costs = Costs(start=5.0, measure=5.0, compile=30.0)
    # the fp32 reference + the default + the bf16 variant with its bf16 reference
    space = search_space(read_machine(str(XEON)), EVERYTHING, reference_seconds(costs) * 2 + 20.0, costs)
    assert [c.name for c in space.configurations] == ["2r-27t-ccl1w-fp32", "2r-27t-ccl1w-bf16"]


@settings(max_examples=40, deadline=None)
@given(cores=st.integers(1, 64), smt=st.integers(1, 2), quota=st.one_of(st.none(), st.floats(0.5, 80.0)),
       bindings=st.booleans(), bf16=st.booleans())
def test_no_configuration_oversubscribes_the_cores_this_process_may_use(cores, smt, quota, bindings, bf16):
    from compatmatrix.placement.topology import Topology

    topology = Topology.smt(cores, smt)
    machine = Machine(topology, frozenset(topology.cpus), quota)
    space = search_space(machine, Installed(Version("2.8"), bindings, bf16), ROOMY)
    assert space.configurations, "one process always fits"
    for config in space.configurations:
        assert config.ranks * (config.omp_threads + config.ccl_workers) <= machine.core_budget
        assert config.omp_threads >= 1
    assert sum(c.default for c in space.configurations) == 1 and space.configurations[0].default
    assert len({c.name for c in space.configurations}) == len(space.configurations)
