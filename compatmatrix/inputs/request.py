"""From what files say to what the resolver asks: modelled pins become requirements, `-c` lines constraints, the
rest is passed through untouched, and the files' index lines are judged against the matrix's hosts.

Pure: the matrix and an InputSet in, a FileRequest out (no I/O).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Optional
from urllib.parse import urlsplit

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from ..devices import device_build
from ..matrix.model import Component, Matrix
from ..names import canonical_name
from ..record import Record
from ..redact import conceal_variables, strip_credentials
from ..resolve import all_of
from .model import IndexLine, InputError, InputRequirement, InputSet


class FileRequest(Record):
    """The resolver's part of the files, and what compat does with the rest."""

    requirements: tuple[str, ...]  # modelled packages as name+specifier, for resolve.build_request
    constraints: Mapping[Component, SpecifierSet] = MappingProxyType({})  # from -c files: limit, do not ask
    passthrough: tuple[InputRequirement, ...] = ()  # packages compat does not model: installed as written
    notes: tuple[str, ...] = ()  # how the files were read (extras, markers, editable lines, index lines)
    index_warnings: tuple[str, ...] = ()  # a file's index that cannot serve a pin; names exposed to shadowing
    pinned: Mapping[str, str] = MappingProxyType({})  # name as written -> exact version (label kept), every pinned line
    input_warnings: tuple[str, ...] = ()  # markers the target does not decide, options pip ignores (InputSet.warnings)
    refusals: tuple[str, ...] = ()  # pins pip cannot install: a runtime wheel whose dependencies no index has (matrix/runtime.py)

    @property
    def warnings(self) -> tuple[str, ...]:
        """Everything to warn about, in reading order: what pip cannot install, the lines themselves, then the index lines."""
        return self.refusals + self.input_warnings + self.index_warnings

    @property
    def passthrough_lines(self) -> tuple[str, ...]:
        """The pass-through requirements as pip requirement lines (markers already evaluated for the target): what pip
        and uv get, ${VAR}s expanded. Never shown: what compat says and exports is ``shown_passthrough``."""
        return tuple(_line(r) for r in self.passthrough)

    @property
    def shown_passthrough(self) -> tuple[str, ...]:
        """The pass-through lines as compat shows them: a ${VAR} the line expanded by its name, never its value."""
        return tuple(conceal_variables(_line(r), r.variables) for r in self.passthrough)

    @property
    def withheld(self) -> tuple[tuple[str, str], ...]:
        """(the line pip gets, the line as shown) for each pass-through line that expanded a ${VAR}: exports leave it out."""
        return tuple((line, shown) for line, shown, r in zip(self.passthrough_lines, self.shown_passthrough, self.passthrough) if r.variables)


def component_of(name: str) -> Optional[Component]:
    try:
        return Component.from_name(name)
    except KeyError:
        return None


def file_request(matrix: Matrix, inputs: InputSet) -> FileRequest:
    requirements: list[str] = []
    constraints: dict[Component, list[SpecifierSet]] = {}
    passthrough: list[InputRequirement] = []
    notes: list[str] = list(inputs.skipped)
    check_pins(inputs.requirements)
    pinned_by_project: dict[str, tuple[str, str]] = {}  # canonical name -> (name as written, version): one entry a project
    for item in inputs.requirements:
        if item.pinned is not None:  # the name as written (a dist-info says it so too); check_pins made every pin agree
            pinned_by_project[canonical_name(item.name)] = (item.name, str(item.pinned))
        component = component_of(item.name)
        if component is None:
            if not item.constraint:
                passthrough.append(item)
            continue
        if item.extras:
            notes.append(conceal_variables(f"{item.origin}: the extras [{','.join(sorted(item.extras))}] of {item.name} are left to pip (compat resolves the package itself)",
                                           item.variables))
        if item.url and item.pinned is None:
            notes.append(conceal_variables(f"{item.origin}: {item.name} comes from {strip_credentials(item.url)}, whose version compat cannot read; "
                                           f"compat resolves {component.label} from the matrix instead", item.variables))
        if item.constraint:
            if item.specifier:
                constraints.setdefault(component, []).append(item.specifier)
            continue
        requirements.append(f"{item.name}{item.specifier}")
    indexes = index_findings(matrix, inputs.indexes, inputs.requirements)
    notes += indexes.notes
    refused, fallbacks = runtime_sentences(matrix, passthrough)
    notes += fallbacks
    pinned = dict(pinned_by_project.values())
    return FileRequest(tuple(dict.fromkeys(requirements)), {component: all_of(sets) for component, sets in constraints.items()}, tuple(passthrough), tuple(notes),
                       indexes.warnings, pinned, inputs.warnings, tuple(said for said, _ in refused))


