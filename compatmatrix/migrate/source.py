"""The IPEX and oneCCL calls in a training script, found by reading its syntax tree (``ast``: nothing is imported or
run), each with the stock PyTorch replacement. compat lists them; it never rewrites a script.

What is found: imports of ``intel_extension_for_pytorch``, ``oneccl_bindings_for_pytorch`` and ``torch_ccl`` (under any
alias, ``from ... import ...`` included), calls through them (``ipex.optimize(...)``, ``ipex.cpu.runtime.CPUPool(...)``,
``ipex.llm...``), ``torch.xpu`` and the device "xpu" (the Intel GPU API), ``init_process_group(backend="ccl")``, the oneCCL /
Intel MPI variables a script sets for itself (``os.environ["CCL_WORKER_COUNT"] = ...``), the PMI_* variables it reads
(mpirun's rank numbers, which torchrun does not set) and ``torch.cpu.amp.autocast`` (the IPEX tutorials' spelling).

Pure: source texts in, findings out (migrate/service.py reads the files).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Optional

IPEX_MODULE = "intel_extension_for_pytorch"
CCL_MODULES = ("oneccl_bindings_for_pytorch", "torch_ccl")
ENV_PREFIXES = ("CCL_", "I_MPI_", "FI_", "ATL_", "IPEX_")

# ipex.<attribute path> -> the stock replacement; the longest matching prefix wins
_IPEX_REPLACEMENTS = {
    "optimize": "torch.compile(model) for the kernel fusion; train in bf16 with torch.autocast(\"cpu\", dtype=torch.bfloat16) "
                "(the Trainer: --bf16) instead of dtype=torch.bfloat16",
    "llm": "no stock equivalent of IPEX's LLM module: load the model with transformers as usual and torch.compile it",
    "quantization": "torch.ao.quantization (prepare / convert) or torchao",
    "cpu.runtime": "no stock equivalent of IPEX's CPU runtime (CPUPool, pin, MultiStreamModule): bind each rank to its own "
                   "cores with compat launch (numactl / taskset) and set torch.set_num_threads",
    "cpu": "no stock equivalent of this IPEX CPU API; stock PyTorch's CPU path (torch.compile, oneDNN) covers the kernels",
    "set_fp32_math_mode": "torch.backends.mkldnn / torch.set_float32_matmul_precision for reduced-precision fp32 math",
    "enable_onednn_fusion": "torch.compile (stock PyTorch fuses oneDNN kernels itself)",
    "fast_bert": "torch.compile(model)",
    "xpu": "IPEX's XPU module is for Intel GPUs; on CPUs use the device \"cpu\"",
}
PMI_REPLACEMENT = ("PMI_* is set by mpirun only: under torchrun read RANK / WORLD_SIZE / LOCAL_RANK, which torchrun sets "
                   "(a line that copies PMI_* into them overwrites torchrun's values)")
_IPEX_DEFAULT = "remove it: stock PyTorch has no such IPEX call (its CPU path now carries the IPEX optimisations)"


@dataclass(frozen=True)
class SourceFinding:
    """One IPEX / oneCCL use in a file, with what to write instead."""

    file: str
    line: int
    column: int  # 0-based, as ast reports it
    kind: str  # import | call | attribute | device | backend | environment | unparsed
    call: str  # the source text (one line, cut at 160 characters)
    replacement: str

    def to_json(self) -> dict[str, object]:
        return {"file": self.file, "line": self.line, "column": self.column, "kind": self.kind, "call": self.call, "replacement": self.replacement}


def scan_sources(files: Iterable[tuple[str, str]]) -> tuple[SourceFinding, ...]:
    """Every finding in (file name, source text) pairs, in file and line order."""
    found: list[SourceFinding] = []
    for name, text in files:
        found += scan_source(name, text)
    return tuple(found)


def scan_source(name: str, text: str) -> list[SourceFinding]:
    try:
        tree = ast.parse(text, filename=name)
    except (SyntaxError, ValueError) as exc:  # ValueError: a NUL byte in the source
        line = getattr(exc, "lineno", None) or 0
        return [SourceFinding(name, line, 0, "unparsed", "", f"not read: the file is not Python this interpreter parses ({exc.__class__.__name__}: "
                                                            f"{getattr(exc, 'msg', str(exc))}); look for IPEX and oneCCL calls by hand")]
    scanner = _Scanner(name, text)
    scanner.visit(tree)
    return sorted(scanner.found, key=lambda f: (f.line, f.column, f.kind))


def _dotted(node: ast.AST) -> Optional[str]:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _ipex_replacement(path: str) -> str:
    best = ""
    for key in _IPEX_REPLACEMENTS:
        if (path == key or path.startswith(key + ".")) and len(key) > len(best):
            best = key
    return _IPEX_REPLACEMENTS[best] if best else _IPEX_DEFAULT


def _text(value: ast.AST) -> Optional[str]:
    return value.value if isinstance(value, ast.Constant) and isinstance(value.value, str) else None


class _Scanner(ast.NodeVisitor):
    def __init__(self, name: str, text: str) -> None:
        self.name = name
        self.text = text
        self.found: list[SourceFinding] = []
        self.aliases: dict[str, str] = {}  # local name -> full dotted path in a module of interest ("ipex" -> intel_extension_for_pytorch)
        self.seen: set[tuple[int, int]] = set()  # attribute chains already reported as part of a call

    def add(self, node: ast.AST, kind: str, replacement: str) -> None:
        segment = ast.get_source_segment(self.text, node) or ""
        call = " ".join(segment.split())
        call = call if len(call) <= 160 else call[:157] + "..."
        self.found.append(SourceFinding(self.name, getattr(node, "lineno", 0), getattr(node, "col_offset", 0), kind, call, replacement))

    # --- imports -----------------------------------------------------------------------------

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            top = alias.name.split(".")[0]
            if top == IPEX_MODULE or top in CCL_MODULES:
                local = alias.asname or top
                self.aliases[local] = alias.name if alias.asname else top
                self.add(node, "import", _import_replacement(top))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        top = module.split(".")[0]
        if node.level == 0 and (top == IPEX_MODULE or top in CCL_MODULES):
            for alias in node.names:
                self.aliases[alias.asname or alias.name] = f"{module}.{alias.name}"
            self.add(node, "import", _import_replacement(top))
        self.generic_visit(node)

    # --- uses --------------------------------------------------------------------------------

    def _resolve(self, dotted: Optional[str]) -> Optional[str]:
        """The full path of a chain that starts with an alias of a module of interest, or a torch.xpu chain."""
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        if head in self.aliases:
            return self.aliases[head] + (f".{rest}" if rest else "")
        if dotted == "torch.xpu" or dotted.startswith("torch.xpu."):
            return dotted
        return None

    def visit_Call(self, node: ast.Call) -> None:
        path = self._resolve(_dotted(node.func))
        if path is not None:
            self._mark(node.func)
            self.add(node, "call", self._replacement(path, node))
        elif _is_init_process_group(node.func):
            backend = _backend_of(node)
            if backend is not None and backend.lower() == "ccl":
                self.add(node, "backend", "init_process_group(backend=\"gloo\") (stock PyTorch's CPU backend; ccl needs the bindings)")
        elif _on_xpu_device(node):
            self.add(node, "device", "the device \"xpu\" is an Intel GPU: on CPUs use \"cpu\"")
        elif _is_environ_setter(node.func) and node.args:
            variable = _text(node.args[0])
            if variable and variable.startswith(ENV_PREFIXES):
                self.add(node, "environment", _env_replacement(variable))
        elif _is_environ_getter(node.func) and node.args and (_text(node.args[0]) or "").startswith("PMI_"):
            self.add(node, "environment", PMI_REPLACEMENT)
        elif (_dotted(node.func) or "") in ("torch.cpu.amp.autocast", "cpu.amp.autocast"):
            self.add(node, "call", "torch.autocast(\"cpu\", dtype=torch.bfloat16): torch.cpu.amp.autocast is deprecated from torch 2.4")
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, ast.Load) and _dotted(node.value) in ("os.environ", "environ") and (_text(node.slice) or "").startswith("PMI_"):
            self.add(node, "environment", PMI_REPLACEMENT)
        self.generic_visit(node)

    def _replacement(self, path: str, node: ast.Call) -> str:
        if path.startswith("torch.xpu"):
            return "torch.xpu is the Intel GPU (XPU) API: on CPUs use the device \"cpu\" (torch.xpu.is_available() is False there)"
        module, _, rest = path.partition(".")
        if module in CCL_MODULES:
            return "remove it: gloo, stock PyTorch's CPU backend, needs no bindings"
        if rest == "optimize":
            dtype = next((k.value for k in node.keywords if k.arg == "dtype"), None)
            if dtype is not None and (_dotted(dtype) or "").endswith("bfloat16"):
                return ("torch.compile(model); bf16 through torch.autocast(\"cpu\", dtype=torch.bfloat16) around the forward pass "
                        "(the Trainer: --bf16), which needs avx512_bf16 or AMX to be fast")
        return _ipex_replacement(rest)

    def _mark(self, node: ast.AST) -> None:
        while isinstance(node, ast.Attribute):
            self.seen.add((node.lineno, node.col_offset))
            node = node.value

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if (node.lineno, node.col_offset) not in self.seen:
            path = self._resolve(_dotted(node))
            if path is not None and "." in path:
                self._mark(node)
                if path.startswith("torch.xpu"):
                    self.add(node, "attribute", "torch.xpu is the Intel GPU (XPU) API: on CPUs use the device \"cpu\"")
                else:
                    module, _, rest = path.partition(".")
                    self.add(node, "attribute", "remove it: gloo needs no bindings" if module in CCL_MODULES else _ipex_replacement(rest))
                return
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._environment_target(target, node)
        self.generic_visit(node)

    def _environment_target(self, target: ast.AST, node: ast.AST) -> None:
        if isinstance(target, ast.Subscript) and _dotted(target.value) in ("os.environ", "environ"):
            variable = _text(target.slice)
            if variable and variable.startswith(ENV_PREFIXES):
                self.add(node, "environment", _env_replacement(variable))


def _import_replacement(module: str) -> str:
    if module == IPEX_MODULE:
        return "remove the import: stock PyTorch needs none (its CPU path carries the IPEX optimisations)"
    return "remove the import: gloo, stock PyTorch's CPU backend, needs no bindings"


def _env_replacement(variable: str) -> str:
    if variable.startswith("CCL_") or variable.startswith("ATL_"):
        return f"remove it: {variable} is a oneCCL setting, and gloo does not read it"
    if variable.startswith("IPEX_"):
        return f"remove it: {variable} is an IPEX setting"
    return f"remove it unless the job still starts under Intel MPI's mpirun: {variable} is an Intel MPI / libfabric setting"


def _is_init_process_group(func: ast.AST) -> bool:
    dotted = _dotted(func) or ""
    return dotted == "init_process_group" or dotted.endswith(".init_process_group")


def _backend_of(node: ast.Call) -> Optional[str]:
    for keyword in node.keywords:
        if keyword.arg == "backend":
            return _text(keyword.value)
    return _text(node.args[0]) if node.args else None


def _on_xpu_device(node: ast.Call) -> bool:
    """``x.to("xpu")``, ``torch.device("xpu:0")``."""
    dotted = _dotted(node.func) or ""
    if not (dotted.endswith(".to") or dotted in ("torch.device", "device")) or not node.args:
        return False
    device = _text(node.args[0])
    return device is not None and device.split(":")[0] == "xpu"


def _is_environ_getter(func: ast.AST) -> bool:
    return (_dotted(func) or "") in ("os.environ.get", "environ.get", "os.getenv", "getenv")


def _is_environ_setter(func: ast.AST) -> bool:
    dotted = _dotted(func) or ""
    return dotted in ("os.environ.setdefault", "environ.setdefault", "os.putenv", "putenv")

