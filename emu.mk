# emu.mk: the CUDA build compiled for the CPU emulation of CUDA (dev/emu/emu.h), included by the
# main Makefile (-include emu.mk). Tests only: the binaries run the GPU code paths (kernels,
# cuBLASLt calls through a host model, the GPU ZeRO engine with the host-staged MPI backend) on
# the CPU, single-threaded per rank, slowly. They measure nothing about GPU speed.
#   make emu_binaries    build/emu/test_emu        the emulation's own tests
#                        build/emu/test_emu_ptx    ... of mma.sync, ldmatrix, cp.async (emu_ptx.h)
#                        build/emu/test_cublaslt_emu the cuBLASLt model vs a double-precision GEMM
#                        build/emu/test_kernels    dev/test_kernels.cu (every kernel vs its CPU twin)
#                        build/emu/test_quantize   dev/test_quantize.cu (ZeRO++ quantize kernels vs twin)
#                        build/emu/test_gpt2cu_z<S> test_gpt2.cu at ZeRO stage S = 0..3
#                        build/emu/train_gpt2cu_z<S> train_gpt2.cu at stage S, NCCL (dev/emu/nccl_emu.h:
#                                                  NCCL's collectives carried by MPI, completing late)
#                        build/emu/train_gpt2cu_mpi_z2 the host-staged MPI backend (ZERO_COMM=mpi)
#                        build/emu/train_gpt2cu_nompi_z0 one process without MPI (NO_USE_MPI=1)
#   make emu_lesson_binaries  build/emu/lesson/train_gpt2cu_z0, z3: the lesson build (ZERO_EXT=0, the
#                        ZeRO core alone; any stage: lesson/train_gpt2cu_z<S>), run by t_68_lesson_gpu_emulation
#   make emu_fma_binaries  the contracted flavor (EMU_CONTRACT, dev/emu/emu_device.h: device code's
#                        multiply-adds fused as nvcc fuses them, host code's not; needs an FMA CPU):
#                        build/emu/test_kernels_fma, test_quantize_fma, test_gpt2cu_fma_z0,
#                        train_gpt2cu_fma_z2
#                        (any stage: train_gpt2cu_fma_z<S>, test_gpt2cu_fma_z<S>)
# Needs g++, python3, the CUDA toolkit's headers (not its libraries: no libcudart, libcublasLt
# or NCCL is linked) and Open MPI's mpicc for flags.
EMU_BUILD = $(BUILD)/emu
EMU_SRC = $(EMU_BUILD)/src
CXX ?= g++
# -U_FORTIFY_SOURCE: fibers switch stacks with _longjmp, which the fortified variant refuses.
# -fno-strict-aliasing: device code type-puns through packs (PackBf16 <-> int4) as CUDA allows.
EMU_CXXFLAGS = -std=c++17 -O2 -g -U_FORTIFY_SOURCE -fno-strict-aliasing -fopenmp -Wall -Werror \
               -Wno-unknown-pragmas -Wno-unused-function -DCUDA_EMULATION=1 -DOMPI_SKIP_MPICXX=1 \
               -I$(CUDA_HOME)/include -I$(EMU_SRC) -include dev/emu/emu.h $(BLAS_CFLAGS)
