"""YAML as the cluster reads it (issue 31): ``compat export --validate`` and every manifest compat writes type plain
scalars by go-yaml v2's resolver (the one sigs.k8s.io/yaml uses for kubectl and the API server), then JSON, so a value
is a string or a number for compat exactly when it is for the server; and --validate's list merges are linear.

The table is taken from go-yaml's own resolver source, go-yaml/yaml resolve.go at 7649d4548cb53a614db133b2a8ac1f31859dda8c
(branch v2, tag v2.4.0; the file last changed in 7b8349ac747c6a24702b762d2c4fd9266cf4f1d6), and the JSON step from
sigs.k8s.io/yaml yaml.go (convertToJSONableObject) at aadfabb7d36952151672ec164d4220a6f0e31f63.
"""

from __future__ import annotations

import math
import time

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from packaging.version import Version

from compatmatrix.export.k8s import JobShape, trainjob
from compatmatrix.export.releases import by_version
from compatmatrix.export.validate import examine
from compatmatrix.findings import Status
from compatmatrix.matrix.load import load_matrix
from compatmatrix.render.manifest import load_documents, manifest_text

from ..yaml_scalars import go_yaml_scalars

TRAINJOB = """apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {{name: bert}}
spec:
  runtimeRef: {{name: torch-distributed}}
  trainer:
    image: registry.example/train:1
    command: [torchrun, --nproc_per_node, "2"]
    args: [train.py, --output_dir, out, {args}]
    numNodes: 2
    numProcPerNode: 2
    env:
    - {{name: OMP_NUM_THREADS, value: "4"}}
    - {{name: MODE, value: {env}}}
    resourcesPerNode:
      requests: {{cpu: "8", memory: 16Gi}}
      limits: {{cpu: "8", memory: 16Gi}}
"""


def _examined(args: str, env: str = "x", text: str = TRAINJOB):
    repeated: list = []
    no_json: list = []
    (document,) = load_documents(text.format(args=args, env=env), repeated, no_json)
    return examine(document, load_matrix(), Version("4.46.0"), Version("1.0.0"), Version("2.5.0"), by_version("v2.3"), repeated[0],
                   no_json=no_json[0]).findings


def _schema_failures(findings) -> list[str]:
    return [f.summary for f in findings if f.id in ("export.api-schema", "export.api-json") and f.status is Status.FAIL]


# --- the defects: --validate's typing was YAML 1.1 as PyYAML reads it -------------------------------------------------


@pytest.mark.parametrize("arg", ["2e-5", "553640e6", "0o17", "0x_1F", "1_000", "1.", "-.5", "+12"])
def test_an_argument_the_api_server_reads_as_a_number_fails(arg):
    """`--learning_rate 2e-5` unquoted: a float to go-yaml, and args must be strings: the cluster refuses the TrainJob."""
    findings = _examined(f"--learning_rate, {arg}")
    failures = _schema_failures(findings)
    assert any("spec.trainer.args[4]" in s and "must be a string" in s for s in failures), [(f.id, f.status, f.summary) for f in findings]
    assert not any(f.id == "export.api" and f.status is Status.PASS for f in findings)


@pytest.mark.parametrize("arg", ["1:30", "2024-01-01", "2001-12-14t21:59:43.10-05:00", "190:20:30", "1_000:30", "yES", "0b", "1e400", "~a", "<<"])
def test_an_argument_the_api_server_reads_as_a_string_passes(arg):
    """`1:30` (sexagesimal in YAML 1.1) and `2024-01-01` (a timestamp) are strings to the API server: compat said FAIL."""
    findings = _examined(f"--max_time, {arg}")
    assert not _schema_failures(findings), _schema_failures(findings)
    assert any(f.id == "export.api" and f.status is Status.PASS for f in findings), [(f.id, f.summary) for f in findings]


