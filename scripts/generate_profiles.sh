#!/usr/bin/env bash
# Rebuild the shipped analytic profile stores from their spec files (resources/gpu_specs/),
# the one source of the data-sheet figures. The A100 store in profiles/ is calibrated
# (vtrain calibrate, see docs/accuracy.md) and is not rebuilt here.
set -euo pipefail
cd "$(dirname "$0")/.."
VTRAIN=${VTRAIN:-.venv/bin/vtrain}
for spec in resources/gpu_specs/*.json; do
  name=$(basename "$spec" .json)
  if [ "$name" = "A100-SXM4-80GB" ]; then
    continue  # calibrated store: regenerate with vtrain calibrate, not here
  fi
  "$VTRAIN" profile generate --spec "$spec" --out "profiles/$name.h5"
done
