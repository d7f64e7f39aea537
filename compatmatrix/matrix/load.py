"""Read ``matrix.toml`` into :class:`~compatmatrix.matrix.model.Matrix`, validating as it goes.

Every problem is reported as a :class:`~compatmatrix.errors.MatrixError` that names the file,
the entry (``[[oneccl_bind_pt]] 1.12.100``) and the field, so a broken edit is found at once.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import re
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Optional, Union

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from ..errors import MatrixError
from .model import (
    CclRelease,
    CompanionRelease,
    Component,
    EndOfLife,
    Feature,
    Host,
    IpexRelease,
    LibraryLine,
    Matrix,
    Policy,
    Profile,
    Provenance,
    TorchRelease,
    WheelSet,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python < 3.11 only
    import tomli as tomllib

SUPPORTED_SCHEMA = 1
_MISSING = object()
_PYTHON_RE = re.compile(r"^3\.\d{1,2}$")
_HOST_STYLES = ("index", "find-links")
_TOP_LEVEL = {
    "schema_version",
    "registry_checked",
    "policy",
    "profiles",
    "hosts",
    "torch",
    "ipex",
    "oneccl_bind_pt",
    "torchvision",
    "torchaudio",
    "transformers",
    "accelerate",
    "feature",
    "eol",
}
_FEATURE_PACKAGES = ("transformers", "accelerate")


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
        return MatrixError(self.path, self.where, key, problem, fix)

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
            raise self.error(key, f"must be a string, found {value!r}")
        return value

    def flag(self, key: str, default: Any = _MISSING) -> bool:
        value = self.raw(key, default)
        if not isinstance(value, bool):
            raise self.error(key, f"must be true or false, found {value!r}")
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
            raise self.error(key, f"must be a version string, found {value!r}")
        try:
            return Version(value)
        except InvalidVersion:
            raise self.error(key, f"{value!r} is not a valid PEP 440 version") from None

    def versions(self, key: str) -> tuple[Version, ...]:
        value = self.raw(key, [])
        if not isinstance(value, list):
            raise self.error(key, f"must be a list of versions, found {value!r}")
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
            raise self.error(key, f"must be a PEP 440 specifier string, found {value!r}")
        try:
            return SpecifierSet(value)
        except InvalidSpecifier:
            raise self.error(key, f"{value!r} is not a valid PEP 440 specifier") from None

    def pythons(self, key: str) -> frozenset[Version]:
        value = self.raw(key)
        if not isinstance(value, list):
            raise self.error(key, f"must be a list like [\"3.10\", \"3.11\"], found {value!r}")
        result = []
        for item in value:
            if not isinstance(item, str) or not _PYTHON_RE.match(item):
                raise self.error(key, f"{item!r} is not a CPython version of the form 3.X")
            result.append(Version(item))
        if len(set(result)) != len(result):
            raise self.error(key, "lists a Python version twice")
        return frozenset(result)

    def str_list(self, key: str, default: Any = _MISSING) -> tuple[str, ...]:
        value = self.raw(key, default)
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(key, f"must be a string or a list of strings, found {value!r}")
        return tuple(value)

    def provenance(self) -> Provenance:
        sources = self.str_list("source")
        if not sources or not all(s.strip() for s in sources):
            raise self.error("source", "is empty: every fact in the matrix carries its source")
        return Provenance(sources=sources, verified=self.flag("verified", True), note=self.text("note", ""))

    def tables(self, key: str, describe) -> list["_Entry"]:
        value = self.raw(key, [])
        if not isinstance(value, list):
            raise self.error(key, "must be an array of tables ([[...]])")
        return [_Entry(self.path, f"{self.where} > {describe(i, item)}", item) for i, item in enumerate(value)]

    def done(self) -> None:
        unknown = sorted(set(self.table) - self.used)
        if unknown:
            raise self.error(unknown[0], "is not a known key", "Remove it or fix its spelling (see docs/MATRIX.md).")


def _describe(kind: str, key: str = "version"):
    def describe(index: int, table: Any) -> str:
        if isinstance(table, dict) and isinstance(table.get(key), str):
            return f"[[{kind}]] {table[key]}"
        return f"[[{kind}]] #{index + 1}"

    return describe


def _wheels(entry: _Entry, hosts: dict[str, Host]) -> tuple[WheelSet, ...]:
    result = []
    seen = set()
    for sub in entry.tables("wheels", lambda i, t: f"wheels #{i + 1}"):
        host = sub.text("host")
        if host not in hosts:
            raise sub.error("host", f"{host!r} is not a host defined under [hosts]", f"Define [hosts.{host}] or use one of: {', '.join(sorted(hosts))}.")
        if host in seen:
            raise sub.error("host", f"{host!r} is listed twice for this release")
        seen.add(host)
        result.append(
            WheelSet(
                host=host,
                python=sub.pythons("python"),
                local_label=sub.text("local_label", ""),
                yanked=sub.flag("yanked", False),
                yanked_reason=sub.text("yanked_reason", ""),
                provenance=sub.provenance(),
            )
        )
        sub.done()
    return tuple(result)


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
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MatrixError(path, "", "", f"is not valid TOML ({exc})", "Fix the TOML syntax.") from None

    root = _Entry(path, "top level", document)
    schema = root.raw("schema_version")
    if schema != SUPPORTED_SCHEMA:
        raise root.error("schema_version", f"is {schema!r}; this compatmatrix reads schema {SUPPORTED_SCHEMA}", "Upgrade compatmatrix or use a matching matrix.")
    registry_checked = root.text("registry_checked", "")

    hosts: dict[str, Host] = {}
    for host_id, table in root.raw("hosts").items():
        entry = _Entry(path, f"[hosts.{host_id}]", table)
        style = entry.text("style")
        if style not in _HOST_STYLES:
            raise entry.error("style", f"{style!r} is not one of {', '.join(_HOST_STYLES)}")
        hosts[host_id] = Host(
            id=host_id,
            url=entry.text("url"),
            style=style,
            description=entry.text("description", ""),
            provenance=entry.provenance(),
        )
        entry.done()

    torch_releases = []
    for entry in root.tables("torch", _describe("torch")):
        torch_releases.append(
            TorchRelease(
                version=entry.version("version"),
                wheels=_wheels(entry, hosts),
                requires_python=entry.optional_spec("requires_python"),
                released=entry.text("released", ""),
                provenance=entry.provenance(),
            )
        )
        entry.done()
    _check_unique(path, "torch", (r.version for r in torch_releases))
    torch_versions = {r.version for r in torch_releases}

    def known_torch(entry: _Entry, key: str) -> Version:
        version = entry.version(key)
        if version not in torch_versions:
            raise entry.error(key, f"{version} is not a torch release in the matrix", "Add a [[torch]] entry for it or correct the pairing.")
        return version

    ipex_releases = []
    for entry in root.tables("ipex", _describe("ipex")):
        torch = known_torch(entry, "torch")
        accepts = entry.spec("torch_accepts")
        if not accepts.contains(torch, prereleases=True):
            raise entry.error("torch_accepts", f"{accepts} does not accept torch {torch}, the version this release was built for")
        ipex_releases.append(
            IpexRelease(
                version=entry.version("version"),
                distribution=entry.text("distribution"),
                module=entry.text("module"),
                torch=torch,
                torch_accepts=accepts,
                guard=entry.text("guard"),
                released=entry.text("released", ""),
                wheels=_wheels(entry, hosts),
                provenance=entry.provenance(),
            )
        )
        entry.done()
    _check_unique(path, "ipex", (r.version for r in ipex_releases))

    ccl_releases = []
    for entry in root.tables("oneccl_bind_pt", _describe("oneccl_bind_pt")):
        ccl_releases.append(
            CclRelease(
                version=entry.version("version"),
                distribution=entry.text("distribution"),
                module=entry.text("module"),
                torch=known_torch(entry, "torch"),
                has_cwd=entry.flag("has_cwd"),
                setvars=entry.text("setvars"),
                oneccl=entry.text("oneccl", ""),
                released=entry.text("released", ""),
                wheels=_wheels(entry, hosts),
                provenance=entry.provenance(),
                torch_also=tuple(_known_torch_list(entry, "torch_also", torch_versions)),
            )
        )
        entry.done()
    _check_unique(path, "oneccl_bind_pt", (r.version for r in ccl_releases))

    companions: dict[str, list[CompanionRelease]] = {"torchvision": [], "torchaudio": []}
    for package, releases in companions.items():
        for entry in root.tables(package, _describe(package)):
            releases.append(
                CompanionRelease(
                    package=package,
                    version=entry.version("version"),
                    torch=known_torch(entry, "torch"),
                    python=entry.pythons("python"),
                    provenance=entry.provenance(),
                )
            )
            entry.done()
        _check_unique(path, package, (r.version for r in releases))

    lines: dict[str, list[LibraryLine]] = {"transformers": [], "accelerate": []}
    for package, parsed in lines.items():
        for entry in root.tables(package, _describe(package, "line")):
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
            parsed.append(
                LibraryLine(
                    package=package,
                    line=line,
                    versions=tuple(sorted(versions, reverse=True)),
                    yanked=yanked,
                    requires_python=entry.optional_spec("requires_python"),
                    torch_min=entry.optional_version("torch_min"),
                    accelerate_min=entry.optional_version("accelerate_min") if package == "transformers" else None,
                    provenance=entry.provenance(),
                )
            )
            entry.done()
        _check_unique(path, package, (entry.line for entry in parsed))

    features = []
    for entry in root.tables("feature", lambda i, t: f"[[feature]] {t.get('package', '?')}:{t.get('name', '#' + str(i + 1))}" if isinstance(t, dict) else f"[[feature]] #{i + 1}"):
        package = entry.text("package")
        if package not in _FEATURE_PACKAGES:
            raise entry.error("package", f"{package!r} is not one of {', '.join(_FEATURE_PACKAGES)}")
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
                raise preference_entry.error(name, f"{host_id!r} is not a host defined under [hosts]")
        preference[component] = host_ids
    preference_entry.done()
    missing = [c.distribution for c in Component if c not in preference]
    if missing:
        raise preference_entry.error(missing[0], "is required but missing")
    default_profile = policy_entry.text("default_profile")
    ccl_features = []
    for item in policy_entry.str_list("features_with_ccl", []):
        package, _, feature_name = item.partition(":")
        if (package, feature_name) not in feature_keys:
            raise policy_entry.error("features_with_ccl", f"{item!r} names no [[feature]] entry")
        ccl_features.append((package, feature_name))
    policy_entry.done()

    profiles: dict[str, Profile] = {}
    for name, table in root.raw("profiles").items():
        entry = _Entry(path, f"[profiles.{name}]", table)
        components = frozenset(_component(entry, c, key="components") for c in entry.str_list("components"))
        if Component.TORCH not in components:
            raise entry.error("components", "must include torch")
        wanted_features = []
        for item in entry.str_list("features", []):
            package, _, feature_name = item.partition(":")
            if (package, feature_name) not in feature_keys:
                raise entry.error("features", f"{item!r} names no [[feature]] entry")
            wanted_features.append((package, feature_name))
        profiles[name] = Profile(name=name, description=entry.text("description"), components=components, features=tuple(wanted_features))
        entry.done()
    if default_profile not in profiles:
        raise policy_entry.error("default_profile", f"{default_profile!r} is not a profile under [profiles]")

    release_versions = {
        "torch": torch_versions,
        Component.IPEX.distribution: {r.version for r in ipex_releases},
        Component.CCL.distribution: {r.version for r in ccl_releases},
    }
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
    root.done()

    binary: list[Union[TorchRelease, IpexRelease, CclRelease]] = [*torch_releases, *ipex_releases, *ccl_releases]
    for release in binary:
        if not release.wheels:
            raise MatrixError(path, f"release {release.version}", "wheels", "lists no host with wheels")

    return Matrix(
        schema_version=schema,
        registry_checked=registry_checked,
        hosts=hosts,
        policy=Policy(
            host_preference=preference,
            python_range=(low, high),
            default_profile=default_profile,
            features_with_ccl=tuple(ccl_features),
        ),
        profiles=profiles,
        torch=_newest_first(torch_releases),
        ipex=_newest_first(ipex_releases),
        ccl=_newest_first(ccl_releases),
        torchvision=_newest_first(companions["torchvision"]),
        torchaudio=_newest_first(companions["torchaudio"]),
        transformers=_newest_first(lines["transformers"], key=lambda line: line.line),
        accelerate=_newest_first(lines["accelerate"], key=lambda line: line.line),
        features=tuple(features),
        eol=tuple(eol),
        source_path=path,
    )


def _known_torch_list(entry: _Entry, key: str, torch_versions: set[Version]) -> list[Version]:
    versions = list(entry.versions(key))
    for version in versions:
        if version not in torch_versions:
            raise entry.error(key, f"{version} is not a torch release in the matrix", "Add a [[torch]] entry for it or correct the pairing.")
    return versions


def _component(entry: _Entry, name: str, key: Optional[str] = None) -> Component:
    try:
        return Component.from_name(name)
    except KeyError:
        known = ", ".join(c.distribution for c in Component)
        raise entry.error(key or name, f"{name!r} is not a component ({known})") from None


def bundled_matrix_text() -> str:
    """The matrix shipped inside the installed package (``compatmatrix/data/matrix.toml``)."""
    from importlib.resources import files

    return files("compatmatrix").joinpath("data").joinpath("matrix.toml").read_text(encoding="utf-8")


def cache_dir() -> Optional[Path]:
    """Where parsed matrices are kept ($XDG_CACHE_HOME/compatmatrix); None when COMPAT_NO_CACHE is set."""
    if os.environ.get("COMPAT_NO_CACHE"):
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "compatmatrix"


def _cache_key(text: str, path: str) -> str:
    """Changes with the matrix text and with the code that turns it into objects."""
    digest = hashlib.sha256(text.encode("utf-8"))
    for module in ("model.py", "load.py"):
        digest.update(Path(__file__).with_name(module).read_bytes())
    digest.update(f"{sys.version_info[:2]}|{path}".encode())
    return digest.hexdigest()[:32]


def parse_matrix_cached(text: str, path: str) -> Matrix:
    """parse_matrix, with the result pickled next to the user's other caches (parsing takes ~0.1 s,
    a pickle ~5 ms: it matters for `compat check` in a pre-commit hook). Any cache problem falls back
    to parsing; a matrix that fails validation is never cached."""
    directory = cache_dir()
    if directory is None:
        return parse_matrix(text, path)
    file = directory / f"matrix-{_cache_key(text, path)}.pickle"
    try:
        with open(file, "rb") as handle:
            cached = pickle.load(handle)
        if isinstance(cached, Matrix):
            return cached
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError, ValueError):
        pass
    matrix = parse_matrix(text, path)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, delete=False, suffix=".tmp") as out:
            pickle.dump(matrix, out, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(out.name, file)
    except OSError:
        pass
    return matrix


@functools.lru_cache(maxsize=1)
def _bundled() -> Matrix:
    return parse_matrix_cached(bundled_matrix_text(), path="compatmatrix/data/matrix.toml")


def load_matrix(path: Union[str, Path, None] = None) -> Matrix:
    """Load the bundled matrix, or the one at ``path``."""
    if path is None:
        return _bundled()
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise MatrixError(str(file), "", "", f"cannot be read ({exc.strerror})", "Pass an existing matrix file with --matrix.") from None
    return parse_matrix_cached(text, path=str(file))
