"""The dependency plan: which packages the planned wheels (and the pass-through requirements) need from the
dependency index, in which versions, with which hashes. Two planners give the same kind of answer
(runner.ReportItem):

* uv (for the uv installer, when uv >= MIN_UV is there and the target is Python >= 3.8): ``uv pip compile --generate-hashes`` for the
  target interpreter. Each planned wheel is a direct reference to the very file compat fetched from its own host
  (``torch @ file:///...``), so no index can offer that name; everything else comes from the one dependency index
  (``--index-url``, no extra index, or ``--no-index --find-links`` for a local one; ``--offline`` for a wheelhouse).
  The versions installed now are given as uv's preferences (the existing output file), so, as with pip, an installed
  version that fits is kept. uv compiles the whole closure: what is installed already in that version is dropped
  afterwards (pip's report leaves it out itself).
* pip: ``pip install --dry-run --report`` (pip >= 22.2), as before uv was used.

Either way compat then finds each dependency's file on its index and checks its published sha256
(runner.confirm_hashes): a hash a planner computed itself proves nothing.

Side effects: child processes (uv or pip, bounded, in their own process groups), files in the work folder, network
(by the planner: the dependency index).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Optional

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ..names import canonical_name
from ..processes import run_bounded
from ..render.requirements import requirement_line
from ..values import package_name_ok
from .checkpoints import checkpoint
from .errors import InstallError
from .indexes import IndexLocation
from .limits import limits
from .runner import ONLY_BINARY, FetchedWheel, ReportItem, _filename, _index_args, _last_lines, index_env, installer_env, uv_binary, uv_env

MIN_UV = Version("0.4.0")  # --no-config, --only-binary, --generate-hashes, --python for pip compile
UV_MIN_PYTHON = Version("3.8")
_SHA256 = re.compile(r"--hash=sha256:([0-9a-fA-F]{64})")


@functools.lru_cache(maxsize=4)
def uv_version(uv: str) -> Optional[Version]:
    """``uv --version`` as a Version (None when it does not answer as uv does)."""
    try:
        done = run_bounded([uv, "--version"], timeout=60, env=uv_env("", network=False))
    except (OSError, subprocess.TimeoutExpired):
        return None
    parts = done.stdout.split()
    try:
        return Version(parts[1]) if done.returncode == 0 and len(parts) > 1 and parts[0] == "uv" else None
    except InvalidVersion:
        return None


def choose_planner(python: Version) -> str:
    """"uv" when a uv that can plan is there and can plan for ``python`` (X.Y of the target), else "pip"."""
    uv = uv_binary()
    if uv is None or python < UV_MIN_PYTHON:
        return "pip"
    found = uv_version(uv)
    return "uv" if found is not None and found >= MIN_UV else "pip"


@contextlib.contextmanager
def passthrough_args(lines: Sequence[str]) -> Iterator[list[str]]:
    """pip's arguments for the pass-through requirement lines: ``-r FILE``, a requirements file in a folder only this
    user can read, removed afterwards; never the lines themselves, since a line may hold a user and password or a
    token (``name @ https://user:pw@host/...``) and every user of the machine can read a command line
    (ps, /proc/PID/cmdline). Each line goes through the one requirement writer, so none can add an option."""
    if not lines:
        yield []
        return
    text = "".join(f"{requirement_line(line)}\n" for line in lines)
    with tempfile.TemporaryDirectory(prefix="compat-requirements-") as folder:  # mode 0700
        path = Path(folder) / "pass-through.txt"
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as out:
            out.write(text)
        yield ["-r", str(path)]


def pip_report(pip: Sequence[str], python: str, files: Sequence[Path], dependency_index: IndexLocation, passthrough: Sequence[str] = (),
               dependencies: bool = True) -> list[ReportItem]:
    """What pip would install (the planned files, the pass-through requirements and their missing dependencies), with hashes;
    ``dependencies`` False: the planned files alone (--no-deps)."""
    checkpoint("plan")
    seconds = limits().pip_s
    with tempfile.NamedTemporaryFile("r", suffix=".json", delete=False) as out:
        report_path = out.name
    try:
        with passthrough_args(passthrough) as requirements:
            command = [*pip, "install", "--dry-run", "--quiet", "--disable-pip-version-check", "--no-input", *ONLY_BINARY, "--report", report_path,
                       *([] if dependencies else ["--no-deps"]), *_index_args(dependency_index), *map(str, files), *requirements]
            _run_planner("pip", command, seconds, {**installer_env(python), **index_env(dependency_index)})
        report = json.loads(Path(report_path).read_text() or "{}")
    finally:
        os.unlink(report_path)
    checkpoint("plan")
    items = []
    for entry in report.get("install", []):
        metadata = entry.get("metadata", {})
        download = entry.get("download_info", {})
        archive = download.get("archive_info") or {}
        sha = (archive.get("hashes") or {}).get("sha256") or (archive.get("hash", "").partition("sha256=")[2] or None)
        items.append(ReportItem(metadata.get("name", "?"), metadata.get("version", "?"), download.get("url", ""), sha.lower() if sha else None,
                                bool(entry.get("requested"))))
    return items


def preferences(installed: Mapping[str, str]) -> str:
    """The installed versions as pins uv prefers (its existing output file): names and versions as the standards spell them."""
    lines = []
    for name, version in sorted(installed.items()):
        try:
            Version(version)
        except InvalidVersion:
            continue
        if package_name_ok(name):  # fullmatch: a name with a trailing newline would add a line
            lines.append(f"{name}=={version}\n")
    return "".join(lines)


def uv_report(uv: str, python: str, fetched: Sequence[FetchedWheel], dependency_index: IndexLocation, passthrough: Sequence[str],
              installed: Mapping[str, str], folder: Path, offline: bool = False) -> list[ReportItem]:
    """The whole closure of the planned wheels and the pass-through requirements, as ``uv pip compile`` resolves it for
    the target interpreter ``python`` (every package with the sha256 of its files on the index)."""
    checkpoint("plan")
    source = folder / "compat-plan.in"
    # uv reads this as a requirements file: every line through the one writer, so no line adds an index or an option
    lines = [requirement_line(f"{f.package.distribution} @ {f.path.absolute().as_uri()}") for f in fetched]
    source.write_text("".join(f"{line}\n" for line in [*lines, *map(requirement_line, passthrough)]))
    output = folder / "compat-plan.txt"
    output.write_text(preferences(installed))
    seconds = limits().pip_s
    command = [uv, "pip", "compile", "--no-config", "--quiet", "--color", "never", "--python", python, *ONLY_BINARY, "--generate-hashes",
               "--no-header", "--no-annotate", *_index_args(dependency_index), *(["--offline"] if offline else []), "-o", str(output), str(source)]
    _run_planner("uv", command, seconds, {**uv_env(python), **index_env(dependency_index, "uv")})
    checkpoint("plan")
    return parse_compiled(output.read_text(), fetched)


def _logical_lines(text: str) -> list[str]:
    lines, current = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            if current:
                lines.append(current)
                current = ""
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        lines.append(current + line)
        current = ""
    if current:
        lines.append(current)
    return lines


def parse_compiled(text: str, fetched: Sequence[FetchedWheel]) -> list[ReportItem]:
    """uv's requirements output (``name==version`` or ``name @ URL``, then ``--hash=sha256:...``) as ReportItems. A
    planned wheel's line is its direct reference (url left empty: it is compat's own file); another direct reference
    (a pass-through URL) keeps its URL, its version read from the file name."""
    planned = {canonical_name(f.package.distribution): f for f in fetched}
    items = []
    for line in _logical_lines(text):
        if line.startswith("-"):
            continue  # an option line (uv writes none without --emit-*)
        head = line.split(" --hash", 1)[0].strip()
        hashes = frozenset(h.lower() for h in _SHA256.findall(line))
        try:
            requirement = Requirement(head)
        except InvalidRequirement:
            raise InstallError(f"uv planned '{head[:200]}', which compat cannot read as a requirement; nothing was changed.",
                               "Report this, with the output of `uv --version`.") from None
        name = canonical_name(requirement.name)
        wheel = planned.get(name)
        if wheel is not None:
            items.append(ReportItem(wheel.package.distribution, f"{wheel.package.version}{wheel.package.local_label}", "", wheel.sha256, True,
                                    verified=wheel.hash_from_index, hashes=hashes))
            continue
        if requirement.url:
            try:
                _, version, _, _ = parse_wheel_filename(_filename(requirement.url))
            except (InvalidWheelFilename, InvalidVersion):
                raise InstallError(f"uv planned {requirement.name} from {requirement.url[:200]}, which is not a wheel; nothing was changed.",
                                   "Pass a wheel (compat installs wheels only).") from None
            items.append(ReportItem(requirement.name, str(version), requirement.url, None, True, hashes=hashes, direct=True))
            continue
        pins = [s.version for s in requirement.specifier if s.operator == "=="]
        if len(pins) != 1:
            raise InstallError(f"uv planned '{head[:200]}', which is not one exact version; nothing was changed.",
                               "Report this, with the output of `uv --version`.")
        items.append(ReportItem(requirement.name, pins[0], "", None, False, hashes=hashes))
    return items


def _run_planner(tool: str, command: list[str], seconds: float, env: dict[str, str]) -> None:
    """Run the planner to the end within ``seconds``; a timeout or a failed resolution is one sentence plus the fix."""
    try:
        done = run_bounded(command, timeout=seconds, env=env)
    except subprocess.TimeoutExpired:
        raise InstallError(f"{tool} did not finish planning the dependencies within {seconds:.0f} s (a slow or stuck index); nothing was changed.",
                           "Check the dependency index (--index pypi=URL), or retry.") from None
    if done.returncode != 0 and unreachable(done.stderr):
        raise InstallError(f"{tool} could not reach the dependency index while planning, so nothing was changed ({tool} said: "
                           + _last_lines(_network_lines(done.stderr), 1) + " | " + _last_lines(done.stderr, 1) + ").",
                           "Check the network and the proxy settings and retry (PIP_RETRIES / UV_HTTP_RETRIES allow more tries), or use a mirror (--index pypi=URL).")
    if done.returncode != 0:
        raise InstallError(f"{tool} cannot resolve the dependencies of the planned set, so nothing was changed ({tool} said: " + _last_lines(done.stderr, 3) + ").",
                           "Check the dependency index (--index pypi=URL); compat resolve shows the planned set.")


# what pip (urllib3) and uv (reqwest/hyper) print when the index could not be reached at all, as opposed to a
# requirement that no release satisfies
_NETWORK_SIGNS = ("NewConnectionError", "ProxyError", "ConnectTimeoutError", "ReadTimeoutError", "Name or service not known",
                  "Temporary failure in name resolution", "Connection refused", "Network is unreachable", "SSLError",
                  "Max retries exceeded", "connection broken by", "dns error", "tcp connect error", "error sending request",
                  "operation timed out", "Failed to fetch")


def _network_lines(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if any(sign in line for sign in _NETWORK_SIGNS))


def unreachable(stderr: str) -> bool:
    """True when the planner's output shows it could not reach an index (the network, the proxy, DNS, TLS) and that is
    why it failed: not when pip retried a connection and then read the index anyway (it names the versions it saw), or
    uv resolved against what it read ("No solution found")."""
    if not _network_lines(stderr):
        return False
    return not (re.search(r"\(from versions: (?!none\))", stderr) or "No solution found" in stderr)
