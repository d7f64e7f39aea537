"""Read ``matrix.toml`` into :class:`~compatmatrix.matrix.model.Matrix`, validating as it goes.

Every problem is reported as a :class:`~compatmatrix.errors.MatrixError` that names the file,
the entry (``[[oneccl_bind_pt]] 1.12.100``) and the field, so a broken edit is found at once; no
other exception leaves the loader, whatever the file holds.

Side effects: reads the matrix file; reads and writes the cache folder ($XDG_CACHE_HOME/compatmatrix: the
validated matrix per file content, matrix/cache.py).
"""

from __future__ import annotations

import errno
import functools
import os
import re
import reprlib
import stat
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Optional, Union

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from .. import cachefiles
from ..errors import MatrixError, shown
from ..names import canonical_name
from ..record import replace
from . import cache
from .model import (
    COMPONENT_ORDER,
    COMPONENTS,
    ISA_FLAGS,
    PAIRING_LEVELS,
    RUNTIME_COMPONENTS,
    CclRelease,
    CompanionRelease,
    Component,
    DeviceBuildEntry,
    EndOfLife,
    Feature,
    Host,
    IpexRelease,
    IsaFloor,
    KnownBad,
    LibraryLine,
    Matrix,
    Pairing,
    Policy,
    Profile,
    Provenance,
    Release,
    RuntimeRelease,
    TorchRelease,
    Unavailable,
    WheelSet,
)

# Imported where used, not here (start-up, tests/test_startup.py): tomllib (a cached matrix is JSON), tempfile (only
# to write the cache), importlib.resources (bundled_matrix_bytes, where the package is no folder).

SUPPORTED_SCHEMA = 1
_MISSING = object()
_PYTHON_RE = re.compile(r"^3\.\d{1,2}$")
_HOST_STYLES = ("index", "find-links")
_TOP_LEVEL = {"schema_version", "registry_checked", "policy", "profiles", "hosts", "feature", "eol", "known_bad", "device_build", "runtime", "unavailable", *(c.table for c in COMPONENT_ORDER)}
_GLIBC_RE = re.compile(r"^2\.\d{1,2}$")
_LABEL_RE = re.compile(r"^\+[a-z0-9]+(?:[._-][a-z0-9]+)*$")
_DEVICES = ("XPU", "GPU")
_KNOWN_BAD_STATUS = ("open", "closed", "unresolved")
_FEATURE_PACKAGES = ("transformers", "accelerate")
_SHOW = reprlib.Repr()
_SHOW.maxlevel, _SHOW.maxstring, _SHOW.maxother, _SHOW.maxlist, _SHOW.maxdict = 2, 60, 60, 4, 4


