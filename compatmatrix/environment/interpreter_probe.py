# Run BY the target interpreter (python -I -S -c <this source> --answer FILE): stdlib only, Python 3.6 to 3.15.
# Writes one JSON object describing the interpreter into FILE (written whole, then renamed into place), so
# nothing the interpreter or a wrapper prints can be taken for the answer; without --answer it prints it.
# Keep it free of f-string features newer than 3.6.
import json
import os
import platform
import sys
import sysconfig


def answer(report, argv):
    text = json.dumps(report)
    if "--answer" in argv[:-1]:
        path = argv[argv.index("--answer") + 1]
        with open(path + ".part", "w", encoding="utf-8") as handle:
            handle.write(text)
        os.rename(path + ".part", path)
    else:
        sys.stdout.write(text + "\n")


def markers():
    """The PEP 508 marker values of this interpreter (what packaging.markers.default_environment() says)."""
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


def main():
    libc_name, libc_version = platform.libc_ver()
    info = {
        "probe": 1,
        "executable": sys.executable,
        "version": "%d.%d.%d" % sys.version_info[:3],
        "releaselevel": sys.version_info[3],
        "implementation": sys.implementation.name,
        "platform": sysconfig.get_platform(),
        "machine": platform.machine(),
        "system": platform.system(),
        "libc": libc_name,
        "libc_version": libc_version,
        "prefix": sys.prefix,
        "base_prefix": getattr(sys, "base_prefix", sys.prefix),
        "markers": markers(),
    }
    answer(info, sys.argv[1:])


if __name__ == "__main__":
    main()
