# GPT-2 trainer: CPU reference build (C, OpenBLAS, OpenMP) and CUDA build.
#   make train_gpt2 test_gpt2     CPU build
#   make test                     build and run every test group (tests/run_all.sh)
#   ZERO_STAGE=0|1|2|3            compile-time ZeRO stage (default 0)
#   ZERO_EXT=all|none             none: the lesson build, the ZeRO core without its extensions (train_gpt2,
#                                 train_gpt2cu; emulated: build/emu/lesson/train_gpt2cu_z<S>)
#   NO_USE_MPI=auto|0|1           1: build without Open MPI (one process, zero/cluster/mpi_single.h);
#                                 auto (default): 1 where no working mpicc is found
CC ?= gcc
ZERO_STAGE ?= 0
# ZERO_EXT=all|none: none is the lesson build of train_gpt2 (and of train_gpt2cu, cuda.mk), the ZeRO core
# alone (zero/no_extensions.h instead of the offload, ZeRO++, trace and tied-rows folders); their flags
# then give one error line.
ZERO_EXT ?= all
ifeq ($(filter all none,$(ZERO_EXT)),)
$(error ZERO_EXT=$(ZERO_EXT): expected all (the default) or none (the core alone))
endif
EXT_CFLAGS = $(if $(filter none,$(ZERO_EXT)),-DZERO_EXT=0)
CFLAGS ?= -O3 -march=native -ffp-contract=fast -fno-math-errno
CFLAGS += -std=gnu11 -Wall -Wextra -Wno-unused-parameter -Wno-unused-function -fopenmp -DZERO_STAGE=$(ZERO_STAGE) -I.
# BLAS (cpu/blas.h; measurements in README "Benchmark (CPU)", dev/bench/blas_candidates.sh):
#   auto (default)   a current OpenBLAS from PyPI (scipy-openblas32, installed by scripts/setup.sh):
#                    DYNAMIC_ARCH, knows every current x86-64 (Debian's 0.3.21 falls back to its SSE3
#                    kernel on Sapphire/Emerald Rapids); called sequentially, each sgemm split over
#                    the trainer's OpenMP threads (its own pthreads would spin against them).
#                    Without it: Debian's OpenMP build of OpenBLAS (libopenblas-openmp-dev).
#   openblas-debian  Debian's OpenMP OpenBLAS    mkl  oneMKL from PyPI (MKL_DIR=<prefix>/lib)
#   blis             Debian's OpenMP BLIS
BLAS ?= auto
OPENBLAS_OPENMP_DIR ?= $(firstword $(wildcard /usr/lib/*/openblas-openmp))
ifeq ($(BLAS),auto)
SCIPY_OPENBLAS_DIR ?= $(shell python3 -c "import scipy_openblas32 as s; print(s.get_lib_dir())" 2>/dev/null)
BLAS := $(if $(SCIPY_OPENBLAS_DIR),scipy-openblas,openblas-debian)
endif
ifeq ($(BLAS),scipy-openblas)
BLAS_CFLAGS = -DBLAS_SCIPY_OPENBLAS
BLAS_LDLIBS = -L$(SCIPY_OPENBLAS_DIR) -Wl,-rpath,$(SCIPY_OPENBLAS_DIR) -lscipy_openblas
else ifeq ($(BLAS),mkl)
mkl_lib = -l:$(notdir $(firstword $(wildcard $(MKL_DIR)/lib$(1).so.*)))
BLAS_CFLAGS = -DBLAS_MKL
BLAS_LDLIBS = -L$(MKL_DIR) -Wl,-rpath,$(MKL_DIR) -Wl,--no-as-needed $(call mkl_lib,mkl_intel_lp64) \
              $(call mkl_lib,mkl_gnu_thread) $(call mkl_lib,mkl_core) -lgomp -lpthread -ldl
else ifeq ($(BLAS),blis)
BLIS_DIR ?= $(firstword $(wildcard /usr/lib/*/blis-openmp))
BLAS_CFLAGS = -DBLAS_BLIS
BLAS_LDLIBS = -L$(BLIS_DIR) -Wl,-rpath,$(BLIS_DIR) -lblis
else ifneq ($(OPENBLAS_OPENMP_DIR),)
BLAS_CFLAGS = -DBLAS_OPENBLAS
BLAS_LDLIBS = -L$(OPENBLAS_OPENMP_DIR) -Wl,-rpath,$(OPENBLAS_OPENMP_DIR) -lopenblas
else
BLAS_CFLAGS = -DBLAS_OPENBLAS
BLAS_LDLIBS = -lopenblas
endif
CFLAGS += $(BLAS_CFLAGS)
LDLIBS = $(BLAS_LDLIBS) -lm
# Open MPI: the trainer links it (it runs as a singleton without mpirun), and every binary that
# includes zero.cuh needs its header, so its flags go to all; train_gpt2 builds with mpicc.
# Without Open MPI (no working mpicc, or NO_USE_MPI=1) every binary builds with $(CC) against
# zero/cluster/mpi_single.h instead: one process, world size 1; a launch of several tasks is an error.
MPICC ?= mpicc
NO_USE_MPI ?= auto
MPI_FOUND := $(shell $(MPICC) --showme:compile >/dev/null 2>&1 && echo 1)
CPU_NO_MPI := $(if $(filter auto,$(NO_USE_MPI)),$(if $(MPI_FOUND),0,1),$(NO_USE_MPI))
ifeq ($(CPU_NO_MPI),1)
MPI_CFLAGS := -DZERO_NO_MPI=1
MPI_LDLIBS :=
MPI_CC = $(CC)
else
MPI_CFLAGS := $(shell $(MPICC) --showme:compile 2>/dev/null)
MPI_LDLIBS := $(shell $(MPICC) --showme:link 2>/dev/null)
MPI_CC = $(MPICC)
endif
CFLAGS += $(MPI_CFLAGS)
LDLIBS += $(MPI_LDLIBS)
# liburing (Debian's liburing-dev, scripts/setup.sh): the io_uring backend of the NVMe offload I/O
# (zero/offload/nvme_io.h); without it the engine does its I/O on worker threads.
LIBURING := $(if $(wildcard /usr/include/liburing.h),1,0)
IO_LDLIBS := $(if $(filter 1,$(LIBURING)),-luring) -lpthread
ifeq ($(LIBURING),1)
CFLAGS += -DZERO_HAVE_LIBURING=1
endif
LDLIBS += $(IO_LDLIBS)
# The one-process variants CI builds and runs whatever is installed (tests/t_12_no_mpi.sh).
NOMPI_CFLAGS = $(filter-out $(MPI_CFLAGS),$(CFLAGS)) -DZERO_NO_MPI=1
BUILD = build