def _show(value: Any) -> str:
    """A value from the file, quoted in a message: cut, and safe for any depth or size."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**40:
        return f"an integer of {len(str(abs(value)))} digits"
    return _SHOW.repr(value)


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return f"{type(value).__name__} {_show(value)}"


@functools.lru_cache(maxsize=4096)
def _version(text: str) -> Version:
    """Version(text), once per distinct string (the matrix repeats the same few hundred versions)."""
    return Version(text)


class _Entry:
    """One TOML table being read: every key must be consumed, every value checked."""

    def __init__(self, path: str, where: str, table: Any) -> None:
        self.path = path
        self.where = where
        if not isinstance(table, dict):
            raise MatrixError(path, where, "", f"expected a table, found {type(table).__name__}")
        self.table = table
        self.used: set[str] = set()

    def error(self, key: str, problem: str, fix: str = "") -> MatrixError:
        return MatrixError(self.path, self.where, shown(key), problem, fix)

    def raw(self, key: str, default: Any = _MISSING) -> Any:
        self.used.add(key)
        if key not in self.table:
            if default is _MISSING:
                raise self.error(key, "is required but missing")
            return default
        return self.table[key]

    def text(self, key: str, default: Any = _MISSING) -> str:
        value = self.raw(key, default)
        if not isinstance(value, str):
            raise self.error(key, f"must be a string, found {_show(value)}")
        return value

    def flag(self, key: str, default: Any = _MISSING) -> bool:
        value = self.raw(key, default)
        if not isinstance(value, bool):
            raise self.error(key, f"must be true or false, found {_show(value)}")
        return value

    def version(self, key: str) -> Version:
        value = self.raw(key)
        if value is None or value == "":
            raise self.error(key, "must not be empty")
        return self._parse_version(key, value)

    def optional_version(self, key: str) -> Optional[Version]:
        value = self.raw(key, None)
        if value is None or value == "":
            return None
        return self._parse_version(key, value)

    def _parse_version(self, key: str, value: Any) -> Version:
        if not isinstance(value, str):
            raise self.error(key, f"must be a version string, found {_show(value)}")
        try:
            return _version(value)
        except (InvalidVersion, ValueError):  # ValueError: a number longer than int() reads
            raise self.error(key, f"{_show(value)} is not a valid PEP 440 version") from None

    def versions(self, key: str) -> tuple[Version, ...]:
        value = self.raw(key, [])
        if not isinstance(value, list):
            raise self.error(key, f"must be a list of versions, found {_show(value)}")
        return tuple(self._parse_version(key, item) for item in value)

    def spec(self, key: str) -> SpecifierSet:
        spec = self.optional_spec(key, required=True)
        assert spec is not None
        return spec

    def optional_spec(self, key: str, required: bool = False) -> Optional[SpecifierSet]:
        value = self.raw(key) if required else self.raw(key, None)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.error(key, f"must be a PEP 440 specifier string, found {_show(value)}")
        try:
            spec = SpecifierSet(value)
        except (InvalidSpecifier, ValueError):
            raise self.error(key, f"{_show(value)} is not a valid PEP 440 specifier") from None
        for item in spec:
            if item.operator == "===":
                raise self.error(key, f"{_show(value)} uses '===', which compares strings, not versions", "Write '==' with a version.")
            try:
                _version(item.version[:-2] if item.version.endswith(".*") else item.version)
            except (InvalidVersion, ValueError):
                raise self.error(key, f"{_show(value)} holds a version compat cannot compare") from None
        return spec

    def pythons(self, key: str) -> frozenset[Version]:
        value = self.raw(key)
        if not isinstance(value, list):
            raise self.error(key, f"must be a list like [\"3.10\", \"3.11\"], found {_show(value)}")
        result = []
        for item in value:
            if not isinstance(item, str) or not _PYTHON_RE.match(item):
                raise self.error(key, f"{_show(item)} is not a CPython version of the form 3.X")
            result.append(_version(item))
        if len(set(result)) != len(result):
            raise self.error(key, "lists a Python version twice")
        return frozenset(result)

    def str_list(self, key: str, default: Any = _MISSING) -> tuple[str, ...]:
        value = self.raw(key, default)
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(key, f"must be a string or a list of strings, found {_show(value)}")
        return tuple(value)

    def provenance(self) -> Provenance:
        sources = self.str_list("source")
        if not sources or not all(s.strip() for s in sources):
            raise self.error("source", "is empty: every fact in the matrix carries its source")
        return Provenance(sources=sources, verified=self.flag("verified", True), note=self.text("note", ""))

    def named_tables(self, key: str) -> dict[str, Any]:
        """``[key.<name>]`` tables: a TOML table of tables, by name."""
        value = self.raw(key)
        if not isinstance(value, dict):
            raise self.error(key, f"must be a table of [{key}.<name>] tables, found {_kind(value)}")
        return value

    def tables(self, key: str, describe) -> list["_Entry"]:
        value = self.raw(key, [])
        if not isinstance(value, list):
            raise self.error(key, f"must be an array of tables ([[{key}]]), found {_kind(value)}")
        return [_Entry(self.path, f"{self.where} > {describe(i, item)}", item) for i, item in enumerate(value)]

    def done(self) -> None:
        unknown = sorted(set(self.table) - self.used)
        if unknown:
            raise self.error(unknown[0], "is not a known key", "Remove it or fix its spelling (see docs/MATRIX.md).")


def _describe(kind: str, key: str = "version"):
    def describe(index: int, table: Any) -> str:
        if isinstance(table, dict) and isinstance(table.get(key), str):
            return f"[[{kind}]] {shown(table[key], 40)}"
        return f"[[{kind}]] #{index + 1}"

    return describe


def _wheels(entry: _Entry, hosts: dict[str, Host]) -> tuple[WheelSet, ...]:
    result = []
    seen = set()
    for sub in entry.tables("wheels", lambda i, t: f"wheels #{i + 1}"):
        host = sub.text("host")
        if host not in hosts:
            raise sub.error("host", f"{_show(host)} is not a host defined under [hosts]", f"Define [hosts.{shown(host)}] or use one of: {', '.join(sorted(hosts))}.")
        if host in seen:
            raise sub.error("host", f"{_show(host)} is listed twice for this release")
        seen.add(host)
        result.append(
            WheelSet(
                host=host,
                python=sub.pythons("python"),
                local_label=sub.text("local_label", ""),
                yanked=sub.flag("yanked", False),
                yanked_reason=sub.text("yanked_reason", ""),
                provenance=sub.provenance(),
                glibc_min=_glibc(sub, "glibc_min"),
                build=_wheel_build(sub),
            )
        )
        sub.done()
    return tuple(result)


BUILDS = ("cpu", "cuda", "xpu", "rocm")


def _wheel_build(entry: _Entry) -> str:
    """``build``: what a wheel set's files link (a device build or the CPU build), "" when not recorded."""
    value = entry.raw("build", "")
    if value != "" and value not in BUILDS:
        raise entry.error("build", f"{_show(value)} is not a build compat knows", f"Write one of: {', '.join(BUILDS)} (what the files link), or leave it out.")
    return value


def _glibc(entry: _Entry, key: str) -> Optional[Version]:
    value = entry.raw(key, None)
    if value is None:
        return None
    if not isinstance(value, str) or not _GLIBC_RE.match(value):
        raise entry.error(key, f"{_show(value)} is not a glibc version of the form 2.X", "Write the floor the wheel's manylinux tag names: manylinux2014 -> \"2.17\", manylinux_2_28 -> \"2.28\".")
    return _version(value)


