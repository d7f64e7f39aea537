"""compat matrix verify PKG==V --with torch==X: try a pairing on this machine and record it in the overlay.

Side effects, in order: a throw-away venv in a temporary folder (removed afterwards, whatever happens); the package's
wheel installed into it alone, then torch and the package's other requirements, both through compat's own install path
(each wheel from its host, hash-checked; install/service.py, without its verification: a pairing that fails is what is
recorded, so it must stay installed to be tried); one child (run_child: own process group, a deadline) that imports torch
and the package and runs a smoke operation through the extension; the result recorded in the overlay as ``tested-here``
evidence (matrix/tested.py), a failure as a break with the import-probe classifier's error class (checks/crash.py).

The pure parts (the smoke program around the component record's smoke operation, the choice of wheels, the record) are
functions of their inputs; ``verify`` is the edge.
"""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional

from packaging.version import Version

from ..errors import CompatError, UsageError, shown
from ..matrix.model import COMPONENTS, Component, Matrix
from ..matrix.tested import VERIFIABLE, Machine, Tested, TestedProblem
from ..record import Record
from ..scratch import ORPHAN_AGE_S, claim, release, sweep_stale

MARK = "COMPAT-VERIFY-SMOKE-OK"
IMPORTED = "COMPAT-VERIFY-IMPORTED"  # printed between the imports and the smoke operation: a failure after it is the operation's
VENV_TIMEOUT_S = 300.0
SMOKE_TIMEOUT_S = 600.0  # importing torch and a package, and one tiny op: seconds, minutes on a loaded machine

def smoke_program(component: Component, module: str) -> str:
    """The child's program: import torch, then the package, then its smoke operation, then MARK."""
    return f"import torch\nimport {module} as pkg\nprint({IMPORTED!r}, flush=True)\n{COMPONENTS[component].smoke}print({MARK!r})\n"


class Pick(Record):
    """A build to install: the release's version, where its wheel comes from and its local label."""

    component: Component
    version: Version
    distribution: str
    module: str
    host: str
    label: str


class Verification(Record):
    record: Tested
    overlay: str  # where it was recorded ("" when it could not be)
    detail: tuple[str, ...]  # the classifier's detail lines and its fix, for a break
    fix: str


def parse_pin(text: str, flag: str = "PKG==V") -> tuple[Component, Version]:
    """``torchvision==0.29.1`` as (component, version); UsageError for anything else."""
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        requirement = Requirement(text)
        specifiers = list(requirement.specifier)
        if len(specifiers) != 1 or specifiers[0].operator != "==" or "*" in specifiers[0].version or requirement.marker or requirement.extras:
            raise InvalidRequirement(text)
        return Component.from_name(requirement.name), Version(specifiers[0].version)
    except KeyError:
        raise UsageError(f"'{shown(text)}' is not a package in the matrix.", _verify_these()) from None
    except (InvalidRequirement, ValueError):
        raise UsageError(f"'{shown(text)}' is not an exact pin ({flag}).", f"Write it as {flag}, e.g. torchvision==0.29.1.") from None


def _verify_these() -> str:
    """The fix that names what compat matrix verify can try: every component with a smoke operation (companions first)."""
    names = [COMPONENTS[c].label for c in sorted(VERIFIABLE, key=lambda c: COMPONENTS[c].kind != "companion")]
    return f"Verify {', '.join(names[:-1])} or {names[-1]}."


def _module(component: Component, release: Any) -> str:
    return getattr(release, "module", "") or COMPONENTS[component].module


