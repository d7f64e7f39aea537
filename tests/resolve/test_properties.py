"""Property tests: the resolver against an independent brute force over the raw matrix TOML.

The brute force below does not use the resolver, the rules module or the loader's model: it
re-reads data/matrix.toml with tomllib and implements every rule from the docs (docs/MATRIX.md)
again: wheels for the Python whose glibc floor the platform meets (yanked only where every such host yanked
it, or any host yanked it for security), the pair rules (oneccl_bind_pt:
its torch's major.minor, no documented break), the evidence order (torch series newest first; within a
series no known-bad set before a known-bad one, then built-for > reported-working > unverified, then
the newer torch; each component next to a torch ordered the same way), and never a device build.  For
each torch it enumerates combinations exhaustively (backtracking over every component, in order).
"""

from __future__ import annotations

import sys
from typing import Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from compatmatrix.resolve import resolve
from compatmatrix.search import Resolution
from compatmatrix.target import Platform

from ..conftest import ROOT, make_request

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
RANK = {"built-for": 0, "reported-working": 1, "unverified": 2}  # docs/MATRIX.md, "Evidence"
PLATFORMS = {"manylinux_2_28_x86_64": Version("2.28"), "manylinux2014_x86_64": Version("2.17"), "linux_x86_64": None}


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


def usable(wheel, python, glibc) -> bool:
    """A wheel set for this Python whose glibc floor (if recorded) the platform meets (an unknown glibc: any floor)."""
    return python in wheel["python"] and (glibc is None or "glibc_min" not in wheel or Version(wheel["glibc_min"]) <= glibc)


def binary_candidates(name, python, spec, glibc=None):
    out = []
    for entry in RAW[RAW_KEY[name]]:
        version = Version(entry["version"])
        if not allowed(spec, version):
            continue
        found = [w for w in wheels(entry) if usable(w, python, glibc)]
        # yanked only where every host with a usable wheel yanked it, or any host yanked it for security (the same
        # build everywhere); a pin takes a yanked one anyway
        security = any(w.get("yanked", False) and "security" in w.get("yanked_reason", "").lower() for w in wheels(entry))
        # a torchvision/torchaudio release that declares no torch (torchaudio 2.11.0) is taken only when pinned
        undeclared = name in ("torchvision", "torchaudio") and "torch" not in entry and "torch_requires" not in entry
        # a binary's own Requires-Python (torchvision 0.29.2: >=3.10,!=3.14.1): for X.Y alone it rules the release out only
        # when it admits no X.Y.z at all (an exclusion inside the line leaves it undecided, and in)
        requires = entry.get("requires_python")
        if requires and not any(SpecifierSet(requires).contains(Version(f"{python}.{z}")) for z in range(0, 40)):
            continue
        if found and (pinned(spec) or not (security or undeclared or all(w.get("yanked", False) for w in found))):
            out.append((version, entry))
    return sorted(out, key=lambda item: item[0], reverse=True)


def expected_host(name, entry, python, glibc=None):
    """The first host in the policy's order (then the others, as listed) with a usable wheel for this Python (one that
    does not mark it yanked before one that does), and its label."""
    by_host = {w["host"]: w for w in wheels(entry)}
    preferred = RAW["policy"]["host_preference"][name]
    hosts = [h for h in [h for h in preferred if h in by_host] + [h for h in by_host if h not in preferred] if usable(by_host[h], python, glibc)]
    for host in sorted(hosts, key=lambda h: bool(by_host[h].get("yanked", False))):  # stable: the policy's order within each
        return host, by_host[host].get("local_label", "")
    raise AssertionError(f"{name} {entry['version']} has no wheel for {python}")


def device_build(name, version, label) -> bool:
    """Does the raw [[device_build]] table call this build an XPU/GPU one (its local label, or a device-only number)?"""
    for entry in RAW.get("device_build", []):
        if entry["package"] == name and (label in entry.get("labels", []) or version in {Version(v) for v in entry.get("versions", [])}):
            return True
    return False


