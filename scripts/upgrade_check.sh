#!/usr/bin/env bash
# The measured bump of requirements/lock.txt (docs/dependencies.md). Resolves a candidate lock in a scratch folder,
# the newest versions setup.cfg allows (torch stays at lock.in's pin), or with -P the lock with one package moved to a
# given version (how the floors are measured); installs it as install.sh does into a scratch environment; runs the
# fast lane there (or only the pytest targets given); prints each version that differs from the lock and the verdict.
# With --adopt a passing candidate becomes requirements/lock.txt.
#
#   bash scripts/upgrade_check.sh                                   newest allowed, whole fast lane
#   bash scripts/upgrade_check.sh tests/test_hf.py tests/test_st.py newest allowed, a named subset of the fast lane
#   bash scripts/upgrade_check.sh -P transformers==5.0.0 tests/test_hf.py    one package moved, a subset
#   bash scripts/upgrade_check.sh --venv /tmp/check tests/test_hf.py        reuse an environment between checks
#
# The lane runs in one process, as long as the fast lane takes there; the tests that read the real data find it as
# in any test run (../shared/data, or ISTAR_SHARED_DATA). On a machine shared with other jobs, keep it to one core
# and its output in a file:
#
#   ISTAR_SHARED_DATA=/path/to/data taskset -c 0 bash scripts/upgrade_check.sh > /tmp/upgrade_check.log 2>&1
#
# Exit code: 0 when the lane passed on the candidate, 1 when it failed, 2 for a bad argument.
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: bash scripts/upgrade_check.sh [--adopt] [--venv DIR] [-P PACKAGE==VERSION ...] [PYTEST_TARGET ...]"
adopt=0 venv="" pins=() targets=()
while [ $# -gt 0 ]; do
    case "$1" in
        --adopt) adopt=1 ;;
        --venv) [ $# -ge 2 ] || { echo "--venv needs a folder; $usage" >&2; exit 2; }; venv="$2"; shift ;;
        -P) [[ "${2:-}" == *==* ]] || { echo "-P needs PACKAGE==VERSION, got '${2:-}'; $usage" >&2; exit 2; }
            pins+=("$2"); shift ;;
        -h|--help) echo "$usage"; sed -n '2,/^$/s/^# \{0,1\}//p' scripts/upgrade_check.sh; exit 0 ;;
        -*) echo "unknown option $1; $usage" >&2; exit 2 ;;
        *) targets+=("$1") ;;
    esac
    shift
done
if [ "$adopt" = 1 ] && { [ ${#pins[@]} -gt 0 ] || [ ${#targets[@]} -gt 0 ]; }; then
    echo "--adopt takes the newest versions through the whole fast lane: no -P and no targets; $usage" >&2
    exit 2
fi

work=$(mktemp -d /tmp/istar-upgrade-check.XXXXXX)
if [ -z "$venv" ]; then  # an environment of this check's own, removed at its end (the candidate lock stays)
    venv="$work/venv"
    trap 'rm -rf "$work/venv"' EXIT
fi
# pip-tools, pinned, in an environment of its own (the lock's generator; its command heads the lock)
tools="${ISTAR_LOCK_TOOLS:-/tmp/istar-lock-tools}"
if [ ! -x "$tools/bin/pip-compile" ]; then
    python3 -m venv "$tools"
    "$tools/bin/python" -m pip install --quiet pip==26.0.1 pip-tools==7.6.2
fi

# The lock's command, exactly as its header shows it; the candidate is written by the same options.
options=(--allow-unsafe --extra=test --no-emit-find-links --no-emit-index-url)
sources=(requirements/lock.in setup.cfg)
export CUSTOM_COMPILE_COMMAND="pip-compile ${options[*]} --output-file=requirements/lock.txt --strip-extras ${sources[*]}"
if [ ${#pins[@]} -gt 0 ]; then
    cp requirements/lock.txt "$work/lock.txt"  # the lock's pins kept, but for the packages moved
    moves=(); for pin in "${pins[@]}"; do moves+=(--upgrade-package "$pin"); done
else
    moves=(--upgrade)
fi
echo "resolving the candidate lock into $work/lock.txt"
"$tools/bin/pip-compile" --quiet "${options[@]}" "${moves[@]}" --output-file="$work/lock.txt" --strip-extras \
    "${sources[@]}"

echo "installing it into $venv"
ISTAR_VENV="$venv" ISTAR_LOCK="$work/lock.txt" bash install.sh

lane=(-m "not slow")
[ ${#targets[@]} -gt 0 ] || targets=(tests)
echo "+ $venv/bin/python -m pytest -q -m 'not slow' ${targets[*]}"
if "$venv/bin/python" -m pytest -q -p no:cacheprovider "${lane[@]}" "${targets[@]}"; then
    passed=1
else
    passed=0
fi

export LC_ALL=C
pins_of() { grep -E '^[A-Za-z0-9]' "$1" | sed -E 's/ .*//; s/==/ /' | tr 'A-Z_' 'a-z-' | sort; }
echo
echo "versions that differ from requirements/lock.txt (lock -> candidate):"
join -a1 -a2 -e '(none)' -o 0,1.2,2.2 <(pins_of requirements/lock.txt) <(pins_of "$work/lock.txt") \
    | awk '$2 != $3 {print "  " $1 ": " $2 " -> " $3; n++} END {if (!n) print "  none"}'
what="${pins[*]:-the newest allowed versions}"
if [ "$passed" = 1 ]; then
    echo "PASSED: the fast lane (${targets[*]}) on $what"
    if [ "$adopt" = 1 ]; then
        cp "$work/lock.txt" requirements/lock.txt
        echo "adopted: requirements/lock.txt is the candidate (review git diff requirements/lock.txt, then commit)"
    fi
    exit 0
fi
echo "FAILED: the fast lane (${targets[*]}) on $what; the lock stays as it is"
exit 1
