#!/usr/bin/env bash
# Fill a wheelhouse on a connected machine for `bootstrap.sh --wheelhouse DIR` on one without a network.
#   bash workflow/scripts/wheelhouse.sh DIR [--python-version X.Y] [--platform TAG ...] [--test] [--have FILE]
#                                       [--lean]
# DIR receives wheels of envs/core.yaml's pip list (plus envs/test.requirements.txt with --test), of all their
# dependencies and of pip, for the target's Python and platform (default: this machine's). A manylinux tag
# stands for every older one (pip matches tags exactly). --have FILE: `pip list --format=freeze` taken on the
# target; its packages are not downloaded unless the requirements need other versions of them, and
# bootstrap.sh --system-site-packages takes them there. --lean: without the optional packages (`# optional` in
# envs/core.yaml: pyarrow, the report's Parquet copies), which bootstrap.sh then leaves out.
# A dependency with only an sdist is built here when it is pure Python, and refused otherwise.
# PYTHON=/path/to/python runs pip (>= 22.2); wheelhouse.py beside this script does the work.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
python=${PYTHON:-python3}

test=false
lean=()
args=()
for arg in "$@"; do
    if [[ "$arg" == --test ]]; then
        test=true
    elif [[ "$arg" == --lean ]]; then
        lean=(--lean)
    else
        args+=("$arg")
    fi
done
if [[ ${#args[@]} == 0 || "${args[0]}" == -* ]]; then
    sed -n '2,13s/^# \{0,1\}//p' "$0" >&2
    exit 2
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# envs/core.yaml is the one list of core packages (a conda file): its pip entries, as bootstrap.sh takes them.
"$python" "$root/workflow/scripts/wheelhouse.py" --core-requirements "$root/envs/core.yaml" "${lean[@]}" \
    > "$work/core-requirements.txt"
lists=("$work/core-requirements.txt")
$test && lists+=("$root/envs/test.requirements.txt")
"$python" "$root/workflow/scripts/wheelhouse.py" "${args[@]}" --requirements "${lists[@]}"
