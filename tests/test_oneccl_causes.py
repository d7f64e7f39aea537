"""live/oneccl_causes: what oneCCL, libfabric, Intel MPI and torch's rendezvous print, read into a cause and a fix for the
launcher the ranks ran under (issue 25, item 3). Pure: the texts are the libraries' own lines (oneCCL 2021.14's, as
tests/fixture_ccl.py cites them; torch's env:// message), each whole log as a rank writes it."""

from __future__ import annotations

import pytest

from compatmatrix.live.oneccl_causes import CclRun, ccl_cause
from compatmatrix.live.report import RankRecord, known_cause

PREFIX = "2026:11:26-20:00:00:(1234) "
NO_LIBFABRIC = (PREFIX + "|CCL_WARN| could not open the library: libfabric.so, error: libfabric.so: cannot open shared object file: No such file or directory\n"
                + PREFIX + "|CCL_WARN| OFI transport was not initialized, fallback to MPI transport\n"
                + PREFIX + "|CCL_ERROR| atl_mpi_comm.cpp:102 init_transport: condition transport->init(...) == ATL_STATUS_SUCCESS failed\nfailed to initialize ATL\n")
NO_PROVIDER = (PREFIX + "|CCL_ERROR| atl_ofi_helper.cpp:867 atl_ofi_get_prov_list: fi_getinfo error: ret -61, providers (nil)\n"
               + PREFIX + "|CCL_ERROR| atl_ofi_comm.cpp:278 init_transport: condition ... failed\nfailed to initialize ATL\n")
NO_IMPI_ROOT = (PREFIX + "|CCL_WARN| could not open the library: libfabric.so, error: libfabric.so: cannot open shared object file: No such file or directory\n"
                + PREFIX + "|CCL_ERROR| atl_mpi_ctx.cpp:671 check_impi_env: CCL/MPI uses Intel(R) MPI Library but neither I_MPI_ROOT nor ONEAPI_ROOT is set. "
                "Please source release version of Intel(R) MPI Library (2019 or higher version).\n"
                + PREFIX + "|CCL_ERROR| atl_mpi_comm.cpp:102 init_transport: condition ... failed\nfailed to initialize ATL\n")
NO_MASTER = "ValueError: Error initializing torch.distributed using env:// rendezvous: environment variable MASTER_ADDR expected, but not set\n"

TORCHRUN = CclRun("torchrun", False, False, 'eval "$(compat env --launcher torchrun)"', "/env/lib/libfabric", "/env/lib/libfabric/prov", "/env")
SPAWN = CclRun("spawn", False, False, 'eval "$(compat env --launcher spawn)"', "/env/lib/libfabric", "/env/lib/libfabric/prov", "/env")
INTEL_MPIRUN = CclRun("mpirun", True, True, 'eval "$(compat env --launcher mpirun)"', "/env/lib/libfabric", "/env/lib/libfabric/prov", "/env")
OPEN_MPIRUN = CclRun("mpirun", False, True, 'eval "$(compat env --launcher mpirun)"')
UNKNOWN_LAYOUT = CclRun("torchrun", env_command='eval "$(compat env --launcher torchrun)"')


def test_libfabric_not_loadable_is_the_cause_not_the_mpi_transport_it_fell_back_to():
    summary, detail, fix = ccl_cause(NO_LIBFABRIC, TORCHRUN)
    assert summary.startswith("oneCCL could not load libfabric (libfabric.so: libfabric.so: cannot open shared object file")
    assert "fell back to its MPI transport, which needs an MPI launcher (torchrun is not one)" in summary
    assert "could not open the library: libfabric.so" in detail[0]
    assert fix.startswith('export LD_LIBRARY_PATH="/env/lib/libfabric${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"')
    assert 'eval "$(compat env --launcher torchrun)"' in fix
    assert "CCL_ATL_TRANSPORT=ofi" not in fix and "launch with mpirun" not in fix


