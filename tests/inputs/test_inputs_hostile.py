"""Issue 19, the readers' part: markers judged for the real target (never guessed), pip's rule for a project pinned
twice, bounded reading (includes once, caps, linear), names/versions typed at the edge, and pip's reading of -f on a
requirement line, mirrors, wheel tags and names, torch_ipex and device builds. Each case failed on 810247e."""

from __future__ import annotations

import json
import os
import sys
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from packaging.markers import default_environment
from packaging.version import Version

from compatmatrix.inputs import InputError, read_inputs
from compatmatrix.inputs import read as read_module
from compatmatrix.inputs import request as request_module
from compatmatrix.inputs.request import file_request
from compatmatrix.target import PythonTarget

from ..cli.test_cli_fuzz import run_in_process

PYTHON_3_11_7 = """\
torch==2.7.0; python_full_version < "3.11.7"
torch==2.8.0; python_full_version >= "3.11.7"
intel-extension-for-pytorch==2.7.0
"""


def write(tmp_path, name, text):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return str(path)


def run(argv, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("COMPAT_CRASH_DIR", str(tmp_path))
    monkeypatch.delenv("COMPAT_MATRIX", raising=False)
    monkeypatch.delenv("COMPAT_PYTHON", raising=False)
    code, out, err = run_in_process(argv, capsys)
    assert "internal error" not in err and "Traceback" not in out + err, err[-2000:]
    return code, out, err


# --- markers ---------------------------------------------------------------------------------------------------------


def test_python_full_version_is_not_guessed_from_x_y(tmp_path):
    path = write(tmp_path, "r.txt", PYTHON_3_11_7)
    inputs = read_inputs([path], Version("3.11"))
    assert [r.name for r in inputs.requirements] == ["intel-extension-for-pytorch"]  # both torch lines left out, not 3.11.0's
    assert len(inputs.warnings) == 2 and all("python_full_version" in w and "--python-version 3.11.Z" in w for w in inputs.warnings)
    assert f"{path}:1" in inputs.warnings[0]


def test_a_full_python_version_decides_it_and_check_fails_the_pair(tmp_path, capsys, monkeypatch):
    path = write(tmp_path, "r.txt", PYTHON_3_11_7)
    code, out, _ = run(["check", "-r", path, "--python-version", "3.11.7"], capsys, monkeypatch, tmp_path)
    assert code == 1 and "intel-extension-for-pytorch 2.7.0 does not work with torch 2.8.0" in out


def test_platform_release_is_said_not_taken_as_empty(tmp_path):
    path = write(tmp_path, "r.txt", 'torch==2.7.0; platform_release >= "5"\n')
    inputs = read_inputs([path], Version("3.11"))
    assert inputs.requirements == () and not inputs.skipped
    assert "platform_release" in inputs.warnings[0] and "leaves the line out rather than guess" in inputs.warnings[0]


def test_a_marker_decided_by_what_is_known_needs_nothing_else(tmp_path):
    path = write(tmp_path, "r.txt", 'torch==2.7.0; python_version < "3.10" and platform_release >= "5"\n'
                                    'six==1.16; python_version >= "3.10" or platform_version == "x"\n')
    inputs = read_inputs([path], Version("3.11"))
    assert [r.name for r in inputs.requirements] == ["six"] and not inputs.warnings and len(inputs.skipped) == 1


def test_an_interpreters_own_values_decide_every_marker(tmp_path):
    path = write(tmp_path, "r.txt", 'torch==2.7.0; platform_release == "6.1.0-fixture"\ntorch==2.8.0; platform_release != "6.1.0-fixture"\n')
    values = dict(default_environment(), platform_release="6.1.0-fixture", python_full_version="3.11.7")
    target = PythonTarget(version=Version("3.11"), full=Version("3.11.7"), origin="--python /fixture/python",
                          markers=tuple(sorted(values.items())), markers_platform="linux_x86_64")
    inputs = read_inputs([path], target)
    assert [str(r.pinned) for r in inputs.requirements] == ["2.7.0"] and not inputs.warnings


def test_the_probe_reports_the_interpreters_marker_values():
    from compatmatrix.environment.interpreter import query_interpreter

    info = query_interpreter(sys.executable)
    assert dict(info.markers) == {k: v for k, v in default_environment().items() if k != "extra"}
    assert dict(info.python_target("--python x").markers)["platform_release"] == os.uname().release


def test_the_running_interpreter_is_its_own_target(tmp_path):
    path = write(tmp_path, "r.txt", f'torch==2.7.0; platform_release == "{os.uname().release}"\n')
    inputs = read_inputs([path], PythonTarget.running())
    assert [r.name for r in inputs.requirements] == ["torch"] and not inputs.warnings


# --- a project pinned twice: pip's rule, for check -r, resolve -r and install --------------------------------------


@pytest.mark.parametrize("command", [["check"], ["resolve"], ["install", "--dry-run"]])
def test_two_pins_of_one_project_are_refused_as_pip_refuses_them(tmp_path, capsys, monkeypatch, command):
    path = write(tmp_path, "r.txt", "torch==2.7.0\nintel-extension-for-pytorch==2.7.0\ntorch==2.8.0\n")
    code, _, err = run([*command, "-r", path, "--python-version", "3.11"], capsys, monkeypatch, tmp_path)
    assert code == 2 and f"{path}:3: torch==2.8.0 contradicts torch==2.7.0" in err and "ResolutionImpossible" in err


@pytest.mark.parametrize("text", ["six==1.16.0\nsix==1.16.0\n", "Six==1.16\nsix==1.16.0\nsix>=1.10\n", "torch==2.7.0+cpu\ntorch==2.7.0\n"])
def test_repeats_pip_accepts_are_accepted(tmp_path, matrix, text):
    path = write(tmp_path, "r.txt", text)
    file_request(matrix, read_inputs([path], Version("3.11")))


def test_a_pin_and_a_constraint_that_excludes_it_are_refused(tmp_path, matrix):
    write(tmp_path, "c.txt", "six<1.16\n")
    path = write(tmp_path, "r.txt", "-c c.txt\nsix==1.16.0\n")
    with pytest.raises(InputError, match="ResolutionImpossible"):
        file_request(matrix, read_inputs([path], Version("3.11")))


# --- bounds ----------------------------------------------------------------------------------------------------------


def test_pins_are_read_in_linear_time(tmp_path, matrix, monkeypatch):
    calls = []
    real = request_module.canonical_name
    monkeypatch.setattr(request_module, "canonical_name", lambda name: calls.append(name) or real(name))
    path = write(tmp_path, "r.txt", "".join(f"pkg{i}==1.0\n" for i in range(2000)))
    file_request(matrix, read_inputs([path], Version("3.11")))
    assert len(calls) < 10 * 2000  # 810247e: one comparison with every earlier pin, ~2,000,000


def test_a_package_pinned_on_many_lines_keeps_one_specifier(tmp_path, matrix):
    """resolve -r of a file pinning torch on 40,000 lines took 8.6 s (10,000: 1.1 s): packaging >= 26 keeps repeats in
    ``a & b``, so each line copied an ever longer set. Each specifier is kept once, whatever the road: requirement
    lines, -c lines, and a constraint on top of a requirement."""
    from compatmatrix.matrix.model import Component
    from compatmatrix.resolve import with_constraints

    from ..conftest import make_request

    write(tmp_path, "c.txt", "torch<2.8\n" * 300)
    path = write(tmp_path, "r.txt", "-c c.txt\n" + "torch==2.7.0\n" * 300)
    asked = file_request(matrix, read_inputs([path], Version("3.11")))
    assert [str(s) for s in asked.constraints[Component.TORCH]] == ["<2.8"]
    request = make_request(matrix, "3.11", *(["torch==2.7.0"] * 300))
    assert [str(s) for s in request.specifiers[Component.TORCH]] == ["==2.7.0"]
    joined = with_constraints(matrix, request, asked.constraints)
    joined = with_constraints(matrix, joined, asked.constraints)
    assert sorted(str(s) for s in joined.specifiers[Component.TORCH]) == ["<2.8", "==2.7.0"]


def test_a_diamond_of_includes_reads_each_file_once(tmp_path):
    levels = 8
    for level in range(levels):
        nxt = f"-r l{level + 1}a.txt\n-r l{level + 1}b.txt\n" if level + 1 < levels else ""
        for side in "ab":
            write(tmp_path, f"l{level}{side}.txt", f"pkg{level}{side}==1.0\n{nxt}")
    top = write(tmp_path, "top.txt", "-r l0a.txt\n-r l0b.txt\n")
    reads = []

    def reader(path):
        reads.append(str(path))
        return read_module._read_text(path)

    inputs = read_inputs([top], Version("3.11"), reader=reader)
    assert len(reads) == len(set(reads)) == 1 + 2 * levels  # 810247e: 2**levels reads of the last level
    assert len(inputs.requirements) == 2 * levels


def test_an_include_cycle_ends_with_a_sentence(tmp_path):
    write(tmp_path, "b.txt", "-r a.txt\n")
    a = write(tmp_path, "a.txt", "-r b.txt\n")
    with pytest.raises(InputError) as caught:
        read_inputs([a], Version("3.11"))
    message = str(caught.value)
    assert message.startswith(f"{tmp_path}/b.txt:1: '-r a.txt': ") and "the includes loop" in message, message
    assert f"({a} -> {tmp_path}/b.txt -> {a})" in message and "limit" not in message


def test_a_long_chain_of_distinct_includes_is_read_and_only_a_far_longer_one_meets_the_depth_limit(tmp_path):
    """The old code refused a chain of 22 distinct files (limit 20) as though it looped; the limit is now its own
    message, far above any real chain, and says the files are all different."""
    for level in range(23):
        write(tmp_path, f"f{level}.txt", f"pkg{level}==1.0\n" + (f"-r f{level + 1}.txt\n" if level < 22 else ""))
    inputs = read_inputs([str(tmp_path / "f0.txt")], Version("3.11"))
    assert len(inputs.requirements) == 23
    levels = read_module.MAX_DEPTH + 2
    for level in range(levels):
        write(tmp_path, f"g{level}.txt", f"-r g{level + 1}.txt\n" if level < levels - 1 else "six\n")
    with pytest.raises(InputError) as caught:
        read_inputs([str(tmp_path / "g0.txt")], Version("3.11"))
    message = str(caught.value)
    assert f"a chain of {read_module.MAX_DEPTH + 1} nested includes" in message and "no loop" in message and "the includes loop" not in message
    assert message.startswith(f"{tmp_path}/g{read_module.MAX_DEPTH}.txt:1: '-r g{read_module.MAX_DEPTH + 1}.txt'"), message


def test_all_files_together_are_capped(tmp_path, monkeypatch):
    monkeypatch.setattr(read_module, "MAX_LINES", 50)
    write(tmp_path, "inc.txt", "".join(f"pkg{i}\n" for i in range(40)))
    top = write(tmp_path, "top.txt", "-r inc.txt\n" + "".join(f"other{i}\n" for i in range(40)))
    with pytest.raises(InputError, match="together pass"):
        read_inputs([top], Version("3.11"))


# --- names, versions and malformed locks typed at the edge ------------------------------------------------------------


@pytest.mark.parametrize("entry, key", [
    ('name = "torch\\n--index-url https://evil.example/simple"\nversion = "2.7.0"', "packages[1].name"),
    ('name = "torch"\nversion = "2.7.0\\nx"', "version"),
    ('name = 5\nversion = "2.7.0"', "name is a int"),
    ('name = "torch"\nversion = ["2.7.0"]', "version is a list"),
    ('name = "torch"\nversion = "2.7.0"\nwheels = "x"', "wheels is not an array"),
    ('name = "torch"\nversion = "2.7.0"\nwheels = [1]', "wheels[1] is not a table"),
    ('name = "torch"\nversion = "2.7.0"\nmarker = 3', "marker is a int"),
    ('name = "torch"\nversion = "2.7.0"\nindex = "https://x\\u001b[31m"', "index holds a control character"),
    ('name = "torch"\nversion = "2.7.0"\nwheels = [{url = "https://h.example/evil-2.7.0-py3-none-any.whl"}]', "wheels[1].url is a wheel of another project"),
])
def test_a_malformed_pylock_is_one_sentence_naming_the_key(tmp_path, capsys, monkeypatch, entry, key):
    path = write(tmp_path, "pylock.toml", f'lock-version = "1.0"\n[[packages]]\n{entry}\n')
    code, out, err = run(["check", "-r", path, "--python-version", "3.11"], capsys, monkeypatch, tmp_path)
    assert code == 2 and path in err and key in err and "evil" not in out


@pytest.mark.parametrize("line", ["torch==2.7.0\x1b[2J", "to\x00rch==2.7.0", "torch @ https://h.example/torch%0A-2.7.0-cp311-cp311-linux_x86_64.whl"])
def test_a_control_character_in_a_requirement_line_is_refused_by_line(tmp_path, line):
    path = write(tmp_path, "r.txt", "six\n" + line + "\n")
    with pytest.raises(InputError, match=rf"{path}:2: "):
        read_inputs([path], Version("3.11"))


_LOCK_PIECES = st.sampled_from(['lock-version = "1.0"\n', "[[packages]]\n", 'name = "torch"\n', 'version = "2.7.0"\n', "name = 7\n",
                                'version = "x y"\n', "wheels = [{url = 1}]\n", 'wheels = [{hashes = {sha256 = "zz"}}]\n', "packages = 3\n",
                                'marker = "python_version >"\n', 'index = "https://x.example/"\n', "[packages.wheels]\n", "hashes = 1\n",
                                'name = "tor\\u0085ch"\n', 'marker = "platform_release > \'1\'"\n', "[[packages.wheels]]\n", 'url = "a-1-cp311-none-any.whl"\n'])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(pieces=st.lists(_LOCK_PIECES, max_size=10))
def test_mutated_pylock_files_end_in_a_sentence(pieces, tmp_path, capsys, monkeypatch):
    path = tmp_path / "pylock.toml"
    path.write_text("".join(pieces))
    code, _, err = run(["check", "-r", str(path), "--python-version", "3.11"], capsys, monkeypatch, tmp_path)
    assert code in (0, 1, 2) and (code != 2 or err.strip())


_LINES = st.sampled_from(["torch==2.7.0", "torch==2.8.0", "torch", "six==1", "six==1.0", "-f https://x.example/", "torch==2.7.0 -f https://x.example/",
                          "torch==2.7.0 --pre", "torch==2.7.0 --bogus", "-r other.txt", "-c other.txt", "torch; platform_release > '1'",
                          "torch==2.7.0; python_full_version < '3.11.7'", "x @ https://h.example/y-1.0-cp39-cp39-linux_x86_64.whl",
                          "\\", "# c", "--hash=sha256:00", "torch==2.7.0 --hash=sha256:ab", "tor\x1bch", "a" * 300, "===", "-e .", "--index-url"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(lines=st.lists(_LINES, max_size=8), other=st.lists(_LINES, max_size=3))
def test_mutated_requirements_files_end_in_a_sentence(lines, other, tmp_path, capsys, monkeypatch):
    (tmp_path / "other.txt").write_text("\n".join(other) + "\n")
    path = tmp_path / "r.txt"
    path.write_text("\n".join(lines) + "\n")
    code, _, err = run(["check", "-r", str(path), "--python-version", "3.11"], capsys, monkeypatch, tmp_path)
    assert code in (0, 1, 2) and (code != 2 or err.strip())


# --- read as pip reads it -------------------------------------------------------------------------------------------


def test_find_links_after_a_requirement_is_said_to_be_ignored_as_pip_ignores_it(tmp_path, capsys, monkeypatch):
    path = write(tmp_path, "r.txt", "torch==2.7.0 -f https://user:secret@h.example/links\n")
    code, out, err = run(["check", "-r", path, "--python-version", "3.11"], capsys, monkeypatch, tmp_path)
    assert code in (0, 1) and "pip ignores -f after a requirement" in out and "secret" not in out + err


def test_a_declared_mirror_serves_the_files_of_its_host(tmp_path, matrix):
    path = write(tmp_path, "r.txt", "--index-url https://pytorch-extension.intel.com/release-whl/stable/cpu/cn/\noneccl-bind-pt==2.7.0\n")
    files = file_request(matrix, read_inputs([path], Version("3.11")))
    assert not any("would stop" in w for w in files.warnings), files.warnings


def test_a_wheel_url_for_another_python_is_refused_as_pip_refuses_it(tmp_path):
    path = write(tmp_path, "r.txt", "torch @ https://download.pytorch.org/whl/cpu/torch-2.7.0%2Bcpu-cp39-cp39-manylinux_2_28_x86_64.whl\n")
    with pytest.raises(InputError, match="not for Python 3.10 .*not a supported wheel"):
        read_inputs([path], Version("3.10"))
    assert read_inputs([path], Version("3.9")).requirements[0].pinned == Version("2.7.0+cpu")


def test_a_wheel_url_of_another_project_is_refused(tmp_path):
    path = write(tmp_path, "r.txt", "torch @ https://download.pytorch.org/whl/cpu/torchvision-0.22.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl\n")
    with pytest.raises(InputError, match="another project"):
        read_inputs([path], Version("3.11"))


def test_ipex_1_9_is_named_torch_ipex_in_the_working_alternative(tmp_path, capsys, monkeypatch):
    code, out, _ = run(["resolve", "torch==1.10.0", "ipex==1.9.0", "--python-version", "3.8"], capsys, monkeypatch, tmp_path)
    working = [line for line in out.splitlines() if line.strip().startswith("->")]
    assert code == 1 and any("torch-ipex 1.9.0" in line for line in working), working
    assert not any("intel-extension-for-pytorch 1.9.0" in line for line in working), working
    assert "torch-ipex 1.9.0 is built for torch 1.9.0" in out  # the conflict names the release as published too


def test_a_device_build_is_described_by_its_own_hosts(tmp_path, matrix):
    path = write(tmp_path, "r.txt", "torch==2.7.0\noneccl-bind-pt==2.7.0+xpu\n")
    warnings = file_request(matrix, read_inputs([path], Version("3.11"))).warnings
    assert any("XPU build" in w and "/xpu/us/" in w for w in warnings) and not any("intel-cpu-us" in w for w in warnings)


def test_install_judges_markers_with_the_environments_own_probe(tmp_path, capsys, monkeypatch):
    release = os.uname().release  # the machine's own value, whatever it is: the probe of --python reports it
    path = write(tmp_path, "r.txt", f'torch==2.7.0; platform_release == "{release}"\ntorch==2.8.0; platform_release != "{release}"\n')
    code, out, err = run(["install", "--dry-run", "-r", path, "--python", sys.executable], capsys, monkeypatch, tmp_path)
    assert code == 0 and "would install torch 2.7.0" in err and "2.8.0" not in err, out + err  # the plan goes to stderr; 810247e: release "" -> torch 2.8.0


# --- issue 30 item 6: transformers and accelerate judged as dependencies ----------------------------------------------


def test_the_trainers_need_for_accelerate_is_a_warning_when_the_file_pins_none(tmp_path, capsys, monkeypatch):
    """transformers declares no accelerate requirement; only its Trainer needs it (the old code: FAIL)."""
    path = write(tmp_path, "r.txt", "torch==2.3.1\ntransformers==4.40.2\n")
    code, out, _ = run(["check", "-r", path, "--python-version", "3.11", "--json"], capsys, monkeypatch, tmp_path)
    found = {c["id"]: c for c in json.loads(out)["checks"]}["packages.transformers-torch"]
    assert code == 0 and found["status"] == "warn", found
    assert "Trainer needs accelerate >= 0.21.0, which the set does not have" in found["summary"]
    assert found["fix"].startswith("If the script uses the Trainer")


def test_a_pinned_accelerate_the_trainer_cannot_use_still_fails(tmp_path, capsys, monkeypatch):
    path = write(tmp_path, "r.txt", "torch==2.3.1\ntransformers==4.40.2\naccelerate==0.20.3\n")
    code, out, _ = run(["check", "-r", path, "--python-version", "3.11", "--json"], capsys, monkeypatch, tmp_path)
    found = {c["id"]: c for c in json.loads(out)["checks"]}["packages.transformers-torch"]
    assert code == 1 and found["status"] == "fail" and "needs accelerate >= 0.21.0, accelerate 0.20.3" in found["summary"], found


def test_no_alternative_is_older_than_the_security_yanked_release_it_replaces(matrix):
    """The old code offered IPEX 1.10.0 (never on PyPI) ahead of pinning the security-yanked IPEX 1.13.100, although
    dropping the oneccl_bind_pt pin gives a newer set; now that older set is not offered, and each alternative says why."""
    from compatmatrix.matrix.model import Component
    from compatmatrix.reasons import PinYanked
    from compatmatrix.resolve import resolve
    from compatmatrix.search import Conflict

    from ..conftest import make_request

    outcome = resolve(matrix, make_request(matrix, "3.9", "intel_extension_for_pytorch>=1.10", "oneccl_bind_pt==1.13"))
    assert isinstance(outcome, Conflict)
    pinned = next(a for a in outcome.alternatives if isinstance(a.edit, PinYanked))
    yanked = pinned.edit.rejection.version
    assert yanked == Version("1.13.100")
    for alternative in outcome.alternatives:
        ipex = alternative.resolution.picks.get(Component.IPEX)
        assert ipex is None or ipex.version >= yanked, (alternative.change, ipex)
        assert alternative.reason, alternative.change
    assert "compat takes a yanked release only for an exact pin" in pinned.reason


def test_an_older_set_comes_after_the_yanked_pin_when_nothing_newer_works(matrix):
    from compatmatrix.explain import _newer_than_security_yanks
    from compatmatrix.matrix.model import Component
    from compatmatrix.reasons import Because, DropConstraint, MovePin, PinYanked
    from compatmatrix.resolve import resolve
    from compatmatrix.search import Conflict

    from ..conftest import make_request

    outcome = resolve(matrix, make_request(matrix, "3.9", "intel_extension_for_pytorch>=1.10", "oneccl_bind_pt==1.13"))
    assert isinstance(outcome, Conflict)
    pinned = next(a for a in outcome.alternatives if isinstance(a.edit, PinYanked))
    older = resolve(matrix, make_request(matrix, "3.9", "intel_extension_for_pytorch==1.10.0"))
    assert older.picks[Component.IPEX].version < pinned.edit.rejection.version
    moved = type(pinned)(MovePin(Component.CCL, outcome.request.spec(Component.CCL), Version("1.10.0")), older, None)
    ordered = _newer_than_security_yanks([moved, pinned])  # no newer set: kept, behind the yanked pin, saying why
    assert [type(a.edit) for a in ordered] == [PinYanked, MovePin]
    assert isinstance(ordered[1].why, Because) and "older than intel-extension-for-pytorch 1.13.100, which is yanked for security" in ordered[1].reason
    newer = next(a for a in outcome.alternatives if isinstance(a.edit, DropConstraint))
    assert [a.edit for a in _newer_than_security_yanks([moved, pinned, newer])] == [pinned.edit, newer.edit]


# --- issue 31, the low items still open: counts in words, includes, file URLs, file names, long paths -----------------


def test_one_of_a_kind_is_said_in_the_singular(tmp_path, capsys, monkeypatch):
    from compatmatrix.console import plural

    assert (plural(1, "warning"), plural(2, "warning"), plural(0, "entry", "entries")) == ("1 warning", "2 warnings", "0 entries")
    path = write(tmp_path, "r.txt", "torch==2.7.0\ntorchaudio==9.0.0\n")  # one exact pin each, one warning (unlisted torchaudio)
    code, out, _ = run(["check", "-r", path, "--python-version", "3.11"], capsys, monkeypatch, tmp_path)
    assert code == 0 and "OK with warnings: 0 failed, 1 warning, " in out, out  # the old code: "1 warnings"
    single = write(tmp_path, "one.txt", "torch==2.7.0\n")
    code, out, _ = run(["check", "-r", single, "--python-version", "3.11"], capsys, monkeypatch, tmp_path)
    assert f"read {single}: 1 exact pin" in out and "1 exact pins" not in out, out


def test_a_file_name_that_is_not_utf8_reaches_json_escaped_under_files(tmp_path, capsys, monkeypatch):
    """The old code wrote the name as a lone surrogate ("r\\udcff.txt", which strict JSON parsers refuse) under "python"."""
    import jsonschema

    from ..conftest import ROOT

    name = os.fsdecode(os.fsencode(str(tmp_path)) + b"/r\xff.txt")
    with open(os.fsencode(name), "w") as out:
        out.write("torch==2.7.0\n")
    code, out, _ = run(["check", "-r", name, "--python-version", "3.11", "--json"], capsys, monkeypatch, tmp_path)
    assert code == 0 and "\\udcff" not in out and "\\ud" not in out, out[:400]
    data = json.loads(out)
    jsonschema.validate(data, json.loads((ROOT / "compatmatrix" / "schemas" / "findings-v1.json").read_text()))
    assert data["python"] is None and data["files"] == [f"{tmp_path}/r\\xff.txt"]
    assert data["checks"][0]["summary"] == f"read {tmp_path}/r\\xff.txt: 1 exact pin"
    out.encode("utf-8")  # every character encodable: no lone surrogate anywhere


def test_a_missing_include_is_named_with_the_file_and_line_that_include_it(tmp_path):
    top = write(tmp_path, "top.txt", "torch==2.7.0\n\n-c constraints/missing.txt\n")
    with pytest.raises(InputError) as caught:
        read_inputs([top], Version("3.11"))
    message = str(caught.value)
    assert message.startswith(f"{top}:3: '-c constraints/missing.txt' names a file that cannot be read: "), message  # the old code: no origin
    assert "does not exist" in message and f"Correct the -c line in {top}" in message


@pytest.mark.parametrize("url", ["file://otherhost/etc/r.txt", "file://otherhost{path}"])
def test_a_file_url_on_another_host_is_refused_as_pip_refuses_it(tmp_path, url):
    """pip's url_to_path (pypa/pip 6d309205 src/pip/_internal/utils/urls.py): 'non-local file URIs are not supported on
    this platform'. The old code read the local path of file://otherhost/PATH."""
    local = write(tmp_path, "inc.txt", "six==1.16.0\n")
    top = write(tmp_path, "top.txt", f"-r {url.format(path=local)}\n")
    with pytest.raises(InputError, match=r"top.txt:1: '-r file://otherhost/.*' names a file on another host \(otherhost\), which pip refuses"):
        read_inputs([top], Version("3.11"))
    for good in (f"file://{local}", f"file://localhost{local}", f"file:{local}"):
        write(tmp_path, "top.txt", f"-r {good}\n")
        assert [r.name for r in read_inputs([top], Version("3.11")).requirements] == ["six"], good


@pytest.mark.parametrize("where", ["check", "include", "file-url"])
def test_a_path_longer_than_name_max_is_one_sentence(tmp_path, capsys, monkeypatch, where):
    long = "x" * 300  # NAME_MAX is 255 bytes
    if where == "check":
        target = str(tmp_path / f"{long}.txt")
    else:
        target = write(tmp_path, "top.txt", f"-r {long}.txt\n" if where == "include" else f"-r file://{tmp_path}/{long}.txt\n")
    code, _, err = run(["check", "-r", target, "--python-version", "3.11"], capsys, monkeypatch, tmp_path)
    assert code == 2 and "is longer than the file system allows" in err and err.count("\n") == 1, err
    if where != "check":
        assert f"{tmp_path}/top.txt:1: '-r " in err


def test_a_sysfs_root_longer_than_name_max_is_one_sentence(tmp_path):
    """The old code: 'internal error in launch (OSError: [Errno 36] File name too long)'."""
    from compatmatrix.errors import UsageError
    from compatmatrix.placement.sysfs import read_machine

    for root in (tmp_path / ("x" * 300), tmp_path.joinpath(*["y" * 250] * 17)):
        with pytest.raises(UsageError, match="is longer than the file system allows"):
            read_machine(str(root))
    with pytest.raises(UsageError, match="does not exist"):
        read_machine(str(tmp_path / "missing"))


def test_the_ccl_trainers_need_for_accelerate_is_a_warning_too(tmp_path, capsys, monkeypatch):
    path = write(tmp_path, "r.txt", "torch==2.3.1\noneccl_bind_pt==2.3.0\ntransformers==4.40.2\n")
    code, out, _ = run(["check", "-r", path, "--python-version", "3.10", "--json"], capsys, monkeypatch, tmp_path)
    checks = {c["id"]: c for c in json.loads(out)["checks"]}
    assert code == 0 and checks["packages.ccl-trainer"]["status"] == "warn", checks["packages.ccl-trainer"]  # the old code: FAIL
    assert checks["packages.transformers-torch"]["status"] == "warn"
