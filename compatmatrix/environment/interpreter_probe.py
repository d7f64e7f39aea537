# Run BY the target interpreter (python -I -S this_file): stdlib only, Python 3.6 to 3.15.
# Prints one JSON object describing the interpreter. Keep it free of f-string features newer than 3.6.
import json
import platform
import sys
import sysconfig


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
    }
    sys.stdout.write(json.dumps(info))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