def test_no_provider_names_the_provider_folder():
    summary, detail, fix = ccl_cause(NO_PROVIDER, SPAWN)
    assert summary.startswith("libfabric found no provider (fi_getinfo error: ret -61)")
    assert "fi_getinfo error: ret -61" in detail[0]
    assert fix.startswith("export FI_PROVIDER_PATH=/env/lib/libfabric/prov;") and "compat env --launcher spawn" in fix


def test_i_mpi_root_wins_over_the_libfabric_warning_that_did_not_stop_the_mpi_transport():
    summary, detail, fix = ccl_cause(NO_IMPI_ROOT, INTEL_MPIRUN)
    assert summary.startswith("oneCCL's MPI transport refuses Intel MPI without I_MPI_ROOT")
    assert "check_impi_env" in detail[0]
    assert fix.startswith("export I_MPI_ROOT=/env;") and "compat env --launcher mpirun" in fix
    assert "launch with mpirun" not in fix  # it ran under mpirun


def test_the_kvs_interface_named_or_none():
    named = PREFIX + "|CCL_ERROR| internal_kvs.cpp:325 fill_local_host_ip: can't find interface ib9 to get host IP\n"
    summary, _, fix = ccl_cause(named, TORCHRUN)
    assert summary.startswith("CCL_KVS_IFACE=ib9 names no interface here") and "CCL_KVS_IFACE" in fix
    only_lo = PREFIX + "|CCL_ERROR| internal_kvs.cpp:325 fill_local_host_ip: can't find interface  to get host IP\n"
    summary, _, fix = ccl_cause(only_lo, TORCHRUN)
    assert summary.startswith("oneCCL's key-value store found no interface but lo") and "export CCL_KVS_IFACE=lo" in fix


def test_master_addr_missing_under_a_launcher_that_gives_no_rendezvous():
    summary, detail, fix = ccl_cause(NO_MASTER, INTEL_MPIRUN)
    assert summary.startswith("MASTER_ADDR is not set: mpirun gives its ranks no rendezvous address")
    assert "MASTER_ADDR expected, but not set" in detail[0]
    assert fix.startswith("export MASTER_ADDR=127.0.0.1 MASTER_PORT=29500")


@pytest.mark.parametrize("run, words, not_words", [
    (TORCHRUN, ("MPI transport needs an MPI launcher, and torchrun is not one", "CCL_ATL_TRANSPORT=ofi"), ("launch with mpirun",)),
    (INTEL_MPIRUN, ("failed to start under mpirun (Intel MPI)", "CCL_LOG_LEVEL=info"), ("launch with mpirun", "needs an MPI launcher")),
    (OPEN_MPIRUN, ("built for Intel MPI", "CCL_ATL_TRANSPORT=ofi"), ("launch with mpirun", "needs an MPI launcher")),
])
def test_a_bare_atl_failure_is_read_per_launcher(run, words, not_words):
    summary, _, fix = ccl_cause(PREFIX + "|CCL_ERROR| atl_mpi_comm.cpp:102 init_transport: failed to initialize ATL\n", run)
    text = summary + " " + fix
    assert all(w in text for w in words) and not any(w in text for w in not_words), text


def test_a_bare_ofi_failure_does_not_ask_for_the_ofi_transport_it_already_used():
    summary, _, fix = ccl_cause(PREFIX + "|CCL_ERROR| atl_ofi_comm.cpp:278 init_transport: failed to initialize ATL\n", TORCHRUN)
    assert summary.startswith("oneCCL's OFI transport failed to start") and "CCL_ATL_TRANSPORT" not in fix


def test_an_unknown_layout_still_says_what_to_export():
    _, _, fix = ccl_cause(NO_PROVIDER, UNKNOWN_LAYOUT)
    assert fix.startswith("export FI_PROVIDER_PATH=<the folder holding libfabric's lib*-fi.so providers>")


def test_a_libfabric_warning_alone_is_no_cause():
    """Under Intel mpirun the MPI transport runs without libfabric on the loader's path: the warning is not a failure."""
    assert ccl_cause(NO_LIBFABRIC.splitlines()[0] + "\nsome other failure\n", INTEL_MPIRUN) is None


