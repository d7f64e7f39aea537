"""compat tune's repeats: which configuration runs again (next_to_repeat, pure), and the measuring loop
(tune.service.measure) driven by a FIXTURE runner that stands in for _Runner: scripted step times and runs, a fixture
clock that each run advances by its scripted seconds. No torch, nothing depends on this machine."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compatmatrix.placement.sysfs import read_machine
from compatmatrix.tune.proof import Run, Verdict
from compatmatrix.tune.service import MAX_RUNS, Measured, measure, next_to_repeat, pick_winner, rate_interval
from compatmatrix.tune.space import Configuration

VM = Path(__file__).resolve().parents[1] / "data" / "topologies" / "vm-1s-2c-nosmt"
SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "compatmatrix" / "schemas" / "tune-v1.json").read_text())
ACCEPT = Verdict(True, False, "within", 0.0, 0.0)
REJECT = Verdict(False, False, "step 2's loss ...", 1.0, None)


def config(ranks, default=False, threads=1):
    return Configuration(ranks, "fixture layout", threads, 0, "gloo" if ranks > 1 else None, "fp32", False, "the plan's share", default)


def m(ranks, rate, spread, runs=1, verdict=ACCEPT, default=False):
    return Measured(config(ranks, default), rate, spread, verdict, "", "", 1.0, runs)


# --- next_to_repeat: the decision ------------------------------------------------------------------------------


@pytest.mark.parametrize("measured, expected", [
    # the fastest is separated from the other (slow end 95.2 > the other's fast end 55.6): nothing to repeat
    ([m(1, 100.0, 0.05, default=True), m(2, 50.0, 0.1)], None),
    # overlapping (the slow one's fast end 111 > the fast one's slow end 104.8): the one with the fewest runs
    ([m(1, 110.0, 0.05, runs=2, default=True), m(2, 100.0, 0.1, runs=1)], 1),
    ([m(1, 110.0, 0.05, runs=1, default=True), m(2, 100.0, 0.1, runs=2)], 0),
    # a tie in runs: the faster one first
    ([m(2, 100.0, 0.1), m(1, 110.0, 0.05, default=True)], 1),
    # every contender has its MAX_RUNS: done
    ([m(1, 110.0, 0.05, runs=MAX_RUNS, default=True), m(2, 100.0, 0.1, runs=MAX_RUNS)], None),
    # the fastest has its MAX_RUNS: the other contender runs again
    ([m(1, 110.0, 0.05, runs=MAX_RUNS, default=True), m(2, 100.0, 0.1, runs=MAX_RUNS - 1)], 1),
    # a rejected configuration is never repeated, however close and however few its runs
    ([m(1, 110.0, 0.05, runs=2, default=True), m(2, 109.0, 0.05, runs=1, verdict=REJECT)], None),
    ([m(1, 110.0, 0.05, runs=2, default=True), m(2, 109.0, 0.05, runs=1, verdict=REJECT), m(4, 108.0, 0.05, runs=2)], 0),
    # unmeasured (no verdict, no rate) neither
    ([m(1, 110.0, 0.05, default=True), Measured(config(2), None, None, None, "", "no result within 120 s", 120.0)], None),
    # the default plan is a contender when it overlaps the fastest (pick_winner compares with it)
    ([m(2, 130.0, 0.05, runs=2), m(4, 60.0, 0.05), m(1, 120.0, 0.1, runs=1, default=True)], 2),
    # a command's single run has no spread yet: it overlaps everything, however far its rate
    ([m(1, 400.0, None, runs=1, default=True), m(2, 60.0, None, runs=1)], 0),
    ([m(1, 400.0, 0.0, runs=2, default=True), m(2, 60.0, None, runs=1)], 1),
    ([m(1, 400.0, 0.0, runs=2, default=True), m(2, 60.0, 0.0, runs=2)], None),
    # one accepted configuration has nothing to be separated from
    ([m(1, 100.0, 0.5, default=True)], None),
])
def test_next_to_repeat(measured, expected):
    assert next_to_repeat(measured, MAX_RUNS) == expected


def test_a_configuration_skipped_is_not_named_but_the_next_contender_is():
    measured = [m(1, 110.0, 0.05, runs=1, default=True), m(2, 100.0, 0.1, runs=1), m(4, 105.0, 0.1, runs=2)]
    assert next_to_repeat(measured, MAX_RUNS) == 0
    assert next_to_repeat(measured, MAX_RUNS, skip={0}) == 1
    assert next_to_repeat(measured, MAX_RUNS, skip={0, 1}) == 2
    assert next_to_repeat(measured, MAX_RUNS, skip={0, 1, 2}) is None


def overlap(a, b):
    (a_low, a_high), (b_low, b_high) = a, b
    return a_low <= b_high and b_low <= a_high


def interval(x):
    return (0.0, float("inf")) if x.spread is None else rate_interval(x)


ENTRY = st.tuples(st.floats(1.0, 1000.0), st.one_of(st.none(), st.floats(0.0, 0.9)), st.integers(1, 4), st.booleans())


@settings(max_examples=60, deadline=None)
@given(entries=st.lists(ENTRY, min_size=0, max_size=6), max_runs=st.integers(1, 4), skip=st.sets(st.integers(0, 5), max_size=3))
def test_what_next_to_repeat_names_is_an_open_contender_with_the_fewest_runs(entries, max_runs, skip):
    measured = [m(i + 1, rate, spread, runs, ACCEPT if ok else REJECT, default=(i == 0)) for i, (rate, spread, runs, ok) in enumerate(entries)]
    chosen = next_to_repeat(measured, max_runs, skip)
    accepted = [i for i, x in enumerate(measured) if x.verdict.accepted]
    if len(accepted) < 2:
        assert chosen is None
        return
    best = max(accepted, key=lambda i: measured[i].steps_per_second)
    best_rate = measured[best].steps_per_second
    rivals = [i for i in accepted if i != best and overlap(interval(measured[i]), interval(measured[best]))]
    contenders = ([best] + rivals) if rivals else []
    # every index that could be named: the fastest rate's interval decides (several may share the fastest rate)
    fastest = [i for i in accepted if measured[i].steps_per_second == best_rate]
    open_ = [i for i in contenders if measured[i].runs < max_runs and i not in skip]
    if chosen is None:
        assert not open_ or len(fastest) > 1  # a tie for the fastest may pick another of them as "the best"
        return
    x = measured[chosen]
    assert x.verdict.accepted and x.runs < max_runs and chosen not in skip
    if len(fastest) == 1:
        assert chosen in contenders
        assert x.runs == min(measured[i].runs for i in open_)
        same = [i for i in open_ if measured[i].runs == x.runs]
        assert x.steps_per_second == max(measured[i].steps_per_second for i in same)


@settings(max_examples=40, deadline=None)
@given(entries=st.lists(ENTRY, min_size=1, max_size=6))
def test_repeating_what_it_names_ends_within_max_runs_each(entries):
    """However the numbers fall, following next_to_repeat (each repeat adding a run) stops: at most MAX_RUNS runs each."""
    measured = [m(i + 1, rate, spread, 1, ACCEPT if ok else REJECT, default=(i == 0)) for i, (rate, spread, _, ok) in enumerate(entries)]
    for _ in range(len(measured) * MAX_RUNS + 1):
        index = next_to_repeat(measured, MAX_RUNS)
        if index is None:
            break
        x = measured[index]
        measured[index] = Measured(x.config, x.steps_per_second, x.spread, x.verdict, "", "", 1.0, x.runs + 1)
    assert next_to_repeat(measured, MAX_RUNS) is None
    assert all(x.runs <= MAX_RUNS for x in measured)


# --- the loop: a FIXTURE runner ---------------------------------------------------------------------------------

REFERENCE = Run((2.0, 1.0, 0.5), (0.25, -0.5), "digest-of-the-reference")
WRONG = Run((2.0, 1.5, 0.9), (0.25, -0.5), "digest-of-something-else")  # step 2's loss 50% off: no bound accepts it


class FixtureClock:
    """A FIXTURE clock: time moves only when the FIXTURE runner says a run took its seconds."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class FixtureRunner:
    """A FIXTURE standing in for tune.service._Runner: ``script`` maps a configuration's name to its runs, each
    (Run or None, step times, problem, seconds) or an exception to raise; the single-process reference (layout "one
    process") gives REFERENCE. Each run moves the FIXTURE clock on by its seconds."""

    def __init__(self, script, clock, command=()):
        self.script = {name: list(runs) for name, runs in script.items()}
        self.clock, self.command = clock, command
        self.global_batch, self.fan_in, self.steps, self.what = 120, 128, 3, "the FIXTURE workload"
        self.calls = []

    def run(self, config, timeout_factor, left):
        if config.layout == "one process":
            self.clock.now += 5.0
            return REFERENCE, [0.01], "", 5.0
        self.calls.append((config.name, left))
        outcome = self.script[config.name].pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        run, times, problem, seconds = outcome
        self.clock.now += seconds
        return run, list(times), problem, seconds


