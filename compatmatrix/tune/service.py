"""``compat tune``: measure the search space's configurations with compat's own tiny workload and keep only those
that train the same model as the single-process reference. The steps in order: probe the environment, derive the
space (tune/space.py), run the references (one process, one per dtype), run each configuration under the real
launcher, judge it (tune/proof.py), repeat the close ones (below), pick the fastest accepted one.

Each run is the live doctor's kind of child: every process in a session of its own, tagged with a run id, held to
a deadline (COMPAT_TUNE_TIMEOUT, default 120 s a run; torch.compile runs 3 times that; never past the budget, except
that a run started gets at least MIN_RUN_S), and swept at the end
(live/supervise.py). What a run starts is its launcher's (the registry's launchers that offer TUNE), handed the job
as compat launch hands it (placement/binding.bound_job, then the launcher's processes()): torchrun runs the command line
compat launch would (each rank bound by numactl/taskset); spawn starts each rank itself through the same binding
wrapper, with RANK, WORLD_SIZE, LOCAL_RANK and a free MASTER_PORT. Every rank runs the command with the measured
environment's interpreter in front. Ctrl-C stops the run in progress (its processes swept) and keeps what was
measured. No new configuration starts once the budget's seconds have passed.

Repeats: after every configuration has run once, the budget left goes to repeating the ones whose speeds are not
yet separated (next_to_repeat): the fastest accepted configuration and every accepted one whose rate interval
overlaps its, the one with the fewest runs first, each up to MAX_RUNS runs. Each repeat pools its samples with the
earlier runs' (the rate, spread and interval are recomputed from them all), is judged again (a configuration must train
the same model every run: one rejected run rejects it), and starts only where the budget's rest covers what one of its
runs took.

The rate interval (rate_interval) is the 95% confidence interval of the median (tune/interval.py: order statistics,
distribution-free) turned into steps/s: for compat's workload, of the timed step times pooled over its runs (1 / the
slow bound, 1 / the fast bound). That treats the step times as exchangeable draws of one distribution; consecutive
steps are correlated in practice (a disturbed stretch slows several in a row, runs differ by their placement), so the
interval is optimistic: narrower than the truth. Where there are too few samples to reach 95% (fewer than 6: a
command's 1 to MAX_RUNS runs always) there is no confidence interval; the interval is then the quartile spread of
two runs or more (rate / (1 +- spread): a spread, not a confidence statement, and the output says so), and a single
run overlaps everything.

With a training command (``compat tune -- train.py …``) that command is measured instead of compat's workload, by
the protocol of tune/trainer.py: CMD_STEPS steps, the Trainer's logged losses and train_steps_per_second; the proof
compares the losses only (a command reports no parameters), with the Trainer's logged precision added to the bound
and an assumed fan-in (trainer.ASSUMED_FAN_IN) in the count of reduction terms; a run whose losses cannot be read is
"unproven", never accepted. Its speed is one number per run: with two runs or more, the median of its runs' steps/s and
half their interquartile range (no spread from a single run); MAX_RUNS runs are too few for a 95% confidence interval.

What a run writes stays in compat tune's scratch folder (scratch.py: <tempdir>/compat-tune-*, locked while compat
lives, removed at the end, swept at the next start when a SIGKILL left it): each run's folder run-N holds its temporary
files (TMPDIR of its processes, live/supervise.py) and a training command's outputs (tune/paths.py points them there). A
run's output is parsed as it comes (trainer.LogReader) and only its tail is kept.

Side effects: the environment probe, child processes, a private temporary folder.
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from ..errors import CompatError
from ..record import Record
from ..scratch import scratch_folder
from .interval import LEVEL, median_interval
from .paths import PathArgs
from .proof import Run, Verdict, prove, reduction_terms, tolerance
from .space import DEFAULT_COSTS, Configuration, Pruned, Space, over_budget, run_estimate

if TYPE_CHECKING:
    from ..matrix.model import Matrix

WARMUP = 5
TIMED = 40
STEPS = WARMUP + TIMED
CMD_STEPS = 20  # steps of a user's training command per run
TIMEOUT_S = 120.0
MIN_RUN_S = 10.0  # the least a run started is given, even where the budget has less left
MAX_RUNS = 3  # runs of one configuration at most: the budget of a small machine pays for a few repeats of the close ones, not a long series
ADVISED = "torchrun"  # compat launch's launcher for one node: the winner's compat launch arguments and its oneCCL environment
WORKLOAD = Path(__file__).resolve().parent / "workload.py"
FIXTURE_VAR = "COMPAT_TUNE_FIXTURE_PERTURB"  # a test hook (FIXTURE): see workload.py and fixture_site/sitecustomize.py
FIXTURE_SITE = Path(__file__).resolve().parent / "fixture_site"  # a FIXTURE sitecustomize for a training command's ranks
SCRATCH_PREFIX = "compat-tune-"  # <tempdir>/compat-tune-XXXXXXXX: every run's folder, the command's outputs and TMPDIR
DROPPED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class TuneOptions:
    python: Optional[str]
    launcher: str
    budget: float
    matrix: "Matrix"  # what the oneCCL environment is judged against, loaded as compat launch and compat env load it
    bf16: bool = True  # False: --no-bf16
    compile: bool = True  # False: --no-compile
    command: tuple[str, ...] = ()  # the training command (empty: compat's own workload)
    reads: tuple[str, ...] = ()  # path arguments of the command its runs only read (--reads NAME; tune/paths.py)


class Measured(Record):
    config: Configuration
    steps_per_second: Optional[float]  # 1 / the median timed step of all its runs (a command: the median of its runs' steps/s)
    spread: Optional[float]  # half the interquartile range of those step times (a command: of its runs' steps/s), relative to the median
    verdict: Optional[Verdict]  # of all its runs: the farthest one from the reference, or the first rejected one
    tolerance: str  # the bound's formula with its numbers
    problem: str  # why it has no measurement ("" when it has one)
    seconds: float  # wall-clock of its runs, together
    runs: int = 1  # the runs its numbers come from
    samples: tuple[float, ...] = ()  # what they were computed from: every timed step's seconds, pooled (a command: each run's steps/s)
    interval: Optional[tuple[float, float]] = None  # steps/s (low, high): the LEVEL confidence interval of the median (pooled_interval); None: too few samples


class Outcome(Record):
    python: str
    launcher: str
    space: Space
    measured: tuple[Measured, ...]
    winner: Optional[Measured]
    default: Optional[Measured]
    current: Optional[Measured]  # the user's current settings, measured where they differ from the default plan
    interrupted: int  # 0, or the exit code of the signal that stopped the measuring (130 Ctrl-C, 143 SIGTERM/SIGHUP)
    seconds: float
    winner_env: Mapping[str, str]
    notes: tuple[str, ...]
    threads_per_core: int = 1  # the machine's hyperthreads per core (for compat export pytorchjob's --cpu)
    workload: str = "compat"  # "compat" (its own workload) or "command" (the user's training command)
    pruned: tuple[Pruned, ...] = ()  # configurations not started: their estimated run did not fit the budget left
    reference_seconds: tuple[tuple[str, float], ...] = ()  # (dtype, wall seconds of its single-process reference run)

    @property
    def speedup(self) -> Optional[float]:
        """The winner's steps/s over the default plan's (when both were measured and accepted)."""
        if self.winner is None or self.default is None or not _accepted(self.default):
            return None
        return (self.winner.steps_per_second or 0.0) / (self.default.steps_per_second or 1.0)

    @property
    def speedup_over_current(self) -> Optional[float]:
        """The winner's steps/s over the user's current settings' (when both were measured and accepted)."""
        if self.winner is None or self.current is None or not _accepted(self.current):
            return None
        return (self.winner.steps_per_second or 0.0) / (self.current.steps_per_second or 1.0)


