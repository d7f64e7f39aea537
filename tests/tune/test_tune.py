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

TOPOLOGIES = Path(__file__).resolve().parents[1] / "data" / "topologies"
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


def test_what_the_user_leaves_out_is_pruned_with_the_flag():
    space = search_space(read_machine(str(XEON)), EVERYTHING, ROOMY, bf16=False, compile=False)
    assert {c.dtype for c in space.configurations} == {"fp32"} and not any(c.compile for c in space.configurations)
    assert reasons(space)["bf16"] == "not asked (--no-bf16)" and reasons(space)["compile"] == "not asked (--no-compile)"


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
    # one process against two DDP ranks is one dimension (the backend comes with the ranks): before compile, the cheaper
    assert [c.name for c in space.configurations] == ["1r-2t-fp32", "2r-1t-gloo-fp32", "1r-2t-fp32-compile", "2r-1t-gloo-fp32-compile"]


def test_the_budget_keeps_the_default_first_and_names_what_it_cut():
    costs = Costs(start=5.0, measure=5.0, compile=30.0)
    budget = reference_seconds(costs) + 2 * 10.0  # the reference and two eager configurations
    space = search_space(read_machine(str(XEON)), PLAIN, budget, costs)
    assert [c.name for c in space.configurations] == ["2r-28t-gloo-fp32", "1r-56t-fp32"]  # one process: the ranks, one dimension
    assert space.estimated == budget
    cut = reasons(space)
    assert cut["4r-14t-gloo-fp32"] == cut["8r-7t-gloo-fp32"] == "over the budget: 10 s estimated, 0 s of 30 s left"
    assert cut["2r-28t-gloo-fp32-compile"].startswith("over the budget: 40 s estimated")


def test_a_commands_space_is_not_cut_by_costs_known_only_for_compats_workload():
    """costs None (a training command): the budget leaves nothing out before measuring; the same order as with costs."""
    space = search_space(read_machine(str(XEON)), PLAIN, 30.0, None)
    with_costs = search_space(read_machine(str(XEON)), PLAIN, 10_000.0)
    assert space.estimated is None and not any(p.reason.startswith("over the budget") for p in space.pruned)
    assert [c.name for c in space.configurations] == [c.name for c in with_costs.configurations]


def test_a_bf16_configuration_pays_for_its_own_reference():
    costs = Costs(start=5.0, measure=5.0, compile=30.0)
    # the fp32 reference + the default + one process + the bf16 variant with its bf16 reference
    space = search_space(read_machine(str(XEON)), EVERYTHING, reference_seconds(costs) * 2 + 30.0, costs)
    assert [c.name for c in space.configurations] == ["2r-27t-ccl1w-fp32", "1r-56t-fp32", "2r-27t-ccl1w-bf16"]
    assert space.estimated == 50.0 and reasons(space)["2r-28t-ccl0w-fp32"] == "over the budget: 10 s estimated, 0 s of 50 s left"


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


# --- the correctness proof ------------------------------------------------------------------------------------
# A FIXTURE trainer: linear regression by SGD in emulated fp32 (every operation rounded to float32 with struct), the
# global batch split over ``ranks`` shards summed in ``order`` and then summed over the ranks, as DDP's allreduce
# does; ``perturb`` scales the last rank's gradient (the wrong-training case the proof must reject).

import math  # noqa: E402
import random  # noqa: E402
import struct  # noqa: E402

from compatmatrix.tune.proof import Run, Tolerance, digest, prove, reduction_terms, tolerance  # noqa: E402

FEATURES, SAMPLES, STEPS, LR = 8, 16, 6, 0.05


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def fixture_data():
    rng = random.Random(0)
    true_w = [rng.uniform(-1, 1) for _ in range(FEATURES)]
    rows = []
    for _ in range(SAMPLES):
        x = [f32(rng.uniform(-1, 1)) for _ in range(FEATURES)]
        rows.append((x, f32(sum(a * b for a, b in zip(true_w, x)) + rng.gauss(0, 0.1))))
    return rows