DEFAULT, OTHER = config(1, default=True, threads=2), config(2)
FIRST = [0.01, 0.02, 0.03]  # alone: 1 / 0.02 = 50 steps/s, half the IQR (0.01 .. 0.03) relative to 0.02 = 50%
SECOND = [0.04, 0.05]  # pooled with FIRST: 1 / 0.03 steps/s; quartiles 0.015 and 0.045: spread 0.015 / 0.03 = 50%


def measured_by(runner, budget, configurations=(DEFAULT, OTHER)):
    measured, notes, said = [], [], []
    measure(list(configurations), runner, read_machine(str(VM)), budget, runner.clock(), measured, notes, said.append, runner.clock)
    return measured, notes, said


def test_close_configurations_are_repeated_with_their_samples_pooled_up_to_max_runs():
    clock = FixtureClock()
    script = {DEFAULT.name: [(REFERENCE, FIRST, "", 10.0), (REFERENCE, SECOND, "", 10.0), (REFERENCE, [0.06], "", 10.0)],
              OTHER.name: [(REFERENCE, FIRST, "", 10.0), (REFERENCE, SECOND, "", 10.0), (REFERENCE, [0.06], "", 10.0)]}
    runner = FixtureRunner(script, clock)
    measured, notes, said = measured_by(runner, budget=1000.0)
    assert [x.runs for x in measured] == [MAX_RUNS, MAX_RUNS] and notes == []
    assert [name for name, _ in runner.calls] == [DEFAULT.name, OTHER.name, DEFAULT.name, OTHER.name, DEFAULT.name, OTHER.name]
    default = measured[0]
    assert default.samples == (0.01, 0.02, 0.03, 0.04, 0.05, 0.06)
    assert default.steps_per_second == pytest.approx(1 / 0.035)
    assert default.seconds == pytest.approx(30.0) and default.verdict.accepted and default.verdict.exact
    assert f"compat tune: {DEFAULT.name} again (run 2): " in "\n".join(said) and f"compat tune: {OTHER.name} again (run 3): " in "\n".join(said)


