#!/usr/bin/env bash
# Create or update the core environment .venv/ (Snakemake, uv, pandas, seaborn, ...) on a fresh machine.
# Framework environments are not made here: the workflow builds them itself (envs/*.yaml).
#   bash workflow/scripts/bootstrap.sh          the workflow's core environment
#   bash workflow/scripts/bootstrap.sh --test   plus pytest and ruff
#   --wheelhouse DIR         install from DIR alone (no index, no network); fill DIR with wheelhouse.sh
#                            (an optional package of envs/core.yaml that DIR lacks is left out, and said)
#   --system-site-packages   .venv sees the interpreter's site-packages, and a required package installed there
#                            is taken at the version it has (the pins hold for everything else)
# PYTHON=/path/to/python3 selects the interpreter.
set -euo pipefail

usage="usage: bash workflow/scripts/bootstrap.sh [--test] [--wheelhouse DIR] [--system-site-packages]"
test=false
wheelhouse=""
system_site=false
while (($#)); do
    case "$1" in
        --test) test=true ;;
        --wheelhouse)
            if [[ $# -lt 2 ]]; then
                echo "bootstrap: --wheelhouse needs a directory ($usage)" >&2
                exit 2
            fi
            wheelhouse=$2
            shift
            ;;
        --system-site-packages) system_site=true ;;
        *)
            echo "bootstrap: unknown argument '$1' ($usage)" >&2
            exit 2
            ;;
    esac
    shift
