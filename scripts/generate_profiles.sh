#!/usr/bin/env bash
# Rebuild the shipped profile stores of the modern GPU kinds: the analytic stores from their spec
# files (resources/gpu_specs/, the one source of the data-sheet figures), then the shared
# calibration on the published runs (vtrain calibrate --out-dir, docs/accuracy.md), which
# replaces them with calibrated ones when ../shared/data/public-modern/published_runs.sessions.jsonl
# (the published runs as sessions with their measured times) is present (kinds no published run measures, such as the H800, H20, GH200 and B300, take the shared
# fit of the others). The A100 store in profiles/ is calibrated on the vTrain authors' data (vtrain
# calibrate, see docs/accuracy.md) and is not rebuilt here; the A800 (an A100 with NVLink cut to
# 400 GB/s) takes the A100 store's calibrated parameters.
set -euo pipefail
cd "$(dirname "$0")/.."
VTRAIN=${VTRAIN:-.venv/bin/vtrain}
MODERN=()
for spec in resources/gpu_specs/*.json; do
  name=$(basename "$spec" .json)
  if [ "$name" = "A100-SXM4-80GB" ]; then
    continue  # calibrated store: regenerate with vtrain calibrate, not here
  fi
  if [ "$name" = "A800-SXM4-80GB" ]; then  # Ampere: the A100's parameters, not the shared fit's
    "$VTRAIN" profile generate --spec "$spec" --parameters-from profiles/A100-SXM4-80GB.h5 \
      --out "profiles/$name.h5"
    continue
  fi
  "$VTRAIN" profile generate --spec "$spec" --out "profiles/$name.h5"
  MODERN+=("$name")
done
RUNS=../shared/data/public-modern/published_runs.sessions.jsonl
if [ -f "$RUNS" ]; then
  "$VTRAIN" calibrate "$RUNS" --out-dir profiles --folds 5 --gpus "${MODERN[@]}"
else
  echo "note: $RUNS not found: profiles/ keeps the analytic stores (not calibrated)" >&2
fi
.venv/bin/python scripts/store_images.py  # the shipped stores' images (profiles/images)
