"""Rewrite a training command line from the guides for the installed transformers / accelerate. Pure.

The flags changed over the years: `--xpu_backend` became `--ddp_backend` (4.29, removed 4.32),
`--no_cuda` became `--use_cpu` (4.32, removed 5.0), `--use_ipex` went away (4.57), bf16 on CPU needs
`--use_cpu` again from 4.52, and ccl itself is gone from transformers 5.1 and accelerate 1.13.
Every rule here reads its version range from the matrix's [[feature]] entries.

``stock=True`` rewrites for a set without IPEX and the oneCCL bindings (compat migrate, the stock profile): ccl becomes
gloo, ``--use_ipex`` goes, and ``--use_cpu`` is added where accelerate needs it to run several CPU processes as one
job. Without it the command is translated for the versions only, ccl kept (and blocked where it cannot work).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from packaging.version import Version

from .matrix.model import Matrix
from .sentences import range_text

_BOOL_WORDS = {"true", "false", "1", "0", "yes", "no"}
_BOOLEAN_FLAGS = ("--no_cuda", "--use_cpu", "--use_ipex", "--bf16")


@dataclass(frozen=True)
class Edit:
    before: str
    after: str  # "" when the flag is dropped
    why: str


@dataclass(frozen=True)
class Translation:
    argv: tuple[str, ...]
    edits: tuple[Edit, ...]
    warnings: tuple[str, ...]
    blocking: tuple[str, ...]  # why the command cannot work with these versions at all
    transformers: Version
    accelerate: Optional[Version]
    ccl: bool = False  # the command runs the ccl backend: it needs the oneCCL environment (compat env --launcher prints it)


@dataclass
class _Flag:
    name: str
    value: Optional[str]  # None for a bare boolean flag
    tokens: list[str]  # what it was written as


def _parse(argv: Sequence[str]) -> list[object]:
    """Tokens, with the flags we translate grouped with their value."""
    items: list[object] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        name, eq, inline = token.partition("=")
        if name in ("--xpu_backend", "--ddp_backend"):
            if eq:
                items.append(_Flag(name, inline, [token]))
            elif i + 1 < len(argv):
                items.append(_Flag(name, argv[i + 1], [token, argv[i + 1]]))
                i += 1
            else:
                items.append(_Flag(name, None, [token]))
        elif name in _BOOLEAN_FLAGS:
            if eq:
                items.append(_Flag(name, inline, [token]))
            elif i + 1 < len(argv) and argv[i + 1].lower() in _BOOL_WORDS:
                items.append(_Flag(name, argv[i + 1], [token, argv[i + 1]]))
                i += 1
            else:
                items.append(_Flag(name, None, [token]))
        else:
            items.append(token)
        i += 1
    return items


def _on(flag: _Flag) -> bool:
    return flag.value is None or flag.value.lower() in ("true", "1", "yes")


def ipex_through_trainer(matrix: Matrix, transformers: Version, accelerate: Optional[Version], torch: Optional[Version]) -> tuple[bool, str]:
    """Does --use_ipex make this Trainer run ipex.optimize? With the reason, either way.

    transformers < 4.53 calls ipex.optimize itself; later versions leave it to accelerate, which has it from
    0.20 to 1.12, and from 1.8 only below torch 2.7 (so with IPEX 2.7/2.8 the flag silently does nothing).
    """
    if not matrix.feature("transformers", "use_ipex_arg").present_in(transformers):
        return False, f"transformers {transformers} has no --use_ipex"
    if matrix.feature("transformers", "trainer_applies_ipex").present_in(transformers):
        return True, f"transformers {transformers}: the Trainer applies IPEX itself (--use_ipex)"
    if accelerate is None:
        return False, f"transformers {transformers} leaves IPEX to accelerate, which is not installed"
    if not matrix.feature("accelerate", "ipex_prepare").present_in(accelerate):
        return False, f"transformers {transformers} leaves IPEX to accelerate, and accelerate {accelerate} has no IPEX support"
    if matrix.feature("accelerate", "ipex_prepare_only_below_torch_2_7").present_in(accelerate):
        if torch is None:
            return False, f"accelerate {accelerate} applies IPEX only below torch 2.7.0 (with IPEX 2.7/2.8 --use_ipex does nothing)"
        if torch >= Version("2.7.0"):
            return False, f"--use_ipex does nothing here: accelerate {accelerate} applies IPEX only below torch 2.7.0 and torch is {torch}"
    return True, f"accelerate {accelerate} applies IPEX in prepare() (--use_ipex)"


def translate(matrix: Matrix, argv: Sequence[str], transformers: Version, accelerate: Optional[Version], torch: Optional[Version] = None,
              *, stock: bool = False) -> Translation:
    """``stock``: the command will run on stock PyTorch (no IPEX, no oneCCL bindings): ccl -> gloo, --use_ipex dropped."""
    feature = {f.name: f for f in matrix.features_of("transformers")}
    accel = {f.name: f for f in matrix.features_of("accelerate")}

    def has(name: str) -> bool:  # matrix.feature: an entry missing from a --matrix file is a sentence (exit 2), not a KeyError
        return matrix.feature("transformers", name).present_in(transformers)

    def when(name: str) -> str:
        return f"transformers{range_text(matrix.feature('transformers', name).versions)}"

    items = _parse(argv)
    edits: list[Edit] = []
    warnings: list[str] = []
    blocking: list[str] = []
    out: list[str] = []
    flags = [i for i in items if isinstance(i, _Flag)]
    wants_cpu = any(f.name in ("--no_cuda", "--use_cpu") and _on(f) for f in flags)
    backend = next((f.value for f in flags if f.name in ("--xpu_backend", "--ddp_backend")), None)
    cpu_flag_written = False

    for item in items:
        if not isinstance(item, _Flag):
            out.append(str(item))
            continue
        written = " ".join(item.tokens)
        if item.name in ("--xpu_backend", "--ddp_backend"):
            value = item.value or ""
            if stock and value == "ccl":
                new, why, blocked = _stock_backend(matrix, item.name, transformers, has, when)
                out += new
                edits.append(Edit(written, " ".join(new), why))
                if blocked:
                    blocking.append(blocked)
                continue
            if has("ddp_backend_arg"):
                new = ["--ddp_backend", value]
                why = f"--xpu_backend was renamed --ddp_backend ({when('ddp_backend_arg')})" if item.name == "--xpu_backend" else ""
            elif has("xpu_backend_arg"):
                new = ["--xpu_backend", value]
                why = f"transformers {transformers} has no --ddp_backend yet; it takes --xpu_backend ({when('xpu_backend_arg')})" if item.name == "--ddp_backend" else ""
            else:
                new = list(item.tokens)
                why = ""
                blocking.append(f"transformers {transformers} has neither --ddp_backend nor --xpu_backend: it cannot choose a CPU backend from the command line")
            if value == "ccl" and not has("ddp_backend_ccl") and not has("xpu_backend_arg"):
                blocking.append(
                    f"transformers {transformers} no longer accepts ccl ({when('ddp_backend_ccl')} does): "
                    "use --ddp_backend gloo on stock PyTorch, or the pinned set that still has ccl: compat resolve --profile ddp-ccl"
                )
            out += new
            if why:
                edits.append(Edit(written, " ".join(new), why))
            continue
        if item.name in ("--no_cuda", "--use_cpu"):
            if not _on(item):
                out += item.tokens
                continue
            if cpu_flag_written:
                edits.append(Edit(written, "", "the CPU flag is already given"))
                continue
            cpu_flag_written = True
            if has("use_cpu_arg"):
                new = ["--use_cpu"]
                why = f"--no_cuda was replaced by --use_cpu ({when('use_cpu_arg')}; --no_cuda is gone from 5.0)" if item.name == "--no_cuda" else ""
            else:
                new = ["--no_cuda"]
                why = f"transformers {transformers} has no --use_cpu yet ({when('use_cpu_arg')} does)" if item.name == "--use_cpu" else ""
            out += new
            if why or item.value is not None:
                edits.append(Edit(written, " ".join(new), why or "a bare flag is enough"))
            continue
        if item.name == "--use_ipex":
            if stock:
                edits.append(Edit(written, "", stock_no_ipex(matrix)))
                continue
            if has("use_ipex_arg"):
                out += item.tokens
                applies, why_not = ipex_through_trainer(matrix, transformers, accelerate, torch)
                if _on(item) and not applies:
                    warnings.append(f"{why_not}: apply ipex.optimize(model, optimizer) in the script to get IPEX")
            elif _on(item):
                edits.append(Edit(written, "", f"--use_ipex was removed ({when('use_ipex_arg')} have it): apply ipex.optimize(model, optimizer) in the script, or stay on transformers <4.57"))
            continue
        if item.name == "--bf16":
            out += item.tokens
            if _on(item) and feature.get("bf16_cpu_requires_use_cpu") and feature["bf16_cpu_requires_use_cpu"].present_in(transformers) and not wants_cpu:
                out.append("--use_cpu")
                cpu_flag_written = True
                edits.append(Edit(written, f"{written} --use_cpu", f"bf16 on a CPU needs --use_cpu ({when('bf16_cpu_requires_use_cpu')})"))
            continue

    cpu_flag_given = cpu_flag_written or any(f.name in ("--no_cuda", "--use_cpu") for f in flags)
    if stock and backend is not None and not cpu_flag_given and has("use_cpu_arg"):
        needs = accel.get("multi_cpu_requires_cpu_flag")
        if accelerate is not None and needs is not None and needs.present_in(accelerate):
            out.append("--use_cpu")
            edits.append(Edit("", "--use_cpu", f"accelerate {accelerate} runs several CPU processes as one job only when told cpu=True (--use_cpu; "
                                                f"accelerate{range_text(needs.versions)}): without it each rank trains alone"))
    if backend == "ccl" and not stock:
        uses_accelerate = has("ddp_backend_forwarded_to_accelerate") if "ddp_backend_forwarded_to_accelerate" in feature else True
        works = accel.get("ddp_backend_ccl_works")
        if uses_accelerate and accelerate is not None and works is not None and not works.present_in(accelerate):
            blocking.append(
                f"accelerate {accelerate} cannot run ccl (only accelerate{range_text(works.versions)} {works.description}): "
                "pip install the set compat resolve --profile ddp-ccl gives, or train with --ddp_backend gloo"
            )
    return Translation(tuple(out), tuple(edits), tuple(warnings), tuple(blocking), transformers, accelerate, backend == "ccl" and not stock)


def _last(matrix: Matrix, package: str) -> str:
    eol = matrix.eol_of(package)
    return f"{eol.status}, last CPU release {eol.last_release}" if eol is not None else "no longer released"


def stock_no_ccl(matrix: Matrix) -> str:
    """Why ccl goes when the set is stock PyTorch (shared with compat migrate)."""
    return (f"ccl needs the oneCCL bindings (oneccl_bind_pt: {_last(matrix, 'oneccl-bind-pt')}), which stock PyTorch does not have; "
            "gloo is stock PyTorch's CPU backend")


def stock_no_ipex(matrix: Matrix) -> str:
    """Why --use_ipex goes when the set is stock PyTorch (shared with compat migrate)."""
    return (f"IPEX is not part of stock PyTorch ({_last(matrix, 'intel-extension-for-pytorch')}): stock PyTorch's own CPU path replaces it "
            "(torch.compile; --bf16 for autocast on CPUs with native bf16)")


def _stock_backend(matrix: Matrix, flag: str, transformers: Version, has, when) -> tuple[list[str], str, str]:
    """A ccl backend flag rewritten for stock PyTorch: (the new tokens, why, why it cannot work at all or "")."""
    why = stock_no_ccl(matrix)
    if has("ddp_backend_arg"):
        renamed = f"; --xpu_backend was renamed --ddp_backend ({when('ddp_backend_arg')})" if flag == "--xpu_backend" else ""
        return ["--ddp_backend", "gloo"], why + renamed, ""
    if has("xpu_backend_arg") and has("xpu_backend_gloo"):
        return ["--xpu_backend", "gloo"], why + f" (--xpu_backend gloo: {when('xpu_backend_gloo')})", ""
    return [], why, (f"transformers {transformers} sets up CPU DDP only with --xpu_backend mpi or ccl (gloo: {when('xpu_backend_gloo')}): "
                     "stock PyTorch has neither (its wheels are not built with MPI); a newer Python gets a newer transformers")