def test_after_one_repeat_the_rate_and_spread_are_those_of_the_pooled_step_times():
    clock = FixtureClock()
    script = {DEFAULT.name: [(REFERENCE, FIRST, "", 10.0), (REFERENCE, SECOND, "", 10.0)], OTHER.name: [(REFERENCE, FIRST, "", 10.0)]}
    # the budget: the reference (5 s), two first runs (20 s) and one repeat of 10 s
    measured, _, _ = measured_by(FixtureRunner(script, clock), budget=35.0)
    default, other = measured
    assert (default.runs, other.runs) == (2, 1)
    assert default.steps_per_second == pytest.approx(1 / 0.03) and default.spread == pytest.approx(0.5)
    assert other.steps_per_second == pytest.approx(50.0) and other.spread == pytest.approx(0.5)


@pytest.mark.parametrize("budget, repeats", [(25.0, 0), (34.0, 0), (35.0, 1), (45.0, 2)])
def test_the_budget_stops_the_repeats_and_none_starts_that_would_run_past_it(budget, repeats):
    """Each run takes 10 s of the FIXTURE clock; the reference 5 s and the two first runs 20 s: a repeat starts only with
    10 s or more left (what one of its runs took), so 34 s of budget leave 9 s: none."""
    clock = FixtureClock()
    runs = [(REFERENCE, FIRST, "", 10.0)] * MAX_RUNS
    runner = FixtureRunner({DEFAULT.name: runs, OTHER.name: runs}, clock)
    measured, _, _ = measured_by(runner, budget)
    assert sum(x.runs for x in measured) - 2 == repeats
    assert clock.now - 1000.0 <= budget  # no repeat ran past the budget


