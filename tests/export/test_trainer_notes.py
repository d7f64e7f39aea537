"""Kubeflow Trainer v2.4, known from its release notes only (compatmatrix/data/trainer.toml [[announced]]; the notes:
https://github.com/kubeflow/trainer/releases/tag/v2.4.0, #4394: ReplicatedJob names of (Cluster)TrainingRuntimes at
most 20 characters). No CRD of v2.4 is at hand (/work/shared/k8s/trainer stops at v2.3.0): compat writes and judges its
TrainJobs with v2.3's API, says so in one line, never claims v2.4's schema, and checks the notes' rule on the names a
TrainJob targets -- for the TrainJob it generates and for a hand-written one under --validate; --crd FILE with
--trainer-version v2.4 takes the cluster's schema and keeps the notes' rule."""

from __future__ import annotations

import copy

import pytest
import yaml

from compatmatrix.export.releases import by_version, from_notes, name_problems, notes_only, versions
from compatmatrix.render.manifest import manifest_text

from ..cli.test_cli_fuzz import run_in_process
from ..conftest import SHARED

CRD = SHARED / "k8s" / "trainer" / "v2.3.0" / "trainer.kubeflow.org_trainjobs.yaml"
SET = ("--python-version", "3.11", "torch==2.13.0", "transformers==5.24.0", "accelerate==1.15.0", "--profile", "stock")
EXPORT = ("export", "pytorchjob", "--trainer-v2", "--image", "registry.example/train:1", "--cpu", "4", "--memory", "8Gi", *SET)
NOT_VALIDATED = "the TrainJob's schema and CEL rules of v2.4 are not validated"


def generated(capsys, *extra: str) -> tuple[int, str, str]:
    return run_in_process([*EXPORT, "--trainer-version", "v2.4", *extra, "--", "train.py"], capsys)


