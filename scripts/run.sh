#!/usr/bin/env bash
# Sets everything up and runs the main job. For now (the C core): per-molecule ANI-2x energies and
# forces of drug-like molecules, evaluated as one batch on the CPU.
#   scripts/run.sh [XYZ ...]      default: 8 molecules from ../shared/molecules/druglike
#   NNP_MODEL=path                model (.info or .nnpm; default ANI-2x from ../shared/models)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
shared="${NNP_SHARED_DIR:-$root/../shared}"
model="${NNP_MODEL:-$shared/models/ani-model-zoo/ani-2x_8x.info}"
if [ ! -f "$model" ]; then
  echo "No model at $model. Point NNP_MODEL at an ANI model: the NeuroChem .info file of the ANI" >&2
  echo "model zoo (ani-2x_8x.info) or an .nnpm file made by build/core/nnp-convert." >&2
  exit 1
fi
if [ $# -eq 0 ]; then
  dir="$shared/molecules/druglike"
  if [ ! -d "$dir" ]; then
    echo "No molecules given and none at $dir: pass XYZ files, e.g. scripts/run.sh mol1.xyz mol2.xyz" >&2
    exit 1
  fi
  set -- $(ls "$dir"/*.xyz | head -n 8)
fi
exec "$root/build/examples/batch_energies" "$model" "$@"