@pytest.mark.parametrize("value, said", [("y", "a boolean"), ("N", "a boolean"), ("off", "a boolean"), ("0o17", "an integer"), ("1e3", "an integer")])
def test_an_env_value_go_yaml_types_is_refused(value, said):
    """An EnvVar value must be a string: `y` is a boolean to go-yaml (PyYAML: a string), `1e3` is the integer 1000 once
    it went through JSON."""
    failures = _schema_failures(_examined("--x, x", env=value))
    assert any("spec.trainer.env[1].value" in s and said in s for s in failures), failures


@pytest.mark.parametrize("where, said", [("{name: MODE, value: .inf}", "env[1].value: .inf is a float JSON has no number"),
                                         ("{name: MODE, value: x, ~: 1}", "env[1].~: a null key"),
                                         ("{name: MODE, value: x, 18446744073709551615: 1}", "unsigned 64-bit")])
def test_a_value_or_key_json_has_no_form_for_is_a_failure_not_a_crash(where, said):
    """sigs.k8s.io/yaml cannot write .inf, .nan, a null key or a uint64 key as JSON: kubectl refuses the whole file."""
    findings = _examined("--x, x", text=TRAINJOB.replace("{{name: MODE, value: {env}}}", where.replace("{", "{{").replace("}", "}}")))
    assert any(f.id == "export.api-json" and f.status is Status.FAIL and said in f.summary for f in findings), [(f.id, f.summary) for f in findings]


def test_keys_are_the_json_keys_the_server_gets_and_repeat_as_such():
    """`on:` and `true:` are one key once go-yaml read them (a boolean) and sigs.k8s.io/yaml wrote it: a duplicate."""
    repeated: list = []
    (document,) = load_documents("a: {on: 1, true: 2, y: 3, 0x10: 4, 1.5: 5, 2024-01-01: 6, 1e3: 7}\n", repeated)
    assert document == {"a": {"true": 3, "16": 4, "1.5": 5, "2024-01-01": 6, "1000": 7}}
    assert repeated == [["a.true"]]


def test_compat_writes_every_string_quoted_where_go_yaml_would_type_it():
    """compat export pytorchjob -- train.py --learning_rate 2e-5 wrote `- 2e-5` plain: a float to the cluster."""
    risky = ["2e-5", "553640e6", "0o17", "y", "N", "off", "1_000", "0x_1F", "1.", ".5", "-.5", "+12", "08", ".inf", "~", "null", "", "<<"]
    document = trainjob(JobShape(name="bert", image="registry.example/train:1", command=("train.py", *risky), nnodes=2, nproc_per_node=2,
                                 cpu="8", memory="16Gi"), by_version("v2.3")).document
    text = manifest_text(document)
    for word in risky:
        assert f"\n    - '{word}'\n" in text or f'\n    - "{word}"\n' in text, (word, text)
    (back,) = load_documents(text)
    assert back["spec"]["trainer"]["args"][-len(risky):] == risky


