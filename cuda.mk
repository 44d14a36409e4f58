# cuda.mk: the CUDA build, included by the main Makefile (-include cuda.mk).
#   make train_gpt2cu [ZERO_STAGE=0..3] [GPU_ARCH=90] [ZERO_COMM=nccl|mpi] [NO_USE_MPI=auto|0|1] [USE_CUDNN=1] [ZERO_EXT=none]
#                                                        GPU trainer (cuBLASLt, NCCL, Open MPI);
#                                                        ZERO_COMM=mpi: host-staged MPI collectives
#                                                        instead of NCCL (several ranks on one GPU);
#                                                        NO_USE_MPI=1: one GPU, no MPI, no NCCL
#                                                        (zero/cluster/mpi_single.h); auto (default): that,
#                                                        where neither mpicc nor MPI_HOME is found;
#                                                        USE_CUDNN=1: attention through cuDNN's fused
#                                                        SDPA instead of the own flash kernels (headers
#                                                        fetched by scripts/cudnn_frontend.sh, -lcudnn);
#                                                        ZERO_EXT=none: the lesson build (main Makefile)
#   make test_gpt2cu                                     GPU model vs the PyTorch reference
#   make test_kernels                                    build/test_kernels: kernels vs CPU twins
#   make build/test_quantize_cuda                        ZeRO++ quantize kernels vs their CPU twin
#   make -j2 cuda_check                                  compile-only check for CI (no GPU needed):
#       train_gpt2cu for sm_90 at ZERO_STAGE 0..3 and for sm_80, test_gpt2cu and test_kernels for
#       sm_90 and sm_80, train_gpt2cu with ZERO_COMM=mpi for sm_90 at stage 2, train_gpt2cu without
#       MPI for sm_90, train_gpt2cu and test_kernels with USE_CUDNN=1 for sm_90, and the lesson build
#       (ZERO_EXT=none) for sm_90 at stage 3, warnings as errors, into build/cuda/ under distinct names.
#   build/cuda/{train,test}_gpt2cu[_mpi|_nompi|_cudnn]_sm<arch>_zero<stage>, build/cuda/train_gpt2cu_lesson_sm<arch>_zero<stage>,
#   build/cuda/train_gpt2cu_nompi_cudnn_sm<arch>_zero<stage>, build/cuda/test_kernels[_cudnn]_sm<arch>:
#       any single configuration by name (_mpi: ZERO_COMM=mpi, no NCCL linked; _nompi: one
#       process without Open MPI or NCCL, whatever is installed; _cudnn: USE_CUDNN=1; _lesson: ZERO_EXT=none).
# train_gpt2cu and test_gpt2cu rebuild when ZERO_STAGE, GPU_ARCH or ZERO_COMM changes (stamps).
#
# Where the libraries come from. By default: MPI flags from `mpicc --showme`, NCCL, cuBLASLt and
# OpenBLAS from the compiler's default search paths. Each can be pointed at a folder instead,
# holding include/ and lib/ (the library may be versioned only, libnccl.so.2, as pip wheels ship
# it); the binaries get an rpath to it:
#   MPI_HOME=build/device_deps/mpi              Open MPI without mpicc (dev/device_deps.sh bundle)
#   NCCL_HOME=<site-packages>/nvidia/nccl       NCCL from the nvidia-nccl-cu13 wheel
#   CUBLAS_HOME=<site-packages>/nvidia/cu13     cuBLAS/cuBLASLt from the nvidia-cublas wheel
#   OPENBLAS_HOME=<dir>                         OpenBLAS for test_kernels' CPU twins
#   CUDNN_HOME=<site-packages>/nvidia/cudnn     cuDNN 9 (USE_CUDNN=1) from the nvidia-cudnn-cu13 wheel
#   CUDNN_FRONTEND_DIR=<dir>                    the frontend headers (default build/cudnn_frontend,
#                                               made by scripts/cudnn_frontend.sh when missing)
#   NCCL_INCDIR, NCCL_LIBDIR, CUBLAS_INCDIR, ...  one of the two folders only
#   NVCC_WARN=                                  build without warnings as errors
# The Debian Open MPI libraries in the bundle carry a RUNPATH of their own, so run such binaries
# with the bundle's lib folder on LD_LIBRARY_PATH (source build/device_deps/mpi/env.sh).
NVCC ?= nvcc
GPU_ARCH ?= 90
ZERO_COMM ?= nccl
CUDA_HOME ?= /usr/local/cuda
CUDA_BUILD = $(BUILD)/cuda