def evidence_rank(name, entry, torch) -> int:
    """oneccl_bind_pt: 0 built for this torch, 1 a [[pairing]] reported working, 2 unverified (same series). Others: 0."""
    if name in ("torchvision", "torchaudio") and "torch" not in entry and "torch_requires" not in entry:
        return RANK["unverified"]  # declares no torch: unverified with any
    # a pin, or a floor / range the torch is inside: what the release declares, ranked as pip takes it (never holding
    # torch back below what pip would install)
    if name != "oneccl-bind-pt":
        return 0
    if torch == Version(entry["torch"]):
        return 0
    stated = {Version(p["torch"]): p["evidence"] for p in entry.get("pairing", [])}
    return RANK["reported-working"] if stated.get(torch) == "reported-working" else RANK["unverified"]


def is_known_bad(name, version, torch, torch_label) -> bool:
    for bad in RAW.get("known_bad", []):
        if (bad["package"], Version(bad["version"]), Version(bad["torch"])) == (name, version, torch):
            if "torch_label" not in bad or bad["torch_label"] == torch_label:
                return True
    return False


def library_candidates(name, python, spec, features):
    out = []
    for line in RAW[name]:
        requires = line.get("requires_python")  # out only when it admits no X.Y.z (>=3.6.2 leaves 3.6 undecided, and in)
        if requires and not any(SpecifierSet(requires).contains(Version(f"{python}.{z}")) for z in range(0, 40)):
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
    if name == "oneccl-bind-pt":  # the major.minor it is built for (C++ ABI), minus documented breaks
        breaks = {Version(p["torch"]) for p in entry.get("pairing", []) if p["evidence"] == "documented-break"}
        return torch.release[:2] == Version(entry["torch"]).release[:2] and torch not in breaks
    if name in ("torchvision", "torchaudio"):  # an exact pin, a floor or range (torch_requires), or none (any, unverified)
        if "torch" in entry:
            return torch == Version(entry["torch"])
        return "torch_requires" not in entry or SpecifierSet(entry["torch_requires"]).contains(torch, prereleases=True)
    if entry.get("torch_min") and torch < Version(entry["torch_min"]):
        return False
    if name == "accelerate" and "transformers" in chosen:
        minimum = chosen["transformers"][1].get("accelerate_min")
        if minimum and version < Version(minimum):
            return False
    return True


def brute_force(python, components, specs, features, glibc=None):
    """The best combination in the documented order, by exhaustive backtracking for each torch."""
    names = [n for n in ORDER if n in components]
    pools = {}
    for name in names:
        if name in LIBRARIES:
            pools[name] = library_candidates(name, python, specs.get(name), features)
        else:
            pools[name] = binary_candidates(name, python, specs.get(name), glibc)

    def grade(name, version, entry, torch, torch_label):
        """(known bad, evidence rank) of this release next to torch: lower is better."""
        return (int(is_known_bad(name, version, torch, torch_label)), evidence_rank(name, entry, torch))

    def best_for(torch_version, torch_entry):
        """The first set in the order of preference: each pool by (not known bad, evidence, exact build, newest)."""
        torch_label = expected_host("torch", torch_entry, python, glibc)[1]
        chosen = {"torch": (torch_version, torch_entry)}
        rest = names[1:]

        def key(name, item):
            version, entry = item
            bad, rank = grade(name, version, entry, torch_version, torch_label) if name not in LIBRARIES else (0, 0)
            return (-bad, -rank, "torch" in entry and Version(entry["torch"]) == torch_version, version)

        ordered = {name: sorted(pools[name], key=lambda item, name=name: key(name, item), reverse=True) for name in rest}

        def walk(i):
            if i == len(rest):
                return True
            name = rest[i]
            for version, entry in ordered[name]:
                if fits(name, entry, version, chosen):
                    chosen[name] = (version, entry)
                    if walk(i + 1):
                        return True
                    del chosen[name]
            return False

        if not walk(0):
            return None
        standing = max((grade(n, v, e, torch_version, torch_label) for n, (v, e) in chosen.items() if n not in ("torch", *LIBRARIES)), default=(0, 0))
        return standing, dict(chosen)

    series_seen = []
    for version, _ in pools["torch"]:
        if version.release[:2] not in series_seen:
            series_seen.append(version.release[:2])
    for series in series_seen:  # newest series first
        found = [best_for(v, e) for v, e in pools["torch"] if v.release[:2] == series]
        found = [(standing, chosen) for standing, chosen in (f for f in found if f is not None)]
        if found:
            # best standing, then the newest torch (pools are newest first and min() keeps the first of equals)
            _, best = min(found, key=lambda item: item[0])
            return {n: v for n, (v, _) in best.items()}
    return None


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
    platform = draw(st.sampled_from(sorted(PLATFORMS)))
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
    return python, requirements, profile, platform


