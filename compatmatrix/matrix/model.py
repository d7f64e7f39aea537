"""The curated matrix as frozen value objects (:class:`~compatmatrix.record.Record`: cheap to define at start-up).

Everything here is plain data: versions are :class:`packaging.version.Version`, ranges are
:class:`packaging.specifiers.SpecifierSet`.  Nothing in this module reads files or talks to
the network; :mod:`compatmatrix.matrix.load` builds these objects from ``data/matrix.toml``.

Components are data: :data:`REGISTRY` holds one :class:`ComponentInfo` per component and runtime wheel (its names,
where its releases live in the TOML, how its torch pairing is judged, what harvest, verify, explain, migrate, planning and
the checks do with it; :data:`COMPONENTS` the resolver's, :data:`RUNTIME_COMPONENTS` the runtime wheels),
:attr:`Matrix.releases` holds every component's releases (newest first), and every release class implements
:class:`Release`, the view the rules take of it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import Optional, Protocol

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from ..errors import MatrixError
from ..names import canonical_name
from ..record import Record


class Component(enum.Enum):
    """A package the resolver can choose a version for.

    The definition order is the order in which the resolver maximises versions (a newer torch beats a
    newer IPEX, and so on) and the order of every listing.  What else there is to know about a
    component is in :data:`COMPONENTS`.
    """

    TORCH = "torch"
    IPEX = "intel-extension-for-pytorch"
    CCL = "oneccl-bind-pt"
    TORCHVISION = "torchvision"
    TORCHAUDIO = "torchaudio"
    TRANSFORMERS = "transformers"
    ACCELERATE = "accelerate"

    @property
    def distribution(self) -> str:
        """PEP 503 canonical distribution name (the key used in JSON output)."""
        return self.value

    @property
    def label(self) -> str:
        """The name people use in sentences."""
        return COMPONENTS[self].label

    @property
    def table(self) -> str:
        """The ``[[table]]`` of matrix.toml that holds its releases."""
        return COMPONENTS[self].table

    @classmethod
    def from_name(cls, name: str) -> "Component":
        """Map a distribution name, module name or short alias to a component.

        Raises ``KeyError`` for names the matrix does not cover.
        """
        return _ALIASES[canonical_name(name)]


class ComponentInfo(Record):
    """Everything compat needs to know of a component, in one record: its names, where matrix.toml keeps its releases,
    how its torch pairing is judged, and what each command does with it (harvest, verify, explain, migrate, planning,
    checks). A command reads these fields; it keeps no list of components of its own.

    ``kind`` is one of :data:`KINDS`; ``pairing`` one of :data:`PAIRINGS`; ``migrate`` one of :data:`MIGRATE_ACTIONS`.
    """

    distribution: str  # the canonical distribution name (a Component's value; a runtime wheel's [[runtime]] distribution)
    label: str  # the name people use in sentences
    table: str  # the [[table]] of matrix.toml that holds its releases
    kind: str
    module: str = ""  # what `import` names ("" when nothing is imported: a runtime wheel's shared libraries)
    release: str = ""  # the class of this module its [[table]] entries become ("" for a runtime wheel: RuntimeRelease)
    aliases: tuple[str, ...] = ()  # other spellings a user may write (Component.from_name)
    published_as: tuple[str, ...] = ()  # the distribution's former names, as an environment may still have it installed
    former_modules: tuple[str, ...] = ()  # what older releases were imported as (torch_ccl before 1.12)
    pairing: str = "none"
    registry_read: bool = False  # compat matrix update reads its project pages
    overlay_kept: bool = False  # what update harvests of it is kept in the overlay (False: curated by hand)
    cpu_index_build: bool = False  # the PyTorch CPU index serves a +cpu build of it, one build with torch's
    torch_extra: bool = False  # update: its METADATA declares torch (and accelerate) under its [torch] extra, not as a plain Requires-Dist
    smoke_what: str = ""  # compat matrix verify's smoke operation, said in the record ("" : not verifiable)
    smoke: str = ""  # its program, run after `import torch` and `import <module> as pkg`
    leave_out: int = 0  # resolve's "leave it out" alternative tries it in this order (0: never left out)
    unlisted_missing: tuple[str, ...] = ()  # what the matrix cannot know of a release it does not list (empty: frozen table)
    migrate: str = "keep"
    migrate_why: str = ""  # why migrate removes it ({status}: its end-of-life status from [[eol]])
    owns_mpirun: bool = False  # migrate: the mpirun a job ran under goes with it
    host_compared: bool = False  # doctor --hostfile: a different version on two hosts of one job breaks it
    duplicate_checked: bool = False  # packages.duplicates: two installed copies of it break the stack
    known_bad_checked: bool = False  # packages.known-bad judges its installed release against torch
    build_checked: bool = False  # builds.*: its native files are checked for a device (CUDA, XPU, ROCm) build

    @property
    def names(self) -> tuple[str, ...]:
        """The distribution names an environment may hold it under: its own, then its former ones."""
        return (self.distribution, *self.published_as)

    @property
    def modules(self) -> tuple[str, ...]:
        """What its releases are imported as: the module, then the former ones (none for a runtime wheel)."""
        return tuple(m for m in (self.module, *self.former_modules) if m)


#: What a component is: ``torch``; an ``extension`` built against one torch (IPEX, the bindings: curated pairings);
#: a ``companion`` declaring the torch it needs (torchvision, torchaudio); a ``library`` with a torch floor per minor line
#: (transformers, accelerate); a ``runtime`` wheel compat does not resolve but passes on to pip ([[runtime]]).
KINDS = ("torch", "extension", "companion", "library", "runtime")
#: How its pairing with torch is judged (rules.PAIR_RULES): ``built-for`` its own files and curated [[<table>.pairing]]
#: entries; ``declared`` its METADATA's Requires-Dist: torch; ``torch-min`` its line's torch_min; ``none`` not paired.
PAIRINGS = ("none", "built-for", "declared", "torch-min")
#: What `compat migrate` (to stock PyTorch + gloo) does with it: kept in the target; kept only where it is installed; removed.
MIGRATE_ACTIONS = ("keep", "keep-installed", "drop")

_UNLISTED_BINARY = ("Python coverage", "glibc floor")
_WHY_IPEX = "IPEX is {status}; stock PyTorch's CPU path carries its optimisations, and no IPEX release fits a newer torch"
_WHY_BINDINGS = ("the oneCCL bindings are {status}, transformers >= 5.1 and accelerate >= 1.13 no longer accept ccl, "
                 "and each release fits one torch only; gloo, stock PyTorch's CPU backend, replaces ccl")
_WHY_ONECCL = "the oneCCL runtime that bindings built against a system oneCCL load; nothing in the stock set uses it"
_WHY_IMPI = ("Intel MPI's runtime from PyPI (its mpirun, libmpi and libfabric), which the oneCCL runtime depends on; nothing in the "
             "stock set uses it, and the mpirun it installed goes with it")

#: Every component, in the resolver's order (a newer torch beats a newer IPEX, and so on), then the runtime wheels.
REGISTRY: tuple[ComponentInfo, ...] = (
    ComponentInfo("torch", "torch", "torch", "torch", module="torch", release="TorchRelease", aliases=("pytorch",), registry_read=True, overlay_kept=True,
                  cpu_index_build=True, unlisted_missing=_UNLISTED_BINARY, host_compared=True, duplicate_checked=True),
    ComponentInfo(
        "intel-extension-for-pytorch", "intel-extension-for-pytorch", "ipex", "extension", module="intel_extension_for_pytorch", release="IpexRelease",
        aliases=("intel_extension_for_pytorch", "ipex", "torch-ipex", "torch_ipex"), published_as=("torch-ipex",), pairing="built-for",
        registry_read=True, leave_out=2, migrate="drop", migrate_why=_WHY_IPEX, host_compared=True, duplicate_checked=True,
        known_bad_checked=True, build_checked=True,
        smoke_what="ipex.optimize of a 4x2 nn.Linear in eval mode, and one forward",
        smoke="m = pkg.optimize(torch.nn.Linear(4, 2).eval())\n"
              "with torch.no_grad():\n"
              "    assert tuple(m(torch.ones(1, 4)).shape) == (1, 2)\n",
    ),
    ComponentInfo(
        "oneccl-bind-pt", "oneccl_bind_pt", "oneccl_bind_pt", "extension", module="oneccl_bindings_for_pytorch", release="CclRelease",
        aliases=("oneccl_bind_pt", "oneccl_bindings_for_pytorch", "torch-ccl", "torch_ccl", "ccl"), published_as=("torch-ccl",),
        former_modules=("torch_ccl",),
        pairing="built-for", leave_out=1, migrate="drop", migrate_why=_WHY_BINDINGS, host_compared=True, duplicate_checked=True,
        known_bad_checked=True, build_checked=True,
        smoke_what="a ccl process group of one rank and an all_reduce",
        smoke="import os, socket, torch.distributed as dist\n"
              "s = socket.socket(); s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]; s.close()\n"
              "os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))\n"
              "dist.init_process_group('ccl', rank=0, world_size=1)\n"
              "t = torch.ones(2); dist.all_reduce(t)\n"
              "assert t.tolist() == [1.0, 1.0], t\n"
              "dist.destroy_process_group()\n",
    ),
    ComponentInfo(
        "torchvision", "torchvision", "torchvision", "companion", module="torchvision", release="CompanionRelease", pairing="declared", registry_read=True,
        overlay_kept=True, cpu_index_build=True, leave_out=3, unlisted_missing=("pairing with torch", *_UNLISTED_BINARY),
        migrate="keep-installed", host_compared=True, duplicate_checked=True, known_bad_checked=True, build_checked=True,
        smoke_what="torchvision.ops.nms on 3 boxes",
        smoke="b = torch.tensor([[0., 0., 1., 1.], [0., 0., 1., 1.], [2., 2., 3., 3.]])\n"
              "kept = pkg.ops.nms(b, torch.tensor([0.9, 0.8, 0.7]), 0.5)\n"
              "assert kept.tolist() == [0, 2], kept\n",
    ),
    ComponentInfo(
        "torchaudio", "torchaudio", "torchaudio", "companion", module="torchaudio", release="CompanionRelease", pairing="declared", registry_read=True,
        overlay_kept=True, cpu_index_build=True, leave_out=4, unlisted_missing=("pairing with torch", *_UNLISTED_BINARY),
        migrate="keep-installed", host_compared=True, duplicate_checked=True, known_bad_checked=True, build_checked=True,
        smoke_what="torchaudio.functional.gain and transforms.Spectrogram of a 64-sample tensor",
        smoke="x = torch.ones(1, 64)\n"
              "assert pkg.functional.gain(x, 6.0).shape == x.shape\n"
              "assert pkg.transforms.Spectrogram(n_fft=16)(x).shape[:2] == (1, 9)\n",
    ),
    ComponentInfo(
        "transformers", "transformers", "transformers", "library", module="transformers", release="LibraryLine", pairing="torch-min", registry_read=True,
        overlay_kept=True, unlisted_missing=("pairing with torch (torch minimum)", "Requires-Python", "accelerate minimum"),
        host_compared=True, duplicate_checked=True, torch_extra=True,
        smoke_what="a tiny BertConfig (1 layer, hidden 8) and one forward of BertModel",
        smoke="c = pkg.BertConfig(vocab_size=32, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16)\n"
              "with torch.no_grad():\n"
              "    out = pkg.BertModel(c).eval()(torch.tensor([[1, 2, 3]]))\n"
              "assert tuple(out.last_hidden_state.shape) == (1, 3, 8)\n",
    ),
    ComponentInfo(
        "accelerate", "accelerate", "accelerate", "library", module="accelerate", release="LibraryLine", pairing="torch-min", registry_read=True,
        overlay_kept=True, unlisted_missing=("pairing with torch (torch minimum)", "Requires-Python"), host_compared=True,
        duplicate_checked=True,
        smoke_what="an Accelerator(cpu=True) preparing a 4x2 nn.Linear, and one forward",
        smoke="a = pkg.Accelerator(cpu=True)\n"
              "m = a.prepare(torch.nn.Linear(4, 2))\n"
              "assert tuple(m(torch.ones(1, 4)).shape) == (1, 2)\n",
    ),
    ComponentInfo("oneccl-cpu", "oneccl-cpu", "runtime", "runtime", migrate="drop", migrate_why=_WHY_ONECCL),
    ComponentInfo("oneccl-devel", "oneccl-devel", "runtime", "runtime", migrate="drop", migrate_why=_WHY_ONECCL),
    ComponentInfo("impi-rt", "impi-rt", "runtime", "runtime", migrate="drop", migrate_why=_WHY_IMPI, owns_mpirun=True,
                  host_compared=True),
    ComponentInfo("impi-devel", "impi-devel", "runtime", "runtime", migrate="drop", migrate_why=_WHY_IMPI, owns_mpirun=True),
    # Intel's OpenMP runtime (libiomp5.so), which compat launch's placement preloads where it is installed:
    # stock PyTorch runs with or without it, so migrate keeps it.
    ComponentInfo("intel-openmp", "intel-openmp", "runtime", "runtime"),
    # Intel's Unified Runtime libraries (libur_loader.so), which every intel-openmp from 2024.2.0 pins at its own release:
    # pip installs it with intel-openmp, so migrate keeps it as it keeps intel-openmp.
    ComponentInfo("intel-cmplr-lib-ur", "intel-cmplr-lib-ur", "runtime", "runtime"),
)

#: The components the resolver chooses versions for, by Component (the registry's records of every kind but runtime).
COMPONENTS: dict[Component, ComponentInfo] = {Component(info.distribution): info for info in REGISTRY if info.kind != "runtime"}
#: The runtime wheels ([[runtime]] distributions and their -devel siblings), by canonical distribution name.
RUNTIME_COMPONENTS: dict[str, ComponentInfo] = {info.distribution: info for info in REGISTRY if info.kind == "runtime"}


def components_where(**fields: object) -> tuple[Component, ...]:
    """The components (resolver order) whose record has each of ``fields``: ``components_where(overlay_kept=True)``."""
    return tuple(c for c, info in COMPONENTS.items() if all(getattr(info, k) == v for k, v in fields.items()))


def distributions_where(**fields: object) -> tuple[str, ...]:
    """Every distribution name (former names after each own, registry order) of the records with each of ``fields``."""
    return tuple(name for info in REGISTRY if all(getattr(info, k) == v for k, v in fields.items()) for name in info.names)


_ALIASES = {
    canonical_name(alias): component
    for component, info in COMPONENTS.items()
    for alias in (component.value, *info.aliases)
}

#: The order in which the resolver maximises versions: a newer torch beats a newer IPEX, and so on.
COMPONENT_ORDER: tuple[Component, ...] = tuple(Component)

#: How a pairing fact is known.  The set is open (the matrix's curation may name more); these are the
#: levels the rules use today, with what each one means.
EVIDENCE: dict[str, str] = {
    "pinned": "the release's metadata requires exactly this partner (Requires-Dist: torch==X): every other one is excluded",
    "built-for": "the release's own files name this partner: it is built against exactly it (its binary, its pinned requirement)",
    "import-guard": "the release checks the partner's version when it is imported or used, and refuses others",
    "declared": "the release's metadata states a range the partner is in (Requires-Dist: torch>=X): pip and uv install the pair; no source says it was verified",
    "verified": "inside the declared range and at or below the newest partner a source verified the release with",
    "reported-working": "an issue, a pull request or a vendor's CI / dependency file pins the pair and reports it working, though the release is not built for it",
    "tested-here": "compat matrix verify installed the pair on this machine and a smoke operation through the extension worked (recorded in the overlay)",
    "documented-break": "a source documents that the pair fails",
    "unverified": "no source either way (or the fact could not be checked against its source)",
}

#: The graded pairing levels, strongest first: the resolver prefers a stronger one (docs/MATRIX.md,
#: "Evidence"); a documented break is never a pairing (the rules refuse it).
#: ``tested-here`` (compat matrix verify ran the pair on this machine) ranks above ``unverified`` and below the sourced levels;
#: ``declared`` (a release's floor or range admits the torch) below it. A pairing inside a release's own declaration never
#: holds torch back (rules.standing counts it as pinned): pip and uv install the newest torch the declarations allow.
PAIRING_RANK: dict[str, int] = {"built-for": 0, "pinned": 0, "verified": 1, "reported-working": 1, "tested-here": 2, "declared": 3, "unverified": 4}
#: The levels that rest on a release's own declaration (its Requires-Dist: torch): what pip obeys.
DECLARED_LEVELS = frozenset({"pinned", "declared", "verified"})
#: The levels a [[<table>.pairing]] entry may state (built-for is the entry's own ``torch``; unverified is the default).
PAIRING_LEVELS = ("reported-working", "documented-break")

#: CPU instruction-set floors ([[ipex]] isa_min) and the /proc/cpuinfo flags each needs (the ones the release checks).
ISA_FLAGS: dict[str, tuple[str, ...]] = {
    "avx2": ("avx2",),
    "avx512": ("avx512f", "avx512bw", "avx512vl", "avx512dq"),
}
#: What to call them in sentences.
ISA_NAMES: dict[str, str] = {"avx2": "AVX2", "avx512": "AVX-512"}


class Provenance(Record):
    """Where a fact comes from, and whether it was checked against that source."""

    sources: tuple[str, ...]
    verified: bool = True
    note: str = ""


def public(version: Version) -> Version:
    """``2.5.0+xpu`` -> ``2.5.0`` (the version without its local label)."""
    return Version(version.public) if version.local is not None else version


#: The provenance of a derived "unverified" pairing: no source either way.
_NO_SOURCE = Provenance(sources=(), verified=False, note="no source says whether this pair works")
#: The provenance of a companion's pairing when its METADATA declares no torch requirement and nothing is curated.
_NO_DECLARED_TORCH = Provenance(sources=(), verified=False, note="its METADATA declares no torch requirement, and no source says which torch it works with")


class Host(Record):
    """A place wheels are downloaded from (a PEP 503 index or a find-links page)."""

    id: str
    url: str
    style: str  # "index" (--index-url / --extra-index-url) or "find-links" (-f)
    description: str
    provenance: Provenance
    mirror_of: str = ""  # the host it mirrors (its files are taken to be the same), "" for none
    documented_for: tuple["Component", ...] = ()  # the packages its sources document it for (empty: not stated)

    @property
    def pip_flag(self) -> str:
        return "-f" if self.style == "find-links" else "--extra-index-url"


class WheelSet(Record):
    """The CPython versions one release has Linux x86_64 wheels for on one host."""

    host: str
    python: frozenset[Version]
    local_label: str
    yanked: bool
    yanked_reason: str
    provenance: Provenance
    glibc_min: Optional[Version] = None  # the oldest glibc its files run on (manylinux_2_28 -> 2.28); None: not recorded
    build: str = ""  # what its files link: "cpu", "cuda", "xpu", "rocm" (read from the files); "": not recorded

    def has_python(self, python: Version) -> bool:
        return python in self.python

    def runs_on(self, glibc: Optional[Version]) -> bool:
        """Does the target's glibc meet the floor?  An unknown glibc or an unrecorded floor is not held against it."""
        return self.glibc_min is None or glibc is None or glibc >= self.glibc_min

    @property
    def yanked_for_security(self) -> bool:
        """Yanked with a reason that names security: the same build on every other host is yanked for compat too."""
        return self.yanked and "security" in self.yanked_reason.casefold()


