"""Components as data (matrix/model.py REGISTRY): every component is one record, and what harvest, verify, explain,
migrate, planning, hosts and the checks do with it follows from its fields."""

from __future__ import annotations

import pytest

from compatmatrix.checks.builds import CPU_INDEX_PACKAGES, EXTENSIONS
from compatmatrix.checks.imports import COMPANIONS as IMPORTED_COMPANIONS
from compatmatrix.checks.packages import CCL_NAMES, IPEX_NAMES
from compatmatrix.checks.packages import STACK as DUPLICATES_STACK
from compatmatrix.errors import MatrixError
from compatmatrix.explain import _OPTIONAL
from compatmatrix.hosts import STACK as HOSTS_STACK
from compatmatrix.maintain.verify import smoke_program
from compatmatrix.matrix.harvest import BINARIES, COMPANIONS, LIBRARIES, PACKAGES
from compatmatrix.matrix.load import _KEY, _PARSERS, parse_matrix
from compatmatrix.matrix.model import (
    COMPONENT_ORDER,
    COMPONENTS,
    KINDS,
    MIGRATE_ACTIONS,
    MISSING_FACTS,
    PAIRINGS,
    REGISTRY,
    RUNTIME_COMPONENTS,
    Component,
)
from compatmatrix.matrix.tested import VERIFIABLE
from compatmatrix.migrate.plan import INTEL_MPI_DISTRIBUTIONS, LEFTOVER_MODULES, OPTIONAL_COMPONENTS, REMOVED
from compatmatrix.rules import PAIR_RULES

from ..conftest import ROOT


def test_every_component_has_one_record_in_the_resolver_s_order():
    assert tuple(COMPONENTS) == COMPONENT_ORDER == tuple(Component)
    assert [info.distribution for info in REGISTRY] == list(dict.fromkeys(info.distribution for info in REGISTRY))
    for info in REGISTRY:
        assert info.kind in KINDS and info.pairing in PAIRINGS and info.migrate in MIGRATE_ACTIONS, info
        assert (info.kind == "runtime") == (info.distribution in RUNTIME_COMPONENTS), info
        assert bool(info.smoke) == bool(info.smoke_what) and (not info.smoke or info.module), info
        assert (info.pairing == "none") == (info.kind in ("torch", "runtime")), info
        assert ("{status}" in info.migrate_why) <= (info.migrate == "drop"), info


def test_the_former_tuples_are_the_records_fields():
    """What each command kept as its own tuple, as the records now give it (the behaviour the refactor keeps)."""
    T, IPEX, CCL, TV, TA, TF, ACC = Component
    assert PACKAGES == (T, IPEX, TV, TA, TF, ACC) and BINARIES == (T, IPEX, TV, TA) and LIBRARIES == (TF, ACC) and COMPANIONS == (TV, TA)
    assert set(VERIFIABLE) == {TV, TA, IPEX, CCL, TF, ACC}
    assert _OPTIONAL == (CCL, IPEX, TV, TA)
    assert OPTIONAL_COMPONENTS == (TV, TA)
    assert REMOVED == ("intel-extension-for-pytorch", "torch-ipex", "oneccl-bind-pt", "torch-ccl", "oneccl-cpu", "oneccl-devel", "impi-rt", "impi-devel")
    assert INTEL_MPI_DISTRIBUTIONS == ("impi-rt", "impi-devel")
    assert LEFTOVER_MODULES == ("intel_extension_for_pytorch", "oneccl_bindings_for_pytorch", "torch_ccl")
    assert IPEX_NAMES == ("intel-extension-for-pytorch", "torch-ipex") and CCL_NAMES == ("oneccl-bind-pt", "torch-ccl")
    assert set(DUPLICATES_STACK) == {"torch", "intel-extension-for-pytorch", "torch-ipex", "oneccl-bind-pt", "torch-ccl", "transformers", "accelerate",
                                     "torchvision", "torchaudio"}
    assert EXTENSIONS == ((("torchvision",), "torchvision", TV), (("torchaudio",), "torchaudio", TA),
                          (IPEX_NAMES, "intel_extension_for_pytorch", None), (CCL_NAMES, "oneccl_bindings_for_pytorch", None))
    assert set(MISSING_FACTS) == {T, TV, TA, TF, ACC}
    assert "impi-rt" in HOSTS_STACK and "intel-openmp" not in HOSTS_STACK
    assert CPU_INDEX_PACKAGES == {"torch", "torchvision", "torchaudio"} and IMPORTED_COMPANIONS == ("torchvision", "torchaudio")
    assert [r.name for r in PAIR_RULES if r.partner is T and r.evidence == "declared"] == ["torchvision-torch", "torchaudio-torch", "transformers-torch", "accelerate-torch"]
    assert _KEY == {TF: "line", ACC: "line"} and set(_PARSERS) == set(Component) - {T}


def test_a_verify_smoke_program_comes_from_the_record():
    program = smoke_program(Component.TORCHVISION, "torchvision")
    assert program.startswith("import torch\nimport torchvision as pkg\n")
    assert COMPONENTS[Component.TORCHVISION].smoke in program and program.rstrip().endswith("print('COMPAT-VERIFY-SMOKE-OK')")


