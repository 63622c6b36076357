# forge: `make` builds the CLI and examples (CPU only), `make test` runs every suite,
# `make fuzz SECONDS=N` fuzzes the GGUF reader, `make demo` answers a prompt with SmolLM2.

CC       ?= cc
CFLAGS   ?= -O2
WARN      = -std=c99 -Wall -Wextra -Werror -pedantic
LDLIBS    = -lm -pthread
BUILD     = build$(if $(GPU),-$(GPU))
FIXTURES ?= ../shared/fixtures
PYTHON   ?= python3
SECONDS  ?= 60
FUZZ_CC  ?= clang
# the sanitizer builds use clang where it is installed: gcc 12's UBSan takes minutes on forge.h's
# grouped AVX-512 products (1 min 52 s a file against clang's 10 s)
SAN_CC   ?= $(shell command -v clang >/dev/null 2>&1 && echo clang || echo $(CC))
SANITIZE  = -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
MODEL_CACHE ?= $(HOME)/.cache/forge

# forge serve needs libmicrohttpd and cJSON (Debian: libmicrohttpd-dev libcjson-dev); without their headers
# the CLI is built without the server and `forge serve` says so
HAVE_SERVE := $(shell $(CC) -E -include microhttpd.h -include cjson/cJSON.h -x c /dev/null >/dev/null 2>&1 && echo 1)
SERVE_FLAGS = $(if $(HAVE_SERVE),-DFORGE_SERVE)
SERVE_LIBS  = $(if $(HAVE_SERVE),-lmicrohttpd -lcjson)