def security_yank(wheels: Sequence[WheelSet]) -> Optional[Yank]:
    """The first host that yanked this release for security, or None.  Such a yank holds on every host (the build is
    the same): the default never picks the release, an exact ``==`` pin takes it with the reason named."""
    return next((Yank(w.host, w.yanked_reason) for w in wheels if w.yanked_for_security), None)


class Pairing(Record):
    """How one torch release pairs with a release that is not built for it: ``evidence`` is one of
    :data:`PAIRING_LEVELS` (from the matrix) or ``built-for`` / ``unverified`` (derived), or ``tested-here`` /
    ``documented-break`` recorded by compat matrix verify (``tested``: its source is a ``tested-here:`` record of the
    overlay); ``provenance`` its sources."""

    torch: Version
    evidence: str
    provenance: Provenance

    @property
    def tested(self) -> bool:
        return any(s.startswith(TESTED_SOURCE) for s in self.provenance.sources)


#: The source prefix of a pairing compat matrix verify tried on this machine ("tested-here:<date> <machine>").
TESTED_SOURCE = "tested-here:"


def tested_pairing(pairings: Sequence[Pairing], torch: Version) -> Optional[Pairing]:
    """The pairing with ``torch`` tried on this machine, the newest record last in ``pairings`` winning; None if none was."""
    found = None
    for pairing in pairings:
        if pairing.torch == torch and pairing.tested:
            found = pairing
    return found