def test_every_runtime_wheel_of_the_matrix_has_a_record(matrix):
    assert {r.distribution for r in matrix.runtime} <= set(RUNTIME_COMPONENTS)


def test_a_runtime_wheel_without_a_record_is_named():
    text = (ROOT / "data" / "matrix.toml").read_text() + ('\n[[runtime]]\ndistribution = "libfabric-cpu"\nversion = "1.0"\n'
                                                         'released = "2026-10-16"\nsource = "x"\n')
    with pytest.raises(MatrixError) as raised:
        parse_matrix(text, "m.toml")
    assert "'libfabric-cpu' is not a runtime wheel compat knows" in str(raised.value) and "distribution" in str(raised.value)


# Every check id as compat prints it (JSON "id", --only/--skip, docs, the schema's examples): public, in run order. The
# companions' four (packages.<distribution>-torch, imports.<module>) are made from their records (checks/registry.py).
PUBLIC_CHECK_IDS = (
    "packages.torch-installed", "packages.ipex-torch", "packages.ccl-torch", "packages.known-bad", "packages.torchvision-torch",
    "packages.torchaudio-torch", "packages.transformers-torch", "packages.ccl-trainer", "packages.cuda-build", "packages.duplicates",
    "packages.interrupted-install", "packages.python-support", "packages.eol", "packages.extension-build", "imports.torch", "imports.ipex",
    "imports.ccl", "imports.torchvision", "imports.torchaudio", "oneccl.setvars", "oneccl.fi-provider", "oneccl.libfabric", "oneccl.mpirun",
    "oneccl.stale-prefix", "oneccl.kvs-iface", "oneccl.launcher", "runtime.ld-preload", "runtime.threads", "runtime.isa", "runtime.shm",
)


def test_every_record_is_complete(matrix):
    """What each command reads of a record is there: a resolver component its module, release class and releases in its
    table; a companion what its generated checks and verify's smoke need; a runtime wheel its releases ([[runtime]])."""
    runtime = {r.distribution for r in matrix.runtime}
    for info in REGISTRY:
        assert info.label and info.table, info
        if info.kind == "runtime":
            assert not info.module and not info.release, info
            # its data came with it; the -devel siblings (oneccl-devel, impi-devel) have a record only for migrate to remove them
            assert info.distribution in runtime or (info.distribution.endswith("-devel") and info.migrate == "drop"), info
            continue
        component = Component(info.distribution)
        assert info.module and info.release and matrix.releases[component], info
        assert info.host_compared and info.duplicate_checked, info  # every resolver component breaks a job when it differs
        if info.kind == "companion":
            assert info.pairing == "declared" and info.registry_read and info.smoke and info.build_checked, info


def test_every_check_keeps_its_public_id_and_order():
    from compatmatrix.checks.registry import all_checks

    assert tuple(c.id for c in all_checks()) == PUBLIC_CHECK_IDS


def test_the_companion_checks_are_made_from_their_records():
    from compatmatrix.checks import imports, packages  # noqa: F401  (registration)
    from compatmatrix.checks.registry import COMPANION_RECORDS, import_check_id, pairing_check_id
    from compatmatrix.checks.registry import REGISTRY as CHECKS

    assert [i.distribution for i in COMPANION_RECORDS] == [c.distribution for c in COMPANIONS]
    assert [pairing_check_id(i) for i in COMPANION_RECORDS] == ["packages.torchvision-torch", "packages.torchaudio-torch"]
    assert [import_check_id(i) for i in COMPANION_RECORDS] == ["imports.torchvision", "imports.torchaudio"]
    for info in COMPANION_RECORDS:
        pairing, imported = CHECKS[pairing_check_id(info)], CHECKS[import_check_id(info)]
        assert (pairing.description, pairing.static) == (f"{info.label} declares the installed torch (its pin, floor or range)", True)
        assert (imported.description, imported.static) == (f"{info.label} imports (its native extension loads) in a child process", False)
    assert len({CHECKS[pairing_check_id(i)].run for i in COMPANION_RECORDS}) == len(COMPANION_RECORDS)  # one check per record


def test_a_generated_check_judges_its_own_companion(tmp_path):
    """Each generated packages.<distribution>-torch judges its own record's release under its own id: a pin pair that
    fits passes, the same companion with another torch fails, the other companion is not installed (SKIP)."""
    import json

    from ..conftest import run_compat

    pins = tmp_path / "pins.txt"
    pins.write_text("torch==2.7.0\ntorchvision==0.22.0\n")
    found = {c["id"]: c for c in json.loads(run_compat("check", "--json", "--python-version", "3.11", "-r", str(pins)).stdout)["checks"]}
    assert (found["packages.torchvision-torch"]["status"], found["packages.torchvision-torch"]["summary"]) == ("pass", "torchvision 0.22.0 pins torch 2.7.0")
    assert (found["packages.torchaudio-torch"]["status"], found["packages.torchaudio-torch"]["summary"]) == ("skip", "torchaudio is not installed")
    pins.write_text("torch==2.6.0\ntorchvision==0.22.0\n")
    found = {c["id"]: c for c in json.loads(run_compat("check", "--json", "--python-version", "3.11", "-r", str(pins)).stdout)["checks"]}
    assert found["packages.torchvision-torch"]["status"] == "fail" and "torch 2.6.0 is installed" in found["packages.torchvision-torch"]["summary"]
