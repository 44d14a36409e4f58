# cuda.mk: the CUDA build, included by the main Makefile (-include cuda.mk).
#   make train_gpt2cu [ZERO_STAGE=0..3] [GPU_ARCH=90] [ZERO_COMM=nccl|mpi]
#                                                        GPU trainer (cuBLASLt, NCCL, Open MPI);
#                                                        ZERO_COMM=mpi: host-staged MPI collectives
#                                                        instead of NCCL (several ranks on one GPU)
#   make test_gpt2cu                                     GPU model vs the PyTorch reference
#   make test_kernels                                    build/test_kernels: kernels vs CPU twins
#   make -j2 cuda_check                                  compile-only check for CI (no GPU needed):
#       train_gpt2cu for sm_90 at ZERO_STAGE 0..3 and for sm_80, test_gpt2cu and test_kernels for
#       sm_90 and sm_80, and train_gpt2cu with ZERO_COMM=mpi for sm_90 at stage 2, warnings as
#       errors, into build/cuda/ under distinct names.
# ZERO_STAGE comes from the main Makefile. MPI flags come from `mpicc --showme`; NCCL and cuBLASLt
# from the CUDA toolkit's default search paths (override with NCCL_HOME / CUDA_HOME).
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
NCCL_HOME ?=
NCCL_INC = $(if $(NCCL_HOME),-I$(NCCL_HOME)/include)
NCCL_LIB = $(if $(NCCL_HOME),-L$(NCCL_HOME)/lib -Xlinker -rpath=$(NCCL_HOME)/lib)

# Open MPI's wrapper flags: -I/-L/-l go to nvcc as they are, anything else through -Xcompiler.
MPI_COMPILE_RAW := $(shell mpicc --showme:compile 2>/dev/null)
MPI_LINK_RAW := $(shell mpicc --showme:link 2>/dev/null)
MPI_CFLAGS = $(filter -I% -D%,$(MPI_COMPILE_RAW)) $(addprefix -Xcompiler ,$(filter-out -I% -D%,$(MPI_COMPILE_RAW)))
MPI_LDFLAGS = $(filter -L% -l%,$(MPI_LINK_RAW)) $(addprefix -Xcompiler ,$(filter-out -L% -l%,$(MPI_LINK_RAW)))

CUDA_LDLIBS = -lcublasLt -lcublas $(NCCL_LIB) -lnccl $(MPI_LDFLAGS) -lgomp -lm
# The host-staged MPI backend (zero_gpu.cuh) needs no NCCL at all.
CUDA_LDLIBS_MPI = -lcublasLt -lcublas $(MPI_LDFLAGS) -lgomp -lm
ZERO_COMM_FLAGS = $(if $(filter mpi,$(ZERO_COMM)),-DZERO_COMM_MPI=1)
ZERO_COMM_LDLIBS = $(if $(filter mpi,$(ZERO_COMM)),$(CUDA_LDLIBS_MPI),$(CUDA_LDLIBS))
# test_kernels links the CPU twins (cpu/matmul.h uses cblas).
KERNEL_TEST_LDLIBS = -lcublasLt -lcublas $(if $(OPENBLAS_OPENMP_DIR),-L$(OPENBLAS_OPENMP_DIR) -Xlinker -rpath=$(OPENBLAS_OPENMP_DIR)) \
                     -lopenblas -lgomp -lm