def fixture_train(ranks=1, order=1, perturb=1.0, steps=STEPS) -> Run:
    rows = fixture_data()
    w = [f32(0.05 * (i - 3)) for i in range(FEATURES)]
    losses = []
    size = SAMPLES // ranks
    for _ in range(steps):
        grads, parts = [], []
        for r in range(ranks):
            shard = rows[r * size:(r + 1) * size][::order]
            g, loss = [0.0] * FEATURES, 0.0
            for x, y in shard:
                pred = 0.0
                for i in (range(FEATURES) if order == 1 else reversed(range(FEATURES))):
                    pred = f32(pred + f32(w[i] * x[i]))
                err = f32(pred - y)
                loss = f32(loss + f32(err * err))
                g = [f32(gi + f32(f32(2.0 * err) * xi)) for gi, xi in zip(g, x)]
            if r == ranks - 1 and perturb != 1.0:
                g = [f32(gi * perturb) for gi in g]
            grads.append(g)
            parts.append(loss)
        total = [0.0] * FEATURES
        for g in grads:  # the allreduce
            total = [f32(a + b) for a, b in zip(total, g)]
        loss = 0.0
        for part in parts:
            loss = f32(loss + part)
        losses.append(f32(loss / SAMPLES))
        w = [f32(wi - f32(LR * f32(gi / SAMPLES))) for wi, gi in zip(w, total)]
    return Run(tuple(losses), tuple(w), digest(w))


FP32 = tolerance("fp32", reduction_terms(SAMPLES, FEATURES, 2), STEPS)


def test_the_bound_is_the_formula_with_its_numbers():
    tol = tolerance("fp32", 26, 6)
    assert tol.terms == 26 and tol.unit_roundoff == 2.0 ** -24
    assert tol.gamma == pytest.approx(26 * 2.0 ** -24 / (1 - 26 * 2.0 ** -24))
    assert tol.step_bound(3) == pytest.approx(6 * tol.gamma) and tol.param_bound == pytest.approx(12 * tol.gamma)
    assert tol.text().startswith("fp32: u = 2^-24, n = 26 reduction terms, gamma_n = n*u/(1-n*u) = 1.55e-06;")
    bf16 = tolerance("bf16", 26, 6)
    assert bf16.unit_roundoff == 2.0 ** -8 and bf16.gamma == pytest.approx(26 / 256 / (1 - 26 / 256))
    assert tolerance("bf16", 300, 6).gamma is None and "no bound" in tolerance("bf16", 300, 6).text()
    with pytest.raises(ValueError):
        tolerance("fp16", 3, 1)


def test_the_same_run_is_exact():
    reference = fixture_train()
    verdict = prove(fixture_train(), reference, FP32)
    assert verdict.accepted and verdict.exact and verdict.reason.startswith("exact")


def test_two_ranks_and_another_summation_order_differ_but_within_the_fp32_bound():
    reference = fixture_train()
    for run in (fixture_train(ranks=2), fixture_train(ranks=2, order=-1), fixture_train(ranks=4, order=-1)):
        assert run.digest != reference.digest  # rounding really differs: the proof has something to judge
        verdict = prove(run, reference, tolerance("fp32", reduction_terms(SAMPLES, FEATURES, 4), STEPS))
        assert verdict.accepted and not verdict.exact, verdict.reason
        assert 0 < verdict.worst_param <= FP32.param_bound


def test_a_perturbed_gradient_is_rejected_with_the_step_values_and_bound():
    reference = fixture_train()
    verdict = prove(fixture_train(ranks=2, perturb=1.001), reference, FP32)
    assert not verdict.accepted
    assert verdict.reason.startswith("step 2's loss ") and "over the fp32 bound 2*2*gamma_n = " in verdict.reason
    assert verdict.worst_loss > FP32.step_bound(2)