# --- go_yaml_resolve against go-yaml's own source ------------------------------------------------------------------------
# (plain scalar, go-yaml's tag, the Go value) -- from resolve.go @ 7649d454 (its resolveMapList, the resolve table's
# hints, ParseInt(plain, 0, 64), the float regexp, the 0b / -0b fallbacks, parseTimestamp's layouts) and from the
# interface{} cases of decode_test.go at the same commit (marked "decode_test"); each one was also run through go-yaml
# v2 itself when the table was written.
TABLE = [
    # resolveMapList
    *[(w, "bool", True) for w in ("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON")],
    *[(w, "bool", False) for w in ("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF")],
    *[(w, "null", None) for w in ("", "~", "null", "Null", "NULL")],
    *[(w, "float", math.inf) for w in (".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF")],
    *[(w, "float", -math.inf) for w in ("-.inf", "-.Inf", "-.INF")],
    ("<<", "str", "<<"),  # '<' has no hint: a string to resolve(); a merge only as a key (decode.go isMerge)
    # hint 'M' but not in the map; no hint at all
    ("yES", "str", "yES"), ("oN", "str", "oN"), ("nULL", "str", "nULL"), ("Nothing", "str", "Nothing"), ("hi", "str", "hi"), ("inf", "str", "inf"),
    ("_1", "str", "_1"), ("=", "str", "="),
    # decode_test (into interface{})
    ("10", "int", 10), ("0b10", "int", 2), ("0xA", "int", 10), ("4294967296", "int", 4294967296), ("0.1", "float", 0.1), (".1", "float", 0.1),
    ("-10", "int", -10), ("-.1", "float", -0.1), ("6.8523e+5", "float", 6.8523e5), ("685_230.15", "float", 685230.15), ("685230", "int", 685230),
    ("+685_230", "int", 685230), ("02472256", "int", 685230), ("0x_0A_74_AE", "int", 685230), ("0b1010_0111_0100_1010_1110", "int", 685230),
    ("-0b101010", "int", -42), ("-0b1000000000000000000000000000000000000000000000000000000000000000", "int", -(2**63)),
    ("190:20:30.15", "str", "190:20:30.15"), ("190:20:30", "str", "190:20:30"),  # "Unsupported" sexagesimals: strings
    ("2015-01-01", "timestamp", "2015-01-01"), ("2015-02-24T18:19:39.12Z", "timestamp", "2015-02-24T18:19:39.12Z"),
    ("2015-2-3T3:4:5Z", "timestamp", "2015-2-3T3:4:5Z"), ("2015-02-24t18:19:39Z", "timestamp", "2015-02-24t18:19:39Z"),
    ("2015-02-24 18:19:39", "timestamp", "2015-02-24 18:19:39"), ("2015-02-24T18:19:39.123456789-03:00", "timestamp", "2015-02-24T18:19:39.123456789-03:00"),
    ("2001-12-14 21:59:43.10 -5", "str", "2001-12-14 21:59:43.10 -5"),  # "time.Parse cannot handle" (resolve.go)
    ("9223372036854775808", "int", 2**63), ("18446744073709551615", "int", 2**64 - 1),  # ParseUint: a uint64
    # the shapes, and what ParseInt base 0 / the float regexp / ParseFloat make of the rest
    ("2e-5", "float", 2e-5), ("553640e6", "float", 553640e6), ("0o17", "int", 15), ("0O17", "int", 15), ("1:30", "str", "1:30"),
    ("2024-01-01", "timestamp", "2024-01-01"), ("2024-02-30", "str", "2024-02-30"), ("2024-13-01", "str", "2024-13-01"),
    ("08", "float", 8.0), ("017", "int", 15), ("0", "int", 0), ("-0", "int", 0), ("1.", "float", 1.0), ("+.5", "float", 0.5), ("1e5", "float", 1e5),
    ("1_", "int", 1), ("-_1", "int", -1), ("1__0", "int", 10), (".5_5", "float", 0.55), ("._5", "str", "._5"), (".5_", "str", ".5_"),
    ("0b", "str", "0b"), ("0x", "str", "0x"), ("0b+101", "int", 5), ("0b2", "str", "0b2"), ("1e400", "str", "1e400"), (".5e400", "str", ".5e400"),
    ("1e-400", "float", 0.0), ("18446744073709551616", "float", 18446744073709551616.0), ("-9223372036854775809", "float", -9223372036854775809.0),
    (".", "str", "."), ("+", "str", "+"), ("1.5.5", "str", "1.5.5"), ("1e", "str", "1e"), ("0x1p-2", "str", "0x1p-2"), ("1_000:30", "str", "1_000:30"),
]


@pytest.mark.parametrize("plain, tag, value", TABLE, ids=[repr(t[0]) for t in TABLE])
def test_go_yaml_resolve_is_resolve_go(plain, tag, value):
    from compatmatrix.render.goyaml import go_yaml_resolve

    found = go_yaml_resolve(plain)
    assert (found.tag, type(found.value)) == (tag, type(value)) and found.value == value, found


