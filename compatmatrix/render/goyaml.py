"""YAML scalars typed as the Kubernetes API server and kubectl type them: go-yaml v2's resolver, then JSON.

kubectl and the API server read YAML with sigs.k8s.io/yaml, which decodes it with go-yaml v2 into ``interface{}`` and
converts the result to JSON (``YAMLToJSON``); the server then decodes that JSON keeping integers as int64. So an
unquoted ``2e-5``, ``553640e6`` or ``0o17`` is a number there, ``y`` / ``N`` / ``on`` a boolean, while ``1:30``
(sexagesimal in YAML 1.1) and ``2024-01-01`` (a timestamp) are strings; PyYAML's YAML 1.1 rules differ in each case.

Sources (the rules below are ported from them, nothing is fetched at run time):
- go-yaml/yaml resolve.go at 7649d4548cb53a614db133b2a8ac1f31859dda8c (branch v2, tag v2.4.0; resolve.go last changed
  in 7b8349ac747c6a24702b762d2c4fd9266cf4f1d6): the resolve table (first byte -> hint), the map of null / bool / .inf /
  .nan words, ``strconv.ParseInt(plain, 0, 64)`` / ``ParseUint`` on the text without underscores, the float regexp
  ``^[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?$``, the ``0b`` / ``-0b`` fallbacks, and parseTimestamp with
  its four layouts; decode.go at the same commit: a quoted scalar is a string, a timestamp decoded into interface{}
  is its text, ``<<`` is a merge key only as a key.
- sigs.k8s.io/yaml yaml.go at aadfabb7d36952151672ec164d4220a6f0e31f63 (convertToJSONableObject): mapping keys become
  strings (int: decimal, float: ``FormatFloat(f, 'g', -1, 32)``, bool: true/false; null or uint64: an error); then
  ``encoding/json`` (NaN and ±Inf: an error) and the server's number decoding (int64 when the JSON number is an integer
  that fits, else float64: so ``1.0`` and ``1e3`` arrive as the integers 1 and 1000).
- Go's strconv (ParseInt/ParseUint with base 0, ParseFloat, underscoreOK) and time.Parse as of Go 1.19.

Pure (stdlib only); render/manifest.py builds its YAML loader and dumper on it.
"""

from __future__ import annotations

import base64
import decimal
import math
import re
import struct
from dataclasses import dataclass
from typing import Any, Optional

SOURCE = "go-yaml/yaml resolve.go @ 7649d4548cb53a614db133b2a8ac1f31859dda8c (v2.4.0)"

NULL, BOOL, INT, FLOAT, STR, TIMESTAMP, MERGE = "null", "bool", "int", "float", "str", "timestamp", "merge"

# resolve.go init(): the first byte of a plain scalar decides what it may be
_HINT = {**{c: "S" for c in "+-"}, **{c: "D" for c in "0123456789"}, **{c: "M" for c in "yYnNtTfFoO~"}, ".": "."}
_WORDS: dict[str, tuple[str, Any]] = {}
for _value, _tag, _words in (
        (True, BOOL, ("y", "Y", "yes", "Yes", "YES")), (True, BOOL, ("true", "True", "TRUE")), (True, BOOL, ("on", "On", "ON")),
        (False, BOOL, ("n", "N", "no", "No", "NO")), (False, BOOL, ("false", "False", "FALSE")), (False, BOOL, ("off", "Off", "OFF")),
        (None, NULL, ("", "~", "null", "Null", "NULL")), (math.nan, FLOAT, (".nan", ".NaN", ".NAN")),
        (math.inf, FLOAT, (".inf", ".Inf", ".INF")), (math.inf, FLOAT, ("+.inf", "+.Inf", "+.INF")),
        (-math.inf, FLOAT, ("-.inf", "-.Inf", "-.INF")), ("<<", MERGE, ("<<",))):
    for _word in _words:
        _WORDS[_word] = (_tag, _value)

_YAML_STYLE_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?\Z")
_INT64 = (-(2**63), 2**63 - 1)
_UINT64_MAX = 2**64 - 1


@dataclass(frozen=True)
class Resolved:
    """A plain scalar as go-yaml v2 resolves it: ``tag`` one of null, bool, int, float, str, timestamp; ``value`` the Go
    value in Python terms (an int for Go's int / int64 / uint64; a timestamp's value is its text, as go-yaml hands it
    to ``interface{}``)."""

    tag: str
    value: Any


