"""Record the fitted parameters and their bounds in a one-GPU-kind calibrated store written
before ``vtrain calibrate`` kept them, parameters unchanged.

``vtrain profile show`` names a fitted parameter that ended at a bound of its fit
(:func:`core.accuracy.shared_fit.parameters_at_bound`), reading ``fitted_parameters`` and
``parameter_bounds`` from the store's provenance; :func:`core.accuracy.calibrate.calibrated_store`
writes them now. A store calibrated before (the shipped A100 store, fitted at commit 09e5966
with all of :data:`core.accuracy.fit_params.FIT_PARAMS`, whose bounds have not changed since)
gets them here: the fitted names are the provenance's ``parameters`` that are keys of
``FIT_PARAMS`` (``p2p_efficiency`` is kept there but not fitted), their bounds ``FIT_PARAMS``'.
Only the provenance changes; the script refuses a store that already has them or was not
calibrated by ``vtrain calibrate`` (``method`` other than ``calibrated``, or a shared fit).

Run: ``python scripts/store_fit_bounds.py STORE.h5 [...]``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    from core.accuracy.fit_params import FIT_PARAMS
    from core.store.profile_store import ProfileStore

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stores", nargs="+", type=Path)
    args = ap.parse_args()
    for path in args.stores:
        store = ProfileStore.open(path)
        prov = dict(store.provenance)
        if prov.get("method") != "calibrated" or "fitted_parameters" in prov:
            print(f"{path}: left as it is (method {prov.get('method')!r}, "
                  f"fitted_parameters {'present' if 'fitted_parameters' in prov else 'absent'})")
            continue
        fitted = [n for n in prov.get("parameters", {}) if n in FIT_PARAMS]
        prov["fitted_parameters"] = fitted
        prov["parameter_bounds"] = {n: {"low": float(FIT_PARAMS[n][0]),
                                        "high": float(FIT_PARAMS[n][1])} for n in fitted}
        store.provenance = prov
        store.save(path)
        print(f"{path}: {len(fitted)} fitted parameters and their bounds recorded")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
