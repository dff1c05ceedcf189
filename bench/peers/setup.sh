#!/usr/bin/env bash
# The peers' two virtual environments, from PyPI only (issue 18's peer harness):
#   $AMPFUSE_PEERS_DIR/venv-torch  torch + torchvision + jax[cpu] + numpy
#   $AMPFUSE_PEERS_DIR/venv-mxnet  mxnet 1.9.1 + numpy<1.24 (mxnet 1.9.1 uses np.bool etc.,
#                                   removed in numpy 1.24)
# Two environments because MXNet 1.9.1 needs an old numpy that current torch/jax refuse.
# Idempotent: an environment whose packages already import is left as it is.
# PyPI's torch wheel pulls its CUDA libraries (several GB); only its CPU side is used.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
DIR="${AMPFUSE_PEERS_DIR:-$ROOT/build/peers}"
PY=python3
mkdir -p "$DIR"

make_venv() {  # name, import check, pip packages...
  local name="$1" check="$2"; shift 2
  local venv="$DIR/$name"
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$check" >/dev/null 2>&1; then
    echo "[peers] $venv: already installed"
    return
  fi
  echo "[peers] creating $venv: $*"
  [ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet "$@"
  "$venv/bin/python" -c "$check"
}

avail_gb=$(df -Pk "$DIR" | awk 'NR==2 {print int($4/1048576)}')
if [ "$avail_gb" -lt 12 ]; then
  echo "[peers] warning: only ${avail_gb} GB free under $DIR; torch's wheels need about 10 GB" >&2
fi

make_venv venv-torch "import torch, torchvision, jax, numpy" torch torchvision 'jax[cpu]' numpy
make_venv venv-mxnet "import mxnet, numpy; assert mxnet.__version__ == '1.9.1'" \
  mxnet==1.9.1 'numpy<1.24'

"$DIR/venv-torch/bin/python" -c "import torch, torchvision, jax, numpy; \
print('[peers] torch', torch.__version__, 'torchvision', torchvision.__version__, 'jax', jax.__version__, 'numpy', numpy.__version__)"
"$DIR/venv-mxnet/bin/python" -c "import mxnet, numpy; \
print('[peers] mxnet', mxnet.__version__, 'numpy', numpy.__version__)"