def test_known_cause_reads_the_rank_log_and_its_raised_error_together():
    record = RankRecord(7, {"rank": 1, "stage": "init", "error": {"type": "RuntimeError", "message": "oneCCL: atl_ofi_comm.cpp:278 init_transport: EXCEPTION: failed to initialize ATL"}},
                        NO_PROVIDER.splitlines()[0] + "\n", 1)
    summary, _, _ = known_cause(record, TORCHRUN)
    assert summary.startswith("libfabric found no provider")


# --- no false pass: what compat gave the ranks that the user's command will not have (issue 25, item 4) ---------------


def test_plan_launch_records_the_rendezvous_compat_adds_only_under_a_launcher_that_gives_none(monkeypatch):
    from compatmatrix.launchers import LAUNCHERS
    from compatmatrix.launchers.interface import RankLayout
    from compatmatrix.launchers.live import plan_launch

    for name in ("spawn", "torchrun"):
        launch = plan_launch(name, "/usr/bin/python3", ["w.py"], RankLayout(), {"PATH": "/usr/bin"}, 1)
        assert launch.added == {} and launch.replaced == {}
    # mpirun gives none: a launcher like it (its live() stands in for mpirun's, which asks mpirun --version)
    monkeypatch.setattr(LAUNCHERS["spawn"], "gives_rendezvous", False)
    monkeypatch.setattr(LAUNCHERS["spawn"], "starts_ranks_itself", False)
    launch = plan_launch("spawn", "/usr/bin/python3", ["w.py"], RankLayout(), {"PATH": "/usr/bin"}, 1)
    assert set(launch.added) == {"MASTER_ADDR", "MASTER_PORT"} and launch.added["MASTER_ADDR"] == "127.0.0.1"
    assert all(env["MASTER_ADDR"] == "127.0.0.1" for env in launch.envs)
    mine = plan_launch("spawn", "/usr/bin/python3", ["w.py"], RankLayout(), {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}, 1)
    assert mine.added == {} and set(mine.replaced) == {"MASTER_PORT"}  # the probe's own free port, said as such


def test_the_environment_finding_warns_with_the_export_that_carries_what_compat_added():
    from compatmatrix.checks.finding import Status
    from compatmatrix.launchers.interface import Launch
    from compatmatrix.live.report import environment_finding

    base = Launch("mpirun", "intel-mpi", (("mpirun",),), ({},), "127.0.0.1:4242", 2, 2)
    assert environment_finding(base, INTEL_MPIRUN) is None
    added = Launch("mpirun", "intel-mpi", (("mpirun",),), ({},), "127.0.0.1:4242", 2, 2, added={"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "4242"})
    finding = environment_finding(added, INTEL_MPIRUN)
    assert finding.status is Status.WARN and finding.id == "live.environment"
    assert "mpirun gives its ranks no MASTER_ADDR and MASTER_PORT and your environment has none" in finding.summary
    assert "your own command under mpirun needs MASTER_ADDR and MASTER_PORT exported" in finding.summary
    assert finding.fix.startswith("export MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 before launching") and "compat env --launcher mpirun" in finding.fix
    kept = Launch("mpirun", "intel-mpi", (("mpirun",),), ({},), "127.0.0.1:4242", 2, 2, replaced={"MASTER_PORT": "4242"})
    assert environment_finding(kept, INTEL_MPIRUN).status is Status.PASS


def test_a_long_word_in_a_ranks_output_is_read_in_linear_time():
    """A rank's output is whatever the training prints (up to 256 KiB kept): a long word holding "libfabric" many times
    after oneCCL's "could not open the library:" took the library pattern seconds per 30 KB, quadratically."""
    import time

    text = "could not open the library: " + "libfabric" * 7000 + "\nfailed to initialize ATL\n"
    began = time.monotonic()
    ccl_cause(text, TORCHRUN)
    assert time.monotonic() - began < 1.0