def runtime_sentences(matrix: Matrix, passthrough: Sequence[InputRequirement]) -> tuple[list[tuple[str, str]], list[str]]:
    """([(refusal, its distribution)], fall-backs) for the pass-through requirements on runtime wheels (matrix/runtime.py): a pin of a release
    whose dependencies no index has (pip fails), an open requirement pip quietly answers with an older release."""
    if not matrix.runtime:
        return [], []
    from ..matrix.runtime import choice_sentence, pip_choice, runtime_names

    names = runtime_names(matrix)
    refused: list[tuple[str, str]] = []
    fallbacks: list[str] = []
    for item in passthrough:
        if item.url or canonical_name(item.name) not in names:
            continue
        from packaging.requirements import Requirement  # a runtime package was asked for: not at every start (issue 35)

        choice = pip_choice(matrix, Requirement(f"{item.name}{item.specifier}"))
        said = choice_sentence(matrix, choice) if choice is not None else None
        if choice is None or said is None:
            continue
        said = conceal_variables(f"{item.origin}: {said}", item.variables)
        if choice.refused:
            refused.append((said, canonical_name(item.name)))
        else:
            fallbacks.append(said)
    return refused, fallbacks


def check_pins(requirements: Iterable[InputRequirement]) -> None:
    """pip's rule for one project named twice (requirements and -c constraints together, markers already judged): the
    specifiers add up, so an exact pin that another line of the same project excludes makes the file unresolvable
    (pip: ResolutionImpossible); an identical or compatible repeat is fine. One rule for resolve -r, check -r and
    install, all of which read files through file_request. Linear in the number of lines."""
    by_project: dict[str, list[InputRequirement]] = {}
    for item in requirements:
        by_project.setdefault(canonical_name(item.name), []).append(item)
    for items in by_project.values():
        if len(items) < 2:
            continue
        pins = list({item.pinned: item for item in items if item.pinned is not None}.values())  # each version once
        lines = list({str(item.specifier): item for item in items if item.specifier}.values())  # each specifier once
        if not pins or any(all(line.specifier.contains(pin.pinned, prereleases=True) for line in lines) for pin in pins):
            continue  # some pinned version satisfies every line (torch==2.7.0+cpu and torch==2.7.0 agree)
        pin = pins[0]
        other = next(line for line in lines if not line.specifier.contains(pin.pinned, prereleases=True))
        raise InputError(f"{other.origin}: {other.name}{other.specifier} contradicts {pin.name}=={pin.pinned} ({pin.origin}): "
                         "pip refuses these files (ResolutionImpossible), so no set can be checked or installed from them.",
                         "Keep one pin of the package.")


def _line(requirement: InputRequirement) -> str:
    if requirement.url:
        return f"{requirement.name} @ {requirement.url}" if "://" in requirement.url else requirement.url
    extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
    return f"{requirement.name}{extras}{requirement.specifier}"


# --- index lines ----------------------------------------------------------------------------------------------


def normalise_url(url: str) -> str:
    """scheme-less, lower-case host, no trailing slash: the form two spellings of one index share."""
    parts = urlsplit(strip_credentials(url.strip()))  # https://TOKEN@host/simple is that host
    return f"{parts.netloc.lower()}{parts.path.rstrip('/')}"


class IndexFindings(Record):
    notes: tuple[str, ...]
    warnings: tuple[str, ...]


def host_of(matrix: Matrix, url: str) -> Optional[str]:
    """The matrix host id an index URL names (the host's own URL, however spelled), or None."""
    wanted = normalise_url(url)
    for host_id, host in matrix.hosts.items():
        if normalise_url(host.url) == wanted:
            return host_id
    return None


