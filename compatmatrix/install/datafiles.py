"""The files an install writes or removes outside site-packages, platlib and the scripts folder: a wheel's
``.data/data`` files (under the prefix: share/, etc/, ...) and ``.data/headers`` files (include/site/...), and
those the RECORD of a distribution about to be replaced lists there. The transaction snapshots the folders of
the prefix they fall in (each one directly in the data root), so a restore puts those back too.

What cannot be snapshotted that way (a file directly in the prefix, one under lib/ but outside site-packages,
a data folder that is a symlink, a root outside the prefix) is returned as "uncovered", for the install to say.

Side effects: reads the wheels (their file lists only) and the replaced distributions' RECORD files.
"""

from __future__ import annotations

import csv
import io
import os
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .files import Unreadable, read_small
from .transaction import EnvFolders


@dataclass(frozen=True)
class DataFolders:
    folders: tuple[Path, ...]  # to snapshot (may not exist yet)
    uncovered: tuple[Path, ...]  # files written or removed that no snapshot holds


def wheel_targets(wheel: Path, data_root: Path, headers_root: Optional[Path], names: Optional[Sequence[str]] = None) -> list[Path]:
    """Where the wheel's .data/data and .data/headers files go (headers under headers_root/<project>); ``names``: the
    archive's names under its .data folder when they were read already (wheelfiles.Listing.data), else the archive is read here."""
    if names is None:
        try:
            with zipfile.ZipFile(wheel) as archive:
                names = archive.namelist()
        except (OSError, zipfile.BadZipFile, ValueError):
            return []  # the installer says what is wrong with it
    project = wheel.name.split("-", 1)[0]
    found = []
    for name in names:
        parts = name.split("/")
        if len(parts) < 3 or not parts[0].endswith(".data") or not parts[-1] or any(p in ("", ".", "..") for p in parts[2:]):
            continue
        if parts[1] == "data":
            found.append(data_root.joinpath(*parts[2:]))
        elif parts[1] == "headers" and headers_root is not None:
            found.append(headers_root.joinpath(project, *parts[2:]))
    return found


def record_targets(dist_info: Path, site: Path) -> list[Path]:
    """The files a distribution's RECORD lists, as absolute paths (RECORD paths are relative to its site folder)."""
    try:
        text = read_small(dist_info / "RECORD", 64 << 20)
    except Unreadable:
        return []
    found = []
    for row in csv.reader(io.StringIO(text)):
        if row and row[0]:
            found.append(Path(os.path.normpath(os.path.join(site, row[0]))))
    return found


def data_folders(env: EnvFolders, targets: Iterable[Path]) -> DataFolders:
    """The data folders to snapshot for ``targets`` (absolute paths the install may write or remove)."""
    folders: dict[Path, None] = {}
    uncovered: dict[Path, None] = {}
    own = env.own()
    for target in targets:
        target = Path(os.path.normpath(target))
        if any(target == p or p in target.parents for p in own):
            continue  # site-packages, platlib or the scripts folder: snapshotted anyway
        real_parent = Path(os.path.realpath(target.parent))
        if any(real_parent == p or p in real_parent.parents for p in own):
            continue
        if env.data is None or env.data not in target.parents:
            uncovered[target] = None
            continue
        top = env.data / target.relative_to(env.data).parts[0]
        if top == target or not env.data_folder(top) or os.path.islink(top) or (os.path.lexists(top) and not os.path.isdir(top)):
            uncovered[target] = None
            continue
        folders[top] = None
    return DataFolders(tuple(folders), tuple(uncovered))


def install_targets(env: EnvFolders, wheels: Sequence[Path], headers_root: Optional[Path], replaced: Iterable[tuple[Path, Path]],
                    listed: Optional[Mapping[Path, Sequence[str]]] = None) -> DataFolders:
    """The data folders for installing ``wheels`` and replacing the distributions ``replaced`` ((dist-info, site) pairs);
    ``listed``: the .data names of the wheels whose archives were read already."""
    targets: list[Path] = []
    if env.data is not None:
        for wheel in wheels:
            targets += wheel_targets(wheel, env.data, headers_root, (listed or {}).get(wheel))
    for dist_info, site in replaced:
        targets += record_targets(dist_info, site)
    return data_folders(env, targets)
