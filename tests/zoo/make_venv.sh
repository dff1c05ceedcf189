#!/usr/bin/env bash
# The GluonCV zoo's virtual environment is the Python one: scripts/python_env.sh makes it.
# Usage: tests/zoo/make_venv.sh VENV_DIR
exec bash "$(dirname "$0")/../../scripts/python_env.sh" "${1:?usage: make_venv.sh VENV_DIR}"
