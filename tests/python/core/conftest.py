# Shared fixtures of the Python package's tests: the repository's models and the `ampfuse`
# program the results are compared with (AMPFUSE_CLI, set by the ctest entry python_core;
# else build/ampfuse; tests that need it skip without it, as under `make pip-check`).
import os
import pathlib
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
MODELS = REPO / "models"


@pytest.fixture(scope="session")
def cli():
    path = os.environ.get("AMPFUSE_CLI") or str(REPO / "build" / "ampfuse")
    if not os.access(path, os.X_OK):
        pytest.skip(f"no ampfuse program at {path} to compare with")

    def run(*args, check=True):
        r = subprocess.run([path, *map(str, args)], capture_output=True, text=True)
        if check and r.returncode != 0:
            raise AssertionError(f"ampfuse {' '.join(map(str, args))}: exit {r.returncode}\n{r.stderr}")
        return r

    return run


@pytest.fixture(scope="session")
def models():
    return MODELS