def test_a_perturbation_seen_only_in_the_parameters_is_rejected_there():
    reference = fixture_train()
    run = fixture_train(ranks=2)
    moved = list(run.params)
    moved[3] = f32(moved[3] * 1.01)
    verdict = prove(Run(run.losses, tuple(moved), digest(moved)), reference, FP32)
    assert not verdict.accepted and verdict.reason.startswith("final parameter 3 is ") and "over the fp32 bound 2*6*gamma_n" in verdict.reason


def test_the_reference_layout_must_match_exactly_and_the_rest_is_rejected_by_shape():
    reference = fixture_train()
    assert not prove(fixture_train(order=-1), reference, FP32, exact_only=True).accepted
    assert prove(fixture_train(), reference, FP32, exact_only=True).exact
    short = fixture_train(steps=STEPS - 1)
    assert prove(short, reference, FP32).reason == f"it reported {STEPS - 1} steps' losses, the reference {STEPS}"
    run = fixture_train(ranks=2)
    assert prove(Run(run.losses[:-1] + (math.nan,), run.params, run.digest), reference, FP32).reason == f"step {STEPS}'s loss is nan"
    assert "cannot be proven" in prove(run, reference, Tolerance("bf16", 300, STEPS, 2.0 ** -8)).reason


def test_a_bound_of_100_percent_or_more_proves_nothing():
    """bf16 with compat's workload (n ~ 250 terms, u = 2^-8): n*u < 1 but 2*steps*gamma_n >> 1: a perturbed run must not pass."""
    reference = fixture_train()
    loose = tolerance("bf16", 250, STEPS)
    assert loose.gamma is not None and loose.param_bound > 1 and "no useful bound" in loose.text()
    verdict = prove(fixture_train(ranks=2, perturb=1.5), reference, loose)
    assert not verdict.accepted and "cannot be proven" in verdict.reason


# --- compat tune's errors (no run starts) ---------------------------------------------------------------------

from ..conftest import run_compat  # noqa: E402


@pytest.mark.parametrize("args, words", [
    (["--budget", "0"], "must be"),
    (["--launcher", "mpirun"], "invalid choice"),
    (["--python", "/nonexistent/python"], "/nonexistent/python"),
])
def test_usage_errors_are_one_sentence_and_exit_2(args, words):
    done = run_compat("tune", *args)
    assert done.returncode == 2 and words in done.stderr and "Traceback" not in done.stderr


def test_an_environment_without_torch_is_refused_before_anything_runs():
    import sys

    done = run_compat("tune", "--python", sys.executable, "--json")  # the test environment has no torch
    assert done.returncode == 2 and done.stdout == ""
    assert "torch is not installed in" in done.stderr and "compat tune trains a small model with it" in done.stderr and "Traceback" not in done.stderr


# --- the winner: faster than the default plan beyond the measured noise -----------------------------------------

from compatmatrix.tune.proof import Verdict  # noqa: E402
from compatmatrix.tune.service import Measured, pick_winner  # noqa: E402

ACCEPT = Verdict(True, False, "within", 0.0, 0.0)
REJECT = Verdict(False, False, "step 2's loss ...", 1.0, None)


def measured(name_ranks, rate, spread, verdict=ACCEPT, default=False):
    from compatmatrix.tune.space import Configuration

    config = Configuration(name_ranks, "layout", 1, 0, "gloo" if name_ranks > 1 else None, "fp32", False, "the plan's share", default)
    return Measured(config, rate, spread, verdict, "", "", 1.0)


def test_the_winner_must_beat_the_default_beyond_both_spreads():
    default = measured(1, 100.0, 0.10, default=True)  # fast end 111
    close = measured(2, 115.0, 0.05)  # slow end 109.5 < 111: noise
    assert pick_winner([default, close]) is default
    clear = measured(2, 130.0, 0.05)  # slow end 123.8 > 111
    assert pick_winner([default, close, clear]) is clear
    noisy_default = measured(1, 100.0, 1.5, default=True)  # its fast end is unbounded: nothing separates from it
    assert pick_winner([noisy_default, clear]) is noisy_default