def _describe_feature(index: int, table: Any) -> str:
    if isinstance(table, dict) and isinstance(table.get("package"), str) and isinstance(table.get("name"), str):
        return f"[[feature]] {shown(table['package'], 30)}:{shown(table['name'], 40)}"
    return f"[[feature]] #{index + 1}"


def _check_unique(path: str, kind: str, versions: Iterable[Version]) -> None:
    seen: set[Version] = set()
    for version in versions:
        if version in seen:
            raise MatrixError(path, f"[[{kind}]] {version}", "version", "appears twice")
        seen.add(version)


def _newest_first(items: Sequence, key=lambda item: item.version) -> tuple:
    return tuple(sorted(items, key=key, reverse=True))


def parse_matrix(text: str, path: str = "matrix.toml") -> Matrix:
    """Parse and validate matrix TOML text; raises :class:`MatrixError`."""
    try:
        document = parse_toml(text)
    except TomlProblem as exc:
        raise MatrixError(path, "", "", str(exc), "Fix the TOML syntax.") from None
    return parse_document(document, path)


def parse_document(document: Any, path: str = "matrix.toml") -> Matrix:
    """Validate a parsed TOML document (from the file, or from the cache) into a Matrix; raises MatrixError only."""
    try:
        return _build(document, path)
    except MatrixError:
        raise
    except (TypeError, AttributeError, KeyError, IndexError, ValueError, OverflowError, RecursionError) as exc:  # a shape no check foresaw
        raise MatrixError(path, "", "", f"holds a value of an unexpected type or size ({type(exc).__name__}: {shown(str(exc), 80)})") from None


def _build(document: Any, path: str) -> Matrix:
    root = _Entry(path, "top level", document)
    schema = root.raw("schema_version")
    if type(schema) is not int or schema != SUPPORTED_SCHEMA:
        raise root.error("schema_version", f"is {_show(schema)}; this compatmatrix reads schema {SUPPORTED_SCHEMA}", "Upgrade compatmatrix or use a matching matrix.")
    registry_checked = root.text("registry_checked", "")
    hosts = _hosts(root, path)
    releases = _releases(root, path, hosts)
    features = _features(root, path)
    feature_keys = [(f.package, f.name) for f in features]
    policy_entry, policy = _policy(root, path, hosts, releases, feature_keys)
    profiles = _profiles(root, path, feature_keys)
    if policy.default_profile not in profiles:
        raise policy_entry.error("default_profile", f"{_show(policy.default_profile)} is not a profile under [profiles]")
    eol = _eol(root, releases)
    known_bad = [_known_bad(entry, releases) for entry in root.tables("known_bad", _describe_known_bad)]
    device_builds = [_device_build(entry, releases) for entry in root.tables("device_build", _describe("device_build", "package"))]
    runtime = [_runtime(entry) for entry in root.tables("runtime", _describe("runtime", "distribution"))]
    unavailable = [_unavailable(entry, hosts) for entry in root.tables("unavailable", _describe("unavailable", "project"))]
    root.done()
    releases = _with_known_bad(releases, known_bad)
    _check_wheels(path, releases)
    return Matrix(
        schema_version=schema,
        registry_checked=registry_checked,
        hosts=hosts,
        policy=policy,
        profiles=profiles,
        releases=releases,
        features=tuple(features),
        eol=tuple(eol),
        source_path=path,
        known_bad=tuple(known_bad),
        device_builds=tuple(device_builds),
        runtime=tuple(sorted(runtime, key=lambda r: (r.distribution, r.version), reverse=True)),
        unavailable=tuple(unavailable),
    )


def _hosts(root: _Entry, path: str) -> dict[str, Host]:
    """[hosts]: each host, and the host each mirrors defined too."""
    hosts: dict[str, Host] = {}
    for host_id, table in root.named_tables("hosts").items():
        entry = _Entry(path, f"[hosts.{shown(host_id)}]", table)
        style = entry.text("style")
        if style not in _HOST_STYLES:
            raise entry.error("style", f"{_show(style)} is not one of {', '.join(_HOST_STYLES)}")
        hosts[host_id] = Host(
            id=host_id,
            url=entry.text("url"),
            style=style,
            description=entry.text("description", ""),
            provenance=entry.provenance(),
            mirror_of=entry.text("mirror_of", ""),
            documented_for=tuple(_component(entry, name, key="documented_for") for name in entry.str_list("documented_for", [])),
        )
        entry.done()
    for host in hosts.values():
        if host.mirror_of and (host.mirror_of not in hosts or host.mirror_of == host.id):
            raise MatrixError(path, f"[hosts.{shown(host.id)}]", "mirror_of", f"{_show(host.mirror_of)} is not another host defined under [hosts]")
    return hosts


def _releases(root: _Entry, path: str, hosts: dict[str, Host]) -> dict[Component, tuple[Release, ...]]:
    """Each component's releases, newest first (torch first: the others pair with its versions)."""
    releases: dict[Component, tuple[Release, ...]] = {}
    torch_releases = [_torch_release(entry, hosts) for entry in root.tables("torch", _describe("torch"))]
    _check_unique(path, "torch", (r.version for r in torch_releases))
    releases[Component.TORCH] = _newest_first(torch_releases)
    torch_versions = {r.version for r in torch_releases}
    for component in COMPONENT_ORDER:
        if component is Component.TORCH:
            continue
        table = component.table
        parse = _PARSERS[component]
        parsed = [parse(entry, hosts, torch_versions, table) for entry in root.tables(table, _describe(table, _KEY.get(component, "version")))]
        _check_unique(path, table, (r.line if isinstance(r, LibraryLine) else r.version for r in parsed))
        releases[component] = _newest_first(parsed)
    return releases


