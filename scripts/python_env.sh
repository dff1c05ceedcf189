#!/usr/bin/env bash
# Creates (or completes) the one virtual environment every Python part of ampfuse runs in: the
# Python module's build (nanobind, scikit-build-core) and tests (pytest, ml_dtypes), the MXNet
# extension's tests (GluonNLP's BERT among them) and the GluonCV model zoo (tests/zoo/zoo.py).
# Pins: MXNet 1.9.1 cannot load NumPy 2, hence numpy<1.24 and every package that would pull a
# newer one pinned below it; GluonCV goes in with --no-deps and its imports are listed, pinned.
# ml_dtypes 0.3.2 is the newest release built against NumPy 1 (0.4 and later are built for
# NumPy 2). GluonNLP 0.10.0, the last release for MXNet 1.x, is a source package with a Cython
# extension: pip compiles it (g++, about 30 s), also --no-deps (its deps are numpy and
# packaging, both here).
# Usage: scripts/python_env.sh [VENV_DIR]   (default build/py-venv; quick and silent when VENV_DIR
# already imports everything)
set -euo pipefail
venv="${1:-build/py-venv}"
check="import mxnet, gluoncv, gluonnlp, numpy, ml_dtypes, nanobind, scikit_build_core, pytest"
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$check" 2>/dev/null; then
  exit 0
fi
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)
"${pip[@]}" 'mxnet==1.9.1' 'numpy<1.24'
"${pip[@]}" --no-deps 'gluoncv==0.10.5.post0' 'gluonnlp==0.10.0'
"${pip[@]}" 'numpy<1.24' packaging tqdm requests portalocker Pillow yacs autocfg \
  'scipy<1.12' 'pandas<2.1' 'matplotlib<3.8' 'opencv-python-headless<4.9' \
  'ml_dtypes==0.3.2' 'nanobind>=2.0' 'scikit-build-core>=0.8' pytest
"$venv/bin/python" -c "$check; print('python env:', '$venv', 'mxnet', mxnet.__version__, 'gluoncv', gluoncv.__version__, 'gluonnlp', gluonnlp.__version__, 'numpy', numpy.__version__, 'ml_dtypes', ml_dtypes.__version__, 'nanobind', nanobind.__version__)"
