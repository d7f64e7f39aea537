"""Build variants: what the installed extensions link (DT_NEEDED) against the torch build next to them.

The same release exists as different builds: PyPI's torchaudio 2.11.1 links libc10_cuda.so, libtorch_cuda.so and
libcudart.so.13 (read from torchaudio-2.11.1-py3-none-manylinux_2_28_x86_64.whl, uploaded to PyPI 2026-10-28), the CPU
index's +cpu build does not. Next to a CPU torch the first fails at import (OSError: Could not load this library:
.../_torchaudio.so), whatever the versions say; so this check reads the files, not the version numbers.
For `compat check -r` (pins, no files) the local labels the pins carry are compared instead.
"""

from __future__ import annotations

from typing import Optional

from ..environment.snapshot import Distribution
from ..findings import Finding, Status
from ..matrix.model import COMPONENTS, Component, components_where, distributions_where
from .packages import torch_dist
from .registry import Context, check

CPU_HOST = "pytorch-cpu"
# (distribution names, import name, the component whose +cpu build the CPU index serves, or None)
EXTENSIONS: tuple[tuple[tuple[str, ...], str, Optional[Component]], ...] = tuple(
    (COMPONENTS[c].names, COMPONENTS[c].module, c if COMPONENTS[c].cpu_index_build else None)
    for c in sorted(components_where(build_checked=True), key=lambda c: COMPONENTS[c].kind != "companion")
)
LABEL_DEVICES = (("cu", "cuda"), ("rocm", "rocm"), ("xpu", "xpu"))
DEVICE_WORDS = {"cuda": "CUDA", "xpu": "XPU", "rocm": "ROCm"}  # as environment/extensions.py (not imported on check -r's path)

# A build: (the devices it links, its CUDA major, its CUDA minor); no devices: the CPU build.
Build = tuple[frozenset[str], Optional[str], Optional[str]]


def label_build(label: Optional[str]) -> Optional[Build]:
    """The build a local version label names: ``cpu`` -> the CPU build, ``cu130`` -> CUDA 13.0, ``cu92`` -> CUDA 9.2,
    ``xpu``, ``rocm6.4``; None for no label or one that names no build (``+git1234``: not taken for a CPU build)."""
    if not label:
        return None
    label = label.lower()
    if label == "cpu":
        return frozenset(), None, None
    if label.startswith("cu") and label[2:].isdigit() and len(label) >= 4:
        digits = label[2:]
        return frozenset({"cuda"}), str(int(digits[:-1])), digits[-1]
    for prefix, device in LABEL_DEVICES:
        if prefix != "cu" and label.startswith(prefix):
            return frozenset({device}), None, None
    return None


def build_words(build: Build) -> str:
    devices, major, minor = build
    if not devices:
        return "a CPU build"
    if devices == {"cuda"} and major is not None:
        return f"a CUDA {major}{'.' + minor if minor else ''} build"
    return "a " + "/".join(DEVICE_WORDS[d] for d in sorted(devices)) + " build"


# What judge_build finds: an extension links a device torch's build does not provide (FAIL), links another CUDA major
# than torch's (FAIL), or is the CPU build beside a device torch (WARN: it imports, its operators run on the CPU only).
DEVICE_MISSING, CUDA_MAJOR, CPU_EXTENSION = "device-missing", "cuda-major", "cpu-extension"


def judge_build(torch_devices: frozenset[str], torch_cuda: Optional[str], devices: frozenset[str], cuda: Optional[str]) -> Optional[tuple[str, str]]:
    """The one rule both paths of packages.extension-build take (an environment's files, and check -r's local labels):
    (what is wrong, the device or CUDA major concerned) for an extension of ``devices`` (CUDA major ``cuda``) beside a
    torch of ``torch_devices`` (``torch_cuda``); None when it fits. A CUDA minor is not judged (the files name the
    runtime's major only: libcudart.so.13). Pure."""
    missing = sorted(devices - torch_devices)
    if missing:
        return DEVICE_MISSING, missing[0]
    if cuda is not None and torch_cuda is not None and cuda != torch_cuda:
        return CUDA_MAJOR, cuda
    if torch_devices and not devices:
        return CPU_EXTENSION, ""
    return None