def go_yaml_resolve(plain: str) -> Resolved:
    """resolve("", plain) of go-yaml v2 (resolve.go), for a plain (unquoted, untagged) scalar."""
    hint = _HINT.get(plain[0], "") if plain else "N"
    if not hint:  # resolveTable[in[0]] == 0: a string, whatever follows (so "<<" as a value is the text "<<")
        return Resolved(STR, plain)
    if plain in _WORDS:
        tag, value = _WORDS[plain]
        return Resolved(tag, value)
    if hint == ".":
        number = _go_parse_float(plain)
        return Resolved(FLOAT, number) if number is not None else Resolved(STR, plain)
    if hint in "DS":
        found = _resolve_number(plain)
        if found is not None:
            return found
    return Resolved(STR, plain)  # hint 'M' (and 'N') not in the map


def _resolve_number(plain: str) -> Optional[Resolved]:
    """A plain scalar starting with a digit or a sign (hint 'D' / 'S'): a timestamp, an int (ParseInt, then ParseUint, on
    the text without underscores), a YAML-style float, or a 0b / -0b binary int; None when it is none of them."""
    if _go_timestamp(plain):
        return Resolved(TIMESTAMP, plain)
    digits = plain.replace("_", "")
    number = _go_parse_int(digits)
    if number is None:
        number = _go_parse_uint(digits)
    if number is not None:
        return Resolved(INT, number)
    if _YAML_STYLE_FLOAT.match(digits):
        real = _go_parse_float(digits)
        if real is not None:
            return Resolved(FLOAT, real)
    number = _go_binary_int(digits)
    return Resolved(INT, number) if number is not None else None


def _go_binary_int(digits: str) -> Optional[int]:
    """resolve.go's 0b fallbacks: ``0b...`` as ParseInt then ParseUint base 2, ``-0b...`` as ParseInt base 2."""
    if digits.startswith("0b"):
        number = _go_parse_int(digits[2:], 2)
        return number if number is not None else _go_parse_uint(digits[2:], 2)
    if digits.startswith("-0b"):
        return _go_parse_int("-" + digits[3:], 2)
    return None


def go_yaml_tagged(tag: str, text: str) -> Resolved:
    """An explicitly tagged scalar (``!!int 3``): go-yaml's resolve(tag, text) with its deferred check (an int is taken
    as a float under !!float; any other mismatch: ValueError, go-yaml's "cannot decode !!str `x` as a !!int").
    ``tag`` is the short name (int, float, bool, null, str, timestamp, binary)."""
    if tag == STR or tag not in (NULL, BOOL, INT, FLOAT, TIMESTAMP, "binary"):  # resolvableTag: any other tag keeps the text
        return Resolved(STR, text)
    if tag == "binary":  # the bytes as a Go string (base64.StdEncoding skips line breaks); JSON writes invalid UTF-8 as U+FFFD
        try:
            data = text.replace("\n", "").replace("\r", "").encode("ascii", "strict")
            return Resolved(STR, base64.b64decode(data, validate=True).decode("utf-8", "replace"))
        except (ValueError, UnicodeEncodeError):
            raise ValueError("!!binary value contains invalid base64 data") from None
    if tag == TIMESTAMP and _go_timestamp(text):
        return Resolved(TIMESTAMP, text)
    found = go_yaml_resolve(text) if tag != TIMESTAMP else Resolved(STR, text)
    if found.tag == TIMESTAMP and tag != TIMESTAMP:  # resolve(tag != "") does not try timestamps
        found = Resolved(STR, text)
    if found.tag == tag:
        return found
    if tag == FLOAT and found.tag == INT and _INT64[0] <= found.value <= _INT64[1]:
        # resolve.go 91-109: the deferred check converts an int or int64 only; past int64 the value is a uint64 (151-161),
        # which fails "cannot decode !!int `9223372036854775808` as a !!float"
        return Resolved(FLOAT, float(found.value))
    raise ValueError(f"cannot decode !!{found.tag} `{text}` as a !!{tag}")


class NoJSONForm(ValueError):
    """A value or key that sigs.k8s.io/yaml cannot turn into JSON: kubectl and the API server refuse the whole file."""


