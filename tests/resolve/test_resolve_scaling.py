"""The resolver's work grows with the matrix at most linearly, and what it remembers changes no answer.

Counted, not timed (bench/run.py times): candidates() is computed once per distinct question (alternatives()
asks ~380 of them for a five-pin conflict, ~120 of them distinct), and for a matrix K times the size
(bench/scale_matrix.py) the unary and pairwise rule evaluations of a resolve grow about K times.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from compatmatrix import explain, rules
from compatmatrix import search as search_module
from compatmatrix.matrix import load_matrix
from compatmatrix.matrix.model import Component
from compatmatrix.resolve import resolve
from compatmatrix.target import Platform, PythonTarget

from ..conftest import LINUX, make_request

ROOT = Path(__file__).resolve().parents[2]
FIVE_PINS = ("torch==2.1.0", "intel-extension-for-pytorch==2.3.0", "oneccl-bind-pt==2.0.0", "transformers==4.30.0", "accelerate==0.20.0")


def _outcome_view(outcome):
    """Everything an outcome says, as plain values (sentences included)."""
    view = {"ok": outcome.ok, "reasons": outcome.reasons}
    if outcome.ok:
        view["picks"] = {c: (str(p.version), p.host.id) for c, p in outcome.picks.items()}
        view["notes"] = outcome.notes
    else:
        view["alternatives"] = [(a.change, {c: str(p.version) for c, p in a.resolution.picks.items()}) for a in outcome.alternatives]
    return view


@pytest.mark.parametrize("python, pins", [
    ("3.10", FIVE_PINS),
    ("3.10", ("torch==1.12.1", "ccl==1.12.0")),
    ("3.9", ("torch==1.13.0", "ipex==1.12.0", "ccl==1.13.0", "transformers==4.20.0", "accelerate==0.10.0")),
    ("3.11", ()),
    ("3.12", ("transformers<4.40",)),
])
def test_remembered_answers_change_nothing(matrix, monkeypatch, python, pins):
    request = make_request(matrix, python, *pins)
    rules.forget_answers()
    remembered = _outcome_view(resolve(matrix, request))
    real = rules._candidates

    def never_remembered(matrix, component, python, spec, features=(), platform=None):
        return real(matrix, component, python, spec, tuple(features), platform, True)

    monkeypatch.setattr(rules, "candidates", never_remembered)
    monkeypatch.setattr(search_module, "candidates", never_remembered)
    monkeypatch.setattr(explain, "candidates", never_remembered)
    monkeypatch.setattr(search_module, "usable", lambda *a, **k: never_remembered(*a, **k)[0])
    assert _outcome_view(resolve(matrix, request)) == remembered


def test_candidates_match_a_fresh_computation(matrix):
    rng = random.Random(15)
    versions = {c: [str(v) for v in matrix.versions(c)] for c in Component}
    for _ in range(300):
        component = rng.choice(list(Component))
        spec = rng.choice([None, f"=={rng.choice(versions[component])}", f">={rng.choice(versions[component])}",
                           f"=={rng.choice(versions[component]).rsplit('.', 1)[0]}.*", f"!={rng.choice(versions[component])}", "==1.2.3+cpu"])
        python = PythonTarget.parse(rng.choice(["3.8", "3.10", "3.11", "3.13"]))
        features = rng.choice([(), (("transformers", "ddp_backend_ccl"), ("accelerate", "ddp_backend_ccl_works"))])
        specifier = SpecifierSet(spec) if spec else None
        fresh = rules._candidates(matrix, component, python, specifier, features, LINUX, True)
        assert rules.candidates(matrix, component, python, specifier, features, LINUX) == (list(fresh[0]), list(fresh[1]))
        assert rules.usable(matrix, component, python, specifier, features, LINUX) == list(fresh[0])


def test_each_distinct_question_is_computed_once(matrix, monkeypatch):
    computed, asked = [], []
    real, public = rules._candidates, rules._answer

    def counting(*args):
        component, python, spec, features, platform, rejections = args[1:]
        computed.append((component, python, str(spec), tuple(features), platform, rejections))
        return real(*args)

    def asking(*args):
        asked.append(args)
        return public(*args)

    monkeypatch.setattr(rules, "_candidates", counting)
    monkeypatch.setattr(rules, "_answer", asking)
    rules.forget_answers()
    outcome = resolve(matrix, make_request(matrix, "3.10", *FIVE_PINS))
    assert not outcome.ok
    assert len(computed) == len(set(computed))  # no question computed twice
    assert len(asked) > 2 * len(computed)


def _scaled(tmp_path, factor):
    sys.path.insert(0, str(ROOT))
    try:
        from bench.scale_matrix import write_scaled
    finally:
        sys.path.remove(str(ROOT))
    return load_matrix(write_scaled(factor, tmp_path / f"matrix-x{factor}.toml"))


def _work(monkeypatch, matrix, python, pins):
    counts = {"pair": 0, "unary": 0}
    pair, unary = rules.pair_problem, rules._python_problem

    def pair_counting(a, b):
        counts["pair"] += 1
        return pair(a, b)

    def unary_counting(*args):
        counts["unary"] += 1
        return unary(*args)

    for module in (rules, search_module, explain):
        if hasattr(module, "pair_problem"):
            monkeypatch.setattr(module, "pair_problem", pair_counting)
    monkeypatch.setattr(rules, "_python_problem", unary_counting)
    rules.forget_answers()
    request = make_request(matrix, python, *pins)
    resolve(matrix, request)
    monkeypatch.undo()
    return counts


@pytest.mark.parametrize("python, pins", [("3.11", ()), ("3.10", FIVE_PINS), ("3.10", ("torch==1.12.1", "ccl==1.12.0"))])
def test_work_grows_linearly_with_the_matrix(tmp_path, monkeypatch, python, pins):
    """Doubling a scaled matrix (x2 -> x4) about doubles the rule evaluations; quadratic work would quadruple them."""
    small, large = _scaled(tmp_path, 2), _scaled(tmp_path, 4)
    assert sum(len(r) for r in large.releases.values()) == 2 * sum(len(r) for r in small.releases.values())
    before, after = _work(monkeypatch, small, python, pins), _work(monkeypatch, large, python, pins)
    for kind in before:
        assert after[kind] <= 2.25 * max(before[kind], 1), (kind, before, after)


def test_the_scaled_matrix_is_the_matrix_at_one(tmp_path, matrix):
    one = _scaled(tmp_path, 1)
    assert one == matrix
    request = make_request(matrix, "3.10", *FIVE_PINS)
    assert _outcome_view(resolve(one, request)) == _outcome_view(resolve(matrix, request))
    assert Platform.from_tag("manylinux_2_28_x86_64") == LINUX
