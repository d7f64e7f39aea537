"""compat export ray (render/ray.py, export/service.ray) and doctor --live's ray launcher (launchers/ray.ray_layout):
the driver is Python that parses (ast) with hostile values and carries every one back as given, as data; what cannot be
written is refused with one sentence; Ray's layout is read from its variables or refused. The driver run on a real
two-node Ray cluster is tests/export/test_ray_real.py."""

from __future__ import annotations

import ast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compatmatrix.errors import UsageError
from compatmatrix.launchers.ray import ray_layout
from compatmatrix.render.ray import RayShape, ray_driver
from compatmatrix.values import UnwritableValue

from ..conftest import run_compat
from ..hostile_strings import hostile

CONSTANTS = ("NAME", "NODES", "RANKS_PER_NODE", "THREADS", "GLOO_TIMEOUT_S", "PREFLIGHT_TIMEOUT_S", "PLACEMENT_TIMEOUT_S", "PYTHON",
             "PREFLIGHT", "COMMAND", "REQUIREMENTS", "RUNTIME_ENV", "ADDITIONS", "DIE_WITH_PARENT")
FUNCTIONS = ("fail", "last_line", "free_port", "interpreter", "rank_argv", "run_child", "child_env", "master_of_node", "compat_here", "preflight_on_node",
             "preflight", "train_rank", "train", "main")


def constants(text: str) -> dict:
    """The driver's module-level constants, read back by Python's own parser (literal_eval: data, never code), and a
    check that the module holds nothing else than its imports, those constants, its functions and the main guard."""
    tree = ast.parse(text)
    found, names = {}, []
    for node in tree.body:
        if isinstance(node, ast.Assign):
            (target,) = node.targets
            found[target.id] = ast.literal_eval(node.value)
        elif isinstance(node, ast.FunctionDef):
            names.append(node.name)
        else:
            assert isinstance(node, (ast.Import, ast.If, ast.Expr)), ast.dump(node)[:200]
    assert tuple(found) == CONSTANTS and tuple(names) == FUNCTIONS
    return found


def shape(**given) -> RayShape:
    values = dict(name="job", nnodes=2, ranks_per_node=2, threads=3, command=("train.py", "--bf16"), env={"OMP_NUM_THREADS": "3"},
                  requirements=("torch==2.13.0+cpu",), python="/shared/venv/bin/python", preflight=("/shared/venv/bin/python", "-m", "compatmatrix"))
    values.update(given)
    return RayShape(**values)


def writable(text: str) -> bool:
    return "\0" not in text and not any("\ud800" <= ch <= "\udfff" for ch in text)


@settings(max_examples=150, deadline=None)
@given(words=st.lists(hostile(), min_size=1, max_size=4), value=hostile(), python=hostile(), name=hostile(), requirement=hostile(),
       notes=st.lists(hostile(), max_size=3), key=st.one_of(st.just("GLOO_SOCKET_IFNAME"), hostile()))
def test_hostile_values_come_back_as_data_or_are_refused(words, value, python, name, requirement, notes, key):
    made = shape(command=tuple(words), env={key: value, "OMP_NUM_THREADS": "3"}, python=python, name=name, requirements=(requirement,))
    every = [*words, value, python, name, requirement]
    bad_name = not (key.isascii() and (key[:1].isalpha() or key[:1] == "_") and all(c.isalnum() or c == "_" for c in key))
    if not all(writable(v) for v in every) or bad_name or not name.strip() or "$" in value:  # Ray expands $NAME in env_vars
        with pytest.raises(UnwritableValue):
            ray_driver(made, notes)
        return
    text = ray_driver(made, notes)  # hostile notes too: comments that must stay comments
    found = constants(text)
    assert found["COMMAND"] == words and found["PYTHON"] == python and found["NAME"] == name
    assert found["RUNTIME_ENV"]["env_vars"] == {key: value, "OMP_NUM_THREADS": "3"}
    assert found["REQUIREMENTS"] == [requirement] and found["RUNTIME_ENV"]["pip"]["packages"] == [requirement]
    compile(text, "driver.py", "exec")