def _accepted(measured: Measured) -> bool:
    return measured.verdict is not None and measured.verdict.accepted and measured.steps_per_second is not None


def tune(options: TuneOptions, environ: Mapping[str, str], say: Callable[[str], None] = lambda line: None) -> Outcome:
    from ..environment.snapshot import take_snapshot
    from ..launchers import names
    from ..launchers.interface import TUNE
    from ..placement.topology import machine_from_snapshot
    from .space import current_configuration, current_settings, installed_from_snapshot, search_space

    offered = names(TUNE)  # the launchers of the registry that run tune's configurations
    if options.launcher not in offered:
        raise CompatError(f"compat tune runs its ranks with {' or '.join(offered)}, not {options.launcher}.",
                          f"Pass {' or '.join(f'--launcher {name}' for name in offered)}.")
    command, command_notes, paths = _command_of(options)  # a path argument compat cannot place is refused before anything runs
    started = time.monotonic()
    snapshot = take_snapshot(options.python)
    if snapshot.get("torch") is None:
        raise CompatError(f"torch is not installed in {snapshot.executable}: compat tune trains a small model with it.",
                          "Pass --python PATH of the training environment (or install torch there).")
    machine = machine_from_snapshot(snapshot)
    # a training command's cost is known only once its reference has run (a Trainer spends seconds importing): the
    # measuring estimates each of its runs from that; compat's own workload has known costs (space.Costs)
    space = search_space(machine, installed_from_snapshot(snapshot), options.budget, None if options.command else DEFAULT_COSTS,
                         bf16=options.bf16, compile=options.compile)
    omp, workers, setting_notes = current_settings(environ)
    mine = current_configuration(space.default, omp, workers)
    configurations = list(space.configurations)
    if mine is not None:  # measured right after the default plan, whatever the budget's ordering says
        at = next((i + 1 for i, c in enumerate(configurations) if c.default), 0)
        configurations.insert(at, mine)
    base = {k: v for k, v in environ.items() if k not in DROPPED}
    measured: list[Measured] = []
    repeat_notes: list[str] = []
    pruned: list[Pruned] = []
    reference_seconds: dict[str, float] = {}
    interrupted = 0  # 130 (Ctrl-C) or 143 (SIGTERM/SIGHUP): the exit code to leave with after the output
    with scratch_folder(SCRATCH_PREFIX) as folder:  # removed at the end; one a SIGKILL left is swept at the next start
        runner = _Runner(snapshot, machine, options.launcher, base, folder, command, _cwd(), paths, options.matrix)
        try:
            measure(configurations, runner, machine, options.budget, started, measured, repeat_notes, say, pruned=pruned, reference_seconds=reference_seconds)
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGHUP (processes.Terminated): the run in progress was swept; what was measured stays
            from ..processes import Terminated

            interrupted = 143 if isinstance(exc, Terminated) else 130
    winner = pick_winner(measured)
    default = next((m for m in measured if m.config.default), None)
    current = next((m for m in measured if m.config.current), None)
    notes = list(setting_notes) + command_notes + repeat_notes
    if command:
        notes.append(f"your training command was measured: {CMD_STEPS} steps a run, the global batch of {runner.global_batch} split over the ranks; "
                     "steps/s is the Trainer's train_steps_per_second (one number per run; with 2 runs or more, their median and spread); "
                     "the proof compares the logged losses only")
    else:
        notes.append("compat's own tiny workload was measured (an MLP of 64 inputs, 128 hidden units, a global batch of 120), not a training "
                     "command of yours: its speeds rank the launch settings for a model this small, where start-up and communication weigh most")
    if pruned:
        timed = ", ".join(f"{dtype} {seconds:.1f} s" for dtype, seconds in sorted(reference_seconds.items()))
        notes.append(f"each run was estimated at its single-process reference run's wall time ({timed}, start to exit; twice that where "
                     f"its dtype's reference had not run yet; +{DEFAULT_COSTS.compile:g} s with torch.compile); a configuration whose run did not "
                     "fit the budget left was not started (left out)")
    if options.launcher != ADVISED:
        from ..launchers import LAUNCHERS

        itself = " (compat starts each rank)" if LAUNCHERS[options.launcher].starts_ranks_itself else ""
        notes.append(f"measured with {options.launcher}{itself}; compat launch runs the winner with {ADVISED}, which binds the ranks the same way")
    return Outcome(snapshot.executable, options.launcher, space, tuple(measured), winner, default, current, interrupted, time.monotonic() - started,
                   runner.rank_env(winner.config) if winner else {}, tuple(notes), machine.topology.threads_per_core,
                   "command" if command else "compat", tuple(pruned), tuple(sorted(reference_seconds.items())))


