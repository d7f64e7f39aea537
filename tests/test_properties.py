"""Property tests: the resolver against an independent brute force over the raw matrix TOML.

The brute force below does not use the resolver, the rules module or the loader's model: it
re-reads data/matrix.toml with tomllib and implements every rule from the docs (docs/MATRIX.md)
again, then enumerates combinations exhaustively (backtracking, newest first).
"""

from __future__ import annotations

import sys
from typing import Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from compatmatrix.resolve import Resolution, resolve

from .conftest import ROOT, make_request

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

RAW = tomllib.loads((ROOT / "data" / "matrix.toml").read_text())
ORDER = ["torch", "intel-extension-for-pytorch", "oneccl-bind-pt", "torchvision", "torchaudio", "transformers", "accelerate"]
RAW_KEY = {
    "torch": "torch", "intel-extension-for-pytorch": "ipex", "oneccl-bind-pt": "oneccl_bind_pt", "torchvision": "torchvision",
    "torchaudio": "torchaudio", "transformers": "transformers", "accelerate": "accelerate",
}
LIBRARIES = ("transformers", "accelerate")
FEATURES = {(f["package"], f["name"]): SpecifierSet(f["versions"]) for f in RAW["feature"]}


def pinned(spec: Optional[SpecifierSet]) -> bool:
    if spec is None or len(spec) != 1:
        return False
    only = next(iter(spec))
    return only.operator in ("==", "===") and "*" not in only.version


def allowed(spec, version) -> bool:
    return spec is None or spec.contains(version, prereleases=True)


def wheels(entry):
    """An entry's wheel sets; the short form `python = [...]` (torchvision, torchaudio) means PyPI wheels."""
    return entry["wheels"] if "wheels" in entry else [{"host": "pypi", "python": entry["python"]}]


def binary_candidates(name, python, spec):
    out = []
    for entry in RAW[RAW_KEY[name]]:
        version = Version(entry["version"])
        if not allowed(spec, version):
            continue
        yanked = any(w.get("yanked", False) for w in wheels(entry))  # yanked anywhere: the version is yanked
        if any(python in w["python"] for w in wheels(entry)) and (not yanked or pinned(spec)):
            out.append((version, entry))
    return sorted(out, key=lambda item: item[0], reverse=True)


def expected_host(name, entry, python):
    """The first host in the policy's order (then the others, as listed) with a wheel for this Python, and its label."""
    by_host = {w["host"]: w for w in wheels(entry)}
    preferred = RAW["policy"]["host_preference"][name]
    for host in [h for h in preferred if h in by_host] + [h for h in by_host if h not in preferred]:
        if python in by_host[host]["python"]:
            return host, by_host[host].get("local_label", "")
    raise AssertionError(f"{name} {entry['version']} has no wheel for {python}")


def library_candidates(name, python, spec, features):
    out = []
    for line in RAW[name]:
        requires = line.get("requires_python")
        if requires and not SpecifierSet(requires).contains(Version(f"{python}.0")):
            continue
        for text in line["versions"]:
            version = Version(text)
            if not allowed(spec, version):
                continue
            if text in line.get("yanked", []) and not pinned(spec):
                continue
            if any(pkg == name and not FEATURES[(pkg, feat)].contains(version, prereleases=True) for pkg, feat in features):
                continue
            out.append((version, line))
    return sorted(out, key=lambda item: item[0], reverse=True)


def fits(name, entry, version, chosen) -> bool:
    """Every rule between this release and the ones already chosen (torch is always chosen first)."""
    torch = chosen["torch"][0]
    if name == "intel-extension-for-pytorch":
        built = Version(entry["torch"])
        return torch.release[:2] == built.release[:2] and SpecifierSet(entry["torch_accepts"]).contains(torch, prereleases=True)
    if name == "oneccl-bind-pt":
        return torch in {Version(entry["torch"]), *(Version(v) for v in entry.get("torch_also", []))}
    if name in ("torchvision", "torchaudio"):  # each release pins exactly one torch
        return torch == Version(entry["torch"])
    if entry.get("torch_min") and torch < Version(entry["torch_min"]):
        return False
    if name == "accelerate" and "transformers" in chosen:
        minimum = chosen["transformers"][1].get("accelerate_min")
        if minimum and version < Version(minimum):
            return False
    return True


def brute_force(python, components, specs, features):
    """The best combination in the resolver's order of preference, by exhaustive backtracking."""
    names = [n for n in ORDER if n in components]
    pools = {}
    for name in names:
        if name in LIBRARIES:
            pools[name] = library_candidates(name, python, specs.get(name), features)
        else:
            pools[name] = binary_candidates(name, python, specs.get(name))

    def walk(i, chosen):
        if i == len(names):
            yield dict(chosen)
            return
        name = names[i]
        pool = pools[name]
        if name == "intel-extension-for-pytorch":  # the build for exactly this torch first, then the newest
            torch = chosen["torch"][0]
            pool = sorted(pool, key=lambda item: (Version(item[1]["torch"]) == torch, item[0]), reverse=True)
        for version, entry in pool:
            if name == "torch" or fits(name, entry, version, chosen):
                chosen[name] = (version, entry)
                yield from walk(i + 1, chosen)
                del chosen[name]

    best = next(walk(0, {}), None)
    return None if best is None else {n: v for n, (v, _) in best.items()}