class IsaFloor(Record):
    """The least CPU instruction set a release runs on (``level``: a key of :data:`ISA_FLAGS`)."""

    level: str
    provenance: Provenance

    @property
    def flags(self) -> tuple[str, ...]:
        return ISA_FLAGS[self.level]

    @property
    def name(self) -> str:
        return ISA_NAMES[self.level]


class KnownBad(Record):
    """A matched set a source reports failing: ``package`` ``version`` next to torch ``torch`` (only the torch build
    with local label ``torch_label`` when that is not None; "" is the unlabelled PyPI build).  A warning, not a refusal."""

    torch: Version
    torch_label: Optional[str]
    component: "Component"
    version: Version
    failure: str  # what fails, as a clause ("DDP through the transformers Trainer fails on two nodes")
    status: str  # "open", "closed", "unresolved"
    provenance: Provenance

    def matches(self, torch: Version, torch_label: Optional[str], version: Version) -> bool:
        """``torch_label``: the installed or chosen torch build's local label ("+cpu", "" for none; None when not known)."""
        if public(torch) != self.torch or public(version) != self.version:
            return False
        return self.torch_label is None or torch_label is None or torch_label == self.torch_label


class DeviceBuildEntry(Record):
    """Builds of a package for Intel GPUs (XPU/GPU): never the CPU release of the same number (``[[device_build]]``)."""

    component: "Component"
    device: str  # "XPU" or "GPU"
    labels: tuple[str, ...]  # local labels that mark the build ("+xpu"), matched exactly
    versions: frozenset[Version]  # public versions that exist only as device builds
    hosts: tuple[str, ...]  # URLs those builds are published on (not compat hosts)
    provenance: Provenance