def _command_of(options: TuneOptions) -> tuple[tuple[str, ...], list[str], Optional[PathArgs]]:
    """The training command's words (empty: compat's workload), the notes about it, and what happens to its path
    arguments (tune/paths.py); raises CompatError for a command without a script or with a path argument compat
    cannot tell read from written."""
    if not options.command:
        return (), [], None
    from .paths import classify, notes, refuse
    from .trainer import is_trainer_command, script_words

    words, dropped = script_words(options.command)
    if not words:
        raise CompatError("compat tune -- COMMAND needs a script after the interpreter.", "Pass e.g. compat tune -- train.py --output_dir out.")
    paths = classify(words, options.reads, is_trainer_command(words))
    refuse(paths)
    _script_exists(words)
    return tuple(words), ([dropped] if dropped else []) + notes(paths), paths


def _script_exists(words: list[str]) -> None:
    """Raise the sentence for a script that is not there (where the ranks would open it: the caller's folder), before
    anything runs; -m MODULE and -c CODE are the interpreter's to find."""
    if words[0] in ("-m", "-c"):
        return
    from ..errors import shown

    folder = _cwd()
    script = Path(words[0]) if folder is None else folder / words[0]
    try:
        found = script.is_file()
    except (OSError, ValueError):  # a name past NAME_MAX, a NUL
        found = False
    if not found:
        raise CompatError(f"The training script {shown(words[0])} of your command is no file{'' if folder is None else f' in {shown(str(folder), 200)}'}.",
                          "Pass the script's path as the ranks would open it (relative to the folder you run compat tune in), "
                          "e.g. compat tune -- train.py --output_dir out.")


