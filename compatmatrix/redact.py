"""The one rule for credentials in URLs: what compat shows, logs or reports carries them as pip shows them
(``user:****@host``, a lone token ``****@host``: pip's ``redact_auth_from_url``); what compat exports carries none
(``strip_credentials``: pip's ``remove_auth_from_url``), and says where pip and uv take them from at install time
(CREDENTIALS_NOTE). The URL with its credentials stays in IndexLocation.url / a requirement's url, for the requests
compat makes and the pip/uv it runs (their argv is never printed).

Pure, stdlib only (static commands import it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Optional

MASK = "****"
CREDENTIALS_NOTE = ("index credentials are not written here: pip and uv take them at install time from ~/.netrc, a keyring, "
                    "pip.conf / uv.toml, or PIP_INDEX_URL / PIP_EXTRA_INDEX_URL / UV_INDEX_URL")

# scheme:// then the authority (up to the first / ? # or white space): where RFC 3986 puts user:password@
_AUTHORITY = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<authority>[^/?#\s]*)")


# a URL up to the end of its word (white space, a quote or an angle bracket ends it): where a password written with
# a '/', '?' or '#' left unencoded goes on past the authority
_WORD = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<rest>[^\s'\"<>]*)")


def _unencoded_credentials(rest: str) -> Optional[tuple[str, str, str]]:
    """(user, password, what follows the credentials) when ``rest`` (a URL after its scheme) is ``user:pass@host...``
    whose password holds a '/', '?' or '#' that should have been percent-encoded: the authority then ends inside the
    password, its "port" is no number, and the host comes after a later '@' (the last one before the host's path, as pip
    splits a netloc at its last '@'). None for every URL that parses as written (``host:8080/path@ref`` included)."""
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority = rest[:end]
    if "@" in authority or ":" not in authority or authority.startswith("["):
        return None
    user, port = authority.split(":", 1)
    first = rest.find("@", end)
    if port.isdigit() or first < 0:
        return None
    host_end = min((i for i in (rest.find(c, first) for c in "/?#") if i >= 0), default=len(rest))
    at = rest.rfind("@", 0, host_end)  # the last '@' before the host's own path: a '@' later on is the path's (a VCS ref)
    return user, rest[len(user) + 1:at], rest[at + 1:]


def _unencoded(text: str, masked: bool) -> str:
    def fix(match: re.Match) -> str:
        found = _unencoded_credentials(match.group("rest"))
        if found is None:
            return match.group(0)
        user, _password, after = found
        return match.group("scheme") + (f"{user}:{MASK}@" if masked else "") + after

    return _WORD.sub(fix, text)


def _split(authority: str) -> tuple[Optional[str], Optional[str], str]:
    """(user, password, host[:port]) as pip splits a netloc: the credentials end at the LAST '@'."""
    if "@" not in authority:
        return None, None, authority
    credentials, host = authority.rsplit("@", 1)
    user, colon, password = credentials.partition(":")
    return user, (password if colon else None), host


def _redacted_authority(authority: str) -> str:
    user, password, host = _split(authority)
    if user is None:
        return authority
    if not password:  # a lone token in the user part is the secret (TOKEN@ or TOKEN:@, as GitLab/GitHub tokens are written)
        return f"{MASK}@{host}"
    return f"{user}:{MASK}@{host}"


def _stripped_authority(authority: str) -> str:
    return _split(authority)[2]


# a URL's query (after its first '?', up to white space, a quote, an angle bracket or '#'): where a signed or token URL
# carries its secret (?token=, ?access_token=, S3's X-Amz-Signature / X-Amz-Credential / X-Amz-Security-Token, Google's
# X-Goog-Signature, Azure's sig=)
_QUERY = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>?#]*\?)(?P<query>[^\s'\"<>#]*)")
# a query parameter whose value is a secret by its name (the whole name, or its last part after '-', '_' or '.')
_SECRET_PARAMETER = re.compile(r"(?:^|[-_.])(?:token|auth|authorization|key|apikey|password|passwd|pwd|secret|signature|sig|"
                               r"credential|credentials|jwt|bearer|session|hdnts|policy)$", re.IGNORECASE)
_SECRET_CAMEL = re.compile(r"[a-z0-9](?:Token|Key|Secret|Signature|Password|Credential|Session)$")  # accessToken, secretKey


def _secret_parameter(name: str) -> bool:
    import urllib.parse

    name = urllib.parse.unquote_plus(name).strip().strip("_")  # __token__ (Akamai), token_
    return bool(_SECRET_PARAMETER.search(name) or _SECRET_CAMEL.search(name))


def _query(text: str, masked: bool) -> str:
    """``text`` with the value of every secret query parameter of its URLs masked (``token=****``), or, unmasked, the
    parameter left out (a query left empty goes, its '?' too)."""
    def fix(match: re.Match) -> str:
        parts = re.split(r"[&;]", match.group("query"))
        if not any(equals and _secret_parameter(name) for name, equals, _ in (part.partition("=") for part in parts)):
            return match.group(0)  # nothing secret: the URL exactly as written
        kept = []
        for part in parts:
            name, equals, _value = part.partition("=")
            if equals and _secret_parameter(name):
                if masked:
                    kept.append(f"{name}={MASK}")
                continue
            kept.append(part)
        if not masked and kept == [""] * len(kept):
            return match.group("head")[:-1]
        separators = re.findall(r"[&;]", match.group("query"))
        if masked:  # the separators as written
            return match.group("head") + "".join(p + (separators[i] if i < len(separators) else "") for i, p in enumerate(kept))
        return match.group("head") + "&".join(kept)  # a parameter was left out: what stays is joined by '&'

    return _QUERY.sub(fix, text)


def _without_secrets(text: str, masked: bool) -> str:
    """``text`` with the credentials of its URLs masked (``masked``) or left out: userinfo, then secret query parameters."""
    if "@" in text:
        text = _unencoded(text, masked=masked)
        authority = _redacted_authority if masked else _stripped_authority
        text = _AUTHORITY.sub(lambda m: m.group("scheme") + authority(m.group("authority")), text)
    if "?" in text:
        text = _query(text, masked=masked)
    return text


def redact_text(text: str) -> str:
    """``text`` with the credentials of every URL in it masked (pip's form), and the value of a secret query parameter
    (``?token=****``). Anything else is unchanged."""
    return _without_secrets(text, masked=True)


def redact_url(url: str) -> str:
    """One URL as compat shows it: ``https://user:****@host/simple``, ``https://****@host/simple`` for a token."""
    return redact_text(url)


def strip_credentials(url: str) -> str:
    """The URL without user, password, token or secret query parameter (for exports and for what compat keeps on disk)."""
    return _without_secrets(url, masked=False)


def has_credentials(url: str) -> bool:
    return strip_credentials(url) != url


Variables = tuple[tuple[str, str], ...]  # (NAME, value) of each ${NAME} a requirements line expanded


def conceal_variables(text: str, variables: Variables) -> str:
    """``text`` with each ${VAR}'s value (whole, with its line breaks escaped, or cut short by errors.shown) replaced by
    its ${NAME}: a value pip expands from the environment may be a token, and what compat says reaches logs."""
    for name, value in sorted(variables, key=lambda item: -len(item[1])):
        for form in dict.fromkeys((value, value.replace("\n", "\\n").replace("\r", "\\r"))):
            if not form:
                continue
            text = text.replace(form, "${" + name + "}")
            for cut in range(len(form) - 1, 0, -1):  # shown() cut the value: its first characters, then "..."
                text = text.replace(form[:cut] + "...", "${" + name + "}...")
    return text


def map_strings(function: Callable[[str], str], data: Any) -> Any:
    """A document (dicts, lists, tuples and scalars; a tuple becomes a list) with ``function`` applied to every string
    in it, keys included: the one walk of the document rules below and console.json_safe."""
    if isinstance(data, str):
        return function(data)
    if isinstance(data, Mapping):
        return {map_strings(function, k): map_strings(function, v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [map_strings(function, v) for v in data]
    return data


def strip_document(data: Any) -> Any:
    """A document with strip_credentials applied to every string in it (keys included): what compat keeps on disk
    (the overlay, a matrix file --write extends) names where a fact was read, never the credentials it was read with."""
    return map_strings(lambda text: strip_credentials(redact_text(text)), data)  # a URL shown() already masked loses its user name too


def redact_document(data: Any) -> Any:
    """A JSON document with redact_text applied to every string in it (keys included)."""
    return map_strings(redact_text, data)
