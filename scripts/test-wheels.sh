#!/usr/bin/env bash
# Installs the wheels of scripts/build-wheels.sh into a new, empty Python environment, as a user
# would (pip install "openmm-nnp[cuda13,models]", OpenMM and its NVIDIA libraries from PyPI), away
# from the clone and any build tree, and checks them:
#   - every library of the installed plugin resolves all its dependencies (ldd -r; the CUDA
#     plugin may miss only the driver, libcuda.so.1, on a machine without one, and the Python
#     extension only Python's C API);
#   - python -m openmmnnp.selfcheck reports no load failure of this plugin;
#   - the Python tests pass against the installed package; a short main job runs.
# Usage: scripts/test-wheels.sh [DIST]   (default: dist/ in the clone)
#   NNP_VENV        environment whose Python creates the test environment (default ~/.cache/openmm-nnp/venv)
#   NNP_SHARED_DIR  models/ and molecules/ for the tests (default ../shared beside the clone)
#   NNP_PIP_OPTIONS extra options for pip install (e.g. --no-index --find-links=WHEELS offline)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dist="$(cd "${1:-$root/dist}" && pwd)"
shared="$(cd "${NNP_SHARED_DIR:-$root/../shared}" && pwd)"
build_venv="${NNP_VENV:-$HOME/.cache/openmm-nnp/venv}"
say() { printf '\033[1m[test-wheels]\033[0m %s\n' "$*"; }
fail() { echo "test-wheels: $*" >&2; exit 1; }
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/pyproject.toml")"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/nnp-wheels.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
venv="$tmp/venv"
say "new Python environment $venv"
"$build_venv/bin/python" -m venv "$venv"
py="$venv/bin/python"
say "pip install openmm-nnp[cuda13,models,openmmml]==$version from $dist (OpenMM, OpenMM-ML and their dependencies from PyPI)"
# shellcheck disable=SC2086
"$py" -m pip install --quiet --disable-pip-version-check --find-links "$dist" ${NNP_PIP_OPTIONS:-} \
  "openmm-nnp[cuda13,models,openmmml]==$version" pytest > "$tmp/pip.log" 2>&1 || { cat "$tmp/pip.log"; fail "pip install failed"; }
"$py" -m pip list --disable-pip-version-check 2>/dev/null | grep -iE "^(openmm|nvidia)" | sed 's/^/  /'

# Nothing of the clone or a build tree may be visible from here on.
cd "$tmp"
clean_env=(env -u PYTHONPATH -u LD_LIBRARY_PATH -u NNP_MODEL_PATH -u OPENMM_PLUGIN_DIR
           XDG_CACHE_HOME="$tmp/cache" NNP_SHARED_DIR="$shared" NNP_EXAMPLES_DIR="$root/examples")
site="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')"
location="$("${clean_env[@]}" "$py" -c 'import openmmnnp; print(openmmnnp.__file__)')"
case "$location" in "$site"/openmmnnp/*) ;; *) fail "openmmnnp imported from $location, not from $site";; esac
! grep -rlF "$root" "$site"/*.pth 2> /dev/null || fail "a .pth file in $site points into the clone"

say "ldd -r on the installed libraries"
libs=("$site"/OpenMM.libs/lib/libOpenMMNNP.so "$site"/OpenMM.libs/lib/libnnp.so
      "$site"/OpenMM.libs/lib/plugins/libOpenMMNNPReference.so "$site"/OpenMM.libs/lib/plugins/libOpenMMNNPCUDA.so
      "$site"/openmmnnp/_nnpswig*.so)
have_driver=0
ldconfig -p 2>/dev/null | grep -q "libcuda.so.1 " && have_driver=1
for lib in "${libs[@]}"; do
  [ -f "$lib" ] || fail "not installed: $lib"
  out="$(cd / && env -u LD_LIBRARY_PATH ldd -r "$lib" 2>&1)" || true
  bad="$(grep -E "not found|undefined symbol" <<< "$out" || true)"
  if [[ "$lib" == */_nnpswig*.so ]]; then
    # A Python extension: the interpreter that imports it provides Python's C API.
    bad="$(grep -vE "undefined symbol: _?Py[A-Za-z0-9_]+" <<< "$bad" || true)"
  fi
  if [ "$have_driver" -eq 0 ] && [[ "$lib" == */libOpenMMNNPCUDA.so ]]; then
    # Without a driver: libcuda.so.1 is missing, and with it the driver API symbols (cu*) only.
    bad="$(grep -vE "libcuda\.so\.1 => not found|undefined symbol: cu[A-Z][A-Za-z0-9_]*" <<< "$bad" || true)"
  fi
  [ -z "$bad" ] || { echo "$out"; fail "$(basename "$lib") does not resolve all its dependencies"; }
  printf '  %-48s ok\n' "${lib#"$site"/}"
done

say "python -m openmmnnp.selfcheck"
status=0
"${clean_env[@]}" "$py" -m openmmnnp.selfcheck > "$tmp/selfcheck.log" 2>&1 || status=$?
sed 's/^/  /' "$tmp/selfcheck.log"
[ "$status" -eq 0 ] || fail "selfcheck reports a load failure of this plugin"

say "Python tests against the installed package"
cp -r "$root/python/tests" "$tmp/tests"
status=0
"${clean_env[@]}" "$py" -m pytest -q -p no:cacheprovider "$tmp/tests" > "$tmp/pytest.log" 2>&1 || status=$?
if [ "$status" -ne 0 ]; then cat "$tmp/pytest.log"; fail "Python tests failed against the installed wheels"; fi
tail -n 3 "$tmp/pytest.log" | sed 's/^/  /' 

say "main job (short): python -m openmmnnp.simulate --count 2 --steps 20 --minimize 5"
"${clean_env[@]}" "$py" -m openmmnnp.simulate --count 2 --steps 20 --minimize 5 > "$tmp/main.log" 2>&1 \
  || { cat "$tmp/main.log"; fail "the main job failed"; }
tail -n 6 "$tmp/main.log" | sed 's/^/  /'
say "the wheels install and work"