class RuntimeRelease(Record):
    """A release of a runtime wheel compat does not resolve but passes on (``[[runtime]]``: oneccl-cpu, impi-rt): its
    METADATA's Requires-Dist as written, and (impi-rt) the folders its activation script names, relative to the
    environment's prefix ("" where the script names none: impi-rt 2021.19.0 ships no libfabric)."""

    distribution: str  # canonical name
    version: Version
    requires: tuple[str, ...]  # PEP 508 strings, as the METADATA declares them
    released: str  # upload date on PyPI (YYYY-MM-DD)
    provenance: Provenance
    libfabric: str = ""
    providers: str = ""
    mpi_root: str = ""


class Unavailable(Record):
    """A project no configured index serves (``[[unavailable]]``): a dependency on it cannot be satisfied."""

    project: str  # canonical name
    hosts: tuple[str, ...]  # the matrix hosts asked (dependencies come from PyPI or its mirror)
    checked: str  # when (YYYY-MM-DD)
    provenance: Provenance


class Yank(Record):
    """A release withdrawn from its index: on ``host`` (None: the package index of a pure-Python line, PyPI)."""

    host: Optional[str]
    reason: str


class Release(Protocol):
    """What the rules see of any release entry (torch, IPEX, oneccl_bind_pt, torchvision, a library line).

    An entry speaks for one release, or for every release of a minor line (``versions``).  Entries
    with ``wheels`` are binary: the hosts and CPython versions say where they can be installed from.
    Entries without (pure-Python lines) come from the component's first host, for every Python their
    ``requires_python`` admits.
    """

    @property
    def version(self) -> Version: ...  # the release (a line: its newest release)

    @property
    def versions(self) -> tuple[Version, ...]: ...  # every release the entry speaks for, newest first

    @property
    def distribution(self) -> str: ...  # the distribution to install

    @property
    def wheels(self) -> tuple[WheelSet, ...]: ...

    @property
    def requires_python(self) -> Optional[SpecifierSet]: ...

    @property
    def provenance(self) -> Provenance: ...

    def yank(self, version: Version) -> Optional[Yank]: ...


