#!/usr/bin/env bash
# Create or update the core environment .venv/ (Snakemake, uv, pandas, seaborn, ...) on a fresh machine.
# Framework environments are not made here: the workflow builds them itself (envs/*.yaml).
#   bash workflow/scripts/bootstrap.sh          the workflow's core environment
#   bash workflow/scripts/bootstrap.sh --test   plus pytest and ruff
set -euo pipefail
cd "$(dirname "$0")/../.."

python=${PYTHON:-python3}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "bootstrap: dlbench needs Python >= 3.11 as '$python' (set PYTHON=/path/to/python3.11)" >&2
    exit 1
fi

requirements=(envs/core.yaml)
[[ "${1:-}" == "--test" ]] && requirements+=(envs/test.requirements.txt)
stamp=".venv/.dlbench-$(cat "${requirements[@]}" | sha256sum | cut -c1-16)"

if [[ ! -x .venv/bin/python ]]; then
    if ! "$python" -m venv .venv 2>/dev/null; then
        # Debian/Ubuntu ship venv separately; install it when we may.
        if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
            rm -rf .venv
            apt-get update -qq && apt-get install -y -qq "python3-venv" "python$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')-venv" >/dev/null || true
            "$python" -m venv .venv
        else
            echo "bootstrap: '$python -m venv' failed: install your distribution's python3-venv package" >&2
            exit 1
        fi
    fi
fi

if [[ ! -e "$stamp" ]]; then
    echo "bootstrap: installing ${requirements[*]} into .venv/" >&2
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
    # envs/core.yaml is the one list of core packages (a conda file): take its pip entries.
    sed -n 's/^ *- \([A-Za-z0-9_.-]*==[^ ]*\)$/\1/p' envs/core.yaml > .venv/core-requirements.txt
    args=(-r .venv/core-requirements.txt)
    [[ "${1:-}" == "--test" ]] && args+=(-r envs/test.requirements.txt)
    .venv/bin/python -m pip install --quiet --disable-pip-version-check "${args[@]}"
    rm -f .venv/.dlbench-*
    touch "$stamp"
fi
echo "bootstrap: core environment ready: .venv/bin/snakemake" >&2
