"""mpirun: Intel MPI or MPICH (hydra) and Open MPI, told apart by ``mpirun --version``. Each rank learns its rank,
world size and local rank from the MPI's own variables (PMI_* / MPI_LOCALRANKID, OMPI_COMM_WORLD_*), which the live
worker maps to RANK / WORLD_SIZE / LOCAL_RANK. With a hostfile it starts the other hosts' ranks itself, through a
remote shell called like ssh.

doctor --live: ``-np``/``-n`` ranks, MASTER_ADDR / MASTER_PORT / OMP_NUM_THREADS passed to every rank (``-x`` under
Open MPI, ``-genv`` under hydra). compat launch: Intel MPI pins each rank by I_MPI_PIN_DOMAIN; Open MPI and MPICH
start each rank through placement/'s binding wrapper (Open MPI with ``--bind-to none``, so its own binding does not
fight it). Its failures: hydra's "PID N RUNNING AT host / EXIT CODE / KILLED BY SIGNAL" blocks, Open MPI's lines
that name a rank.

Side effects: ``mpirun --version`` (a child with a timeout), PATH lookups, reading the hostfile.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Optional

from .interface import (
    BOUND,
    ENV,
    EVERY_HOST,
    HOSTFILE,
    LIVE,
    LOOPBACK,
    UNMAPPED,
    WRAPPER_NAME,
    BoundJob,
    CclEnv,
    Failures,
    Invocation,
    Launch,
    LaunchError,
    LiveJob,
    PathEntries,
    Tool,
    ToolRequest,
    master_exports,
    ofi_exports,
    one_program,
)

HYDRA_RANK = ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID")  # Intel MPI, MPICH (hydra)
OPEN_MPI_RANK = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK")
MVAPICH_RANK = ("MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK")  # MVAPICH2 (an mpirun found on PATH)
_RANK_OF_FLAVOR = {"intel-mpi": HYDRA_RANK, "mpich": HYDRA_RANK, "open-mpi": OPEN_MPI_RANK}


def read_hostfile(path: str) -> list[tuple[str, Optional[int]]]:
    """Hosts in an mpirun hostfile: 'host', 'host:N', 'user@host', 'host slots=N' (Open MPI); comments and blanks
    skipped; or a Slurm node list (node[01-16]) where no such file exists. The size and line caps and what a host may
    be are hostlist.read_host_list's, the one route doctor --hostfile reads them by too."""
    from ..hostlist import HostfileError, read_host_list

    try:
        return read_host_list(path)
    except HostfileError as exc:
        raise LaunchError(str(exc), exc.fix) from None


def find_mpirun(python: str, explicit: Optional[str] = None) -> str:
    if explicit:
        found = shutil.which(explicit)
        if not found:
            raise LaunchError(f"--mpirun {explicit} is not an executable.", "Pass the path of mpirun.")
        return found
    beside = Path(python).parent / "mpirun"  # impi-rt puts it next to the interpreter of the environment
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("mpirun")
    if found:
        return found
    raise LaunchError(
        "no mpirun found (not next to the interpreter, not on PATH).",
        "pip install impi-rt into the environment (Intel MPI), or install Open MPI, or pass --mpirun PATH.",
    )


def hosts_option(flavor: str, hostfile: str, hosts: Sequence[tuple[str, Optional[int]]], per_host: int) -> list[str]:
    """mpirun's option for the hosts: the hostfile as given (Open MPI --hostfile, hydra -f), or, for a Slurm node
    list (hostlist.is_node_list), its expanded hosts written out (Open MPI --host HOST:SLOTS,..., hydra -hosts HOST,...)."""
    from ..hostlist import is_node_list

    if not is_node_list(hostfile):
        return ["--hostfile", hostfile] if flavor == "open-mpi" else ["-f", hostfile]
    names = list(dict.fromkeys(name for name, _ in hosts))
    if flavor == "open-mpi":
        return ["--host", ",".join(f"{name}:{per_host}" for name in names)]
    return ["-hosts", ",".join(names)]