def _features(root: _Entry, path: str) -> list[Feature]:
    """The [[feature]] entries, each (package, name) once."""
    features = []
    for entry in root.tables("feature", _describe_feature):
        package = entry.text("package")
        if package not in _FEATURE_PACKAGES:
            raise entry.error("package", f"{_show(package)} is not one of {', '.join(_FEATURE_PACKAGES)}")
        features.append(
            Feature(
                package=package,
                name=entry.text("name"),
                versions=entry.spec("versions"),
                description=entry.text("description"),
                evidence=entry.text("evidence", ""),
                provenance=entry.provenance(),
            )
        )
        entry.done()
    feature_keys = [(f.package, f.name) for f in features]
    if len(set(feature_keys)) != len(feature_keys):
        dup = next(k for k in feature_keys if feature_keys.count(k) > 1)
        raise MatrixError(path, f"[[feature]] {dup[0]}:{dup[1]}", "name", "appears twice")
    return features


def _policy(root: _Entry, path: str, hosts: dict[str, Host], releases: dict[Component, tuple[Release, ...]],
            feature_keys: list[tuple[str, str]]) -> tuple[_Entry, Policy]:
    """[policy] (and the entry read, for an error found later: a default profile no [profiles] table defines)."""
    policy_entry = _Entry(path, "[policy]", root.raw("policy"))
    python_range = sorted(policy_entry.pythons("python_range"))
    if len(python_range) != 2:
        raise policy_entry.error("python_range", "must list two versions: the oldest and the newest CPython covered")
    low, high = python_range
    preference_entry = _Entry(path, "[policy.host_preference]", policy_entry.raw("host_preference"))
    preference: dict[Component, tuple[str, ...]] = {}
    for name in list(preference_entry.table):
        component = _component(preference_entry, name)
        host_ids = preference_entry.str_list(name)
        if not host_ids:
            raise preference_entry.error(name, "must name at least one host")
        for host_id in host_ids:
            if host_id not in hosts:
                raise preference_entry.error(name, f"{_show(host_id)} is not a host defined under [hosts]")
        preference[component] = host_ids
    preference_entry.done()
    missing = [c.distribution for c in COMPONENT_ORDER if c not in preference and releases[c]]
    if missing:
        raise preference_entry.error(missing[0], "is required but missing")
    default_profile = policy_entry.text("default_profile")
    ccl_features = []
    for item in policy_entry.str_list("features_with_ccl", []):
        package, _, feature_name = item.partition(":")
        if (package, feature_name) not in feature_keys:
            raise policy_entry.error("features_with_ccl", f"{_show(item)} names no [[feature]] entry")
        ccl_features.append((package, feature_name))
    policy_entry.done()
    return policy_entry, Policy(
        host_preference=preference,
        python_range=(low, high),
        default_profile=default_profile,
        features_with_ccl=tuple(ccl_features),
    )


def _profiles(root: _Entry, path: str, feature_keys: list[tuple[str, str]]) -> dict[str, Profile]:
    """[profiles]: each includes torch and names [[feature]] entries only."""
    profiles: dict[str, Profile] = {}
    for name, table in root.named_tables("profiles").items():
        entry = _Entry(path, f"[profiles.{shown(name)}]", table)
        components = frozenset(_component(entry, c, key="components") for c in entry.str_list("components"))
        if Component.TORCH not in components:
            raise entry.error("components", "must include torch")
        wanted_features = []
        for item in entry.str_list("features", []):
            package, _, feature_name = item.partition(":")
            if (package, feature_name) not in feature_keys:
                raise entry.error("features", f"{_show(item)} names no [[feature]] entry")
            wanted_features.append((package, feature_name))
        profiles[name] = Profile(name=name, description=entry.text("description"), components=components, features=tuple(wanted_features))
        entry.done()
    return profiles


def _eol(root: _Entry, releases: dict[Component, tuple[Release, ...]]) -> list[EndOfLife]:
    """The [[eol]] entries, each last release one of the matrix."""
    release_versions = {c.distribution: {v for r in releases[c] for v in r.versions} for c in COMPONENT_ORDER if not _KEY.get(c)}
    eol = []
    for entry in root.tables("eol", _describe("eol", "package")):
        package = entry.text("package")
        last = entry.version("last_release")
        if package in release_versions and last not in release_versions[package]:
            raise entry.error("last_release", f"{last} is not a {package} release in the matrix")
        eol.append(
            EndOfLife(
                package=package,
                status=entry.text("status"),
                last_release=last,
                date=entry.text("date", ""),
                statement=entry.text("statement"),
                advice=entry.text("advice"),
                provenance=entry.provenance(),
            )
        )
        entry.done()
    return eol


