"""The typed core: components as data, release entries behind one protocol, pair rules as objects,
typed rejections, and sentences written once from them (compatmatrix/rules.py, explain.py, sentences.py)."""

from __future__ import annotations

import dataclasses
import inspect
import json

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from compatmatrix import reasons, sentences
from compatmatrix.matrix.model import COMPONENT_ORDER, COMPONENTS, EVIDENCE, Component, LibraryLine, Provenance, Yank
from compatmatrix.record import Record
from compatmatrix.resolve import resolve
from compatmatrix.rules import (
    PAIR_RULES,
    MissingFeature,
    NoWheel,
    RequiresPython,
    UserConstraint,
    Yanked,
    candidates,
    pair_problem,
    problem_with,
    rules_between,
)
from compatmatrix.search import Conflict, Resolution, candidate_table, groups
from compatmatrix.target import PythonTarget

from ..conftest import ROOT, make_request

T, IPEX, CCL, TV, TA, TF, ACC = (
    Component.TORCH, Component.IPEX, Component.CCL, Component.TORCHVISION, Component.TORCHAUDIO, Component.TRANSFORMERS, Component.ACCELERATE,
)


def test_every_component_is_described_once(matrix):
    assert list(COMPONENTS) == list(Component) == list(COMPONENT_ORDER)
    assert set(matrix.releases) == set(Component)
    assert set(matrix.policy.host_preference) == set(Component)
    for component in Component:
        assert Component.from_name(component.distribution) is component
        assert Component.from_name(component.table) is component
        releases = matrix.releases[component]
        assert releases and list(releases) == sorted(releases, key=lambda r: r.version, reverse=True)
    schema = json.loads((ROOT / "compatmatrix" / "schemas" / "resolve-v1.json").read_text())
    assert schema["$defs"]["name"]["enum"] == [c.distribution for c in COMPONENT_ORDER]


def test_every_release_entry_offers_the_release_protocol(matrix):
    for component in Component:
        for release in matrix.releases[component]:
            assert release.version == release.versions[0] and all(isinstance(v, Version) for v in release.versions)
            assert release.distribution
            assert release.provenance.sources
            assert isinstance(release.wheels, tuple) and (release.wheels or isinstance(release, LibraryLine))
            assert release.requires_python is None or isinstance(release.requires_python, SpecifierSet)
            assert release.yank(Version("0.0.0")) is None
            assert matrix.release(component, release.version) is release


@pytest.mark.parametrize("component", [TV, TA])
def test_companions_come_from_where_torch_comes_from(matrix, component):
    assert matrix.policy.host_preference[component] == matrix.policy.host_preference[T]
    release = matrix.release(component, Version("0.22.0") if component is TV else Version("2.7.0"))
    by_host = {w.host: w for w in release.wheels}
    assert by_host["pytorch-cpu"].local_label == "+cpu" and not by_host["pytorch-cpu"].provenance.verified
    assert by_host["pypi"].local_label == "" and by_host["pypi"].provenance.verified


def test_pair_rules_are_data_with_evidence_source_and_a_phrase():
    names = [rule.name for rule in PAIR_RULES]
    assert len(names) == len(set(names))
    for rule in PAIR_RULES:
        assert rule.subject is not rule.partner
        assert rule.evidence in EVIDENCE and rule.source
        assert rule.name in sentences.REQUIREMENT  # the sentence about it is written once, in sentences.py
    assert [r.name for r in rules_between(T, IPEX)] == ["ipex-import-check", "ipex-torch-series"]
    assert [r.name for r in rules_between(ACC, TF)] == ["transformers-accelerate"]
    assert rules_between(IPEX, CCL) == ()
    assert groups((T, IPEX, CCL, TV, TA, TF, ACC)) == ((IPEX,), (CCL,), (TV,), (TA,), (TF, ACC))


def _rejections(matrix, component, python, spec=None, features=()):
    _, rejected = candidates(matrix, component, PythonTarget.parse(python), SpecifierSet(spec) if spec else None, features)
    return {str(r.version): r for r in rejected}


def test_unary_rejections_are_typed(matrix):
    user = _rejections(matrix, T, "3.11", "==2.7.0")["2.8.0"]
    assert user.kind == "user" and user.cause == UserConstraint(SpecifierSet("==2.7.0"))
    python = _rejections(matrix, CCL, "3.11")["1.12.0"]
    assert isinstance(python.cause, NoWheel) and python.kind == "python"
    assert {w.host for w in python.cause.wheels} and python.cause.python.label == "3.11"
    yanked = _rejections(matrix, IPEX, "3.9")["1.11.100"]  # PyPI only (no document lists it on an Intel host)
    assert yanked.cause == Yanked(Yank("pypi", "functional issues"))
    # yanked on PyPI for security, unmarked on intel-cpu-us: a security yank holds on every host (the same build)
    assert _rejections(matrix, IPEX, "3.11")["2.5.0"].cause == Yanked(Yank("pypi", "for security."))
    requires = _rejections(matrix, TF, "3.6")["5.0.0"]
    assert isinstance(requires.cause, RequiresPython) and requires.cause.line == Version("5.0")
    feature = _rejections(matrix, TF, "3.11", features=(("transformers", "ddp_backend_ccl"),))["5.1.0"]
    assert isinstance(feature.cause, MissingFeature) and feature.cause.feature.name == "ddp_backend_ccl"


