"""compat install with uv planning and installing (issue 15): the same guarantees as with pip, from uv's own cache.

uv plans (`uv pip compile --generate-hashes`, each planned wheel a direct reference to the file compat fetched from
its own host), compat checks every dependency's sha256 against its index and fetches it into its wheel store
(compatmatrix/install/store.py), and uv installs from those stable paths. FIXTURE wheels on a FIXTURE index on
127.0.0.1 (tests/fixture_index.py); each test has its own XDG_CACHE_HOME (compat's store, uv's and pip's caches).

Side effects: FIXTURE index servers on 127.0.0.1, venvs and caches under tmp_path, compat/uv/pip child processes.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from packaging.version import Version

from compatmatrix.install.errors import InstallError
from compatmatrix.install.indexes import IndexLocation
from compatmatrix.install.plan import WheelTarget
from compatmatrix.install.planners import parse_compiled, preferences
from compatmatrix.install.runner import ReportItem, confirm_hashes, uv_binary
from compatmatrix.install.store import WheelStore
from compatmatrix.install.wheelhouse import write_lock
from compatmatrix.target import Platform

from ..fixture_index import TORCH_SOURCE, build_wheel
from ..install_helpers import (
    CP_HERE,
    MARK_VARIABLE,
    RUNNING_PYTHON,
    STACK,
    TORCH_270,
    compat,
    copy_venv,
    diff,
    env_tree,
    loose,
    make_venv,
    new_mark,
    pip_install_fixture,
    served,
    site_packages,
    stack_index,
    survivors,
    template_venv,
    torch_wheel,
)

JOURNAL = ".compat-install-journal.json"


def _need_uv() -> None:
    from compatmatrix.install.planners import choose_planner

    if uv_binary() is None or choose_planner(Version(RUNNING_PYTHON)) != "uv":
        pytest.skip("uv (>= 0.4) is not installed here: pip install uv")


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    return template_venv(tmp_path_factory.mktemp("uv-template") / "venv")


@pytest.fixture
def venv(template, tmp_path):
    _need_uv()
    return copy_venv(template, tmp_path / "venv")


def install(python: Path, index, *extra: str, cache: Path, request=STACK, env=None) -> subprocess.CompletedProcess:
    return compat("install", "--python", str(python), "--yes", "--installer", "uv", *request, *index.index_args(), *extra,
                  env={"XDG_CACHE_HOME": str(cache), **(env or {})})


def freeze(python: Path) -> set[str]:
    done = subprocess.run([str(python), "-m", "pip", "freeze", "--all"], capture_output=True, text=True, timeout=120, check=True)
    return set(done.stdout.split())


def stored(cache: Path) -> list[Path]:
    return sorted((cache / "compatmatrix" / "wheels").glob("*/*.whl"))


# ---------------------------------------------------------------- the plan, the store, uv's cache


@pytest.mark.integration
def test_uv_plans_installs_and_the_next_install_takes_the_store(venv, template, tmp_path):
    cache = tmp_path / "cache"
    with served(stack_index(tmp_path / "index")) as index:
        first = install(venv, index, cache=cache)
        assert first.returncode == 0, first.stderr[-3000:]
        assert f"fetched {TORCH_270}" in first.stderr
        assert {"torch==2.7.0+cpu", "intel-extension-for-pytorch==2.7.0", "filelock==3.0.0"} <= freeze(venv)
        assert (site_packages(venv) / "torch-2.7.0+cpu.dist-info" / "INSTALLER").read_text().strip() == "uv"
        names = [p.name for p in stored(cache)]
        assert TORCH_270 in names and "filelock-3.0.0-py3-none-any.whl" in names, names
        for path in stored(cache):  # each kept under its own sha256, privately
            assert path.parent.name == hashlib.sha256(path.read_bytes()).hexdigest()
            assert not path.stat().st_mode & 0o077 and not path.parent.stat().st_mode & 0o077
        second_env = copy_venv(template, tmp_path / "second")
        second = install(second_env, index, cache=cache)
        assert second.returncode == 0, second.stderr[-3000:]
        assert "fetched " not in second.stderr, second.stderr[-3000:]  # every wheel from the store: nothing downloaded
        assert freeze(second_env) == freeze(venv)
        assert re.search(r"^  phases: preflight [\d.]+ s, plan [\d.]+ s, fetch [\d.]+ s, snapshot [\d.]+ s, install [\d.]+ s, verify [\d.]+ s, total", second.stderr, re.M)


@pytest.mark.integration
def test_a_name_on_the_dependency_index_cannot_shadow_a_planned_wheel(venv, tmp_path):
    """The dependency index also offers torch 2.7.0+cpu (and a newer torch): torch still comes from pytorch-cpu only."""
    index = stack_index(tmp_path / "index")
    evil = TORCH_SOURCE + "\nEVIL = 'from the dependency index'\n"
    index.add("pypi", build_wheel(tmp_path / "evil", "torch", "2.7.0+cpu", CP_HERE, requires=("filelock",), init_source=evil))
    index.add("pypi", build_wheel(tmp_path / "evil-new", "torch", "2.7.1+cpu", CP_HERE, init_source=evil))
    with served(index):
        done = install(venv, index, cache=tmp_path / "cache")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "EVIL" not in (site_packages(venv) / "torch" / "__init__.py").read_text()
    assert "torch==2.7.0+cpu" in freeze(venv)


@pytest.mark.integration
def test_a_dependency_without_a_published_sha256_needs_allow_unverified(venv, tmp_path):
    index = stack_index(tmp_path / "index")
    index.hashes["pypi"] = "none"  # filelock, torch's dependency, comes from there
    before = env_tree(venv)
    with served(index):
        done = install(venv, index, cache=tmp_path / "cache", request=("torch==2.7.0",))
        assert done.returncode == 1 and "filelock" in done.stderr and "--allow-unverified" in done.stderr, done.stderr[-2000:]
        assert env_tree(venv) == before
        strict = install(venv, index, "--allow-unverified", "--require-hashes", cache=tmp_path / "cache", request=("torch==2.7.0",))
        assert strict.returncode == 1 and env_tree(venv) == before, strict.stderr[-2000:]
        allowed = install(venv, index, "--allow-unverified", cache=tmp_path / "cache", request=("torch==2.7.0",))
    assert allowed.returncode == 0, allowed.stderr[-2000:]
    assert "unverified: filelock 3.0.0" in allowed.stderr
    assert "filelock==3.0.0" in freeze(venv)


@pytest.mark.integration
def test_a_dependency_the_index_serves_altered_is_refused(venv, tmp_path):
    index = stack_index(tmp_path / "index")
    index.corrupt.add("filelock-3.0.0-py3-none-any.whl")
    before = env_tree(venv)
    with served(index):
        done = install(venv, index, cache=tmp_path / "cache")
    assert done.returncode == 1, done.stderr[-2000:]
    assert "nothing was changed" in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert env_tree(venv) == before
    assert not [p for p in stored(tmp_path / "cache") if p.name.startswith("filelock")]


@pytest.mark.integration
def test_an_installed_version_that_fits_is_kept(venv, tmp_path):
    """As pip does: filelock 3.0.0 is installed and fits torch's requirement, so uv keeps it though 3.1.0 is newer."""
    index = stack_index(tmp_path / "index")
    index.add("pypi", build_wheel(tmp_path / "newer", "filelock", "3.1.0"))
    pip_install_fixture(venv, index.hosts["pypi"][0])  # filelock 3.0.0
    with served(index):
        done = install(venv, index, cache=tmp_path / "cache")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (site_packages(venv) / "filelock-3.0.0.dist-info").is_dir() and not (site_packages(venv) / "filelock-3.1.0.dist-info").exists()
    assert not re.search(r"^  \w+ +filelock ", done.stderr, re.M), done.stderr[-3000:]  # not in the list of changes


