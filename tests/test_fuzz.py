"""Fuzzing in CI (bounded time): hostile sessions, authors' configs, corrupted session files,
profile stores and measurement CSVs never crash, hang or give a non-finite result.

Each example runs the real command line in this process (:func:`tests.fuzzing.run_cli`) and
must end ``ok`` (finite strict JSON) or as a ``clean_error`` (exit 2, one line). Hypothesis
draws the random source, derandomized so CI is repeatable; ``scripts/fuzz.py`` runs the same
generators over 10,000+ configs and 1,000+ corrupted files with fresh seeds.
"""

from __future__ import annotations

import signal
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzzing import BASE_STORE, CaseTimeout, run_case

#: Longest one example may take, seconds (the slowest valid ones take about 1 s).
CASE_TIMEOUT_S = 30

pytestmark = pytest.mark.skipif(not BASE_STORE.exists(), reason="shipped store missing")


@contextmanager
def time_limit(seconds: int):
    """Raise :class:`CaseTimeout` in this thread after ``seconds`` (a hang fails the example)."""
    def on_alarm(signum, frame):
        raise CaseTimeout(f"example ran longer than {seconds} s")
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def check(kind: str, rng, tmp_path_factory) -> None:
    workdir = tmp_path_factory.mktemp(kind, numbered=True)
    with time_limit(CASE_TIMEOUT_S * (4 if kind == "session_sweep" else 1)):
        outcome, note = run_case(kind, rng, workdir, 0)
    assert outcome in ("ok", "clean_error"), f"{kind}: {outcome}: {note}"


def fuzz_settings(n: int):
    return settings(max_examples=n, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@fuzz_settings(150)
@given(rng=st.randoms(use_true_random=False))
def test_fuzz_sessions(rng, tmp_path_factory):
    check("session", rng, tmp_path_factory)


@fuzz_settings(30)
@given(rng=st.randoms(use_true_random=False))
def test_fuzz_session_sweeps(rng, tmp_path_factory):
    check("session_sweep", rng, tmp_path_factory)


@fuzz_settings(100)
@given(rng=st.randoms(use_true_random=False))
def test_fuzz_authors_configs(rng, tmp_path_factory):
    check("authors", rng, tmp_path_factory)


@fuzz_settings(100)
@given(rng=st.randoms(use_true_random=False))
def test_fuzz_corrupted_session_files(rng, tmp_path_factory):
    check("session_file", rng, tmp_path_factory)


@fuzz_settings(60)
@given(rng=st.randoms(use_true_random=False))
def test_fuzz_profile_stores(rng, tmp_path_factory):
    check("store_file", rng, tmp_path_factory)


@fuzz_settings(60)
@given(rng=st.randoms(use_true_random=False))
def test_fuzz_measurement_csvs(rng, tmp_path_factory):
    check("csv_file", rng, tmp_path_factory)


@fuzz_settings(40)
@given(rng=st.randoms(use_true_random=False))
def test_fuzz_exported_launch_scripts(rng, tmp_path_factory):
    """Hostile text in a session's fields: the exported script passes ``bash -n`` and runs one
    torchrun and nothing else (``tests.fuzzing.check_export``)."""
    check("export", rng, tmp_path_factory)


@fuzz_settings(40)
@given(rng=st.randoms(use_true_random=False))
def test_fuzz_launch_scripts_expand_within_bounds(rng, tmp_path_factory):
    check("launch", rng, tmp_path_factory)


@fuzz_settings(60)
@given(rng=st.randoms(use_true_random=False))
def test_fuzz_one_field_deletions_never_run_another_model(rng, tmp_path_factory):
    check("deletion", rng, tmp_path_factory)


@fuzz_settings(30)
@given(rng=st.randoms(use_true_random=False))
def test_fuzz_hostile_profile_paths(rng, tmp_path_factory):
    check("profile_path", rng, tmp_path_factory)


@fuzz_settings(60)
@given(rng=st.randoms(use_true_random=False))
def test_fuzz_diff_of_a_hostile_pinned_plan(rng, tmp_path_factory):
    """``vtrain diff SESSION --json``: the pinned plan mutated (wrong types, bounds, deep
    nesting, unknown and missing fields) is compared or refused in one line."""
    check("diff_pinned", rng, tmp_path_factory)


@fuzz_settings(60)
@given(rng=st.randoms(use_true_random=False))
def test_fuzz_diff_of_a_hostile_session_against_the_example(rng, tmp_path_factory):
    check("diff_pair", rng, tmp_path_factory)