def _check(matrix, python, requirements, profile=None, platform="manylinux_2_28_x86_64"):
    glibc = PLATFORMS[platform]
    request = make_request(matrix, python, *requirements, profile=profile, platform=Platform.from_tag(platform))
    assert request.platform.glibc == glibc
    if profile is not None:  # the profile's features, read from the raw TOML
        expected_features = {tuple(f.split(":")) for f in RAW["profiles"][profile].get("features", [])}
        assert set(request.features) == expected_features
    outcome = resolve(matrix, request, explain=False)
    specs = {c.distribution: s for c, s in request.specifiers.items()}
    expected = brute_force(python, {c.distribution for c in request.components}, specs, request.features, glibc)
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
            else binary_candidates(name, python, specs.get(name), glibc)
        )
        entry = next(e for v, e in pool if v == got[name])
        assert name == "torch" or fits(name, entry, got[name], chosen)
        chosen[name] = (got[name], entry)
        # and each binary comes from the first host in the policy's order with a wheel for this Python (torchvision and
        # torchaudio from where torch comes from, +cpu builds included)
        pick = outcome.picks[next(c for c in outcome.picks if c.distribution == name)]
        if name not in LIBRARIES:
            assert (pick.host.id, pick.local_label) == expected_host(name, entry, python, glibc)
            assert not device_build(name, got[name], pick.local_label)  # never an XPU/GPU build
            if glibc is not None and pick.wheels.glibc_min is not None:
                assert pick.wheels.glibc_min <= glibc
        else:
            assert pick.host.id == RAW["policy"]["host_preference"][name][0] and pick.local_label == ""


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(args=requests())
def test_resolver_agrees_with_brute_force(matrix, args):
    _check(matrix, *args)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(args=requests())
def test_conflicts_are_explained_and_alternatives_really_resolve(matrix, args):
    python, requirements, profile, platform = args
    outcome = resolve(matrix, make_request(matrix, python, *requirements, profile=profile, platform=Platform.from_tag(platform)))
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
        ("3.11", ["torch", "torchaudio"]),  # torchaudio 2.11.1 declares torch>=2.11: the newest torch
        ("3.14", ["torch", "torchvision"]),  # Requires-Python !=3.14.1: undecided for 3.14, kept
        ("3.9", ["torch==1.9.0", "torchvision", "torchaudio"]),  # torchaudio 0.9.0: PyPI only
        ("3.15", ["torch", "torchvision"]),  # torchvision 0.29.2 (py3-none, torch>=2.14.0) with torch 2.15.0
        ("3.13", ["torch", "intel-extension-for-pytorch", "oneccl-bind-pt", "torchvision", "torchaudio", "transformers", "accelerate"]),
        ("3.10", ["torch==2.5.1", "oneccl-bind-pt"]),  # reported working
        ("3.9", ["torch==1.13.1", "oneccl-bind-pt"]),  # unverified, allowed
        ("3.9", ["torch<1.14", "oneccl-bind-pt"]),  # built-for 1.13.0 beats the newer 1.13.1
        ("3.10", ["torch>=2.1,<2.2", "oneccl-bind-pt"]),  # known-bad 2.1.0 set: 2.1.1 (reported) instead
        ("3.10", ["torch==1.12.0", "oneccl-bind-pt"]),  # exact build 1.12.0 beats the newer, unverified 1.12.100
        ("3.10", ["torch==1.12.1", "oneccl-bind-pt==1.12.0"]),  # documented break
    ],
)
def test_brute_force_examples(matrix, python, requirements):
    _check(matrix, python, requirements)


@pytest.mark.parametrize("platform", sorted(PLATFORMS))
@pytest.mark.parametrize("python", ["3.9", "3.11", "3.13"])
def test_brute_force_glibc_floors(matrix, python, platform):
    _check(matrix, python, ["torch", "intel-extension-for-pytorch"], platform=platform)
    _check(matrix, python, [], profile="ddp-ccl", platform=platform)