def choose(matrix: Matrix, component: Component, version: Version, python: Version, host: Optional[str] = None) -> Pick:
    """The build of ``version`` to install for ``python``: from ``host`` when given, else the first host of the
    component's [policy.host_preference] with a wheel for that Python (a library: its first host). UsageError when the
    matrix lacks the release or that host has no wheel for the Python."""
    release = matrix.release(component, version)
    if release is None:
        raise UsageError(f"The matrix (with the overlay) does not list {component.distribution} {version}, so compat does not know where its wheels are.",
                         "Run compat matrix update first (it reads the registries), then verify again.")
    distribution, module = release.distribution, _module(component, release)
    order = [host] if host else list(matrix.policy.host_preference.get(component, ()))
    if host and host not in matrix.hosts:
        raise UsageError(f"'{shown(host)}' is not a host of the matrix.", f"Use one of: {', '.join(sorted(matrix.hosts))}.")
    wheels = getattr(release, "wheels", None)
    if not wheels:  # a pure-Python library: from its index
        return Pick(component, version, distribution, module, order[0] if order else "pypi", "")
    for name in order:
        made = next((w for w in wheels if w.host == name and w.has_python(python)), None)
        if made is not None:
            return Pick(component, version, distribution, module, name, made.local_label)
    where = f"the host {host}" if host else "any host the matrix lists"
    raise UsageError(f"{component.distribution} {version} has no Linux x86_64 wheel for Python {python.major}.{python.minor} on {where}.",
                     "Pass --python PATH of an interpreter it has wheels for" + ("" if host else ", or --host HOST") + " (compat matrix --package "
                     f"{component.distribution} lists them).")


def default_torch(matrix: Matrix, component: Component, version: Version) -> Version:
    """The torch to try a release with when --with is not given: the torch it pins; for a floor or a range, the newest
    torch of the matrix its declaration admits (the one pip would install next to it); UsageError for one that declares none."""
    release = matrix.release(component, version)
    torch = getattr(release, "torch", None)
    if isinstance(torch, Version):
        return torch
    declares = getattr(release, "declares", None)
    admitted = [t for t in matrix.versions(Component.TORCH) if declares is not None and declares(t)]
    if admitted:
        return admitted[0]
    raise UsageError(f"{component.distribution} {version} declares no torch, so compat cannot choose one to try it with.",
                     f"Pass --with torch==X, e.g. compat matrix verify {component.distribution}=={version} --with torch=={matrix.versions(Component.TORCH)[0]}.")


def requirements_to_add(requires: Sequence[str], python: Version) -> list[str]:
    """The package's own requirements that the second install adds next to torch: not torch (the pinned one is
    installed), not those of an extra, not those whose marker excludes the target Python."""
    from packaging.requirements import InvalidRequirement, Requirement

    from ..names import canonical_name

    kept = []
    environment = {"extra": "", "python_version": f"{python.major}.{python.minor}", "python_full_version": f"{python.major}.{python.minor}.0"}
    for line in requires:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            raise CompatError(f"The installed package declares a requirement pip cannot read ('{shown(line, 200)}').",
                              "Report it to the package; compat cannot install its dependencies.") from None
        if canonical_name(requirement.name) == "torch":
            continue
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue
        requirement.marker = None
        kept.append(str(requirement))
    return kept


def machine_of(snapshot: Any) -> Machine:
    return Machine(shown(snapshot.cpu.model or "unknown CPU", 200), snapshot.libc_version or "unknown", str(snapshot.python))


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def judge(returncode: Optional[int], stdout: str, stderr: str, timed_out: bool, what: str, timeout: float,
          ran: str = "the smoke operation") -> tuple[str, str, tuple[str, ...], str]:
    """(error class, summary, detail, fix) of the smoke child: error class "" when it worked. The import-probe
    classifier (checks/crash.py) names the class; an exit 0 without the smoke's mark is an error too. A failure after
    the imports finished is said to be the operation's (``ran``), not the import's."""
    from ..checks.crash import classify

    if returncode == 0 and MARK not in stdout:
        returncode = 1  # ended without finishing the program (an os._exit(0) in an import): not a success
        stderr = stderr or "the smoke program ended with status 0 before it finished"
    verdict = classify(returncode, stdout, stderr, timed_out, what, timeout)
    if verdict.ok:
        return "", "", (), ""
    summary = verdict.summary
    if IMPORTED in stdout and summary.startswith(f"importing {what}"):
        summary = f"{what} imported, then {ran}" + summary[len(f"importing {what}"):]
    return verdict.kind, summary, tuple(d for d in verdict.detail if d), verdict.fix