@pytest.mark.parametrize("plain, wire", [("1.0", 1), ("1e3", 1000), ("08", 8), ("2e-5", 2e-5), ("1e21", 1e21), ("9223372036854775807", 2**63 - 1),
                                         ("9223372036854775808", 9223372036854775808.0), ("2024-01-01", "2024-01-01"), ("y", True), ("~", None),
                                         ("9007199254740993", 9007199254740993), ("9007199254740993.0", 9007199254740992),
                                         ("-9223372036854775809", -9223372036854775809.0)])
def test_the_wire_value_is_what_json_gives_the_server(plain, wire):
    """encoding/json writes 1.0 as 1 and the server keeps a JSON integer as int64 (so `replicas: 1.0` is the integer 1)."""
    from compatmatrix.render.goyaml import go_yaml_resolve, wire_value

    got = wire_value(go_yaml_resolve(plain))
    assert type(got) is type(wire) and got == wire


@pytest.mark.parametrize("tag, text, value", [("str", "2e-5", "2e-5"), ("int", "0o17", 15), ("float", "1", 1.0), ("timestamp", "2015-01-01", "2015-01-01"),
                                              ("str", "2015-01-01", "2015-01-01"), ("binary", "aGk=", "hi"), ("set", "x", "x")])
def test_an_explicit_tag_is_taken_as_go_yaml_takes_it(tag, text, value):
    from compatmatrix.render.goyaml import go_yaml_tagged

    assert go_yaml_tagged(tag, text).value == value
    (document,) = load_documents(f"a: !!{tag} {text}\n")
    assert document == {"a": value}


@pytest.mark.parametrize("tag, text", [("int", "x"), ("bool", "1"), ("float", "y"), ("timestamp", "2015-13-01"), ("null", "0")])
def test_an_explicit_tag_go_yaml_cannot_decode_is_not_yaml(tag, text):
    """go-yaml: "cannot decode !!str `x` as a !!int"; kubectl refuses the file."""
    import yaml

    with pytest.raises(yaml.YAMLError, match="cannot decode"):
        load_documents(f"a: !!{tag} {text}\n")


# --- the loader and the dumper agree with go_yaml_resolve over every scalar shape ----------------------------------------


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


@settings(max_examples=400, deadline=None)
@given(plain=go_yaml_scalars())
@example(plain="2e-5")
@example(plain="1:30")
@example(plain="2024-01-01")
def test_the_validate_loader_types_every_plain_scalar_as_go_yaml(plain):
    """--validate's typing equals go-yaml's: the value the loader gives is go_yaml_resolve's, through JSON; a key is
    the JSON key sigs.k8s.io/yaml makes of it."""
    from compatmatrix.render.goyaml import NoJSONForm, go_yaml_resolve, wire_key, wire_value

    found = go_yaml_resolve(plain)
    (document,) = load_documents(f"k: {plain}\n")
    try:
        expected = wire_value(found)
    except NoJSONForm:
        expected = found.value
    assert _same(document["k"], expected), (plain, found, document)
    if plain != "<<":
        no_json: list = []
        (document,) = load_documents(f"{plain}: v\n", None, no_json)
        try:
            assert list(document) == [wire_key(found)] and no_json == [[]]
        except NoJSONForm:
            assert no_json[0] and no_json[0][0][0] == plain


@settings(max_examples=400, deadline=None)
@given(text=st.one_of(go_yaml_scalars(), st.text(max_size=12).filter(lambda t: not any("\ud800" <= c <= "\udfff" for c in t))))
@example(text="2e-5")
@example(text="y")
@example(text="=")
@example(text="1:30")
def test_every_string_compat_writes_reads_back_as_that_string_under_go_yaml(text):
    """A value written plain is one go-yaml reads as a string (else compat quotes it), as a value and as a key; YAML
    1.1 readers (PyYAML) read the file back the same."""
    import yaml

    from compatmatrix.render.goyaml import go_yaml_resolve

    written = manifest_text({"k": text, text: [text]})
    for event in yaml.parse(written):
        if isinstance(event, yaml.ScalarEvent) and event.style is None and event.tag is None:
            assert go_yaml_resolve(event.value).tag == "str", (text, written)
    assert load_documents(written) == [{"k": text, text: [text]}] == [yaml.safe_load(written)]