def measure(configurations, runner, machine, budget: float, started: float, measured: list[Measured], notes: list[str],  # noqa: ANN001
            say: Callable[[str], None] = lambda line: None, clock: Callable[[], float] = time.monotonic,
            pruned: Optional[list[Pruned]] = None, reference_seconds: Optional[dict[str, float]] = None) -> None:
    """Run each configuration once with ``runner`` (a _Runner), then repeat what next_to_repeat names while the budget
    lasts. Appends to ``measured`` as it goes (and replaces a configuration's entry after each repeat), so that what
    was measured stays when Ctrl-C raises out of here; why a repeat was not counted goes to ``notes``. Each reference
    run's wall time goes to ``reference_seconds`` (dtype -> seconds); a configuration whose run is estimated from them
    (space.run_estimate) to need more than the budget left is not started and goes to ``pruned`` with the numbers."""
    session = _Measuring(runner, machine, budget, started, clock, say, measured, notes,
                         [] if pruned is None else pruned, {} if reference_seconds is None else reference_seconds)
    for config in configurations:
        session.run_once(config)
    session.repeat_close_ones()


@dataclass
class _Measuring:
    """One measure() call: what each run needs and what the runs add up to (the caller's lists, appended as it goes)."""

    runner: _Runner
    machine: object
    budget: float
    started: float
    clock: Callable[[], float]
    say: Callable[[str], None]
    measured: list[Measured]
    notes: list[str]
    pruned: list[Pruned]
    reference_seconds: dict[str, float]  # dtype -> its reference run's wall time
    references: dict[str, Run | str] = field(default_factory=dict)  # dtype -> its reference run, or why it has none

    @property
    def command(self) -> bool:
        return bool(self.runner.command)

    def left(self) -> float:
        return self.budget - (self.clock() - self.started)

    def judge(self, config: Configuration) -> tuple[Optional[Run], list[float], str, float, Optional[Verdict], str]:
        """One run of ``config``: the run, its step times, why it has none, its seconds, its verdict and the bound's text."""
        runner = self.runner
        run, times, problem, seconds = runner.run(config, 3.0 if config.compile else 1.0, _left(self.started, self.budget, self.clock()))
        reference = self.references[config.dtype]
        slack = (run.precision if run is not None else 0.0) + (reference.precision if isinstance(reference, Run) else 0.0)
        tol = tolerance(config.dtype, reduction_terms(runner.global_batch, runner.fan_in, config.ranks), runner.steps, slack)
        if run is None:
            return None, [], problem, seconds, None, tol.text()
        assert isinstance(reference, Run)
        verdict = (prove(run, reference, tol) if run.losses else
                   Verdict(False, False, "unproven: its losses could not be read from its output, so it cannot be shown to train the same model", None, None))
        return run, times, "", seconds, verdict, tol.text()

    def fits(self, config: Configuration) -> bool:
        """Whether a run of ``config`` is estimated to fit the budget left; if not, it goes to ``pruned`` with the numbers."""
        why = over_budget(run_estimate(config, self.reference_seconds), self.left())
        if why is not None:
            self.pruned.append(Pruned(config.name, why))
        return why is None

    def run_reference(self, dtype: str, config: Configuration) -> None:
        """The single-process reference of ``dtype`` (the reference of ``config``), or why it has none; CompatError when
        the first reference of the session does not finish."""
        self.say(f"compat tune: the single-process {dtype} reference")
        reference, _, problem, seconds = self.runner.run(_reference_of(config, self.machine), 1.0, _left(self.started, self.budget, self.clock()))
        if reference is not None:
            self.reference_seconds[dtype] = seconds
        if reference is not None and not reference.losses:
            reference, problem = None, "its losses could not be read from its output (see docs/commands/tune.md, 'Your training command')"
        if reference is None and not self.measured:
            raise CompatError(f"The single-process {dtype} reference run of {self.runner.what} did not finish: {problem}",
                              "Pass a larger --budget, or run compat doctor --python PATH --live to see what fails in this environment.")
        self.references[dtype] = reference if reference is not None else f"its single-process {dtype} reference did not finish: {problem}"

    def run_once(self, config: Configuration) -> None:
        """The first run of ``config`` (after its dtype's reference), unless it no longer fits the budget."""
        if not self.fits(config):
            return
        if config.dtype not in self.references:
            self.run_reference(config.dtype, config)
        if isinstance(self.references[config.dtype], str):  # what was measured before stays; this dtype cannot be judged
            self.measured.append(Measured(config, None, None, None, "", str(self.references[config.dtype]), 0.0))
            return
        if not self.fits(config):  # its own reference has just been timed
            return
        self.say(f"compat tune: {config.name} ({config.describe()})")
        run, times, problem, seconds, verdict, tol_text = self.judge(config)
        if run is None:
            self.measured.append(Measured(config, None, None, None, tol_text, problem, seconds))
            return
        samples = _samples(times, self.command)
        rate, spread = pooled_speed(samples, self.command)
        self.measured.append(Measured(config, rate, spread, verdict, tol_text, "", seconds, 1, samples, pooled_interval(samples, self.command)))

    def repeat_close_ones(self) -> None:
        """Repeat what next_to_repeat names while the budget lasts, pooling each repeat's samples with the earlier runs'."""
        stopped: set[int] = set()  # configurations not to repeat: a repeat failed to run, or one run no longer fits the budget
        while self.clock() - self.started < self.budget:
            index = next_to_repeat(self.measured, MAX_RUNS, stopped)
            if index is None:
                return
            earlier = self.measured[index]
            if self.left() < earlier.seconds / earlier.runs:  # it would run past the budget: a shorter one may fit
                stopped.add(index)
                continue
            if not self.repeat(index, earlier):
                stopped.add(index)

    def repeat(self, index: int, earlier: Measured) -> bool:
        """One more run of the configuration at ``index``; False (and a note) when it did not finish: the runs before it stand."""
        config, number = earlier.config, earlier.runs + 1
        self.say(f"compat tune: {config.name} again (run {number}): {config.describe()}")
        run, times, problem, seconds, verdict, _ = self.judge(config)
        if run is None or verdict is None or (not times and verdict.accepted):  # the runs before it stand; no more repeats of it
            why = problem or "it reported no step times"
            self.notes.append(f"{config.name}: its run {number} did not finish ({why}); its numbers are those of its {earlier.runs} run(s) before")
            return False
        samples = earlier.samples + _samples(times, self.command)
        rate, spread = pooled_speed(samples, self.command)
        self.measured[index] = Measured(config, rate, spread, _of_all_runs(earlier.verdict, verdict, number), earlier.tolerance, "",
                                        earlier.seconds + seconds, number, samples, pooled_interval(samples, self.command))
        return True


