// forge_kernels.hip: forge's device side. Every GPU kernel and its extern "C" launcher lives here,
// together with device memory (query, the one arena, copies). forge.h sees only the launchers.
//
// AMD:    hipcc --offload-arch=gfx90a,gfx1030 -c forge_kernels.hip
// NVIDIA: nvcc -x cu -c forge_kernels.hip      (through the name block below)
//
// Today this file holds the device query and the arena; kernels arrive with the GPU backend.

#if defined(__HIP_PLATFORM_AMD__) || defined(__HIPCC__)
#include <hip/hip_runtime.h>
#else
// The HIP names forge uses, mapped onto CUDA. Debian's HIP headers do not build against CUDA 13,
// so the project keeps its own short list instead of including them.
#include <cuda_runtime.h>
#define hipError_t cudaError_t
#define hipSuccess cudaSuccess
#define hipDeviceProp_t cudaDeviceProp
#define hipGetDeviceCount cudaGetDeviceCount
#define hipGetDeviceProperties cudaGetDeviceProperties
#define hipSetDevice cudaSetDevice
#define hipMemGetInfo cudaMemGetInfo
#define hipMalloc cudaMalloc
#define hipFree cudaFree
#define hipGetErrorString cudaGetErrorString
#endif

#include <stddef.h>
#include <stdio.h>
#include <string.h>

extern "C" {

// What forge needs to know about a device before it plans anything.
typedef struct forge_hip_device_info {
    char name[256];
    char arch[64];        // gcnArchName on AMD, "sm_XY" on NVIDIA
    int wave_size;        // 64 on CDNA, 32 on RDNA and NVIDIA: never assumed
    size_t total_bytes;
    size_t free_bytes;
} forge_hip_device_info;

// Fills info for device `device`; returns 0, or writes the runtime's message and returns -1.
int forge_hip_device_query(int device, forge_hip_device_info *info, char *message, size_t message_bytes) {
    hipDeviceProp_t prop;
    hipError_t err;
    int count = 0;
    memset(info, 0, sizeof *info);
    if ((err = hipGetDeviceCount(&count)) != hipSuccess || device < 0 || device >= count) {
        snprintf(message, message_bytes, "device %d not available (%d devices): %s", device, count,
                 err != hipSuccess ? hipGetErrorString(err) : "index out of range");
        return -1;
    }
    if ((err = hipSetDevice(device)) != hipSuccess || (err = hipGetDeviceProperties(&prop, device)) != hipSuccess ||
        (err = hipMemGetInfo(&info->free_bytes, &info->total_bytes)) != hipSuccess) {
        snprintf(message, message_bytes, "device %d query failed: %s", device, hipGetErrorString(err));
        return -1;
    }
    snprintf(info->name, sizeof info->name, "%s", prop.name);
#if defined(__HIP_PLATFORM_AMD__) || defined(__HIPCC__)
    snprintf(info->arch, sizeof info->arch, "%s", prop.gcnArchName);
#else
    snprintf(info->arch, sizeof info->arch, "sm_%d%d", prop.major, prop.minor);
#endif
    info->wave_size = prop.warpSize;
    return 0;
}

// The one device allocation forge makes for a context; its size is the memory plan's total.
int forge_hip_arena_alloc(size_t bytes, void **out, char *message, size_t message_bytes) {
    hipError_t err = hipMalloc(out, bytes);
    if (err != hipSuccess) {
        *out = NULL;
        snprintf(message, message_bytes, "device allocation of %zu bytes failed: %s", bytes, hipGetErrorString(err));
        return -1;
    }
    return 0;
}

void forge_hip_arena_free(void *arena) {
    if (arena) (void)hipFree(arena);
}

}  // extern "C"