def wire_value(resolved: Resolved) -> Any:
    """What the API server holds once the YAML went through JSON: a string for a str or a timestamp, a bool, None, an
    int (an integral float too when the digits encoding/json writes for it fit int64: JSON writes 1.0 as 1 and the
    server keeps a JSON integer as int64), or a float (an integer past int64 too); NoJSONForm for NaN and ±Inf."""
    value = resolved.value
    if resolved.tag == FLOAT:
        if math.isnan(value) or math.isinf(value):
            raise NoJSONForm(f"{format_float32_g(value)} is a float JSON has no number for")
        if value.is_integer():  # encoding/json writes the shortest digits, padded with zeros: 2**63 - 512 is 9223372036854775000
            whole = int(decimal.Decimal(repr(value)))
            if _INT64[0] <= whole <= _INT64[1]:
                return whole
        return value
    if resolved.tag == INT:
        return value if _INT64[0] <= value <= _INT64[1] else float(value)
    if resolved.tag == MERGE:
        return "<<"
    return value


def wire_key(resolved: Resolved) -> str:
    """A mapping key as sigs.k8s.io/yaml turns it into a JSON object's key; NoJSONForm for null and for a uint64."""
    value = resolved.value
    if resolved.tag in (STR, TIMESTAMP, MERGE):
        return str(value)
    if resolved.tag == BOOL:
        return "true" if value else "false"
    if resolved.tag == INT:
        if value > _INT64[1]:
            raise NoJSONForm(f"the key {value} is an unsigned 64-bit integer, which sigs.k8s.io/yaml does not convert to a JSON key")
        return str(value)
    if resolved.tag == FLOAT:
        return format_float32_g(value)
    raise NoJSONForm("a null key (~, null or nothing) has no JSON form")


def format_float32_g(value: float) -> str:
    """strconv.FormatFloat(value, 'g', -1, 32) with go-yaml's .inf / -.inf / .nan: the fewest digits that give back the
    same float32, in %e form when the exponent is below -4 or at least 6 (ftoa.go formatDigits: eprec 6 when shortest)."""
    if math.isnan(value):
        return ".nan"
    try:
        single = struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:  # beyond float32: the rounded value is ±Inf
        single = math.copysign(math.inf, value)
    if math.isinf(single):
        return ".inf" if single > 0 else "-.inf"
    sign = "-" if math.copysign(1.0, single) < 0 else ""
    if single == 0:
        return sign + "0"
    for digits in range(1, 10):
        text = f"{abs(single):.{digits - 1}e}"
        if struct.unpack("f", struct.pack("f", float(text)))[0] == abs(single):
            break
    mantissa, _, exponent = text.partition("e")
    figures, exp = mantissa.replace(".", "").rstrip("0") or "0", int(exponent)
    if exp < -4 or exp >= 6:
        head = figures[0] + ("." + figures[1:] if len(figures) > 1 else "")
        return f"{sign}{head}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    if exp < 0:
        return f"{sign}0.{'0' * (-exp - 1)}{figures}"
    whole, rest = figures[: exp + 1].ljust(exp + 1, "0"), figures[exp + 1:]
    return f"{sign}{whole}.{rest}" if rest else f"{sign}{whole}"


# --- Go's strconv, as go-yaml calls it --------------------------------------------------------------------------------


def _go_parse_uint(text: str, base: int = 0) -> Optional[int]:
    """strconv.ParseUint(text, base, 64) (base 0: 0b / 0o / 0x / 0 prefixes; no sign); None on any error."""
    if not text:
        return None
    if base == 0:
        base = 10
        if text[0] == "0":
            if len(text) >= 3 and text[1].lower() in "box":
                base, text = {"b": 2, "o": 8, "x": 16}[text[1].lower()], text[2:]
            else:
                base, text = 8, text[1:]
    number = 0
    for ch in text:
        if "0" <= ch <= "9":
            digit = ord(ch) - 48
        elif "a" <= ch.lower() <= "z" and ch.isascii():
            digit = ord(ch.lower()) - 87
        else:  # an underscore too: go-yaml removed them before it calls ParseInt
            return None
        if digit >= base:
            return None
        number = number * base + digit
        if number > _UINT64_MAX:
            return None
    return number


def _go_parse_int(text: str, base: int = 0) -> Optional[int]:
    """strconv.ParseInt(text, base, 64): one optional sign, then ParseUint, within int64; None on any error."""
    negative = text[:1] == "-"
    number = _go_parse_uint(text[1:] if text[:1] in "+-" and text else text, base)
    if number is None:
        return None
    number = -number if negative else number
    return number if _INT64[0] <= number <= _INT64[1] else None


