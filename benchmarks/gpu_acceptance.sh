#!/usr/bin/env bash
# The GPU acceptance check: on a GPU node with PyTorch preinstalled and no network, set up the core environment from
# a wheelhouse (no index), run the shipped GPU study (workflow/studies/gpu.yaml) through Snakemake with the node's
# own PyTorch in short stages, check every result for plausibility and print one summary table.
#
#   bash benchmarks/gpu_acceptance.sh WHEELHOUSE [PYTHON]        # PYTHON: the node's interpreter (default python3)
#   bash benchmarks/gpu_acceptance.sh --dry-run [PYTHON]         # no GPU: each stage's `snakemake -n` on the CPU
#
# The wheelhouse is filled beforehand on a connected machine, for the node's Python, with only what the node lacks
# (the node's `python3 -m pip list --format=freeze` as --have; docs/gpu.md, "On a GPU node"):
#   bash workflow/scripts/wheelhouse.sh WHEELHOUSE --python-version 3.12 --have node-packages.txt
#
# Stages, each estimated on one H100 (not yet measured on a GPU); none is over 5 minutes:
#   setup                   core environment from the wheelhouse                           1-2 min
#   eager-resnet50          ResNet-50 AMP + TF32, 3 repeats each, 20-35 s a run            2-3.5 min
#   eager-bert_base         BERT-Base AMP + TF32, 3 repeats each, 20-35 s a run            2-3.5 min
#   compiled-resnet50-amp   torch.compile, 2 repeats, 60-90 s a run (each process compiles) 2-3 min
#   compiled-resnet50-fp32  the same                                                       2-3 min
#   compiled-bert_base-amp  the same                                                       2-3 min
#   compiled-bert_base-fp32 the same                                                       2-3 min
#   checks                  the whole study's report (every run done already), the checks  under 1 min
# A finished stage leaves results/gpu_acceptance/STAGE.txt (its part of the table, its time, Snakemake's exit) and
# STAGE.done; running the script again skips the stages that are done, so a check cut off by a time limit goes
# on where it stopped (the runs themselves are Snakemake's outputs and are not repeated either). The whole table
# goes to results/gpu_acceptance.txt. Exit status 1 when a stage fails or any check fails.
set -euo pipefail
cd "$(dirname "$0")/.."

usage="usage: bash benchmarks/gpu_acceptance.sh WHEELHOUSE [PYTHON] | --dry-run [PYTHON]"
dry=false
if [[ "${1:-}" == --dry-run ]]; then
    dry=true
    shift
else
    wheelhouse=${1:?$usage}
    shift
fi
python=${1:-python3}
# ACCEPTANCE_WORKDIR: where results/ and logs/ go (default: the repository, as `snakemake --cores all` does).
workdir=${ACCEPTANCE_WORKDIR:-$PWD}
out="$workdir/results/gpu_acceptance"
$dry && out="$out/dry"
mkdir -p "$out"

run_stages=(eager-resnet50 eager-bert_base compiled-resnet50-amp compiled-resnet50-fp32 compiled-bert_base-amp
    compiled-bert_base-fp32)

# snakemake for one stage; the report of its configurations lands in results/reports/latest.
study() {
    local name=$1
    local cpu=()
    $dry && cpu=(--cpu)
    PYTHONPATH=workflow .venv/bin/python benchmarks/gpu_acceptance.py --stage-study "$name" "$out/$name.yaml" "${cpu[@]}"
    local args=(--cores all)
    $dry && args=(-n --cores 1)
    .venv/bin/snakemake -s "$PWD/Snakefile" --directory "$workdir" "${args[@]}" \
        --configfile "$out/$name.yaml" \
        --config "software={python: {pytorch: $python}}"
}

# The checker's table for the report now in results/reports/latest (the stage's configurations).
check() {
    PYTHONPATH=workflow .venv/bin/python benchmarks/gpu_acceptance.py --report "$workdir/results/reports/latest" "$@"
}

failed=0
stage() {
    local name=$1
    if [[ -e "$out/$name.done" ]]; then
        echo "== $name: done before (remove $out/$name.done to run it again)" >&2
        return 0
    fi
    echo "== $name" >&2
    local started status=0
    started=$(date +%s)
    case "$name" in
        setup)
            if ! $dry; then
                PYTHON=$python bash workflow/scripts/bootstrap.sh --wheelhouse "$wheelhouse" --system-site-packages \
                    || status=$?
            fi
            ;;
        *) study "$name" || status=$? ;;
    esac
    local seconds=$(($(date +%s) - started))
    {
        echo "stage $name: ${seconds} s, exit $status"
        if [[ $name != setup ]] && ! $dry; then
            check --stage-s "$seconds" --snakemake-exit "$status" || status=$?
        fi
    } > "$out/$name.txt.part"
    mv "$out/$name.txt.part" "$out/$name.txt"
    cat "$out/$name.txt"
    if ((status == 0)); then
        touch "$out/$name.done"
    else
        failed=1
    fi
}

stage setup
for name in "${run_stages[@]}"; do
    stage "$name"
done
stage checks
if ! $dry; then
    for name in setup "${run_stages[@]}" checks; do
        cat "$out/$name.txt"
    done > "$workdir/results/gpu_acceptance.txt"
    echo "== the whole table: $workdir/results/gpu_acceptance.txt (stage checks: every configuration)" >&2
fi
exit "$failed"