def test_a_rejected_configuration_never_wins_however_fast():
    default = measured(1, 100.0, 0.01, default=True)
    wrong = measured(2, 1000.0, 0.01, verdict=REJECT)
    assert pick_winner([default, wrong]) is default
    assert pick_winner([wrong]) is None
    assert pick_winner([measured(1, 100.0, 0.01, verdict=REJECT, default=True), measured(2, 50.0, 0.5)]).steps_per_second == 50.0


# --- the winner written out: export options the real parser takes; speed-up over your current settings ----------

import pytest  # noqa: E402

from compatmatrix.tune.space import Configuration, current_configuration, current_settings  # noqa: E402


def outcome_of(winner, default=None, current=None, threads_per_core=1):
    from compatmatrix.tune.service import Outcome
    from compatmatrix.tune.space import Space

    measured_ = tuple(dict.fromkeys(m for m in (default, current, winner) if m is not None))
    space = Space("machine", tuple(m.config for m in measured_), (), 60.0, 10.0)
    return Outcome("/py", "torchrun", space, measured_, winner, default, current, 0, 1.0, {"OMP_NUM_THREADS": "3"}, (), threads_per_core)


def winner_of(ranks, threads, workers, backend, note="the plan's share"):
    return Measured(Configuration(ranks, "layout", threads, workers, backend, "fp32", False, note), 10.0, 0.01, ACCEPT, "", "", 1.0)


@pytest.mark.parametrize("winner,per_core", [(winner_of(2, 3, 1, "ccl"), 1), (winner_of(4, 6, 0, "gloo"), 2), (winner_of(1, 1, 0, None), 1),
                                             (winner_of(2, 2, 0, "gloo", "with the hyperthreads"), 2)])
def test_the_emitted_export_options_parse_with_the_real_cli(winner, per_core):
    from compatmatrix.cli import parse
    from compatmatrix.tune.service import export_arguments

    outcome = outcome_of(winner, threads_per_core=per_core)
    sbatch = parse(["export", "sbatch", *export_arguments(outcome, "sbatch"), "--", "python", "train.py"])
    assert sbatch.job.nproc_per_node == winner.config.ranks
    job = parse(["export", "pytorchjob", *export_arguments(outcome, "pytorchjob"), "--image", "img", "--memory", "8Gi", "--", "python", "train.py"])
    assert job.job.nproc_per_node == winner.config.ranks
    cores = winner.config.ranks * (winner.config.omp_threads + winner.config.ccl_workers)
    # the pod's CPUs, as the export's thread plan counts them (CPU units / --threads-per-core), are the winner's busy
    # threads and worker cores: its plan then gives each rank the winner's OpenMP threads
    assert int(job.job.cpu) / job.job.threads_per_core == cores


def test_the_current_settings_are_read_typed_and_measured_only_where_they_differ():
    assert current_settings({}) == (None, None, ())
    omp, workers, notes = current_settings({"OMP_NUM_THREADS": "4", "CCL_WORKER_COUNT": "x2"})
    assert (omp, workers) == (4, None) and len(notes) == 1 and "CCL_WORKER_COUNT" in notes[0]
    assert current_settings({"OMP_NUM_THREADS": "0"})[0] is None
    default = Configuration(2, "one per socket", 3, 1, "ccl", "fp32", False, "the plan's share", True)
    assert current_configuration(default, None, None) is None
    assert current_configuration(default, 3, 1) is None  # the same as the default: nothing more to measure
    mine = current_configuration(default, 1, 2)
    assert mine is not None and mine.current and not mine.default and (mine.ranks, mine.omp_threads, mine.ccl_workers) == (2, 1, 2)
    gloo = Configuration(2, "one per socket", 3, 0, "gloo", "fp32", False, "the plan's share", True)
    assert current_configuration(gloo, None, 4) is None  # CCL_WORKER_COUNT means nothing to gloo


