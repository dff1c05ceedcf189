# The two commands of the README's Quick start, and what they stand on.
JOBS ?= $(shell nproc)
BUILD ?= build
ASAN_BUILD ?= build-asan

.PHONY: demo test setup build build-asan bench clean zoo digits fuzz bigmem

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
# Neither runs the bigmem label (4 GiB tensors: `make bigmem`).
test: build build-asan
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE bigmem
	cd $(ASAN_BUILD) && ctest --output-on-failure -j $(JOBS) -LE exhaustive

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
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