def mirrored(matrix: Matrix, host: Optional[str]) -> tuple[str, ...]:
    """The hosts whose files ``host`` serves: itself and, for a declared mirror (matrix `mirror_of`), the host it
    mirrors (and so on, each once); () for None."""
    chain: list[str] = []
    while host is not None and host in matrix.hosts and host not in chain:
        chain.append(host)
        host = matrix.hosts[host].mirror_of or None
    return tuple(chain)


def index_findings(matrix: Matrix, lines: Sequence[IndexLine], requirements: Iterable[InputRequirement]) -> IndexFindings:
    """What the files' own index lines mean: which matrix host each names, a pin none of them can serve, and a name
    only an extra index has (any project registered under that name on PyPI would compete with it: dependency confusion)."""
    notes: list[str] = []
    warnings: list[str] = []
    known: set[str] = set()
    unknown: list[IndexLine] = []
    replaces_pypi = any(line.kind in ("index-url", "no-index") for line in lines)
    extra_index = [line for line in lines if line.kind == "extra-index-url"]
    for line in lines:
        if line.kind == "no-index":
            continue
        host = host_of(matrix, line.url)
        if host is None:
            unknown.append(line)
            notes.append(f"{line.origin}: {_flag(line)} {line.written or line.url} is not a host in the matrix; compat takes each package from its own host "
                         "instead (--index HOST=URL points a host at a mirror)")
        else:
            known.add(host)
            notes.append(f"{line.origin}: {_flag(line)} {line.written or line.url} is the matrix host '{host}'")
    sources = {served for host in known for served in mirrored(matrix, host)} | (set() if replaces_pypi else {"pypi"})
    for item in requirements:
        component = component_of(item.name)
        if component is None or item.constraint:
            continue
        device = device_build(matrix, component, item.pinned) if item.pinned is not None else None
        if device is not None:  # a GPU build lives on its own hosts, never on the CPU hosts of the same number
            named = {normalise_url(line.url) for line in lines if line.url} | ({normalise_url(item.index)} if item.index else set())
            if not item.url and not named & {normalise_url(url) for url in device.entry.hosts}:
                warnings.append(f"{item.origin}: {component.label} {item.pinned} is an {device.device} build, published only on "
                                f"{', '.join(device.entry.hosts)}, none of which the file names: pip would stop with 'No matching distribution'")
            continue
        hosts = _hosts_with(matrix, component, item)
        # a pylock entry names its own index: that is where it comes from (one compat does not know, a mirror, is not judged)
        own = set(mirrored(matrix, host_of(matrix, item.index))) if item.index else sources
        if item.pinned is not None and hosts and not unknown and (own or not item.index) and not (hosts & own) and not item.url:
            warnings.append(f"{item.origin}: none of the file's indexes ({', '.join(sorted(own)) or 'none'}) has {component.label} {item.pinned}: "
                            f"pip would stop with 'No matching distribution'; it is on {', '.join(sorted(hosts))}, where compat takes it from")
        if extra_index and not replaces_pypi and not item.url and not _on_pypi(matrix, component):  # pip asks no index for a URL
            warnings.append(f"{item.origin}: {component.label} is not on PyPI, yet pip asks PyPI too (--extra-index-url adds to it, "
                            f"{extra_index[0].origin}): a project registered under that name there would compete with it (dependency confusion); "
                            "compat takes it from its own host only")
    return IndexFindings(tuple(notes), tuple(dict.fromkeys(warnings)))


def _flag(line: IndexLine) -> str:
    return {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "-f"}.get(line.kind, line.kind)


def _hosts_with(matrix: Matrix, component: Component, item: InputRequirement) -> set[str]:
    """The hosts that have the pinned release (any Python), from the matrix; empty when the matrix has no such release."""
    if item.pinned is None:
        return set()
    public = Version(item.pinned.public)
    for release in matrix.releases.get(component, ()):
        if public in release.versions:
            return {w.host for w in release.wheels} if release.wheels else set(matrix.policy.host_preference.get(component, ()))
    return set()


def _on_pypi(matrix: Matrix, component: Component) -> bool:
    """Whether PyPI serves the package: a pure-Python library (no wheel sets) comes from its preferred hosts."""
    releases = matrix.releases.get(component, ())
    if releases and not any(release.wheels for release in releases):
        return "pypi" in matrix.policy.host_preference.get(component, ())
    return any(wheels.host == "pypi" for release in releases for wheels in release.wheels)