# Warnings are errors for host (-Wall -Werror) and device code (nvcc -Werror all-warnings).
# -Wno-unused-function: the shared headers are header-only static functions by design.
NVCC_WARN = -Werror all-warnings -Xcompiler -Wall,-Werror,-Wno-unused-function
NVCC_BASE = -O3 -std=c++17 -I. $(NVCC_WARN) -Xcompiler -fopenmp
NVCC_ARCH = -gencode arch=compute_$(GPU_ARCH),code=sm_$(GPU_ARCH)
CUDA_INC = $(CUBLAS_INC)

# A library in a given folder: -L, the file to link (libNAME.so, else the first libNAME.so.N),
# and an rpath. $(1): the folder, $(2): NAME.
lib_file = $(notdir $(firstword $(wildcard $(1)/lib$(2).so) $(sort $(wildcard $(1)/lib$(2).so.*)) lib$(2).so))
home_lib = -L$(abspath $(1)) -l:$(call lib_file,$(1),$(2)) -Xlinker -rpath=$(abspath $(1))

# <X>_HOME sets both folders; <X>_INCDIR / <X>_LIBDIR set one (a header in the default path and
# a versioned-only library elsewhere, say).
NCCL_HOME ?=
NCCL_INCDIR ?= $(if $(NCCL_HOME),$(NCCL_HOME)/include)
NCCL_LIBDIR ?= $(if $(NCCL_HOME),$(NCCL_HOME)/lib)
NCCL_INC = $(if $(NCCL_INCDIR),-I$(NCCL_INCDIR))
NCCL_LIB = $(if $(NCCL_LIBDIR),$(call home_lib,$(NCCL_LIBDIR),nccl),-lnccl)
CUBLAS_HOME ?=
CUBLAS_INCDIR ?= $(if $(CUBLAS_HOME),$(CUBLAS_HOME)/include)
CUBLAS_LIBDIR ?= $(if $(CUBLAS_HOME),$(CUBLAS_HOME)/lib)
CUBLAS_INC = $(if $(CUBLAS_INCDIR),-I$(CUBLAS_INCDIR))
CUBLAS_LIB = $(if $(CUBLAS_LIBDIR),$(call home_lib,$(CUBLAS_LIBDIR),cublasLt) -l:$(call lib_file,$(CUBLAS_LIBDIR),cublas),\
             -lcublasLt -lcublas)

# cuDNN (USE_CUDNN=1): the library from CUDNN_HOME or the default paths (the CUDA installation's),
# the header-only C++ frontend from CUDNN_FRONTEND_DIR, as a system include (its own warnings are
# not ours to fix). The frontend is heavy to compile (minutes), so it is included by one host-only
# translation unit, kernels/attention_cudnn.cpp, compiled once at -O1 (it only builds and launches
# cuDNN graphs) and linked into every USE_CUDNN=1 binary; the frontend also calls NVRTC.
USE_CUDNN ?= 0
CUDNN_HOME ?=
CUDNN_FRONTEND_DIR ?= $(BUILD)/cudnn_frontend
CUDNN_FRONTEND_HEADER = $(CUDNN_FRONTEND_DIR)/include/cudnn_frontend.h
CUDNN_OBJECT = $(CUDA_BUILD)/attention_cudnn.o
cudnn_flags = -DUSE_CUDNN=1
cudnn_lib = $(CUDNN_OBJECT) $(if $(CUDNN_HOME),$(call home_lib,$(CUDNN_HOME)/lib,cudnn),-lcudnn) -lnvrtc
CUDNN_FLAGS = $(if $(filter 1,$(USE_CUDNN)),$(cudnn_flags))
CUDNN_LIB = $(if $(filter 1,$(USE_CUDNN)),$(cudnn_lib))
CUDNN_DEPS = $(if $(filter 1,$(USE_CUDNN)),$(CUDNN_OBJECT))
# Order-only: made when missing, never because the script is newer (a copied tree has fresh
# times, and the GPU machine has no network to fetch the headers again).
$(CUDNN_FRONTEND_HEADER): | scripts/cudnn_frontend.sh
	bash scripts/cudnn_frontend.sh $(CUDNN_FRONTEND_DIR)
