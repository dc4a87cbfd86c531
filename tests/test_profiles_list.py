"""How a store's method reads in the report, `vtrain profile` and the Profiles tab: a store
calibrated with no run of its own GPU kind says its parameters come from other kinds' runs."""

from __future__ import annotations

from core.cli.profile import profile_line
from core.store.profiles import PROFILES_DIR, method_text, store_info


def test_a_store_without_runs_of_its_kind_is_not_called_plainly_calibrated():
    assert method_text({"method": "calibrated", "rows_of_this_kind": 0}) == \
        "calibrated on other GPU kinds' runs"
    assert method_text({"method": "calibrated", "rows_of_this_kind": 8}) == "calibrated"
    assert method_text({"method": "calibrated"}) == "calibrated"  # the A100's own fit
    assert method_text({"method": "measured"}) == "measured"
    # the shipped B300 store took the Blackwell fit (no B300 run is in the data); the H100's
    # has rows of its own
    b300 = store_info(PROFILES_DIR / "B300-288GB.h5").provenance
    h100 = store_info(PROFILES_DIR / "H100-SXM5-80GB.h5").provenance
    assert b300["rows_of_this_kind"] == 0 and h100["rows_of_this_kind"] > 0
    assert profile_line({**b300, "device": "B300-288GB"}).startswith(
        "profile: B300-288GB (calibrated on other GPU kinds' runs, ")
    assert profile_line({**h100, "device": "H100-SXM5-80GB"}).startswith(
        "profile: H100-SXM5-80GB (calibrated, ")
