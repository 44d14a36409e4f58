# GPT-2 trainer: CPU reference build (C, OpenBLAS, OpenMP) and CUDA build.
#   make train_gpt2 test_gpt2     CPU build
#   make test                     build and run every test group (tests/run_all.sh)
#   ZERO_STAGE=0|1|2|3            compile-time ZeRO stage (default 0)
CC ?= gcc
ZERO_STAGE ?= 0
CFLAGS ?= -O3 -march=native -ffp-contract=fast
CFLAGS += -std=gnu11 -Wall -Wextra -Wno-unused-parameter -Wno-unused-function -fopenmp -DZERO_STAGE=$(ZERO_STAGE) -I.
# OpenBLAS built for OpenMP shares the trainer's thread pool; the pthread build fights it for the
# cores (measured 4x slower on 2 cores). Prefer it when Debian's libopenblas-openmp-dev is there.
OPENBLAS_OPENMP_DIR ?= $(firstword $(wildcard /usr/lib/*/openblas-openmp))
ifneq ($(OPENBLAS_OPENMP_DIR),)
LDLIBS = -L$(OPENBLAS_OPENMP_DIR) -Wl,-rpath,$(OPENBLAS_OPENMP_DIR) -lopenblas -lm
else
LDLIBS = -lopenblas -lm
endif
BUILD = build

# Headers every CPU binary depends on (so a header edit rebuilds).
CPU_HEADERS = $(wildcard common/*.h cpu/*.h zero.cuh)

.PHONY: all test clean
all: train_gpt2 test_gpt2

train_gpt2: train_gpt2.c $(CPU_HEADERS)
	$(CC) $(CFLAGS) $< -o $@ $(LDLIBS)

test_gpt2: test_gpt2.c train_gpt2.c $(CPU_HEADERS)
	$(CC) $(CFLAGS) $< -o $@ $(LDLIBS)

# Unit tests: every tests/test_*.c becomes build/test_*
UNIT_TEST_SRCS = $(wildcard tests/test_*.c)
UNIT_TESTS = $(patsubst tests/%.c,$(BUILD)/%,$(UNIT_TEST_SRCS))
$(BUILD)/%: tests/%.c $(CPU_HEADERS)
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS) $< -o $@ $(LDLIBS)

unit_tests: $(UNIT_TESTS)

test: train_gpt2 test_gpt2 unit_tests
	bash tests/run_all.sh

clean:
	rm -rf $(BUILD) train_gpt2 test_gpt2 train_gpt2cu test_gpt2cu

# CUDA build targets live in cuda.mk (train_gpt2cu, test_gpt2cu, cuda_check).
-include cuda.mk
