#!/usr/bin/env bash
# Sets everything up and runs the main job: a batched ANI-2x simulation of drug-like molecules
# (minimisation, then Langevin MD on the fastest platform, sized for it), printing progress, every
# molecule's energy and the speed. Arguments go to `python -m openmmnnp.simulate` (see --help),
# e.g. scripts/run.sh --count 20 --steps 500.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
export NNP_SHARED_DIR="${NNP_SHARED_DIR:-$root/../shared}"
exec "${NNP_VENV:-$HOME/.cache/openmm-nnp/venv}/bin/python" -m openmmnnp.simulate "$@"