def _check_wheels(path: str, releases: dict[Component, tuple[Release, ...]]) -> None:
    """Every release but a library line lists a host with wheels (known-bad sets already removed)."""
    for component in COMPONENT_ORDER:
        for release in releases[component]:
            if not release.wheels and not isinstance(release, LibraryLine):
                raise MatrixError(path, f"release {release.version}", "wheels", "lists no host with wheels")


def _runtime(entry: _Entry) -> RuntimeRelease:
    """A [[runtime]] entry: a runtime wheel's release, its declared dependencies (each a PEP 508 requirement) and folders."""
    from packaging.requirements import InvalidRequirement, Requirement

    name = canonical_name(entry.text("distribution"))
    if name not in RUNTIME_COMPONENTS:
        raise entry.error("distribution", f"{_show(name)} is not a runtime wheel compat knows: add its record to matrix/model.py REGISTRY first")
    requires = entry.str_list("requires", [])
    for text in requires:
        try:
            Requirement(text)
        except InvalidRequirement:
            raise entry.error("requires", f"{_show(text)} is not a PEP 508 requirement") from None
    released = entry.text("released")
    if not re.match(r"^\d{4}-\d{2}-\d{2}$", released):
        raise entry.error("released", f"{_show(released)} is not a date like 2026-10-16")
    folders = {key: entry.text(key, "") for key in ("libfabric", "providers", "mpi_root")}
    for key, folder in folders.items():
        if folder.startswith("/") or folder == ".." or folder.startswith("../"):
            raise entry.error(key, f"{_show(folder)} is not a folder inside the environment (relative to its prefix)")
    release = RuntimeRelease(name, entry.version("version"), requires, released, entry.provenance(), **folders)
    entry.done()
    return release


def _unavailable(entry: _Entry, hosts: Mapping[str, Any]) -> Unavailable:
    asked = entry.str_list("hosts")
    for host in asked:
        if host not in hosts:
            raise entry.error("hosts", f"{_show(host)} is not a host under [hosts]")
    checked = entry.text("checked")
    if not re.match(r"^\d{4}-\d{2}-\d{2}$", checked):
        raise entry.error("checked", f"{_show(checked)} is not a date like 2026-12-07")
    item = Unavailable(canonical_name(entry.text("project")), asked, checked, entry.provenance())
    entry.done()
    return item


# --- one parser per kind of [[table]] entry: (entry, hosts, torch versions, table name) -> release ---------------


def _torch_release(entry: _Entry, hosts: dict[str, Host]) -> TorchRelease:
    release = TorchRelease(
        version=entry.version("version"),
        wheels=_wheels(entry, hosts),
        requires_python=entry.optional_spec("requires_python"),
        released=entry.text("released", ""),
        provenance=entry.provenance(),
    )
    entry.done()
    return release


def _known_torch(entry: _Entry, key: str, torch_versions: set[Version]) -> Version:
    version = entry.version(key)
    if version not in torch_versions:
        raise entry.error(key, f"{version} is not a torch release in the matrix", "Add a [[torch]] entry for it or correct the pairing.")
    return version


def _ipex_release(entry: _Entry, hosts: dict[str, Host], torch_versions: set[Version], table: str) -> IpexRelease:
    torch = _known_torch(entry, "torch", torch_versions)
    accepts = entry.spec("torch_accepts")
    if not accepts.contains(torch, prereleases=True):
        raise entry.error("torch_accepts", f"{accepts} does not accept torch {torch}, the version this release was built for")
    release = IpexRelease(
        version=entry.version("version"),
        distribution=entry.text("distribution"),
        module=entry.text("module"),
        torch=torch,
        torch_accepts=accepts,
        guard=entry.text("guard"),
        released=entry.text("released", ""),
        wheels=_wheels(entry, hosts),
        provenance=entry.provenance(),
        isa_min=_isa_floor(entry),
    )
    entry.done()
    return release


def _isa_floor(entry: _Entry) -> Optional[IsaFloor]:
    """``isa_min = { level = "avx512", source = "...", note = "..." }``: the least CPU instruction set, with its source."""
    value = entry.raw("isa_min", None)
    if value is None:
        return None
    sub = _Entry(entry.path, f"{entry.where} > isa_min", value)
    level = sub.text("level")
    if level not in ISA_FLAGS:
        raise sub.error("level", f"{_show(level)} is not one of {', '.join(ISA_FLAGS)}")
    floor = IsaFloor(level, sub.provenance())
    sub.done()
    return floor


def _ccl_release(entry: _Entry, hosts: dict[str, Host], torch_versions: set[Version], table: str) -> CclRelease:
    torch = _known_torch(entry, "torch", torch_versions)
    release = CclRelease(
        version=entry.version("version"),
        distribution=entry.text("distribution"),
        module=entry.text("module"),
        torch=torch,
        has_cwd=entry.flag("has_cwd"),
        setvars=entry.text("setvars"),
        oneccl=entry.text("oneccl", ""),
        released=entry.text("released", ""),
        wheels=_wheels(entry, hosts),
        provenance=entry.provenance(),
        pairings=_pairings(entry, torch, torch_versions, table),
    )
    entry.done()
    return release


