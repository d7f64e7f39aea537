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
from ..matrix.model import Component
from .finding import Context, Finding, Status, check
from .packages import CCL_NAMES, IPEX_NAMES, torch_dist

CPU_HOST = "pytorch-cpu"
# (distribution names, import name, the component whose +cpu build the CPU index serves, or None)
EXTENSIONS: tuple[tuple[tuple[str, ...], str, Optional[Component]], ...] = (
    (("torchvision",), "torchvision", Component.TORCHVISION),
    (("torchaudio",), "torchaudio", Component.TORCHAUDIO),
    (IPEX_NAMES, "intel_extension_for_pytorch", None),
    (CCL_NAMES, "oneccl_bindings_for_pytorch", None),
)
LABEL_DEVICES = (("cu", "cuda"), ("rocm", "rocm"), ("xpu", "xpu"))


def _label_device(label: Optional[str]) -> Optional[str]:
    """The device a local version label names (cu130 -> cuda, xpu, rocm6.4), None for cpu or none."""
    for prefix, device in LABEL_DEVICES:
        if label and label.startswith(prefix):
            return device
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
    from ..environment.extensions import DEVICE_WORDS, installed_extensions, torch_build

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
        if build.devices and component is not None and torch_linked and not any(e.devices for e in found.files):
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
    from ..environment.extensions import DEVICE_WORDS, cuda_runtime_major

    for extension in files:
        for device in extension.devices:
            if device in build.devices:
                continue
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
        major = cuda_runtime_major(extension.needed)
        if major is not None and build.cuda_major is not None and major != build.cuda_major:
            return (f"{dist.name} {dist.raw_version} is built for CUDA {major}, torch {torch.raw_version} for CUDA {build.cuda_major}: import {module} fails",
                    f"{extension.path} links libcudart.so.{major}; torch's CUDA library links libcudart.so.{build.cuda_major}",
                    f"Install the {dist.name} build for torch {torch.raw_version}'s CUDA {build.cuda_major} (the index torch came from).")
    return None


def _by_labels(ctx: Context, torch: Distribution, installed, how: str) -> Finding:
    """Without files to read (pins; an environment of metadata only): a companion whose label names a device torch's
    label does not (torchaudio==2.11.1+cu130 with torch==2.13.0+cpu) fails, as its files would; an unlabelled one is
    not judged (PyPI's build, whatever it links). ``how``: the evidence saying why labels decide."""
    cid = "packages.extension-build"
    torch_label = torch.version.local if torch.version is not None else None
    torch_device = _label_device(torch_label)
    fails, judged = [], []
    for dist, _module, component in installed:
        label = dist.version.local if dist.version is not None else None
        if label is None or torch_label is None:
            continue
        judged.append(f"{dist.name} {dist.raw_version}")
        device = _label_device(label)
        if device is not None and device != torch_device:
            fails.append((f"{dist.name} {dist.raw_version} is a {device.upper() if device != 'rocm' else 'ROCm'} build, torch {torch.raw_version} "
                          f"{'a CPU build' if torch_device is None else 'another build'}: import {dist.name} would fail on a missing torch library",
                          cpu_build_fix(ctx, dist, component) if torch_device is None else f"Pin the {dist.name} build with torch's label (+{torch_label})."))
    if fails:
        return Finding(cid, Status.FAIL, fails[0][0], tuple(f"also: {s}" for s, _ in fails[1:]) + (how,), fails[0][1])
    if not judged:
        return Finding(cid, Status.PASS, f"no local label to compare with torch {torch.raw_version}'s build (an installed extension's files say more)", (how,))
    return Finding(cid, Status.PASS, f"{', '.join(judged)}: the same build as torch {torch.raw_version} (by their labels)", (how,))
