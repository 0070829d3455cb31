/* bitnet_cuda_kernels.h - CUDA kernel sources for bitnet.h, JIT-compiled at run time by NVRTC.

   Plain C header with no dependency on bitnet.h. Each module is one string literal of
   self-contained CUDA C++: no #include, fixed-width types declared locally, every kernel
   extern "C" __global__ bitnet_k_<name> so the loader finds it by its plain name. Tuning
   constants are #ifndef defaults that -D options may override.

   BITNET_CUDA_MODULES(X) lists X(module_name, source_symbol, min_sm) and BITNET_CUDA_KERNELS(X)
   lists X(kernel_name, module_name); the loader uses both to compile, look up and report.
   BITNET_CUDA_KERNELS_VERSION feeds the JIT cache key: bump it when any source changes meaning.
*/
#ifndef BITNET_CUDA_KERNELS_H
#define BITNET_CUDA_KERNELS_H

#define BITNET_CUDA_KERNELS_VERSION 1

/* >>kernels-common: types and helpers shared by every module (prepended by the loader) */
static const char bitnet_cuda_src_common[] =
    "typedef signed char int8_t;\n"
    "typedef unsigned char uint8_t;\n"
    "typedef short int16_t;\n"
    "typedef unsigned short uint16_t;\n"
    "typedef int int32_t;\n"
    "typedef unsigned int uint32_t;\n"
    "typedef long long int64_t;\n"
    "typedef unsigned long long uint64_t;\n";

/* >>kernels-util: small kernels the runtime itself uses and tests. Grid-stride loops: any grid
   covers any n. fill_u32: p[i] = v. add_u32: p[i] += v (a read-modify-write, so a copy that is not
   ordered after it shows). */
static const char bitnet_cuda_src_util[] =
    "extern \"C\" __global__ void bitnet_k_fill_u32(uint32_t *p, uint32_t v, uint64_t n) {\n"
    "    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x)\n"
    "        p[i] = v;\n"
    "}\n"
    "extern \"C\" __global__ void bitnet_k_add_u32(uint32_t *p, uint32_t v, uint64_t n) {\n"
    "    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x)\n"
    "        p[i] += v;\n"
    "}\n";

#define BITNET_CUDA_MODULES(X) \
    X(util, bitnet_cuda_src_util, 70)

#define BITNET_CUDA_KERNELS(X) \
    X(bitnet_k_fill_u32, util) \
    X(bitnet_k_add_u32, util)

#endif /* BITNET_CUDA_KERNELS_H */