def _pairings(entry: _Entry, built_for: Version, torch_versions: set[Version], table: str) -> tuple[Pairing, ...]:
    """``[[<table>.pairing]]``: what a source says about a torch of the same major.minor the release is not built for."""
    result: list[Pairing] = []
    for sub in entry.tables("pairing", lambda i, t: f"pairing #{i + 1}"):
        torch = _known_torch(sub, "torch", torch_versions)
        if torch == built_for:
            raise sub.error("torch", f"{torch} is the torch this release is built for (its own 'torch' field)", "List only other torch releases here.")
        if torch.release[:2] != built_for.release[:2]:
            raise sub.error(
                "torch", f"{torch} is not of the {built_for.major}.{built_for.minor} series this release is built for",
                "A torch of another major.minor has a different C++ ABI and is always refused (rule ccl-torch-series); record only torch releases of the same series.",
            )
        if any(p.torch == torch for p in result):
            raise sub.error("torch", f"{torch} is listed twice")
        evidence = sub.text("evidence")
        if evidence not in PAIRING_LEVELS:
            raise sub.error("evidence", f"{_show(evidence)} is not one of {', '.join(PAIRING_LEVELS)}",
                            "'built-for' is the entry's own 'torch'; any other torch of the series is 'unverified' without an entry; a reported failure of a matched set goes into [[known_bad]] (see docs/MATRIX.md).")
        result.append(Pairing(torch, evidence, sub.provenance()))
        sub.done()
    return tuple(sorted(result, key=lambda p: p.torch, reverse=True))


def _describe_known_bad(index: int, table: Any) -> str:
    if isinstance(table, dict) and all(isinstance(table.get(k), str) for k in ("torch", "package", "version")):
        return f"[[known_bad]] torch {shown(table['torch'], 20)} + {shown(table['package'], 30)} {shown(table['version'], 20)}"
    return f"[[known_bad]] #{index + 1}"


def _known_bad(entry: _Entry, releases: dict[Component, tuple[Release, ...]]) -> KnownBad:
    torch = _known_torch(entry, "torch", {r.version for r in releases[Component.TORCH]})
    label = entry.raw("torch_label", None)
    if label is not None and (not isinstance(label, str) or (label and not _LABEL_RE.match(label))):
        raise entry.error("torch_label", f"{_show(label)} is not a local label like \"+cpu\" (or \"\" for the unlabelled build)")
    component = _component(entry, entry.text("package"), key="package")
    if component is Component.TORCH or any(isinstance(r, LibraryLine) for r in releases[component]):
        raise entry.error("package", f"{_show(entry.table['package'])} is not a binary package that pairs with torch", "Use intel-extension-for-pytorch, oneccl-bind-pt, torchvision or torchaudio.")
    version = entry.version("version")
    if not any(version in r.versions for r in releases[component]):
        raise entry.error("version", f"{version} is not a {component.distribution} release in the matrix")
    status = entry.text("status")
    if status not in _KNOWN_BAD_STATUS:
        raise entry.error("status", f"{_show(status)} is not one of {', '.join(_KNOWN_BAD_STATUS)}")
    known = KnownBad(torch, label, component, version, entry.text("failure"), status, entry.provenance())
    entry.done()
    return known


def _with_known_bad(releases: dict[Component, tuple[Release, ...]], known_bad: Sequence[KnownBad]) -> dict[Component, tuple[Release, ...]]:
    """Each [[known_bad]] entry also on the release it names (the resolver's preference reads it there)."""
    if not known_bad:
        return releases
    result = dict(releases)
    for component in {k.component for k in known_bad}:
        result[component] = tuple(
            replace(r, known_bad=tuple(k for k in known_bad if k.component is component and k.version == r.version))  # type: ignore[type-var]
            if any(k.component is component and k.version == r.version for k in known_bad) else r
            for r in releases[component]
        )
    return result


def _device_build(entry: _Entry, releases: dict[Component, tuple[Release, ...]]) -> DeviceBuildEntry:
    component = _component(entry, entry.text("package"), key="package")
    device = entry.text("device")
    if device not in _DEVICES:
        raise entry.error("device", f"{_show(device)} is not one of {', '.join(_DEVICES)}")
    labels = entry.str_list("labels", [])
    for label in labels:
        if not _LABEL_RE.match(label):
            raise entry.error("labels", f"{_show(label)} is not a local label like \"+xpu\"")
        if label == "+cpu":
            raise entry.error("labels", "'+cpu' is the CPU build's label")
    versions = entry.versions("versions")
    cpu = {v for r in releases[component] for v in r.versions}
    for version in versions:
        if version.local is not None:
            raise entry.error("versions", f"{version} carries a local label; list labels under 'labels'")
        if version in cpu:
            raise entry.error("versions", f"{version} is a CPU release of {component.distribution} in the matrix", "A device build with the same number is told apart by its label: list the label instead.")
    if not labels and not versions:
        raise entry.error("labels", "is empty, and so is 'versions': the entry must say how to recognise the build")
    hosts = entry.str_list("hosts", [])
    if not all(h.startswith("https://") for h in hosts):
        raise entry.error("hosts", "must list https:// URLs (the device builds' own pages, not compat hosts)")
    built = DeviceBuildEntry(component, device, labels, frozenset(versions), hosts, entry.provenance())
    entry.done()
    return built


