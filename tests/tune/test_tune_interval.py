"""The order-statistic confidence interval of the median (tune/interval.py): its ranks against a binomial computed
here independently (a product of fractions, not math.comb), a few table values, and its coverage by simulation."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compatmatrix.tune.interval import median_interval, median_ranks


def binomial_cdf(n, j):
    """P(B <= j) for B ~ binomial(n, 1/2), exactly: the pmf built term by term by C(n, i+1) = C(n, i) (n - i) / (i + 1)."""
    term, total = Fraction(1, 2**n), Fraction(0)
    for i in range(j + 1):
        total += term
        term = term * (n - i) / (i + 1)
    return total


def expected_ranks(n, level):
    """The classic sign-test interval by brute force: every symmetric (j, n - j + 1) whose coverage reaches the level,
    the narrowest one (largest j)."""
    alpha = 1 - Fraction(level).limit_denominator(10**6)
    fitting = [j for j in range(1, n // 2 + 1) if binomial_cdf(n, j - 1) <= alpha / 2]
    return (max(fitting), n - max(fitting) + 1) if fitting else None


@pytest.mark.parametrize("n, level", [(n, 0.95) for n in range(1, 41)] + [(120, 0.95), (10, 0.9), (10, 0.99), (30, 0.8), (5, 0.9)])
def test_the_ranks_are_the_binomial_ones(n, level):
    assert median_ranks(n, level) == expected_ranks(n, level)


@pytest.mark.parametrize("n, level, why", [
    (10, 0.95, "P(B <= 1) = 11/1024 <= 2.5% < P(B <= 2) = 56/1024"),
    (6, 0.95, "the extremes: 1 - 2/64 = 96.9% >= 95%"),
    (20, 0.95, "P(B <= 5) = 2.07% <= 2.5% < P(B <= 6) = 5.77%"),
])
def test_known_values(n, level, why):
    j, k = median_ranks(n, level)
    assert binomial_cdf(n, j - 1) <= Fraction(1, 40) < binomial_cdf(n, j), why
    assert k == n - j + 1
    assert 1 - 2 * binomial_cdf(n, j - 1) >= Fraction(95, 100)


def test_too_few_samples_have_no_interval_at_95_percent():
    """2 / 2^5 = 6.25% > 5%: five samples cannot reach 95% (their extremes cover 93.75%); six can."""
    assert [median_ranks(n) for n in range(0, 6)] == [None] * 6
    assert median_ranks(6) == (1, 6)
    assert median_interval([3.0, 1.0, 2.0]) is None


def test_the_interval_is_order_statistics_of_the_samples():
    samples = [0.9, 0.1, 0.5, 0.3, 0.7, 0.2, 0.8, 0.4, 0.6, 1.0]
    assert median_interval(samples) == (0.2, 0.9)  # ranks 2 and 9 of the sorted ten


def test_a_level_outside_0_1_is_refused():
    with pytest.raises(ValueError):
        median_ranks(10, 1.0)


@settings(max_examples=15, deadline=None)
@given(n=st.integers(6, 60), seed=st.integers(0, 2**32 - 1))
def test_the_interval_covers_the_true_median_at_least_at_its_level(n, seed):
    """Exponential(1) samples (skewed; median ln 2): over 400 draws the 95% interval holds ln 2 at least ~95% of the
    time. The interval's exact coverage is >= 95%; 400 draws at 95% have a standard error of 1.1%, so 91% is > 3.5 sigma."""
    rng = random.Random(seed)
    true_median = math.log(2)
    draws = 400
    covered = 0
    for _ in range(draws):
        low, high = median_interval([rng.expovariate(1.0) for _ in range(n)])
        covered += low <= true_median <= high
    assert covered / draws >= 0.91
