"""`compat env` writes path lists as additions to the value the shell has when it sources the file, never as a copy of
the value they had when compat ran (the issue: a file written during `docker build`, before the Dockerfile's
`ENV PATH=/opt/train/bin:...`, dropped the venv from PATH in every container whose entrypoint sourced it).

FIXTURE bindings (tests/fixture_envs.py: an env/setvars.sh that prepends to PATH and LD_LIBRARY_PATH); the shells are
the real bash, and zsh and fish where this machine has them (those tests skip, saying so, where it does not).
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from compatmatrix.environment.setvars import PathAddition, export_plan, split_addition
from compatmatrix.shell import EnvPlan, format_env

from ..clean_env import base_env
from ..fixture_envs import FixtureEnv

BUILD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # PATH during `docker build`, before ENV PATH=...


def _compat_env(python, *args, env_extra=None):
    done = subprocess.run([sys.executable, "-m", "compatmatrix", "env", "--python", str(python), *args], capture_output=True, text=True,
                          timeout=120, env=base_env(env_extra), check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _source_in_bash(script, variables, show=("PATH", "LD_LIBRARY_PATH"), shell="bash"):
    """Source ``script`` in a clean ``shell`` whose environment holds ``variables``; the values of ``show`` afterwards
    (None: unset)."""
    printer = "; ".join(f'if [ -n "${{{k}+x}}" ]; then printf "%s=%s\\0" {k} "${k}"; fi' for k in show)
    argv = ["bash", "--noprofile", "--norc", "-c"] if shell == "bash" else ["zsh", "-f", "-c"]
    env = {k: v for k, v in base_env().items() if k not in show}
    env.update(variables)
    done = subprocess.run([*argv, f'source "$0" && {{ {printer}; }}', str(script)], capture_output=True, timeout=60, env=env, check=False)
    assert done.returncode == 0, done.stderr.decode()
    return dict(item.decode().split("=", 1) for item in done.stdout.split(b"\0") if item)


# --- the case: written at build time, sourced at run time ---------------------------------------------------


def test_file_written_with_one_path_keeps_the_path_of_the_shell_that_sources_it(tmp_path):
    env = FixtureEnv(tmp_path / "env").torch("2.7.0").bindings("2.7.0")
    own = env.site / "oneccl_bindings_for_pytorch"
    written = tmp_path / "compat-env.sh"
    written.write_text(_compat_env(env.python, env_extra={"PATH": BUILD_PATH}))
    # the image's later ENV PATH=/opt/train/bin:...: a venv with a torchrun in it
    train_bin = tmp_path / "train" / "bin"
    train_bin.mkdir(parents=True)
    (train_bin / "torchrun").write_text("#!/bin/sh\necho FIXTURE torchrun\n")
    (train_bin / "torchrun").chmod(0o755)
    run_path = f"{train_bin}:{BUILD_PATH}"
    after = _source_in_bash(written, {"PATH": run_path, "LD_LIBRARY_PATH": "/run/lib"})
    assert after["PATH"] == f"{own / 'opt' / 'mpi' / 'bin'}:{run_path}"
    assert after["LD_LIBRARY_PATH"] == f"{own / 'lib'}:{own / 'opt' / 'mpi' / 'libfabric' / 'lib'}:/run/lib"
    # the entrypoint's `exec "$@"` finds the venv's torchrun
    found = subprocess.run(["bash", "--noprofile", "--norc", "-c", 'source "$0" && command -v torchrun', str(written)], capture_output=True,
                           text=True, timeout=60, env={**base_env(), "PATH": run_path}, check=False)
    assert found.stdout.strip() == str(train_bin / "torchrun"), found.stdout + found.stderr
    # unset at run time: only the added entries, no stray ':' (an empty entry is the working directory to the loader)
    after = _source_in_bash(written, {"PATH": run_path})
    assert after["LD_LIBRARY_PATH"] == f"{own / 'lib'}:{own / 'opt' / 'mpi' / 'libfabric' / 'lib'}"
    assert "export PATH=" in written.read_text() and BUILD_PATH not in written.read_text()


def test_appended_entries_stay_behind_the_live_value(tmp_path):
    """A script that appends (CPATH here) gets its entries after the value the sourcing shell has."""
    env = FixtureEnv(tmp_path / "env").torch("2.7.0").bindings("2.7.0")
    setvars = env.site / "oneccl_bindings_for_pytorch" / "env" / "setvars.sh"
    setvars.write_text(setvars.read_text() + 'export CPATH="${CPATH:+$CPATH:}$CCL_ROOT/include"\n')
    text = _compat_env(env.python, env_extra={"CPATH": "/build/include"})
    include = env.site / "oneccl_bindings_for_pytorch" / "include"
    assert f'export CPATH="${{CPATH:+$CPATH:}}{include}"' in text.splitlines()
    written = tmp_path / "compat-env.sh"
    written.write_text(text)
    assert _source_in_bash(written, {"CPATH": "/run/include"}, show=("CPATH",))["CPATH"] == f"/run/include:{include}"


def test_json_lists_the_additions_apart_from_the_values(tmp_path):
    import json

    env = FixtureEnv(tmp_path / "env").torch("2.7.0").bindings("2.7.0")
    answer = json.loads(_compat_env(env.python, "--json", env_extra={"PATH": BUILD_PATH}))
    own = env.site / "oneccl_bindings_for_pytorch"
    assert answer["schema_version"] == 2
    assert answer["additions"]["PATH"] == {"prepend": [str(own / "opt" / "mpi" / "bin")], "append": []}
    assert "PATH" not in answer["exports"] and "LD_LIBRARY_PATH" not in answer["exports"]
    assert answer["exports"]["CCL_ROOT"] == str(own) and "COMPAT_CHILD_RUN" not in answer["exports"]


def test_the_child_marker_is_not_exported(tmp_path):
    """run_child's marker (COMPAT_CHILD_RUN) is in the sourced shell's environment, but it is compat's, not the script's."""
    env = FixtureEnv(tmp_path / "env").torch("2.7.0").bindings("2.7.0")
    assert "COMPAT_CHILD_RUN" not in _compat_env(env.python)
    assert "COMPAT_CHILD_RUN" not in _compat_env(env.python, "--shell", "fish")


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed here (apt-get install fish); the fish text is unit-tested below")
def test_fish_file_keeps_the_path_of_the_shell_that_sources_it(tmp_path):
    env = FixtureEnv(tmp_path / "env").torch("2.7.0").bindings("2.7.0")
    own = env.site / "oneccl_bindings_for_pytorch"
    written = tmp_path / "compat-env.fish"
    written.write_text(_compat_env(env.python, "--shell", "fish", env_extra={"PATH": BUILD_PATH}))
    run_path = f"/opt/train/bin:{BUILD_PATH}"
    script = f'source {written}; and printf "%s\\n" "PATH=$PATH" "LD=$LD_LIBRARY_PATH" "ROOT=$CCL_ROOT"'
    environment = {k: v for k, v in base_env().items() if k != "LD_LIBRARY_PATH"}
    done = subprocess.run(["fish", "--no-config", "-c", script], capture_output=True, text=True, timeout=60,
                          env={**environment, "PATH": run_path}, check=False)
    assert done.returncode == 0, done.stderr
    lines = dict(line.split("=", 1) for line in done.stdout.splitlines())
    # fish 3 joins a path variable with ':' inside double quotes, as it does when it exports it (below)
    assert lines["PATH"] == f"{own / 'opt' / 'mpi' / 'bin'}:{run_path}"
    assert lines["LD"] == f"{own / 'lib'}:{own / 'opt' / 'mpi' / 'libfabric' / 'lib'}"
    assert lines["ROOT"] == str(own)
    exported = subprocess.run(["fish", "--no-config", "-c", f"source {written}; and env"], capture_output=True, text=True, timeout=60,
                              env={**environment, "PATH": run_path, "LD_LIBRARY_PATH": "/run/lib"}, check=False)
    values = dict(line.split("=", 1) for line in exported.stdout.splitlines() if "=" in line)
    assert values["PATH"] == f"{own / 'opt' / 'mpi' / 'bin'}:{run_path}"
    assert values["LD_LIBRARY_PATH"] == f"{own / 'lib'}:{own / 'opt' / 'mpi' / 'libfabric' / 'lib'}:/run/lib"


# --- the split (pure) --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("old, new, prepend, append, reordered", [
    (None, "/a:/b", ("/a", "/b"), (), False),  # unset before: everything is added, in order
    ("", "/a", ("/a",), (), False),
    ("/x:/y", "/a:/b:/x:/y", ("/a", "/b"), (), False),
    ("/x:/y", "/x:/y:/c", (), ("/c",), False),
    ("/x:/y", "/a:/x:/y:/c", ("/a",), ("/c",), False),
    ("/x:/y", "/x:/x:/y", ("/x",), (), False),  # sourced twice: the entry it prepends again is kept in front
    ("/x:/y", "/a:/y", ("/a",), (), True),  # /x dropped: only the new entry
    ("/x:/y", "/y:/x:/b", (), ("/b",), True),
    ("/x:/y", "/x:/y", None, None, False),  # nothing added
    ("/x::/y", "/a:/x:/y", ("/a",), (), False),  # empty entries are not entries
])
def test_split_addition(old, new, prepend, append, reordered):
    added = split_addition(old, new)
    if prepend is None:
        assert added is None
    else:
        assert added == PathAddition(prepend, append, reordered)


def test_export_plan_keeps_values_for_what_is_set_outright():
    before = {"PATH": "/bin", "FI_PROVIDER_PATH": "/old/prov"}
    plain, additions = export_plan(before, {"PATH": "/m/bin:/bin", "FI_PROVIDER_PATH": "/m/prov:/usr/lib64/libfabric", "CCL_ROOT": "/m"})
    assert additions == {"PATH": PathAddition(("/m/bin",))}
    assert plain == {"FI_PROVIDER_PATH": "/m/prov:/usr/lib64/libfabric", "CCL_ROOT": "/m"}  # Intel MPI's vars.sh sets it outright


# --- the text, for every shell -------------------------------------------------------------------------------------

ODD = ("/opt/a b", "/it's", '/q"uote', "/d$HOME", "/back\\slash", "/semi;colon")  # each must arrive as written
PLAN = EnvPlan({"CCL_ROOT": "/opt/a b"}, ("FIXTURE plan",), {"PATH": PathAddition(("/opt/p",), ("/opt/tail",)), "LD_LIBRARY_PATH": PathAddition(ODD, ("/z z",))})


def test_bash_text():
    text = format_env(PLAN, "bash")
    assert 'export PATH="/opt/p${PATH:+:$PATH}"' in text.splitlines()
    assert 'export PATH="${PATH:+$PATH:}/opt/tail"' in text.splitlines()
    assert "export CCL_ROOT='/opt/a b'" in text.splitlines()


def test_fish_text():
    lines = format_env(PLAN, "fish").splitlines()
    assert lines[0] == "# FIXTURE plan"
    assert "if not contains -- '/opt/p' $PATH; set -gx PATH '/opt/p' (string match -v -- '' $PATH); end" in lines
    assert "if not contains -- '/opt/tail' $PATH; set -gx PATH (string match -v -- '' $PATH) '/opt/tail'; end" in lines
    odd_line = next(line for line in lines if "set -gx LD_LIBRARY_PATH '/opt/a b'" in line)
    assert ("set -gx LD_LIBRARY_PATH '/opt/a b' '/it\\'s' '/q\"uote' '/d$HOME' '/back\\\\slash' '/semi;colon' "
            "(string match -v -- '' $LD_LIBRARY_PATH); end") in odd_line
    assert "set -gx CCL_ROOT '/opt/a b'" in lines
    assert not any(line.startswith("export") for line in lines)


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_odd_entries_arrive_as_written(tmp_path, shell):
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed here")
    written = tmp_path / "env.sh"
    written.write_text(format_env(PLAN, shell))
    after = _source_in_bash(written, {"PATH": BUILD_PATH, "LD_LIBRARY_PATH": "/live"}, show=("PATH", "LD_LIBRARY_PATH", "CCL_ROOT"), shell=shell)
    assert after["PATH"] == f"/opt/p:{BUILD_PATH}:/opt/tail"
    assert after["LD_LIBRARY_PATH"] == ":".join([*ODD, "/live", "/z z"])
    assert after["CCL_ROOT"] == "/opt/a b"
    unset = _source_in_bash(written, {"PATH": BUILD_PATH}, show=("LD_LIBRARY_PATH",), shell=shell)
    assert unset["LD_LIBRARY_PATH"] == ":".join([*ODD, "/z z"])


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed here (apt-get install fish); its text is unit-tested above")
def test_odd_entries_arrive_as_written_in_fish(tmp_path):
    written = tmp_path / "env.fish"
    written.write_text(format_env(PLAN, "fish"))
    environment = {k: v for k, v in base_env().items() if k != "LD_LIBRARY_PATH"}
    for live, expected in (("/live", [*ODD, "/live", "/z z"]), ("", [*ODD, "/z z"]), (None, [*ODD, "/z z"])):
        variables = {**environment, "PATH": BUILD_PATH, **({"LD_LIBRARY_PATH": live} if live is not None else {})}
        done = subprocess.run(["fish", "--no-config", "-c", f"source {written}; and env"], capture_output=True, text=True, timeout=60, env=variables, check=False)
        assert done.returncode == 0, done.stderr
        values = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
        assert values["LD_LIBRARY_PATH"] == ":".join(expected), live
        assert values["PATH"] == f"/opt/p:{BUILD_PATH}:/opt/tail"
        assert values["CCL_ROOT"] == "/opt/a b"


# --- sourced twice (BASH_ENV and an entrypoint, a nested shell): the entries are added once -----------------------

TWICE = EnvPlan({}, (), {"PATH": PathAddition(("/opt/p", "/opt/q"), ("/opt/tail",)), "LD_LIBRARY_PATH": PathAddition(ODD, ()),
                         "MANPATH": PathAddition(("/opt/man",), ("/opt/m2",))})


@pytest.mark.parametrize("shell", ["bash", "zsh", "dash", "fish"])
def test_sourcing_the_file_twice_adds_each_entry_once(tmp_path, shell):
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed here")
    written = tmp_path / "env"
    written.write_text(format_env(TWICE, "fish" if shell == "fish" else "bash"))
    base = {k: v for k, v in base_env().items() if k not in ("LD_LIBRARY_PATH", "MANPATH")}
    if shell == "fish":
        argv = ["fish", "--no-config", "-c", f"source {written}; source {written}; and env"]
    else:
        argv = [shell, "-c", f'set -eu; . "{written}"; . "{written}"; env']  # -u: an unset variable must not stop the shell
    for live in ({"LD_LIBRARY_PATH": "/live", "MANPATH": "/m"}, {}):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env={**base, "PATH": BUILD_PATH, **live}, check=False)
        assert done.returncode == 0, done.stderr
        values = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
        assert values["PATH"] == f"/opt/p:/opt/q:{BUILD_PATH}:/opt/tail"
        assert values["LD_LIBRARY_PATH"] == ":".join([*ODD, *(["/live"] if live else [])])
        # man reads an empty entry as its default search path: an unset MANPATH keeps it, as oneAPI's setvars.sh does
        assert values["MANPATH"] == ("/opt/man:/m:/opt/m2" if live else "/opt/man::/opt/m2")


# --- --defaults: a file written at build time gives way to the values of the run (docker run -e, a pod's env) -------

DEFAULTS = EnvPlan({"OMP_NUM_THREADS": "4", "CCL_WORKER_COUNT": "1", "LD_PRELOAD": "/opt/a b/libtcmalloc.so:/d$HOME/x.so"}, ("FIXTURE plan",),
                   {"PATH": PathAddition(("/opt/p",), ())})
SETTINGS = ("OMP_NUM_THREADS", "CCL_WORKER_COUNT", "LD_PRELOAD", "PATH")


def test_defaults_text():
    lines = format_env(DEFAULTS, "bash", defaults=True).splitlines()
    assert 'export OMP_NUM_THREADS="${OMP_NUM_THREADS:-4}"' in lines
    assert 'export CCL_WORKER_COUNT="${CCL_WORKER_COUNT:-1}"' in lines
    assert "[ -n \"${LD_PRELOAD:-}\" ] || LD_PRELOAD='/opt/a b/libtcmalloc.so:/d$HOME/x.so'; export LD_PRELOAD" in lines
    assert 'export PATH="/opt/p${PATH:+:$PATH}"' in lines  # path lists stay additions
    fish = format_env(DEFAULTS, "fish", defaults=True).splitlines()
    assert "if test -z \"$OMP_NUM_THREADS\"; set -gx OMP_NUM_THREADS '4'; end" in fish
    assert "export OMP_NUM_THREADS=4" in format_env(DEFAULTS, "bash").splitlines()  # without --defaults: set outright, as before


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_defaults_keep_a_value_set_at_sourcing_time(tmp_path, shell):
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed here")
    written = tmp_path / "env.sh"
    written.write_text(format_env(DEFAULTS, shell, defaults=True))
    kept = _source_in_bash(written, {"PATH": BUILD_PATH, "OMP_NUM_THREADS": "7", "LD_PRELOAD": "/pod/lib.so"}, show=SETTINGS, shell=shell)
    assert kept["OMP_NUM_THREADS"] == "7" and kept["LD_PRELOAD"] == "/pod/lib.so"  # set: kept (docker run -e, the pod's env)
    assert kept["CCL_WORKER_COUNT"] == "1"  # unset: the default
    assert kept["PATH"] == f"/opt/p:{BUILD_PATH}"
    unset = _source_in_bash(written, {"PATH": BUILD_PATH, "OMP_NUM_THREADS": ""}, show=SETTINGS, shell=shell)
    assert unset["OMP_NUM_THREADS"] == "4"  # empty counts as unset (an empty OMP_NUM_THREADS is no setting)
    assert unset["LD_PRELOAD"] == "/opt/a b/libtcmalloc.so:/d$HOME/x.so"  # written as is, nothing expanded


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed here (apt-get install fish); its text is unit-tested above")
def test_defaults_keep_a_value_set_at_sourcing_time_in_fish(tmp_path):
    written = tmp_path / "env.fish"
    written.write_text(format_env(DEFAULTS, "fish", defaults=True))
    environment = {k: v for k, v in base_env().items() if k not in SETTINGS}
    printer = "; ".join(f"printf '%s=%s\\n' {k} \"${k}\"" for k in SETTINGS)  # builtins: the odd LD_PRELOAD is never loaded
    for given, expected in (({"OMP_NUM_THREADS": "7", "LD_PRELOAD": "/pod/lib.so"}, ("7", "/pod/lib.so")), ({}, ("4", DEFAULTS.exports["LD_PRELOAD"])),
                            ({"OMP_NUM_THREADS": ""}, ("4", DEFAULTS.exports["LD_PRELOAD"]))):
        done = subprocess.run(["fish", "--no-config", "-c", f"source {written}; and {printer}"], capture_output=True, text=True, timeout=60,
                              env={**environment, "PATH": BUILD_PATH, **given}, check=False)
        assert done.returncode == 0, done.stderr  # the file ends with status 0: `source FILE; and ...` goes on
        values = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
        assert (values["OMP_NUM_THREADS"], values["LD_PRELOAD"]) == expected and values["CCL_WORKER_COUNT"] == "1"


def test_compat_env_defaults_for_the_bindings_setvars(tmp_path):
    """compat env --defaults with FIXTURE bindings: setvars' CCL_ROOT and the thread settings are defaults, the path lists
    additions; sourced with the run's own values, those win."""
    env = FixtureEnv(tmp_path / "env").torch("2.7.0").bindings("2.7.0")
    written = tmp_path / "compat-env.sh"
    written.write_text(_compat_env(env.python, "--defaults", "--ranks-per-node", "1", env_extra={"PATH": BUILD_PATH}))
    text = written.read_text()
    assert 'export OMP_NUM_THREADS="${OMP_NUM_THREADS:-' in text and "export CCL_ROOT=" in text and "${CCL_ROOT:-" in text
    run = _source_in_bash(written, {"PATH": BUILD_PATH, "OMP_NUM_THREADS": "3", "CCL_ROOT": "/pod/ccl"}, show=("OMP_NUM_THREADS", "CCL_ROOT", "CCL_WORKER_COUNT"))
    assert run["OMP_NUM_THREADS"] == "3" and run["CCL_ROOT"] == "/pod/ccl" and int(run["CCL_WORKER_COUNT"]) >= 0
    built = _source_in_bash(written, {"PATH": BUILD_PATH}, show=("OMP_NUM_THREADS", "CCL_ROOT"))
    assert built["CCL_ROOT"] == str(env.site / "oneccl_bindings_for_pytorch") and int(built["OMP_NUM_THREADS"]) >= 1


