#!/usr/bin/env python3
"""Writes compatmatrix/data/k8s/*.json from the CRDs and runtimes in ../shared/k8s (kubeflow/training-operator and
kubeflow/trainer, Apache-2.0): each CRD's openAPIV3Schema without its ``description`` texts (what the API server
uses: types, enums, defaults, required, x-kubernetes-* and CEL rules), and each release's torch-distributed runtime.

    python scripts/k8s_schemas.py [--shared ../shared/k8s]

tests/export/test_k8s_api.py checks that the shipped files are what this script makes of ../shared/k8s.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "compatmatrix" / "data" / "k8s"


def stripped(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: stripped(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [stripped(v) for v in node]
    return node


def crd_schema(path: Path, version: str) -> dict:
    crd = yaml.safe_load(path.read_text())
    return stripped(next(v for v in crd["spec"]["versions"] if v["name"] == version)["schema"]["openAPIV3Schema"])


def shipped(shared: Path) -> dict[str, Any]:
    """File name -> content, as the package ships them."""
    files: dict[str, Any] = {"pytorchjob-v1.json": crd_schema(shared / "kubeflow.org_pytorchjobs.yaml", "v1")}
    for folder in sorted((shared / "trainer").iterdir()):
        files[f"trainjob-{folder.name}.json"] = crd_schema(folder / "trainer.kubeflow.org_trainjobs.yaml", "v1alpha1")
        files[f"runtime-{folder.name}.json"] = stripped(yaml.safe_load((folder / "torch_distributed.yaml").read_text()))
    return files


def dumped(content: Any) -> str:
    return json.dumps(content, separators=(",", ":"), sort_keys=True) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "k8s")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    for name, content in shipped(args.shared).items():
        (OUT / name).write_text(dumped(content))
        print(OUT / name)


if __name__ == "__main__":
    main()
