#!/usr/bin/env bash
# Creates the virtual environment tests/zoo/zoo.py runs in: MXNet 1.9.1 and GluonCV 0.10.5.
# GluonCV goes in with --no-deps and its imports are listed with pins: anything unpinned
# pulls NumPy 2, which MXNet 1.9.1 cannot load.
# Usage: tests/zoo/make_venv.sh VENV_DIR   (does nothing when VENV_DIR/bin/python imports both)
set -euo pipefail
venv="${1:?usage: make_venv.sh VENV_DIR}"
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import mxnet, gluoncv" 2>/dev/null; then
  exit 0
fi
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet 'mxnet==1.9.1' 'numpy<1.24'
"$venv/bin/pip" install --quiet --no-deps 'gluoncv==0.10.5.post0'
"$venv/bin/pip" install --quiet 'numpy<1.24' packaging tqdm requests portalocker Pillow yacs autocfg \
  'scipy<1.12' 'pandas<2.1' 'matplotlib<3.8' 'opencv-python-headless<4.9'
"$venv/bin/python" -c "import mxnet, gluoncv, numpy; print('zoo venv:', mxnet.__version__, gluoncv.__version__, numpy.__version__)"