def test_pair_rejections_name_rule_evidence_and_source(matrix):
    table = candidate_table(matrix, make_request(matrix, "3.10", "torch==1.12.1", "ccl==1.12.0", "torchvision==0.13.0"))
    torch, ccl, vision = (table.kept[c][0] for c in (T, CCL, TV))
    rejected = pair_problem(ccl, torch)
    assert rejected is not None and pair_problem(torch, ccl) == rejected  # either order
    # 1.12.0 next to torch 1.12.1 is a documented break: the rejection cites the pairing's own source, not the release's
    assert (rejected.rule.name, rejected.component, rejected.partner, rejected.partner_version) == ("ccl-torch-break", CCL, T, Version("1.12.1"))
    assert (rejected.evidence, rejected.source) == ("documented-break", ("intel/torch-ccl@v1.12.0:README.md",))
    assert sentences.rejected_sentence(rejected) == (
        "oneccl_bind_pt 1.12.0 is documented not to work with torch 1.12.1 (intel/torch-ccl@v1.12.0:README.md; it is built for torch 1.12.0)"
    )
    series = problem_with(CCL, ccl.release, ccl.version, T, Version("1.13.0"))  # another major.minor: the ABI rule
    assert (series.rule.name, series.evidence, series.source) == ("ccl-torch-series", "built-for", ccl.release.provenance.sources)
    unchecked = dataclasses.replace(ccl.release, provenance=Provenance(("a README",), verified=False, note="not checked"))
    assert problem_with(CCL, unchecked, unchecked.version, T, Version("1.13.0")).evidence == "unverified"
    assert problem_with(CCL, ccl.release, ccl.version, T, Version("1.12.1")) == rejected
    vision_rejected = pair_problem(vision, torch)
    assert (vision_rejected.rule.name, vision_rejected.evidence) == ("torchvision-torch", "pinned")
    assert sentences.rejected_sentence(vision_rejected) == "torchvision 0.13.0 pins torch 1.12.0, not torch 1.12.1"
    ipex = matrix.ipex_release(Version("2.8.0"))
    guard = problem_with(IPEX, ipex, ipex.version, T, Version("2.9.0"))
    assert (guard.rule.name, guard.evidence) == ("ipex-import-check", "import-guard")


def test_explanations_are_records_and_every_record_has_one_writer(matrix):
    conflict = resolve(matrix, make_request(matrix, "3.10", "torch==1.12.1", "oneccl_bind_pt==1.12.0"))
    assert isinstance(conflict, Conflict)
    assert [type(item).__name__ for item in conflict.explanation] == ["FitsNoTorch", "TorchPairsWith"]
    assert conflict.reasons == sentences.sentences(conflict.explanation)
    assert all(not isinstance(a.edit, str) for a in conflict.alternatives)
    records = [cls for _, cls in inspect.getmembers(reasons, inspect.isclass) if cls.__module__ == reasons.__name__ and issubclass(cls, Record)]
    assert len(records) > 25
    assert all(cls in sentences._writers() for cls in records)


def test_nothing_parses_a_sentence_back():
    for module in ("explain.py", "reasons.py", "sentences.py", "rules.py", "resolve.py", "search.py", "render/text.py", "render/json.py"):
        source = (ROOT / "compatmatrix" / module).read_text()
        assert ".split(" not in source, module
        assert "startswith(\"  \")" not in source, module


def test_resolution_sentences_come_from_its_records(matrix):
    outcome = resolve(matrix, make_request(matrix, "3.11", "torch==2.7.0", "torchvision", "torchaudio"))
    assert isinstance(outcome, Resolution)
    assert [type(r).__name__ for r in outcome.explanation] == ["NewerRuledOut"] * 3
    why = outcome.explanation[1].why
    assert why.rule.name == "torchvision-torch" and why.partner_version == Version("2.7.0")
    assert outcome.reasons[1] == (
        "torchvision 0.22.0: 12 newer releases ruled out; the next, 0.22.1: torchvision 0.22.1 pins torch 2.7.1, not torch 2.7.0 "
        "(newest in the matrix: 0.29.2)."
    )


def test_records_are_frozen_values():
    a = Yanked(Yank("pypi", "for security."))
    assert a == Yanked(yank=Yank("pypi", "for security.")) and hash(a) == hash(Yanked(Yank("pypi", "for security.")))
    assert a != UserConstraint(SpecifierSet("==1")) and reasons.NotChosen() != reasons.NotInRequest()
    assert repr(a) == "Yanked(yank=Yank(host='pypi', reason='for security.'))" and a.kind == "yanked"
    with pytest.raises(AttributeError):
        a.yank = None
    with pytest.raises(TypeError):
        Yanked()
    with pytest.raises(TypeError):
        Yanked(1, 2)


def test_check_does_not_import_the_explanations():
    import subprocess
    import sys

    code = "import sys, compatmatrix.checks.packages, compatmatrix.render; print('compatmatrix.explain' in sys.modules or 'compatmatrix.reasons' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"