EXAMPLES = $(patsubst examples/%.c,$(BUILD)/%,$(wildcard examples/*.c))
TESTBINS = $(BUILD)/test_arena $(BUILD)/test_arena_san $(BUILD)/test_context $(BUILD)/test_context_san $(BUILD)/test_plan $(BUILD)/test_plan_san $(BUILD)/test_gguf $(BUILD)/test_gguf_san $(BUILD)/test_types $(BUILD)/test_types_san $(BUILD)/test_sampler $(BUILD)/test_sampler_san $(BUILD)/test_tokenizer $(BUILD)/test_tokenizer_san $(BUILD)/test_matmul $(BUILD)/test_matmul_san $(BUILD)/test_smollm2 $(BUILD)/test_llm $(BUILD)/test_llm_san $(BUILD)/test_capture $(BUILD)/test_capture_san $(BUILD)/test_greedy $(BUILD)/test_seqs $(BUILD)/test_seqs_san $(BUILD)/test_split $(BUILD)/test_split_san $(BUILD)/dump_tensors

.PHONY: all test test-gpu fuzz demo clean check-builds python-deps

all: $(BUILD)/forge $(EXAMPLES)

$(BUILD):
	mkdir -p $(BUILD)

# With GPU=nvidia or GPU=amd the CLI and the examples are compiled with FORGE_HIP and linked with
# the kernels by the GPU compiler; without GPU they are plain C.
ifneq ($(GPU),)
GPU_OBJ   = $(BUILD)/forge_kernels.o
BUILD_EXE = $(CC) $(WARN) $(CFLAGS) -DFORGE_HIP -c $< -o $@.o && $(GPU_LINK) $@.o $(GPU_OBJ) -o $@ -lm -lpthread
else
BUILD_EXE = $(CC) $(WARN) $(CFLAGS) $< -o $@ $(LDLIBS)
endif

ifneq ($(GPU),)
BUILD_CLI = $(CC) $(WARN) $(CFLAGS) $(SERVE_FLAGS) -DFORGE_HIP -c $< -o $@.o && $(GPU_LINK) $@.o $(GPU_OBJ) -o $@ $(SERVE_LIBS) -lm -lpthread
else
BUILD_CLI = $(CC) $(WARN) $(CFLAGS) $(SERVE_FLAGS) $< -o $@ $(SERVE_LIBS) $(LDLIBS)
endif

$(BUILD)/forge: tools/forge.c tools/mkmodel.c tools/extract.c tools/serve.c forge.h $(GPU_OBJ) | $(BUILD)
	$(BUILD_CLI)

$(BUILD)/%: examples/%.c forge.h $(GPU_OBJ) | $(BUILD)
	$(BUILD_EXE)

$(BUILD)/test_%: tests/test_%.c forge.h tests/test.h tests/gguf_writer.h tests/random_blocks.h tests/kv_rounding.h tests/greedy_data.h | $(BUILD)
	$(CC) $(WARN) $(CFLAGS) -g $< -o $@ $(LDLIBS)

# the same suites under AddressSanitizer and UndefinedBehaviorSanitizer
$(BUILD)/test_%_san: tests/test_%.c forge.h tests/test.h tests/gguf_writer.h tests/random_blocks.h tests/kv_rounding.h tests/greedy_data.h | $(BUILD)
	$(SAN_CC) $(WARN) -O1 -g $(SANITIZE) $< -o $@ $(LDLIBS)

$(BUILD)/dump_tensors: tests/dump_tensors.c forge.h | $(BUILD)
	$(CC) $(WARN) $(CFLAGS) $< -o $@ $(LDLIBS)

# the binaries build in parallel, one job per processor; the suites then run one after another
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
test: python-deps
	$(MAKE) -j$(JOBS) all $(TESTBINS)
	sh tools/fetch_model.sh smollm2 $(MODEL_CACHE)
	sh tools/fetch_model.sh gemma3 $(MODEL_CACHE)
	sh tools/fetch_model.sh qwen25coder $(MODEL_CACHE)
	FORGE_FIXTURES=$(FIXTURES) FORGE_SMOLLM2=$(SMOLLM2) FORGE_GEMMA3=$(GEMMA3) FORGE_QWEN25CODER=$(QWEN25CODER) \
		PYTHON=$(PYTHON) sh tests/run.sh

# the fixture checks compare with the gguf Python package's own reading of every file; the server's
# check speaks to forge serve through the openai package; the Python package's tests
# (tests/check_python.sh) need pytest and setuptools to build it in place
python-deps:
	@$(PYTHON) -c "import gguf, numpy, openai, pytest, setuptools" 2>/dev/null || \
		$(PYTHON) -m pip install --quiet gguf numpy openai pytest setuptools || \
		$(PYTHON) -m pip install --quiet --break-system-packages gguf numpy openai pytest setuptools

# forge.h alone, as C99 with gcc and clang and as C++, with and without FORGE_STATIC
check-builds: | $(BUILD)
	sh tests/check_builds.sh

$(BUILD)/fuzz_gguf: tests/fuzz_gguf.c forge.h | $(BUILD)
	$(FUZZ_CC) -g -O1 -fsanitize=fuzzer,address,undefined $< -o $@ $(LDLIBS)

fuzz: $(BUILD)/fuzz_gguf
	rm -rf $(BUILD)/fuzz_seeds && mkdir -p $(BUILD)/fuzz_seeds $(BUILD)/fuzz_corpus
	$(PYTHON) tests/make_seeds.py $(BUILD)/fuzz_seeds
	$(BUILD)/fuzz_gguf -max_total_time=$(SECONDS) -max_len=65536 -print_final_stats=1 \
		-artifact_prefix=$(BUILD)/ $(BUILD)/fuzz_corpus $(BUILD)/fuzz_seeds

SMOLLM2 = $(MODEL_CACHE)/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
GEMMA3 = $(MODEL_CACHE)/gemma3/gemma-3-270m-q4_k_m.gguf
QWEN25CODER = $(MODEL_CACHE)/qwen25coder/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
DEMO_PROMPT ?= Explain in two sentences why the sky is blue.

# fetch SmolLM2-135M-Instruct once, build, and answer a prompt (on the CPU in a build without a GPU)
demo: $(BUILD)/forge
	sh tools/fetch_model.sh smollm2 $(MODEL_CACHE)
	$(BUILD)/forge run -m $(SMOLLM2) --chat -p "$(DEMO_PROMPT)" -n 200

# GPU builds: build-nvidia/ or build-amd/, the CLI and examples linked with the kernels.
# NVCC_ARCH picks the machine code (e.g. -arch=sm_90 on H100/H200); empty: nvcc's default plus PTX.
# -arch=sm_90 compiles the kernels as sm_90a machine code (the warpgroup instructions of the prompt
# products, which run only on compute capability 9.0) plus compute_90 PTX for later devices, the two
# compilations side by side (--threads 2: 4 min 19 s on an H100 host, 7 min one after the other).
ifeq ($(GPU),nvidia)
NVCC_ARCH ?=
SM90 = $(filter -arch=sm_90,$(NVCC_ARCH))
NVCC_CODE = $(if $(SM90),-gencode arch=compute_90a$(comma)code=sm_90a -gencode arch=compute_90$(comma)code=compute_90,$(NVCC_ARCH))
comma := ,
GPU_LINK = nvcc $(NVCC_CODE)
all: $(BUILD)/forge_kernels.o
$(BUILD)/forge_kernels.o: forge_kernels.hip | $(BUILD)
	nvcc -x cu -O3 $(NVCC_CODE) $(if $(SM90),--threads 2) -c $< -o $@

# every kernel against the CPU reference on the first device (needs a GPU and the CUDA runtime)
$(BUILD)/test_kernels.o: tests/test_kernels.c forge.h tests/test.h tests/random_blocks.h tests/kv_rounding.h | $(BUILD)
	$(CC) $(WARN) $(CFLAGS) -c $< -o $@
$(BUILD)/test_kernels: $(BUILD)/forge_kernels.o $(BUILD)/test_kernels.o
	nvcc $^ -o $@ -lm -lpthread
$(BUILD)/test_gpu: tests/test_gpu.c forge.h tests/test.h $(BUILD)/forge_kernels.o | $(BUILD)
	$(CC) $(WARN) $(CFLAGS) -DFORGE_HIP -c $< -o $@.o && nvcc $@.o $(BUILD)/forge_kernels.o -o $@ -lm -lpthread
# a real model's greedy continuation on the GPU against the reference (FORGE_TEST_BACKEND=gpu)
$(BUILD)/test_greedy_gpu: tests/test_greedy.c forge.h tests/test.h tests/greedy_data.h $(BUILD)/forge_kernels.o | $(BUILD)
	$(CC) $(WARN) $(CFLAGS) -DFORGE_HIP -c $< -o $@.o && nvcc $@.o $(BUILD)/forge_kernels.o -o $@ -lm -lpthread
# many sequences on the GPU against each sequence alone (FORGE_TEST_BACKEND=gpu)
$(BUILD)/test_seqs_gpu: tests/test_seqs.c forge.h tests/test.h $(BUILD)/forge_kernels.o | $(BUILD)
	$(CC) $(WARN) $(CFLAGS) -DFORGE_HIP -c $< -o $@.o && nvcc $@.o $(BUILD)/forge_kernels.o -o $@ -lm -lpthread
# a model split by layers across devices on the GPU: the whole model's logits at every boundary
# (FORGE_TEST_BACKEND=gpu; FORGE_TEST_DEVICES=2 puts the second part on GPU 1)
$(BUILD)/test_split_gpu: tests/test_split.c forge.h tests/test.h $(BUILD)/forge_kernels.o | $(BUILD)
	$(CC) $(WARN) $(CFLAGS) -DFORGE_HIP -c $< -o $@.o && nvcc $@.o $(BUILD)/forge_kernels.o -o $@ -lm -lpthread
# the long fixtures (1,536 tokens) on every GPU path against their float64 reference
$(BUILD)/test_long_gpu: tests/test_long_gpu.c forge.h tests/test.h $(BUILD)/forge_kernels.o | $(BUILD)
	$(CC) $(WARN) $(CFLAGS) -DFORGE_HIP -c $< -o $@.o && nvcc $@.o $(BUILD)/forge_kernels.o -o $@ -lm -lpthread
# the kernels' timeline, inside replayed graphs too, for any CUDA program (tools/kernel_trace.c)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(shell command -v nvcc))
CUPTI_FLAGS = -isystem $(CUDA_HOME)/include -isystem $(CUDA_HOME)/extras/CUPTI/include -L$(CUDA_HOME)/lib64 -L$(CUDA_HOME)/lib \
	-L$(CUDA_HOME)/extras/CUPTI/lib64
$(BUILD)/libkernel_trace.so: tools/kernel_trace.c | $(BUILD)
	$(CC) $(WARN) $(CFLAGS) -shared -fPIC $(CUPTI_FLAGS) $< -o $@ -lcupti
# the least time the card takes to read a decode step's bytes, with and without its chain of launches
# (tools/step_floor.cu; tools/step_floor.py makes its input from `forge info --json`)
all: $(BUILD)/step_floor
$(BUILD)/step_floor: tools/step_floor.cu | $(BUILD)
	nvcc -O3 $(NVCC_CODE) $< -o $@
# GPU_MODEL: a model of a few hundred MiB for the memory invariants (forge mkmodel makes one)
test-gpu: $(BUILD)/test_kernels $(BUILD)/test_gpu $(BUILD)/test_seqs_gpu $(BUILD)/test_long_gpu $(BUILD)/test_split_gpu
	@test -n "$(GPU_MODEL)" || { echo "test-gpu needs GPU_MODEL=FILE for the memory checks (forge mkmodel makes one)"; false; }
	$(BUILD)/test_kernels
	$(BUILD)/test_gpu $(FIXTURES) "$(GPU_MODEL)"
	FORGE_FIXTURES=$(FIXTURES) FORGE_TEST_BACKEND=gpu $(BUILD)/test_seqs_gpu
	FORGE_FIXTURES=$(FIXTURES) FORGE_TEST_BACKEND=gpu FORGE_TEST_DEVICES=$$(nvidia-smi -L 2>/dev/null | wc -l) FORGE_TEST_MODEL="$(GPU_MODEL)" $(BUILD)/test_split_gpu
	$(BUILD)/test_long_gpu $(FIXTURES)
else
test-gpu:
	@echo "test-gpu needs GPU=nvidia (make GPU=nvidia test-gpu)" && false
endif
ifeq ($(GPU),amd)
HIP_ARCHS ?= gfx90a,gfx1030
GPU_LINK = hipcc --offload-arch=$(HIP_ARCHS)
# Debian's hipcc needs to be told where the rocm-device-libs bitcode lives
ROCM_DEVICE_LIBS ?= $(shell dpkg -L rocm-device-libs 2>/dev/null | grep -m1 '\.bc$$' | xargs -r dirname)
HIPFLAGS += $(if $(ROCM_DEVICE_LIBS),--rocm-device-lib-path=$(ROCM_DEVICE_LIBS))
all: $(BUILD)/forge_kernels.o
$(BUILD)/forge_kernels.o: forge_kernels.hip | $(BUILD)
	hipcc --offload-arch=$(HIP_ARCHS) $(HIPFLAGS) -O3 -c $< -o $@
endif

clean:
	rm -rf $(BUILD)