# Headers every CPU binary depends on (so a header edit rebuilds).
# Every header a trainer may include: the handshake hash and make's dependencies cover all of them.
SOURCE_HEADER_GLOBS = common/*.h cpu/*.h zero/*.h zero/*/*.h plan/*.h train/*.h model/*.h zero.cuh
CPU_HEADERS = $(wildcard $(SOURCE_HEADER_GLOBS)) $(BUILD)/blas_stamp
# A change of BLAS (make BLAS=..., or scipy-openblas32 installed) rebuilds every CPU binary.
$(BUILD)/blas_stamp: FORCE
	@mkdir -p $(BUILD); echo "$(BLAS) $(BLAS_LDLIBS)" | cmp -s - $@ || echo "$(BLAS) $(BLAS_LDLIBS)" > $@
# The build's "version" in the start-up handshake (zero/cluster/handshake.h): a hash of the sources, so
# that ranks built from different sources are told apart, and the same sources built on two hosts match.
ZERO_SOURCE_HASH := $(shell cat train_gpt2.c $(sort $(wildcard $(SOURCE_HEADER_GLOBS))) 2>/dev/null | sha256sum | cut -c1-16)
CFLAGS += -DZERO_SOURCE_HASH=\"$(ZERO_SOURCE_HASH)\"

.PHONY: all test clean
all: train_gpt2 test_gpt2 plan_gpt2

train_gpt2: train_gpt2.c $(CPU_HEADERS)
	$(MPI_CC) $(CFLAGS) $(EXT_CFLAGS) $< -o $@ $(LDLIBS)
# The planner (plan/plan.h): its own binary; the trainers' --plan runs it (train/plan_exec.h).
# One binary plans either build's layout (the machine picks: h100/h200 the GPU build's).
plan_gpt2: plan/plan_gpt2.c train_gpt2.c $(CPU_HEADERS)
	$(MPI_CC) $(filter-out -DZERO_STAGE=%,$(CFLAGS)) -DZERO_STAGE=0 $< -o $@ $(LDLIBS)
# `make train_gpt2 ZERO_STAGE=k` must rebuild when k changes: the stage is recorded in a stamp,
# and so are the MPI choice (with or without Open MPI) and ZERO_EXT.
train_gpt2 test_gpt2: $(BUILD)/zero_stage_stamp
$(BUILD)/zero_stage_stamp: FORCE
	@mkdir -p $(BUILD); echo '$(ZERO_STAGE) NO_USE_MPI=$(CPU_NO_MPI) ZERO_EXT=$(ZERO_EXT)' | cmp -s - $@ || echo '$(ZERO_STAGE) NO_USE_MPI=$(CPU_NO_MPI) ZERO_EXT=$(ZERO_EXT)' > $@
.PHONY: FORCE
FORCE:

# One trainer per ZeRO stage (tests, benchmarks): build/train_gpt2_z0 .. build/train_gpt2_z3,
# and the checkpoint consolidation tool (sharded <-> full optimizer state, N -> M ranks).
ZERO_BINARIES = $(BUILD)/train_gpt2_z0 $(BUILD)/train_gpt2_z1 $(BUILD)/train_gpt2_z2 $(BUILD)/train_gpt2_z3 $(BUILD)/zero_consolidate
$(BUILD)/train_gpt2_z%: train_gpt2.c $(CPU_HEADERS)
	@mkdir -p $(BUILD)
	$(MPI_CC) $(filter-out -DZERO_STAGE=%,$(CFLAGS)) -DZERO_STAGE=$* $< -o $@ $(LDLIBS)
$(BUILD)/zero_consolidate: dev/zero_consolidate.c $(CPU_HEADERS)
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS) $< -o $@ $(LDLIBS)
zero_binaries: $(ZERO_BINARIES)
# The same trainers with MPI's own non-blocking collectives instead of the engine's rings
# (ZERO_RING=0, zero/comm_ring.h): only to measure the difference (dev/bench/cluster_bench.sh).
$(BUILD)/mpicoll/train_gpt2_z%: train_gpt2.c $(CPU_HEADERS)
	@mkdir -p $(BUILD)/mpicoll
	$(MPI_CC) $(filter-out -DZERO_STAGE=%,$(CFLAGS)) -DZERO_STAGE=$* -DZERO_RING=0 $< -o $@ $(LDLIBS)
# The same trainers without the progress thread (zero/progress_cpu.h): only to measure what it
# hides (dev/bench/progress_bench.sh).
$(BUILD)/noprogress/train_gpt2_z%: train_gpt2.c $(CPU_HEADERS)
	@mkdir -p $(BUILD)/noprogress
	$(MPI_CC) $(filter-out -DZERO_STAGE=%,$(CFLAGS)) -DZERO_STAGE=$* -DZERO_PROGRESS_THREAD=0 $< -o $@ $(LDLIBS)
# The lesson build per stage (ZERO_EXT=0, zero/no_extensions.h): build/lesson/train_gpt2_z0 .. z3
# (tests/t_30_zero_6_lesson.sh runs them against the default build).
$(BUILD)/lesson/train_gpt2_z%: train_gpt2.c $(CPU_HEADERS)
	@mkdir -p $(BUILD)/lesson
	$(MPI_CC) $(filter-out -DZERO_STAGE=%,$(CFLAGS)) -DZERO_STAGE=$* -DZERO_EXT=0 $< -o $@ $(LDLIBS)
lesson_binaries: $(BUILD)/lesson/train_gpt2_z0 $(BUILD)/lesson/train_gpt2_z1 $(BUILD)/lesson/train_gpt2_z2 $(BUILD)/lesson/train_gpt2_z3
test: zero_binaries nompi_binaries

test_gpt2: test_gpt2.c train_gpt2.c $(CPU_HEADERS)
	$(CC) $(CFLAGS) $< -o $@ $(LDLIBS)

# Without Open MPI, whatever is installed: build/train_gpt2_nompi, build/test_gpt2_nompi (stage 0).
NOMPI_BINARIES = $(BUILD)/train_gpt2_nompi $(BUILD)/test_gpt2_nompi
$(BUILD)/train_gpt2_nompi: train_gpt2.c $(CPU_HEADERS)
	@mkdir -p $(BUILD)
	$(CC) $(filter-out -DZERO_STAGE=%,$(NOMPI_CFLAGS)) -DZERO_STAGE=0 $< -o $@ $(BLAS_LDLIBS) $(IO_LDLIBS) -lm
$(BUILD)/test_gpt2_nompi: test_gpt2.c train_gpt2.c $(CPU_HEADERS)
	@mkdir -p $(BUILD)
	$(CC) $(filter-out -DZERO_STAGE=%,$(NOMPI_CFLAGS)) -DZERO_STAGE=0 $< -o $@ $(BLAS_LDLIBS) $(IO_LDLIBS) -lm
nompi_binaries: $(NOMPI_BINARIES)

# Unit tests: every tests/test_*.c becomes build/test_*
UNIT_TEST_SRCS = $(wildcard tests/test_*.c)
UNIT_TESTS = $(patsubst tests/%.c,$(BUILD)/%,$(UNIT_TEST_SRCS))
$(BUILD)/%: tests/%.c $(CPU_HEADERS)
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS) $< -o $@ $(LDLIBS)

unit_tests: $(UNIT_TESTS)

test: train_gpt2 test_gpt2 plan_gpt2 unit_tests
	bash tests/run_all.sh

clean:
	rm -rf $(BUILD) train_gpt2 test_gpt2 plan_gpt2 train_gpt2cu test_gpt2cu

# CUDA build targets live in cuda.mk (train_gpt2cu, test_gpt2cu, cuda_check); the same sources
# built for the CPU emulation of CUDA (tests without a GPU) in emu.mk (emu_binaries).
-include cuda.mk
-include emu.mk

# Benchmarks (not tests): dev/bench/*.c become build/*
$(BUILD)/bench_cpu: dev/bench/bench_cpu.c train_gpt2.c $(CPU_HEADERS)
	@mkdir -p $(BUILD)
	$(MPI_CC) $(CFLAGS) $< -o $@ $(LDLIBS)
$(BUILD)/op_profile: dev/bench/op_profile.c train_gpt2.c $(CPU_HEADERS)
	@mkdir -p $(BUILD)
	$(MPI_CC) $(CFLAGS) $< -o $@ $(LDLIBS)
$(BUILD)/trace_cost: dev/bench/trace_cost.c train_gpt2.c $(CPU_HEADERS)
	@mkdir -p $(BUILD)
	$(MPI_CC) $(CFLAGS) $< -o $@ $(LDLIBS)
$(BUILD)/quant_grad_blocks: dev/bench/quant_grad_blocks.c train_gpt2.c $(CPU_HEADERS)
	@mkdir -p $(BUILD)
	$(MPI_CC) $(CFLAGS) $< -o $@ $(LDLIBS)
$(BUILD)/adamw_bench: dev/bench/adamw_bench.c cpu/adamw.h
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS) $< -o $@ $(LDLIBS)
$(BUILD)/nvme_bench: dev/bench/nvme_bench.c zero/offload/nvme_io.h
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS) $< -o $@ $(LDLIBS)