def test_a_repeat_that_trains_something_else_rejects_the_configuration():
    clock = FixtureClock()
    script = {DEFAULT.name: [(REFERENCE, FIRST, "", 10.0)] * MAX_RUNS, OTHER.name: [(REFERENCE, FIRST, "", 10.0), (WRONG, SECOND, "", 10.0)]}
    runner = FixtureRunner(script, clock)
    measured, _, _ = measured_by(runner, budget=1000.0)
    default, other = measured
    assert not other.verdict.accepted and other.runs == 2
    assert other.verdict.reason.startswith("in its run 2: step 2's loss ") and "over the fp32 bound" in other.verdict.reason
    assert [name for name, _ in runner.calls].count(OTHER.name) == 2  # never again once rejected
    assert pick_winner(measured) is default


def test_a_repeat_that_trains_something_else_rejects_even_without_step_times():
    """A run whose losses diverge but that reports no speed (a command without train_steps_per_second) still rejects."""
    clock = FixtureClock()
    script = {DEFAULT.name: [(REFERENCE, FIRST, "", 10.0)] * MAX_RUNS, OTHER.name: [(REFERENCE, FIRST, "", 10.0), (WRONG, [], "", 10.0)]}
    runner = FixtureRunner(script, clock)
    measured, _, _ = measured_by(runner, budget=1000.0)
    other = measured[1]
    assert not other.verdict.accepted and other.verdict.reason.startswith("in its run 2: ") and other.runs == 2
    assert pick_winner(measured) is measured[0]


def test_a_repeat_that_fails_to_run_keeps_the_earlier_measurement_and_says_why():
    clock = FixtureClock()
    script = {DEFAULT.name: [(REFERENCE, FIRST, "", 10.0)] * MAX_RUNS, OTHER.name: [(REFERENCE, FIRST, "", 10.0), (None, [], "no result within 120 s", 120.0)]}
    runner = FixtureRunner(script, clock)
    measured, notes, _ = measured_by(runner, budget=1000.0)
    other = measured[1]
    assert other.runs == 1 and other.samples == tuple(FIRST) and other.verdict.accepted and other.steps_per_second == pytest.approx(50.0)
    assert notes == [f"{OTHER.name}: its run 2 did not finish (no result within 120 s); its numbers are those of its 1 run(s) before"]
    assert [name for name, _ in runner.calls].count(OTHER.name) == 2


def test_ctrl_c_during_a_repeat_keeps_what_was_measured():
    clock = FixtureClock()
    runner = FixtureRunner({DEFAULT.name: [(REFERENCE, FIRST, "", 10.0), KeyboardInterrupt()], OTHER.name: [(REFERENCE, FIRST, "", 10.0)]}, clock)
    measured = []
    with pytest.raises(KeyboardInterrupt):
        measure([DEFAULT, OTHER], runner, read_machine(str(VM)), 1000.0, clock(), measured, [], clock=clock)
    assert [(x.config.name, x.runs) for x in measured] == [(DEFAULT.name, 1), (OTHER.name, 1)]


