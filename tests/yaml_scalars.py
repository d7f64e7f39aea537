"""Plain YAML scalars of every shape go-yaml v2's resolver (resolve.go) tells apart: numbers in all their forms (signs,
underscores, exponents, leading dots and zeros, 0b / 0o / 0x prefixes, past int64 and uint64, past float64), YAML 1.1
sexagesimals, timestamps (good and nearly good), the bool and null words in every case, .inf / .nan and ``<<``.

Each text is a valid plain scalar after ``k: `` and before ``: v`` (no leading indicator, no ': ' or ' #', no spaces at
either end), so a test can put it in a document as it is. Shared by tests/export/test_k8s_yaml.py and tests/cli/test_cli_fuzz.py.
"""

from __future__ import annotations

from hypothesis import strategies as st

WORDS = ["y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "true", "True", "TRUE", "false", "False", "FALSE", "on", "On", "ON",
         "off", "Off", "OFF", "~", "null", "Null", "NULL", ".nan", ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "-.Inf", "+.INF",
         "<<", "yES", "oN", "nULL", "tRUE", ".iNf", "inf", "nan", "+inf", "-Infinity", "NaN", ".", "+", "-", "_", "0", "-0", "+0", "00",
         "1:30", "190:20:30", "1_000:30", "-1:30", "1:60", "2024-01-01", "2001-12-14t21:59:43.10-05:00", "2001-12-14 21:59:43.10",
         "2002-12-14", "2001-12-15T02:59:43.1Z", "2024-02-30", "2024-13-01", "0x", "0b", "0o", "0x_", "1e400", "-1e400", "1e-400",
         "9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809", "18446744073709551615",
         "18446744073709551616", "0b" + "1" * 64, "0x" + "f" * 16, "0x1" + "0" * 16, "08", "09", "017", "0o17", "0O17", "0B11", "0X1f",
         "1.", "+.5", "-.5e3", ".5_5", "._5", ".5__5", "0b+101", "0b-101", "-0b101", "-_1", "1_", "1__0", "553640e6", "2e-5", "1e5",
         "1E+5", "1.0", "1.0e+21", "1.5e300", "3.4e38", "3.5e38", "9007199254740993"]

_DIGITS = st.text("0123456789", min_size=1, max_size=6)
_UNDERSCORED = st.lists(st.sampled_from(list("0123456789_")), min_size=1, max_size=8).map("".join)
_SIGN = st.sampled_from(["", "", "+", "-"])


def _numbers():
    mantissa = st.one_of(_DIGITS, _UNDERSCORED, st.tuples(_DIGITS, _DIGITS).map(".".join), st.tuples(_DIGITS, st.just("")).map(".".join),
                         _DIGITS.map(lambda d: "." + d), st.tuples(_UNDERSCORED, _UNDERSCORED).map(".".join))
    exponent = st.one_of(st.just(""), st.tuples(st.sampled_from("eE"), st.sampled_from(["", "+", "-"]), st.one_of(_DIGITS, _UNDERSCORED)).map("".join))
    return st.tuples(_SIGN, mantissa, exponent).map("".join)


def _based():
    prefix = st.sampled_from(["0b", "0B", "0o", "0O", "0x", "0X", "0", "-0b", "+0x", "-0o", "0b+", "0b-"])
    digits = st.lists(st.sampled_from(list("0123456789abcdefABCDEF_xo")), min_size=0, max_size=18).map("".join)
    return st.tuples(prefix, digits).map("".join)


def _big():
    return st.tuples(_SIGN, st.integers(2**53, 2**66).map(str)).map("".join)


def _times():
    two = st.integers(0, 99).map(str)
    date = st.tuples(st.integers(1000, 9999).map(str), two, two).map("-".join)
    clock = st.tuples(two, two, two).map(":".join)
    fraction = st.one_of(st.just(""), st.text("0123456789", min_size=1, max_size=11).map(lambda d: "." + d))
    zone = st.sampled_from(["", "Z", "z", "+05:00", "-05:00", "+5:00", "+0500", "-05:0x"])
    separator = st.sampled_from(["T", "t", " ", "  ", "_"])
    full = st.tuples(date, separator, clock, fraction, zone).map("".join)
    sexagesimal = st.lists(st.integers(0, 99).map(str), min_size=2, max_size=4).map(":".join).flatmap(lambda t: _SIGN.map(lambda s: s + t))
    return st.one_of(date, full, sexagesimal)


def _cases():
    return st.sampled_from(WORDS[:22]).flatmap(lambda w: st.lists(st.booleans(), min_size=len(w), max_size=len(w)).map(
        lambda flips: "".join(c.upper() if f else c.lower() for c, f in zip(w, flips))))


def go_yaml_scalars():
    """Plain scalars of the shapes above."""
    return st.one_of(st.sampled_from([w for w in WORDS if _plain_safe(w)]), _numbers(), _based(), _big(), _times(), _cases()).filter(_plain_safe)


def _plain_safe(text: str) -> bool:
    """Valid as a plain scalar in ``k: TEXT`` and ``TEXT: v`` (the text itself, not a marker or an indicator)."""
    if not text or text != text.strip() or text.endswith(":") or ": " in text or " #" in text or text.startswith(("---", "...")):
        return False
    return text[0] not in "?:,[]{}#&*!|>'\"%@`" and text not in ("-",) and not text.startswith("- ")