def test_the_driver_holds_the_plan_the_preflight_first_and_a_bounded_gloo_timeout():
    text = ray_driver(shape(gloo_timeout=120))
    found = constants(text)
    assert (found["NODES"], found["RANKS_PER_NODE"], found["THREADS"], found["GLOO_TIMEOUT_S"]) == (2, 2, 3, 120)
    assert 'resources_per_worker={"CPU": THREADS}' in text and "num_workers=NODES * RANKS_PER_NODE" in text
    assert 'TorchConfig(backend="gloo", timeout_s=GLOO_TIMEOUT_S)' in text
    assert '"--launcher", "ray"' in text and 'strategy="STRICT_SPREAD"' in text
    main = text[text.index("def main():"):]
    assert main.index("preflight(ray, cwd)") < main.index("train(cwd)")
    assert constants(ray_driver(shape(preflight=())))["PREFLIGHT"] == []  # --no-preflight
    assert "pip" not in constants(ray_driver(shape(install=False)))["RUNTIME_ENV"]


@pytest.mark.parametrize("changed, what", [({"nnodes": 0}, "count"), ({"threads": 0}, "count"), ({"command": ()}, "training command"),
                                           ({"env": {"A B": "1"}}, "variable name"), ({"env": {"X": "a\0b"}}, "environment value"),
                                           ({"gloo_timeout": 0}, "timeout")])
def test_a_shape_that_cannot_be_written_is_refused_naming_it(changed, what):
    with pytest.raises(UnwritableValue, match=what):
        ray_driver(shape(**changed))


# --- compat export ray on the command line -----------------------------------------------------------------------------


def test_export_ray_writes_a_driver_with_the_set_for_the_pip_runtime_env():
    done = run_compat("export", "ray", "--profile", "stock", "--nnodes", "2", "--nproc-per-node", "2", "--cpus-per-node", "8",
                      "--gloo-timeout", "90", "--", "train.py", "--lr", "1e-3")
    assert done.returncode == 0, done.stderr
    found = constants(done.stdout)
    assert (found["NODES"], found["RANKS_PER_NODE"], found["THREADS"], found["GLOO_TIMEOUT_S"]) == (2, 2, 4, 90)
    assert found["COMMAND"] == ["train.py", "--lr", "1e-3"]
    env = found["RUNTIME_ENV"]["env_vars"]
    assert env["OMP_NUM_THREADS"] == "4"
    packages = found["RUNTIME_ENV"]["pip"]["packages"]
    assert any(p.startswith("torch==") for p in packages) and "--extra-index-url https://download.pytorch.org/whl/cpu" in packages
    assert found["PREFLIGHT"][1:] == ["-m", "compatmatrix"]


@pytest.mark.parametrize("args, said", [
    (["--", "torchrun", "train.py"], "not torchrun"),
    (["--nproc-per-node", "4", "--cpus-per-node", "2", "--", "train.py"], "do not fit in 2 CPUs"),
    (["--time", "10", "--", "train.py"], "--time goes with compat export sbatch"),
    ([], "No training command"),
])
def test_export_ray_refuses_what_cannot_run(args, said):
    done = run_compat("export", "ray", "--profile", "stock", *args)
    assert done.returncode == 2 and said in done.stderr, done.stderr


def test_another_format_refuses_ray_options():
    done = run_compat("export", "sbatch", "--profile", "stock", "--python", "/x/bin/python", "--gloo-timeout", "9", "--", "t.py")
    assert done.returncode == 2 and "--gloo-timeout goes with compat export ray" in done.stderr, done.stderr


# --- doctor --live --launcher ray: the layout from Ray's variables -----------------------------------------------------


