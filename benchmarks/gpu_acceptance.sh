#!/usr/bin/env bash
# The GPU acceptance check, in one sitting: on a GPU node with PyTorch preinstalled and no network, set up the core
# environment from a wheelhouse (no index), run the shipped GPU study (workflow/studies/gpu.yaml) through Snakemake
# with the node's own PyTorch, check every result for plausibility and print one summary table.
#
#   bash benchmarks/gpu_acceptance.sh WHEELHOUSE [PYTHON]        # PYTHON: the node's interpreter (default python3)
#
# The wheelhouse is filled beforehand on a connected machine, for the node's Python, with only what the node lacks
# (the node's `python3 -m pip list --format=freeze` as --have; README, "On a GPU node"):
#   bash workflow/scripts/wheelhouse.sh WHEELHOUSE --python-version 3.12 --have node-packages.txt
# Budget: 10 minutes on one H100, setup included (the study itself is sized for 8). Writes results/ and logs/ in
# the repository as `snakemake --cores all` does, and the checker's table to results/gpu_acceptance.txt.
set -euo pipefail
cd "$(dirname "$0")/.."

wheelhouse=${1:?usage: bash benchmarks/gpu_acceptance.sh WHEELHOUSE [PYTHON]}
python=${2:-python3}
started=$(date +%s)

echo "== setup: core environment from $wheelhouse (no index), beside $python's own packages" >&2
PYTHON=$python bash workflow/scripts/bootstrap.sh --wheelhouse "$wheelhouse" --system-site-packages
setup_s=$(( $(date +%s) - started ))

echo "== the GPU study with $python's PyTorch" >&2
status=0
.venv/bin/snakemake --cores all --configfile workflow/studies/gpu.yaml \
    --config "software={python: {pytorch: $python}}" || status=$?
study_s=$(( $(date +%s) - started - setup_s ))

echo "== checks (setup ${setup_s} s, study ${study_s} s, snakemake exit ${status})" >&2
PYTHONPATH=workflow .venv/bin/python benchmarks/gpu_acceptance.py --report results/reports/latest \
    --setup-s "$setup_s" --study-s "$study_s" --snakemake-exit "$status" | tee results/gpu_acceptance.txt