@pytest.mark.integration
def test_what_uv_cannot_resolve_is_one_sentence_and_changes_nothing(venv, tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("torch==2.7.0\nno-such-package-anywhere==1.0\n")
    before = env_tree(venv)
    with served(stack_index(tmp_path / "index")) as index:
        done = install(venv, index, "-r", str(requirements), cache=tmp_path / "cache", request=())
    assert done.returncode == 1, done.stderr[-2000:]
    assert "uv cannot resolve the dependencies of the planned set, so nothing was changed (uv said:" in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert env_tree(venv) == before


@pytest.mark.integration
def test_the_planner_flag_chooses_who_plans_whatever_installs(venv, tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("torch==2.7.0\nno-such-package-anywhere==1.0\n")
    with served(stack_index(tmp_path / "index")) as index:
        planned_by_pip = install(venv, index, "-r", str(requirements), "--planner", "pip", cache=tmp_path / "cache", request=())
        planned_by_uv = compat("install", "--python", str(venv), "--yes", "--installer", "pip", "--planner", "uv", "-r", str(requirements),
                               *index.index_args(), env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert planned_by_pip.returncode == 1 and "pip cannot resolve the dependencies of the planned set" in planned_by_pip.stderr, planned_by_pip.stderr[-2000:]
    assert planned_by_uv.returncode == 1 and "uv cannot resolve the dependencies of the planned set" in planned_by_uv.stderr, planned_by_uv.stderr[-2000:]


@pytest.mark.integration
def test_uv_settings_in_the_environment_cannot_move_the_install(venv, tmp_path):
    constraint = tmp_path / "constraints.txt"
    constraint.write_text("filelock==9.9.9\n")
    settings = {"UV_INDEX_URL": "http://127.0.0.1:9/simple", "UV_EXTRA_INDEX_URL": "http://127.0.0.1:9/extra", "UV_CONSTRAINT": str(constraint),
                "UV_NO_BINARY": "1", "UV_LINK_MODE": "symlink", "UV_SYSTEM_PYTHON": "1", "UV_PYTHON": "/nonexistent/python"}
    with served(stack_index(tmp_path / "index")) as index:
        done = install(venv, index, cache=tmp_path / "cache", env=settings)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "filelock==3.0.0" in freeze(venv)
    assert not (site_packages(venv) / "torch").is_symlink() and not any(p.is_symlink() for p in (site_packages(venv) / "torch").iterdir())


@pytest.mark.integration
def test_a_damaged_store_entry_is_fetched_again_and_a_shared_store_is_not_used(venv, template, tmp_path):
    cache = tmp_path / "cache"
    with served(stack_index(tmp_path / "index")) as index:
        assert install(venv, index, cache=cache).returncode == 0
        torch = next(p for p in stored(cache) if p.name == TORCH_270)
        torch.chmod(0o600)
        with open(torch, "ab") as out:
            out.write(b"tampered")
        again = copy_venv(template, tmp_path / "again")
        done = install(again, index, cache=cache)
        assert done.returncode == 0, done.stderr[-3000:]
        assert f"fetched {TORCH_270}" in done.stderr  # the damaged copy was dropped and the wheel fetched again
        assert "torch==2.7.0+cpu" in freeze(again)
        assert torch.parent.name == hashlib.sha256(torch.read_bytes()).hexdigest()
        (cache / "compatmatrix" / "wheels").chmod(0o777)  # writable by anyone: compat does not use it
        shared = copy_venv(template, tmp_path / "shared")
        done = install(shared, index, cache=cache)
        assert done.returncode == 0, done.stderr[-3000:]
        assert f"fetched {TORCH_270}" in done.stderr
        (cache / "compatmatrix" / "wheels").chmod(0o700)
        off = copy_venv(template, tmp_path / "off")
        done = install(off, index, cache=tmp_path / "cache-off", env={"COMPAT_NO_CACHE": "1"})
        assert done.returncode == 0, done.stderr[-3000:]
        assert not stored(tmp_path / "cache-off")


# ---------------------------------------------------------------- SIGKILL at points of every phase, with uv


KILLS = {"preflight": 1, "plan": 3, "fetch": 1, "snapshot": 4, "install": 2, "verify": 2, "commit": 2}


def _checkpoints(stderr: str) -> Counter:
    counts: Counter = Counter()
    for phase, n in re.findall(r"^compat-test-checkpoint (\S+) (\d+)$", stderr, re.M):
        counts[phase] = max(counts[phase], int(n))
    return counts


@pytest.mark.integration
def test_sigkill_with_uv_leaves_the_old_or_the_new_environment(template, tmp_path):
    """The kill-point test (tests/install/test_install_killpoints.py) in small, with uv planning and installing: the store is
    warm after the first run, so the points are drawn from the second (they do not move after that)."""
    _need_uv()
    rng = random.Random(20261124)
    work = tmp_path / "venv"
    cache = tmp_path / "cache"
    with served(stack_index(tmp_path / "index")) as index:
        args = ("install", "--python", str(work / "bin" / "python"), "--yes", "--installer", "uv", *STACK, *index.index_args())
        env = {"XDG_CACHE_HOME": str(cache)}
        python = copy_venv(template, work)
        before = env_tree(python)
        assert compat(*args, env={**env, "COMPAT_TEST_KILL_AT": "count:0"}).returncode == 0
        python = copy_venv(template, work)
        full = compat(*args, env={**env, "COMPAT_TEST_KILL_AT": "count:0"})
        assert full.returncode == 0, full.stderr[-3000:]
        after = env_tree(python)
        counts = _checkpoints(full.stderr)
        assert set(KILLS) <= set(counts), counts
        points = [(phase, n) for phase, wanted in KILLS.items()
                  for n in sorted(rng.sample(range(1, counts[phase] + 1), min(wanted, counts[phase])))]
        outcomes: Counter = Counter()
        orphans: list[str] = []
        for phase, n in points:
            python = copy_venv(template, work)
            mark = new_mark()
            killed = compat(*args, env={**env, "COMPAT_TEST_KILL_AT": f"{phase}:{n}", MARK_VARIABLE: mark})
            orphans += [f"{phase}:{n} {line}" for line in survivors(mark, grace=2.0)]
            if killed.returncode == 0 and phase == "install":
                outcomes["installer finished first"] += 1
            else:
                assert killed.returncode == -signal.SIGKILL, (phase, n, killed.returncode, killed.stderr[-2000:])
            if (site_packages(python).parent / JOURNAL).exists():
                refused = compat(*args, env=env)
                assert refused.returncode == 1 and "--restore" in refused.stderr, (phase, n, refused.stderr[-1500:])
                restored = compat("install", "--restore", "--python", str(python), env=env)
                assert restored.returncode == 0, (phase, n, restored.stderr[-1500:])
                state = env_tree(python)
                assert state == before, (phase, n, "after --restore", diff(before, state))
                outcomes["journal, restored to before"] += 1
            else:
                state = env_tree(python)
                assert state == before or loose(state) == loose(after), (phase, n, diff(before, state), diff(loose(after), loose(state)))
                outcomes["no journal, " + ("before" if state == before else "complete new state")] += 1
        print(f"\nuv kill points: {points}; outcomes: {dict(outcomes)}")
    assert orphans == [], orphans


# ---------------------------------------------------------------- pieces, without a network


def _wheel(folder: Path, name: str, version: str) -> Path:
    return build_wheel(folder, name, version)


def test_uv_output_is_read_into_items(tmp_path):
    from compatmatrix.install.indexes import Link
    from compatmatrix.install.plan import PlannedPackage
    from compatmatrix.install.runner import FetchedWheel
    from compatmatrix.matrix.model import Component

    torch = torch_wheel(tmp_path, "2.7.0+cpu")
    location = IndexLocation("pytorch-cpu", "http://127.0.0.1:9/simple", "index", "--index")
    planned = FetchedWheel(PlannedPackage(Component.TORCH, "torch", Version("2.7.0"), "+cpu", location),
                           Link(torch.name, "http://x/" + torch.name, "a" * 64, None, False), torch, "a" * 64, True)
    text = (f"filelock==3.0.0 \\\n    --hash=sha256:{'b' * 64} \\\n    --hash=sha256:{'C' * 64}\n"
            f"torch @ {torch.as_uri()} \\\n    --hash=sha256:{'a' * 64}\n"
            f"extra-wheel @ https://example.invalid/extra_wheel-1.2-py3-none-any.whl \\\n    --hash=sha256:{'d' * 64}\n")
    items = {i.name: i for i in parse_compiled(text, [planned])}
    assert items["filelock"].version == "3.0.0" and items["filelock"].hashes == {"b" * 64, "c" * 64} and not items["filelock"].url
    assert items["torch"].version == "2.7.0+cpu" and items["torch"].requested and items["torch"].sha256 == "a" * 64
    assert items["extra-wheel"].direct and items["extra-wheel"].version == "1.2"
    with pytest.raises(InstallError, match="not one exact version"):
        parse_compiled("filelock>=3\n", [])


def test_installed_versions_become_preferences_that_uv_can_read():
    text = preferences({"filelock": "3.0.0", "torch": "2.8.0+cpu", "bad name": "1.0", "odd": "not a version", "-e": "1"})
    assert text == "filelock==3.0.0\ntorch==2.8.0+cpu\n"


def test_a_dependency_is_taken_only_with_the_sha256_its_index_publishes(tmp_path):
    folder = tmp_path / "index"
    wheel = _wheel(folder, "filelock", "3.0.0")
    write_lock(folder, [wheel])
    published = hashlib.sha256(wheel.read_bytes()).hexdigest()
    location = IndexLocation("pypi", str(folder), "find-links", "--index")
    target = WheelTarget(Version(RUNNING_PYTHON), Platform.from_tag("manylinux_2_28_x86_64"))
    good = ReportItem("filelock", "3.0.0", "", None, False, hashes=frozenset({published, "e" * 64}))
    (item,) = confirm_hashes(None, [good], [], location, target, "uv")
    assert item.verified and item.sha256 == published and item.link is not None and item.link.filename == wheel.name
    other = ReportItem("filelock", "3.0.0", "", None, False, hashes=frozenset({"e" * 64}))
    with pytest.raises(InstallError, match="as uv got it does not match the sha256"):
        confirm_hashes(None, [other], [], location, target, "uv")
    missing = ReportItem("filelock", "9.0", "", None, False, hashes=frozenset({published}))
    with pytest.raises(InstallError, match="has no wheel of filelock==9.0"):
        confirm_hashes(None, [missing], [], location, target, "uv")


def test_the_store_keeps_checks_and_forgets(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("COMPAT_NO_CACHE", raising=False)
    wheel = _wheel(tmp_path / "w", "filelock", "3.0.0")
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    store = WheelStore.open()
    assert store is not None
    data = wheel.read_bytes()
    kept = store.put(wheel, sha)
    assert kept is not None and kept.read_bytes() == data and kept.parent.name == sha
    assert not wheel.exists()  # moved in (the same file system), not copied
    assert store.get(sha, wheel.name) == kept
    assert store.get(sha, "other-1.0-py3-none-any.whl") is None and store.get("f" * 64, wheel.name) is None and store.get("../x", wheel.name) is None
    os.utime(kept, ns=(0, 0))  # a changed stat: hashed again, still right, kept
    assert store.get(sha, wheel.name) == kept
    with open(kept, "ab") as out:
        out.write(b"x")
    assert store.get(sha, wheel.name) is None and not kept.parent.exists()  # damaged: dropped
    wheel.write_bytes(data)
    kept = store.put(wheel, sha, "http://index.example/simple")
    assert kept is not None and store.published(sha, "http://index.example/simple") == kept and store.published(sha, "http://other/simple") is None
    assert kept is not None
    old = 1_000_000_000
    os.utime(kept.parent / ".checked", (old, old))
    store.prune()
    assert not kept.parent.exists()
    monkeypatch.setenv("COMPAT_NO_CACHE", "1")
    assert WheelStore.open() is None



@pytest.fixture(scope="module")
def tls_index(tmp_path_factory):
    """The FIXTURE stack over https (tests/install/test_tls_trust.py's throwaway CA and server): (index, the CA, another CA)."""
    from .test_tls_trust import make_ca, make_server_cert, serve_tls

    if not shutil.which("openssl"):
        pytest.skip("the openssl command is not installed (Debian: apt-get install openssl)")
    folder = tmp_path_factory.mktemp("uv-pki")
    ca, ca_key = make_ca(folder, "ca")
    other, _ = make_ca(folder, "other-ca")
    cert, key = make_server_cert(folder, ca, ca_key)
    index = stack_index(tmp_path_factory.mktemp("uv-tls-index"))
    server = serve_tls(index, cert, key)
    yield index, ca, other
    server.shutdown()
    server.server_close()


@pytest.mark.integration
def test_uv_trusts_the_ca_compat_trusts(tls_index, tmp_path):
    """Behind a TLS-intercepting proxy with its CA named once (PIP_CERT): compat's own requests and uv's planning both
    check the index against it (trust.give_uv: SSL_CERT_FILE for uv)."""
    from .test_tls_trust import compat as compat_tls

    _need_uv()
    index, ca, other_ca = tls_index
    python = make_venv(tmp_path / "venv")
    done = compat_tls("install", "--python", str(python), "--installer", "uv", "torch==2.7.0", *index.index_args(),
                      env={"PIP_CERT": str(ca), "XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "OK: installed and verified" in done.stderr
    assert {"torch==2.7.0+cpu", "filelock==3.0.0"} <= freeze(python)
    other = make_venv(tmp_path / "other")
    refused = compat_tls("install", "--python", str(other), "--installer", "uv", "torch==2.7.0", *index.index_args(),
                         env={"PIP_CERT": str(other_ca), "XDG_CACHE_HOME": str(tmp_path / "cache2")})
    assert refused.returncode == 1 and "cannot be verified" in refused.stderr, refused.stderr[-2000:]


def test_a_json_index_page_is_read_with_the_rules_of_an_html_one():
    """PEP 691 pages (PyPI's, read ~20x faster than its HTML): the same links, hashes and refusals as parse_links."""
    from compatmatrix.install.indexes import IndexRefused, parse_json_links

    good = "A" * 64
    page = json.dumps({"meta": {"api-version": "1.1"}, "name": "filelock", "files": [
        {"filename": "filelock-3.0.0-py3-none-any.whl", "url": "../../files/filelock-3.0.0-py3-none-any.whl", "hashes": {"sha256": good}},
        {"filename": "filelock-3.0.0.tar.gz", "url": "x.tar.gz", "hashes": {}},  # not a wheel
        {"filename": "filelock-2.0-py3-none-any.whl", "url": "https://files.example/f2.whl", "hashes": {"md5": "0" * 32}, "yanked": "broken"},
        {"filename": "evil-1.0-py3-none-any.whl", "url": "file:///etc/passwd", "hashes": {}},  # a remote page cannot name a local file
        {"filename": "../up-1.0-py3-none-any.whl", "url": "https://files.example/up.whl", "hashes": {}},
        "not an object", {"filename": 3, "url": None},
    ]})
    links = parse_json_links(page, "https://index.example/simple/filelock/")
    assert [(lk.filename, lk.url, lk.sha256, lk.other_hash, lk.yanked) for lk in links] == [
        ("filelock-3.0.0-py3-none-any.whl", "https://index.example/files/filelock-3.0.0-py3-none-any.whl", "a" * 64, None, False),
        ("filelock-2.0-py3-none-any.whl", "https://files.example/f2.whl", None, "md5", True),
    ]
    assert parse_json_links("", "https://index.example/simple/x/") == []
    for bad in ("<html>not json</html>", json.dumps({"files": "nope"}), json.dumps([1, 2])):
        with pytest.raises(IndexRefused):
            parse_json_links(bad, "https://index.example/simple/filelock/")