def _companion_release(entry: _Entry, hosts: dict[str, Host], torch_versions: set[Version], table: str) -> CompanionRelease:
    """torchvision / torchaudio: ``[[<table>.wheels]]`` like torch, or (the short form) ``python``: the PyPI wheels."""
    version = entry.version("version")
    torch = _known_torch(entry, "torch", torch_versions) if "torch" in entry.table else None  # the torch an exact pin names
    # torch_requires: Requires-Dist: torch as the METADATA declares it (a floor, a range; a pin is `torch` alone)
    requires = entry.optional_spec("torch_requires")
    if requires is not None:
        pinned = _pinned_version(requires)
        if torch is not None and (pinned is None or pinned != torch):
            raise entry.error("torch_requires", f"{requires} is not the pin of torch {torch} the entry names",
                              "Give `torch` for an exact pin, `torch_requires` for a floor or a range (docs/MATRIX.md).")
        if pinned is not None and torch is None:
            raise entry.error("torch_requires", f"{requires} is an exact pin", f"Write it as torch = \"{pinned}\".")
        if not any(requires.contains(t, prereleases=True) for t in torch_versions):
            raise entry.error("torch_requires", f"{requires} admits no torch release of the matrix", "Add the [[torch]] entries it declares, or correct it.")
    verified_with = _known_torch(entry, "verified_with", torch_versions) if "verified_with" in entry.table else None
    if verified_with is not None and (requires is None or not requires.contains(verified_with, prereleases=True)):
        raise entry.error("verified_with", f"{verified_with} is outside what the release declares", "Name a torch its torch_requires admits.")
    requires_python = entry.optional_spec("requires_python")
    stable_abi = entry.text("stable_abi", "")
    provenance = entry.provenance()
    if "python" in entry.table:
        if "wheels" in entry.table:
            raise entry.error("python", f"is given next to [[{table}.wheels]]", f"List the PyPI wheels as a [[{table}.wheels]] entry with host = \"pypi\".")
        if "pypi" not in hosts:
            raise entry.error("python", "names PyPI wheels, but there is no [hosts.pypi]")
        wheels: tuple[WheelSet, ...] = (WheelSet("pypi", entry.pythons("python"), "", False, "", provenance),)
    else:
        wheels = _wheels(entry, hosts)
    entry.done()
    return CompanionRelease(package=table, version=version, torch=torch, wheels=wheels, provenance=provenance, torch_requires=requires,
                            requires_python=requires_python, verified_with=verified_with, stable_abi=stable_abi)


def _pinned_version(spec: SpecifierSet) -> Optional[Version]:
    """The version an exact pin (``==X``, one specifier, no wildcard) names; None for anything else."""
    items = list(spec)
    if len(items) == 1 and items[0].operator == "==" and not items[0].version.endswith(".*"):
        return Version(items[0].version)
    return None


def _library_line(entry: _Entry, hosts: dict[str, Host], torch_versions: set[Version], table: str) -> LibraryLine:
    line = entry.version("line")
    versions = entry.versions("versions")
    if not versions:
        raise entry.error("versions", "must list at least one release of the line")
    for version in versions:
        if version.release[:2] != line.release[:2]:
            raise entry.error("versions", f"{version} does not belong to the {line} line")
    yanked = frozenset(entry.versions("yanked"))
    if not yanked <= set(versions):
        stray = sorted(yanked - set(versions))[0]
        raise entry.error("yanked", f"{stray} is not listed in 'versions'")
    parsed = LibraryLine(
        package=table,
        line=line,
        versions=tuple(sorted(versions, reverse=True)),
        yanked=yanked,
        requires_python=entry.optional_spec("requires_python"),
        torch_min=entry.optional_version("torch_min"),
        accelerate_min=entry.optional_version("accelerate_min") if table == "transformers" else None,
        provenance=entry.provenance(),
    )
    entry.done()
    return parsed


#: How each component's [[table]] entries are read (torch is read first: the others pair with it).
_READERS = {"IpexRelease": _ipex_release, "CclRelease": _ccl_release, "CompanionRelease": _companion_release, "LibraryLine": _library_line}
_PARSERS: dict[Component, Callable[[_Entry, dict[str, Host], set[Version], str], Release]] = {
    component: _READERS[info.release] for component, info in COMPONENTS.items() if info.release in _READERS
}
#: The key that names an entry, where it is not "version" (library entries are minor lines).
_KEY = {component: "line" for component, info in COMPONENTS.items() if info.kind == "library"}


def _component(entry: _Entry, name: str, key: Optional[str] = None) -> Component:
    try:
        return Component.from_name(name)
    except KeyError:
        known = ", ".join(c.distribution for c in Component)
        raise entry.error(key or name, f"{_show(name)} is not a component ({known})") from None


def bundled_matrix_bytes() -> bytes:
    """The matrix shipped inside the installed package (``compatmatrix/data/matrix.toml``): read from the package's
    folder (importlib.resources costs ~5 ms of start-up), through importlib.resources where the package is no folder
    (a zip)."""
    try:
        with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "matrix.toml"), "rb") as handle:
            return handle.read()
    except OSError:
        pass
    from importlib.resources import files

    return files("compatmatrix").joinpath("data").joinpath("matrix.toml").read_bytes()


