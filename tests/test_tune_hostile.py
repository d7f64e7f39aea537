"""compat tune under hostile input and kills (issue 31): settings typed at the edge, a training command's output
paths redirected into compat's own scratch folder, its output kept as a bounded tail plus what is parsed from it, and
nothing left behind (scratch folders, torchelastic_* folders, ranks) when compat is killed.

The cheap tests drive tune with a FIXTURE environment (tests/fixture_envs.py: a venv holding a fake torch, enough
for the environment probe) and a FIXTURE training script (tests/data/tune/fixture_writer.py: no torch, it prints the
protocol's loss lines and writes into its --output_dir), under --launcher spawn."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compatmatrix.tune.space import current_settings
from compatmatrix.tune.trainer import global_batch


@pytest.mark.parametrize("value", ["²", "٣", "¹⁰", "+2", "2,1", "0x10", " ", "9" * 40, "1e3", "0"])
def test_a_thread_count_that_is_not_ascii_digits_is_left_out_with_a_note(value):
    omp, workers, notes = current_settings({"OMP_NUM_THREADS": value, "CCL_WORKER_COUNT": value})
    if value.strip() == "":
        assert (omp, workers, notes) == (None, None, ())
        return
    assert omp is None and workers is None and len(notes) == 2, notes
    assert all("not a whole number" in note for note in notes)


@given(st.text(max_size=12))
@settings(max_examples=80, deadline=None)
def test_current_settings_never_raise_and_take_only_ascii_digits(value):
    omp, _, _ = current_settings({"OMP_NUM_THREADS": value})
    assert omp is None or (value.strip().isascii() and value.strip().isdigit() and 1 <= omp <= 65536)


@pytest.mark.parametrize("value", ["²", "٣", "99999999999999999999999", "-4", "4.0"])
def test_a_batch_size_that_is_not_ascii_digits_is_the_trainers_default(value):
    assert global_batch(["t.py", "--per_device_train_batch_size", value]) == 8
