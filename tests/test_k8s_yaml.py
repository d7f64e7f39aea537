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

from compatmatrix.checks.finding import Status
from compatmatrix.export.k8s import JobShape, trainjob
from compatmatrix.export.releases import by_version
from compatmatrix.export.validate import examine
from compatmatrix.matrix.load import load_matrix
from compatmatrix.render.manifest import load_documents, manifest_text

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
