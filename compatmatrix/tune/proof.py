"""compat tune's correctness proof: a configuration counts only if it trains the same model as a single-process
reference run of the same global batch (same data, same initial parameters, same steps, same dtype).

What is compared: the loss of every step (the global batch's, averaged over the ranks) and the final parameters
(their digest: SHA-256 of the float32 values, little-endian, in the model's order; and the values themselves).

The bound, from the dtype's unit roundoff u (fp32: 2^-24; bf16: 2^-8) and the number n of reduction terms:
    gamma_n = n*u / (1 - n*u)
A sum of n terms computed in any order in precision u is within gamma_n * sum(|terms|) of the exact sum (Higham,
Accuracy and Stability of Numerical Algorithms, 2nd ed., section 4.2); the configuration and the reference each
are, so they are within 2*gamma_n of each other. n counts the terms of the longest sum whose order changes with the
layout: the samples of the global batch (a rank sums its share, then the allreduce sums the ranks), the model's
widest fan-in (OpenMP threads split the dot products) and the ranks. A step's difference carries into the next
step's parameters, so step k (from 1) may differ by k times one step's bound:
    |loss_k - ref_k|  <=  2 * k * gamma_n * max(|ref_1|, ..., |ref_k|)        (losses are sums of non-negative terms)
    |p_i - ref_p_i|   <=  2 * steps * gamma_n * max_j |ref_p_j|
Equal digests and equal losses are "exact" (expected only where the reduction order is the reference's: one
process with the reference's threads; ``exact_only`` then demands it). Where n*u >= 1, or the last step's bound
reaches 1 (a relative difference of 100%), the bound says nothing, and the configuration is rejected as unprovable
rather than accepted on a vacuous bound (bf16 with many reduction terms: compat's workload has n ~ 250, u = 2^-8). A non-finite loss, a different
number of steps or of parameters is a rejection too. Each rejection is one sentence naming the step or parameter,
both values, the difference and the bound.

Side effects: none.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Optional

from ..record import Record

UNIT_ROUNDOFF = {"fp32": 2.0 ** -24, "bf16": 2.0 ** -8}  # half the machine epsilon: 24 and 8 significand bits


class Run(Record):
    """What one run of the workload reports (rank 0's view; losses are the global batch's)."""

    losses: tuple[float, ...]
    params: tuple[float, ...]
    digest: str
    precision: float = 0.0  # half a unit in the last printed place of its losses (0: exact values, compat's workload)


class Tolerance(Record):
    dtype: str
    terms: int  # n: reduction terms
    steps: int
    unit_roundoff: float
    absolute: float = 0.0  # added to every loss bound: the precision the losses were printed with (a Trainer's log: 1e-4)

    @property
    def gamma(self) -> Optional[float]:
        """gamma_n, or None where n*u >= 1 (no bound)."""
        nu = self.terms * self.unit_roundoff
        return nu / (1.0 - nu) if nu < 1.0 else None

    def step_bound(self, step: int) -> Optional[float]:
        """The relative bound on step ``step``'s loss (1-based): 2 * step * gamma_n."""
        gamma = self.gamma
        return 2.0 * step * gamma if gamma is not None else None

    @property
    def param_bound(self) -> Optional[float]:
        return self.step_bound(self.steps)

    def text(self) -> str:
        """The formula with its numbers, for the output."""
        u = f"2^{round(math.log2(self.unit_roundoff))}"
        head = f"{self.dtype}: u = {u}, n = {self.terms} reduction terms, gamma_n = n*u/(1-n*u)"
        gamma = self.gamma
        if gamma is None:
            return f"{head}: n*u >= 1, no bound"
        if 2.0 * self.steps * gamma >= 1.0:
            return f"{head} = {gamma:.3g}: 2*{self.steps}*gamma_n = {2.0 * self.steps * gamma:.3g} >= 1, no useful bound"
        slack = f" plus {self.absolute:.2g} (the printed losses' rounding)" if self.absolute else ""
        return (f"{head} = {gamma:.3g}; step k's loss within 2*k*gamma_n of the reference (relative to its largest loss so far){slack}, "
                f"the final parameters within 2*{self.steps}*gamma_n = {self.param_bound:.3g} (relative to the largest reference parameter)")


class Verdict(Record):
    accepted: bool
    exact: bool
    reason: str  # why rejected, or how it matched
    worst_loss: Optional[float]  # the largest relative loss difference seen (None: not compared)
    worst_param: Optional[float]


def reduction_terms(global_batch: int, fan_in: int, ranks: int) -> int:
    """n: the samples of the global batch, the model's widest fan-in and the ranks (see the module's docstring)."""
    return max(1, global_batch) + max(1, fan_in) + max(1, ranks)


