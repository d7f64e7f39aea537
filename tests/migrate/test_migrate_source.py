"""compat migrate --source: IPEX / oneCCL calls found in small real-looking training scripts (tests/data/migrate/scripts),
read with ast (nothing imported: the scripts import IPEX, which is not installed here), each with the stock replacement."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from compatmatrix.errors import UsageError
from compatmatrix.migrate.service import read_sources
from compatmatrix.migrate.source import scan_source, scan_sources

SCRIPTS = Path(__file__).resolve().parents[1] / "data" / "migrate" / "scripts"


def found(name: str):
    return [(f.line, f.kind, f.call) for f in scan_sources(read_sources([str(SCRIPTS / name)]))]


def test_hand_written_ddp_loop_with_ccl_and_ipex():
    findings = scan_sources(read_sources([str(SCRIPTS / "ddp_ccl_loop.py")]))
    by_line = {f.line: f for f in findings}
    assert by_line[4].kind == "import" and by_line[4].call == "import intel_extension_for_pytorch as ipex"
    assert by_line[5].call == "import oneccl_bindings_for_pytorch" and "gloo" in by_line[5].replacement
    assert by_line[17].kind == "backend" and 'backend="gloo"' in by_line[17].replacement
    optimize = by_line[21]
    assert optimize.call == "ipex.optimize(model, optimizer=optimizer, dtype=torch.bfloat16)"
    assert "torch.compile(model)" in optimize.replacement and 'torch.autocast("cpu", dtype=torch.bfloat16)' in optimize.replacement
    assert by_line[14].call == 'os.environ.setdefault("CCL_WORKER_COUNT", "1")' and by_line[15].call == 'os.environ["CCL_ATL_TRANSPORT"] = "ofi"'
    # RANK copied from PMI_RANK breaks under torchrun: said, with why
    assert by_line[12].call == 'os.environ.get("PMI_RANK", 0)' and "torchrun" in by_line[12].replacement
    assert by_line[26].call == "torch.cpu.amp.autocast()" and "deprecated" in by_line[26].replacement
    assert [f.line for f in findings] == sorted(f.line for f in findings)


def test_trainer_script_with_optional_ipex():
    got = found("qa_trainer_ipex.py")
    assert (13, "import", "import intel_extension_for_pytorch as ipex  # noqa: F401") not in got  # the comment is not part of the statement
    assert (13, "import", "import intel_extension_for_pytorch as ipex") in got
    assert (26, "call", "model = ipex.optimize(model, dtype=torch.bfloat16 if training_args.bf16 else torch.float32)") not in got
    calls = [c for line, kind, c in got if kind == "call"]
    assert calls == ["ipex.optimize(model, dtype=torch.bfloat16 if training_args.bf16 else torch.float32)"]


def test_blog_patch_to_run_glue():
    got = found("glue_torch_ccl_blog.py")
    assert (5, "import", "import torch_ccl") in got
    assert [line for line, kind, _ in got if kind == "environment"] == [12, 18, 19]  # the PMI_* reads that map mpirun's ranks


def test_cpu_runtime_and_xpu_device_checks():
    findings = scan_sources(read_sources([str(SCRIPTS / "runtime_inference.py")]))
    calls = {f.call: f.replacement for f in findings}
    assert "compat launch" in calls["CPUPool(node_id=0)"]  # imported by name from ipex.cpu.runtime: still found
    assert "compat launch" in calls["MultiStreamModule(model, num_streams=2, cpu_pool=pool)"]
    assert "compat launch" in calls["ipex.cpu.runtime.pin(pool)"]
    assert "Intel GPU" in calls["torch.xpu.is_available()"]
    assert "Intel GPU" in calls['torch.device("xpu:0")']
    assert "set_float32_matmul_precision" in calls['ipex.set_fp32_math_mode(mode=ipex.FP32MathMode.BF32, device="cpu")']
    # ipex.optimize(model) without bf16: torch.compile, and the bf16 route named too
    assert calls["ipex.optimize(model)"].startswith("torch.compile(model)")


def test_a_stock_script_has_nothing_to_report():
    assert found("stock_already.py") == []


def test_a_script_that_does_not_parse_is_said_not_skipped():
    findings = scan_sources(read_sources([str(SCRIPTS / "legacy_py2.py.txt")]))
    assert [(f.kind, f.line) for f in findings] == [("unparsed", 3)]
    assert "by hand" in findings[0].replacement


def test_a_folder_is_scanned_for_python_files_in_order():
    files = {Path(f.file).name for f in scan_sources(read_sources([str(SCRIPTS)]))}
    assert files == {"ddp_ccl_loop.py", "glue_torch_ccl_blog.py", "qa_trainer_ipex.py", "runtime_inference.py"}  # not the .txt, nothing from the stock one


def test_the_coding_line_is_honoured(tmp_path):
    script = tmp_path / "latin1.py"
    script.write_bytes(b"# -*- coding: latin-1 -*-\n# entra\xeenement distribu\xe9\nimport torch_ccl as tc\ntc.foo()\n")
    assert [(f.kind, f.call) for f in scan_sources(read_sources([str(script)]))] == [("import", "import torch_ccl as tc"), ("call", "tc.foo()")]


def test_aliases_and_from_imports():
    text = "\n".join([
        "from intel_extension_for_pytorch import optimize as opt",
        "import intel_extension_for_pytorch",
        "import intel_extension_for_pytorch.llm as llm",
        "m = opt(m)",
        "m = intel_extension_for_pytorch.optimize(m, dtype=torch.bfloat16)",
        "llm.optimize(m)",
        "x = intel_extension_for_pytorch.quantization.prepare(m, cfg)",
        "def run(ipex):",  # a parameter named ipex is not the module
        "    return ipex.optimize(1)",
        "torch.distributed.init_process_group('ccl', rank=0, world_size=1)",
    ])
    got = [(f.line, f.kind) for f in scan_source("s.py", text)]
    assert got == [(1, "import"), (2, "import"), (3, "import"), (4, "call"), (5, "call"), (6, "call"), (7, "call"), (10, "backend")]
    replacements = {f.line: f.replacement for f in scan_source("s.py", text)}
    assert "torch.ao.quantization" in replacements[7] and "LLM" in replacements[6]


def test_unusable_source_paths_are_usage_errors(tmp_path):
    with pytest.raises(UsageError, match="cannot be read"):
        read_sources([str(tmp_path / "missing.py")])
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="not a file or a folder"):  # never opened: a FIFO would block
        read_sources([str(fifo)])
    big = tmp_path / "big.py"
    with open(big, "wb") as handle:
        handle.truncate(5 * 1024 * 1024)
    with pytest.raises(UsageError, match="larger than 4 MiB"):
        read_sources([str(big)])


def test_a_nul_byte_is_an_unparsed_file_not_a_crash():
    findings = scan_source("bad.py", "import torch\x00\n")
    assert [f.kind for f in findings] == ["unparsed"]