def renamed(document: dict, name: str) -> dict:
    """The TrainJob with the replicated job its runtimePatches target named ``name`` (a hand-written one)."""
    out = copy.deepcopy(document)
    out["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["name"] = name
    return out


def test_v2_4_is_a_release_known_from_its_notes_with_its_source_and_no_crd():
    release = by_version("v2.4")
    assert notes_only("v2.4") and notes_only("2.4.0") and not notes_only("v2.3")
    assert "v2.4" in versions() and release.version == "v2.4" and release.tag == "v2.4.0"
    assert release.source == "https://github.com/kubeflow/trainer/releases/tag/v2.4.0" and release.commit == ""
    assert release.name_max == 20
    # the schema used is v2.3's, and every text that names it says so
    assert release.schema == by_version("v2.3").schema and "v2.3" in release.schema_from and "not at hand" in release.schema_from
    assert NOT_VALIDATED in release.note and "release notes" in release.cited


@pytest.mark.parametrize(("length", "refused"), [(19, False), (20, False), (21, True)])
def test_the_20_character_rule_on_the_names_a_trainjob_targets(length, refused):
    name = "n" * length
    patched = {"runtimePatches": [{"trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{"name": name}]}}}}]}
    targeted = {"podTemplateOverrides": [{"targetJobs": [{"name": "node"}, {"name": name}]}]}
    for spec, path in ((patched, "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].name"),
                       (targeted, "spec.podTemplateOverrides[0].targetJobs[1].name")):
        assert name_problems(by_version("v2.4"), spec) == ([(path, name)] if refused else [])
        assert name_problems(by_version("v2.3"), spec) == []  # the notes of v2.4 only


def test_the_generated_trainjob_says_what_is_not_validated_and_keeps_the_rule(capsys):
    code, out, err = generated(capsys)
    assert code == 0, err
    comments = [line for line in out.splitlines() if line.startswith("# for Trainer v2.4")]
    assert len(comments) == 1 and NOT_VALIDATED in comments[0] and "at most 20 characters" in comments[0]
    document = yaml.safe_load(out)
    assert document["kind"] == "TrainJob" and name_problems(by_version("v2.4"), document["spec"]) == []


def test_a_generated_trainjob_whose_target_breaks_the_rule_is_refused(monkeypatch, capsys):
    from dataclasses import replace

    from compatmatrix.export import releases

    real = releases.from_notes
    # FIXTURE release: v2.4's notes with a runtime whose replicated job is named in 21 characters
    monkeypatch.setattr(releases, "from_notes", lambda version, crd=None: replace(real(version, crd), runtime_job="n" * 21))
    code, _, err = generated(capsys)
    assert code == 2 and "longer than Trainer v2.4 allows (20 characters" in err


@pytest.mark.parametrize(("length", "code"), [(19, 0), (20, 0), (21, 1)])
def test_validate_checks_the_rule_on_a_hand_written_trainjob(length, code, tmp_path, capsys):
    _, out, _ = generated(capsys)
    job = tmp_path / "job.yaml"
    # the runtime's job renamed: the pods judged against torch-distributed fail for any other name; only the rule is looked at here
    job.write_text(manifest_text(renamed(yaml.safe_load(out), "n" * length)))
    got, out, err = run_in_process(["export", "--validate", str(job), *SET, "--trainer-version", "v2.4", "--json"], capsys)
    assert got == 1, err  # the runtime has no job of that name (the webhook's rule), whatever the length
    import json

    findings = {f["id"]: f for f in json.loads(out)["checks"]}
    assert ("export.release-names" in findings) is (code == 1)
    if code:
        assert findings["export.release-names"]["status"] == "fail" and f"has {length} characters" in findings["export.release-names"]["summary"]
    assert NOT_VALIDATED in findings["export.release"]["summary"]
    assert json.loads(out)["trainer"]["version"] == "v2.4"


def test_validate_of_the_generated_trainjob_passes_and_never_claims_v2_4s_schema(tmp_path, capsys):
    _, out, _ = generated(capsys)
    job = tmp_path / "job.yaml"
    job.write_text(out)
    code, text, err = run_in_process(["export", "--validate", str(job), *SET, "--trainer-version", "v2.4"], capsys)
    assert code == 0, err
    api = next(line for line in text.splitlines() if "export.api" in line)
    assert "Trainer v2.3" in api and "v2.4's CRD is not at hand" in api


def test_crd_goes_with_v2_4_only_and_takes_the_schema(tmp_path, capsys):
    _, out, _ = generated(capsys)
    job = tmp_path / "job.yaml"
    job.write_text(manifest_text(renamed(yaml.safe_load(out), "n" * 21)))
    code, text, err = run_in_process(["export", "--validate", str(job), *SET, "--trainer-version", "v2.4", "--crd", str(CRD)], capsys)
    assert code == 1, err
    assert "the TrainJob CRD of --crd (for v2.4)" in text and "export.release-names" in text and NOT_VALIDATED not in text
    code, out, err = generated(capsys, "--crd", str(CRD))
    assert code == 0 and "the schema and CEL rules are --crd's" in out.splitlines()[0], err
    # a release compat knows with its CRD is named by one of them only, as before; an unknown version still exits 2
    assert run_in_process(["export", "--validate", str(job), *SET, "--trainer-version", "v2.3", "--crd", str(CRD)], capsys)[0] == 2
    assert run_in_process([*EXPORT, "--trainer-version", "v2.5", "--", "train.py"], capsys)[0] == 2
    assert run_in_process(["export", "pytorchjob", "--trainer-version", "v2.4", "--image", "r/t:1", "--cpu", "4", "--memory", "8Gi",
                           *SET, "--", "train.py"], capsys)[0] == 2  # without --trainer-v2


def test_from_notes_refuses_a_version_it_has_no_notes_of():
    from compatmatrix.export.releases import ReleaseError

    with pytest.raises(ReleaseError):
        from_notes("v2.3")