def test_a_command_gets_a_spread_from_two_runs_and_stops_once_separated():
    """A command's run is one steps/s (the FIXTURE runner reports 1 / train_steps_per_second as its one step time)."""
    clock = FixtureClock()
    script = {DEFAULT.name: [(REFERENCE, [1 / 100.0], "", 10.0), (REFERENCE, [1 / 110.0], "", 10.0), (REFERENCE, [1 / 90.0], "", 10.0)],
              OTHER.name: [(REFERENCE, [1 / 10.0], "", 10.0), (REFERENCE, [1 / 10.0], "", 10.0)]}
    runner = FixtureRunner(script, clock, command=("train.py",))
    measured, _, _ = measured_by(runner, budget=1000.0)
    default, other = measured
    # one run each: no spread, so both are repeated; then 105 +- 2% (inclusive quartiles of 100 and 110: 102.5, 107.5) and
    # 10 +- 0%: separated, no third run
    assert (default.runs, other.runs) == (2, 2)
    assert default.steps_per_second == pytest.approx(105.0) and default.spread == pytest.approx(2.5 / 105.0)
    assert default.samples == pytest.approx((100.0, 110.0))
    assert other.steps_per_second == pytest.approx(10.0) and other.spread == pytest.approx(0.0)


def test_a_single_run_of_a_command_has_no_spread():
    clock = FixtureClock()
    runner = FixtureRunner({DEFAULT.name: [(REFERENCE, [1 / 100.0], "", 10.0)]}, clock, command=("train.py",))
    (default,), _, _ = measured_by(runner, budget=1000.0, configurations=(DEFAULT,))
    assert default.runs == 1 and default.steps_per_second == pytest.approx(100.0) and default.spread is None


# --- the per-run cost estimate: a run that cannot fit the budget left is not started, and is listed -----------------


def test_a_configuration_whose_run_does_not_fit_the_budget_left_is_not_started_and_is_listed():
    """The reference takes 5 s of the FIXTURE clock, so each run is estimated at 5 s: after the default's 10 s run,
    18 s of budget leave 3 s, and OTHER is left out with both numbers (it used to start and run past the budget)."""
    from compatmatrix.tune.space import Pruned

    clock = FixtureClock()
    runner = FixtureRunner({DEFAULT.name: [(REFERENCE, FIRST, "", 10.0)], OTHER.name: [(REFERENCE, FIRST, "", 10.0)]}, clock)
    measured, pruned, timed = [], [], {}
    measure([DEFAULT, OTHER], runner, read_machine(str(VM)), 18.0, clock(), measured, [], clock=clock, pruned=pruned, reference_seconds=timed)
    assert [x.config.name for x in measured] == [DEFAULT.name]
    assert [name for name, _ in runner.calls] == [DEFAULT.name]
    assert pruned == [Pruned(OTHER.name, "needs ~5 s, 3 s of budget left")]
    assert timed == {"fp32": 5.0}
    assert clock.now - 1000.0 <= 18.0


def test_a_shorter_configuration_after_one_that_does_not_fit_still_runs():
    """Each one is judged by its own estimate: a compiled run (+25 s) is left out, the eager one after it still fits."""
    from dataclasses import replace

    compiled = replace(OTHER, compile=True)
    clock = FixtureClock()
    runner = FixtureRunner({DEFAULT.name: [(REFERENCE, FIRST, "", 10.0)], compiled.name: [], OTHER.name: [(REFERENCE, FIRST, "", 10.0)]}, clock)
    measured, pruned = [], []
    measure([DEFAULT, compiled, OTHER], runner, read_machine(str(VM)), 30.0, clock(), measured, [], clock=clock, pruned=pruned)
    assert [x.config.name for x in measured] == [DEFAULT.name, OTHER.name]
    assert [(p.name, p.reason) for p in pruned] == [(compiled.name, "needs ~30 s, 15 s of budget left")]


