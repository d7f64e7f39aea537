"""The distribution-free confidence interval of a median from order statistics (the sign-test interval).

For n independent samples of a continuous distribution, sorted x(1) <= ... <= x(n), the number B of samples below the
true median is binomial(n, 1/2), so for ranks j < k:

    P(x(j) <= median <= x(k)) = P(j <= B <= k - 1) = 1 - P(B <= j - 1) - P(B >= k)

With k = n - j + 1 (symmetric) the two tails are equal, and the coverage is 1 - 2 P(B <= j - 1), where
P(B <= j - 1) = sum_{i=0}^{j-1} C(n, i) / 2^n. For a level 1 - alpha the interval takes the LARGEST j with
P(B <= j - 1) <= alpha / 2 (the narrowest symmetric interval whose coverage is at least the level): e.g. n = 10 at 95%,
P(B <= 1) = 11/1024 = 1.07% <= 2.5% < P(B <= 2) = 56/1024 = 5.47%, so (j, k) = (2, 9). (Conover, Practical
Nonparametric Statistics, 3rd ed., section 3.2, "confidence interval for a quantile"; Hollander & Wolfe, section 3.6.)
It is exact for every n (integer binomial sums, math.comb); no normal approximation. There is none when even the
extremes do not reach the level: 2 / 2^n > alpha, i.e. n < 6 at 95%.

The assumption is the samples': independent draws of one distribution (exchangeable is enough for the rank
argument). Pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Optional

LEVEL = 0.95  # the level compat tune states


def median_ranks(n: int, level: float = LEVEL) -> Optional[tuple[int, int]]:
    """The 1-based ranks (j, k) of the order statistics bounding the median of ``n`` samples with coverage at least
    ``level`` (the largest j with P(B <= j - 1) <= (1 - level) / 2, B ~ binomial(n, 1/2); k = n - j + 1), or None
    when n is too small to reach it (n < 6 at 95%)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"a confidence level is between 0 and 1, not {level}")
    if n < 1:
        return None
    half_alpha = (1.0 - level) / 2.0
    total = 2**n
    below = 0  # sum of C(n, i) for i <= j - 1, as j grows
    j = 0
    while j < n // 2 + 1:
        below += math.comb(n, j)  # now P(B <= j) * 2^n: is j + 1 still within the tail?
        if below / total > half_alpha:  # int / int true division: correctly rounded
            break
        j += 1
    if j == 0:
        return None
    return j, n - j + 1


def median_interval(samples: Sequence[float], level: float = LEVEL) -> Optional[tuple[float, float]]:
    """The ``level`` confidence interval of the median of ``samples`` (x(j), x(k) by median_ranks), or None when
    there are too few of them to reach the level."""
    ranks = median_ranks(len(samples), level)
    if ranks is None:
        return None
    ordered = sorted(samples)
    return ordered[ranks[0] - 1], ordered[ranks[1] - 1]
