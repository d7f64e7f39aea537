# Environment probe: run BY the target interpreter (python -c <this source> --answer FILE).
# Standard library only; must run on Python 3.6 to 3.15. It never imports the stack (torch, IPEX,
# the oneCCL bindings): it reads dist-info metadata and /proc and /sys, and writes one JSON object into
# FILE (written whole, then renamed into place: stdout may carry anything a sitecustomize or a wrapper
# prints); without --answer it prints the object. Side effects: that one file.
import json
import os
import re
import shutil
import stat
import sys
import sysconfig

PROBE_VERSION = 1

ENV_PREFIXES = (
    "OMP_", "KMP_", "CCL_", "I_MPI_", "FI_", "PMI_", "OMPI_", "MPI_", "ATL_", "TORCH_", "IPEX_", "DNNL_", "ONEDNN_",
    "MASTER_", "LOCAL_", "GROUP_", "NPROC", "HF_", "TRANSFORMERS_", "ACCELERATE_",
    "GLOO_", "HYDRA_",  # the interface variables compat env keeps when set (GLOO_SOCKET_IFNAME, MPICH's HYDRA_IFACE)
)
ENV_NAMES = (
    "LD_PRELOAD", "LD_LIBRARY_PATH", "PATH", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK",
    "MKL_NUM_THREADS", "VIRTUAL_ENV", "CONDA_PREFIX", "CPATH", "LIBRARY_PATH",
)
CPU_FLAGS = ("avx2", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile", "amx_int8")
BINDING_MODULES = ("oneccl_bindings_for_pytorch", "torch_ccl")
METADATA_LIMIT = 1 << 20
# The largest CPU number a CPU list may name, plus one. Linux's own ceiling (NR_CPUS, x86-64 MAXSMP and powerpc) is
# 8192; 65536 leaves eight times that, and a list beyond it ("0-4294967295") is refused before it is expanded.
MAX_CPUS = 65536
# cgroup CPU bandwidth as the kernel accepts it (kernel/sched/core.c): a period of 1 ms to 1 s and a quota of at
# least 1 ms, at most its max_cfs_runtime (2^44 - 1 us), all in microseconds.
PERIOD_US = (1000, 1000000)
QUOTA_US = (1000, (1 << 44) - 1)
_MICROSECONDS = re.compile(r"[0-9]{1,20}")


def canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def read_metadata(path):
    """Name and Version from a METADATA / PKG-INFO file (RFC 822 headers: read up to the first blank line, at most
    METADATA_LIMIT characters)."""
    name = version = None
    stream = open_regular(path)
    if stream is None:
        return None, None
    read = 0
    try:
        with stream:
            while read < METADATA_LIMIT:
                line = stream.readline(8192)
                read += len(line)
                if not line.strip():
                    break
                if line.startswith("Name:") and name is None:
                    name = line[5:].strip()
                elif line.startswith("Version:") and version is None:
                    version = line[8:].strip()
    except OSError:
        return None, None
    return name, version


def open_regular(path):
    """A text stream (UTF-8, errors replaced) on ``path`` when it is a REGULAR file (sysfs and /proc files are), else
    None: missing, unreadable, or anything else (a FIFO, a device, a socket), refused without blocking (O_NONBLOCK)."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError):  # ValueError: a NUL byte in the path
        return None
    try:
        if stat.S_ISREG(os.fstat(handle).st_mode):
            return os.fdopen(handle, encoding="utf-8", errors="replace")
    except OSError:
        pass
    os.close(handle)
    return None


def read_text(path, limit=65536):
    """At most ``limit`` characters of a regular file (open_regular), or None."""
    stream = open_regular(path)
    if stream is None:
        return None
    try:
        with stream:
            return stream.read(limit)
    except OSError:
        return None


def distributions(paths):
    found = []
    for entry, names in _listed_folders(paths):
        for item in names:
            record = _distribution(entry, item)
            if record is not None:
                found.append(record)
    return found


def _listed_folders(paths):
    """Each folder of ``paths`` that exists, once (by its real path), with its entries sorted; one that cannot be listed is
    passed over."""
    seen_dirs = set()
    for entry in paths:
        if not entry or not os.path.isdir(entry):
            continue
        real = os.path.realpath(entry)
        if real in seen_dirs:
            continue
        seen_dirs.add(real)
        try:
            names = sorted(os.listdir(entry))
        except OSError:
            continue
        yield entry, names


def _distribution(entry, item):
    """The record of a .dist-info / .egg-info named ``item`` in the folder ``entry`` (name, version, where, and its
    INSTALLER and direct_url.json when it has them), or None for anything else or metadata without a name and version."""
    full = os.path.join(entry, item)
    if item.endswith(".dist-info"):
        meta = os.path.join(full, "METADATA")
    elif item.endswith(".egg-info"):
        meta = os.path.join(full, "PKG-INFO") if os.path.isdir(full) else full
    else:
        return None
    name, version = read_metadata(meta)
    if not name or not version:
        return None
    record = {"name": name, "canonical": canonical(name), "version": version, "path": full, "site": entry}
    installer = read_text(os.path.join(full, "INSTALLER"), 200) if os.path.isdir(full) else None
    if installer:
        record["installer"] = installer.strip()
    direct_url = read_text(os.path.join(full, "direct_url.json")) if os.path.isdir(full) else None
    if direct_url:
        try:
            record["direct_url"] = json.loads(direct_url)
        except ValueError:
            pass
    return record


def module_dirs(paths):
    """Where the binding packages live (directory exists), without importing them."""
    result = {}
    for module in BINDING_MODULES + ("torch", "intel_extension_for_pytorch"):
        for entry in paths:
            candidate = os.path.join(entry, module)
            if entry and os.path.isfile(os.path.join(candidate, "__init__.py")):
                result[module] = candidate
                break
    return result


def cpu_info():
    info = {"model": "", "flags": [], "sockets": None, "cores": None, "logical": os.cpu_count()}
    model = ""
    text = read_text("/proc/cpuinfo", 4 * 1024 * 1024) or ""
    flags = set()
    physical = set()
    cores = set()
    current_physical = None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        value = value.strip()
        if key == "model name" and not model:
            model = value
        elif key == "flags" and not flags:
            flags = set(value.split())
        elif key == "physical id":
            current_physical = value
            physical.add(value)
        elif key == "core id":
            cores.add((current_physical, value))
    if not model:  # platform only then: ~10 ms of start-up
        import platform

        model = platform.processor()
    info["model"] = model
    info["flags"] = sorted(f for f in CPU_FLAGS if f in flags)
    info["sockets"] = len(physical) or None
    info["cores"] = len(cores) or None
    nodes = []
    try:
        nodes = [n for n in os.listdir("/sys/devices/system/node") if re.match(r"node\d+$", n)]
    except OSError:
        pass
    info["numa_nodes"] = len(nodes) or None
    info["topology"] = cpu_topology()
    return info


_DECIMAL = re.compile(r"[0-9]{1,9}")  # ASCII digits only (str.isdigit takes "²", which int() refuses)


def cpu_list(text):
    """A kernel CPU list ("0-27,56-83") as sorted numbers; None when the text is not one, or names a CPU at or
    above MAX_CPUS, or more than MAX_CPUS numbers in all (a list repeating one range)."""
    found = set()
    text = text.strip()
    if not text:
        return []
    named = 0
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        if not _DECIMAL.fullmatch(low) or (dash and not _DECIMAL.fullmatch(high)):
            return None
        first = int(low)
        last = int(high) if dash else first
        named += last - first + 1
        if last < first or last >= MAX_CPUS or named > MAX_CPUS:  # checked before the range is expanded
            return None
        found.update(range(first, last + 1))
    return sorted(found)


def _read_number(path):
    """A sysfs id (physical_package_id, core_id): ASCII digits, -1 allowed (no package known), at most 10 digits; None for
    anything else (int() would also take '1_0', other scripts' digits and numbers no kernel writes)."""
    text = read_text(path, 100)
    if text is None or not re.match(r"-?[0-9]{1,10}\Z", text.strip()):
        return None
    return int(text.strip())


def cpu_topology(sys_root="/sys"):
    """Sockets, physical cores, hyperthread siblings and NUMA nodes of the online CPUs, from sysfs.

    ``sys_root`` is /sys or a recorded copy shaped like it (devices/system/cpu/online,
    devices/system/cpu/cpuN/topology/{physical_package_id,core_id,thread_siblings_list},
    devices/system/node/nodeN/cpulist). The answer is plain data; "problem" names the first file that is
    missing or unreadable (then "cpus" is None and the reader falls back or refuses)."""
    cpu_dir = os.path.join(sys_root, "devices", "system", "cpu")
    text = read_text(os.path.join(cpu_dir, "online"), 65536)
    online = cpu_list(text) if text is not None else None
    answer = {"online": online, "cpus": None, "nodes": {}, "problem": None}
    if not online:
        answer["problem"] = "%s/online is missing, not a regular file, or not a CPU list of numbers below %d" % (cpu_dir, MAX_CPUS)
        return answer
    cpus = []
    for number in online:
        base = os.path.join(cpu_dir, "cpu%d" % number, "topology")
        package = _read_number(os.path.join(base, "physical_package_id"))
        core = _read_number(os.path.join(base, "core_id"))
        siblings_text = read_text(os.path.join(base, "thread_siblings_list"), 65536)
        siblings = cpu_list(siblings_text) if siblings_text is not None else None
        if package is None or core is None or not siblings:
            missing = "physical_package_id" if package is None else "core_id" if core is None else "thread_siblings_list"
            answer["problem"] = "%s/%s is missing or unreadable" % (base, missing)
            return answer
        cpus.append({"cpu": number, "package": package, "core": core, "siblings": siblings})
    answer["cpus"] = cpus
    node_dir = os.path.join(sys_root, "devices", "system", "node")
    try:
        entries = sorted(n for n in os.listdir(node_dir) if re.match(r"node\d+$", n))
    except OSError:
        entries = []
    for entry in entries:
        listed = read_text(os.path.join(node_dir, entry, "cpulist"), 65536)
        members = cpu_list(listed) if listed is not None else None
        if members is None:
            answer["problem"] = "%s/%s/cpulist is missing, not a regular file, or not a CPU list of numbers below %d" % (node_dir, entry, MAX_CPUS)
            answer["nodes"] = {}
            return answer
        answer["nodes"][entry[4:]] = members
    return answer


def _microseconds(text, bounds):
    """The number in ``text`` when it is a plain decimal within ``bounds`` (inclusive), else None."""
    if not _MICROSECONDS.fullmatch(text):
        return None
    value = int(text)
    return value if bounds[0] <= value <= bounds[1] else None


def _quoted(text):
    """A file's odd content for a message: cut, and repr() escapes control characters."""
    text = text.strip()
    return repr(text[:40] + ("..." if len(text) > 40 else ""))


def cpu_max_quota(text):
    """(CPUs, problem) from cgroup v2's cpu.max: "max <period>" (or "max") is no quota, "<quota> <period>" in
    microseconds is quota/period CPUs; anything else (garbage, empty, extra fields, a zero, negative or huge
    value) is (None, what the file holds). ``text`` None (no file): (None, None)."""
    if text is None:
        return None, None
    fields = text.split()
    if fields[:1] == ["max"] and (len(fields) == 1 or (len(fields) == 2 and _microseconds(fields[1], PERIOD_US))):
        return None, None
    if len(fields) == 2:
        quota, period = _microseconds(fields[0], QUOTA_US), _microseconds(fields[1], PERIOD_US)
        if quota and period:
            return quota / period, None
    return None, ("holds %s, not \"max <period>\" or \"<quota> <period>\" in microseconds (a period of %d to %d, a quota of %d to %d)"
                  % ((_quoted(text),) + PERIOD_US + QUOTA_US))


def cfs_quota(text_quota, text_period):
    """(CPUs, problem) from cgroup v1's cpu.cfs_quota_us ("-1": no quota) and cpu.cfs_period_us, as cpu_max_quota."""
    if text_quota is None or text_quota.strip() == "-1":
        return None, None
    quota = _microseconds(text_quota.strip(), QUOTA_US)
    period = _microseconds((text_period or "").strip(), PERIOD_US)
    if quota is None:
        return None, "cpu.cfs_quota_us holds %s, not -1 or a number of microseconds from %d to %d" % ((_quoted(text_quota),) + QUOTA_US)
    if period is None:
        return None, "cpu.cfs_period_us holds %s, not a number of microseconds from %d to %d" % ((_quoted(text_period or ""),) + PERIOD_US)
    return quota / period, None


def _own_cgroup_paths():
    """This process's cgroup path per hierarchy, from /proc/self/cgroup: {"": v2 path, "cpu": v1 path}."""
    paths = {}
    for line in (read_text("/proc/self/cgroup", 65536) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            paths[""] = parts[2]
        elif "cpu" in parts[1].split(","):
            paths["cpu"] = parts[2]
    return paths


def cgroup_quota(sys_root="/sys", own_path=True):
    """The smallest CPU quota on the way from the cgroup root to this process's cgroup (cgroup v2, else v1), in
    CPUs; None without a quota. ``own_path=False`` (a recorded sysfs copy) reads the root folders only."""
    return read_cgroup_quota(sys_root, own_path)[0]


def read_cgroup_quota(sys_root="/sys", own_path=True):
    """(cgroup_quota's answer, the problems met): each problem names a file whose content is not what the kernel
    writes, a file that is there but not a regular one included; such a file counts as no quota."""
    mounts = os.path.join(sys_root, "fs", "cgroup")
    paths = _own_cgroup_paths() if own_path else {}
    found = []
    problems = []
    for hierarchy, folder, names in (("", mounts, ("cpu.max",)), ("cpu", os.path.join(mounts, "cpu"), ("cpu.cfs_quota_us", "cpu.cfs_period_us"))):
        steps = [p for p in paths.get(hierarchy, "/").split("/") if p and p != ".."]
        for depth in range(len(steps) + 1):
            here = os.path.join(folder, *steps[:depth])
            texts = [_cgroup_file(os.path.join(here, name), problems) for name in names]
            if len(names) == 1:
                quota, problem = cpu_max_quota(texts[0])
            else:
                quota, problem = cfs_quota(texts[0], texts[1])
            if problem:
                problems.append("%s %s" % (os.path.join(here, names[0]), problem) if len(names) == 1 else os.path.join(here, problem))
            if quota is not None:
                found.append(quota)
        if found:  # the v2 answer wins over a v1 mount seen through a hybrid layout
            break
    return (min(found) if found else None), problems


def _cgroup_file(path, problems):
    """A cgroup file's text (at most 200 characters: the kernel writes a few dozen); None when it is missing, with a
    problem when it is there but not a regular file (a FIFO is not read: it would block)."""
    text = read_text(path, 200)
    if text is None and os.path.lexists(path):
        problems.append("%s is not a readable regular file" % path)
    return text


def allowed_cpus():
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = list(range(os.cpu_count() or 1))
    return {"affinity": cpus, "count": len(cpus), "cgroup_quota": cgroup_quota()}


def shm_info():
    try:
        stat = os.statvfs("/dev/shm")
    except OSError:
        return None
    return {"total_bytes": stat.f_frsize * stat.f_blocks, "free_bytes": stat.f_frsize * stat.f_bavail}


def headers_root():
    """Where pip puts a wheel's .data/headers files (under a folder named after the project): in a virtual
    environment <prefix>/include/site/pythonX.Y, else sysconfig's include folder (pip's own rule)."""
    if sys.prefix != getattr(sys, "base_prefix", sys.prefix) or hasattr(sys, "real_prefix"):
        return os.path.join(sys.prefix, "include", "site", "python%d.%d" % sys.version_info[:2])
    return sysconfig.get_paths().get("include")


def markers():
    """This interpreter's PEP 508 marker values (packaging.markers.default_environment()'s; the same function as in
    interpreter_probe.py: each probe runs alone as `python -c`, so neither can import the other)."""
    import platform  # here: ~10 ms of start-up, and only the probe's report asks it

    version = sys.implementation.version
    implementation_version = "%d.%d.%d" % (version.major, version.minor, version.micro)
    if version.releaselevel != "final":
        implementation_version += version.releaselevel[0] + str(version.serial)
    return {
        "implementation_name": sys.implementation.name,
        "implementation_version": implementation_version,
        "os_name": os.name,
        "platform_machine": platform.machine(),
        "platform_release": platform.release(),
        "platform_system": platform.system(),
        "platform_version": platform.version(),
        "python_full_version": platform.python_version(),
        "platform_python_implementation": platform.python_implementation(),
        "python_version": ".".join(platform.python_version_tuple()[:2]),
        "sys_platform": sys.platform,
    }


def report():
    """Everything compat wants to know about this interpreter's environment, as JSON-ready data."""
    import platform  # here: ~10 ms of start-up, and only the probe's report asks it

    paths = [p for p in sys.path if p]  # '' is the working directory of `python -c`, not the environment
    purelib = sysconfig.get_paths().get("purelib")
    platlib = sysconfig.get_paths().get("platlib")
    for p in (purelib, platlib):
        if p and p not in paths:
            paths.append(p)
    libc_name, libc_version = platform.libc_ver()
    env = {}
    for key, value in os.environ.items():
        if key in ENV_NAMES or key.startswith(ENV_PREFIXES):
            env[key] = value
    return {
        "probe": PROBE_VERSION,
        "python": {
            "executable": sys.executable,
            "version": "%d.%d.%d" % sys.version_info[:3],
            "implementation": sys.implementation.name,
            "prefix": sys.prefix,
            "base_prefix": getattr(sys, "base_prefix", sys.prefix),
            "purelib": purelib,
            "platlib": platlib,
            "data": sysconfig.get_paths().get("data"),
            "headers": headers_root(),
            "scripts": sysconfig.get_paths().get("scripts"),
            "path": paths,
            "markers": markers(),
        },
        "platform": {
            "tag": sysconfig.get_platform(),
            "system": platform.system(),
            "machine": platform.machine(),
            "libc": libc_name,
            "libc_version": libc_version,
        },
        "cpu": cpu_info(),
        "allowed_cpus": allowed_cpus(),
        "shm": shm_info(),
        "env": env,
        "distributions": distributions(paths),
        "modules": module_dirs(paths),
        "which": {"mpirun": shutil.which("mpirun"), "bash": shutil.which("bash"), "torchrun": shutil.which("torchrun")},
    }


def watch(data):
    """What the answer in ``data`` depends on besides the environment variables, for compat's cache of it
    (environment/probe_cache.py): paths whose state (present or not, mtime, size, inode, mode) compat records and
    compares before it reuses the answer. Only with --watch; never part of the answer itself."""
    import site

    paths = [sys.executable, os.path.realpath(sys.executable)]
    here = os.path.dirname(os.path.abspath(sys.executable))
    paths += [os.path.join(here, "pyvenv.cfg"), os.path.join(os.path.dirname(here), "pyvenv.cfg")]
    paths += _sys_path_paths(list(data["python"]["path"]))
    paths += _site_paths(site)
    paths += _distribution_paths(data["distributions"])
    for folder in (data["env"].get("PATH") or os.defpath).split(os.pathsep):
        if os.path.isabs(folder):  # a relative one is looked up in the probe's own fresh folder: nothing is there
            paths.append(folder)
    paths += [found for found in data["which"].values() if found]
    return {"paths": paths, "user_site_enabled": bool(getattr(site, "ENABLE_USER_SITE", False))}


def _sys_path_paths(entries):
    """The sys.path folders, then in each the site customisation modules and the packages the answer looks for."""
    paths = list(entries)  # a folder's mtime changes when an entry (a dist-info, a .pth, a package) is added or removed
    for entry in entries:
        for name in ("sitecustomize.py", "usercustomize.py", "sitecustomize", "usercustomize"):
            paths.append(os.path.join(entry, name))
        for module in BINDING_MODULES + ("torch", "intel_extension_for_pytorch"):
            paths.append(os.path.join(entry, module, "__init__.py"))
    return paths


def _site_paths(site):
    """The site folders (the user site too: watched even while it does not exist), their .pth files and the folders
    those add."""
    sites = list(getattr(site, "getsitepackages", lambda: [])())
    user_site = getattr(site, "USER_SITE", None) or (site.getusersitepackages() if hasattr(site, "getusersitepackages") else None)
    if user_site:
        sites.append(user_site)
    paths = list(sites)
    for folder in sites:
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            if name.endswith(".pth"):
                paths += _pth_paths(folder, name)
    return paths


def _pth_paths(folder, name):
    """A .pth file and the folders its lines name (site adds a line's folder only when it exists)."""
    pth = os.path.join(folder, name)
    paths = [pth]
    text = read_text(pth) or ""
    for line in text.splitlines():
        line = line.rstrip()
        if line and not line.startswith(("#", "import ", "import\t")):
            paths.append(os.path.join(folder, line))
    return paths


def _distribution_paths(dists):
    """Each distribution's dist-info (or egg-info) and the files of it the answer reads."""
    paths = []
    for dist in dists:
        full = dist["path"]
        paths.append(full)
        if os.path.isdir(full):
            paths += [os.path.join(full, name) for name in ("METADATA", "PKG-INFO", "INSTALLER", "direct_url.json")]
    return paths


def answer(data, argv):
    text = json.dumps(data)
    if "--answer" in argv[:-1]:
        path = argv[argv.index("--answer") + 1]
        with open(path + ".part", "w", encoding="utf-8") as handle:
            handle.write(text)
        os.rename(path + ".part", path)
    else:
        sys.stdout.write(text + "\n")


def main():
    data = report()
    if "--watch" in sys.argv[1:]:
        data["watch"] = watch(data)
    answer(data, sys.argv[1:])


if __name__ == "__main__":
    main()