def cpu_build_fix(ctx: Context, dist: Distribution, component: Optional[Component]) -> str:
    """The command that puts the CPU index's +cpu build of the same release in place of ``dist``."""
    version = dist.public_version or dist.raw_version
    pip = "pip" if _pinned(ctx) else f"{ctx.snapshot.executable} -m pip"
    host = ctx.matrix.hosts.get(CPU_HOST)
    if component is None or host is None:
        return f"Install the CPU build of {dist.name} {version} (its vendor's CPU wheel), or uninstall it: {pip} uninstall -y {dist.name}."
    command = f"{pip} install {component.distribution}=={version}+cpu --index-url {host.url}"
    release = ctx.matrix.release(component, dist.public_version) if dist.public_version is not None else None
    served = release is not None and any(w.host == CPU_HOST for w in release.wheels)
    if served:
        return f"{command}  (the +cpu build of the same release, from the CPU index)"
    return (f"{command}  (the +cpu build of the same release; not in compat's matrix: if the CPU index has none, "
            f"compat resolve --profile stock --with {component.label} torch=={torch_public(ctx)} names one that pairs)")


def torch_public(ctx: Context) -> str:
    dist = torch_dist(ctx)
    return str(dist.public_version) if dist is not None and dist.public_version is not None else "<your torch>"


def _pinned(ctx: Context) -> bool:
    """compat check -r: the snapshot is the files' pins, with no files to read."""
    return not ctx.snapshot.purelib


@check("packages.extension-build", "the installed extensions are built for the installed torch build (CPU, CUDA, XPU), by what they link")
def extension_build(ctx: Context) -> Finding:
    cid = "packages.extension-build"
    torch = torch_dist(ctx)
    if torch is None:
        return Finding(cid, Status.SKIP, "torch is not installed")
    installed = [(dist, module, component) for names, module, component in EXTENSIONS if (dist := ctx.snapshot.get(*names)) is not None]
    if not installed:
        return Finding(cid, Status.SKIP, "no torchvision, torchaudio, IPEX or oneCCL bindings installed")
    if _pinned(ctx):
        return _by_labels(ctx, torch, installed, "judged by the pins' local labels (no files to read)")
    from ..environment.extensions import installed_extensions, torch_build

    build = torch_build(torch.site)
    if build is None:  # no torch/lib (metadata only): what the versions' labels say, as for pins
        return _by_labels(ctx, torch, installed, f"{torch.site}/torch/lib is not there: judged by the versions' local labels")
    torch_words = f"torch {torch.raw_version} is {build.words} (its lib folder {build.lib})"
    fails: list[tuple[str, str, str]] = []  # (summary, evidence, fix)
    warns: list[tuple[str, str, str]] = []
    seen: list[str] = []
    unread: list[str] = []
    for dist, module, component in installed:
        found = installed_extensions(dist.path, dist.site, module)
        torch_linked = [e for e in found.files if e.links_torch]
        seen.append(f"{dist.name} {dist.raw_version}: {len(found.files)} native file(s)" + (f" (listed by {found.listed_by})" if found.listed_by else "")
                    + (f", the first {len(found.files)} read" if found.cut else ""))
        unread += [e.error for e in found.files if e.error]
        mismatch = _first_mismatch(ctx, torch, build, dist, module, component, found.files)
        if mismatch is not None:
            fails.append(mismatch)
        linked = frozenset(d for e in found.files for d in e.devices)
        if component is not None and torch_linked and (judge_build(build.devices, None, linked, None) or ("",))[0] == CPU_EXTENSION:
            warns.append((f"{dist.name} {dist.raw_version} is a CPU build next to torch {torch.raw_version}, {build.words}: it imports, "
                          f"but its operators have no {'/'.join(DEVICE_WORDS[d] for d in sorted(build.devices))} kernels",
                          f"{torch_linked[0].path} links {', '.join(n for n in torch_linked[0].needed if n.startswith(('libc10', 'libtorch')))} and no device library",
                          "On a CPU node this is the lighter pair: install torch's +cpu build too (compat install --yes --python "
                          f"{ctx.snapshot.executable} torch=={torch.public_version}); on a GPU node, {component.distribution}'s build for torch's device."))
    notes = tuple([torch_words] + seen + [f"unreadable: {u}" for u in unread[:3]])
    if fails:
        summary, evidence, fix = fails[0]
        more = tuple(f"also: {s}" for s, _, _ in fails[1:])
        return Finding(cid, Status.FAIL, summary, (evidence, *more, *notes), "; ".join(dict.fromkeys(f for _, _, f in fails)))
    if warns:
        summary, evidence, fix = warns[0]
        return Finding(cid, Status.WARN, summary, (evidence, *(f"also: {s}" for s, _, _ in warns[1:]), *notes), fix)
    return Finding(cid, Status.PASS, f"the installed extensions link what torch {torch.raw_version} ({build.words}) provides", notes)