def next_to_repeat(measured, max_runs: int = MAX_RUNS, skip: Collection[int] = ()) -> Optional[int]:  # noqa: ANN001 - a sequence of Measured
    """Which configuration to run again (its index in ``measured``), or None. The contenders are the fastest accepted
    configuration and every accepted one whose rate interval (rate_interval) overlaps its (the default plan among them
    when it does: pick_winner compares with it); a speed from a single run without a spread (a command's) overlaps
    everything, since its noise is not known yet. Of the contenders with fewer than ``max_runs`` runs and not in ``skip``, the one with the
    fewest runs, the faster first on a tie. None when the fastest is separated from every other one, or no contender
    may run again. Rejected and unmeasured configurations are never repeated."""
    accepted = [(i, m) for i, m in enumerate(measured) if _accepted(m)]
    if len(accepted) < 2:
        return None
    best_index, best = max(accepted, key=lambda pair: pair[1].steps_per_second or 0.0)
    low, high = rate_interval(best)
    contenders = [(i, m) for i, m in accepted if i == best_index or (rate_interval(m)[0] <= high and low <= rate_interval(m)[1])]
    if len(contenders) < 2:
        return None
    open_ = [(i, m) for i, m in contenders if m.runs < max_runs and i not in skip]
    if not open_:
        return None
    return min(open_, key=lambda pair: (pair[1].runs, -(pair[1].steps_per_second or 0.0)))[0]


def _of_all_runs(earlier: Optional[Verdict], latest: Verdict, number: int) -> Verdict:
    """The verdict of a configuration's runs together: a rejected run rejects it (named by its number); otherwise the
    run farthest from the reference speaks for them all."""
    if not latest.accepted:
        return Verdict(False, False, f"in its run {number}: {latest.reason}", latest.worst_loss, latest.worst_param)
    if earlier is None or not earlier.accepted:
        return earlier or latest

    def distance(v: Verdict) -> tuple[bool, float, float]:
        return not v.exact, v.worst_loss or 0.0, v.worst_param or 0.0

    return latest if distance(latest) > distance(earlier) else earlier


def _samples(times: list[float], command: bool) -> tuple[float, ...]:
    """A run's samples: its timed steps' seconds; a command's one steps/s (its runner reports 1 / train_steps_per_second)."""
    return tuple(1.0 / t for t in times if t > 0) if command else tuple(times)


def pooled_speed(samples: tuple[float, ...], command: bool) -> tuple[Optional[float], Optional[float]]:
    """steps/s and spread from a configuration's samples: compat's workload, 1 / the median step and half the
    interquartile range relative to the median (_speed); a command, the median of its runs' steps/s and half their
    interquartile range relative to it (no spread from one run)."""
    if not command:
        return _speed(list(samples))
    if not samples:
        return None, None
    if len(samples) == 1:
        return samples[0], None
    median, spread = _median_spread(list(samples), method="inclusive")
    return (median, spread) if median > 0 else (None, None)