def test_bash_env_is_not_taken_for_the_scripts_exports(tmp_path):
    """bash --noprofile --norc -c still sources $BASH_ENV: in an image whose BASH_ENV is compat env's own file, its
    exports must not be reported as setvars.sh's (hostile review)."""
    from compatmatrix.environment.setvars import source_setvars

    script = tmp_path / "setvars.sh"
    script.write_text('export CCL_ROOT=/opt/ccl\nexport LD_LIBRARY_PATH="/opt/ccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"\n')
    bash_env = tmp_path / "compat-env.sh"
    bash_env.write_text('export FOO_FROM_BASH_ENV=1\nexport LD_LIBRARY_PATH="/from/bashenv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"\n')
    before = {"PATH": "/usr/bin:/bin", "BASH_ENV": str(bash_env)}
    sourced = source_setvars(script, before, timeout=60)
    after = sourced.after
    assert after is not None and after.get("CCL_ROOT") == "/opt/ccl"
    assert "FOO_FROM_BASH_ENV" not in after and "/from/bashenv" not in after.get("LD_LIBRARY_PATH", "")


@pytest.mark.parametrize("shell", ["bash", "fish"])
def test_a_newline_in_a_commented_path_cannot_run_as_a_command(shell):
    """Comments carry paths (the interpreter, the bindings' folder): a newline in one must not start a line the shell
    runs when the file is eval'd (hostile review: a venv folder named 'x\\ntouch PWNED\\n#')."""
    plan = EnvPlan({"OMP_NUM_THREADS": "2"}, ("no oneCCL bindings are installed for /tmp/x\ntouch /tmp/PWNED\r\n#/venv/bin/python",), {})
    text = format_env(plan, shell)
    assert all(line.startswith(("#", "export ", "set ", "if ")) for line in text.splitlines()), text
    assert "touch /tmp/PWNED" in text.splitlines()[0]  # still said, inside the comment