def test_written_numbers_booleans_and_nulls_read_back_as_themselves():
    document = {"i": 3, "f": 2e-05, "big": 2**63 - 1, "t": True, "n": None, "inf": 1.5e300, "neg": -0.5}
    assert load_documents(manifest_text(document)) == [document]


# --- bounds: --validate's list merges are linear ----------------------------------------------------------------------


def _long_trainjob(entries: int) -> dict:
    document = trainjob(JobShape(name="bert", image="registry.example/train:1", command=("train.py",), nnodes=2, nproc_per_node=2, cpu="8",
                                 memory="16Gi"), by_version("v2.3")).document
    document["spec"]["trainer"]["env"] = [{"name": f"V{i}", "value": str(i)} for i in range(entries)]
    return document


def _cpu_seconds(entries: int) -> tuple[float, list]:
    document, matrix = _long_trainjob(entries), load_matrix()
    started = time.process_time()  # CPU time: the machine's other load does not count
    done = examine(document, matrix, Version("4.46.0"), Version("1.0.0"), Version("2.5.0"), by_version("v2.3"))
    return time.process_time() - started, done.findings


def test_validate_merges_a_list_of_100000_entries_in_linear_time():
    """The env merge of the TrainJob's pod scanned the merged list for each entry (8,000 entries: 33 s; 100,000: no
    answer in 300 s); an index by key makes it linear. Measured 1.0 s of CPU for 100,000 entries (and 0.14 s for
    10,000), CEL rules on the root included: they are handed only the fields they name."""
    small, _ = _cpu_seconds(10_000)
    large, findings = _cpu_seconds(100_000)
    assert large < 5.0, large
    assert large < 25 * max(small, 0.02), (small, large)  # linear: ~10x for 10x the entries; quadratic: ~100x
    assert any(f.id == "export.api-schema" and "must have at most 128 items, has 100000" in f.summary for f in findings)