def pooled_interval(samples: tuple[float, ...], command: bool, level: float = LEVEL) -> Optional[tuple[float, float]]:
    """steps/s bounds (low, high) of the ``level`` confidence interval of the median (interval.median_interval) of a
    configuration's samples: compat's workload, its pooled step times' interval inverted (1 / the slow bound, 1 / the
    fast bound; assumes the step times exchangeable, see the module docstring); a command, its runs' steps/s. None
    with too few samples to reach the level (fewer than 6 at 95%)."""
    found = median_interval(samples, level)
    if found is None:
        return None
    low, high = found
    if command:
        return low, high
    if low <= 0:  # a step time of 0 s: no finite rate
        return None
    return 1.0 / high, 1.0 / low


def rate_interval(m: Measured) -> tuple[float, float]:
    """The steps/s interval repeats and the winner decide by: the LEVEL confidence interval of the median where the
    samples reach it (m.interval); otherwise the quartile spread's rate / (1 + spread), rate / (1 - spread) (a
    command's 2 or 3 runs: a spread, not a confidence statement); with neither (one run of a command) everything."""
    if m.interval is not None:
        return m.interval
    if m.spread is None:
        return 0.0, float("inf")
    rate, spread = m.steps_per_second or 0.0, m.spread
    return rate / (1.0 + spread), (rate / (1.0 - spread) if spread < 1.0 else float("inf"))


def pick_winner(measured) -> Optional[Measured]:  # noqa: ANN001 - a sequence of Measured
    """The fastest accepted configuration that is faster than the default plan beyond the measured noise (the slow
    end of its rate_interval above the default's fast end); the default itself when none is (and it was accepted); with no accepted
    default, the fastest accepted one."""
    accepted = sorted((m for m in measured if _accepted(m)), key=lambda m: -(m.steps_per_second or 0.0))
    default = next((m for m in accepted if m.config.default), None)
    if default is None:
        return accepted[0] if accepted else None
    ceiling = rate_interval(default)[1]
    return next((m for m in accepted if m is not default and rate_interval(m)[0] > ceiling), default)


def _left(started: float, budget: float, now: float) -> float:
    """Seconds of the budget left at ``now``, at least MIN_RUN_S: a run started is given a chance to finish."""
    return max(MIN_RUN_S, budget - (now - started))


def _reference_of(config: Configuration, machine) -> Configuration:  # noqa: ANN001 - a Machine
    """The single-process, eager run of ``config``'s dtype: the plan's one-rank threads."""
    from ..placement.plan import plan_ranks

    threads = plan_ranks(machine, 1, 0).omp_threads
    return Configuration(1, "one process", threads, 0, None, config.dtype, False, "the plan's share")


def _median_spread(values: list[float], method: str = "exclusive") -> tuple[float, float]:
    """The median and half the interquartile range relative to it (0 for one value; the median must be > 0). A command's
    few per-run rates take method="inclusive": the exclusive quartiles of 2 or 3 values reach past the values themselves."""
    median = statistics.median(values)
    quartiles = statistics.quantiles(values, n=4, method=method) if len(values) > 1 else [median, median, median]
    return median, (quartiles[2] - quartiles[0]) / 2 / median


def _speed(times: list[float]) -> tuple[Optional[float], Optional[float]]:
    if not times or statistics.median(times) <= 0:
        return None, None
    median, spread = _median_spread(times)
    return 1.0 / median, spread