def test_the_budget_left_out_configurations_and_the_reference_seconds_are_in_the_output():
    from compatmatrix.tune.render import tune_json, tune_text
    from compatmatrix.tune.service import Outcome
    from compatmatrix.tune.space import Pruned, Space

    default = Measured(DEFAULT, 50.0, None, ACCEPT, "", "", 10.0, 1, (50.0,))
    outcome = Outcome("/py", "torchrun", Space("machine", (DEFAULT, OTHER), (), 18.0, 10.0), (default,), default, default, None, 0, 17.0, {}, (),
                      pruned=(Pruned(OTHER.name, "needs ~5 s, 3 s of budget left"),), reference_seconds=(("fp32", 5.0),))
    assert f"# left out: {OTHER.name}: needs ~5 s, 3 s of budget left" in tune_text(outcome).splitlines()
    document = tune_json(outcome)
    jsonschema.validate(document, SCHEMA)
    assert document["pruned"] == [{"name": OTHER.name, "reason": "needs ~5 s, 3 s of budget left"}]
    assert document["reference_seconds"] == {"fp32": 5.0}
    document["reference_seconds"] = {"fp16": 1.0}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(document, SCHEMA)
    nothing = Outcome("/py", "torchrun", Space("machine", (DEFAULT,), (), 25.0, None), (), None, None, None, 0, 20.0, {}, (),
                      pruned=(Pruned(DEFAULT.name, "needs ~20 s, 5 s of budget left"),), reference_seconds=(("fp32", 19.2),))
    text = tune_text(nothing)
    assert "# budget 25 s (each run estimated from its reference run's fp32 19.2 s)" in text
    assert "none of them fitted the budget left after the reference run (left out below): pass a larger --budget" in text
    jsonschema.validate(tune_json(nothing), SCHEMA)


# --- the output: a runs column, and runs in --json ------------------------------------------------------------