$(CUDNN_OBJECT): kernels/attention_cudnn.cpp kernels/attention_cudnn.h kernels/attention_cudnn_steps.h $(CUDNN_FRONTEND_HEADER)
	@mkdir -p $(CUDA_BUILD)
	$(CXX) -std=c++17 -O1 -Wall -Werror -I$(CUDA_HOME)/include $(if $(CUDNN_HOME),-I$(CUDNN_HOME)/include) \
		-isystem $(CUDNN_FRONTEND_DIR)/include -c $< -o $@

# Open MPI: from MPI_HOME, else the wrapper's flags (-I/-L/-l go to nvcc as they are, anything
# else through -Xcompiler). Named CUDA_MPI_* so the main Makefile's MPI_CFLAGS stay its own.
MPI_HOME ?=
ifneq ($(MPI_HOME),)
# include/openmpi: Debian's layout (mpi.h's C++ bindings include ompi_config.h from there).
CUDA_MPI_CFLAGS = -I$(MPI_HOME)/include $(addprefix -I,$(wildcard $(MPI_HOME)/include/openmpi))
CUDA_MPI_LDFLAGS = $(call home_lib,$(MPI_HOME)/lib,mpi)
else
MPI_COMPILE_RAW := $(shell mpicc --showme:compile 2>/dev/null)
MPI_LINK_RAW := $(shell mpicc --showme:link 2>/dev/null)
CUDA_MPI_CFLAGS = $(filter -I% -D%,$(MPI_COMPILE_RAW)) $(addprefix -Xcompiler ,$(filter-out -I% -D%,$(MPI_COMPILE_RAW)))
CUDA_MPI_LDFLAGS = $(filter -L% -l%,$(MPI_LINK_RAW)) $(addprefix -Xcompiler ,$(filter-out -L% -l%,$(MPI_LINK_RAW)))
endif
# The named multi-rank configurations need <mpi.h>: say so plainly when there is no MPI at all
# (a warning, not an error, so make -k still builds the rest).
MPI_CHECK_FLAGS = $(if $(strip $(CUDA_MPI_CFLAGS)),,$(warning no Open MPI: mpicc is not on PATH and MPI_HOME is not set \
                  (bash dev/device_deps.sh makes build/device_deps/mpi; then make MPI_HOME=build/device_deps/mpi)))
CUDA_MPI = $(MPI_CHECK_FLAGS) $(CUDA_MPI_CFLAGS)
# Plain `make train_gpt2cu`: with Open MPI where it is found (mpicc or MPI_HOME), else the
# one-process build (NO_USE_MPI, main Makefile: auto, 0 or 1), which needs neither MPI nor NCCL.
CUDA_NO_MPI := $(if $(filter auto,$(NO_USE_MPI)),$(if $(strip $(CUDA_MPI_CFLAGS)),0,1),$(NO_USE_MPI))
NOMPI_FLAGS = -DZERO_NO_MPI=1