class _Runner:
    """Runs one configuration of the workload under the launcher; reads rank 0's result."""

    def __init__(self, snapshot, machine, launcher: str, base: Mapping[str, str], folder: Path, command: tuple[str, ...] = (),  # noqa: ANN001
                 cwd: Optional[Path] = None, paths: Optional[PathArgs] = None, matrix: Optional["Matrix"] = None) -> None:
        from ..environment.libraries import preload_candidates, preload_entries
        from ..placement.environment import choose_preload
        from ..placement.service import oneccl_bindings_installed

        self.snapshot, self.machine, self.launcher, self.base, self.folder = snapshot, machine, launcher, base, folder
        self.matrix = matrix  # what the oneCCL environment of a ccl configuration is judged against (compat launch's and compat env's)
        self.python = snapshot.executable
        self.bindings = oneccl_bindings_installed(snapshot)
        self.preload = choose_preload(preload_candidates(snapshot.prefix), preload_entries(base.get("LD_PRELOAD", "")))
        self.tools = _tools(base)
        self.count = 0
        self.command = command
        self.paths = paths  # the command's path arguments: its outputs are pointed into each run's folder (tune/paths.py)
        self.cwd = cwd  # where a training command runs (its relative paths are the caller's); compat's workload runs in its run folder
        if command:
            from .trainer import ASSUMED_FAN_IN, global_batch

            self.global_batch, self.fan_in = global_batch(command), ASSUMED_FAN_IN
            self.steps, self.what = CMD_STEPS, "your training command"
        else:
            self.global_batch, self.fan_in = _workload_shape()
            self.steps, self.what = STEPS, "compat's workload"

    def rank_env(self, config: Configuration) -> dict[str, str]:
        from ..placement.environment import launch_environment
        from ..placement.plan import plan_ranks

        plan = plan_ranks(self.machine, config.ranks, config.ccl_workers)
        env = launch_environment(plan, self.preload, self.bindings and config.backend == "ccl")
        env["OMP_NUM_THREADS"] = str(config.omp_threads)
        if config.backend == "ccl":
            from ..placement.service import launch_oneccl

            exports, _, _ = launch_oneccl(self.snapshot, self.matrix, ADVISED, None)
            env = {**env, **{k: v for k, v in exports.items() if k not in env}}
        return env

    def run(self, config: Configuration, timeout_factor: float, left: float) -> tuple[Optional[Run], list[float], str, float]:
        """Run ``config`` within its deadline (COMPAT_TUNE_TIMEOUT x ``timeout_factor``) and ``left`` seconds of the budget."""
        from ..environment.child import env_timeout
        from ..live.supervise import supervise
        from ..placement.binding import bound_job
        from ..placement.plan import plan_ranks
        from ..processes import new_run_id

        self.count += 1
        out = self.folder / f"run-{self.count}"
        out.mkdir()
        plan = plan_ranks(self.machine, config.ranks, config.ccl_workers)
        rank_env = self.rank_env(config)
        if self.command:
            from .trainer import STEPS_VAR

            words = self.command_words(config, out)
            if words is None:
                return None, [], f"the global batch of {self.global_batch} does not divide over {config.ranks} ranks", 0.0
            rank_env = {**rank_env, STEPS_VAR: str(CMD_STEPS), **fixture_pythonpath(self.base)}
        else:
            words = [str(WORKLOAD), "--out", str(out), "--steps", str(STEPS), "--warmup", str(WARMUP), "--dtype", config.dtype,
                     "--backend", config.backend or "gloo"] + (["--compile"] if config.compile else [])
        # the launcher of the registry, handed the job as compat launch hands it (placement/binding.bound_job): its
        # processes() are what compat starts here (torchrun: compat launch's command line; spawn: each rank bound)
        launcher, job = bound_job(plan, rank_env, self.launcher, (self.python, *words), self.python, self.tools)
        launch = launcher.processes(job, self.base)
        commands, envs = list(launch.commands), list(launch.envs)
        own = env_timeout("COMPAT_TUNE_TIMEOUT", TIMEOUT_S) * timeout_factor
        timeout = min(own, left)
        reader = None
        if self.command:
            from .trainer import LogReader

            reader = LogReader()  # rank 0's output (torchrun's, or rank 0's own with spawn), parsed as it comes: nothing else of it is kept
        done = supervise(commands, envs, out, timeout, new_run_id(), cwd=self.cwd if self.command else None,
                         on_output=(lambda index, chunk: reader.feed(chunk) if index == 0 else None) if reader is not None else None)
        if done.timed_out:
            why = "COMPAT_TUNE_TIMEOUT" if own <= left else "the rest of the budget"
            return None, [], f"no result within {timeout:.0f} s ({why})", done.seconds
        if reader is not None:
            return _command_result(reader.result(), done)
        return _workload_result(out, done)

    def command_words(self, config: Configuration, out: Path) -> Optional[list[str]]:
        """Your training command for ``config`` (an HF Trainer script's flags set for it), its path arguments pointed
        into the run's folder ``out``; None when its global batch does not divide over the configuration's ranks."""
        from .trainer import is_trainer_command, trainer_argv

        if is_trainer_command(self.command):
            built = trainer_argv(self.command, CMD_STEPS, config.ranks, config.backend, config.dtype, config.compile)
            if built is None:
                return None
            words = built
        else:
            words = list(self.command)
        if self.paths is not None:
            from .paths import redirect

            words = redirect(words, self.paths, out / "paths")
        return words