def mpi_path(mpirun: str, path: str) -> str:
    """PATH with mpirun's own folder first: Intel MPI's mpirun script runs mpiexec.hydra and hydra_pmi_proxy from PATH."""
    folder = str(Path(mpirun).parent)
    return os.pathsep.join([folder] + [p for p in path.split(os.pathsep) if p and p != folder])


_FLAVORS: dict[tuple[str, int, int], str] = {}  # (realpath, mtime_ns, size) -> flavour: one mpirun --version per binary and run


def mpi_flavor(mpirun: str, timeout: float = 20.0) -> str:
    """The MPI of ``mpirun`` by its own --version (asked once per binary as it is on disk: compat env asks it for the
    transport, the PATH addition and the interface variables)."""
    try:
        info = os.stat(mpirun)
        key: Optional[tuple[str, int, int]] = (os.path.realpath(mpirun), info.st_mtime_ns, info.st_size)
    except OSError:
        key = None
    if key is not None and key in _FLAVORS:
        return _FLAVORS[key]
    flavor = _ask_flavor(mpirun, timeout)
    if key is not None:
        _FLAVORS[key] = flavor
    return flavor


def _ask_flavor(mpirun: str, timeout: float) -> str:
    try:
        env = dict(os.environ, PATH=mpi_path(mpirun, os.environ.get("PATH", "")))
        done = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LaunchError(f"{mpirun} --version did not answer ({exc.__class__.__name__}).", "Check the MPI installation, or pass --mpirun PATH.") from None
    text = done.stdout + done.stderr
    if "Intel(R) MPI" in text or "Intel MPI" in text:
        return "intel-mpi"
    if "Open MPI" in text or "OpenRTE" in text or "PRRTE" in text:
        return "open-mpi"
    if "HYDRA" in text or "MPICH" in text:
        return "mpich"
    raise LaunchError(f"{mpirun} is neither Intel MPI, MPICH nor Open MPI.", "Pass --mpirun with the path of one of those.")


# where a user's remote shell for mpirun is set (honoured as they are: compat passes them to mpirun untouched)
RSH_VARIABLES = ("I_MPI_HYDRA_BOOTSTRAP_EXEC", "HYDRA_LAUNCHER_EXEC", "OMPI_MCA_plm_rsh_agent")


def remote_shell(env: Mapping[str, str], given: Optional[str] = None) -> tuple[str, str]:
    """(program, where it comes from) of the remote shell that reaches other hosts: --rsh, then the MPI's own variables, then ssh."""
    if given:
        return given, "--rsh"
    for name in RSH_VARIABLES:
        if env.get(name):
            return env[name], f"${name}"
    return "ssh", "the default"


def rsh_arguments(flavor: str, rsh: str) -> list[str]:
    """mpirun's own options for the remote shell: hydra (Intel MPI) -bootstrap-exec, MPICH's hydra -launcher-exec, Open MPI's
    plm_rsh_agent. Each calls it like ssh: PROG [options] HOST COMMAND..."""
    if flavor == "open-mpi":
        return ["--mca", "plm_rsh_agent", rsh]
    if flavor == "intel-mpi":
        return ["-bootstrap", "ssh", "-bootstrap-exec", rsh]
    return ["-launcher", "ssh", "-launcher-exec", rsh]


_LIVE_NAMES = ("MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS")  # what doctor --live's ranks need from compat, passed by the launcher


def _open_mpi_live(binary: str, world: int, n: int, hostfile: Optional[str], hosts: Sequence[tuple[str, Optional[int]]], rsh: Optional[str],
                   env: Mapping[str, str]) -> list[str]:
    """Open MPI's mpirun for doctor --live's ``world`` ranks, ``n`` a host, up to the program: the hosts and remote
    shell, and the variables it must pass by name (-x)."""
    command = [binary, "-np", str(world), "--oversubscribe"]
    if os.geteuid() == 0:
        command.append("--allow-run-as-root")
    if hostfile:
        command += [*hosts_option("open-mpi", hostfile, hosts, n), "--map-by", f"ppr:{n}:node"]
    if rsh:
        command += rsh_arguments("open-mpi", rsh)
    for name in _LIVE_NAMES:
        command += ["-x", name]
    return command + (["-x", "PYTHONPATH"] if "PYTHONPATH" in env else [])


