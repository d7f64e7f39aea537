"""``compat export ray``: a Ray Train driver for a resolved set, as Python source. Pure: no I/O, no import of Ray.

``ray_driver(shape)`` is a function of explicit parameters only (``RayShape``: nodes, ranks per node, CPUs per rank,
the environment's exports, the preflight's compat command, the training command, the set's requirement lines), made
from the job contract (jobspec.JobSpec, engine "ray") by ``ray_shape``, a small pure adapter that adds only Ray's own
words: the CPUs per rank Ray reserves, runtime_env pip or not, compat env's plan read for --python, the timeouts. The driver, run where ``ray.init(address="auto")`` reaches the cluster (the head node, or
``ray job submit -- python DRIVER``), does in order:

1. ``ray.init`` with the job's ``runtime_env``: ``env_vars`` = compat env's exports (threads, allocator, oneCCL), and,
   unless the nodes already hold the set, ``pip`` = the set's requirement lines (Ray installs them per node);
2. the live preflight, one Ray task per node: a STRICT_SPREAD placement group of one bundle per node, the node IP and
   a free port of bundle 0's node (the master), then on every node ``compat doctor --live --launcher ray`` with the
   variables Ray Train gives a worker (NODE_RANK, WORLD_SIZE = nodes, LOCAL_WORLD_SIZE 1, MASTER_ADDR/MASTER_PORT);
   each node's findings are printed, and any failure ends the job (exit 1) before training, as every wait is bounded;
3. training: ``TorchTrainer`` with ``ScalingConfig(num_workers = nodes x ranks, resources_per_worker={"CPU": threads})``
   and ``TorchConfig(backend="gloo", timeout_s=...)`` bounded (Ray's default is 1800 s: a cross-host fault would hang
   half an hour). Each worker runs the training command as a child with torchrun's variables (RANK, WORLD_SIZE,
   LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR from Ray), on a port rank 0 finds free and gives every rank over
   Ray's own group (Ray's group holds MASTER_PORT); a rank that exits non-zero fails the run (exit 1).

Every value is written as a Python literal (``repr``: quotes, line breaks, ``$`` and any character stay data, never
code) after the checks a command line and an environment impose (no NUL, no lone surrogate; variable names as shells
take them); comments by ``values.comment_text``. ``ast.parse`` reads every driver back (tests/export/test_export_ray.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from ..values import UnwritableValue, comment_text, env_name_ok

if TYPE_CHECKING:
    from ..jobspec import JobSpec

FORMAT = "a Ray driver"
GLOO_TIMEOUT_S = 300  # TorchConfig.timeout_s compat writes (Ray's default 1800 turns a cross-host fault into a half-hour hang)
PREFLIGHT_TIMEOUT_S = 120  # compat doctor --live's own --live-timeout; the task that runs it gets 60 s more
PLACEMENT_TIMEOUT_S = 120  # how long the driver waits for Ray to place the preflight's tasks on the nodes


@dataclass(frozen=True)
class RayShape:
    name: str  # the run's name (RunConfig.name)
    nnodes: int
    ranks_per_node: int
    threads: int  # CPUs per rank: resources_per_worker={"CPU": threads}, OMP_NUM_THREADS of the plan
    command: tuple[str, ...]  # what each rank runs (a script gets the interpreter in front at run time)
    env: Mapping[str, str] = field(default_factory=dict)  # compat env's exports: runtime_env env_vars
    # compat env's path lists (LD_LIBRARY_PATH, ...): name -> (entries put in front, entries put after) the node's own value,
    # joined by the driver for each child (Ray's env_vars would drop an unset ${NAME} and leave an empty entry, the cwd)
    additions: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = field(default_factory=dict)
    requirements: tuple[str, ...] = ()  # the set's requirement lines ('torch==2.13.0+cpu')
    install: bool = True  # runtime_env pip: Ray installs the set on every node (False: the nodes' Python holds it)
    python: Optional[str] = None  # the ranks' interpreter (None: the interpreter Ray runs the worker with)
    preflight: tuple[str, ...] = ()  # how a node runs compat (an interpreter -m compatmatrix); () = no preflight
    gloo_timeout: int = GLOO_TIMEOUT_S
    preflight_timeout: int = PREFLIGHT_TIMEOUT_S


Additions = Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]]


def ray_shape(spec: JobSpec, requirements: Sequence[str], runtime_pip: bool, interpreter: Optional[str], gloo_timeout: int,
              preflight_timeout: int, env_plan: Optional[tuple[Mapping[str, str], Additions]] = None) -> tuple[RayShape, list[str]]:
    """The driver's shape and notes for the job contract ``spec`` (engine "ray": its resources.cpu is --cpus-per-node):
    ``requirements`` the resolved set's requirement lines (compat export requirements'; the held set's pins are the
    contract's), ``runtime_pip`` whether Ray installs a resolved set (a held one never), ``interpreter`` --python made
    absolute, ``env_plan`` compat env's (exports, path-list additions) for --python, whose threads the plan's replace."""
    cpus = int(spec.resources.cpu or 0)
    threads = cpus // spec.ranks_per_node
    omp = spec.threads.omp_threads if spec.threads else threads
    fixed = dict(spec.exports)
    notes = list(spec.notes)
    install = runtime_pip and spec.set.read_from is None
    if spec.set.read_from is None:  # the contract's set note, and how Ray gets the set
        notes[-1] += "; Ray installs it on every node (runtime_env pip)" if install else "; the nodes' Python must hold it (--no-runtime-pip)"
    additions: Additions = {}
    if env_plan is not None:
        env = dict(env_plan[0])
        additions = env_plan[1]
        env["OMP_NUM_THREADS"] = fixed["OMP_NUM_THREADS"]  # the plan of the nodes' CPUs, not of this machine's
        env.setdefault("KMP_BLOCKTIME", fixed["KMP_BLOCKTIME"])
        notes.append(f"env_vars: compat env --launcher ray --python {spec.python} --ranks-per-node {spec.ranks_per_node} (read here; the same paths on every node)")
    else:
        env = fixed
    problem = spec.threads.problem if spec.threads else ""
    notes.append(f"plan: {spec.nodes} node(s) x {spec.ranks_per_node} rank(s), {cpus} CPUs per node (--cpus-per-node): each rank asks Ray for {threads} CPU(s), "
                 f"OMP_NUM_THREADS={omp}" + (f"; {problem}" if problem else ""))
    notes.append(f"Ray's gloo group times out after {gloo_timeout} s (--gloo-timeout; Ray's default 1800 s)")
    shape = RayShape(spec.name, spec.nodes, spec.ranks_per_node, threads, spec.command, env, additions, tuple(requirements), install, interpreter,
                     spec.compat if spec.preflight else (), gloo_timeout, preflight_timeout)
    return shape, notes


def word_ok(word: str) -> str:
    """Why ``word`` cannot be a command-line argument or an environment value ('' when it can)."""
    if "\0" in word:
        return "it holds a NUL character, which no command-line argument or environment value can"
    if any("\ud800" <= ch <= "\udfff" for ch in word):
        return "it holds a lone surrogate, which is not a character"
    return ""


def check_shape(shape: RayShape) -> None:
    """Every value the driver writes, or UnwritableValue naming it."""
    if shape.nnodes < 1 or shape.ranks_per_node < 1 or shape.threads < 1:
        raise UnwritableValue("node, rank or thread count", f"{shape.nnodes}x{shape.ranks_per_node}x{shape.threads}", FORMAT, "each must be at least 1")
    if shape.gloo_timeout < 1 or shape.preflight_timeout < 1:
        raise UnwritableValue("timeout", f"{shape.gloo_timeout}/{shape.preflight_timeout}", FORMAT, "a timeout is at least 1 s")
    if not shape.command:
        raise UnwritableValue("training command", "", FORMAT, "there is none (give it after --)")
    checked = [("run name (--name)", shape.name), *(("training command word", w) for w in shape.command),
               *(("compat command word", w) for w in shape.preflight), *(("requirement", r) for r in shape.requirements),
               *(("environment value", v) for v in shape.env.values()),
               *(("path list entry", e) for pre, post in shape.additions.values() for e in (*pre, *post))]
    if shape.python is not None:
        checked.append(("interpreter (--python)", shape.python))
    for what, value in checked:
        why = word_ok(value)
        if why:
            raise UnwritableValue(what, value, FORMAT, why)
    for value in shape.env.values():
        if "$" in value:  # ray/_private/utils.py update_envs: os.path.expandvars on every value, then ${NAME} of an unset NAME dropped
            raise UnwritableValue("environment value", value, FORMAT, "Ray expands $NAME and ${NAME} in runtime_env env_vars, with no escape")
    for pre, post in shape.additions.values():
        for entry in (*pre, *post):
            if ":" in entry or not entry:
                raise UnwritableValue("path list entry", entry, FORMAT, "an entry of a path list is not empty and holds no ':'")
    for name in [*shape.env, *shape.additions]:
        if not env_name_ok(name):
            raise UnwritableValue("environment variable name", name, FORMAT, "a variable name is letters, digits and '_', not starting with a digit")
    if not shape.name.strip():
        raise UnwritableValue("run name (--name)", shape.name, FORMAT, "it is empty")


def _literal(value: object) -> str:
    """A Python literal for a str, int, bool, None, or a list / dict of them: repr, which escapes every quote, line
    break and non-printable character, so the value stays data."""
    return repr(value)


def ray_driver(shape: RayShape, notes: Sequence[str] = ()) -> str:
    check_shape(shape)
    runtime_env: dict = {"env_vars": dict(shape.env)}
    if shape.install and shape.requirements:
        runtime_env["pip"] = {"packages": list(shape.requirements), "pip_check": False}
    lines = ["#!/usr/bin/env python3"]
    lines += [f"# {comment_text(note)}" for note in ("written by compat export ray", *notes)]
    lines += [
        '"""The Ray Train driver compat export ray wrote: the live preflight (compat doctor --live, one Ray task per node),',
        "then the training command under Ray Train on every rank. Run it on the head node (python THIS_FILE) or as a Ray job",
        "(ray job submit -- python THIS_FILE). Exit 0 trained, 1 the preflight or a rank failed, 2 Ray could not run it.",
        '"""',
        "",
        "import os",
        "import signal",
        "import socket",
        "import subprocess",
        "import sys",
        "",
        f"NAME = {_literal(shape.name)}",
        f"NODES = {_literal(shape.nnodes)}",
        f"RANKS_PER_NODE = {_literal(shape.ranks_per_node)}",
        f"THREADS = {_literal(shape.threads)}  # CPUs per rank (Ray's resources_per_worker) and OMP_NUM_THREADS",
        f"GLOO_TIMEOUT_S = {_literal(shape.gloo_timeout)}  # TorchConfig.timeout_s: Ray's default 1800 s turns a cross-host fault into a half-hour hang",
        f"PREFLIGHT_TIMEOUT_S = {_literal(shape.preflight_timeout)}  # compat doctor --live --live-timeout; its task gets 60 s more",
        f"PLACEMENT_TIMEOUT_S = {_literal(PLACEMENT_TIMEOUT_S)}  # waiting for Ray to place one preflight task on each node",
        f"PYTHON = {_literal(shape.python)}  # the ranks' interpreter (None: the one Ray runs the worker with)",
        f"PREFLIGHT = {_literal(list(shape.preflight))}  # compat on every node; [] = no preflight",
        f"COMMAND = {_literal(list(shape.command))}",
        f"REQUIREMENTS = {_literal(list(shape.requirements))}  # the set",
        f"RUNTIME_ENV = {_literal(runtime_env)}",
        f"ADDITIONS = {_literal({k: [list(pre), list(post)] for k, (pre, post) in shape.additions.items()})}  # path lists: [in front, after] the node's value",
        "",
        "",
        "def fail(message, code=1):",
        '    sys.stderr.write("compat ray driver: " + message + "\\n")',
        "    sys.stderr.flush()",
        "    sys.exit(code)",
        "",
        "",
        "def last_line(exc):",
        "    return (str(exc).strip().splitlines() or [type(exc).__name__])[-1]",
        "",
        "",
        "def free_port():",
        "    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:",
        '        sock.bind(("", 0))',
        "        return sock.getsockname()[1]",
        "",
        "",
        "def interpreter():",
        "    return PYTHON or sys.executable",
        "",
        "",
        "def rank_argv():",
        "    # compat launch's rule: a script, -m MODULE or -c CODE gets the interpreter in front",
        '    if COMMAND[0].endswith(".py") or COMMAND[0] in ("-m", "-c"):',
        "        return [interpreter()] + COMMAND",
        "    return list(COMMAND)",
        "",
        "",
        "# started in the child before it becomes the command: the kernel sends it SIGKILL when this process (the thread that",
        "# started it) dies, also when Ray stops the worker with SIGKILL (PR_SET_PDEATHSIG = 1; kept across exec)",
        "DIE_WITH_PARENT = (\"import ctypes, os, signal, sys\\n\"",
        "                   \"ctypes.CDLL(None).prctl(1, signal.SIGKILL)\\n\"",
        "                   \"os.getppid() == int(sys.argv[1]) or os._exit(137)\\n\"",
        "                   \"try:\\n    os.execvp(sys.argv[2], sys.argv[2:])\\n\"",
        "                   \"except OSError as exc:\\n    sys.stderr.write('cannot start %s: %s\\\\n' % (sys.argv[2], exc.strerror))\\n    os._exit(127)\\n\")",
        "",
        "",
        "def run_child(argv, env, cwd, timeout=None):",
        "    # a child in its own process group, killed with its group when it outlives its time or this process ends, and by",
        "    # the kernel when this process is killed (DIE_WITH_PARENT); its own children are its to end",
        "    wrapped = [sys.executable, \"-c\", DIE_WITH_PARENT, str(os.getpid())] + list(argv)",
        "    try:",
        "        child = subprocess.Popen(wrapped, env=env, cwd=cwd if cwd and os.path.isdir(cwd) else None, start_new_session=True,",
        "                                 stdout=subprocess.PIPE if timeout else None, stderr=subprocess.STDOUT if timeout else None)",
        "    except OSError as exc:",
        "        return 127, \"cannot start %s: %s\" % (argv[0], exc.strerror or exc)",
        "    try:",
        "        out, _ = child.communicate(timeout=timeout)",
        "        return child.returncode, (out or b\"\").decode(\"utf-8\", \"replace\")",
        "    except subprocess.TimeoutExpired:",
        "        return None, \"\"",
        "    finally:",
        "        if child.poll() is None:",
        "            try:",
        "                os.killpg(child.pid, signal.SIGKILL)",
        "            except ProcessLookupError:",
        "                pass",
        "            child.wait()",
        "",
        "",
        "def child_env(extra):",
        "    # the worker's environment (Ray set RUNTIME_ENV's env_vars there), the path lists joined, then the child's own variables",
        "    env = dict(os.environ)",
        "    for key, (front, after) in ADDITIONS.items():",
        '        own = [entry for entry in env.get(key, "").split(":") if entry]',
        '        env[key] = ":".join(front + [entry for entry in own if entry not in front and entry not in after] + after)',
        "    env.update(extra)",
        "    return env",
        "",
        "",
        "def master_of_node():",
        "    import ray",
        "",
        "    return ray.util.get_node_ip_address(), free_port(), socket.gethostname()",
        "",
        "",
        "def compat_here():",
        "    # compat as this node has it: the exporting machine's interpreter where the same path holds it (a shared file",
        "    # system), else this worker's Python when it holds compatmatrix, else a compat on PATH; None when the node has none",
        "    if PREFLIGHT and os.path.exists(PREFLIGHT[0]):",
        "        return list(PREFLIGHT)",
        "    import importlib.util",
        "    import shutil",
        "",
        "    if importlib.util.find_spec(\"compatmatrix\") is not None:",
        "        return [sys.executable, \"-m\", \"compatmatrix\"]",
        "    found = shutil.which(\"compat\")",
        "    return [found] if found else None",
        "",
        "",
        "def preflight_on_node(node, addr, port, cwd):",
        "    compat = compat_here()",
        "    if compat is None:",
        "        return node, socket.gethostname(), 127, (\"compat is not installed on this node (not at %s, not in %s, not on PATH): install \"",
        "                                                 \"compatmatrix into the nodes' Python, or export with --no-preflight\" % (PREFLIGHT[0], sys.executable))",
        "    # the variables Ray Train gives a worker when it runs one per node (ray/train/torch/config.py)",
        '    env = child_env({"NODE_RANK": str(node), "RANK": str(node), "WORLD_SIZE": str(NODES), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",',
        '                     "MASTER_ADDR": addr, "MASTER_PORT": str(port)})',
        '    argv = compat + ["doctor", "--live", "--launcher", "ray", "--only", "live", "--python", interpreter(),',
        '                        "--ranks-per-node", str(RANKS_PER_NODE), "--live-timeout", str(PREFLIGHT_TIMEOUT_S)]',
        "    code, out = run_child(argv, env, cwd, timeout=PREFLIGHT_TIMEOUT_S + 60)",
        "    return node, socket.gethostname(), code, out[-20000:]",
        "",
        "",
        "def preflight(ray, cwd):",
        "    from ray.util.placement_group import placement_group, remove_placement_group",
        "    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy",
        "",
        "    cpus = RANKS_PER_NODE * THREADS",
        '    group = placement_group([{"CPU": cpus}] * NODES, strategy="STRICT_SPREAD")',
        "    try:",
        "        ready, _ = ray.wait([group.ready()], timeout=PLACEMENT_TIMEOUT_S)",
        "        if not ready:",
        '            fail("Ray could not place the preflight on %d nodes with %d CPUs each within %d s (ray status shows the nodes and '
        'their CPUs); not training." % (NODES, cpus, PLACEMENT_TIMEOUT_S))',
        "",
        "        def on(node):",
        "            return PlacementGroupSchedulingStrategy(placement_group=group, placement_group_bundle_index=node)",
        "",
        "        master = ray.remote(num_cpus=1)(master_of_node)",
        "        addr, port, host = ray.get(master.options(scheduling_strategy=on(0)).remote(), timeout=PLACEMENT_TIMEOUT_S)",
        '        sys.stderr.write("compat preflight: %d nodes, %d ranks each, master %s:%d (%s)\\n" % (NODES, RANKS_PER_NODE, addr, port, host))',
        "        check = ray.remote(num_cpus=cpus)(preflight_on_node)",
        "        runs = [check.options(scheduling_strategy=on(node)).remote(node, addr, port, cwd) for node in range(NODES)]",
        "        results = ray.get(runs, timeout=PREFLIGHT_TIMEOUT_S + 120)",
        "    finally:",
        "        remove_placement_group(group)",
        "    failed = []",
        "    for node, host, code, out in sorted(results):",
        '        sys.stdout.write("--- compat preflight, node %d (%s): %s\\n%s\\n" % (node, host, "no answer within its time" if code is None '
        'else "exit %d" % code, out))',
        "        if code != 0:",
        '            failed.append("node %d (%s)" % (node, host))',
        "    sys.stdout.flush()",
        "    if failed:",
        '        fail("the preflight failed on " + ", ".join(failed) + ": see its findings above; not training.")',
        "",
        "",
        "def train_rank(config):",
        "    import ray.train",
        "    import torch.distributed as dist",
        "",
        "    context = ray.train.get_context()",
        "    rank, world = context.get_world_rank(), context.get_world_size()",
        "    local, per_node = context.get_local_rank(), context.get_local_world_size()",
        "    if per_node != RANKS_PER_NODE:",
        '        raise RuntimeError("Ray placed %d ranks on this node, the plan %d: give each node %d CPUs (ray start --num-cpus) so that '
        'Ray packs %d ranks of %d CPUs on each" % (per_node, RANKS_PER_NODE, RANKS_PER_NODE * THREADS, RANKS_PER_NODE, THREADS))',
        "    # Ray's own group holds MASTER_PORT: rank 0 finds another free port on its node and gives it to every rank over that group",
        "    port = [free_port() if rank == 0 else None]",
        "    dist.broadcast_object_list(port, src=0)",
        '    env = child_env({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(local), "LOCAL_WORLD_SIZE": str(per_node),',
        '                     "NODE_RANK": str(context.get_node_rank()), "MASTER_ADDR": os.environ["MASTER_ADDR"], "MASTER_PORT": str(port[0])})',
        '    code, _ = run_child(rank_argv(), env, config.get("cwd"))',
        "    if code != 0:",
        '        raise RuntimeError("rank %d: the training command ended with exit code %s" % (rank, code))',
        "",
        "",
        "def train(cwd):",
        "    from ray.train import FailureConfig, RunConfig, ScalingConfig",
        "    from ray.train.torch import TorchConfig, TorchTrainer",
        "",
        "    scaling = ScalingConfig(num_workers=NODES * RANKS_PER_NODE, resources_per_worker={\"CPU\": THREADS},",
        '                            placement_strategy="STRICT_SPREAD" if RANKS_PER_NODE == 1 else "PACK")',
        '    trainer = TorchTrainer(train_rank, train_loop_config={"cwd": cwd}, scaling_config=scaling,',
        '                           torch_config=TorchConfig(backend="gloo", timeout_s=GLOO_TIMEOUT_S),',
        "                           run_config=RunConfig(name=NAME, failure_config=FailureConfig(max_failures=0)))",
        "    try:",
        "        trainer.fit()",
        "    except Exception as exc:  # Ray's TrainingFailedError and what a worker raised",
        '        fail("training failed: %s" % last_line(exc))',
        "",
        "",
        "def main():",
        "    try:",
        "        import ray",
        "    except ImportError:",
        '        fail("Ray is not installed for %s: pip install \'ray[train]\' (the nodes run the same)." % sys.executable, 2)',
        '    if not hasattr(ray, "init"):',
        '        fail("%s is not Ray (a file named ray.py beside the driver?): rename it." % getattr(ray, "__file__", "ray"), 2)',
        "    cwd = os.getcwd()",
        "    try:",
        '        ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), runtime_env=RUNTIME_ENV)',
        "    except Exception as exc:  # no cluster, a bad address, a runtime_env Ray refuses",
        '        fail("Ray could not start the job: %s; start the cluster (ray start) or set RAY_ADDRESS." % last_line(exc), 2)',
        "    try:",
        "        if PREFLIGHT:",
        "            preflight(ray, cwd)",
        "        train(cwd)",
        "    except Exception as exc:  # a wait that ran out (GetTimeoutError), a task Ray could not run (RayTaskError)",
        '        fail("Ray could not run the job: %s (ray status shows the cluster)." % last_line(exc), 2)',
        "    finally:",
        "        ray.shutdown()",
        '    sys.stderr.write("compat ray driver: trained on %d nodes, %d ranks each\\n" % (NODES, RANKS_PER_NODE))',
        "",
        "",
        'if __name__ == "__main__":',
        "    main()",
        "",
    ]
    return "\n".join(lines)