def _install(matrix: Matrix, picks: Sequence[Pick], locations: Mapping[str, Any], python: str, say: Callable[[str], None],
             passthrough: Sequence[str], dependencies: bool, display: str) -> None:
    from ..environment.snapshot import take_snapshot
    from ..install.errors import InstallError
    from ..install.plan import InstallPlan, PlannedPackage
    from ..install.service import InstallOptions, install

    packages = tuple(PlannedPackage(p.component, p.distribution, p.version, p.label, locations[p.host]) for p in picks)
    plan = InstallPlan(None, packages, locations["pypi"], tuple(passthrough))  # type: ignore[arg-type]  # no resolution: exact pins
    options = InstallOptions(yes=True, installer="pip", planner="pip", say=say, display=display, dependencies=dependencies, verify_installed=False)
    try:
        install(matrix, plan, take_snapshot(python), options)
    except InstallError as exc:
        fix = exc.fix or "See the output above."
        if "--allow-unverified" in fix:  # this command installs only what it can check: no such option here
            fix = "Use indexes that publish sha256 hashes (--index HOST=URL): compat matrix verify installs only wheels it can check."
        raise CompatError(f"The throw-away environment could not be installed ({exc.message.rstrip('.')}); nothing was recorded.", fix) from None


def _requires(python: str, distribution: str) -> list[str]:
    """The installed package's Requires-Dist, read by the venv's own interpreter."""
    import json

    from ..processes import run_bounded

    program = f"import importlib.metadata as m, json; print(json.dumps(m.requires({distribution!r}) or []))"
    done = run_bounded([python, "-I", "-c", program], 120)
    try:
        value = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
    except (ValueError, IndexError):
        value = None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CompatError(f"The requirements of the installed {distribution} cannot be read ({(done.stderr or 'no output').strip()[-200:]}).",
                          "Run compat matrix verify again; if it persists, report it.")
    return value


VERIFY_PREFIX = "compat-verify-"  # <tempdir>/compat-verify-XXXXXXXX: the throw-away venv, owned by this verify (scratch.py)


def unlisted_answer(matrix: Matrix, component: Component, version: Version, locations: Mapping[str, Any], session=None) -> UsageError:
    """The answer for a release the matrix (with the overlay) does not list, given before anything is built: which hosts
    list it and what they offer, read now (each page under its deadline), and the command that records its facts."""
    from ..matrix.harvest import by_release, linux_files
    from .registry import read_registries

    read = read_registries(matrix, locations, [component], session=session, metadata=False)
    listed, missing = [], []
    for page in read.pages.get(component, []):
        files = by_release(page.files).get(Version(version.public))
        if files:
            yanked = all(f.yanked for f in files)
            listed.append(f"{page.host} lists it ({len(files)} files, {len(linux_files(files))} Linux x86_64 wheels{', yanked' if yanked else ''})")
        else:
            missing.append(page.host)
    unread = [f"{host} could not be read ({why})" for host, why in sorted(read.unread.items())]
    what = f"{component.distribution} {version}"
    if listed:
        said = "; ".join(listed + ([f"{', '.join(missing)} does not"] if missing else []) + unread)
        return UsageError(f"The matrix (with the overlay) does not list {what}, so compat does not know its wheels or the torch it goes with; "
                          f"the registry, read now: {shown(said, 400)}.",
                          f"Run compat matrix update --package {component.distribution} (it records the release), then verify again.")
    if missing and not unread:
        return UsageError(f"{what} is not a release: neither the matrix nor the registry lists it ({', '.join(missing)} read now).",
                          f"Check the version: compat matrix --package {component.distribution} lists the known releases.")
    said = "; ".join(([f"{', '.join(missing)} does not list it"] if missing else []) + unread) or "no host to read"
    return UsageError(f"The matrix (with the overlay) does not list {what}, and the registry could not say whether it exists ({shown(said, 400)}).",
                      f"Run compat matrix update --package {component.distribution} when the registry can be reached, then verify again.")