class _Binary:
    """Shared by the release entries that stand for one release with wheels on hosts."""

    version: Version
    wheels: tuple[WheelSet, ...]

    @property
    def versions(self) -> tuple[Version, ...]:
        return (self.version,)

    def yank(self, version: Version) -> Optional[Yank]:
        """The first host that yanked this release, or None.  Whether that rules it out for a target is the unary
        rule's call (rules.candidates: only when every host with a usable wheel yanked it)."""
        if version != self.version:
            return None
        return next((Yank(w.host, w.yanked_reason) for w in self.wheels if w.yanked), None)


class TorchRelease(_Binary, Record):
    version: Version
    wheels: tuple[WheelSet, ...]
    requires_python: Optional[SpecifierSet]
    released: str
    provenance: Provenance

    @property
    def distribution(self) -> str:
        return Component.TORCH.distribution


class IpexRelease(_Binary, Record):
    version: Version
    distribution: str
    module: str
    torch: Version  # the torch it was built against
    torch_accepts: SpecifierSet  # what its import-time version guard lets through
    guard: str  # how the guard fails: exit127, os_exit, raise, none, ...
    released: str
    wheels: tuple[WheelSet, ...]
    provenance: Provenance
    isa_min: Optional[IsaFloor] = None  # the least CPU instruction set it runs on (None: not recorded)
    known_bad: tuple[KnownBad, ...] = ()  # matched sets with torch a source reports failing ([[known_bad]])

    requires_python = None


class CclRelease(_Binary, Record):
    version: Version
    distribution: str
    module: str
    torch: Version  # the torch version the prebuilt wheel is built for
    has_cwd: bool
    setvars: str  # path of setvars.sh relative to the module directory
    oneccl: str  # bundled oneCCL version
    released: str
    wheels: tuple[WheelSet, ...]
    provenance: Provenance
    pairings: tuple[Pairing, ...] = ()  # torch releases it is not built for, with what a source says ([[oneccl_bind_pt.pairing]])
    known_bad: tuple[KnownBad, ...] = ()  # matched sets with torch a source reports failing ([[known_bad]])

    requires_python = None

    def pairing_with(self, torch: Version) -> Optional[Pairing]:
        """How this prebuilt wheel pairs with ``torch``: ``built-for`` its own torch; what a [[pairing]] entry says
        (``reported-working``, ``documented-break``); ``unverified`` for any other torch of the same major.minor;
        None for another major.minor (a different C++ ABI: the ``ccl-torch-series`` rule refuses it)."""
        if torch == self.torch:
            return Pairing(torch, "built-for", self.provenance)
        if torch.release[:2] != self.torch.release[:2]:
            return None
        for pairing in self.pairings:  # curated [[pairing]] entries first: a sourced fact wins over one tried here
            if pairing.torch == torch and not pairing.tested:
                return pairing
        tested = tested_pairing(self.pairings, torch)
        return tested if tested is not None else Pairing(torch, "unverified", _NO_SOURCE)