def test_the_runs_are_in_the_table_and_the_json():
    from compatmatrix.tune.render import tune_json, tune_text
    from compatmatrix.tune.service import Outcome
    from compatmatrix.tune.space import Space

    default = Measured(DEFAULT, 50.0, 0.5, ACCEPT, "", "", 30.0, 3, (0.01, 0.02, 0.03), (40.0, 62.5))
    other = Measured(OTHER, 20.0, 0.1, ACCEPT, "", "", 10.0, 1, (0.05,))
    cut = Measured(config(4), None, None, None, "", "the budget of 60 s was spent before it started", 0.0)
    outcome = Outcome("/py", "torchrun", Space("machine", (DEFAULT, OTHER), (), 60.0, 10.0), (default, other, cut), default, default, None, 0, 1.0, {}, ())
    table = tune_text(outcome).splitlines()
    header = next(line for line in table if line.startswith("configuration"))
    # the confidence interval's column (its level in its header) comes after the spread, which keeps its meaning
    assert header.split() == ["configuration", "steps/s", "spread", "95%", "CI", "runs", "correctness"]
    rows = {line.split()[0]: line.split() for line in table if line.startswith(("1r-", "2r-", "4r-"))}
    assert rows[DEFAULT.name][6:8] == ["40.0–62.5", "3"] and rows[OTHER.name][3:5] == ["-", "1"] and rows["4r-1t-gloo-fp32"][3:5] == ["-", "-"]
    assert any(line.startswith("# interval: 95% CI is the distribution-free 95% confidence interval of the median") for line in table)
    document = tune_json(outcome)
    jsonschema.validate(document, SCHEMA)
    assert [c["runs"] for c in document["configurations"]] == [3, 1, 1]
    assert [c["interval"] for c in document["configurations"]] == [{"low": 40.0, "high": 62.5, "level": 0.95}, None, None]
    assert "samples" not in document["configurations"][0]
    without = json.loads(json.dumps(document))
    del without["configurations"][0]["runs"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(without, SCHEMA)


def test_the_spread_of_a_few_command_runs_stays_within_their_rates():
    """Two or three runs' exclusive quartiles reach past the values (1.0 and 2.0 gave the interval 1.0-3.0)."""
    from compatmatrix.tune.service import pooled_speed

    for rates in ((1.0, 2.0), (1.0, 5.0), (2.0, 2.0, 9.0)):
        rate, spread = pooled_speed(rates, True)
        assert spread < 1.0 and 0.0 <= rate * (1 - spread) and rate * (1 + spread) <= max(rates), (rates, rate, spread)


# --- the confidence interval of the median decides, not the quartile spread -------------------------------------

SPREAD_OUT = [0.010 * (0.6 + 0.8 * i / 39) for i in range(40)]  # 40 step times, median 10 ms, quartiles ~8 and ~12 ms
QUICKER = [t * 0.7 for t in SPREAD_OUT]  # the same noise, 30% shorter steps


def test_many_step_times_separate_by_the_confidence_interval_where_the_quartile_spreads_still_overlap():
    """The old rule (rate / (1 +- half the IQR)) kept two configurations whose step times spread +-20% overlapping
    however many steps were timed, so both were repeated to MAX_RUNS and the default stayed the winner; the median's 95%
    confidence interval of 40 step times is narrow enough to separate medians 30% apart after one run each."""
    from compatmatrix.tune.interval import median_ranks

    clock = FixtureClock()
    script = {DEFAULT.name: [(REFERENCE, SPREAD_OUT, "", 10.0)] * MAX_RUNS, OTHER.name: [(REFERENCE, QUICKER, "", 10.0)] * MAX_RUNS}
    measured, _, _ = measured_by(FixtureRunner(script, clock), budget=1000.0)
    default, other = measured
    # the quartile spreads (kept in the table) overlap: the old rule's reason to repeat
    assert other.steps_per_second / (1 + other.spread) < default.steps_per_second / (1 - default.spread)
    # the intervals are the step times' order statistics by the binomial ranks, inverted into steps/s
    j, k = median_ranks(40)
    assert default.interval == pytest.approx((1 / sorted(SPREAD_OUT)[k - 1], 1 / sorted(SPREAD_OUT)[j - 1]))
    assert other.interval[0] > default.interval[1]
    assert (default.runs, other.runs) == (1, 1)
    assert pick_winner(measured) is other


def test_a_repeat_narrows_the_interval():
    """Pooling a second run's step times narrows the median's interval (the quartile spread does not narrow)."""
    from compatmatrix.tune.service import pooled_interval

    one = pooled_interval(tuple(SPREAD_OUT), False)
    two = pooled_interval(tuple(SPREAD_OUT) * 2, False)
    assert two[1] - two[0] < one[1] - one[0]


@pytest.mark.parametrize("samples, command, expected, why", [
    (tuple(range(1, 11)), False, (1 / 9, 1 / 2), "ten step times 1..10 s: ranks 2 and 9, inverted"),
    ((10.0, 20.0, 30.0, 40.0, 50.0, 60.0), True, (10.0, 60.0), "six runs' steps/s: ranks 1 and 6, as they are"),
    ((10.0, 20.0, 30.0), True, None, "three runs of a command cannot reach 95%"),
    ((0.0, 1.0, 2.0, 3.0, 4.0, 5.0), False, None, "a step of 0 s has no finite rate"),
])
def test_pooled_interval(samples, command, expected, why):
    from compatmatrix.tune.service import pooled_interval

    found = pooled_interval(samples, command)
    assert (found is None and expected is None) or found == pytest.approx(expected), why


def test_with_no_confidence_interval_a_single_run_overlaps_everything_and_two_runs_use_their_spread():
    single = m(1, 100.0, None, default=True)
    assert rate_interval(single) == (0.0, float("inf"))
    two = m(1, 100.0, 0.25)
    assert rate_interval(two) == pytest.approx((80.0, 100.0 / 0.75))
    assert pick_winner([single, m(2, 1000.0, None)]) is single  # nothing separates from an unknown noise


def test_a_command_s_table_says_its_runs_are_too_few_for_the_interval_and_what_decided_instead():
    from compatmatrix.tune.render import tune_json, tune_text
    from compatmatrix.tune.service import Outcome
    from compatmatrix.tune.space import Space

    default = Measured(DEFAULT, 105.0, 2.5 / 105.0, ACCEPT, "", "", 30.0, 3, (100.0, 105.0, 110.0))
    outcome = Outcome("/py", "torchrun", Space("machine", (DEFAULT,), (), 60.0, None), (default,), default, default, None, 0, 1.0, {}, (),
                      workload="command")
    text = tune_text(outcome)
    assert "fewer than 6 runs cannot reach 95% ('-'), so repeats and the winner went by the spread" in text
    assert tune_json(outcome)["configurations"][0]["interval"] is None