CUDA_LDLIBS = $(CUBLAS_LIB) $(NCCL_LIB) $(CUDA_MPI_LDFLAGS) -lgomp -lm
# The host-staged MPI backend (zero/gpu/engine_gpu.cuh) needs no NCCL at all; one process neither.
CUDA_LDLIBS_MPI = $(CUBLAS_LIB) $(CUDA_MPI_LDFLAGS) -lgomp -lm
CUDA_LDLIBS_NOMPI = $(CUBLAS_LIB) -lgomp -lm
ifeq ($(CUDA_NO_MPI),1)
ZERO_COMM_FLAGS = $(NOMPI_FLAGS)
ZERO_COMM_LDLIBS = $(CUDA_LDLIBS_NOMPI)
TRAIN_MPI_INC =
else
ZERO_COMM_FLAGS = $(if $(filter mpi,$(ZERO_COMM)),-DZERO_COMM_MPI=1)
ZERO_COMM_LDLIBS = $(if $(filter mpi,$(ZERO_COMM)),$(CUDA_LDLIBS_MPI),$(CUDA_LDLIBS))
TRAIN_MPI_INC = $(if $(filter mpi,$(ZERO_COMM)),,$(NCCL_INC)) $(CUDA_MPI)
endif
# test_kernels links the CPU twins (cpu/matmul.h uses cblas): OPENBLAS_HOME, else the main
# Makefile's OPENBLAS_OPENMP_DIR (Debian's OpenMP build), else the default -lopenblas.
OPENBLAS_HOME ?=
OPENBLAS_INCDIR ?= $(if $(OPENBLAS_HOME),$(OPENBLAS_HOME)/include)
OPENBLAS_LIBDIR ?= $(if $(OPENBLAS_HOME),$(OPENBLAS_HOME)/lib)
OPENBLAS_INC = $(if $(OPENBLAS_INCDIR),-I$(OPENBLAS_INCDIR))
KERNEL_TEST_LDLIBS = $(CUBLAS_LIB) \
    $(if $(OPENBLAS_LIBDIR),$(call home_lib,$(OPENBLAS_LIBDIR),openblas),\
        $(if $(OPENBLAS_OPENMP_DIR),-L$(OPENBLAS_OPENMP_DIR) -Xlinker -rpath=$(OPENBLAS_OPENMP_DIR)) -lopenblas) -lgomp -lm

