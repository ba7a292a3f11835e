#!/usr/bin/env bash
# The GPU check: on a GPU node with PyTorch and JAX preinstalled and no network, in one command of at most 8
# minutes, setup included: the core environment from a carried wheelhouse of only what the node lacks (the node's
# own packages taken where dlbench's range allows, envs/core.ranges.txt), then workflow/studies/gpu-check.yaml
# through Snakemake with the node's interpreter (software.python) — ResNet-50 AMP eager and compiled, BERT-Base
# AMP, Llama 3.2 1B bf16 at 2048 tokens, JAX ResNet-50, one repeat each, NVML telemetry on — its report, and every
# configuration checked (gpu_acceptance.py: all ok, steady, MFU inside the band real training reaches, energy per
# sample, peak device memory) in one table.
#
#   bash benchmarks/gpu_acceptance.sh --fill WHEELHOUSE [wheelhouse.sh options]   on a connected machine
#   bash benchmarks/gpu_acceptance.sh WHEELHOUSE [PYTHON] [--python FRAMEWORK=PATH ...]   on the GPU node
#   bash benchmarks/gpu_acceptance.sh --cpu WHEELHOUSE [PYTHON] [--python FRAMEWORK=PATH ...]   rehearsal, a CPU
#   bash benchmarks/gpu_acceptance.sh --full WHEELHOUSE [PYTHON]      the whole GPU study, resumable stages
#   bash benchmarks/gpu_acceptance.sh --full --dry-run [PYTHON]       its stages' `snakemake -n` on the CPU
#   bash benchmarks/gpu_acceptance.sh --parity [PYTHON] [--cpu]       harness against the plain loops (GPU)
#
# --fill: the wheelhouse for the lent GPU node (Python 3.12, manylinux_2_28 x86-64, the node's packages in
# benchmarks/gpu_node_packages.txt, --lean), or for what wheelhouse.sh options name; then the carried total (the
# repository's files and the wheelhouse) against the 56 MiB a command may carry with room to spare.
# PYTHON (default python3) is the node's interpreter: the core environment is made over it
# (--system-site-packages) and every framework runs with it, unless --python names another for a framework.
# --cpu rehearses the check on this machine's CPU in a scratch copy of the repository (ACCEPTANCE_WORKDIR, default
# results/gpu_acceptance/cpu-rehearsal): the same setup, every run on its tiny model, the report and the table
# (the GPU's own checks left out); without PYTHON it takes this checkout's built .venvs/pytorch-* and .venvs/jax-*.
# --full runs workflow/studies/gpu.yaml in stages of at most 5 minutes (estimated on one H100, 13-21 minutes in
# all): setup; eager-resnet50, eager-bert_base (3 repeats each); compiled-resnet50-amp, -fp32,
# compiled-bert_base-amp, -fp32 (2 repeats, each process compiles); checks (the whole study's report). A finished
# stage leaves results/gpu_acceptance/STAGE.txt and STAGE.done; running it again skips finished stages.
# --parity: benchmarks/frameworks.py --device cuda for ResNet-50 AMP and Llama 3.2 1B against torchvision's and
# Hugging Face's plain loops with the A/A pair, sized for one 10-minute command (--cpu: tiny shapes on the CPU);
# its results files: results/gpu_acceptance/parity/ (DLBENCH_BENCH_RESULTS).
# Exit status 1 when a stage or any check fails.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

usage="usage: bash benchmarks/gpu_acceptance.sh [--cpu|--full [--dry-run]|--fill|--parity] ... (see its head)"
mode=check
cpu=false
dry=false
case "${1:-}" in
    --fill | --full | --parity)
        mode=${1#--}
        shift
        ;;
    --cpu)
        cpu=true
        shift
        ;;
    "" | -h | --help)
        sed -n '2,32s/^# \{0,1\}//p' "$0" >&2
        exit 2
        ;;
esac

