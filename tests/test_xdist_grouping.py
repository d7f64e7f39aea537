"""The README's test command runs the integration tests on ONE pytest-xdist worker, one at a time (tests/conftest.py marks
them xdist_group("integration"); --dist loadgroup keeps a group on one worker). A pytest or xdist release that drops the
group silently (pytest 9.2 with xdist 3.8: pytest-dev/pytest-xdist#1386) would run real ranks, namespaces and daemons side
by side and make timings meaningless: this runs the same hook on FIXTURE tests under -n 2 and checks where they ran: each
of the two groups (serial, BESIDE's files) on one worker, not the same one.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from .clean_env import base_env
from .conftest import ROOT

FIXTURE_TESTS = '''
import time
import pytest

@pytest.mark.integration
@pytest.mark.parametrize("i", range(4))
def test_fixture_integration(i):
    time.sleep(0.2)

@pytest.mark.parametrize("i", range(4))
def test_fixture_unit(i):
    time.sleep(0.2)
'''
# a file of tests/conftest.py's BESIDE list (by its name): its integration tests form the second group
BESIDE_TESTS = '''
import time
import pytest

@pytest.mark.integration
@pytest.mark.parametrize("i", range(3))
def test_fixture_beside(i):
    time.sleep(0.2)

'''


def test_the_integration_tests_run_on_one_worker_under_the_readme_command(tmp_path):
    pytest.importorskip("xdist")
    (tmp_path / "conftest.py").write_text("from tests.conftest import pytest_collection_modifyitems  # noqa: F401 (the hook under test)\n")
    (tmp_path / "test_fixture_grouping.py").write_text(FIXTURE_TESTS)
    (tmp_path / "test_install.py").write_text(BESIDE_TESTS)  # a name on the BESIDE list
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    integration: fixture\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v", "-p", "no:cacheprovider", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, cwd=str(tmp_path), check=False,
                          env=base_env({"PYTHONPATH": str(ROOT)}))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    ran = re.findall(r"^\[(gw\d+)\] .*PASSED .*::(test_fixture_\w+)\[\d\]", done.stdout, re.M)
    assert len(ran) == 11, done.stdout[-2000:]
    workers = {worker for worker, name in ran if name == "test_fixture_integration"}
    assert len(workers) == 1, f"the integration tests ran on {sorted(workers)}: the xdist group was dropped\n{done.stdout[-2000:]}"
    beside = {worker for worker, name in ran if name == "test_fixture_beside"}
    assert len(beside) == 1 and beside != workers, f"the BESIDE group ran on {sorted(beside)}, the serial one on {sorted(workers)}\n{done.stdout[-2000:]}"
