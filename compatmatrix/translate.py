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
from dataclasses import dataclass, field
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


@dataclass
class _Rewrite:
    """One translation under way: the versions it is for, the features they have, and what it has written so far."""

    matrix: Matrix
    transformers: Version
    accelerate: Optional[Version]
    torch: Optional[Version]
    stock: bool
    wants_cpu: bool
    feature: dict = field(default_factory=dict)
    accel: dict = field(default_factory=dict)
    out: list[str] = field(default_factory=list)
    edits: list[Edit] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    blocking: list[str] = field(default_factory=list)
    cpu_flag_written: bool = False

    def has(self, name: str) -> bool:  # matrix.feature: an entry missing from a --matrix file is a sentence (exit 2), not a KeyError
        return self.matrix.feature("transformers", name).present_in(self.transformers)

    def when(self, name: str) -> str:
        return f"transformers{range_text(self.matrix.feature('transformers', name).versions)}"

    def flag(self, item: _Flag) -> None:
        """Write one flag we translate, by its name."""
        _FLAG_REWRITES[item.name](self, item, " ".join(item.tokens))

    def backend(self, item: _Flag, written: str) -> None:
        """--xpu_backend / --ddp_backend: the name these transformers take; ccl to gloo for stock PyTorch."""
        value = item.value or ""
        if self.stock and value == "ccl":
            new, why, blocked = _stock_backend(self.matrix, item.name, self.transformers, self.has, self.when)
            self.out += new
            self.edits.append(Edit(written, " ".join(new), why))
            if blocked:
                self.blocking.append(blocked)
            return
        new, why = self._backend_name(item)
        if value == "ccl" and not self.has("ddp_backend_ccl") and not self.has("xpu_backend_arg"):
            self.blocking.append(
                f"transformers {self.transformers} no longer accepts ccl ({self.when('ddp_backend_ccl')} does): "
                "use --ddp_backend gloo on stock PyTorch, or the pinned set that still has ccl: compat resolve --profile ddp-ccl"
            )
        self.out += new
        if why:
            self.edits.append(Edit(written, " ".join(new), why))

    def _backend_name(self, item: _Flag) -> tuple[list[str], str]:
        """The backend flag as these transformers spell it, and why it changed ("" when it did not)."""
        value = item.value or ""
        if self.has("ddp_backend_arg"):
            why = f"--xpu_backend was renamed --ddp_backend ({self.when('ddp_backend_arg')})" if item.name == "--xpu_backend" else ""
            return ["--ddp_backend", value], why
        if self.has("xpu_backend_arg"):
            why = (f"transformers {self.transformers} has no --ddp_backend yet; it takes --xpu_backend ({self.when('xpu_backend_arg')})"
                   if item.name == "--ddp_backend" else "")
            return ["--xpu_backend", value], why
        self.blocking.append(f"transformers {self.transformers} has neither --ddp_backend nor --xpu_backend: it cannot choose a CPU backend from the command line")
        return list(item.tokens), ""

    def cpu(self, item: _Flag, written: str) -> None:
        """--no_cuda / --use_cpu: the one these transformers take, once."""
        if not _on(item):
            self.out += item.tokens
            return
        if self.cpu_flag_written:
            self.edits.append(Edit(written, "", "the CPU flag is already given"))
            return
        self.cpu_flag_written = True
        if self.has("use_cpu_arg"):
            new = ["--use_cpu"]
            why = f"--no_cuda was replaced by --use_cpu ({self.when('use_cpu_arg')}; --no_cuda is gone from 5.0)" if item.name == "--no_cuda" else ""
        else:
            new = ["--no_cuda"]
            why = f"transformers {self.transformers} has no --use_cpu yet ({self.when('use_cpu_arg')} does)" if item.name == "--use_cpu" else ""
        self.out += new
        if why or item.value is not None:
            self.edits.append(Edit(written, " ".join(new), why or "a bare flag is enough"))

    def use_ipex(self, item: _Flag, written: str) -> None:
        """--use_ipex: kept where the Trainer still takes it (warning when it does nothing), dropped where it is gone."""
        if self.stock:
            self.edits.append(Edit(written, "", stock_no_ipex(self.matrix)))
            return
        if self.has("use_ipex_arg"):
            self.out += item.tokens
            applies, why_not = ipex_through_trainer(self.matrix, self.transformers, self.accelerate, self.torch)
            if _on(item) and not applies:
                self.warnings.append(f"{why_not}: apply ipex.optimize(model, optimizer) in the script to get IPEX")
        elif _on(item):
            self.edits.append(Edit(written, "", f"--use_ipex was removed ({self.when('use_ipex_arg')} have it): apply ipex.optimize(model, optimizer) "
                                                "in the script, or stay on transformers <4.57"))

    def bf16(self, item: _Flag, written: str) -> None:
        """--bf16: kept, with --use_cpu added where bf16 on a CPU needs it."""
        self.out += item.tokens
        needs_cpu = self.feature.get("bf16_cpu_requires_use_cpu")
        if _on(item) and needs_cpu and needs_cpu.present_in(self.transformers) and not self.wants_cpu:
            self.out.append("--use_cpu")
            self.cpu_flag_written = True
            self.edits.append(Edit(written, f"{written} --use_cpu", f"bf16 on a CPU needs --use_cpu ({self.when('bf16_cpu_requires_use_cpu')})"))

    def stock_cpu_flag(self, flags: Sequence[_Flag], backend: Optional[str]) -> None:
        """For stock PyTorch: --use_cpu added where accelerate runs several CPU processes as one job only when told."""
        cpu_flag_given = self.cpu_flag_written or any(f.name in ("--no_cuda", "--use_cpu") for f in flags)
        if not self.stock or backend is None or cpu_flag_given or not self.has("use_cpu_arg"):
            return
        needs = self.accel.get("multi_cpu_requires_cpu_flag")
        if self.accelerate is not None and needs is not None and needs.present_in(self.accelerate):
            self.out.append("--use_cpu")
            self.edits.append(Edit("", "--use_cpu", f"accelerate {self.accelerate} runs several CPU processes as one job only when told cpu=True "
                                                    f"(--use_cpu; accelerate{range_text(needs.versions)}): without it each rank trains alone"))

    def ccl_with_accelerate(self, backend: Optional[str]) -> None:
        """Block ccl where the accelerate the Trainer hands the backend to cannot run it."""
        if backend != "ccl" or self.stock:
            return
        uses_accelerate = self.has("ddp_backend_forwarded_to_accelerate") if "ddp_backend_forwarded_to_accelerate" in self.feature else True
        works = self.accel.get("ddp_backend_ccl_works")
        if uses_accelerate and self.accelerate is not None and works is not None and not works.present_in(self.accelerate):
            self.blocking.append(
                f"accelerate {self.accelerate} cannot run ccl (only accelerate{range_text(works.versions)} {works.description}): "
                "pip install the set compat resolve --profile ddp-ccl gives, or train with --ddp_backend gloo"
            )