CUDA_HEADERS = $(wildcard kernels/*.cuh common/*.h common/*.cuh cpu/*.h) zero.cuh zero_gpu.cuh

.PHONY: cuda_check test_kernels

train_gpt2cu: train_gpt2.cu $(CUDA_HEADERS)
	$(NVCC) $(NVCC_BASE) $(NVCC_ARCH) -DZERO_STAGE=$(ZERO_STAGE) $(ZERO_COMM_FLAGS) $(NCCL_INC) $(MPI_CFLAGS) $< -o $@ $(ZERO_COMM_LDLIBS)

test_gpt2cu: test_gpt2.cu train_gpt2.cu $(CUDA_HEADERS)
	$(NVCC) $(NVCC_BASE) $(NVCC_ARCH) -DZERO_STAGE=$(ZERO_STAGE) $(ZERO_COMM_FLAGS) $(NCCL_INC) $(MPI_CFLAGS) $< -o $@ $(ZERO_COMM_LDLIBS)

test_kernels: $(BUILD)/test_kernels
$(BUILD)/test_kernels: dev/test_kernels.cu $(CUDA_HEADERS)
	@mkdir -p $(BUILD)
	$(NVCC) $(NVCC_BASE) $(NVCC_ARCH) $< -o $@ $(KERNEL_TEST_LDLIBS)

# ---------------------------------------------------------------------------------------------
# cuda_check: every configuration CI compiles, each its own target so make -j runs them side by
# side. test_gpt2cu does not depend on the stage beyond what the train_gpt2cu builds already
# compile (it includes train_gpt2.cu), so it is built once per arch, at stage 0.
CUDA_CHECK_STAGES = 0 1 2 3
CUDA_CHECK_TARGETS = $(foreach s,$(CUDA_CHECK_STAGES),$(CUDA_BUILD)/train_gpt2cu_sm90_zero$(s)) \
                     $(CUDA_BUILD)/train_gpt2cu_sm80_zero0 $(CUDA_BUILD)/train_gpt2cu_mpi_sm90_zero2 \
                     $(CUDA_BUILD)/test_gpt2cu_sm90_zero0 $(CUDA_BUILD)/test_gpt2cu_sm80_zero0 \
                     $(CUDA_BUILD)/test_kernels_sm90 $(CUDA_BUILD)/test_kernels_sm80

cuda_check: $(CUDA_CHECK_TARGETS)

arch_flags = -gencode arch=compute_$(1),code=sm_$(1)

$(CUDA_BUILD)/train_gpt2cu_sm%: train_gpt2.cu $(CUDA_HEADERS)
	@mkdir -p $(CUDA_BUILD)
	$(NVCC) $(NVCC_BASE) $(call arch_flags,$(word 1,$(subst _zero, ,$*))) -DZERO_STAGE=$(word 2,$(subst _zero, ,$*)) \
		$(NCCL_INC) $(MPI_CFLAGS) $< -o $@ $(CUDA_LDLIBS)

# The host-staged MPI backend: train_gpt2cu_mpi_sm<arch>_zero<stage> (no NCCL linked).
$(CUDA_BUILD)/train_gpt2cu_mpi_sm%: train_gpt2.cu $(CUDA_HEADERS)
	@mkdir -p $(CUDA_BUILD)
	$(NVCC) $(NVCC_BASE) $(call arch_flags,$(word 1,$(subst _zero, ,$*))) -DZERO_STAGE=$(word 2,$(subst _zero, ,$*)) \
		-DZERO_COMM_MPI=1 $(MPI_CFLAGS) $< -o $@ $(CUDA_LDLIBS_MPI)

$(CUDA_BUILD)/test_gpt2cu_sm%: test_gpt2.cu train_gpt2.cu $(CUDA_HEADERS)
	@mkdir -p $(CUDA_BUILD)
	$(NVCC) $(NVCC_BASE) $(call arch_flags,$(word 1,$(subst _zero, ,$*))) -DZERO_STAGE=$(word 2,$(subst _zero, ,$*)) \
		$(NCCL_INC) $(MPI_CFLAGS) $< -o $@ $(CUDA_LDLIBS)

$(CUDA_BUILD)/test_kernels_sm%: dev/test_kernels.cu $(CUDA_HEADERS)
	@mkdir -p $(CUDA_BUILD)
	$(NVCC) $(NVCC_BASE) $(call arch_flags,$*) $< -o $@ $(KERNEL_TEST_LDLIBS)