def test_the_merge_keeps_the_first_entry_of_a_key_and_merges_later_ones_into_it():
    from compatmatrix.export.pods import merge

    base = {"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}, {"name": "A", "value": "3"}, "odd", {"value": "no name"}]}
    patch = {"env": [{"name": "A", "value": "9"}, {"name": "C", "value": "4"}, {"name": "C", "extra": 1}, {"name": ["x"], "value": "5"},
                     {"value": "none"}]}
    assert merge(base, patch)["env"] == [{"name": "A", "value": "9"}, {"name": "B", "value": "2"}, {"name": "A", "value": "3"}, "odd",
                                         {"value": "none"}, {"name": "C", "value": "4", "extra": 1}, {"name": ["x"], "value": "5"}]


def test_a_cel_rule_is_handed_only_the_fields_it_names():
    from compatmatrix.export.apiserver import cel_view

    document = {"metadata": {"name": "a"}, "spec": {"env": list(range(5))}}
    assert cel_view("self.metadata.name.matches('^[a-z]$')", document) == {"metadata": {"name": "a"}}
    assert cel_view("has(self.spec) && self.metadata.name != ''", document) == document
    for whole in ("self == oldSelf", "self.all(k, k != '')", "self['spec'] == 1", "self.size() > 1", "self.__namespace__ == 1"):
        assert cel_view(whole, document) is document, whole


@pytest.mark.parametrize("text, merged", [
    # go-yaml v2 itself gave these (decode.go mapping() / merge() at 7649d454): a key before "<<" loses to the merge
    ("base: &b {a: 2, c: 3}\nx: {a: 1, <<: *b}\n", {"a": 2, "c": 3}),
    ("base: &b {a: 2}\nx: {<<: *b, a: 1}\n", {"a": 1}),
    ("b1: &b1 {a: 1}\nb2: &b2 {a: 2}\nx: {<<: [*b1, *b2]}\n", {"a": 1}),
])
def test_a_merge_key_merges_as_go_yaml_merges(text, merged):
    assert load_documents(text)[0]["x"] == merged


# --- tags go-yaml v2 does not resolve, and the !!float range (review of issue 31's loader) ------------------------------
# Each row cites go-yaml/yaml at 7649d4548cb53a614db133b2a8ac1f31859dda8c (v2.4.0):
# - parserc.go 470-471: a scalar tagged with the non-specific `!` is plain_implicit (whatever its style), its tag "!";
#   decode.go 414-418: a tag that is set goes to resolve(n.tag, ...); resolve.go 76-89: resolvableTag("!") is false,
#   so resolve returns the text as it is: `! 3e-5` is the string "3e-5" (PyYAML resolves `!` plain scalars implicitly);
# - resolve.go 76-89 again for !!merge, !!map and !!seq on a scalar: not resolvable, the text (decode.go scalar());
# - decode.go 813-815 isMerge: a key merges only when its value is "<<" and it is implicit or tagged !!merge (so
#   `! <<` and `!!merge <<` as keys merge, `!!merge X` is the key "X");
# - resolve.go 151-161 then 91-109: under !!float a number past int64 resolves to a uint64, which the deferred check
#   does not convert (only int64 and int): "cannot decode !!int `9223372036854775808` as a !!float".
@pytest.mark.parametrize("text, value", [
    ("a: ! 3e-5\n", "3e-5"),
    ("a: ! 3\n", "3"),
    ("a: ! true\n", "true"),
    ("a: ! ~\n", "~"),
    ("a: ! '3'\n", "3"),
    ("a: ! <<\n", "<<"),
    ("a: !!merge X\n", "X"),
    ("a: !!merge <<\n", "<<"),
    ("a: !!map 3\n", "3"),
    ("a: !!seq 3\n", "3"),
    ("a: !!float 9223372036854775807\n", 9223372036854775807),  # an int64: taken as float64 (2**63), written by JSON as ...808e18: kept as 2**63 as float
])
def test_a_tag_go_yaml_does_not_resolve_keeps_the_text(text, value):
    (document,) = load_documents(text)
    if isinstance(value, int) and not isinstance(value, bool):
        assert document["a"] == float(value)
    else:
        assert document == {"a": value}


@pytest.mark.parametrize("text, key_value", [
    ("base: &b {c: 3}\nx: {! <<: *b}\n", {"c": 3}),  # implicit: a merge
    ("base: &b {c: 3}\nx: {!!merge <<: *b}\n", {"c": 3}),
    ("base: &b {c: 3}\nx: {!!merge X: *b}\n", {"X": {"c": 3}}),  # not "<<": the key X
])
def test_merge_keys_as_decode_go_is_merge(text, key_value):
    assert load_documents(text)[0]["x"] == key_value


@pytest.mark.parametrize("text", ["a: !!float 9223372036854775808\n", "a: !!float 18446744073709551615\n", "a: !!float 0x8000000000000000\n"])
def test_a_float_tag_on_a_uint64_is_not_yaml_to_go_yaml(text):
    import yaml

    with pytest.raises(yaml.YAMLError, match="cannot decode !!int"):
        load_documents(text)


def test_an_args_entry_tagged_with_the_non_specific_tag_is_a_string_for_the_schema():
    """`! 3e-5` in args: go-yaml hands over the string "3e-5", so the schema is met (was a false FAIL "must be a string")."""
    assert _schema_failures(_examined("--learning_rate, ! 3e-5")) == []