class CompanionRelease(_Binary, Record):
    """torchvision / torchaudio (and any extension whose wheels declare torch): the torch it needs, as its METADATA
    declares it (``torch_requires``, a SpecifierSet: ``==2.14.0`` a pin, ``>=2.14.0`` a floor, a range; None: it declares
    no torch requirement, torchaudio 2.11.0). ``torch`` is the torch a pin names (the build it is made for), None for a
    floor, a range or nothing. ``requires_python``: its Requires-Python as declared (``>=3.10,!=3.14.1``);
    ``verified_with``: the newest torch a source verified it with (above it a pairing rests on the declaration alone);
    ``stable_abi``: the stable-ABI fact of its wheels (a ``py3-none`` or ``abi3`` tag, a ``*_stable.so``), "" when none is
    recorded. See :meth:`pairing_with`."""

    package: str
    version: Version
    torch: Optional[Version]
    wheels: tuple[WheelSet, ...]
    provenance: Provenance
    known_bad: tuple[KnownBad, ...] = ()
    pairings: tuple[Pairing, ...] = ()  # torch releases tried on this machine (compat matrix verify: tested-here or a break)
    torch_requires: Optional[SpecifierSet] = None  # Requires-Dist: torch as declared (a pin, a floor, a range); None: none
    requires_python: Optional[SpecifierSet] = None  # Requires-Python as declared; None: not recorded
    verified_with: Optional[Version] = None  # the newest torch a source verified it with; None: none
    stable_abi: str = ""  # "py3-none wheel; torchvision/_C_stable.so": what says it is built for the stable ABI

    @property
    def requirement(self) -> Optional[SpecifierSet]:
        """What it declares of torch: ``torch_requires``, else ``==torch`` for an entry that names only the pinned torch."""
        if self.torch_requires is not None:
            return self.torch_requires
        return SpecifierSet(f"=={self.torch}") if self.torch is not None else None

    def declares(self, torch: Version) -> bool:
        """Does its declaration admit ``torch`` (pip would install the pair)?  False when it declares nothing."""
        if self.torch is not None and self.torch_requires is None:
            return public(torch) == self.torch
        return self.torch_requires is not None and self.torch_requires.contains(public(torch), prereleases=True)

    @property
    def is_pin(self) -> bool:
        return self.torch is not None

    def pairing_with(self, torch: Version) -> Optional[Pairing]:
        """How it pairs with ``torch``, from what it declares: ``pinned`` for the torch an exact pin names; for a floor or
        range, ``verified`` at or below ``verified_with`` and ``declared`` above it; ``unverified`` with any torch for a
        release that declares none. A pairing tried on this machine (``tested-here``, or ``documented-break`` for one
        that failed) is the answer for any torch but a pinned one. None: the declaration excludes ``torch``."""
        if self.torch is not None and public(torch) == self.torch:
            return Pairing(torch, "pinned", self.provenance)
        tested = tested_pairing(self.pairings, torch)
        if tested is not None:
            return tested
        if self.torch is None and self.torch_requires is None:
            return Pairing(torch, "unverified", _NO_DECLARED_TORCH)
        if not self.declares(torch):
            return None
        if self.verified_with is not None and public(torch) <= self.verified_with:
            return Pairing(torch, "verified", self.provenance)
        return Pairing(torch, "declared", Provenance(self.provenance.sources, False, self.declared_note(torch)))

    def declared_note(self, torch: Version) -> str:
        """"its METADATA declares Requires-Dist: torch>=2.14.0, and no source verified it with any torch; stable ABI: ..."."""
        above = (f"above torch {self.verified_with}, the newest torch a source verified it with" if self.verified_with is not None
                 else "no source verified it with any torch")
        abi = f"; stable ABI: {self.stable_abi}" if self.stable_abi else ""
        return f"its METADATA declares Requires-Dist: torch{self.requirement}, and torch {torch} is {above}{abi}" if self.verified_with is not None \
            else f"its METADATA declares Requires-Dist: torch{self.requirement}, and {above}{abi}"

    @property
    def distribution(self) -> str:
        return self.package


#: Components whose releases keep coming (a pin or an installed release the matrix has not caught up with is answered
#: as unlisted, its missing facts named); the Intel packages are frozen (archived, deprecated), and their tables are complete.
UNLISTED_COMPONENTS: frozenset["Component"] = frozenset(c for c, info in COMPONENTS.items() if info.unlisted_missing)
#: What the matrix records of a release and cannot know of one it does not list, per component.
MISSING_FACTS: dict["Component", tuple[str, ...]] = {c: info.unlisted_missing for c, info in COMPONENTS.items() if info.unlisted_missing}
#: The commands that settle a missing fact (docs/MATRIX.md): read the registries, or try the pairing here.
SETTLE_UPDATE = "compat matrix update"
_UNLISTED_SOURCE = Provenance(sources=(), verified=False, note="not in the matrix: no source either way")