RAY_ENV = {"NODE_RANK": "1", "RANK": "1", "WORLD_SIZE": "3", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "10.0.0.1",
           "MASTER_PORT": "40001"}


def test_the_layout_is_read_from_the_variables_ray_train_gives_a_worker():
    layout, notes = ray_layout(RAY_ENV, 2)
    assert (layout.nnodes, layout.node_rank, layout.nproc_per_node, layout.master_addr, layout.master_port) == (3, 1, 2, "10.0.0.1", 40001)
    assert "node 1 of 3" in notes[0]
    kept, _ = ray_layout(RAY_ENV, 2, "node0", 29999)  # --master-addr / --master-port win
    assert (kept.master_addr, kept.master_port) == ("node0", 29999)


@pytest.mark.parametrize("changed, said", [({"LOCAL_WORLD_SIZE": "2"}, "2 workers on this node"), ({"WORLD_SIZE": None}, "WORLD_SIZE is not set"),
                                           ({"NODE_RANK": "3"}, "not below WORLD_SIZE=3"), ({"MASTER_ADDR": "a b"}, "not an address"),
                                           ({"WORLD_SIZE": "٣"}, "not a whole number"), ({"MASTER_PORT": "70000"}, "MASTER_PORT")])
def test_a_layout_that_is_not_rays_is_refused(changed, said):
    env = {k: v for k, v in {**RAY_ENV, **changed}.items() if v is not None}
    with pytest.raises(UsageError, match=said):
        ray_layout(env, 2)


def test_doctor_live_under_ray_refuses_nodes_given_by_hand():
    done = run_compat("doctor", "--live", "--launcher", "ray", "--nnodes", "2", env_extra=RAY_ENV)
    assert done.returncode == 2 and "come from Ray's variables" in done.stderr, done.stderr


def test_the_drivers_own_helpers_join_path_lists_and_put_the_interpreter_in_front(monkeypatch):
    """The driver's functions run here (its module body imports only the standard library; Ray only inside them)."""
    made = shape(additions={"LD_LIBRARY_PATH": (("/env/lib",), ("/late",))}, command=("train.py", "--x"), python="/venv/bin/python")
    namespace: dict = {"__name__": "compat_driver"}
    exec(compile(ray_driver(made), "driver.py", "exec"), namespace)  # noqa: S102 - compat's own output, read back
    monkeypatch.setenv("LD_LIBRARY_PATH", "/node/lib::/env/lib")
    env = namespace["child_env"]({"RANK": "3"})
    assert env["LD_LIBRARY_PATH"] == "/env/lib:/node/lib:/late" and env["RANK"] == "3"  # no empty entry (the cwd), each once
    monkeypatch.delenv("LD_LIBRARY_PATH")
    assert namespace["child_env"]({})["LD_LIBRARY_PATH"] == "/env/lib:/late"
    assert namespace["rank_argv"]() == ["/venv/bin/python", "train.py", "--x"]
    namespace["COMMAND"] = ["./run.sh", "a"]
    assert namespace["rank_argv"]() == ["./run.sh", "a"]


def test_compat_never_imports_ray_writing_the_driver(tmp_path):
    """Ray is no dependency of compat (the ray extra is the driver's): writing the driver imports neither Ray nor torch,
    even where Ray is installed (a FIXTURE ray package first on the path would say so)."""
    fake = tmp_path / "ray"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise SystemExit('FIXTURE ray: compat imported ray')\n")
    code = ("import sys\nfrom compatmatrix.cli import main\nrc = main(['export', 'ray', '--profile', 'stock', '--cpus-per-node', '2', '--', 't.py'])\n"
            "print(rc, sorted(m for m in sys.modules if m.split('.')[0] in ('ray', 'torch')))\n")
    import subprocess
    import sys

    from ..clean_env import base_env
    from ..conftest import ROOT

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env=base_env({"PYTHONPATH": f"{ROOT}:{tmp_path}"}), check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "0 []"


