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

from .conftest import ROOT


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