def tolerance(dtype: str, terms: int, steps: int, absolute: float = 0.0) -> Tolerance:
    if dtype not in UNIT_ROUNDOFF:
        raise ValueError(f"no unit roundoff known for {dtype!r}")
    return Tolerance(dtype, max(1, terms), max(1, steps), UNIT_ROUNDOFF[dtype], max(0.0, absolute))


def _rejected(reason: str, worst_loss: Optional[float] = None, worst_param: Optional[float] = None) -> Verdict:
    return Verdict(False, False, reason, worst_loss, worst_param)


def prove(run: Run, reference: Run, tol: Tolerance, exact_only: bool = False) -> Verdict:
    """Whether ``run`` trained the same model as ``reference`` within ``tol`` (see the module's docstring)."""
    unlike = _unlike(run, reference)
    if unlike is not None:
        return unlike
    if run.digest == reference.digest and tuple(run.losses) == tuple(reference.losses):
        return Verdict(True, True, "exact: the same losses and the same parameter digest as the reference", 0.0, 0.0)
    if exact_only:
        return _rejected("it runs in the reference's layout (one process, the same threads), so only an exact match counts, "
                         "and its losses or parameter digest differ")
    if tol.param_bound is None or tol.param_bound >= 1.0:
        return _rejected(f"the bound says nothing here ({tol.text()}), so a match cannot be proven")
    rejected, worst_loss = _compare_losses(run, reference, tol)
    if rejected is not None:
        return rejected
    rejected, worst_param = _compare_params(run, reference, tol, worst_loss)
    if rejected is not None:
        return rejected
    return Verdict(True, False, f"within the {tol.dtype} bound: losses {worst_loss:.3g} and parameters {worst_param:.3g} apart at most "
                                f"(relative), bound {tol.param_bound:.3g} at the last step", worst_loss, worst_param)


def _unlike(run: Run, reference: Run) -> Optional[Verdict]:
    """A rejection when the run cannot be compared: another number of steps or parameters, or a non-finite loss."""
    if len(run.losses) != len(reference.losses):
        return _rejected(f"it reported {len(run.losses)} steps' losses, the reference {len(reference.losses)}")
    if len(run.params) != len(reference.params):
        return _rejected(f"it reported {len(run.params)} parameters, the reference {len(reference.params)}")
    for k, value in enumerate(run.losses, start=1):
        if not math.isfinite(value):
            return _rejected(f"step {k}'s loss is {value}")
    return None


def _compare_losses(run: Run, reference: Run, tol: Tolerance) -> tuple[Optional[Verdict], float]:
    """(the rejection of the first step over its bound, or None; the largest relative difference seen)."""
    worst_loss = 0.0
    scale = 0.0
    for k, (value, ref) in enumerate(zip(run.losses, reference.losses), start=1):
        scale = max(scale, abs(ref))
        if scale == 0.0 and not tol.absolute:
            if value != 0.0:
                return _rejected(f"step {k}'s loss is {value:.9g}, the reference's 0", math.inf), worst_loss
            continue
        relative = abs(value - ref) / scale if scale else 0.0
        worst_loss = max(worst_loss, relative)
        bound = tol.step_bound(k)
        assert bound is not None
        if abs(value - ref) > bound * scale + tol.absolute:
            return _rejected(f"step {k}'s loss {value:.9g} differs from the reference's {ref:.9g} by {relative:.3g} (relative), "
                             f"over the {tol.dtype} bound 2*{k}*gamma_n = {bound:.3g}" + (f" (plus {tol.absolute:g} absolute)" if tol.absolute else ""),
                             worst_loss), worst_loss
    return None, worst_loss


def _compare_params(run: Run, reference: Run, tol: Tolerance, worst_loss: float) -> tuple[Optional[Verdict], float]:
    """(the rejection of the first final parameter over the bound or not finite, or None; the largest relative
    difference seen, relative to the largest reference parameter)."""
    largest = max((abs(p) for p in reference.params), default=0.0)
    worst_param = 0.0
    bound = tol.param_bound
    assert bound is not None
    for index, (value, ref) in enumerate(zip(run.params, reference.params)):
        if not math.isfinite(value):
            return _rejected(f"final parameter {index} is {value}", worst_loss), worst_param
        relative = abs(value - ref) / largest if largest else (math.inf if value != ref else 0.0)
        worst_param = max(worst_param, relative)
        if relative > bound:
            return _rejected(f"final parameter {index} is {value:.9g}, the reference's {ref:.9g}: {relative:.3g} apart (relative to the largest "
                             f"reference parameter), over the {tol.dtype} bound 2*{tol.steps}*gamma_n = {bound:.3g}", worst_loss, worst_param), worst_param
    return None, worst_param


def digest(params: Sequence[float]) -> str:
    """SHA-256 of the parameters as little-endian float32, the workload's own digest (for tests and fixtures)."""
    import hashlib
    import struct

    return hashlib.sha256(struct.pack(f"<{len(params)}f", *params)).hexdigest()