class UnlistedRelease(Record):
    """A release the matrix does not list (a pin, an installed package newer than the matrix): its facts are missing
    (``missing``), so its pairing with torch is ``unverified`` -- the graded-pairing path oneccl_bind_pt's unverified
    pairings take -- within ``series`` (the torch major.minor its own line's listed releases pair with; None: any torch,
    the line is new). ``nearest``: the listed release nearest to it and ``nearest_torch`` the torch that one is built
    for or pins (the nearest verified pairing), None when it pins none. No wheels, no Requires-Python, no minimums:
    nothing is inherited, nothing is ruled out on facts it does not have."""

    component: "Component"
    version: Version
    nearest: Optional[Version]
    nearest_torch: Optional[Version]
    series: Optional[tuple[int, ...]]
    missing: tuple[str, ...]

    wheels: tuple[WheelSet, ...] = ()
    requires_python = None
    torch_min = None
    accelerate_min = None
    provenance = _UNLISTED_SOURCE
    known_bad: tuple["KnownBad", ...] = ()
    _not_in_matrix = True  # made per question, never loaded or cached (matrix/cache.py)

    @property
    def versions(self) -> tuple[Version, ...]:
        return (self.version,)

    @property
    def distribution(self) -> str:
        return self.component.distribution

    def yank(self, version: Version) -> Optional[Yank]:
        return None

    def pairing_with(self, torch: Version) -> Optional[Pairing]:
        """``unverified`` with any torch of ``series`` (any torch when None); None outside it."""
        if self.series is not None and torch.release[:2] != self.series:
            return None
        return Pairing(torch, "unverified", _UNLISTED_SOURCE)

    def settle(self, torch: Optional[Version] = None) -> str:
        """The commands that settle the missing facts ("compat matrix update, or compat matrix verify PKG==V --with torch==T")."""
        if self.component is Component.TORCH or "pairing with torch" not in " ".join(self.missing):
            return SETTLE_UPDATE
        verify = f"compat matrix verify {self.component.distribution}=={self.version}" + (f" --with torch=={torch}" if torch is not None else "")
        return f"{SETTLE_UPDATE}, or {verify}"


def unlisted_release(matrix: "Matrix", component: "Component", version: Version) -> Optional[UnlistedRelease]:
    """``version`` of ``component`` as an :class:`UnlistedRelease` when the matrix lists no entry for it, the component
    keeps releasing (:data:`UNLISTED_COMPONENTS`) and the release is newer than the newest the matrix lists (one the
    matrix has not caught up with) or a pre/dev release inside its span; None otherwise (listed, a frozen Intel package,
    older than the matrix's span: out of its scope, "the matrix knows X to Y", or a final release inside the span that
    the registries never had: :func:`absent_release`). The nearest listed release is the nearest of its own
    minor line, else the nearest overall."""
    if component not in UNLISTED_COMPONENTS or matrix.release(component, version) is not None:
        return None
    entries = [(v, r) for r in matrix.releases[component] for v in r.versions]
    if not entries or version <= min(v for v, _ in entries):
        return None
    if absent_release(matrix, component, version) is not None:  # inside the listed span: no such release, not a new one
        return None
    line = [(v, r) for v, r in entries if v.release[:2] == version.release[:2]]
    pool = nearest_pool(line or entries)

    def nearness(item: tuple[Version, Release]) -> tuple:
        v = item[0]
        return (abs(_as_number(v) - _as_number(version)), v < version)

    nearest = min(pool, key=nearness, default=None)
    torch = getattr(nearest[1], "torch", None) if nearest is not None else None
    series = tuple({t.release[:2] for _, r in line if (t := getattr(r, "torch", None)) is not None}) if line else ()
    return UnlistedRelease(
        component=component,
        version=version,
        nearest=nearest[0] if nearest is not None else None,
        nearest_torch=torch,
        series=series[0] if len(series) == 1 else None,
        missing=MISSING_FACTS[component],
    )


class AbsentRelease(Record):
    """A version inside the span of releases the matrix lists (newer than its oldest, older than its newest), which it
    does not list: no such release. The matrix lists every final release of its span as the registries have them
    (`compat matrix update` harvests them; scripts/crosscheck_registry.py reports one it lacks), so a pin of it is a
    typo (torchaudio==1.13.1: PyPI goes 0.13.1 -> 2.0.0), and pip would stop with 'No matching distribution'.
    ``below``/``above``: the nearest listed (real) releases on either side, with the torch each pins (None: none)."""

    component: "Component"
    version: Version
    below: Version
    above: Version
    below_torch: Optional[Version]
    above_torch: Optional[Version]
    checked: str  # the matrix's registry_checked date ("" when it has none)


def absent_release(matrix: "Matrix", component: "Component", version: Version) -> Optional[AbsentRelease]:
    """``version`` of a component that keeps releasing (:data:`UNLISTED_COMPONENTS`) as an :class:`AbsentRelease` when
    it lies inside the span the matrix lists and is not listed; None otherwise (listed, older or newer than the span,
    a pre- or dev release: the registries' lists the matrix copies leave those out, or a frozen Intel package)."""
    if component not in UNLISTED_COMPONENTS or version.is_prerelease or version.is_devrelease:
        return None
    public = Version(version.public)
    by_version = {v: r for r in matrix.releases[component] for v in r.versions}
    if not by_version or public in by_version:
        return None
    below = max((v for v in by_version if v < public), default=None)
    above = min((v for v in by_version if v > public), default=None)
    if below is None or above is None:
        return None
    return AbsentRelease(component=component, version=public, below=below, above=above,
                         below_torch=getattr(by_version[below], "torch", None), above_torch=getattr(by_version[above], "torch", None),
                         checked=matrix.registry_checked)


def nearest_pool(entries: list[tuple[Version, Release]]) -> list[tuple[Version, Release]]:
    """Where "the nearest verified pairing" is looked for: the entries that pin a torch, when any does (a companion that
    declares none is no verified pairing); all of them otherwise (libraries: the nearest listed release)."""
    pinned = [(v, r) for v, r in entries if getattr(r, "torch", None) is not None]
    return pinned or entries


def nearest_pinned(matrix: "Matrix", component: "Component", version: Version) -> Optional[tuple[Version, Version]]:
    """(release, the torch it pins) of the listed ``component`` release nearest to ``version`` that pins a torch."""
    pool = [(v, r) for r in matrix.releases[component] for v in r.versions if getattr(r, "torch", None) is not None]
    if not pool:
        return None
    v, r = min(pool, key=lambda item: (abs(_as_number(item[0]) - _as_number(version)), item[0] < version))
    return v, r.torch  # type: ignore[attr-defined]