# ---- --fill: the wheelhouse, and what a command carries
if [[ $mode == fill ]]; then
    house=${1:?$usage}
    shift
    options=("$@")
    if ((${#options[@]} == 0)); then
        options=(--python-version 3.12 --platform manylinux_2_28_x86_64 --have benchmarks/gpu_node_packages.txt
            --lean)
    fi
    bash workflow/scripts/wheelhouse.sh "$house" "${options[@]}"
    PYTHONPATH=workflow "${PYTHON:-python3}" benchmarks/gpu_carry.py "$house"
    exit
fi

# ---- --parity: the harness against the plain loops, on the GPU (or tiny shapes on the CPU)
if [[ $mode == parity ]]; then
    python=python3
    [[ $# -gt 0 && $1 != --* ]] && { python=$1; shift; }
    [[ "${1:-}" == --cpu ]] && cpu=true
    if $cpu; then
        device=(--device cpu)
        resnet=(--image-size 32 --batch-size 4 --steps 2 --rounds 2 --runs 1)
        llama=(--model llama_tiny --seq-length 64 --batch-size 2 --steps 2 --rounds 2 --runs 1)
    else
        # Each loop's rounds long enough to hold a steady GPU clock; two processes each (both build orders once).
        device=(--device cuda)
        resnet=(--image-size 224 --batch-size 256 --steps 20 --rounds 6 --runs 2)
        llama=(--model llama3_1b --seq-length 2048 --batch-size 2 --steps 10 --rounds 6 --runs 2)
    fi
    # The results files go to results/gpu_acceptance/parity (DLBENCH_BENCH_RESULTS), not over benchmarks/results.
    export DLBENCH_BENCH_RESULTS=${DLBENCH_BENCH_RESULTS:-$PWD/results/gpu_acceptance/parity}
    mkdir -p "$DLBENCH_BENCH_RESULTS"
    status=0
    PYTHONPATH=workflow "$python" benchmarks/frameworks.py --framework pytorch --precision amp "${device[@]}" \
        "${resnet[@]}" || status=$?
    PYTHONPATH=workflow "$python" benchmarks/frameworks.py --framework pytorch --precision amp "${device[@]}" \
        "${llama[@]}" || status=$?
    exit "$status"
fi

[[ "${1:-}" == --dry-run && $mode == full ]] && { dry=true; shift; }
wheelhouse=""
if ! $dry; then
    wheelhouse=${1:?$usage}
    shift
    [[ "$wheelhouse" != /* ]] && wheelhouse="$PWD/$wheelhouse"
fi
python=""
[[ $# -gt 0 && $1 != --* ]] && { python=$1; shift; }
declare -A framework_python=()
while (($#)); do
    case "$1" in
        --python)
            framework_python[${2%%=*}]=${2#*=}
            shift 2
            ;;
        *)
            echo "gpu_acceptance: unknown argument '$1' ($usage)" >&2
            exit 2
            ;;
    esac
done
if $cpu && [[ -z $python ]]; then
    for framework in pytorch jax; do
        if [[ -z ${framework_python[$framework]:-} ]]; then
            found=$(find "$repo/.venvs" -maxdepth 3 -path "*/$framework-*/bin/python" 2>/dev/null | head -n 1)
            if [[ -z $found ]]; then
                echo "gpu_acceptance: --cpu without PYTHON needs this checkout's .venvs/$framework-*: build it" \
                    "(PYTHONPATH=workflow .venv/bin/python -m dlbench.venvs build --spec envs/$framework.yaml" \
                    "--venv-dir .venvs) or name an interpreter" >&2
                exit 2
            fi
            framework_python[$framework]=$found
        fi
    done
    python=${framework_python[pytorch]}
fi
python=${python:-python3}
for framework in pytorch jax; do
    [[ -z ${framework_python[$framework]:-} ]] && framework_python[$framework]=$python
done
interpreters="software={python: {pytorch: ${framework_python[pytorch]}, jax: ${framework_python[jax]}}}"

# ---- the check (on the GPU node, or rehearsed on this CPU in a scratch copy of the repository)
if [[ $mode == check ]]; then
    started=$(date +%s)
    if $cpu; then
        work=${ACCEPTANCE_WORKDIR:-$repo/results/gpu_acceptance/cpu-rehearsal}
        rm -rf "$work"
        mkdir -p "$work"
        # What a lent machine receives: the repository's files, none of this checkout's environments or results.
        tar -C "$repo" -c --exclude=./.git --exclude=./results --exclude=./.venv --exclude=./.venvs \
            --exclude=./.snakemake --exclude=./logs . | tar -C "$work" -x
        cd "$work"
    fi
    out=results/gpu_acceptance
    mkdir -p "$out"
    echo "== setup: the core environment from $wheelhouse over $python" >&2
    setup=0
    PYTHON=$python bash workflow/scripts/bootstrap.sh --wheelhouse "$wheelhouse" --system-site-packages || setup=$?
    setup_s=$(($(date +%s) - started))
    if ((setup != 0)); then
        echo "gpu_acceptance: setup failed after ${setup_s} s (exit $setup; bootstrap's message above)" >&2
        exit 1
    fi
    cpu_flag=()
    $cpu && cpu_flag=(--cpu)
    PYTHONPATH=workflow .venv/bin/python benchmarks/gpu_acceptance.py --check-study "$out/check.yaml" \
        "${cpu_flag[@]}"
    echo "== the check study through Snakemake (setup took ${setup_s} s)" >&2
    status=0
    .venv/bin/snakemake --cores all --configfile "$out/check.yaml" --config "$interpreters" || status=$?
    total_s=$(($(date +%s) - started))
    checked=0
    PYTHONPATH=workflow .venv/bin/python benchmarks/gpu_acceptance.py --report results/reports/latest \
        --stage-s "$total_s" --budget check --snakemake-exit "$status" --taken .venv/taken-from-the-interpreter.txt \
        "${cpu_flag[@]}" > "$out/check.txt.part" || checked=$?
    mv "$out/check.txt.part" "$out/check.txt"
    echo "setup: ${setup_s} s of the ${total_s} s" >> "$out/check.txt"
    cat "$out/check.txt"
    echo "== the table: $PWD/$out/check.txt; the report: $PWD/results/reports/latest" >&2
    exit "$checked"
fi

# ---- --full: the whole GPU study in resumable stages
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
        --config "software={python: {pytorch: ${framework_python[pytorch]}}}"
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