#: How each flag we translate is rewritten (the names are those _parse groups with their value).
_FLAG_REWRITES = {
    "--xpu_backend": _Rewrite.backend,
    "--ddp_backend": _Rewrite.backend,
    "--no_cuda": _Rewrite.cpu,
    "--use_cpu": _Rewrite.cpu,
    "--use_ipex": _Rewrite.use_ipex,
    "--bf16": _Rewrite.bf16,
}


def translate(matrix: Matrix, argv: Sequence[str], transformers: Version, accelerate: Optional[Version], torch: Optional[Version] = None,
              *, stock: bool = False) -> Translation:
    """``stock``: the command will run on stock PyTorch (no IPEX, no oneCCL bindings): ccl -> gloo, --use_ipex dropped."""
    items = _parse(argv)
    flags = [i for i in items if isinstance(i, _Flag)]
    rewrite = _Rewrite(
        matrix, transformers, accelerate, torch, stock,
        wants_cpu=any(f.name in ("--no_cuda", "--use_cpu") and _on(f) for f in flags),
        feature={f.name: f for f in matrix.features_of("transformers")},
        accel={f.name: f for f in matrix.features_of("accelerate")},
    )
    backend = next((f.value for f in flags if f.name in ("--xpu_backend", "--ddp_backend")), None)
    for item in items:
        if isinstance(item, _Flag):
            rewrite.flag(item)
        else:
            rewrite.out.append(str(item))
    rewrite.stock_cpu_flag(flags, backend)
    rewrite.ccl_with_accelerate(backend)
    return Translation(tuple(rewrite.out), tuple(rewrite.edits), tuple(rewrite.warnings), tuple(rewrite.blocking), transformers, accelerate,
                       backend == "ccl" and not stock)


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
