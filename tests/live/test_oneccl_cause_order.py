"""The first failure the ranks met is the cause (issue 36, item 1): a table of rank outputs of oneccl_bind_pt 2.7.0+cpu on
the PyPI runtime (oneccl-cpu + impi-rt 2021.14.1, torch 2.7.0), per launcher and shell, RECONSTRUCTED from issue 36's hand
check and oneCCL's own source texts (the fixture file says which lines and where from). Pure: no rank is started.

On the old code the I_MPI_ROOT words won over the libfabric ones that came first (spawn, torchrun, srun as printed), and a
hang after the fallback was given the generic causes of a hang (interfaces, FI_PROVIDER=tcp)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compatmatrix.live.oneccl_causes import CclRun, ccl_cause
from compatmatrix.live.report import Expectation, RankRecord, hang_finding
from compatmatrix.live.supervise import Supervised

TABLE = Path(__file__).parents[1] / "fixtures" / "oneccl" / "rank-outputs-oneccl_bind_pt-2.7.0+cpu-oneccl-cpu-2021.14.1-torch-2.7.0.json"
DOCUMENT = json.loads(TABLE.read_text())
CASES = DOCUMENT["cases"]

# the first failure, as the summary of its cause starts
FIRST = {"libfabric": "oneCCL could not load libfabric", "impi-root": "oneCCL's MPI transport refuses Intel MPI without I_MPI_ROOT",
         "no-provider": "libfabric found no provider", "foreign-mpirun": "MPI abort under a foreign mpirun"}


def run_of(case) -> CclRun:
    launcher, flavor = case["launcher"], case.get("flavor", case["launcher"])
    mpirun = " --mpirun /usr/bin/mpirun" if flavor == "open-mpi" else ""
    return CclRun(launcher, flavor == "intel-mpi", launcher == "mpirun", f'eval "$(compat env --launcher {launcher}{mpirun} --python VENV/bin/python)"',
                  "VENV/lib/libfabric", "VENV/lib/libfabric/prov", "VENV", flavor=flavor)


def test_the_table_says_what_it_is():
    assert DOCUMENT["versions"] == {"oneccl_bind_pt": "2.7.0+cpu", "oneccl-cpu": "2021.14.1", "impi-rt": "2021.14.1", "torch": "2.7.0"}
    assert "RECONSTRUCTED" in DOCUMENT["provenance"] and "3afa1bb7936f57683a2503c34b29c0daca6a9ccb" in DOCUMENT["provenance"]
    assert {c["launcher"] for c in CASES} == {"spawn", "torchrun", "srun", "mpirun"}


@pytest.mark.parametrize("case", [c for c in CASES if c["outcome"] != "hang"], ids=lambda c: c["id"])
def test_the_cause_is_the_first_failure_the_ranks_met(case):
    cause = ccl_cause("\n".join(case["output"]) + "\n", run_of(case))
    if case["first"] is None:
        assert cause is None, cause
        return
    assert cause is not None, case["id"]
    summary, detail, fix = cause
    assert summary.startswith(FIRST[case["first"]]), summary
    assert all(words in fix for words in case["fix_has"]), fix
    assert not any(words in fix for words in case["fix_lacks"]), fix
    if case["first"] == "libfabric" and any("neither I_MPI_ROOT" in line for line in case["output"]):
        # what came after the fallback is said as what followed, never as a cause of its own
        assert "follows from the fallback and is no cause of its own" in summary
        assert any(line.startswith("then: ") and "neither I_MPI_ROOT" in line for line in detail), detail


@pytest.mark.parametrize("case", [c for c in CASES if c["outcome"] == "hang"], ids=lambda c: c["id"])
def test_a_hang_after_the_fallback_names_the_fallback(case):
    log = "\n".join(case["output"]) + "\n"
    ranks = [RankRecord(1, {"rank": 0, "stage": "init", "backend": "ccl", "started": 0, "updated": 2}, log),
             RankRecord(2, {"rank": 1, "stage": "init", "backend": "ccl", "started": 0, "updated": 2}, log)]
    expect = Expectation(world_size=2, trainer=False, steps=1, per_device_batch=2, backend="auto", ccl_installed=True, timeout=60, ccl=run_of(case))
    finding = hang_finding(ranks, Supervised("x", (), True, False, 60.0, True, ()), expect, 2)
    causes = next(e for e in finding.evidence if e.startswith("likely causes: "))
    assert causes.startswith("likely causes: " + FIRST[case["first"]]), causes
    assert "fell back to its MPI transport" in causes
    assert not any(words in causes + finding.fix for words in case["fix_lacks"]), causes
    assert all(words in finding.fix for words in case["fix_has"]), finding.fix


def test_the_sequence_keeps_the_order_the_ranks_said_it():
    from compatmatrix.live.oneccl_causes import sequence

    case = next(c for c in CASES if c["id"] == "torchrun-clean-shell")
    kinds = [s.kind for s in sequence("\n".join(case["output"]))]
    assert kinds == ["libfabric", "fallback", "impi-root", "atl-mpi", "atl", "atl-mpi"]
