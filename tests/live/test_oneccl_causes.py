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
    from compatmatrix.findings import Status
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


# --- MPI abort under a foreign mpirun: Open MPI's mpirun, Intel MPI's libmpi loaded by oneCCL's MPI transport -----------

# the abort line in the form Intel MPI (MPICH's ch4 device) prints it: pmodels/mpich src/mpid/ch4/src/ch4_globals.c:110
# MPID_Abort "Abort(%d)%s%s: %s%s" with " on node %d" and " (rank %d in comm %d)"; the error stack below it is an example
IMPI_ABORT = ("Abort(1091215) on node 0 (rank 0 in comm 0): Fatal error in PMPI_Init_thread: Other MPI error, error stack:\n"
              "MPIR_Init_thread(176)........:\nMPID_Init(1548)..............:\nMPIR_pmi_init(168)...........: PMI2_Job_GetId returned 14\n")
# Open MPI 4.1.4's mpirun on such a rank: orte/tools/orterun/help-orterun.txt [orterun:proc-exit-no-sync]
OPEN_MPI_NO_SYNC = ("mpirun has exited due to process rank 1 with PID 4242 on\nnode node1 exiting improperly. There are three reasons this could occur:\n")
OPEN_MPIRUN_LAYOUT = CclRun("mpirun", False, True, 'eval "$(compat env --launcher mpirun --mpirun /usr/bin/mpirun --python /env/bin/python)"',
                            "/env/lib/libfabric", "/env/lib/libfabric/prov", "/env", flavor="open-mpi")


@pytest.mark.parametrize("text", [IMPI_ABORT, PREFIX + "|CCL_ERROR| atl_mpi_comm.cpp:102 init_transport: failed to initialize ATL\n" + OPEN_MPI_NO_SYNC,
                                  NO_IMPI_ROOT])
def test_an_mpi_abort_under_open_mpis_mpirun_is_the_foreign_mpirun_cause_with_the_ofi_fix(text):
    summary, detail, fix = ccl_cause(text, OPEN_MPIRUN_LAYOUT)
    assert summary.startswith("MPI abort under a foreign mpirun: oneCCL's MPI transport") and "mpirun (open-mpi)" in summary
    assert detail and detail[0]
    assert fix.startswith('export CCL_ATL_TRANSPORT=ofi FI_PROVIDER_PATH=/env/lib/libfabric/prov LD_LIBRARY_PATH="/env/lib/libfabric${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"')
    assert 'eval "$(compat env --launcher mpirun --mpirun /usr/bin/mpirun --python /env/bin/python)"' in fix
    assert "export I_MPI_ROOT" not in fix  # Intel MPI's own setting is no fix under another MPI's launcher


def test_the_abort_line_is_quoted_and_the_same_text_reads_as_before_elsewhere():
    _, detail, _ = ccl_cause(IMPI_ABORT, OPEN_MPIRUN_LAYOUT)
    assert detail[0] == "Abort(1091215) on node 0 (rank 0 in comm 0): Fatal error in PMPI_Init_thread: Other MPI error, error stack:"
    # under Intel MPI's own mpirun I_MPI_ROOT stays the cause; under torchrun an Intel MPI abort is not this cause
    assert ccl_cause(NO_IMPI_ROOT, INTEL_MPIRUN)[0].startswith("oneCCL's MPI transport refuses Intel MPI without I_MPI_ROOT")
    assert ccl_cause(IMPI_ABORT, TORCHRUN) is None
    # Open MPI's words alone, with no sign of oneCCL's MPI transport, name nothing
    assert ccl_cause(OPEN_MPI_NO_SYNC, OPEN_MPIRUN_LAYOUT) is None


def test_a_ccl_hang_under_open_mpis_mpirun_without_ofi_names_the_foreign_mpirun():
    from compatmatrix.live.report import Expectation, hang_finding
    from compatmatrix.live.supervise import Supervised

    supervised = Supervised("x", (), True, False, 60.0, True, ())
    ranks = [RankRecord(1, {"rank": 0, "stage": "init", "backend": "ccl", "started": 0, "updated": 2}, ""),
             RankRecord(2, {"rank": 1, "stage": "init", "backend": "ccl", "started": 0, "updated": 2}, "")]
    expect = Expectation(world_size=2, trainer=False, steps=1, per_device_batch=2, backend="auto", ccl_installed=True, timeout=60, ccl=OPEN_MPIRUN_LAYOUT)
    finding = hang_finding(ranks, supervised, expect, 2)
    causes = next(e for e in finding.evidence if e.startswith("likely causes: "))
    assert causes.startswith("likely causes: MPI abort under a foreign mpirun: under mpirun (open-mpi) oneCCL takes its MPI transport (CCL_ATL_TRANSPORT not set)")
    assert finding.fix.startswith("export CCL_ATL_TRANSPORT=ofi")
    from dataclasses import replace

    for run in (replace(OPEN_MPIRUN_LAYOUT, transport="ofi"), INTEL_MPIRUN, TORCHRUN):  # told ofi, Intel MPI's own mpirun, no MPI: not this
        assert "foreign mpirun" not in " ".join(hang_finding(ranks, supervised, replace(expect, ccl=run), 2).evidence)


def test_the_live_fix_names_the_mpirun_that_ran(tmp_path):
    from compatmatrix.launchers.interface import Launch
    from compatmatrix.live.service import ccl_run

    class Snapshot:  # FIXTURE snapshot: only what ccl_run reads
        prefix = ""
        executable = "/env/bin/python"

    launch = Launch("mpirun", "open-mpi", (("/usr/bin/mpirun", "-np", "2", "/env/bin/python", "worker.py"),), ({"CCL_ATL_TRANSPORT": "mpi"},), "127.0.0.1:1", 2, 2)
    run = ccl_run(launch, Snapshot())
    assert run.env_command == 'eval "$(compat env --launcher mpirun --mpirun /usr/bin/mpirun --python /env/bin/python)"'
    assert run.flavor == "open-mpi" and run.transport == "mpi" and run.mpi_launcher and not run.intel_mpi


def test_a_long_word_in_a_ranks_output_is_read_in_linear_time():
    """A rank's output is whatever the training prints (up to 256 KiB kept): a long word holding "libfabric" many times
    after oneCCL's "could not open the library:" took the library pattern seconds per 30 KB, quadratically."""
    import time

    text = "could not open the library: " + "libfabric" * 7000 + "\nfailed to initialize ATL\n"
    began = time.monotonic()
    ccl_cause(text, TORCHRUN)
    assert time.monotonic() - began < 1.0