def _underscore_ok(text: str) -> bool:
    """strconv.underscoreOK: an underscore only between digits (or after a base prefix)."""
    saw, i = "^", 0
    if text[:1] in ("+", "-") and text:
        text = text[1:]
    hexadecimal = False
    if len(text) >= 2 and text[0] == "0" and text[1].lower() in "box":
        i, saw, hexadecimal = 2, "0", text[1].lower() == "x"
    for ch in text[i:]:
        if "0" <= ch <= "9" or (hexadecimal and "a" <= ch.lower() <= "f"):
            saw = "0"
        elif ch == "_":
            if saw != "0":
                return False
            saw = "_"
        elif saw == "_":
            return False
        else:
            saw = "!"
    return saw != "_"


_GO_DECIMAL_FLOAT = re.compile(r"[-+]?(?=\.?[0-9])[0-9_]*(\.[0-9_]*)?([eE][-+]?[0-9][0-9_]*)?\Z")


def _go_parse_float(text: str) -> Optional[float]:
    """strconv.ParseFloat(text, 64) for the decimal forms go-yaml hands it (a leading '.', or the float regexp above);
    None on a syntax error or on overflow (ErrRange; an underflow is 0 without an error)."""
    if not _GO_DECIMAL_FLOAT.match(text) or not any(c.isdigit() for c in text.split("e")[0].split("E")[0]):
        return None
    if "_" in text and not _underscore_ok(text):
        return None
    value = float(text.replace("_", ""))
    return None if math.isinf(value) else value


# --- time.Parse with go-yaml's four layouts ---------------------------------------------------------------------------

_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _getnum(text: str, fixed: bool = False) -> tuple[Optional[int], str]:
    if not text[:1].isdigit() or not text[:1].isascii():
        return None, text
    if len(text) < 2 or not ("0" <= text[1] <= "9"):
        return (None, text) if fixed else (int(text[0]), text[1:])
    return int(text[:2]), text[2:]


def _go_timestamp(text: str) -> bool:
    """parseTimestamp (resolve.go): four digits and '-' first, then one of time.Parse's layouts
    2006-1-2T15:4:5.999999999Z07:00, the same with a lower-case t, 2006-1-2 15:4:5.999999999, 2006-1-2."""
    rest = _go_date(text)
    if rest is None:
        return False
    return not rest or _go_time_of_day(rest)  # nothing after the date: 2006-1-2


def _go_date(text: str) -> Optional[str]:
    """The text after a valid date 2006-1-2 at its start ("" when it is only a date), None when it starts with none."""
    if len(text) < 5 or not all("0" <= c <= "9" for c in text[:4]) or text[4] != "-":
        return None
    year, rest = int(text[:4]), text[5:]
    month, rest = _getnum(rest)
    if month is None or not 1 <= month <= 12 or not rest.startswith("-"):
        return None
    day, rest = _getnum(rest[1:])
    if day is None:
        return None
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    if not 1 <= day <= (29 if month == 2 and leap else _DAYS[month - 1]):
        return None
    return rest


def _go_time_of_day(rest: str) -> bool:
    """What follows the date: T or t and a clock with its zone, or spaces and a clock without one."""
    for separator, zone in (("T", True), ("t", True), (" ", False)):
        if separator == " ":
            if not rest.startswith(" "):
                continue
            clock = rest.lstrip(" ")  # a space in the layout takes a run of spaces
        elif rest.startswith(separator):
            clock = rest[1:]
        else:
            continue
        if _clock(clock, zone):
            return True
    return False


def _clock(text: str, zone: bool) -> bool:
    hour, text = _getnum(text)
    if hour is None or hour >= 24 or not text.startswith(":"):
        return False
    minute, text = _getnum(text[1:])
    if minute is None or minute >= 60 or not text.startswith(":"):
        return False
    second, text = _getnum(text[1:])
    if second is None or second >= 60:
        return False
    if len(text) >= 2 and text[0] in ".," and "0" <= text[1] <= "9":  # .999999999: at most nine digits
        digits = len(text[1:]) - len(text[1:].lstrip("0123456789"))
        text = text[1 + min(digits, 9):]
    if not zone:
        return not text
    if text == "Z":
        return True
    return len(text) == 6 and text[0] in "+-" and text[3] == ":" and text[1:3].isdigit() and text[4:6].isdigit() and text.isascii()