COMPONENT_SETS = [
    ("torch",),
    ("torch", "intel-extension-for-pytorch"),
    ("torch", "oneccl-bind-pt"),
    ("torch", "intel-extension-for-pytorch", "oneccl-bind-pt"),
    ("torch", "transformers", "accelerate"),
    ("torch", "oneccl-bind-pt", "transformers", "accelerate"),
    ("torch", "intel-extension-for-pytorch", "oneccl-bind-pt", "transformers", "accelerate"),
    ("torch", "torchvision"),
    ("torch", "torchaudio"),
    ("torch", "torchvision", "torchaudio"),
    ("torch", "intel-extension-for-pytorch", "oneccl-bind-pt", "torchvision", "torchaudio", "transformers", "accelerate"),
]
COMPANION_SETS = [(), (), ("torchvision",), ("torchaudio",), ("torchvision", "torchaudio")]  # added to a profile


def _versions(name):
    if name in LIBRARIES:
        return sorted({v for line in RAW[name] for v in line["versions"]}, key=Version)
    return sorted({e["version"] for e in RAW[RAW_KEY[name]]}, key=Version)


PROFILES = [None, "ddp-ccl", "ddp-ccl-legacy", "ipex", "ccl", "stock"]


@st.composite
def requests(draw):
    python = draw(st.sampled_from([f"3.{m}" for m in range(6, 15)]))
    profile = draw(st.sampled_from(PROFILES))
    if profile is None:
        components = draw(st.sampled_from(COMPONENT_SETS))
    else:
        components = tuple(sorted(RAW["profiles"][profile]["components"])) + draw(st.sampled_from(COMPANION_SETS))
    requirements = []
    for name in components:
        if draw(st.integers(0, 2)) == 0:  # a third of the time, constrain this package
            op = draw(st.sampled_from(["==", ">=", "<=", "<", ">", "!=", "~="]))
            version = draw(st.sampled_from(_versions(name)))
            if op == "~=" and len(Version(version).release) < 2:
                op = ">="
            requirements.append(f"{name}{op}{version}")
        else:
            requirements.append(name)
    return python, requirements, profile


def _check(matrix, python, requirements, profile=None):
    request = make_request(matrix, python, *requirements, profile=profile)
    if profile is not None:  # the profile's features, read from the raw TOML
        expected_features = {tuple(f.split(":")) for f in RAW["profiles"][profile].get("features", [])}
        assert set(request.features) == expected_features
    outcome = resolve(matrix, request, explain=False)
    specs = {c.distribution: s for c, s in request.specifiers.items()}
    expected = brute_force(python, {c.distribution for c in request.components}, specs, request.features)
    if expected is None:
        assert not outcome.ok, f"resolver found {outcome} where brute force found nothing"
        return
    assert isinstance(outcome, Resolution), f"brute force found {expected}; resolver said no"
    got = {c.distribution: p.version for c, p in outcome.picks.items()}
    assert got == expected
    # and the set obeys every rule, checked the independent way
    chosen = {}
    for name in ORDER:
        if name not in got:
            continue
        pool = (
            library_candidates(name, python, specs.get(name), request.features)
            if name in LIBRARIES
            else binary_candidates(name, python, specs.get(name))
        )
        entry = next(e for v, e in pool if v == got[name])
        assert name == "torch" or fits(name, entry, got[name], chosen)
        chosen[name] = (got[name], entry)
        # and each binary comes from the first host in the policy's order with a wheel for this Python (torchvision and
        # torchaudio from where torch comes from, +cpu builds included)
        pick = outcome.picks[next(c for c in outcome.picks if c.distribution == name)]
        if name not in LIBRARIES:
            assert (pick.host.id, pick.local_label) == expected_host(name, entry, python)
        else:
            assert pick.host.id == RAW["policy"]["host_preference"][name][0] and pick.local_label == ""


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(args=requests())
def test_resolver_agrees_with_brute_force(matrix, args):
    _check(matrix, *args)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(args=requests())
def test_conflicts_are_explained_and_alternatives_really_resolve(matrix, args):
    python, requirements, profile = args
    outcome = resolve(matrix, make_request(matrix, python, *requirements, profile=profile))
    if outcome.ok:
        assert len(outcome.reasons) == len(outcome.picks)
        return
    assert outcome.reasons and all(isinstance(r, str) and r.strip() for r in outcome.reasons)
    for alternative in outcome.alternatives:
        again = resolve(matrix, alternative.resolution.request, explain=False)
        assert again.ok and again.picks == alternative.resolution.picks


@pytest.mark.parametrize(
    "python, requirements",
    [
        ("3.10", ["torch==1.12.1", "oneccl-bind-pt"]),
        ("3.11", ["torch", "intel-extension-for-pytorch", "oneccl-bind-pt", "transformers", "accelerate"]),
        ("3.7", ["torch", "intel-extension-for-pytorch", "oneccl-bind-pt", "transformers", "accelerate"]),
        ("3.6", ["torch", "intel-extension-for-pytorch"]),
        ("3.13", ["torch", "transformers", "accelerate"]),
        ("3.14", ["torch", "intel-extension-for-pytorch"]),
        ("3.11", ["torch==2.7.0", "torchvision", "torchaudio"]),
        ("3.11", ["torch", "torchaudio"]),  # torchaudio stops at 2.10.0: torch 2.11 and later have no partner
        ("3.9", ["torch==1.9.0", "torchvision", "torchaudio"]),  # torchaudio 0.9.0: PyPI only
        ("3.15", ["torch", "torchvision"]),  # no torchvision for torch 2.15 / Python 3.15
        ("3.13", ["torch", "intel-extension-for-pytorch", "oneccl-bind-pt", "torchvision", "torchaudio", "transformers", "accelerate"]),
    ],
)
def test_brute_force_examples(matrix, python, requirements):
    _check(matrix, python, requirements)
