"""What a Kubernetes API server does with a custom resource on create, from the CRD's structural schema alone:
strict field validation (unknown and duplicate fields: ``kubectl --validate=strict`` refuses them; any other client
loses unknown fields silently), pruning (unknown fields and nulls removed), defaulting, types, formats, enums, bounds,
patterns, list-type map/set keys, required fields, and the schema's ``x-kubernetes-validations`` CEL rules (evaluated
with common-expression-language; rules that read ``oldSelf`` are transition rules and run on updates only).

Not emulated: admission webhooks (export/pods.py applies the Trainer's and the operator's own checks), server-side
apply's field ownership, ``messageExpression``, CEL cost limits, and the ObjectMeta rules other than the name.

Pure apart from loading the CEL library on first use; compat imports this module only on ``export --validate``. The
rules and patterns of a schema compat does not ship (a --crd file's) are evaluated in a child process under a deadline
(``admit(bounded=True)``, COMPAT_CEL_S seconds, default 10): the CEL library holds the GIL while it runs, and a rule that
nests comprehensions over long lists, or a backtracking pattern, could otherwise run for hours; the API server refuses
such a CRD by its cost estimate, compat says the rules did not finish.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

# ObjectMeta fields a client may send (k8s.io/apimachinery ObjectMeta); the root "metadata" of a custom resource is
# ObjectMeta whatever the CRD's schema says
OBJECT_META = frozenset({"name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation", "creationTimestamp",
                         "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations", "ownerReferences", "finalizers",
                         "managedFields"})
_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


@dataclass(frozen=True)
class Problem:
    """One thing the server does not keep as written: ``kind`` is pruned | unknown | duplicate | null (dropped) or an
    error: type | unquoted (a number or boolean for a string) | format | enum | range | pattern | required | list | cel |
    json (no JSON form)."""

    path: str
    kind: str
    message: str


@dataclass
class Admitted:
    document: Any  # as the server stores it: pruned and defaulted
    problems: list[Problem] = field(default_factory=list)
    defaulted: list[str] = field(default_factory=list)


def admit(document: Mapping[str, Any], schema: Mapping[str, Any], duplicates: Sequence[str] = (),
          cel: Optional[Callable[[str, Any], Any]] = None, bounded: bool = False,
          no_json: Sequence[tuple[str, str]] = ()) -> Admitted:
    """The object as the server would store it on create, and every field it drops or refuses. ``document`` is typed
    as the server types YAML (render/manifest.load_documents: go-yaml v2, then JSON). ``duplicates`` are the paths of
    keys the YAML repeated (load_documents finds them; JSON decoding keeps the last, strict validation refuses them);
    ``no_json`` (path, what) of the values and keys JSON has no form for (.inf, .nan, a null key: kubectl refuses the file).
    ``cel``: rule, self -> result (default: common-expression-language). ``bounded``: the schema's rules and patterns
    are untrusted; they run in one child under a deadline (the module's docstring)."""
    walker = _Walker(cel or cel_evaluate, [] if bounded else None)
    kept = document_copy(dict(document))
    for path in duplicates:
        walker.problems.append(Problem(path, "duplicate", f"{path}: duplicate field (strict field validation refuses it; otherwise the last value wins)"))
    for path, said in no_json:
        walker.add(path, "json", f"{path}: {said}: kubectl and the API server refuse the whole file (sigs.k8s.io/yaml converts the YAML to JSON first)")
    walker.node(kept, schema, "", root=True)
    walker.settle()
    walker.problems.sort(key=lambda p: (p.kind not in ("unknown", "duplicate"), p.path))
    return Admitted(kept, walker.problems, walker.defaulted)


def document_copy(value: Any) -> Any:
    """A deep copy of a document of dicts, lists and scalars (what YAML and JSON decode to), several times faster than
    copy.deepcopy, which a manifest with lists of 100,000 entries needs; anything else goes to copy.deepcopy."""
    if isinstance(value, dict):
        return {key: document_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [document_copy(item) for item in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return copy.deepcopy(value)


class _Walker:
    def __init__(self, cel: Callable[[str, Any], Any], deferred: Optional[list] = None) -> None:
        self.cel = cel
        self.problems: list[Problem] = []
        self.defaulted: list[str] = []
        self.deferred = deferred  # (kind, path, rule or pattern, value, message) evaluated in a child by settle()

    def settle(self) -> None:
        """The deferred rules and patterns, evaluated in one child under its deadline (bounded_checks)."""
        if not self.deferred:
            return
        answers = bounded_checks([(kind, text, value) for kind, _, text, value, _ in self.deferred])
        if isinstance(answers, str):
            self.add("", "cel", f"<root>: the CRD's validation rules and patterns were not evaluated: {answers} (the API server "
                                "refuses a CRD whose rules cost more than its limit)")
            return
        for (kind, path, text, value, message), (ok, error) in zip(self.deferred, answers):
            if kind == "pattern":
                if ok is False:
                    self.add(path, "pattern", f"{path}: {_short(value)} does not match {text}")
            elif error:
                self.add(path, "cel", f"{path or '<root>'}: the rule {text!r} cannot be evaluated ({error})")
            elif ok is not True:
                self.add(path, "cel", f"{path or '<root>'}: {message or f'failed rule: {text}'} (x-kubernetes-validations: {text})")

    def add(self, path: str, kind: str, message: str) -> None:
        # one line each: a rule's message or a key from the files may hold a line break that would forge a line of the report
        message = message.replace("\r", "\\r").replace("\n", "\\n")
        self.problems.append(Problem(path or "<root>", kind, message))

    def node(self, value: Any, schema: Mapping[str, Any], path: str, root: bool = False) -> bool:
        """Judges ``value`` (and prunes and defaults inside it); False: it has the wrong type and is left out of the
        stored object (the server refuses the object anyway; what follows then sees only values of their types)."""
        if not self.typed(value, schema, path):
            return False
        if isinstance(value, dict):
            self.obj(value, schema, path, root)
        elif isinstance(value, list):
            self.array(value, schema, path)
        else:
            self.scalar(value, schema, path)
        self.rules(value, schema, path)
        return True

    # --- types -------------------------------------------------------------------------------------------------------

    def typed(self, value: Any, schema: Mapping[str, Any], path: str) -> bool:
        if schema.get("x-kubernetes-int-or-string"):
            ok = (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, str)
            if not ok:
                self.add(path, "type", f"{path}: must be an integer or a string, not {_kind(value)}")
            return ok
        if schema.get("anyOf") and not schema.get("type"):
            return True
        wanted = schema.get("type")
        if wanted is None:
            return True
        ok = {"object": lambda v: isinstance(v, dict), "array": lambda v: isinstance(v, list), "string": lambda v: isinstance(v, str),
              "boolean": lambda v: isinstance(v, bool), "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
              "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)}.get(wanted, lambda v: True)(value)
        if not ok:
            # a number or a boolean where a string belongs: most often an unquoted 2e-5, y, on or 0o17 (go-yaml's typing)
            kind = "unquoted" if wanted == "string" and isinstance(value, (bool, int, float)) else "type"
            self.add(path, kind, f"{path}: must be {'an' if wanted[0] in 'aeiou' else 'a'} {wanted}, not {_kind(value)} ({_short(value)})")
        return ok

    def obj(self, value: dict, schema: Mapping[str, Any], path: str, root: bool) -> None:
        props: Mapping[str, Any] = schema.get("properties") or {}
        self.prune(value, schema, props, path, root)
        for key, sub in props.items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
                self.defaulted.append(_join(path, key))
        for key in schema.get("required") or ():
            if key not in value:
                self.add(_join(path, key), "required", f"{_join(path, key)}: required field missing")
        for key, sub in props.items():
            if key in value:
                kept = self.metadata(value[key], _join(path, key)) if root and key == "metadata" else self.node(value[key], sub, _join(path, key))
                if not kept:
                    del value[key]
        self.bounds(len(value), schema, path, "Properties", "fields")

    def prune(self, value: dict, schema: Mapping[str, Any], props: Mapping[str, Any], path: str, root: bool) -> None:
        """The fields the schema does not declare: a null where the field is not nullable dropped, an
        additionalProperties value judged, the embedded object's metadata judged, an unknown field dropped (unless the
        schema keeps unknown fields)."""
        extra = schema.get("additionalProperties")
        keep_unknown = bool(schema.get("x-kubernetes-preserve-unknown-fields")) or extra is True
        embedded = root or schema.get("x-kubernetes-embedded-resource")
        for key in list(value):
            child = _join(path, key)
            if value[key] is None and not ((props.get(key) or (extra if isinstance(extra, dict) else {})) or {}).get("nullable"):
                del value[key]
                self.add(child, "null", f"{child}: null, dropped (the field is not nullable)")
            elif key in props:
                continue
            elif isinstance(extra, dict):
                if not self.node(value[key], extra, child):
                    del value[key]
            elif embedded and key in ("apiVersion", "kind", "metadata"):
                if key == "metadata" and not self.metadata(value[key], child):
                    del value[key]
            elif not keep_unknown:
                del value[key]
                self.add(child, "unknown", f"{child}: unknown field, dropped by the server (strict field validation refuses it)")

    def bounds(self, count: int, schema: Mapping[str, Any], path: str, what: str, said_what: str, has: bool = False) -> None:
        """maxProperties / minProperties (``what`` "Properties") or maxItems / minItems ("Items")."""
        for bound, test, said in ((f"max{what}", lambda n, b: n <= b, "at most"), (f"min{what}", lambda n, b: n >= b, "at least")):
            if bound in schema and not test(count, schema[bound]):
                self.add(path, "range", f"{path}: must have {said} {schema[bound]} {said_what}" + (f", has {count}" if has else ""))

    def metadata(self, value: Any, path: str) -> bool:
        if not isinstance(value, dict):
            self.add(path, "type", f"{path}: must be an object, not {_kind(value)}")
            return False
        for key in list(value):
            if key not in OBJECT_META:
                del value[key]
                self.add(_join(path, key), "unknown", f"{_join(path, key)}: unknown field, dropped by the server (strict field validation refuses it)")
        for key in ("labels", "annotations"):
            if key in value and not (isinstance(value[key], dict) and all(isinstance(v, str) for v in value[key].values())):
                self.add(_join(path, key), "type", f"{_join(path, key)}: must map strings to strings")
                del value[key]
        if "name" in value and not isinstance(value["name"], str):
            self.add(_join(path, "name"), "type", f"{_join(path, 'name')}: must be a string, not {_kind(value['name'])}")
            del value["name"]
        return True

    def array(self, value: list, schema: Mapping[str, Any], path: str) -> None:
        items = schema.get("items")
        if isinstance(items, Mapping):
            kept = []  # one pass, the list rebuilt once (a del per refused item made a long list quadratic)
            for i in range(len(value) - 1, -1, -1):
                if value[i] is None and not items.get("nullable"):
                    self.add(f"{path}[{i}]", "type", f"{path}[{i}]: must not be null")
                elif self.node(value[i], items, f"{path}[{i}]"):
                    kept.append(value[i])
            value[:] = kept[::-1]
        self.bounds(len(value), schema, path, "Items", "items", has=True)
        list_type = schema.get("x-kubernetes-list-type")
        if list_type == "map":
            self.unique_map_keys(value, schema.get("x-kubernetes-list-map-keys") or [], path)
        elif list_type == "set":
            self.unique_values(value, path)

    def unique_map_keys(self, value: list, keys: Sequence[str], path: str) -> None:
        """x-kubernetes-list-type map: no two entries with the same values of the list's keys."""
        seen: dict[tuple, int] = {}
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                continue
            key = tuple(_hashable(item.get(k)) for k in keys)
            if key in seen:
                shown = ", ".join(f"{k}={item.get(k)!r}" for k in keys)
                self.add(f"{path}[{i}]", "list", f"{path}[{i}]: duplicate entry ({shown}) of a list keyed by {', '.join(keys)}")
            seen[key] = i

    def unique_values(self, value: list, path: str) -> None:
        """x-kubernetes-list-type set: no value twice."""
        seen: set = set()
        for i, item in enumerate(value):
            key = _hashable(item)
            if key in seen:
                self.add(f"{path}[{i}]", "list", f"{path}[{i}]: duplicate value {_short(item)} in a set")
            seen.add(key)

    def scalar(self, value: Any, schema: Mapping[str, Any], path: str) -> None:
        if "enum" in schema and value not in schema["enum"]:
            self.add(path, "enum", f"{path}: {_short(value)} is not one of {', '.join(repr(e) for e in schema['enum'])}")
        if isinstance(value, int) and not isinstance(value, bool):
            self.integer(value, schema, path)
        if isinstance(value, str):
            self.string(value, schema, path)

    def integer(self, value: int, schema: Mapping[str, Any], path: str) -> None:
        """format (int32, int64), minimum and maximum (exclusive or not)."""
        low, high = _INT_RANGES.get(str(schema.get("format")), (None, None))
        if low is not None and not low <= value <= high:
            self.add(path, "format", f"{path}: {value} does not fit {schema.get('format')}")
        if "minimum" in schema and (value < schema["minimum"] or (schema.get("exclusiveMinimum") and value == schema["minimum"])):
            self.add(path, "range", f"{path}: {value} is less than the minimum {schema['minimum']}")
        if "maximum" in schema and (value > schema["maximum"] or (schema.get("exclusiveMaximum") and value == schema["maximum"])):
            self.add(path, "range", f"{path}: {value} is more than the maximum {schema['maximum']}")

    def string(self, value: str, schema: Mapping[str, Any], path: str) -> None:
        """maxLength, minLength, pattern (deferred to the batch when one is open), format date-time."""
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            self.add(path, "range", f"{path}: longer than {schema['maxLength']} characters")
        if "minLength" in schema and len(value) < schema["minLength"]:
            self.add(path, "range", f"{path}: shorter than {schema['minLength']} characters")
        pattern = schema.get("pattern")
        if pattern and self.deferred is not None:
            self.deferred.append(("pattern", path, pattern, value, None))
        elif pattern and _pattern(pattern) is not None and not _pattern(pattern).search(value):
            self.add(path, "pattern", f"{path}: {_short(value)} does not match {pattern}")
        if schema.get("format") == "date-time" and not re.match(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$", value):
            self.add(path, "format", f"{path}: {_short(value)} is not an RFC 3339 date-time")

    def rules(self, value: Any, schema: Mapping[str, Any], path: str) -> None:
        for rule in schema.get("x-kubernetes-validations") or ():
            text = str(rule.get("rule") or "")
            if not text or "oldSelf" in text:  # a transition rule: on updates only
                continue
            if self.deferred is not None:
                self.deferred.append(("cel", path, text, cel_view(text, value), rule.get("message")))
                continue
            try:
                ok = self.cel(text, cel_view(text, value))
            except CelUnavailable as exc:  # not the object's fault: the rule is not evaluated, and the finding says so
                self.add(path, "cel-unavailable", f"{path or '<root>'}: the rule {text!r} was not evaluated ({exc})")
                continue
            except Exception as exc:  # noqa: BLE001 - the library's evaluation errors (no such key, no overload): the server refuses too
                self.add(path, "cel", f"{path or '<root>'}: the rule {text!r} cannot be evaluated ({str(exc).splitlines()[0][:120]})")
                continue
            if ok is not True:
                message = rule.get("message") or f"failed rule: {text}"
                self.add(path, "cel", f"{path or '<root>'}: {message} (x-kubernetes-validations: {text})")


_SELF_FIELD = re.compile(r"\bself\s*\.\s*([A-Za-z_][A-Za-z0-9_]*)\s*(\()?")
_SELF_WHOLE = re.compile(r"\bself\b(?!\s*\.\s*[A-Za-z_])")


def cel_view(rule: str, value: Any) -> Any:
    """What a rule is handed as ``self``: for an object, only the fields the rule names as ``self.FIELD`` (the library
    converts all it is given, and a rule on the root would otherwise convert every entry of every list: 1.7 s for a
    manifest with 100,000 env entries); the whole value when the rule uses ``self`` in any other way (``self ==``,
    ``self[...]``, a macro or method such as ``self.all(...)``, an escaped name ``self.__x__``)."""
    if not isinstance(value, dict) or _SELF_WHOLE.search(rule):
        return value
    names = set()
    for match in _SELF_FIELD.finditer(rule):
        if match.group(2) or match.group(1).startswith("__"):
            return value
        names.add(match.group(1))
    return {key: item for key, item in value.items() if key in names}


_CEL: dict[str, Any] = {}
CHECKS_S = 10.0  # the deadline of a --crd file's rules and patterns, all of them (COMPAT_CEL_S changes it)


def bounded_checks(checks: Sequence[tuple[str, str, Any]], seconds: Optional[float] = None) -> Any:
    """[(ok, error)] of each (kind, rule or pattern, value): ``cel`` -> (the rule's result is True, the evaluation error),
    ``pattern`` -> (the value matches, None; None when Python cannot compile the RE2 pattern), all run in one child
    (``python -c ... _checks_main(FILE)``) that is killed at ``seconds``; a str: why there are no answers."""
    import json
    import os
    import sys
    import tempfile

    from ..environment.child import env_timeout, run_child

    seconds = seconds or env_timeout("COMPAT_CEL_S", CHECKS_S)
    package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    # this compat's own package, never one in the working directory (python -m and -c put it first on sys.path)
    code = (f"import sys; sys.path[:] = [{package_parent!r}] + [p for p in sys.path if p not in ('', '.')]; "
            "from compatmatrix.export.apiserver import _checks_main; _checks_main(sys.argv[1])")
    try:
        payload = json.dumps(_json_safe(checks))
    except (TypeError, ValueError, RecursionError) as exc:
        return f"the values could not be handed to the child that evaluates them ({exc.__class__.__name__})"
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="compat-cel-", encoding="utf-8") as handle:
        handle.write(payload)
        handle.flush()
        try:
            result = run_child([sys.executable, "-c", code, handle.name], seconds)
        except OSError as exc:
            return f"the child that evaluates them could not be started ({exc.strerror or exc})"
    if result.timed_out:
        return f"they did not finish within {seconds:g} s"
    try:
        answers = json.loads(result.stdout.decode("utf-8", "replace"))
        if result.returncode == 0 and isinstance(answers, list) and len(answers) == len(checks):
            return [(ok, error) for ok, error in answers]
    except (ValueError, TypeError):
        pass
    said = result.stderr.decode("utf-8", "replace").strip().splitlines()
    return f"the child that evaluates them failed ({said[-1][:120] if said else f'exit code {result.returncode}'})"


def _json_safe(value: Any) -> Any:
    """``value`` as JSON takes it: a YAML key or value JSON has no type for (a date, say) as its text."""
    if isinstance(value, dict):
        return {k if isinstance(k, str) else str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _evaluate_checks(path: str) -> list:
    import json

    with open(path, encoding="utf-8") as handle:
        checks = json.load(handle)
    answers: list = []
    for kind, text, value in checks:
        if kind == "pattern":
            compiled = _pattern(text) if isinstance(value, str) else None
            answers.append([None if compiled is None else bool(compiled.search(value)), None])
            continue
        try:
            answers.append([cel_evaluate(text, value) is True, None])
        except Exception as exc:  # noqa: BLE001 - the library's evaluation errors, as admit's in-process path takes them
            answers.append([False, str(exc).splitlines()[0][:120] if str(exc) else exc.__class__.__name__])
    return answers


class CelUnavailable(Exception):
    """No CEL library in this environment (common-expression-language has wheels for Python >= 3.11 only)."""


def cel_evaluate(rule: str, self_value: Any) -> Any:
    """``rule`` evaluated with ``self``, by common-expression-language (its compiled core only: the package's own
    __init__ also loads its command line, typer and rich, ~0.3 s)."""
    return cel_library().evaluate(rule, {"self": self_value})


def cel_library() -> Any:
    """common-expression-language's compiled core (evaluate, compile), loaded once."""
    module = _CEL.get("module")
    if module is None:
        module = _CEL["module"] = _load_cel()
    return module


def _load_cel() -> Any:
    import importlib.machinery
    import importlib.util
    import os

    spec = importlib.util.find_spec("cel")
    if spec is not None and spec.origin:
        folder = os.path.dirname(spec.origin)
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(folder, "cel" + suffix)
            if os.path.isfile(path):
                core = importlib.util.spec_from_file_location("cel.cel", path)
                if core is not None and core.loader is not None:
                    module = importlib.util.module_from_spec(core)
                    core.loader.exec_module(module)
                    return module
    try:
        import cel  # the package as its authors load it
    except ImportError:
        raise CelUnavailable("common-expression-language is not installed here; it needs Python >= 3.11") from None
    return cel


_PATTERNS: dict[str, Optional[re.Pattern]] = {}


def _pattern(text: str) -> Optional[re.Pattern]:
    if text not in _PATTERNS:
        try:
            _PATTERNS[text] = re.compile(text)
        except re.error:  # an RE2 construct Python lacks: not judged
            _PATTERNS[text] = None
    return _PATTERNS[text]


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else str(key)


def _kind(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list", dict: "an object",
            type(None): "null"}.get(type(value), type(value).__name__)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _hashable(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    return value


def _checks_main(path: str) -> None:
    """bounded_checks' child: the answers as JSON on stdout."""
    import json
    import sys

    sys.stdout.write(json.dumps(_evaluate_checks(path)))