done
# DIR is named relative to the caller's directory.
if [[ -n "$wheelhouse" && "$wheelhouse" != /* ]]; then
    wheelhouse="$PWD/$wheelhouse"
fi
cd "$(dirname "$0")/../.."

python=${PYTHON:-python3}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "bootstrap: dlbench needs Python >= 3.11 as '$python' (set PYTHON=/path/to/python3.11)" >&2
    exit 1
fi
if [[ -n "$wheelhouse" && ! -d "$wheelhouse" ]]; then
    echo "bootstrap: wheelhouse $wheelhouse: no such directory (fill it on a connected machine with" \
        "workflow/scripts/wheelhouse.sh)" >&2
    exit 1
fi

requirements=(envs/core.yaml)
$test && requirements+=(envs/test.requirements.txt)
# Every mode but the default is part of the stamp, so that switching modes reinstalls.
mode=()
[[ -n "$wheelhouse" ]] && mode+=(--wheelhouse)
$system_site && mode+=(--system-site-packages)
venv_args=()
$system_site && venv_args+=(--system-site-packages)

# A setup script on a shared or lent node changes nothing outside this checkout: it installs no system package.
# Without ensurepip (Debian and Ubuntu ship it apart, as python3.X-venv), .venv is made without pip and pip is
# installed into it from the pip wheel in the wheelhouse, run as pip itself (python pip-*.whl/pip install ...).
if [[ ! -x .venv/bin/python ]]; then
    if "$python" -c 'import ensurepip' 2>/dev/null; then
        if ! "$python" -m venv "${venv_args[@]}" .venv; then
            rm -rf .venv
            echo "bootstrap: '$python -m venv ${venv_args[*]} .venv' failed (its message above)" >&2
            exit 1
        fi
    else
        pip_wheel=""
        if [[ -n "$wheelhouse" ]]; then
            pip_wheel=$(find "$wheelhouse" -maxdepth 1 -name 'pip-*.whl' | sort -V | tail -n 1)
        fi
        if [[ -z "$pip_wheel" ]]; then
            xy=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
            echo "bootstrap: '$python' has no ensurepip, so 'python -m venv' cannot put pip into .venv. Either" >&2
            echo "  give a wheelhouse with a pip wheel: --wheelhouse DIR (workflow/scripts/wheelhouse.sh puts one" \
                "there, or 'python3 -m pip download pip -d DIR' on a connected machine), or" >&2
            echo "  have the node's administrator install ensurepip: apt-get install python$xy-venv" >&2
            exit 1
        fi
        echo "bootstrap: '$python' has no ensurepip: .venv without it, pip from $pip_wheel" >&2
        "$python" -m venv --without-pip "${venv_args[@]}" .venv
        if ! .venv/bin/python "$pip_wheel/pip" install --quiet --disable-pip-version-check --no-index "$pip_wheel"; then
            rm -rf .venv
            echo "bootstrap: installing pip from $pip_wheel into .venv failed (pip's message above)" >&2
            exit 1
        fi
    fi
fi

# .venv sees the interpreter's site-packages exactly when --system-site-packages is given. When the interpreter
# is itself a virtual environment, a .pth file adds that environment's own site-packages too (a venv made from
# a venv otherwise sees only the site-packages of the interpreter beneath).
site_flag=false
$system_site && site_flag=true
if [[ -f .venv/pyvenv.cfg ]] && ! grep -qx "include-system-site-packages = $site_flag" .venv/pyvenv.cfg; then
    sed -i "s/^include-system-site-packages = .*/include-system-site-packages = $site_flag/" .venv/pyvenv.cfg
fi
rm -f .venv/lib/python*/site-packages/_dlbench_base.pth
if $system_site; then
    pth=$("$python" -c 'import site, sys
own = [p for p in site.getsitepackages() if sys.prefix != sys.base_prefix and p.startswith(sys.prefix)]
print("\n".join(f"import site; site.addsitedir({p!r})" for p in own))')
    if [[ -n "$pth" ]]; then
        printf '%s\n' "$pth" > "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/_dlbench_base.pth"
    fi
fi

# envs/core.yaml is the one list of core packages (a conda file): take its pip entries. From a wheelhouse, an
# optional one (`# optional`) that it lacks (wheelhouse.sh --lean) is left out, and said.
from_house=()
[[ -n "$wheelhouse" ]] && from_house=(--wheelhouse "$wheelhouse")
.venv/bin/python workflow/scripts/wheelhouse.py --core-requirements envs/core.yaml "${from_house[@]}" \
    > .venv/core-requirements.txt
lists=(.venv/core-requirements.txt)
if $system_site; then
    if $test; then
        cp envs/test.requirements.txt .venv/test-requirements.txt
        lists+=(.venv/test-requirements.txt)
    fi
    # A requirement that the interpreter's site-packages provide loses its pin (wheelhouse.py, as for --have).
    .venv/bin/python workflow/scripts/wheelhouse.py --relax-installed "${lists[@]}"
else
    $test && lists+=(envs/test.requirements.txt)
fi
if ((${#mode[@]})); then
    stamp=".venv/.dlbench-$({ cat "${requirements[@]}"; printf '%s\n' "${mode[@]}"; cat "${lists[@]}"; } | sha256sum | cut -c1-16)"
else
    stamp=".venv/.dlbench-$(cat "${requirements[@]}" | sha256sum | cut -c1-16)"
fi

if [[ ! -e "$stamp" ]]; then
    echo "bootstrap: installing ${requirements[*]} into .venv/${wheelhouse:+ from the wheelhouse $wheelhouse}" >&2
    offline=()
    [[ -n "$wheelhouse" ]] && offline=(--no-index --find-links "$wheelhouse")
    .venv/bin/python -m pip install --quiet --disable-pip-version-check "${offline[@]}" --upgrade pip
    args=()
    for list in "${lists[@]}"; do
        args+=(-r "$list")
    done
    if [[ -z "$wheelhouse" ]]; then
        .venv/bin/python -m pip install --quiet --disable-pip-version-check "${args[@]}"
    elif ! .venv/bin/python -m pip install --quiet --disable-pip-version-check "${offline[@]}" "${args[@]}" \
        2> .venv/pip-install.log; then
        cat .venv/pip-install.log >&2
        missing=$(sed -n 's/.*Could not find a version that satisfies the requirement \(.*\) (from versions.*/\1/p' \
            .venv/pip-install.log | head -n 1)
        here=$(.venv/bin/python -c 'import sys; print(f"Python {sys.version_info[0]}.{sys.version_info[1]}")')
        outside=""
        if [[ -n "$missing" && -f .venv/not-taken-from-the-interpreter.txt ]]; then
            outside=$(grep -i "^${missing%%[=<>!~ ]*} " .venv/not-taken-from-the-interpreter.txt || true)
        fi
        if [[ -n "$outside" ]]; then
            echo "bootstrap: the interpreter has $outside, and the wheelhouse $wheelhouse has no $missing to" \
                "install instead" >&2
        elif [[ -n "$missing" ]]; then
            echo "bootstrap: the wheelhouse $wheelhouse has no wheel for $missing that fits $here here" >&2
        else
            echo "bootstrap: pip cannot install from the wheelhouse $wheelhouse (its message above)" >&2
        fi
        echo "bootstrap: fill it with workflow/scripts/wheelhouse.sh for $here (for --system-site-packages, with" \
            "--have FILE, FILE the output of '$python -m pip list --format=freeze')" >&2
        exit 1
    else
        cat .venv/pip-install.log >&2
        rm .venv/pip-install.log
    fi
    # The commands of the requirements taken from the interpreter's site-packages, in .venv/bin too.
    $system_site && .venv/bin/python workflow/scripts/wheelhouse.py --base-scripts "${lists[@]}"
    rm -f .venv/.dlbench-*
    touch "$stamp"
fi
# Snakemake's command line reads a --configfile before any workflow code can: a startup line in .venv checks
# those files first, so a missing or unreadable study file gets dlbench's message (workflow/dlbench/preflight.py).
.venv/bin/python workflow/dlbench/preflight.py "$PWD/workflow" \
    > "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/_dlbench_preflight.pth"
echo "bootstrap: core environment ready: .venv/bin/snakemake" >&2
