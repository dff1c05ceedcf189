# The two commands of the README's Quick start, and what they stand on.
JOBS ?= $(shell nproc)
BUILD ?= build
ASAN_BUILD ?= build-asan
# The one virtual environment of every Python part (scripts/python_env.sh): the Python
# module's build and tests, the MXNet extension's tests, the GluonCV zoo.
PY_VENV ?= $(BUILD)/py-venv
TSAN_BUILD ?= build-tsan

.PHONY: demo test setup build build-asan tsan bench clean zoo digits pip-check fuzz bigmem peers

setup:
	@bash scripts/setup.sh

build: setup
	@bash scripts/python_env.sh $(PY_VENV)
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DAMPFUSE_BUILD_PYTHON=ON \
	  -DPython_EXECUTABLE=$(abspath $(PY_VENV))/bin/python >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

build-asan: setup
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DAMPFUSE_SANITIZE=ON -DAMPFUSE_BUILD_BENCH=OFF >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)

demo: build
	@./$(BUILD)/ampfuse run --amp bf16 --cast-params-offline --repeat 20

# The whole suite twice: the release build, then under ASan + UBSan (without the
# exhaustive 2^32-input checks, which take minutes there and test arithmetic, not memory).
# Neither runs the bigmem label (4 GiB tensors: `make bigmem`).
test: build build-asan
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE bigmem
	cd $(ASAN_BUILD) && ctest --output-on-failure -j $(JOBS) -LE exhaustive

# The concurrency tests under ThreadSanitizer (on demand, not in `make test`: a third build
# of the libraries is too slow for CI): threads compiling through one kernel cache and one
# disk cache, one executable run from several threads, blocks called from several threads.
# Kernels and oneDNN run on OpenMP's threads, and libgomp is not instrumented (TSan would
# report its barriers as races), so the run forces one OpenMP thread: OMP_NUM_THREADS=1
# (runtime/thread_pool.cpp then runs every chunk on the calling thread). The threads under
# test are the tests' own std::threads. tests/tsan.supp holds suppressions (none needed so
# far). The JitThreadPool tests are left out: they test the OpenMP team itself.
TSAN_FILTER ?= KernelCache*:DiskCache*:ExecutorThreads*:Block*:AmpScope*:Jit.*:-DiskCacheCli*
tsan: setup
	@cmake -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAMPFUSE_TSAN=ON -DAMPFUSE_BUILD_BENCH=OFF >/dev/null
	@cmake --build $(TSAN_BUILD) -j $(JOBS) --target ampfuse_concurrency_tests
	cd $(TSAN_BUILD) && OMP_NUM_THREADS=1 AMPFUSE_STRICT=1 AMPFUSE_CACHE_DIR=$$PWD/kernel-cache \
	  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/tests/tsan.supp" \
	  ./ampfuse_concurrency_tests --gtest_filter='$(TSAN_FILTER)'

# The long fuzzing runs (scripts/fuzz.sh): the parser targets under libFuzzer (clang 14,
# its own build directory), FUZZ_RUNS executions each, then FUZZ_GRAPHS random graphs
# through the differential fuzzer. Hours on a small machine; not part of `make test`.
FUZZ_BUILD ?= build-libfuzzer
fuzz: build
	bash scripts/fuzz.sh $(BUILD) $(FUZZ_BUILD)

# A fused bf16 kernel over 2^31 + 17 elements (tests/big_tensor_test.cpp; ~9 GiB, skips
# with a message when less than 16 GiB is available).
bigmem: build
	cd $(BUILD) && ctest --output-on-failure -L bigmem

bench: build
	@./$(BUILD)/ampfuse_bench

# Issue 18's peer harness (bench/README.md, "Peers (bench/peers)"): ampfuse against torch
# eager, torch.compile, JAX and MXNet 1.9.1, kernels and models, in one sitting; prints the
# table and writes $(PEERS_DIR)/latest.md. On demand, never in `make test`: its virtual
# environments take ~7 GB from PyPI (AMPFUSE_PEERS_DIR, default build/peers) and a full run
# takes ~15-25 min on 2 cores. PEERS_ARGS: options of bench/peers/run.py (e.g. --models
# cifar_resnet20_v2 --dtypes bf16 --skip-kernels).
PEERS_DIR ?= $(or $(AMPFUSE_PEERS_DIR),$(BUILD)/peers)
peers: build
	@AMPFUSE_PEERS_DIR=$(PEERS_DIR) bash bench/peers/setup.sh
	$(PEERS_DIR)/venv-torch/bin/python bench/peers/run.py --peers-dir $(PEERS_DIR) --build $(BUILD) $(PEERS_ARGS)

# The GluonCV model-zoo corpus (docs/model_zoo.md): on demand, not part of `make test`.
# ZOO_VENV: a virtual environment with mxnet 1.9.1 + gluoncv 0.10.5 (created when missing;
# by default the Python one, PY_VENV);
# ZOO_ARGS: options of tests/zoo/zoo.py (e.g. --models 'cifar_*' --timeout 300).
ZOO_VENV ?= $(PY_VENV)
ZOO_ARGS ?=
zoo: build
	@bash scripts/python_env.sh $(ZOO_VENV)
	MXNET_SUBGRAPH_BACKEND=NONE $(ZOO_VENV)/bin/python tests/zoo/zoo.py --ampfuse $(BUILD)/ampfuse --out $(BUILD)/zoo $(ZOO_ARGS)

# The digits models trained in f32, bf16 and fp16 AMP (README.md, "ampfuse train"):
# prints the table and writes docs/digits_training.svg.
digits: build
	python3 scripts/digits_training.py --ampfuse $(BUILD)/ampfuse --svg docs/digits_training.svg

# `pip install .` in a fresh virtual environment, then the Python package's tests against the
# installed package from outside the source tree (README, "Python"). On demand: it builds the
# library again (scikit-build-core's build folder build-pip/ is kept, so a second run is quick;
# with CMAKE_CXX_COMPILER_LAUNCHER=ccache the first one takes build/'s objects from the cache:
# hence also build/'s compiler, by the same name).
PIP_CHECK_VENV ?= $(BUILD)/pip-check-venv
pip-check: setup
	rm -rf $(PIP_CHECK_VENV)
	python3 -m venv $(PIP_CHECK_VENV)
	$(PIP_CHECK_VENV)/bin/python -m pip install --quiet --disable-pip-version-check pytest 'numpy<1.24' 'ml_dtypes==0.3.2'
	CC=cc CXX=c++ CMAKE_BUILD_PARALLEL_LEVEL=$(JOBS) $(PIP_CHECK_VENV)/bin/python -m pip install --disable-pip-version-check .
	cd $(PIP_CHECK_VENV) && AMPFUSE_CLI=none bin/python -m pytest -q -p no:cacheprovider $(CURDIR)/tests/python/core

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) $(FUZZ_BUILD) build-pip