def _driver_file(tmp_path, **given):
    path = tmp_path / "driver.py"
    path.write_text(ray_driver(shape(**given)))
    return path


def test_a_rank_dies_with_its_ray_worker_even_when_the_worker_is_killed(tmp_path):
    """Hostile review: the driver's children (a new session each) outlived a Ray worker stopped with SIGTERM or SIGKILL,
    holding the node's CPUs and ports. The child now asks the kernel for SIGKILL when its parent dies (PR_SET_PDEATHSIG)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    driver = _driver_file(tmp_path)
    marker = tmp_path / "child.pid"
    inner = f"import os, time; open({str(marker)!r}, 'w').write(str(os.getpid())); time.sleep(120)"
    code = ("import importlib.util, sys\n"
            f"spec = importlib.util.spec_from_file_location('drv', {str(driver)!r}); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
            f"m.run_child([sys.executable, '-c', {inner!r}], None, None)\n")
    for stop in (signal.SIGKILL, signal.SIGTERM):
        marker.unlink(missing_ok=True)
        worker = subprocess.Popen([sys.executable, "-c", code])
        try:
            deadline = time.monotonic() + 30
            while not (marker.exists() and marker.read_text()) and time.monotonic() < deadline:
                time.sleep(0.05)
            child = int(marker.read_text())
            os.kill(worker.pid, stop)
            worker.wait(timeout=30)
            deadline = time.monotonic() + 10
            while os.path.exists(f"/proc/{child}") and time.monotonic() < deadline:
                time.sleep(0.05)
            alive = os.path.exists(f"/proc/{child}") and "zombie" not in open(f"/proc/{child}/status").read()
            assert not alive, f"the rank outlived its worker stopped with {stop.name}"
        finally:
            worker.kill()


def test_a_node_without_compat_is_named_with_the_fix_and_a_missing_program_is_a_sentence(tmp_path):
    """Hostile review: the preflight ran the exporting machine's interpreter path on every node; where it does not exist
    (another machine), Popen raised and Ray printed a traceback."""
    import sys

    namespace: dict = {"__name__": "compat_driver"}
    exec(compile(ray_driver(shape(preflight=("/nonexistent/venv/bin/python", "-m", "compatmatrix"))), "driver.py", "exec"), namespace)  # noqa: S102
    here = namespace["compat_here"]()
    assert here in ([sys.executable, "-m", "compatmatrix"], None) or here[0].endswith("compat")  # this Python holds compatmatrix
    namespace["compat_here"] = lambda: None
    node, _host, code, out = namespace["preflight_on_node"](1, "127.0.0.1", 29500, str(tmp_path))
    assert (node, code) == (1, 127) and "compat is not installed on this node" in out and "--no-preflight" in out
    assert namespace["run_child"](["/nonexistent/program"], None, None, timeout=30) == (127, "cannot start /nonexistent/program: No such file or directory\n")


@pytest.mark.parametrize("fixture_ray, said", [
    ("def init(**kwargs):\n    raise ConnectionError('Could not find any running Ray instance.')\n", "Ray could not start the job: Could not find any running Ray instance."),
    ("# FIXTURE: a ray.py beside the driver, not Ray\n", "is not Ray (a file named ray.py beside the driver?)"),
])
def test_ray_that_cannot_run_the_driver_is_one_sentence_and_exit_2(tmp_path, fixture_ray, said):
    """Hostile review: with no cluster the driver printed Ray's traceback and exited 1 (its docstring says 2)."""
    import subprocess
    import sys

    driver = _driver_file(tmp_path)
    (tmp_path / "ray.py").write_text(fixture_ray)  # a FIXTURE ray module, first on the driver's path
    done = subprocess.run([sys.executable, str(driver)], capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False)
    assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, done.stderr

# --- Ray on the job contract (export/contract.py ENGINES["ray"], render/ray.ray_shape) ----------------------------------