def verify(matrix: Matrix, component: Component, version: Version, torch: Optional[Version], python: str, indexes: Sequence[str],
           host: Optional[str], say: Callable[[str], None], display: str = "auto", timeout: float = SMOKE_TIMEOUT_S,
           environ: Mapping[str, str] = os.environ) -> Verification:
    """Try ``version`` of ``component`` with ``torch`` in a throw-away venv made by ``python``; record it in the overlay."""
    from ..environment.child import run_child
    from ..environment.snapshot import take_snapshot
    from ..install.indexes import configure_indexes

    if component not in VERIFIABLE:
        raise UsageError(f"compat matrix verify tries a package next to torch; {component.distribution} is not one.",
                         _verify_these())
    started = time.monotonic()
    for left in sweep_stale(VERIFY_PREFIX, orphan_age=ORPHAN_AGE_S):  # a killed verify's; one without an owner once a day old
        say(f"compat: removed {left}, the throw-away venv of a verify that was killed")
    locations = configure_indexes(matrix, list(indexes))
    _check_listed(matrix, component, version, torch, host, locations)
    torch = torch if torch is not None else default_torch(matrix, component, version)
    owned = claim(VERIFY_PREFIX)
    folder = str(owned.folder)
    try:
        say(f"compat: making a throw-away venv in {folder} with {python}")
        venv_python = _make_venv(python, folder)
        snapshot = take_snapshot(venv_python)
        package = choose(matrix, component, version, snapshot.python_minor, host)
        torch_pick = choose(matrix, Component.TORCH, torch, snapshot.python_minor)
        say(f"compat: installing {package.distribution}=={version}{package.label} from {package.host} (alone), then torch=={torch}{torch_pick.label} "
            f"from {torch_pick.host} with the package's other requirements")
        _install(matrix, [package], locations, venv_python, say, (), dependencies=False, display=display)
        added = _requirements_to_pass_on(venv_python, package.distribution, version, snapshot.python_minor)
        _install(matrix, [torch_pick], locations, venv_python, say, added, dependencies=True, display=display)
        what = COMPONENTS[component].smoke_what
        say(f"compat: importing torch and {package.module} and running {what} (in a child, at most {timeout:g} s)")
        environment = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        result = run_child([venv_python, "-I", "-c", smoke_program(component, package.module)], timeout, env=environment, cwd=folder)
        error_class, summary, detail, fix = judge(result.returncode, result.stdout.decode("utf-8", "replace"), result.stderr.decode("utf-8", "replace"),
                                                  result.timed_out, package.module, timeout, what)
        record = Tested(component, version, package.host, package.label, torch, torch_pick.host, torch_pick.label, not error_class,
                        error_class, shown(summary, 400), what, time.monotonic() - started, now(), machine_of(snapshot))
    finally:
        release(owned)
    path = _record(record, matrix, environ)
    return Verification(record, path, detail, fix)


def _check_listed(matrix: Matrix, component: Component, version: Version, torch: Optional[Version], host: Optional[str],
                  locations: Mapping[str, Any]) -> None:
    """The real answer before any venv is built: the release and the torch are the matrix's (else what the registry
    says), the host one of its hosts (as choose() would say after)."""
    for what, release_version in ((component, version), (Component.TORCH, torch)):
        if release_version is not None and matrix.release(what, release_version) is None:
            raise unlisted_answer(matrix, what, release_version, locations)
    if host and host not in matrix.hosts:
        raise UsageError(f"'{shown(host)}' is not a host of the matrix.", f"Use one of: {', '.join(sorted(matrix.hosts))}.")