# LDLIBS, BLAS_CFLAGS (main Makefile): the BLAS for the CPU twins, as the CPU build links it.
EMU_LDLIBS = $(shell mpicc --showme:link 2>/dev/null) $(LDLIBS)
EMU_MPI_CFLAGS = $(shell mpicc --showme:compile 2>/dev/null)
EMU_HEADERS = $(wildcard dev/emu/*.h) $(CUDA_HEADERS)
EMU_STAGES = 0 1 2 3
EMU_BINARIES = $(EMU_BUILD)/test_emu $(EMU_BUILD)/test_emu_ptx $(EMU_BUILD)/test_cublaslt_emu $(EMU_BUILD)/test_kernels \
               $(EMU_BUILD)/test_quantize \
               $(foreach s,$(EMU_STAGES),$(EMU_BUILD)/test_gpt2cu_z$(s) $(EMU_BUILD)/train_gpt2cu_z$(s)) \
               $(EMU_BUILD)/train_gpt2cu_mpi_z2 $(EMU_BUILD)/train_gpt2cu_nompi_z0

.PHONY: emu_binaries emu_sources
emu_binaries: $(EMU_BINARIES)

# The rewritten copy (kernel<<<...>>> and extern __shared__ made C++); rewrite.py only touches
# files whose content changed. Every binary depends on this stamp.
$(EMU_BUILD)/sources.stamp: dev/emu/rewrite.py $(wildcard *.c *.cu *.cuh dev/*.cu dev/test_kernels/*.cuh dev/emu/*.cu dev/emu/*.h) $(CUDA_HEADERS)
	@mkdir -p $(EMU_BUILD)
	python3 dev/emu/rewrite.py $(EMU_SRC)
	@touch $@

$(EMU_BUILD)/test_emu: $(EMU_BUILD)/sources.stamp $(EMU_HEADERS)
	$(CXX) $(EMU_CXXFLAGS) -DEMU_NCCL=1 $(EMU_MPI_CFLAGS) -x c++ $(EMU_SRC)/dev/emu/test_emu.cu -x none -o $@ $(EMU_LDLIBS)

$(EMU_BUILD)/test_emu_ptx: $(EMU_BUILD)/sources.stamp $(EMU_HEADERS)
	$(CXX) $(EMU_CXXFLAGS) -x c++ $(EMU_SRC)/dev/emu/test_emu_ptx.cu -x none -o $@ $(EMU_LDLIBS)

# The cuBLASLt model's own test: plain C++, no emulation header.
$(EMU_BUILD)/test_cublaslt_emu: dev/emu/test_cublaslt_emu.cpp dev/emu/cublaslt_emu.h
	@mkdir -p $(EMU_BUILD)
	$(CXX) -std=c++17 -O2 -Wall -Werror -Wno-unused-function -I$(CUDA_HOME)/include $< -o $@ -lm

$(EMU_BUILD)/test_kernels: $(EMU_BUILD)/sources.stamp $(EMU_HEADERS)
	$(CXX) $(EMU_CXXFLAGS) -x c++ $(EMU_SRC)/dev/test_kernels.cu -x none -o $@ $(EMU_LDLIBS)

# The contracted flavor: -mfma (FMA instructions; x86-64 since Haswell / Zen), -ffp-contract=off
# for host code and EMU_CONTRACT=1 (dev/emu/emu_device.h), which marks __global__ and __device__ functions
# fp-contract=fast: device multiply-adds fuse as nvcc's do, the CPU twins and host code stay
# unfused as in the CUDA build's host compile. Run with EMU_DEVICE_MATH=1 it is the emulation
# closest to the device (t_65, t_67). Only built where the CPU has FMA (the tests ask).
EMU_FMA_FLAGS = -mfma -ffp-contract=off -DEMU_CONTRACT=1
EMU_FMA_BINARIES = $(EMU_BUILD)/test_kernels_fma $(EMU_BUILD)/test_quantize_fma $(EMU_BUILD)/test_gpt2cu_fma_z0 $(EMU_BUILD)/train_gpt2cu_fma_z2
.PHONY: emu_fma_binaries
emu_fma_binaries: $(EMU_FMA_BINARIES)

$(EMU_BUILD)/test_kernels_fma: $(EMU_BUILD)/sources.stamp $(EMU_HEADERS)
	$(CXX) $(EMU_CXXFLAGS) $(EMU_FMA_FLAGS) -x c++ $(EMU_SRC)/dev/test_kernels.cu -x none -o $@ $(EMU_LDLIBS)

$(EMU_BUILD)/test_quantize_fma: $(EMU_BUILD)/sources.stamp $(EMU_HEADERS)
	$(CXX) $(EMU_CXXFLAGS) $(EMU_FMA_FLAGS) -x c++ $(EMU_SRC)/dev/test_quantize.cu -x none -o $@ $(EMU_LDLIBS)

$(EMU_BUILD)/test_gpt2cu_fma_z%: $(EMU_BUILD)/sources.stamp $(EMU_HEADERS)
	$(CXX) $(EMU_CXXFLAGS) $(EMU_FMA_FLAGS) -DZERO_STAGE=$* -DZERO_COMM_MPI=1 $(EMU_MPI_CFLAGS) -x c++ $(EMU_SRC)/test_gpt2.cu \
		-x none -o $@ $(EMU_LDLIBS)

$(EMU_BUILD)/train_gpt2cu_fma_z%: $(EMU_BUILD)/sources.stamp $(EMU_HEADERS)
	$(CXX) $(EMU_CXXFLAGS) $(EMU_FMA_FLAGS) -DZERO_STAGE=$* -DEMU_NCCL=1 $(EMU_MPI_CFLAGS) -x c++ $(EMU_SRC)/train_gpt2.cu \
		-x none -o $@ $(EMU_LDLIBS)

$(EMU_BUILD)/test_quantize: $(EMU_BUILD)/sources.stamp $(EMU_HEADERS)
	$(CXX) $(EMU_CXXFLAGS) -x c++ $(EMU_SRC)/dev/test_quantize.cu -x none -o $@ $(EMU_LDLIBS)

$(EMU_BUILD)/test_gpt2cu_z%: $(EMU_BUILD)/sources.stamp $(EMU_HEADERS)
	$(CXX) $(EMU_CXXFLAGS) -DZERO_STAGE=$* -DZERO_COMM_MPI=1 $(EMU_MPI_CFLAGS) -x c++ $(EMU_SRC)/test_gpt2.cu -x none \
		-o $@ $(EMU_LDLIBS)

$(EMU_BUILD)/train_gpt2cu_z%: $(EMU_BUILD)/sources.stamp $(EMU_HEADERS)
	$(CXX) $(EMU_CXXFLAGS) -DZERO_STAGE=$* -DEMU_NCCL=1 $(EMU_MPI_CFLAGS) -x c++ $(EMU_SRC)/train_gpt2.cu -x none \
		-o $@ $(EMU_LDLIBS)

# The lesson build (ZERO_EXT=0, zero/no_extensions.h): the core and zero/gpu/ without the extension folders.
EMU_LESSON_BINARIES = $(EMU_BUILD)/lesson/train_gpt2cu_z0 $(EMU_BUILD)/lesson/train_gpt2cu_z3
.PHONY: emu_lesson_binaries
emu_lesson_binaries: $(EMU_LESSON_BINARIES)
$(EMU_BUILD)/lesson/train_gpt2cu_z%: $(EMU_BUILD)/sources.stamp $(EMU_HEADERS)
	@mkdir -p $(EMU_BUILD)/lesson
	$(CXX) $(EMU_CXXFLAGS) -DZERO_STAGE=$* -DZERO_EXT=0 -DEMU_NCCL=1 $(EMU_MPI_CFLAGS) -x c++ $(EMU_SRC)/train_gpt2.cu -x none \
		-o $@ $(EMU_LDLIBS)

# Without MPI (zero/cluster/mpi_single.h): no mpicc flags, no MPI library.
$(EMU_BUILD)/train_gpt2cu_nompi_z%: $(EMU_BUILD)/sources.stamp $(EMU_HEADERS)
	$(CXX) $(EMU_CXXFLAGS) -DZERO_STAGE=$* -DZERO_NO_MPI=1 -x c++ $(EMU_SRC)/train_gpt2.cu -x none -o $@ $(BLAS_LDLIBS) -lm

$(EMU_BUILD)/train_gpt2cu_mpi_z%: $(EMU_BUILD)/sources.stamp $(EMU_HEADERS)
	$(CXX) $(EMU_CXXFLAGS) -DZERO_STAGE=$* -DZERO_COMM_MPI=1 $(EMU_MPI_CFLAGS) -x c++ $(EMU_SRC)/train_gpt2.cu -x none \
		-o $@ $(EMU_LDLIBS)
