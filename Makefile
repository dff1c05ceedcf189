# The two commands of the README's Quick start, and what they stand on.
JOBS ?= $(shell nproc)
BUILD ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan

.PHONY: demo test setup build build-asan tsan bench clean zoo digits

setup:
	@bash scripts/setup.sh

build: setup
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

build-asan: setup
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DAMPFUSE_SANITIZE=ON -DAMPFUSE_BUILD_BENCH=OFF >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)

demo: build
	@./$(BUILD)/ampfuse run --amp bf16 --cast-params-offline --repeat 20

# The whole suite twice: the release build, then under ASan + UBSan (without the
# exhaustive 2^32-input checks, which take minutes there and test arithmetic, not memory).
test: build build-asan
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
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

bench: build
	@./$(BUILD)/ampfuse_bench

# The GluonCV model-zoo corpus (docs/model_zoo.md): on demand, not part of `make test`.
# ZOO_VENV: a virtual environment with mxnet 1.9.1 + gluoncv 0.10.5 (created when missing);
# ZOO_ARGS: options of tests/zoo/zoo.py (e.g. --models 'cifar_*' --timeout 300).
ZOO_VENV ?= $(BUILD)/zoo-venv
ZOO_ARGS ?=
zoo: build
	@bash tests/zoo/make_venv.sh $(ZOO_VENV)
	MXNET_SUBGRAPH_BACKEND=NONE $(ZOO_VENV)/bin/python tests/zoo/zoo.py --ampfuse $(BUILD)/ampfuse --out $(BUILD)/zoo $(ZOO_ARGS)

# The digits models trained in f32, bf16 and fp16 AMP (README.md, "ampfuse train"):
# prints the table and writes docs/digits_training.svg.
digits: build
	python3 scripts/digits_training.py --ampfuse $(BUILD)/ampfuse --svg docs/digits_training.svg

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD)