def _hydra_live(binary: str, flavor: str, world: int, n: int, hostfile: Optional[str], hosts: Sequence[tuple[str, Optional[int]]], rsh: Optional[str],
                env: Mapping[str, str]) -> list[str]:
    """Hydra's mpirun (Intel MPI, MPICH) for doctor --live's ``world`` ranks, ``n`` a host, up to the program: the
    hosts and remote shell, and the variables with their values (-genv reaches the remote ranks too)."""
    command = [binary, "-n", str(world), "-ppn", str(n)]
    if hostfile:
        command += hosts_option(flavor, hostfile, hosts, n)
    if rsh:
        command += rsh_arguments(flavor, rsh)
    for name in _LIVE_NAMES:
        command += ["-genv", name, env[name]]
    return command



class Mpirun:
    name = "mpirun"
    flavors: tuple[str, ...] = ("intel-mpi", "open-mpi", "mpich")
    capabilities = frozenset({LIVE, BOUND, ENV, HOSTFILE, EVERY_HOST, UNMAPPED})
    mpi_transport = True
    gives_rendezvous = False  # accelerate sets a default port, not an address ("MASTER_ADDR expected, but not set")
    starts_ranks_itself = False
    rank_variables: tuple[tuple[str, str, str], ...] = (HYDRA_RANK, OPEN_MPI_RANK, MVAPICH_RANK)
    # its ranks' variables, and a surrounding MPI job's wiring (PMI_FD/PORT/ID, PMIx, Open MPI's ess/orte)
    inherited: tuple[str, ...] = ("MPI_LOCALRANKID", "MPI_LOCALNRANKS", "OMPI_UNIVERSE_SIZE", "OMPI_COMM_WORLD_*", "MV2_COMM_WORLD_*", "PMI_*", "PMIX_*",
                 "OMPI_MCA_ess*", "OMPI_MCA_orte_*", "OMPI_MCA_pmix*")
    programs: tuple[str, ...] = ("mpirun", "mpiexec", "mpiexec.hydra")
    modules: tuple[str, ...] = ()

    def local_rank_variable(self, flavor: str) -> str:
        return _RANK_OF_FLAVOR[flavor][2]

    def live(self, job: LiveJob) -> Launch:
        import socket

        layout, python, rsh = job.layout, job.python, job.rsh
        hosts = list(job.hosts) or None
        addr, port = job.addr, job.port
        env = dict(job.env)
        binary = find_mpirun(python, job.mpirun)
        flavor = mpi_flavor(binary)
        env["PATH"] = mpi_path(binary, env.get("PATH", ""))
        worker_args = list(job.worker) + (["--map-mpi"] if job.rank_env else [])  # the worker's --rank-variables: self.rank_variables
        n = layout.nproc_per_node
        world = layout.world_size
        if layout.hostfile and hosts is not None:
            world = n * len(hosts)
        if flavor == "open-mpi":
            command = _open_mpi_live(binary, world, n, layout.hostfile, hosts or [], rsh, env)
        else:  # hydra: Intel MPI and MPICH pass the whole environment to local ranks; -genv reaches the remote ones too
            command = _hydra_live(binary, flavor, world, n, layout.hostfile, hosts or [], rsh, env)
        command += [python, *worker_args]
        notes: tuple[str, ...] = (f"{flavor}: the worker maps PMI_RANK/PMI_SIZE/MPI_LOCALRANKID or OMPI_COMM_WORLD_* to RANK/WORLD_SIZE/LOCAL_RANK",) if job.rank_env else ()
        if hosts and not layout.master_port and addr not in (LOOPBACK, "localhost", socket.gethostname()):
            notes += (f"MASTER_PORT {port} was free on this node, not necessarily on {addr}: pass --master-port to choose one",)
        names_of_hosts = tuple(dict.fromkeys(name for name, _ in hosts)) if hosts else ()
        if len(names_of_hosts) > 1 or rsh:
            program, source = remote_shell(env, rsh)
            notes += (f"remote shell: {program} ({source}), called like ssh: PROG [options] HOST COMMAND",)
        # every rank writes its record into the run folder: with a hostfile, one that every host sees, so all of them are read here
        return Launch("mpirun", flavor, (tuple(command),), (env,), f"{addr}:{port}", world, world, notes, names_of_hosts)

    def tool(self, request: ToolRequest) -> Tool:
        try:
            program = find_mpirun(request.python, request.program)
        except LaunchError as exc:
            if request.print_only and request.flavor:
                return Tool(request.program or "mpirun", request.flavor)
            raise LaunchError(exc.sentence(), exc.fix + (" With --print, --mpi-flavor names the MPI without one here." if request.print_only else "")) from None
        if request.flavor:
            return Tool(program, request.flavor)
        try:
            return Tool(program, mpi_flavor(program))
        except LaunchError as exc:
            raise LaunchError(exc.sentence(), exc.fix + f" Or name it with --mpi-flavor {'|'.join(self.flavors)}.") from None

    def processes(self, job: BoundJob, base: Mapping[str, str]) -> Launch:
        return one_program(self.bound(job), job.ranks, base)  # not offered to compat tune (no TUNE): its ranks' variables differ

    def bound(self, job: BoundJob) -> Invocation:
        ranks = str(job.ranks)
        flavor, mpirun, path = job.tool.flavor, job.tool.program, job.path
        if flavor not in self.flavors:
            raise LaunchError(f"Unknown launcher mpirun ({flavor or 'no MPI flavour'}).", "Use --launcher torchrun or --launcher mpirun (Intel MPI, Open MPI or MPICH).")
        env = dict(job.rank_env)
        additions = dict(job.additions)
        folder = os.path.dirname(mpirun)
        if flavor in ("intel-mpi", "mpich") and folder and folder not in path.split(os.pathsep):
            # hydra runs its proxies from PATH: its folder in front (of the oneCCL environment's own entries), never the whole PATH written out
            given = additions.get("PATH", PathEntries())
            additions["PATH"] = PathEntries((folder, *(e for e in given.prepend if e != folder)), given.append)
        if flavor == "intel-mpi":
            env["I_MPI_PIN"] = "1"
            env["I_MPI_PIN_DOMAIN"] = i_mpi_pin_domain(job.masks)
        # the ranks' variables passed by name (their values are the launching shell's): -genvlist reaches hydra's
        # remote ranks too, -x Open MPI's; PATH stays each host's own
        passed = list(dict.fromkeys(name for name in (*env, *additions, *job.passed) if name != "PATH"))
        across = job.across if job.across is not None and job.across.hostfile else None
        per_host = job.ranks
        hosts_args: list[str] = []
        where = ONE_HOST_NOTE
        world = ranks
        if across is not None:
            names = list(dict.fromkeys(name for name, _ in across.hosts))
            world = str(per_host * len(names))
            hosts_args = hosts_option(flavor, across.hostfile, across.hosts, per_host)
            if flavor == "open-mpi":
                hosts_args += ["--map-by", f"ppr:{per_host}:node"]
            if across.rsh:
                hosts_args += rsh_arguments(flavor, across.rsh)
            where = (f"{per_host} ranks on each of {len(names)} hosts ({', '.join(names[:8])}{', ...' if len(names) > 8 else ''}), started through the remote shell; "
                     "every host is planned as this one")
        if flavor == "intel-mpi":
            argv = [mpirun, "-n", world, "-ppn", ranks, *hosts_args, "-genvlist", ",".join(passed), *job.command]
            return Invocation("mpirun", flavor, tuple(argv), env, "I_MPI_PIN_DOMAIN",
                              ("Intel MPI pins local rank i to the i-th mask of I_MPI_PIN_DOMAIN (its compute CPUs)", where), additions)
        variable = self.local_rank_variable(flavor)
        script, tool = job.wrapper(variable)
        if flavor == "open-mpi":
            argv = [mpirun, "-np", world, "--bind-to", "none", *hosts_args]
            if job.as_root:
                argv.append("--allow-run-as-root")
            for name in passed:
                argv += ["-x", name]
        else:
            argv = [mpirun, "-n", world, "-ppn", ranks, *hosts_args, "-genvlist", ",".join(passed)]
        argv += ["sh", "-c", script, WRAPPER_NAME, *job.command]
        return Invocation("mpirun", flavor, tuple(argv), env, tool,
                          (f"{flavor}: each rank starts as sh -c '...' which execs {tool} with the rank's CPUs (chosen by {variable}), then the command", where), additions)

    def ccl_exports(self, env: CclEnv) -> tuple[dict[str, str], list[str]]:
        """Intel MPI's mpirun: oneCCL's MPI transport, which refuses Intel MPI without I_MPI_ROOT ("neither I_MPI_ROOT
        nor ONEAPI_ROOT is set"); Open MPI's or MPICH's: the OFI transport (the MPI one loads Intel MPI's libmpi there and
        hangs). Either way MASTER_ADDR/MASTER_PORT, which mpirun does not set."""
        master, words = master_exports(self.name, env.env)
        try:
            program, flavor = env_mpirun(env.python, env.path, env.mpirun)
        except LaunchError as exc:
            return master, [f"launcher mpirun: {exc.sentence()[:-1]}: its MPI is not known, so no transport setting is added", *words]
        if flavor != "intel-mpi":
            extra, said = ofi_exports(f"mpirun ({flavor}, {program})", env,
                                      f"oneCCL's MPI transport is built for Intel MPI: under {flavor}'s mpirun it loads Intel MPI's libmpi and hangs")
            return {**extra, **master}, said + words
        root = env.mpi_root or str(Path(program).resolve().parent.parent)  # impi-rt's activation script, else <root>/bin/mpirun
        said = [f"launcher mpirun (intel-mpi, {program}): oneCCL's MPI transport (CCL_ATL_TRANSPORT={env.env.get('CCL_ATL_TRANSPORT', 'mpi')})"]
        extra = {}
        if env.exports.get("I_MPI_ROOT") or env.env.get("I_MPI_ROOT"):
            said.append("I_MPI_ROOT: already set by the oneCCL environment; kept")
        else:
            extra["I_MPI_ROOT"] = root
            said.append(f"I_MPI_ROOT={root}: oneCCL's MPI transport refuses Intel MPI without it (\"neither I_MPI_ROOT nor ONEAPI_ROOT is set\")")
        return {**extra, **master}, said + words

    def path_additions(self, python: str, path: Optional[str] = None, mpirun: Optional[str] = None) -> tuple[dict[str, PathEntries], list[str]]:
        """Intel MPI's and MPICH's mpirun (hydra) run mpiexec.hydra and hydra_pmi_proxy from PATH: the mpirun's folder in
        front of PATH (VENV/bin for impi-rt's), as compat launch's own line puts it there; without it a clean shell's
        ``mpirun`` is another MPI's, and VENV/bin/mpirun called by its path fails "mpiexec.hydra: not found". Open MPI's
        mpirun finds its own programs: nothing."""
        try:
            program, flavor = env_mpirun(python, path, mpirun)
        except LaunchError:
            return {}, []  # ccl_exports says that no mpirun is found
        folder = os.path.dirname(os.path.abspath(program))
        if flavor not in ("intel-mpi", "mpich"):
            return {}, []
        return ({"PATH": PathEntries((folder,))},
                [f"launcher mpirun ({flavor}, {program}): PATH gains {folder} in front, where hydra finds mpiexec.hydra and hydra_pmi_proxy "
                 "(a clean shell's mpirun would be another MPI's)"])

    def interface_exports(self, interface: str, env: Mapping[str, str], python: str = "", path: Optional[str] = None) -> tuple[dict[str, str], list[str]]:
        """Its own network between the hosts: Intel MPI's hydra (I_MPI_HYDRA_IFACE), MPICH's (HYDRA_IFACE), Open MPI's
        byte transfer and out-of-band layers (btl_tcp_if_include, oob_tcp_if_include); those the environment sets are kept."""
        try:
            program, flavor = env_mpirun(python, path)
        except LaunchError as exc:
            return {}, [f"launcher mpirun: {exc.sentence()[:-1]}: its MPI is not known, so no MPI interface setting is added"]
        names = IFACE_OF_FLAVOR[flavor]
        chosen = {name: interface for name in names if not env.get(name)}
        said = [f"launcher mpirun ({flavor}, {program}): {', '.join(f'{k}={v}' for k, v in chosen.items())}, its own traffic between the hosts"] if chosen else []
        said += [f"launcher mpirun: {name}={env[name]} already set here; kept" for name in names if env.get(name)]
        return chosen, said

    def failures(self, log: str) -> Failures:
        codes: dict[int, int] = {}
        for pid, exit_code, signal_number in re.findall(r"PID (\d+) RUNNING AT \S+\s*\n=\s*(?:EXIT CODE: (\d+)|KILLED BY SIGNAL: (\d+))", log):  # hydra
            codes[int(pid)] = int(exit_code) if exit_code else -int(signal_number)
        return Failures(codes, _open_mpi_first_failure(log))