def bundled_matrix_text() -> str:
    """The bundled matrix's text."""
    return bundled_matrix_bytes().decode("utf-8")


# --- reading TOML files (the matrix, and install/indexes.py's config file) ---------------------------------------

MAX_FILE_BYTES = 64 << 20  # no matrix or config file comes near this; /dev/zero must not fill the memory


class TomlProblem(ValueError):
    """Why a TOML file cannot be used, as a clause that follows the file's name ("is not UTF-8 text (...)")."""


_NOT_REGULAR = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def read_file_bytes(path: Union[str, os.PathLike]) -> bytes:
    """A regular file's bytes (at most MAX_FILE_BYTES); raises OSError, or TomlProblem naming what is wrong.
    Opened without blocking and checked before reading: a FIFO (which would wait for a writer forever), a socket
    or a device is refused; a symbolic link to a regular file is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except ValueError:  # a NUL byte in the name
        raise TomlProblem("is not a file name compat can open (it holds a NUL byte)") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _NOT_REGULAR if test(mode)), "not a regular file")
            raise TomlProblem(f"is {kind}, not a regular file")
        os.set_blocking(fd, True)
        handle, fd = os.fdopen(fd, "rb"), -1
        with handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > MAX_FILE_BYTES:
        raise TomlProblem(f"is larger than {MAX_FILE_BYTES >> 20} MB, which no matrix or config file is")
    return data


def decode_text(data: bytes) -> str:
    """A file's bytes as UTF-8 text; raises TomlProblem naming the first byte that is not."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TomlProblem(f"is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None


def read_text_file(path: Union[str, os.PathLike]) -> str:
    """A regular file's text (UTF-8, at most MAX_FILE_BYTES); raises OSError, or TomlProblem naming what is wrong
    (see read_file_bytes)."""
    return decode_text(read_file_bytes(path))


def parse_toml(text: str) -> dict[str, Any]:
    """tomllib.loads, with every way it can fail turned into a TomlProblem."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on Python < 3.11 only
        import tomli as tomllib
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TomlProblem(f"is not valid TOML ({shown(str(exc), 120)})") from None
    except RecursionError:
        raise TomlProblem("nests too deeply (arrays or tables inside each other, deeper than compat reads)") from None
    except ValueError as exc:  # a number with more digits than int() takes
        raise TomlProblem(f"holds a number too long to read ({shown(str(exc), 80)})") from None


def read_toml_file(path: Union[str, os.PathLike]) -> dict[str, Any]:
    """A TOML file's document; raises OSError (cannot be opened) or TomlProblem."""
    return parse_toml(read_text_file(path))


# --- the cache of validated matrices (matrix/cache.py) -----------------------------------------------------------


def cache_dir() -> Optional[str]:
    """Where validated matrices are kept ($XDG_CACHE_HOME/compatmatrix); None when COMPAT_NO_CACHE is set."""
    return cachefiles.cache_dir()


def parse_matrix_cached(data: bytes, path: str, unreadable_fix: str) -> Matrix:
    """The matrix in a file's bytes: from the cache when these bytes validated before (matrix/cache.py), else read
    as UTF-8 TOML and validated (a TomlProblem of the text: a MatrixError with ``unreadable_fix``), and kept.

    Only a matrix that validates is kept, under a key of the bytes themselves: a changed file is read again,
    a broken one is reported every time. A cache that is missing, damaged, for other bytes, not a regular file
    or writable by others is ignored silently (compatmatrix/cachefiles.py)."""
    directory = cache_dir()
    cache_key = cache.key(data) if directory is not None else ""
    if directory is not None:
        cached = cache.read(directory, cache_key, path, limit=8 * len(data) + (1 << 20))
        if cached is not None:
            return cached
    try:
        text = decode_text(data)
    except TomlProblem as exc:
        raise MatrixError(path, "", "", str(exc), unreadable_fix) from None
    matrix = parse_matrix(text, path)  # raises MatrixError: nothing is kept for a matrix that does not validate
    if directory is not None:
        cache.write(directory, cache_key, matrix)
    return matrix


@functools.lru_cache(maxsize=1)
def _bundled() -> Matrix:
    return parse_matrix_cached(bundled_matrix_bytes(), "compatmatrix/data/matrix.toml", "Reinstall compatmatrix.")


def load_matrix(path: Union[str, os.PathLike, None] = None) -> Matrix:
    """Load the bundled matrix, or the one at ``path`` (reads the file; the cache folder as above)."""
    if path is None:
        return _bundled()
    from pathlib import Path  # its spelling of the path names the file in messages (start-up: only for --matrix)

    file = Path(path)
    unreadable = "Save it as UTF-8 TOML (see docs/MATRIX.md)."
    try:
        data = read_file_bytes(file)
    except OSError as exc:
        raise MatrixError(str(file), "", "", f"cannot be read ({exc.strerror or exc})", "Pass an existing matrix file with --matrix.") from None
    except TomlProblem as exc:
        raise MatrixError(str(file), "", "", str(exc), unreadable) from None
    return parse_matrix_cached(data, str(file), unreadable)
