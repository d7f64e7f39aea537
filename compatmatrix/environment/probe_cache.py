"""The environment probe's answer for another interpreter, kept and reused while nothing it depends on has changed.

Running the probe with another interpreter costs a process start and a walk over its site-packages (~25 ms plus
~30 ms per 1000 distributions). What it reports about the interpreter and its packages depends on files and
environment variables only, so compat keeps that part of the answer in its cache folder
(compatmatrix/cachefiles.py: private JSON data, never code) together with the environment's fingerprint, and
reuses it while the fingerprint is unchanged:

* the interpreter: its path, the file it resolves to, pyvenv.cfg (state = present or not, mtime, size, inode,
  mode), the running C library's version, compat's version and the probe's source;
* every folder on its sys.path (adding or removing a dist-info, a .pth file or a package changes the folder's
  mtime), sitecustomize/usercustomize there, the folders of torch, IPEX and the bindings, the site folders (the
  user site even while it does not exist), each .pth file and the folders its lines name;
* every distribution's dist-info (egg-info) and the files the probe reads in it (METADATA, PKG-INFO, INSTALLER,
  direct_url.json), so an edit in place counts too;
* the folders on PATH and the programs found there (mpirun, bash, torchrun);
* the environment variables the probe reports or the interpreter reads at start-up (PYTHON*, HOME, LANG, LC_*,
  and those env_probe.ENV_NAMES / ENV_PREFIXES name).

Any difference and the probe runs again. What describes this machine and this process rather than the
environment -- CPU and topology, allowed CPUs and cgroup quota, /dev/shm -- is read afresh every time
(in-process: the same functions the probe runs, and compat's children inherit its affinity and cgroup).
An answer is kept only when nothing it depends on changed from shortly before the probe started (a change
racing the probe, or on a file system with coarse timestamps, would otherwise go unseen): the cache then
waits for the next run. ``COMPAT_NO_CACHE`` turns it off.

Side effects: reads and writes $XDG_CACHE_HOME/compatmatrix/probe-*.json; stats the watched paths.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import Any, Optional

from .. import cachefiles

FORMAT = 1
RACE_MARGIN_NS = 2_000_000_000  # a path changed this close to (or after) the probe's start: the answer is not kept
ANSWER_LIMIT = 64 << 20
#: Parts of the probe's answer that describe the environment (kept); the rest is read afresh (see the module).
KEPT = ("python", "platform", "env", "distributions", "modules", "which")
_ENV_NAMES = ("HOME", "LANG", "LD_LIBRARY_PATH", "LD_PRELOAD", "PATH")
_ENV_PREFIXES = ("PYTHON", "_PYTHON", "LC_", "SETUPTOOLS_USE_DISTUTILS")


def _signature(path: str) -> Optional[list[int]]:
    """The state of ``path`` that any change to it alters: None when it is missing."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    return [info.st_mtime_ns, info.st_size, info.st_ino, info.st_mode, info.st_dev]


def _link_signature(path: str) -> Optional[list[int]]:
    try:
        info = os.lstat(path)
    except (OSError, ValueError):
        return None
    return [info.st_mtime_ns, info.st_size, info.st_ino, info.st_mode]


def _environment() -> dict[str, str]:
    from . import env_probe

    names = set(env_probe.ENV_NAMES) | set(_ENV_NAMES)
    prefixes = tuple(env_probe.ENV_PREFIXES) + _ENV_PREFIXES
    return {k: v for k, v in sorted(os.environ.items()) if k in names or k.startswith(prefixes)}


def _glibc() -> str:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (AttributeError, OSError, ValueError):
        return ""


def _key(executable: str, probe_source: str) -> dict[str, Any]:
    from .. import __version__

    return {"executable": executable, "compat": __version__, "probe": cachefiles.digest(probe_source), "glibc": _glibc(),
            "uid": os.geteuid(), "env": _environment(), "link": _link_signature(executable)}