ONE_HOST_NOTE = "no hostfile: the ranks meet on this host, so no interface variable (GLOO_SOCKET_IFNAME, I_MPI_HYDRA_IFACE, ...) is needed"
# each flavour's own variables for the interface its launch and its ranks' traffic use between hosts
IFACE_OF_FLAVOR = {"intel-mpi": ("I_MPI_HYDRA_IFACE",), "mpich": ("HYDRA_IFACE",),
                   "open-mpi": ("OMPI_MCA_btl_tcp_if_include", "OMPI_MCA_oob_tcp_if_include")}


def env_mpirun(python: str, path: Optional[str], chosen: Optional[str] = None) -> tuple[str, str]:
    """(program, flavour) of the mpirun a job of this environment runs: ``chosen`` (compat launch --mpirun) first, then
    impi-rt's next to the interpreter, then PATH as the oneCCL environment leaves it (never "./mpirun" for want of an
    interpreter). LaunchError when none."""
    beside = Path(python).parent / "mpirun" if python else None
    program = chosen or (str(beside) if beside is not None and beside.is_file() and os.access(beside, os.X_OK) else shutil.which("mpirun", path=path))
    if not program:
        raise LaunchError("no mpirun found on PATH.", "pip install impi-rt into the environment, or install Open MPI.")
    return program, mpi_flavor(program)


def i_mpi_pin_domain(masks: Sequence[int]) -> str:
    """Intel MPI's explicit mask list: local rank i is pinned to the i-th hexadecimal mask."""
    return "[" + ",".join(hex(mask) for mask in masks) + "]"


def _open_mpi_first_failure(log: str) -> Optional[tuple[str, int, Optional[int]]]:
    """Open MPI names the rank that failed (not its pid): ("rank", n, code)."""
    signalled = re.search(r"process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+)", log)
    if signalled:
        return ("rank", int(signalled.group(1)), -int(signalled.group(2)))
    exited = re.search(r"Process name: \[\[\d+,\d+\],(\d+)\]\s*\n\s*Exit code:\s*(\d+)", log)
    if exited:
        return ("rank", int(exited.group(1)), int(exited.group(2)))
    return None


MPIRUN = Mpirun()