def _as_number(version: Version) -> float:
    """A version as one number for "nearest" (major, minor, micro weighed apart); only ever compared."""
    major, minor, micro = (tuple(version.release) + (0, 0))[:3]
    return major * 1e6 + minor * 1e3 + micro


class LibraryLine(Record):
    """One minor line of a pure-Python library (transformers 4.29.*, accelerate 0.20.*)."""

    package: str
    line: Version
    versions: tuple[Version, ...]  # every release of the line, newest first
    yanked: frozenset[Version]
    requires_python: Optional[SpecifierSet]
    torch_min: Optional[Version]
    accelerate_min: Optional[Version]
    provenance: Provenance

    wheels: tuple[WheelSet, ...] = ()  # pure Python: one wheel for every Python, from the component's first host

    @property
    def latest(self) -> Version:
        return self.versions[0]

    @property
    def version(self) -> Version:
        return self.latest

    @property
    def distribution(self) -> str:
        return self.package

    def yank(self, version: Version) -> Optional[Yank]:
        return Yank(None, "") if version in self.yanked else None


class Feature(Record):
    """A behaviour of a library that exists in a range of its versions (a flag, a backend)."""

    package: str
    name: str
    versions: SpecifierSet
    description: str
    evidence: str
    provenance: Provenance

    def present_in(self, version: Version) -> bool:
        return self.versions.contains(version, prereleases=True)


class EndOfLife(Record):
    package: str
    status: str  # "archived", "deprecated"
    last_release: Version
    date: str
    statement: str
    advice: str
    provenance: Provenance


class Profile(Record):
    """A named set of components plus the library features that set must support."""

    name: str
    description: str
    components: frozenset[Component]
    features: tuple[tuple[str, str], ...]  # (package, feature name)


class Policy(Record):
    """Which host each component is taken from, in order of preference."""

    host_preference: dict[Component, tuple[str, ...]]
    python_range: tuple[Version, Version]  # the CPython versions the matrix speaks for
    default_profile: str
    features_with_ccl: tuple[tuple[str, str], ...]  # what transformers/accelerate must support next to oneccl_bind_pt


class FeatureNotInMatrix(MatrixError, KeyError):
    """A [[feature]] entry compat reads is not in this matrix (a KeyError too, for callers that look it up)."""

    def __init__(self, path: str, package: str, name: str) -> None:
        super().__init__(path, f"[[feature]] {package}:{name}", "", "is missing, and compat needs it to answer",
                         "Use the bundled matrix (drop --matrix / COMPAT_MATRIX), or add that [[feature]] entry (see docs/MATRIX.md).")


class Matrix(Record):
    _uncompared = frozenset({"source_path"})

    schema_version: int
    registry_checked: str
    hosts: dict[str, Host]
    policy: Policy
    profiles: dict[str, Profile]
    releases: dict[Component, tuple[Release, ...]]  # every component, newest first
    features: tuple[Feature, ...]
    eol: tuple[EndOfLife, ...]
    source_path: str = ""  # not compared: the same matrix read from another path is equal
    known_bad: tuple[KnownBad, ...] = ()  # also on the releases they name (release.known_bad)
    device_builds: tuple[DeviceBuildEntry, ...] = ()
    runtime: tuple[RuntimeRelease, ...] = ()  # newest first per distribution ([[runtime]])
    unavailable: tuple[Unavailable, ...] = ()  # [[unavailable]]

    def __repr__(self) -> str:
        counts = ", ".join(f"{len(self.releases[c])} {c.label}" for c in COMPONENT_ORDER)
        return f"Matrix({self.source_path or 'in memory'}: {counts})"

    def versions(self, component: Component) -> list[Version]:
        """Every known release of a component, newest first (library lines expanded)."""
        return sorted((v for release in self.releases[component] for v in release.versions), reverse=True)

    def release(self, component: Component, version: Version) -> Optional[Release]:
        """The entry that speaks for ``version`` (for a library line: the line that lists it)."""
        return _find(self.releases[component], version)

    def feature(self, package: str, name: str) -> Feature:
        """The [[feature]] entry ``package:name``; a matrix without it (a trimmed ``--matrix`` file) is a MatrixError
        naming the entry (exit 2), never a KeyError reaching the guard."""
        for feature in self.features:
            if feature.package == package and feature.name == name:
                return feature
        raise FeatureNotInMatrix(self.source_path or "the matrix", package, name)

    def features_of(self, package: str) -> tuple[Feature, ...]:
        return tuple(f for f in self.features if f.package == package)

    def eol_of(self, package: str) -> Optional[EndOfLife]:
        for entry in self.eol:
            if entry.package == package:
                return entry
        return None

    # Typed finders for callers that read a component's own fields (IPEX's guard, the bindings' module).

    def torch_release(self, version: Version) -> Optional[TorchRelease]:
        return _find(self.releases[Component.TORCH], version)  # type: ignore[return-value]

    def ipex_release(self, version: Version) -> Optional[IpexRelease]:
        return _find(self.releases[Component.IPEX], version)  # type: ignore[return-value]

    def ccl_release(self, version: Version) -> Optional[CclRelease]:
        return _find(self.releases[Component.CCL], version)  # type: ignore[return-value]


def _find(releases: Iterable[Release], version: Version) -> Optional[Release]:
    for release in releases:
        if version in release.versions:
            return release
    return None