def ray_job(**changed):
    from compatmatrix.jobspec import RAY_MASTER, HeldSet, JobSpec, Resources, Threads

    base = dict(engine="ray", name="run", nodes=2, ranks_per_node=3, backend="gloo", threads=Threads(2, problem="a problem of the plan"),
                master=RAY_MASTER, exports=(("OMP_NUM_THREADS", "2"), ("KMP_BLOCKTIME", "1")), env_step=False, preflight=True,
                command=("train.py", "--x"), launcher="ray", set=HeldSet(("torch==2.13.0+cpu",), "3.11"), python="venv/bin/python",
                compat=("py", "-m", "compatmatrix"), resources=Resources("7", None, 1), notes=("the set (Python 3.11): torch==2.13.0+cpu",))
    return JobSpec(**{**base, **changed})


def test_ray_is_one_row_of_the_contract_whose_driver_finds_the_master():
    from compatmatrix.export.contract import ENGINES, RANK_STARTERS_REFUSED
    from compatmatrix.jobspec import RAY_MASTER

    assert ENGINES["ray"] == ("ray", RAY_MASTER, False) and RANK_STARTERS_REFUSED["ray"] == ("Ray Train", "ray")
    assert RAY_MASTER.addr == RAY_MASTER.port == "" and "bundle 0's node" in RAY_MASTER.found_by and "free port" in RAY_MASTER.found_by


def test_the_ray_shape_is_the_job_contract_in_rays_words():
    from compatmatrix.render.ray import ray_shape

    shape, notes = ray_shape(ray_job(), ("--index-url https://x/simple/", "torch==2.13.0+cpu"), True, "/abs/venv/bin/python", 90, 60)
    assert (shape.nnodes, shape.ranks_per_node, shape.threads, shape.command) == (2, 3, 7 // 3, ("train.py", "--x"))
    assert dict(shape.env) == {"OMP_NUM_THREADS": "2", "KMP_BLOCKTIME": "1"} and shape.install and shape.python == "/abs/venv/bin/python"
    assert shape.preflight == ("py", "-m", "compatmatrix") and (shape.gloo_timeout, shape.preflight_timeout) == (90, 60)
    assert notes[0].endswith("; Ray installs it on every node (runtime_env pip)") and "; a problem of the plan" in notes[1]
    # a held set: its pins, nothing installed; compat env's plan for --python: its exports, the plan's threads win
    held = ray_job(set=ray_job().set.__class__(("torch==2.13.0+cpu", "no transformers"), "3.11", "/x/python"), preflight=False)
    shape, notes = ray_shape(held, ("ignored",), True, None, 90, 60, ({"OMP_NUM_THREADS": "64", "MALLOC": "1"}, {"LD_LIBRARY_PATH": (("/a",), ())}))
    assert shape.requirements == ("ignored",) and not shape.install and shape.preflight == ()
    assert dict(shape.env) == {"OMP_NUM_THREADS": "2", "MALLOC": "1", "KMP_BLOCKTIME": "1"} and shape.additions == {"LD_LIBRARY_PATH": (("/a",), ())}
    assert "compat env --launcher ray --python venv/bin/python --ranks-per-node 3" in notes[1]


@pytest.mark.parametrize(("form", "said"), [("ray", "Ray Train starts every rank itself"), ("sbatch", "The job starts every rank under srun itself")])
def test_one_refusal_of_rank_starters_speaks_for_its_engine(form, said):
    from compatmatrix.export.service import refuse_rank_starters

    who = "Ray Train" if form == "ray" else "srun"
    with pytest.raises(UsageError) as caught:
        refuse_rank_starters(["torchrun", "train.py"], who, form)
    assert said in str(caught.value) and "not torchrun" in str(caught.value)
    assert refuse_rank_starters(["python", "train.py"], who, form) == ["python", "train.py"]