def _first_mismatch(ctx: Context, torch: Distribution, build, dist: Distribution, module: str, component: Optional[Component], files) -> Optional[tuple[str, str, str]]:
    """(summary, evidence, fix) for the first of ``files`` that links a device library torch's build does not provide,
    or a CUDA runtime of another major than torch's; None when every file fits."""
    from ..environment.extensions import cuda_runtime_major

    for extension in files:
        verdict = judge_build(build.devices, build.cuda_major, frozenset(extension.devices), cuda_runtime_major(extension.needed))
        if verdict is None or verdict[0] == CPU_EXTENSION:
            continue
        if verdict[0] == DEVICE_MISSING:
            device = verdict[1]
            libraries = extension.libraries_of(device)
            torch_own = [n for n in libraries if n.startswith(("libc10", "libtorch"))]
            runtime = [n for n in libraries if n not in torch_own]
            why = "; ".join(part for part in (
                f"torch {torch.raw_version} has no {' / '.join(torch_own)}" if torch_own else "",
                f"{', '.join(runtime)} come{'s' if len(runtime) == 1 else ''} only with a {DEVICE_WORDS[device]} stack" if runtime else "") if part)
            fix = (cpu_build_fix(ctx, dist, component) if not build.devices
                   else f"Install the {build.words[2:]} of {dist.name} {dist.public_version} that matches torch {torch.raw_version} (the index torch came from).")
            name = extension.path.rsplit("/", 1)[-1]
            effect = (f"OSError: Could not load this library: {extension.path}" if module == "torchaudio"  # torch.ops.load_library's words
                      else f"{name} cannot be loaded: {libraries[0]} is not found")
            return (f"{dist.name} {dist.raw_version} is a {DEVICE_WORDS[device]} build (its {name} links {libraries[0]}), but torch {torch.raw_version} "
                    f"is {build.words}: import {module} fails ({effect})",
                    f"{extension.path} links {', '.join(libraries)} (DT_NEEDED): {why}", fix)
        major = verdict[1]
        return (f"{dist.name} {dist.raw_version} is built for CUDA {major}, torch {torch.raw_version} for CUDA {build.cuda_major}: import {module} fails",
                f"{extension.path} links libcudart.so.{major}; torch's CUDA library links libcudart.so.{build.cuda_major}",
                f"Install the {dist.name} build for torch {torch.raw_version}'s CUDA {build.cuda_major} (the index torch came from).")
    return None


CPU_INDEX_PACKAGES = frozenset(distributions_where(cpu_index_build=True))  # what the PyTorch CPU index serves as +cpu builds


def _pin_build(ctx: Context, dist: Distribution, component: Optional[Component]) -> tuple[Optional[Build], str, str]:
    """(the build a pin names, how it is known, the matrix fact's source): by its local label; unlabelled, PyPI's build
    of that release when the matrix records what its files link (``build`` of its PyPI wheel set); else (None, "", "")."""
    version = dist.version
    label = version.local if version is not None else None
    if label is not None:
        return label_build(label), "", ""
    if version is None:
        return None, "", ""
    if ctx.options.cpu_index and dist.canonical in CPU_INDEX_PACKAGES:
        return (label_build("cpu"), f"no local label: the files name the PyTorch CPU index, where pip takes {dist.name} "
                f"{dist.public_version}+cpu (a local version sorts above PyPI's {dist.public_version})", "")
    release = None
    if component is not None:
        release = ctx.matrix.release(component, version)
    elif dist.canonical == "torch":
        release = ctx.matrix.release(Component.TORCH, version)
    wheels = next((w for w in getattr(release, "wheels", ()) if w.host == "pypi" and w.build), None) if release is not None else None
    if wheels is None:
        return None, "", ""
    devices = frozenset() if wheels.build == "cpu" else frozenset({wheels.build})
    source = ", ".join(wheels.provenance.sources) or "the matrix"
    return ((devices, None, None), f"no local label: PyPI's build, which links {DEVICE_WORDS.get(wheels.build, 'the CPU libraries only')}",
            f"{dist.name} {dist.public_version} on PyPI is recorded as build = \"{wheels.build}\" (what its files link; {source})")