def test_the_speedup_over_your_current_settings_is_said_in_text_and_json():
    from compatmatrix.tune.render import tune_json, tune_text

    default = Measured(Configuration(2, "l", 1, 0, "gloo", "fp32", False, "the plan's share", True), 20.0, 0.01, ACCEPT, "", "", 1.0)
    current = Measured(Configuration(2, "l", 4, 0, "gloo", "fp32", False, "your current settings", current=True), 5.0, 0.01, ACCEPT, "", "", 1.0)
    outcome = outcome_of(default, default, current)
    assert outcome.speedup_over_current == pytest.approx(4.0)
    text = tune_text(outcome)
    assert "(your current settings)" in text and "4.00x their steps/s" in text
    assert "compat export sbatch --nproc-per-node 2 -- YOUR_TRAINING_COMMAND" in text
    document = tune_json(outcome)
    assert document["winner"]["speedup_over_current"] == pytest.approx(4.0)
    assert document["winner"]["export_arguments"]["sbatch"] == ["--nproc-per-node", "2"]
    assert [c["current"] for c in document["configurations"]] == [False, True]
    import json
    from pathlib import Path

    import jsonschema

    jsonschema.validate(document, json.loads((Path(__file__).resolve().parents[2] / "compatmatrix" / "schemas" / "tune-v1.json").read_text()))


# --- the per-run cost estimate (space.run_estimate, space.over_budget): from the reference run's wall time ----------

from compatmatrix.tune.space import over_budget, run_estimate  # noqa: E402


def cfg(dtype="fp32", compile=False, ranks=2):
    return Configuration(ranks, "fixture layout", 1, 0, "gloo" if ranks > 1 else None, dtype, compile, "the plan's share")


@pytest.mark.parametrize("config,references,extra,expected", [
    (cfg(), {}, 25.0, None),  # no reference timed yet: nothing to estimate from
    (cfg(), {"fp32": 0.0}, 25.0, None),  # a zero time is no measurement
    (cfg(), {"fp32": 9.5}, 25.0, 9.5),  # a Trainer command: its imports, whatever the ranks
    (cfg(ranks=1), {"fp32": 9.5}, 25.0, 9.5),
    (cfg(compile=True), {"fp32": 9.5}, 25.0, 34.5),  # the references are eager: compile's extra on top
    (cfg(compile=True), {"fp32": 9.5}, 0.0, 9.5),
    (cfg("bf16"), {"fp32": 9.5}, 25.0, 19.0),  # its own reference runs first
    (cfg("bf16"), {"fp32": 9.5, "bf16": 12.0}, 25.0, 12.0),
    (cfg("fp32"), {"fp32": 9.5, "bf16": 12.0}, 25.0, 9.5),
    (cfg("bf16", compile=True), {"fp32": 4.0}, 25.0, 33.0),
])
def test_a_run_is_estimated_from_its_reference_runs_wall_time(config, references, extra, expected):
    assert run_estimate(config, references, extra) == (pytest.approx(expected) if expected is not None else None)


@pytest.mark.parametrize("estimate,left,reason", [
    (9.5, 30.0, None),
    (9.5, 9.5, None),  # exactly fits
    (9.5, 9.4, "needs ~10 s, 9 s of budget left"),  # the need rounded up, what is left down: the sentence reads as the comparison
    (34.5, 20.2, "needs ~35 s, 20 s of budget left"),
    (9.5, -3.0, "needs ~10 s, 0 s of budget left"),  # the budget overrun by a run in progress
    (None, 5.0, None),  # nothing to estimate from: it starts
    (None, 0.0, "no budget left to start it"),
    (None, -1.0, "no budget left to start it"),
])
def test_a_run_that_does_not_fit_the_budget_left_says_both_numbers(estimate, left, reason):
    assert over_budget(estimate, left) == reason
