"""Everything compat writes for people and machines, one module per format (pipdeptree's ``_render/``, pip-audit's
``_format/``); the command (cli/) picks the module, the core never prints.

==================  ==================================================================================================
``text.py``         what people read: the resolve and matrix tables, findings (doctor, check, export --validate), the
                    translate, download and install lines; through console.TextConsole (rich only where it must write)
``json.py``         every ``--json`` document, each with its versioned JSON Schema in compatmatrix/schemas/ (SCHEMAS)
``manifest.py``     Kubernetes manifests as YAML (PyYAML, imported on that path only)
``dockerfile.py``   a Dockerfile for a resolved set
``pylock.py``       a PEP 751 pylock.toml for a resolved set
``requirements.py`` pip's forms of a plan: a requirements file, constraints, the one-line pip command
``fabric_html.py``  doctor --live --fabric --report: one self-contained HTML page of the --json document (matplotlib
                    SVG charts, imported on that path only)
==================  ==================================================================================================

Not here, because they belong to the code that knows the format: the shell exports of ``compat env``
(shell.format_env) and ``compat launch --print``'s text and JSON (placement/render.py: json.py hands that
document on). Every module imports what its format needs when it is called: ``compat resolve --json`` loads json.py
and neither rich nor yaml (tests/test_startup.py). Side effects: none; text.py writes to the console it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    from ..console import TextConsole

#: The schema of each command's ``--json`` document (``export``: ``compat export --validate``'s; ``launch``: ``--print --json``).
SCHEMAS: Mapping[str, str] = {
    "resolve": "resolve-v1.json",
    "matrix": "matrix-v1.json",
    "matrix verify": "matrix-verify-v1.json",
    "matrix update": "matrix-update-v1.json",
    "matrix update --health": "matrix-health-v1.json",  # an option's own document: "<command> --<option>"
    "doctor": "findings-v1.json",
    "check": "findings-v1.json",
    "install": "install-v1.json",
    "download": "download-v1.json",
    "translate": "translate-v1.json",
    "env": "env-v2.json",
    "launch": "launch-v1.json",
    "launch --watch": "watch-v1.json",  # the findings of a watched run (compatmatrix/watch/)
    "watch": "watch-v1.json",  # the same document, attached to a job started elsewhere ("attached": true)
    "export": "export-validate-v1.json",
    "migrate": "migrate-v1.json",
    "tune": "tune-v1.json",
}


def schema_path(command: str) -> Path:
    """The JSON Schema file of ``command``'s ``--json`` document (shipped in the wheel: package data)."""
    from pathlib import Path

    return Path(__file__).resolve().parent.parent / "schemas" / SCHEMAS[command]


def emit(as_json: bool, no_color: bool, document: Callable[[], Mapping[str, Any]], text: Callable[[TextConsole], None]) -> None:
    """Print the command's answer: its JSON document with ``--json``, else the text (rich tables / plain lines)."""
    from ..console import dump_json, make_console

    if as_json:
        print(dump_json(document()))
    else:
        text(make_console(no_color))