CUDA_HEADERS = $(wildcard kernels/*.cuh kernels/*.h common/*.h common/*.cuh cpu/*.h zero/*.h zero/*.cuh \
                           zero/*/*.h zero/*/*.cuh plan/*.h train/*.h model/*.h model/*.cuh) zero.cuh

.PHONY: cuda_check test_kernels

# dev/test_kernels.cu and its per-op-family test files (dev/test_kernels/*.cuh), which it includes.
KERNEL_TEST_SOURCES = dev/test_kernels.cu $(wildcard dev/test_kernels/*.cuh)

train_gpt2cu: train_gpt2.cu $(CUDA_HEADERS) $(CUDNN_DEPS)
	$(NVCC) $(NVCC_BASE) $(NVCC_ARCH) -DZERO_STAGE=$(ZERO_STAGE) $(EXT_CFLAGS) $(ZERO_COMM_FLAGS) $(CUDNN_FLAGS) $(CUDA_INC) $(TRAIN_MPI_INC) $< -o $@ $(ZERO_COMM_LDLIBS) $(CUDNN_LIB)

test_gpt2cu: test_gpt2.cu train_gpt2.cu $(CUDA_HEADERS) $(CUDNN_DEPS)
	$(NVCC) $(NVCC_BASE) $(NVCC_ARCH) -DZERO_STAGE=$(ZERO_STAGE) $(ZERO_COMM_FLAGS) $(CUDNN_FLAGS) $(CUDA_INC) $(TRAIN_MPI_INC) $< -o $@ $(ZERO_COMM_LDLIBS) $(CUDNN_LIB)

test_kernels: $(BUILD)/test_kernels
$(BUILD)/test_kernels: $(KERNEL_TEST_SOURCES) $(CUDA_HEADERS) $(CUDNN_DEPS)
	@mkdir -p $(BUILD)
	$(NVCC) $(NVCC_BASE) $(NVCC_ARCH) $(CUDNN_FLAGS) $(CUDA_INC) $(OPENBLAS_INC) $< -o $@ $(KERNEL_TEST_LDLIBS) $(CUDNN_LIB)

$(BUILD)/test_quantize_cuda: dev/test_quantize.cu kernels/quantize.cuh cpu/quantize.h common/cuda_utils.cuh
	@mkdir -p $(BUILD)
	$(NVCC) $(NVCC_BASE) $(NVCC_ARCH) $(CUDA_INC) $< -o $@

# `make train_gpt2cu ZERO_STAGE=k` must rebuild when k changes: the main Makefile's stage stamp,
# and the same for the architecture and the collective backend.
CUDA_CONFIG = GPU_ARCH=$(GPU_ARCH) ZERO_COMM=$(ZERO_COMM) NO_USE_MPI=$(CUDA_NO_MPI) USE_CUDNN=$(USE_CUDNN)
train_gpt2cu test_gpt2cu: $(BUILD)/zero_stage_stamp $(BUILD)/cuda_config_stamp
$(BUILD)/test_kernels: $(BUILD)/cuda_config_stamp
$(BUILD)/cuda_config_stamp: FORCE
	@mkdir -p $(BUILD); echo '$(CUDA_CONFIG)' | cmp -s - $@ || echo '$(CUDA_CONFIG)' > $@

# ---------------------------------------------------------------------------------------------
# cuda_check: every configuration CI compiles, each its own target so make -j runs them side by
# side. test_gpt2cu does not depend on the stage beyond what the train_gpt2cu builds already
# compile (it includes train_gpt2.cu), so it is built once per arch, at stage 0.
CUDA_CHECK_STAGES = 0 1 2 3
CUDA_CHECK_TARGETS = $(foreach s,$(CUDA_CHECK_STAGES),$(CUDA_BUILD)/train_gpt2cu_sm90_zero$(s)) \
                     $(CUDA_BUILD)/train_gpt2cu_sm80_zero0 $(CUDA_BUILD)/train_gpt2cu_mpi_sm90_zero2 \
                     $(CUDA_BUILD)/train_gpt2cu_nompi_sm90_zero0 \
                     $(CUDA_BUILD)/test_gpt2cu_sm90_zero0 $(CUDA_BUILD)/test_gpt2cu_sm80_zero0 \
                     $(CUDA_BUILD)/test_kernels_sm90 $(CUDA_BUILD)/test_kernels_sm80 \
                     $(CUDA_BUILD)/train_gpt2cu_cudnn_sm90_zero0 $(CUDA_BUILD)/test_kernels_cudnn_sm90 \
                     $(CUDA_BUILD)/train_gpt2cu_lesson_sm90_zero3

cuda_check: $(CUDA_CHECK_TARGETS)

arch_flags = -gencode arch=compute_$(1),code=sm_$(1)
# For a stem <arch>_zero<stage>: the -gencode and -DZERO_STAGE flags.
stem_flags = $(call arch_flags,$(word 1,$(subst _zero, ,$(1)))) -DZERO_STAGE=$(word 2,$(subst _zero, ,$(1)))

$(CUDA_BUILD)/train_gpt2cu_sm%: train_gpt2.cu $(CUDA_HEADERS)
	@mkdir -p $(CUDA_BUILD)
	$(NVCC) $(NVCC_BASE) $(call stem_flags,$*) $(CUDA_INC) $(NCCL_INC) $(CUDA_MPI) $< -o $@ $(CUDA_LDLIBS)

# The host-staged MPI backend: {train,test}_gpt2cu_mpi_sm<arch>_zero<stage> (no NCCL linked).
$(CUDA_BUILD)/train_gpt2cu_mpi_sm%: train_gpt2.cu $(CUDA_HEADERS)
	@mkdir -p $(CUDA_BUILD)
	$(NVCC) $(NVCC_BASE) $(call stem_flags,$*) -DZERO_COMM_MPI=1 $(CUDA_INC) $(CUDA_MPI) $< -o $@ $(CUDA_LDLIBS_MPI)

# The lesson build (ZERO_EXT=0, zero/no_extensions.h: the ZeRO core alone): train_gpt2cu_lesson_sm<arch>_zero<stage>.
$(CUDA_BUILD)/train_gpt2cu_lesson_sm%: train_gpt2.cu $(CUDA_HEADERS)
	@mkdir -p $(CUDA_BUILD)
	$(NVCC) $(NVCC_BASE) $(call stem_flags,$*) -DZERO_EXT=0 $(CUDA_INC) $(NCCL_INC) $(CUDA_MPI) $< -o $@ $(CUDA_LDLIBS)

# One process without Open MPI or NCCL: {train,test}_gpt2cu_nompi_sm<arch>_zero<stage>.
$(CUDA_BUILD)/train_gpt2cu_nompi_sm%: train_gpt2.cu $(CUDA_HEADERS)
	@mkdir -p $(CUDA_BUILD)
	$(NVCC) $(NVCC_BASE) $(call stem_flags,$*) $(NOMPI_FLAGS) $(CUDA_INC) $< -o $@ $(CUDA_LDLIBS_NOMPI)

$(CUDA_BUILD)/test_gpt2cu_nompi_sm%: test_gpt2.cu train_gpt2.cu $(CUDA_HEADERS)
	@mkdir -p $(CUDA_BUILD)
	$(NVCC) $(NVCC_BASE) $(call stem_flags,$*) $(NOMPI_FLAGS) $(CUDA_INC) $< -o $@ $(CUDA_LDLIBS_NOMPI)

$(CUDA_BUILD)/test_gpt2cu_mpi_sm%: test_gpt2.cu train_gpt2.cu $(CUDA_HEADERS)
	@mkdir -p $(CUDA_BUILD)
	$(NVCC) $(NVCC_BASE) $(call stem_flags,$*) -DZERO_COMM_MPI=1 $(CUDA_INC) $(CUDA_MPI) $< -o $@ $(CUDA_LDLIBS_MPI)

$(CUDA_BUILD)/test_gpt2cu_sm%: test_gpt2.cu train_gpt2.cu $(CUDA_HEADERS)
	@mkdir -p $(CUDA_BUILD)
	$(NVCC) $(NVCC_BASE) $(call stem_flags,$*) $(CUDA_INC) $(NCCL_INC) $(CUDA_MPI) $< -o $@ $(CUDA_LDLIBS)

$(CUDA_BUILD)/test_kernels_sm%: $(KERNEL_TEST_SOURCES) $(CUDA_HEADERS)
	@mkdir -p $(CUDA_BUILD)
	$(NVCC) $(NVCC_BASE) $(call arch_flags,$*) $(CUDA_INC) $(OPENBLAS_INC) $< -o $@ $(KERNEL_TEST_LDLIBS)

# cuDNN's fused attention instead of the own flash kernels (USE_CUDNN=1): {train,test}_gpt2cu_cudnn_sm<arch>_zero<stage>,
# test_kernels_cudnn_sm<arch> (which tests both attention paths).
$(CUDA_BUILD)/train_gpt2cu_cudnn_sm%: train_gpt2.cu $(CUDA_HEADERS) $(CUDNN_OBJECT)
	@mkdir -p $(CUDA_BUILD)
	$(NVCC) $(NVCC_BASE) $(call stem_flags,$*) $(cudnn_flags) $(CUDA_INC) $(NCCL_INC) $(CUDA_MPI) $< -o $@ $(CUDA_LDLIBS) $(cudnn_lib)

$(CUDA_BUILD)/test_gpt2cu_cudnn_sm%: test_gpt2.cu train_gpt2.cu $(CUDA_HEADERS) $(CUDNN_OBJECT)
	@mkdir -p $(CUDA_BUILD)
	$(NVCC) $(NVCC_BASE) $(call stem_flags,$*) $(cudnn_flags) $(CUDA_INC) $(NCCL_INC) $(CUDA_MPI) $< -o $@ $(CUDA_LDLIBS) $(cudnn_lib)

# One GPU, no MPI, cuDNN's attention (dev/gpu_check.sh's second throughput run).
$(CUDA_BUILD)/train_gpt2cu_nompi_cudnn_sm%: train_gpt2.cu $(CUDA_HEADERS) $(CUDNN_OBJECT)
	@mkdir -p $(CUDA_BUILD)
	$(NVCC) $(NVCC_BASE) $(call stem_flags,$*) $(NOMPI_FLAGS) $(cudnn_flags) $(CUDA_INC) $< -o $@ $(CUDA_LDLIBS_NOMPI) $(cudnn_lib)

$(CUDA_BUILD)/test_kernels_cudnn_sm%: $(KERNEL_TEST_SOURCES) $(CUDA_HEADERS) $(CUDNN_OBJECT)
	@mkdir -p $(CUDA_BUILD)
	$(NVCC) $(NVCC_BASE) $(call arch_flags,$*) $(cudnn_flags) $(CUDA_INC) $(OPENBLAS_INC) $< -o $@ $(KERNEL_TEST_LDLIBS) $(cudnn_lib)