def _workload_result(out: Path, done) -> tuple[Optional[Run], list[float], str, float]:  # noqa: ANN001 - live.supervise's Supervised
    """compat's workload's run from its folder ``out``: its result.json, or why there is none (a rank's error file,
    the exit codes and last words of a run that wrote no result, a result that cannot be read)."""
    errors = sorted(out.glob("error-*.txt"))
    if errors:
        return None, [], _last_line(errors[0].read_text(errors="replace")), done.seconds
    result = out / "result.json"
    if not result.is_file():
        codes = ", ".join(str(end.returncode) for end in done.ends)
        return None, [], f"the run ended (exit {codes}) without a result: {_last_line(' '.join(end.log for end in done.ends))}", done.seconds
    try:
        data = json.loads(result.read_text())
        run = Run(tuple(float(v) for v in data["losses"]), tuple(float(v) for v in data["params"]), str(data["digest"]))
        times = [float(v) for v in data["step_seconds"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return None, [], f"its result could not be read: {exc}", done.seconds
    return run, times, "", done.seconds


def fixture_pythonpath(base: Mapping[str, str]) -> dict[str, str]:
    """The FIXTURE perturbation for a training command's ranks: with COMPAT_TUNE_FIXTURE_PERTURB set (by the tests
    only), PYTHONPATH with fixture_site first (its sitecustomize perturbs rank 1's gradients); nothing otherwise."""
    if not base.get(FIXTURE_VAR):
        return {}
    from ..launchers.interface import PathEntries, joined

    return {"PYTHONPATH": joined(base.get("PYTHONPATH"), PathEntries(prepend=(str(FIXTURE_SITE),)))}


def _command_result(found, done) -> tuple[Optional[Run], list[float], str, float]:  # noqa: ANN001 - a TrainerLog, supervise's answer
    """A training command's run: what was parsed from rank 0's output (the first launcher's: torchrun's, or rank 0's
    with spawn) as it came, and how its processes ended (the tail of rank 0's output for the problem's text)."""
    from .trainer import MAX_LOSSES

    text = done.ends[0].log if done.ends else ""
    codes = [end.returncode for end in done.ends]
    if any(code != 0 for code in codes):
        return None, [], f"the command failed (exit {', '.join(str(c) for c in codes)}): {_last_line(text)}", done.seconds
    if found.more:
        return None, [], (f"it printed {MAX_LOSSES + found.more:,} loss lines in a run of {CMD_STEPS} steps; compat keeps the first "
                          f"{MAX_LOSSES:,} (see docs/commands/tune.md, 'Your training command')"), done.seconds
    if found.steps_per_second is None:
        return None, [], "its output has no train_steps_per_second (see docs/commands/tune.md, 'Your training command')", done.seconds
    return Run(found.losses, (), "", found.precision), [1.0 / found.steps_per_second], "", done.seconds


def _cwd() -> Optional[Path]:
    """The caller's working folder (a training command's relative paths are relative to it); None if it is gone."""
    try:
        return Path.cwd()
    except OSError:
        return None


def _workload_shape() -> tuple[int, int]:
    """The workload's global batch and widest fan-in: read from its source's constants, never by importing it."""
    import ast

    values: dict[str, int] = {}
    for node in ast.parse(WORKLOAD.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Constant):
            values[node.targets[0].id] = node.value.value
    return int(values["GLOBAL_BATCH"]), max(int(values["FEATURES"]), int(values["HIDDEN"]))


def _tools(base: Mapping[str, str]):  # noqa: ANN202
    from ..launchers.interface import Tools

    return Tools(shutil.which("numactl", path=base.get("PATH")), shutil.which("taskset", path=base.get("PATH")))


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return (lines[-1] if lines else "no output")[:400]


def launch_arguments(outcome: Outcome) -> list[str]:
    """The winner as ``compat launch`` arguments (torchrun: compat launch's launcher for one node)."""
    if outcome.winner is None:
        return []
    config = outcome.winner.config
    return ["--launcher", ADVISED, "--nproc-per-node", str(config.ranks), "--ccl-workers", str(config.ccl_workers)]


def export_arguments(outcome: Outcome, form: str) -> list[str]:
    """The winner as ``compat export FORMAT`` options (FORMAT: pytorchjob or sbatch), only options those commands take:
    the ranks per node (--nproc-per-node) and, for a pytorchjob, the pod's CPUs (--cpu: the cores the winner keeps
    busy, its OpenMP threads and oneCCL worker cores; times the machine's threads per core with --threads-per-core where the
    nodes' CPU units are hyperthreads, so that the export's thread plan counts the same physical cores). The export
    computes the threads from them; the environment lines say the measured ones."""
    if outcome.winner is None:
        return []
    config = outcome.winner.config
    words = ["--nproc-per-node", str(config.ranks)]
    if form == "pytorchjob":
        per_core = max(1, outcome.threads_per_core)
        busy = config.ranks * (config.omp_threads + config.ccl_workers)
        words += ["--cpu", str(busy if config.threads_note == "with the hyperthreads" else busy * per_core)]
        if per_core > 1 and config.threads_note != "with the hyperthreads":
            words += ["--threads-per-core", str(per_core)]
    elif form != "sbatch":
        raise ValueError(f"no export options for {form!r}")
    return words


def training_flags(config: Configuration) -> list[str]:
    """What the winner asks of an HF Trainer command line (the Trainer's own flags)."""
    flags = []
    if config.backend:
        flags += ["--ddp_backend", config.backend]
    if config.dtype == "bf16":
        flags.append("--bf16")
    if config.compile:
        flags.append("--torch_compile")
    return flags

