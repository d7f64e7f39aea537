"""A wheel named by URL or path in a requirements file: its name and version, read from the file name as pip reads it
(packaging.utils.parse_wheel_filename), and whether its tags fit the target, as pip checks before it installs one.

Pure: strings and targets in, values or an InputError out.
"""

from __future__ import annotations

from typing import Optional
from urllib.parse import unquote, urlsplit

from packaging.version import Version

from ..errors import shown
from .model import InputError, InputRequirement, checked_name


def wheel_filename(url: str) -> str:
    """The file name at the end of a URL or path ('' when there is none)."""
    try:
        path = urlsplit(url).path
    except ValueError:
        path = url
    return unquote(path.rsplit("/", 1)[-1]).split("#", 1)[0]


def wheel_name_version(url: str, origin: object) -> Optional[tuple[str, Version]]:
    """(project name, version with its local label) of a wheel URL or path; None when it does not name a .whl file.
    A .whl name pip cannot read (or with a name that is no project name) is refused, naming ``origin``."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    filename = wheel_filename(url)
    if not filename.endswith(".whl"):
        return None
    try:
        _, version, _, _ = parse_wheel_filename(filename)
    except (InvalidWheelFilename, ValueError):
        raise InputError(f"{origin}: {shown(filename)!r} is not a wheel file name pip accepts (NAME-VERSION-PY-ABI-PLATFORM.whl).",
                         "Name the wheel file as it was built.") from None
    return checked_name(filename.split("-", 1)[0], origin), version


def check_wheel_target(requirement: InputRequirement, python, platform) -> None:
    """Refuse a wheel URL whose Python/ABI/platform tags do not fit the target (pip: 'is not a supported wheel on this
    platform'). ``python`` is a target.PythonTarget, ``platform`` a target.Platform or None (Linux x86_64)."""
    filename = wheel_filename(requirement.url)
    if not filename.endswith(".whl"):
        return
    from ..install.plan import WheelTarget, glibc_of, wheel_fits
    from ..target import Platform

    target = platform if platform is not None else Platform.from_tag("linux_x86_64")
    if target.system != "linux" or target.machine != "x86_64":
        return  # the tags compat knows how to judge are Linux x86_64's; the platform check says the rest
    glibc = glibc_of(str(target.glibc)) if target.glibc is not None else None
    if not wheel_fits(filename, WheelTarget(python.version, target, glibc)):
        tags = "-".join(filename[:-4].split("-")[-3:])
        raise InputError(f"{requirement.origin}: {shown(filename)} is built for {tags}, not for Python {python.label} on {target.tag}: "
                         "pip refuses it (not a supported wheel on this platform).",
                         f"Name the wheel built for cp{python.version.major}{python.version.minor} (or drop the URL and let compat pick it).")