def _entry_name(executable: str) -> str:
    return f"probe-{cachefiles.digest(executable)[:32]}.json"


def kept_report(executable: str, probe_source: str) -> Optional[dict[str, Any]]:
    """The probe's answer for ``executable`` (an absolute path) from the kept part and the facts read afresh, when the
    environment's fingerprint still matches; None otherwise (then run the probe: :func:`probe_and_keep`)."""
    directory = cachefiles.cache_dir()
    if directory is None:
        return None
    kept = _valid(cachefiles.read_json(directory, _entry_name(executable), ANSWER_LIMIT), _key(executable, probe_source))
    if kept is None:
        return None
    fresh = machine_facts()
    if not (fresh.get("cpu") or {}).get("model"):  # the probe would ask its own platform.processor(): let it
        return None
    return _assemble(kept, fresh)


def probe_and_keep(executable: str, probe_source: str, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``run()`` -- the probe with --watch, whose answer carries "watch" -- and its environment part kept for next
    time when nothing it depends on changed from shortly before it started; the answer without "watch"."""
    directory = cachefiles.cache_dir()
    if directory is None:
        return _strip(run())
    key = _key(executable, probe_source)
    name = _entry_name(executable)
    started = time.time_ns()
    report = run()
    watch = report.get("watch") if isinstance(report, dict) else None
    report = _strip(report)
    if isinstance(watch, dict) and isinstance(watch.get("paths"), list) and all(isinstance(p, str) for p in watch["paths"]):
        paths = list(dict.fromkeys(watch["paths"]))
        states = [_signature(p) for p in paths]
        settled = all(s is None or s[0] < started - RACE_MARGIN_NS for s in states) and _settled(key["link"], started)
        if settled and key == _key(executable, probe_source):  # nothing moved while the probe ran
            entry = {"format": FORMAT, "key": key, "paths": paths, "states": states, "user_site": watch.get("user_site_enabled"),
                     "answer": {part: report.get(part) for part in KEPT}}
            cachefiles.write_json(directory, name, entry)
    return report


def _settled(state: Optional[list[int]], started: int) -> bool:
    return state is None or state[0] < started - RACE_MARGIN_NS


def _strip(report: Any) -> Any:
    if isinstance(report, dict) and "watch" in report:
        report = {k: v for k, v in report.items() if k != "watch"}
    return report


def _valid(entry: Any, key: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """The kept answer when ``entry`` is one for ``key`` and every watched path is as it was; else None."""
    if not isinstance(entry, dict) or entry.get("format") != FORMAT or entry.get("key") != key:
        return None
    paths, states, answer = entry.get("paths"), entry.get("states"), entry.get("answer")
    if not isinstance(paths, list) or not isinstance(states, list) or len(paths) != len(states) or not isinstance(answer, dict):
        return None
    for path, state in zip(paths, states):
        if not isinstance(path, str) or _signature(path) != state:
            return None
    if any(part not in answer for part in KEPT):
        return None
    return answer


def _assemble(kept: Mapping[str, Any], fresh: Mapping[str, Any]) -> dict[str, Any]:
    """The answer in the probe's own order (env_probe.report)."""
    from .env_probe import PROBE_VERSION

    return {
        "probe": PROBE_VERSION,
        "python": kept["python"],
        "platform": kept["platform"],
        "cpu": fresh["cpu"],
        "allowed_cpus": fresh["allowed_cpus"],
        "shm": fresh["shm"],
        "env": kept["env"],
        "distributions": kept["distributions"],
        "modules": kept["modules"],
        "which": kept["which"],
    }


def machine_facts() -> dict[str, Any]:
    """What the probe reads about the machine and the process (not the environment), read here, in-process."""
    import json

    from . import env_probe

    return json.loads(json.dumps({"cpu": env_probe.cpu_info(), "allowed_cpus": env_probe.allowed_cpus(), "shm": env_probe.shm_info()}))