def _make_venv(python: str, folder: str) -> str:
    """A venv made by ``python`` in ``folder``/venv; its interpreter's path."""
    from ..processes import run_bounded

    venv = os.path.join(folder, "venv")
    try:
        made = run_bounded([python, "-m", "venv", venv], VENV_TIMEOUT_S)
    except OSError as exc:
        raise UsageError(f"{shown(python, 200)} cannot be run ({exc.strerror or exc}).", "Pass --python PATH of a Python interpreter.") from None
    if made.returncode != 0:
        raise CompatError(f"{shown(python, 200)} -m venv failed: {shown((made.stderr or made.stdout).strip()[-300:], 300)}",
                          "Pass --python PATH of an interpreter that has the venv module (Debian: apt install python3-venv).")
    return os.path.join(venv, "bin", "python")


def _requirements_to_pass_on(venv_python: str, distribution: str, version: Version, python_minor: Any) -> list[str]:
    """What the installed package requires that torch's install must also satisfy; CompatError for one compat cannot
    pass on to the installer."""
    from ..render.requirements import requirement_problem

    added = requirements_to_add(_requires(venv_python, distribution), python_minor)
    for line in added:
        if requirement_problem(line):
            raise CompatError(f"{distribution} {version} declares a requirement compat cannot pass on ('{shown(line, 200)}').",
                              "Report it to the package.")
    return added


def _record(record: Tested, matrix: Matrix, environ: Mapping[str, str]) -> str:
    """``record`` kept in the overlay (its path); a failure to is a CompatError that still says the result."""
    from ..matrix import overlay

    try:
        return overlay.record_tested(record, matrix, environ)
    except overlay.OverlayIgnored as exc:
        raise CompatError(f"The result could not be recorded: the overlay {shown(overlay.overlay_path(environ), 200)} cannot be read ({exc}). "
                          f"Result: {record.note()}", overlay.ignored_advice(exc.kind) + " Then verify again.") from None
    except TestedProblem as exc:
        raise CompatError(f"The result could not be recorded: the record would not be read back ({exc}). Result: {record.note()}",
                          "Report this as a bug of compat matrix verify, with the result above.") from None
    except overlay.LockHeld as exc:
        message, fix = exc.sentence(f"The overlay {shown(overlay.overlay_path(environ), 200)}")
        raise CompatError(f"The result could not be recorded: {message[0].lower()}{message[1:]} Result: {record.note()}", fix) from None
    except OSError as exc:
        raise CompatError(f"The result could not be recorded in {shown(overlay.overlay_path(environ), 200)} ({exc.strerror or exc}). Result: {record.note()}",
                          "Make XDG_DATA_HOME (or ~/.local/share) writable, then verify again.") from None


def verify_json(result: Verification) -> dict[str, Any]:
    """compat matrix verify --json (compatmatrix/schemas/matrix-verify-v1.json)."""
    return {"schema_version": 1, "command": "matrix verify", "result": "works" if result.record.works else "breaks",
            "evidence": "tested-here", "record": result.record.to_json(), "overlay": result.overlay, "detail": list(result.detail),
            "fix": result.fix}


def verify_lines(result: Verification) -> list[str]:
    record = result.record
    head = "WORKS " if record.works else "BREAKS"
    lines = [f"{head} {record.builds()}",
             f"  ran: {record.ran} ({record.seconds:.0f} s in all)",
             f"  machine: {record.machine.text()}"]
    if not record.works:
        lines.append(f"  error class: {record.error_class}: {record.summary}")
        lines += [f"  {d}" for d in result.detail]
        if result.fix:
            lines.append(f"  fix: {result.fix}")
    lines.append(f"recorded as tested-here evidence in {result.overlay} ({record.date})")
    return lines