def _by_labels(ctx: Context, torch: Distribution, installed, how: str) -> Finding:
    """Without files to read (pins; an environment of metadata only): the builds the local labels name, compared by
    :func:`judge_build` as the environment path compares what the files link (torchaudio==2.11.1+cu130 or PyPI's
    unlabelled CUDA build beside torch==2.13.0+cpu fails; +cpu beside +cu130 warns; +cu126 beside +cu130 fails, another
    CUDA minor passes). An unlabelled pin whose build the matrix does not record is a WARN that says nothing was
    compared. ``how``: the evidence saying why labels decide."""
    torch_build_, _, torch_source = _pin_build(ctx, torch, Component.TORCH)
    found: dict[str, list] = {"fail": [], "warn": [], "judged": []}  # fail / warn: (summary, fix); judged: what passed
    notes: list[str] = []
    for dist, _module, component in installed:
        build, known, source = _pin_build(ctx, dist, component)
        if source:
            notes.append(source)
        if build is None and torch_build_ is None:
            notes.append(f"{dist.name} {dist.raw_version} and torch {torch.raw_version}: neither names its build (no local label, none recorded)")
        elif build is None or torch_build_ is None:
            found["warn"].append(_unlabelled(ctx, torch, torch_build_, dist, component, build))
        else:
            kind, what = _label_pair(ctx, torch, torch_build_, dist, component, build, f"{dist.name} {dist.raw_version}" + (f" ({known})" if known else ""))
            found[kind].append(what)
    evidence = tuple(notes) + ((torch_source,) if torch_source else ()) + (how,)
    return _labels_finding(torch, found["fail"], found["warn"], found["judged"], evidence)


def _unlabelled(ctx: Context, torch: Distribution, torch_build_: Optional[Build], dist: Distribution, component, build: Optional[Build]) -> tuple[str, str]:
    """(summary, fix) of the WARN for a pair of which one side names no build (no local label, none recorded)."""
    if build is None:
        unknown, other = dist, torch
        fix = cpu_build_fix(ctx, dist, component) if not torch_build_[0] else f"Pin the {dist.name} build with torch's label (+{torch.version.local})."  # type: ignore[index]
    else:
        unknown, other = torch, dist
        fix = f"Pin torch's build with a local label (torch=={torch.public_version}+cpu from the CPU index, or the +cuXYZ build {dist.name} is made for)."
    return (f"{unknown.name} {unknown.raw_version}: no local label to compare with {other.name} {other.raw_version}: "
            f"PyPI's build of {unknown.name} {unknown.public_version} may be CUDA", fix)


def _label_pair(ctx: Context, torch: Distribution, torch_build_: Build, dist: Distribution, component, build: Build, name: str) -> tuple[str, object]:
    """One extension's labelled build against torch's: ("fail" | "warn", (summary, fix)), or ("judged", what passed)."""
    verdict = judge_build(torch_build_[0], torch_build_[1], build[0], build[1])
    if verdict is None:
        minor = (f" (CUDA {build[1]}.{build[2]} beside {torch_build_[1]}.{torch_build_[2]}: the same major)"
                 if build[1] is not None and build[2] != torch_build_[2] and torch_build_[2] is not None else "")
        return "judged", name + minor
    if verdict[0] == DEVICE_MISSING:
        device = verdict[1]
        return "fail", (f"{name} is a {DEVICE_WORDS[device]} build, torch {torch.raw_version} "
                        f"{'a CPU build' if not torch_build_[0] else 'another build'}: import {dist.name} would fail on a missing torch library",
                        cpu_build_fix(ctx, dist, component) if not torch_build_[0] else f"Pin the {dist.name} build with torch's label (+{torch.version.local}).")
    if verdict[0] == CUDA_MAJOR:
        return "fail", (f"{name} is built for CUDA {build[1]}, torch {torch.raw_version} for CUDA {torch_build_[1]}: import {dist.name} would fail",
                        f"Pin the {dist.name} build with torch's label (+{torch.version.local}), from the index torch comes from.")
    return "warn", (f"{name} is a CPU build next to torch {torch.raw_version}, {build_words(torch_build_)}: it imports, but its operators "
                    f"have no {'/'.join(DEVICE_WORDS[d] for d in sorted(torch_build_[0]))} kernels",
                    f"On a CPU node pin torch=={torch.public_version}+cpu too (the lighter pair); on a GPU node, the {dist.name} build with torch's label "
                    f"(+{torch.version.local}).")


def _labels_finding(torch: Distribution, fails: list, warns: list, judged: list, evidence: tuple[str, ...]) -> Finding:
    cid = "packages.extension-build"
    if fails:
        return Finding(cid, Status.FAIL, fails[0][0], tuple(f"also: {s}" for s, _ in fails[1:] + warns) + evidence, fails[0][1])
    if warns:
        return Finding(cid, Status.WARN, warns[0][0], tuple(f"also: {s}" for s, _ in warns[1:]) + evidence, warns[0][1])
    if not judged:
        return Finding(cid, Status.PASS, f"no local label to compare with torch {torch.raw_version}'s build (an installed extension's files say more)", evidence)
    return Finding(cid, Status.PASS, f"{', '.join(judged)}: the same build as torch {torch.raw_version} (by their labels)", evidence)
