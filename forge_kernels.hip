// forge_kernels.hip: forge's device side. Every GPU kernel and its extern "C" launcher lives here,
// together with device memory (query, the one arena, copies). forge.h sees only the launchers.
//
// AMD:    hipcc --offload-arch=gfx90a,gfx1030 -c forge_kernels.hip
// NVIDIA: nvcc -x cu -c forge_kernels.hip      (through the name block below)
//
// Contents
//   >>names      the HIP names used, mapped onto CUDA for nvcc
//   >>memory     device query, arena, copies, streams, pinned host memory, events, graphs
//   >>device     device helpers: f16 bits, wave and block reductions
//   >>weights    one 32-element unit of every GGUF weight type, dequantized in registers
//   >>matmul     decode matvec (fused dequant + dot); prompt matmul on the matrix units, tiled fallback
//   >>rows       embed, rmsnorm / head norm, rope, add, swiglu / geglu / fused-gate split, column copy,
//                soft-cap, sigmoid gate, argmax
//   >>kv         KV cache encode (f32 / f16 / q8_0 / q4_0, bit-exact with forge__kv_encode), ring of cells
//   >>attention  flash-style causal attention over the KV cache: sliding window, soft-cap, split-KV;
//                prompts in query tiles on the tensor cores (mma), a portable tiled path elsewhere
//   >>moe        mixture of experts: top-k routing, per-expert matmul by route, weighted sum
//   >>capture    hidden-state capture rows as f32 / f16 / bf16
//   >>sample     the k best logits of a row as sorted keys, for sampling without copying the vocabulary
//
// Conventions of every launcher: plain C arguments and device pointers, a stream as `void *`
// (NULL is the default stream), returns 0, or -1 with the runtime's message in `message`; never
// prints, aborts or exits. Type ids are GGUF's (forge_type). Device pointers to f32 data must be
// 16-byte aligned (every region of the arena is 64-byte aligned). Kernels never assume a wave size:
// they read warpSize on the device, and launchers ask the runtime for it when sizing a grid.

#if defined(__HIP_PLATFORM_AMD__) || defined(__HIPCC__)
#include <hip/hip_runtime.h>
#define FORGE_SHFL_XOR(value, lane_mask) __shfl_xor((value), (lane_mask))
#define FORGE_SHFL(value, src_lane) __shfl((value), (src_lane))
#else
// >>names: the HIP names forge uses, mapped onto CUDA. Debian's HIP headers do not build against
// CUDA 13, so the project keeps its own short list instead of including them.
#include <cuda_runtime.h>
#define hipError_t cudaError_t
#define hipSuccess cudaSuccess
#define hipDeviceProp_t cudaDeviceProp
#define hipGetDeviceCount cudaGetDeviceCount
#define hipGetDeviceProperties cudaGetDeviceProperties
#define hipSetDevice cudaSetDevice
#define hipGetDevice cudaGetDevice
#define hipDeviceGetAttribute cudaDeviceGetAttribute
#define hipDeviceAttributeWarpSize cudaDevAttrWarpSize
#define hipDeviceAttributeMultiprocessorCount cudaDevAttrMultiProcessorCount
#define hipMemGetInfo cudaMemGetInfo
#define hipMalloc cudaMalloc
#define hipFree cudaFree
#define hipGetErrorString cudaGetErrorString
#define hipGetLastError cudaGetLastError
#define hipStream_t cudaStream_t
#define hipStreamCreate cudaStreamCreate
#define hipStreamDestroy cudaStreamDestroy
#define hipStreamSynchronize cudaStreamSynchronize
#define hipMemcpyAsync cudaMemcpyAsync
#define hipMemsetAsync cudaMemsetAsync
#define hipMemcpyHostToDevice cudaMemcpyHostToDevice
#define hipMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define hipMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define hipHostMalloc cudaHostAlloc
#define hipHostMallocDefault cudaHostAllocDefault
#define hipHostFree cudaFreeHost
#define hipEvent_t cudaEvent_t
#define hipEventCreateWithFlags cudaEventCreateWithFlags
#define hipEventDisableTiming cudaEventDisableTiming
#define hipEventRecord cudaEventRecord
#define hipEventSynchronize cudaEventSynchronize
#define hipEventDestroy cudaEventDestroy
#define hipGraph_t cudaGraph_t
#define hipGraphExec_t cudaGraphExec_t
#define hipStreamBeginCapture cudaStreamBeginCapture
#define hipStreamEndCapture cudaStreamEndCapture
#define hipStreamCaptureModeThreadLocal cudaStreamCaptureModeThreadLocal
#define hipGraphInstantiateWithFlags cudaGraphInstantiateWithFlags
#define hipGraphLaunch cudaGraphLaunch
#define hipGraphExecDestroy cudaGraphExecDestroy
#define hipGraphDestroy cudaGraphDestroy
#define hipMemcpyPeerAsync cudaMemcpyPeerAsync
#define hipStreamWaitEvent cudaStreamWaitEvent
#define hipDeviceCanAccessPeer cudaDeviceCanAccessPeer
#define hipDeviceEnablePeerAccess cudaDeviceEnablePeerAccess
#define hipDeviceDisablePeerAccess cudaDeviceDisablePeerAccess
#define hipErrorPeerAccessAlreadyEnabled cudaErrorPeerAccessAlreadyEnabled
// every lane of a wave takes part in forge's shuffles, so the full mask is right
#define FORGE_SHFL_XOR(value, lane_mask) __shfl_xor_sync(0xffffffffu, (value), (lane_mask))
#define FORGE_SHFL(value, src_lane) __shfl_sync(0xffffffffu, (value), (src_lane))
#endif

#include <atomic>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// GGUF type ids (forge.h's forge_type; the numbering is ggml's and never changes).
enum {
    FORGE_HIP_F32 = 0, FORGE_HIP_F16 = 1, FORGE_HIP_Q4_0 = 2, FORGE_HIP_Q4_1 = 3, FORGE_HIP_Q5_0 = 6,
    FORGE_HIP_Q5_1 = 7, FORGE_HIP_Q8_0 = 8, FORGE_HIP_Q2_K = 10, FORGE_HIP_Q3_K = 11, FORGE_HIP_Q4_K = 12,
    FORGE_HIP_Q5_K = 13, FORGE_HIP_Q6_K = 14, FORGE_HIP_IQ4_NL = 20, FORGE_HIP_IQ4_XS = 23, FORGE_HIP_BF16 = 30
};

// A bit of a step's row sequence id (forge.h sets it on the rows that pad a step to a recorded row
// count): the row reads its sequence's cache as any row does and stores nothing into it.
#define FORGE_HIP_ROW_NO_STORE 0x80000000u
// Where row t's sequence's cache starts, in bytes after sequence 0's (0 without row sequences)
__device__ __forceinline__ size_t forge__row_seq_base(const uint32_t *row_seq, uint32_t t, size_t seq_stride) {
    return row_seq ? (size_t)(row_seq[t] & ~FORGE_HIP_ROW_NO_STORE) * seq_stride : 0;
}
// Whether row t stores its keys and values (a padding row does not)
__device__ __forceinline__ bool forge__row_stores(const uint32_t *row_seq, uint32_t t) {
    return !row_seq || !(row_seq[t] & FORGE_HIP_ROW_NO_STORE);
}

// One product of forge_hip_matmul_rows_q8_group (forge.h declares the same): y = w x (+ bias), n_rows
// rows of GGUF type `type`.
typedef struct forge_hip_product {
    uint32_t type;
    const void *w;
    uint32_t n_rows;
    float *y;
    const float *bias;
} forge_hip_product;
#define FORGE__MH_GROUP 3 // products of forge_hip_matmul_rows_q8_group, at most

// ---- launcher plumbing ----

static int forge__hip_fail(hipError_t err, const char *what, char *message, size_t message_bytes) {
    if (message && message_bytes) snprintf(message, message_bytes, "%s: %s", what, hipGetErrorString(err));
    return -1;
}

static int forge__hip_refuse(char *message, size_t message_bytes, const char *text) {
    if (message && message_bytes) snprintf(message, message_bytes, "%s", text);
    return -1;
}

// After a launch: a bad configuration shows up here; faults inside the kernel show up at the next sync.
static int forge__hip_launched(const char *what, char *message, size_t message_bytes) {
    hipError_t err = hipGetLastError();
    return err == hipSuccess ? 0 : forge__hip_fail(err, what, message, message_bytes);
}

// The current device's wave size, for sizing grids (kernels read warpSize themselves).
static int forge__hip_wave_size(void) {
    int device = 0, wave = 0;
    if (hipGetDevice(&device) != hipSuccess || hipDeviceGetAttribute(&wave, hipDeviceAttributeWarpSize, device) != hipSuccess ||
        wave <= 0)
        wave = 64; // the largest wave: a grid sized for it still covers every row (extra rows are skipped)
    return wave;
}

// ---- the launch switches of the context being served, for the calling thread ----
//
// forge.h runs every call that touches a device between forge_hip_enter and forge_hip_leave: enter
// makes the context's device current for the calling thread and sets the context's switches
// (FORGE_HIP_NO_PDL, FORGE_HIP_NO_STAGE, FORGE_HIP_NO_WGMMA, from forge_context_desc) for that thread; leave puts both
// back as they were. Two contexts with different switches, on two threads, never see each other's.
#define FORGE_HIP_NO_PDL 1u
#define FORGE_HIP_NO_STAGE 2u
#define FORGE_HIP_NO_WGMMA 4u
static thread_local unsigned forge__hip_switches = 0;

// ---- overlapped launches of the decode step ----
//
// On NVIDIA sm_90 and newer, the kernels of a decode step (and of a step of several sequences: the
// rows products, their sums, norms, attention, swiglu) are launched with programmatic stream
// serialization: the next kernel's blocks may be placed while the current one runs, and wait in
// FORGE__GRID_ENTER (griddepcontrol.wait: every earlier kernel complete, its writes visible) before
// touching memory any kernel writes; once through it they let the kernel after them be placed in
// turn. That hides a launch and the filling of the machine behind the kernel before, the cost that
// dominates a step of short kernels; the decode products also load their first weights before the
// wait (forge__mvq_block), so that latency passes too, or where their rows fit, copy all of them to
// shared memory before it (forge__stage_ok). A kernel launched this way must pass
// FORGE__GRID_ENTER before it reads or writes anything another kernel writes; forge__launch only
// asks for it when the kernels were compiled with it (compute capability 9.0 code) and the device
// runs them; the context's gpu_no_pdl turns it off (FORGE_HIP_NO_PDL). Elsewhere it is an ordinary launch.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(__HIP_PLATFORM_AMD__)
#define FORGE__GRID_ENTER() asm volatile("griddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;" ::: "memory")
#else
#define FORGE__GRID_ENTER() ((void)0)
#endif

__global__ void forge__k_grid_probe(void) {} // its ptxVersion says which code the kernels were built as

#if defined(__HIP_PLATFORM_AMD__) || defined(__HIPCC__)
template <typename... KArgs, typename... Args>
static void forge__launch_smem(int overlap, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, hipStream_t s, Args... args) {
    (void)overlap;
    hipLaunchKernelGGL(kernel, grid, block, smem, s, args...);
}
#else
// What ask(device) says of the current device, asked once a device: known[d] 0 not asked, 1 no, 2 yes
// (threads that ask together find the same answer; devices past 63 ask each time); 0 where the
// runtime names no current device. A failed query is not left as the runtime's last error.
static int forge__device_once(std::atomic<int> (&known)[64], bool (*ask)(int device)) {
    int device = 0, state = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return (void)cudaGetLastError(), 0;
    if (device >= 0 && device < 64) state = known[device].load(std::memory_order_relaxed);
    if (state == 0) {
        state = ask(device) ? 2 : 1;
        (void)cudaGetLastError();
        if (device >= 0 && device < 64) known[device].store(state, std::memory_order_relaxed);
    }
    return state == 2;
}

// Whether the current device runs overlapped launches (compute capability 9.0 and kernels built as
// such), asked once a device, and the calling thread's switch allows them.
static bool forge__pdl_ask(int device) {
    int major = 0;
    cudaFuncAttributes fa;
    return cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess && major >= 9 &&
           cudaFuncGetAttributes(&fa, forge__k_grid_probe) == cudaSuccess && fa.ptxVersion >= 90;
}
static int forge__pdl_enabled(void) {
    static std::atomic<int> known[64];
    return !(forge__hip_switches & FORGE_HIP_NO_PDL) && forge__device_once(known, forge__pdl_ask);
}

// overlap 0: the kernel is placed only once the one before it has finished (its FORGE__GRID_ENTER
// then waits for nothing), for a kernel whose blocks lose by being placed beside the one before (see
// forge_hip_rope_attention_q8); it still lets the kernel after it be placed early.
template <typename... KArgs, typename... Args>
static void forge__launch_smem(int overlap, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, hipStream_t s, Args... args) {
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute attr[1];
    memset(&cfg, 0, sizeof cfg);
    memset(attr, 0, sizeof attr);
    cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = s;
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr, cfg.numAttrs = overlap && forge__pdl_enabled() ? 1 : 0;
    cudaLaunchKernelEx(&cfg, kernel, args...);
}
#endif

template <typename... KArgs, typename... Args>
static void forge__launch_as(int overlap, void (*kernel)(KArgs...), dim3 grid, dim3 block, hipStream_t s, Args... args) {
    forge__launch_smem(overlap, kernel, grid, block, 0, s, args...);
}
template <typename... KArgs, typename... Args>
static void forge__launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, hipStream_t s, Args... args) {
    forge__launch_smem(1, kernel, grid, block, 0, s, args...);
}

extern "C" {

/* >>memory ------------------------------------------------------------------------------------ */

// What forge needs to know about a device before it plans anything.
typedef struct forge_hip_device_info {
    char name[256];
    char arch[64];        // gcnArchName on AMD, "sm_XY" on NVIDIA
    int wave_size;        // 64 on CDNA, 32 on RDNA and NVIDIA: never assumed
    size_t total_bytes;
    size_t free_bytes;
    int fp16;             // half-precision arithmetic
    int bf16;             // bfloat16 arithmetic
} forge_hip_device_info;

// The calling thread's current device and launch switches, as forge_hip_enter found them.
typedef struct forge_hip_scope {
    int device;         // current before enter
    int switched;       // 1 when enter changed the current device
    unsigned switches;  // the thread's switches before enter
} forge_hip_scope;

// Makes `device` current for the calling thread and sets its launch switches (FORGE_HIP_NO_PDL,
// FORGE_HIP_NO_STAGE); *saved receives what to restore. Returns 0, or -1 with the runtime's message
// (nothing changed then).
int forge_hip_enter(int device, unsigned switches, forge_hip_scope *saved, char *message, size_t message_bytes) {
    hipError_t err;
    int current = 0;
    saved->device = 0, saved->switched = 0, saved->switches = forge__hip_switches;
    if ((err = hipGetDevice(&current)) != hipSuccess) return forge__hip_fail(err, "current device", message, message_bytes);
    saved->device = current;
    if (current != device) {
        if ((err = hipSetDevice(device)) != hipSuccess) return forge__hip_fail(err, "set device", message, message_bytes);
        saved->switched = 1;
    }
    forge__hip_switches = switches;
    return 0;
}

// Puts back the device and the switches forge_hip_enter found.
void forge_hip_leave(const forge_hip_scope *saved) {
    forge__hip_switches = saved->switches;
    if (saved->switched) (void)hipSetDevice(saved->device);
}

// Fills info for device `device`; returns 0, or writes the runtime's message and returns -1. The
// calling thread's current device is the same after as before.
int forge_hip_device_query(int device, forge_hip_device_info *info, char *message, size_t message_bytes) {
    hipDeviceProp_t prop;
    hipError_t err;
    forge_hip_scope scope;
    int count = 0;
    memset(info, 0, sizeof *info);
    if ((err = hipGetDeviceCount(&count)) != hipSuccess || device < 0 || device >= count) {
        snprintf(message, message_bytes, "device %d not available (%d devices): %s", device, count,
                 err != hipSuccess ? hipGetErrorString(err) : "index out of range");
        return -1;
    }
    if (forge_hip_enter(device, forge__hip_switches, &scope, message, message_bytes) != 0) return -1;
    if ((err = hipGetDeviceProperties(&prop, device)) != hipSuccess ||
        (err = hipMemGetInfo(&info->free_bytes, &info->total_bytes)) != hipSuccess) {
        forge_hip_leave(&scope);
        snprintf(message, message_bytes, "device %d query failed: %s", device, hipGetErrorString(err));
        return -1;
    }
    forge_hip_leave(&scope);
    snprintf(info->name, sizeof info->name, "%s", prop.name);
#if defined(__HIP_PLATFORM_AMD__) || defined(__HIPCC__)
    snprintf(info->arch, sizeof info->arch, "%s", prop.gcnArchName);
    // every GCN/CDNA/RDNA target computes in fp16; bf16 arithmetic came with CDNA2 (gfx90a), CDNA3 (gfx94x) and RDNA3 (gfx11)
    info->fp16 = 1;
    info->bf16 = strncmp(prop.gcnArchName, "gfx90a", 6) == 0 || strncmp(prop.gcnArchName, "gfx94", 5) == 0 ||
                 strncmp(prop.gcnArchName, "gfx95", 5) == 0 || strncmp(prop.gcnArchName, "gfx11", 5) == 0 ||
                 strncmp(prop.gcnArchName, "gfx12", 5) == 0;
#else
    snprintf(info->arch, sizeof info->arch, "sm_%d%d", prop.major, prop.minor);
    info->fp16 = prop.major > 5 || (prop.major == 5 && prop.minor >= 3); // sm_53 and later
    info->bf16 = prop.major >= 8;                                         // Ampere and later
#endif
    info->wave_size = prop.warpSize;
    return 0;
}

// The one device allocation forge makes for a context; its size is the memory plan's total.
// Test hooks, process-wide by nature: how many device allocations forge has made, and an
// allocation that fails on purpose (the k-th from now; -1: none) to drive the transactional tests.
// Atomic, so that contexts created on several threads at once count right.
static std::atomic<unsigned long> forge__hip_allocations(0);
static std::atomic<long> forge__hip_fail_in(-1);

unsigned long forge_hip_allocation_count(void) { return forge__hip_allocations.load(); }
void forge_hip_fail_allocation_after(long k) { forge__hip_fail_in.store(k); }

// One step of a fail-after hook: counts it down while it is >= 0; 1 (fail now) when it was 0.
static int forge__hip_hook_fires(std::atomic<long> &k) {
    long v = k.load();
    while (v >= 0)
        if (k.compare_exchange_weak(v, v - 1)) return v == 0;
    return 0;
}

int forge_hip_arena_alloc(size_t bytes, void **out, char *message, size_t message_bytes) {
    hipError_t err;
    if (forge__hip_hook_fires(forge__hip_fail_in)) {
        *out = NULL;
        snprintf(message, message_bytes, "device allocation of %zu bytes failed: injected by the test hook", bytes);
        return -1;
    }
    err = hipMalloc(out, bytes);
    if (err == hipSuccess) forge__hip_allocations++;
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

// Copies are queued on `stream`; the host buffer must stay alive (and unchanged) until the stream
// is synchronized. Pageable host memory makes the runtime stage the copy, which is correct, only slower.
int forge_hip_copy_to_device(void *device_dst, const void *host_src, size_t bytes, void *stream, char *message,
                             size_t message_bytes) {
    hipError_t err = hipMemcpyAsync(device_dst, host_src, bytes, hipMemcpyHostToDevice, (hipStream_t)stream);
    return err == hipSuccess ? 0 : forge__hip_fail(err, "copy to device", message, message_bytes);
}

int forge_hip_copy_from_device(void *host_dst, const void *device_src, size_t bytes, void *stream, char *message,
                               size_t message_bytes) {
    hipError_t err = hipMemcpyAsync(host_dst, device_src, bytes, hipMemcpyDeviceToHost, (hipStream_t)stream);
    return err == hipSuccess ? 0 : forge__hip_fail(err, "copy from device", message, message_bytes);
}

int forge_hip_copy_device(void *device_dst, const void *device_src, size_t bytes, void *stream, char *message,
                          size_t message_bytes) {
    hipError_t err = hipMemcpyAsync(device_dst, device_src, bytes, hipMemcpyDeviceToDevice, (hipStream_t)stream);
    return err == hipSuccess ? 0 : forge__hip_fail(err, "device copy", message, message_bytes);
}

int forge_hip_memset(void *device_dst, int byte, size_t bytes, void *stream, char *message, size_t message_bytes) {
    hipError_t err = hipMemsetAsync(device_dst, byte, bytes, (hipStream_t)stream);
    return err == hipSuccess ? 0 : forge__hip_fail(err, "device memset", message, message_bytes);
}

// Waits for everything queued on `stream`; a fault inside an earlier kernel is reported here.
int forge_hip_stream_sync(void *stream, char *message, size_t message_bytes) {
    hipError_t err = hipStreamSynchronize((hipStream_t)stream);
    return err == hipSuccess ? 0 : forge__hip_fail(err, "stream synchronize", message, message_bytes);
}

int forge_hip_stream_create(void **out, char *message, size_t message_bytes) {
    hipStream_t s = NULL;
    hipError_t err = hipStreamCreate(&s);
    *out = err == hipSuccess ? (void *)s : NULL;
    return err == hipSuccess ? 0 : forge__hip_fail(err, "stream create", message, message_bytes);
}

void forge_hip_stream_destroy(void *stream) {
    if (stream) (void)hipStreamDestroy((hipStream_t)stream);
}

// Pinned (page-locked) host memory: what the copy engine reads without staging, so copies from it
// overlap the host's work. Host memory, never part of the device plan; a test hook fails the k-th
// such allocation from now (-1: none).
static std::atomic<long> forge__hip_host_fail_in(-1);
void forge_hip_fail_host_allocation_after(long k) { forge__hip_host_fail_in.store(k); }

int forge_hip_host_alloc(size_t bytes, void **out, char *message, size_t message_bytes) {
    hipError_t err;
    *out = NULL;
    if (forge__hip_hook_fires(forge__hip_host_fail_in))
        return forge__hip_refuse(message, message_bytes, "pinned host allocation failed: injected by the test hook");
    err = hipHostMalloc(out, bytes, hipHostMallocDefault);
    if (err != hipSuccess) {
        *out = NULL;
        if (message && message_bytes)
            snprintf(message, message_bytes, "pinned host allocation of %zu bytes failed: %s", bytes, hipGetErrorString(err));
        return -1;
    }
    return 0;
}

void forge_hip_host_free(void *host) {
    if (host) (void)hipHostFree(host);
}

// Events order the host against one point of a stream (a staging buffer free again, say).
int forge_hip_event_create(void **out, char *message, size_t message_bytes) {
    hipEvent_t e = NULL;
    hipError_t err = hipEventCreateWithFlags(&e, hipEventDisableTiming);
    *out = err == hipSuccess ? (void *)e : NULL;
    return err == hipSuccess ? 0 : forge__hip_fail(err, "event create", message, message_bytes);
}

int forge_hip_event_record(void *event, void *stream, char *message, size_t message_bytes) {
    hipError_t err = hipEventRecord((hipEvent_t)event, (hipStream_t)stream);
    return err == hipSuccess ? 0 : forge__hip_fail(err, "event record", message, message_bytes);
}

int forge_hip_event_sync(void *event, char *message, size_t message_bytes) {
    hipError_t err = hipEventSynchronize((hipEvent_t)event);
    return err == hipSuccess ? 0 : forge__hip_fail(err, "event synchronize", message, message_bytes);
}

void forge_hip_event_destroy(void *event) {
    if (event) (void)hipEventDestroy((hipEvent_t)event);
}

// ---- several devices (a model split by layers) ----

// Makes `device` current for the calling thread (inside forge_hip_enter's scope, which restores the
// device the caller had).
int forge_hip_set_device(int device, char *message, size_t message_bytes) {
    hipError_t err = hipSetDevice(device);
    return err == hipSuccess ? 0 : forge__hip_fail(err, "set device", message, message_bytes);
}

// bytes from src on src_device to dst on dst_device, queued on `stream` (the source device's): a
// direct copy where peer access is on, else staged by the runtime; a plain device copy on one device.
int forge_hip_copy_peer(void *dst, int dst_device, const void *src, int src_device, size_t bytes, void *stream, char *message,
                        size_t message_bytes) {
    hipError_t err = dst_device == src_device ? hipMemcpyAsync(dst, src, bytes, hipMemcpyDeviceToDevice, (hipStream_t)stream)
                                              : hipMemcpyPeerAsync(dst, dst_device, src, src_device, bytes, (hipStream_t)stream);
    return err == hipSuccess ? 0 : forge__hip_fail(err, "peer copy", message, message_bytes);
}

// The work queued on `stream` after this waits for `event` (recorded on another stream, of any device).
int forge_hip_stream_wait(void *stream, void *event, char *message, size_t message_bytes) {
    hipError_t err = hipStreamWaitEvent((hipStream_t)stream, (hipEvent_t)event, 0);
    return err == hipSuccess ? 0 : forge__hip_fail(err, "stream wait", message, message_bytes);
}

// Lets `device` reach `peer`'s memory directly when the hardware allows: *enabled is 1 when this call
// turned it on (forge_hip_peer_disable turns it off again), 0 when it was on already or is not
// possible (the copies are then staged, which is correct, only slower). The calling thread's current
// device is the same after as before.
int forge_hip_peer_enable(int device, int peer, int *enabled, char *message, size_t message_bytes) {
    forge_hip_scope scope;
    int can = 0;
    hipError_t err;
    *enabled = 0;
    if (device == peer) return 0;
    if ((err = hipDeviceCanAccessPeer(&can, device, peer)) != hipSuccess) return forge__hip_fail(err, "peer query", message, message_bytes);
    if (!can) return 0;
    if (forge_hip_enter(device, forge__hip_switches, &scope, message, message_bytes) != 0) return -1;
    err = hipDeviceEnablePeerAccess(peer, 0);
    forge_hip_leave(&scope);
    if (err == hipErrorPeerAccessAlreadyEnabled) {
        (void)hipGetLastError(); // the sticky-free error is cleared, nothing changed
        return 0;
    }
    if (err != hipSuccess) return forge__hip_fail(err, "peer enable", message, message_bytes);
    *enabled = 1;
    return 0;
}

void forge_hip_peer_disable(int device, int peer) {
    forge_hip_scope scope;
    char message[64];
    if (forge_hip_enter(device, forge__hip_switches, &scope, message, sizeof message) != 0) return;
    (void)hipDeviceDisablePeerAccess(peer);
    forge_hip_leave(&scope);
}

// Graphs: the launches queued on `stream` between begin and end are recorded instead of run, and
// the result replays them with one call. Arguments are baked in, so whatever changes between
// replays must be read from device memory. Instantiating makes host-side runtime objects only.
int forge_hip_graph_begin(void *stream, char *message, size_t message_bytes) {
    hipError_t err = hipStreamBeginCapture((hipStream_t)stream, hipStreamCaptureModeThreadLocal);
    return err == hipSuccess ? 0 : forge__hip_fail(err, "graph capture begin", message, message_bytes);
}

// Ends the recording begun on `stream` (always, so the stream runs launches again) and, when
// `keep` is set and the recording went well, instantiates it into *out; else *out is NULL.
int forge_hip_graph_end(void *stream, int keep, void **out, char *message, size_t message_bytes) {
    hipGraph_t graph = NULL;
    hipGraphExec_t exec = NULL;
    hipError_t err = hipStreamEndCapture((hipStream_t)stream, &graph);
    *out = NULL;
    if (err == hipSuccess && keep && graph) err = hipGraphInstantiateWithFlags(&exec, graph, 0);
#if !(defined(__HIP_PLATFORM_AMD__) || defined(__HIPCC__))
    // the graph's device-side resources now, while the context is created, not at the first replay
    if (err == hipSuccess && exec) err = cudaGraphUpload(exec, (hipStream_t)stream);
#endif
    if (graph) (void)hipGraphDestroy(graph); // the instantiated graph keeps what it needs
    (void)hipGetLastError();                 // a broken recording leaves no error behind for later launches
    if (err != hipSuccess) {
        if (exec) (void)hipGraphExecDestroy(exec);
        return forge__hip_fail(err, "graph capture end", message, message_bytes);
    }
    if (!keep) return 0;
    if (!exec) return forge__hip_refuse(message, message_bytes, "graph capture end: nothing recorded");
    *out = (void *)exec;
    return 0;
}

int forge_hip_graph_launch(void *graph, void *stream, char *message, size_t message_bytes) {
    hipError_t err = hipGraphLaunch((hipGraphExec_t)graph, (hipStream_t)stream);
    return err == hipSuccess ? 0 : forge__hip_fail(err, "graph launch", message, message_bytes);
}

void forge_hip_graph_destroy(void *graph) {
    if (graph) (void)hipGraphExecDestroy((hipGraphExec_t)graph);
}

}  // extern "C"

/* >>device ------------------------------------------------------------------------------------ */

// f16 bits -> f32, exact for every input (subnormals too): the hardware conversion, one instruction,
// reached without an fp16 header on either vendor. The integer version it replaced cost about ten
// operations per element and held the F16 matvec at ~1980 GB/s on an H100 (now ~2590).
__device__ __forceinline__ float forge__f16(uint32_t h) {
#if defined(__HIP_PLATFORM_AMD__) || defined(__HIPCC__)
    return (float)__builtin_bit_cast(_Float16, (unsigned short)h); // v_cvt_f32_f16: exact, one instruction
#else
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)h));
    return f;
#endif
}

__device__ __forceinline__ float forge__bf16(uint32_t h) { return __uint_as_float(h << 16); }

// f32 -> f16 bits, round to nearest even: the same integer steps as forge_f32_to_f16, so the KV
// cache a GPU writes is byte for byte the one the CPU backend writes.
__device__ __forceinline__ uint32_t forge__to_f16(float value) {
    uint32_t bits = __float_as_uint(value), sign = (bits >> 16) & 0x8000u, mantissa = bits & 0x7fffffu;
    int exponent = (int)((bits >> 23) & 0xffu);
    if (exponent == 255) return sign | 0x7c00u | (mantissa ? 0x200u : 0u);
    exponent = exponent - 127 + 15;
    if (exponent >= 31) return sign | 0x7c00u;
    if (exponent <= 0) {
        if (exponent < -10) return sign;
        mantissa |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - exponent), half = 1u << (shift - 1), rest = mantissa & ((1u << shift) - 1);
        uint32_t rounded = mantissa >> shift;
        if (rest > half || (rest == half && (rounded & 1u))) rounded++;
        return sign | rounded;
    }
    uint32_t result = sign | ((uint32_t)exponent << 10) | (mantissa >> 13), rest = mantissa & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (result & 1u))) result++; // a carry into the exponent is right
    return result;
}

// Little-endian loads of known alignment (the block layouts below say which alignment holds).
__device__ __forceinline__ uint32_t forge__ld16(const uint8_t *p) { return *(const uint16_t *)p; }
__device__ __forceinline__ uint32_t forge__ld32(const uint8_t *p) { return *(const uint32_t *)p; }
__device__ __forceinline__ uint4 forge__ld128(const uint8_t *p) { return *(const uint4 *)p; }

// Sum over the lanes of one wave, every lane gets the total; the loop reads the wave size.
__device__ __forceinline__ float forge__wave_sum(float v) {
    for (int lane_mask = warpSize / 2; lane_mask > 0; lane_mask >>= 1) v += FORGE_SHFL_XOR(v, lane_mask);
    return v;
}

__device__ __forceinline__ float forge__wave_max(float v) {
    for (int lane_mask = warpSize / 2; lane_mask > 0; lane_mask >>= 1) v = fmaxf(v, FORGE_SHFL_XOR(v, lane_mask));
    return v;
}

// Sum over a block whose size is a multiple of the wave size; every thread gets the total, added
// up in one fixed order (wave 0 first), so the result does not depend on scheduling.
__device__ float forge__block_sum(float v) {
    __shared__ float partial[32]; // 1024 threads / 32 lanes: enough waves for any wave size
    const int wave = warpSize, lane = threadIdx.x % wave, id = threadIdx.x / wave, n_waves = blockDim.x / wave;
    v = forge__wave_sum(v);
    if (lane == 0) partial[id] = v;
    __syncthreads();
    float total = 0.0f;
    for (int i = 0; i < n_waves; i++) total += partial[i];
    __syncthreads(); // the next call may overwrite partial
    return total;
}

/* >>weights ----------------------------------------------------------------------------------- */

// Every weight type is read in units of 32 consecutive elements of a row: one block of the 32-element
// types, one eighth of a 256-element super-block of the K-quants and IQ4_XS, 32 values of F32/F16/BF16.
// unit(row, u, v) writes elements 32u..32u+31 of the row into v (registers: every loop is unrolled),
// with the same arithmetic and order as forge.h's forge__dq_* so that results match the CPU closely.
// Layouts and alignments (a row starts 16-byte aligned; a block's alignment follows from its size):
//   Q4_0 18 B: [d][16 qs]              2-aligned    Q4_1 20 B: [d][m][16 qs]          4-aligned
//   Q5_0 22 B: [d][qh u32][16 qs]      2-aligned    Q5_1 24 B: [d][m][qh u32][16 qs]  8-aligned
//   Q8_0 34 B: [d][32 int8]            2-aligned    IQ4_NL 18 B: as Q4_0, levels from a table
//   Q2_K 84 B: [scales 16][qs 64][d][dmin]                           4-aligned
//   Q3_K 110 B: [hmask 32][qs 64][scales 12][d]                      2-aligned
//   Q4_K 144 B: [d][dmin][scales 12][qs 128]                        16-aligned
//   Q5_K 176 B: [d][dmin][scales 12][qh 32][qs 128]                 16-aligned
//   Q6_K 210 B: [ql 128][qh 64][scales 16 int8][d] in the file; on the device, below
//   IQ4_XS 136 B: [d][scales_h u16][scales_l 4][qs 128]              8-aligned
// Q6_K matrices are the one case stored on the device in a layout of their own (forge.h packs them as
// they upload, forge__gpu_pack_q6_k): a row of nb = n_cols / 256 super-blocks keeps its 210 nb bytes
// and its place, as four arrays: ql (128 nb bytes; in super-block j, piece pi's 16 bytes at 128 j +
// 16 pi: file bytes 64 h + 8 t .. + 7, then 64 h + 32 + 8 t .. + 7, with h = pi / 4 and t = pi % 4),
// qh (64 nb, at 128 nb + 64 j, file order), scales (16 nb, at 192 nb + 16 j, file order) and d (2 nb,
// at 208 nb + 2 j). In the file a piece's 32 bytes are scattered over a 2-aligned block: about a dozen
// 4-byte loads and byte permutes. Rows of 2048k elements start 16-aligned and a piece is one 16-byte,
// two 8-byte and one 2-byte load; other even counts of super-blocks start 4-aligned, and a piece is
// eight aligned words and d. With an odd count (Qwen2.5-1.5B's 8960 columns) every other row starts
// 2 bytes past a 4-byte boundary: such a row keeps its d array first (at 0, the others 2 nb further
// on), so that ql, qh and the scales are 4-aligned in every row, and a reader tells the order from
// its row's address (the matrix starts 4-aligned). Q4_0 and Q8_0 matrices whose rows are a multiple of
// 256 elements (nb blocks, nb a multiple of 8) are stored in a device layout too (forge.h's
// forge__gpu_pack_q0): a row keeps its bytes and its place as its nb f16 scales (2 nb bytes) and then
// its quants (16 or 32 nb bytes), each in file order; rows and quants are then 16-aligned, and a
// block's quants are one (Q4_0) or two (Q8_0) 16-byte loads where the file's 2-aligned block takes five
// or nine 4-byte loads and byte permutes. Other widths (Qwen2.5-0.5B's 896) keep the file's layout.
// Readers take n_cols to tell the layout (forge__q6_k_layout, forge__q0_packed; the other types ignore
// it).

// Whether a Q4_0 / Q8_0 matrix of n_cols columns is stored in the device layout (scales, then quants).
__host__ __device__ __forceinline__ bool forge__q0_packed(uint32_t n_cols) { return n_cols % 256 == 0; }

// The 16 IQ4 levels {-127,-104,-83,-65, -49,-35,-22,-10, 1,13,25,38, 53,69,89,113} packed four int8
// to a word and picked with selects: no table in memory, no divergent lookups.
__device__ __forceinline__ float forge__iq4_level(uint32_t q) {
    uint32_t word = q < 4 ? 0xBFAD9881u : q < 8 ? 0xF6EADDCFu : q < 12 ? 0x26190D01u : 0x71594535u;
    return (float)(int8_t)(uint8_t)(word >> (8 * (q & 3)));
}

struct forge__w_f32 {
    static const int block_elems = 1, block_bytes = 4, is_float = 1;
    static __device__ __forceinline__ void unit(const uint8_t *row, uint32_t u, uint32_t, float v[32]) {
        const float4 *p = (const float4 *)(row + (size_t)u * 128);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            float4 f = p[i];
            v[4 * i] = f.x, v[4 * i + 1] = f.y, v[4 * i + 2] = f.z, v[4 * i + 3] = f.w;
        }
    }
    static __device__ __forceinline__ float elem(const uint8_t *row, uint32_t c) { return ((const float *)row)[c]; }
};

struct forge__w_f16 {
    static const int block_elems = 1, block_bytes = 2, is_float = 1;
    static __device__ __forceinline__ void unit(const uint8_t *row, uint32_t u, uint32_t, float v[32]) {
        const uint8_t *p = row + (size_t)u * 64;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint4 q = forge__ld128(p + 16 * i);
            uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
            for (int k = 0; k < 4; k++) v[8 * i + 2 * k] = forge__f16(w[k] & 0xffffu), v[8 * i + 2 * k + 1] = forge__f16(w[k] >> 16);
        }
    }
    static __device__ __forceinline__ float elem(const uint8_t *row, uint32_t c) { return forge__f16(forge__ld16(row + 2 * (size_t)c)); }
};

struct forge__w_bf16 {
    static const int block_elems = 1, block_bytes = 2, is_float = 1;
    static __device__ __forceinline__ void unit(const uint8_t *row, uint32_t u, uint32_t, float v[32]) {
        const uint8_t *p = row + (size_t)u * 64;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint4 q = forge__ld128(p + 16 * i);
            uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
            for (int k = 0; k < 4; k++) v[8 * i + 2 * k] = forge__bf16(w[k] & 0xffffu), v[8 * i + 2 * k + 1] = forge__bf16(w[k] >> 16);
        }
    }
    static __device__ __forceinline__ float elem(const uint8_t *row, uint32_t c) { return forge__bf16(forge__ld16(row + 2 * (size_t)c)); }
};

// The 32-element block types: byte j of qs holds element j (low nibble) and j + 16 (high nibble).
// In the device layout (forge__q0_packed) d is at 2u and the quants at 2 nb + 16u (Q4_0) or 32u (Q8_0).
struct forge__w_q4_0 {
    static const int block_elems = 32, block_bytes = 18, is_float = 0;
    static __device__ __forceinline__ void unit(const uint8_t *row, uint32_t u, uint32_t n_cols, float v[32]) {
        const bool packed = forge__q0_packed(n_cols);
        const uint8_t *b = row + (size_t)u * (packed ? 2 : 18), *qs = packed ? row + n_cols / 16 + (size_t)u * 16 : b + 2;
        const float d = forge__f16(forge__ld16(b));
#pragma unroll
        for (int i = 0; i < 8; i++) {
            uint32_t w = forge__ld16(qs + 2 * i);
#pragma unroll
            for (int k = 0; k < 2; k++) {
                uint32_t byte = (w >> (8 * k)) & 0xffu;
                v[2 * i + k] = (float)((int)(byte & 0xfu) - 8) * d;
                v[2 * i + k + 16] = (float)((int)(byte >> 4) - 8) * d;
            }
        }
    }
    static __device__ __forceinline__ float elem(const uint8_t *, uint32_t) { return 0.0f; }
};

struct forge__w_iq4_nl {
    static const int block_elems = 32, block_bytes = 18, is_float = 0;
    static __device__ __forceinline__ void unit(const uint8_t *row, uint32_t u, uint32_t, float v[32]) {
        const uint8_t *b = row + (size_t)u * 18;
        const float d = forge__f16(forge__ld16(b));
#pragma unroll
        for (int i = 0; i < 8; i++) {
            uint32_t w = forge__ld16(b + 2 + 2 * i);
#pragma unroll
            for (int k = 0; k < 2; k++) {
                uint32_t byte = (w >> (8 * k)) & 0xffu;
                v[2 * i + k] = d * forge__iq4_level(byte & 0xfu);
                v[2 * i + k + 16] = d * forge__iq4_level(byte >> 4);
            }
        }
    }
    static __device__ __forceinline__ float elem(const uint8_t *, uint32_t) { return 0.0f; }
};

struct forge__w_q4_1 {
    static const int block_elems = 32, block_bytes = 20, is_float = 0;
    static __device__ __forceinline__ void unit(const uint8_t *row, uint32_t u, uint32_t, float v[32]) {
        const uint8_t *b = row + (size_t)u * 20;
        const uint32_t dm = forge__ld32(b);
        const float d = forge__f16(dm & 0xffffu), m = forge__f16(dm >> 16);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint32_t w = forge__ld32(b + 4 + 4 * i);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                uint32_t byte = (w >> (8 * k)) & 0xffu;
                v[4 * i + k] = (float)(byte & 0xfu) * d + m;
                v[4 * i + k + 16] = (float)(byte >> 4) * d + m;
            }
        }
    }
    static __device__ __forceinline__ float elem(const uint8_t *, uint32_t) { return 0.0f; }
};

struct forge__w_q5_0 {
    static const int block_elems = 32, block_bytes = 22, is_float = 0;
    static __device__ __forceinline__ void unit(const uint8_t *row, uint32_t u, uint32_t, float v[32]) {
        const uint8_t *b = row + (size_t)u * 22;
        const float d = forge__f16(forge__ld16(b));
        const uint32_t high = forge__ld16(b + 2) | (forge__ld16(b + 4) << 16);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            uint32_t w = forge__ld16(b + 6 + 2 * i);
#pragma unroll
            for (int k = 0; k < 2; k++) {
                const int j = 2 * i + k;
                uint32_t byte = (w >> (8 * k)) & 0xffu;
                int lo = (int)((byte & 0xfu) | (((high >> j) & 1u) << 4));
                int hi = (int)((byte >> 4) | (((high >> (j + 16)) & 1u) << 4));
                v[j] = (float)(lo - 16) * d;
                v[j + 16] = (float)(hi - 16) * d;
            }
        }
    }
    static __device__ __forceinline__ float elem(const uint8_t *, uint32_t) { return 0.0f; }
};

struct forge__w_q5_1 {
    static const int block_elems = 32, block_bytes = 24, is_float = 0;
    static __device__ __forceinline__ void unit(const uint8_t *row, uint32_t u, uint32_t, float v[32]) {
        const uint8_t *b = row + (size_t)u * 24;
        const uint32_t dm = forge__ld32(b), high = forge__ld32(b + 4);
        const float d = forge__f16(dm & 0xffffu), m = forge__f16(dm >> 16);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint32_t w = forge__ld32(b + 8 + 4 * i);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const int j = 4 * i + k;
                uint32_t byte = (w >> (8 * k)) & 0xffu;
                v[j] = (float)((byte & 0xfu) | (((high >> j) & 1u) << 4)) * d + m;
                v[j + 16] = (float)((byte >> 4) | (((high >> (j + 16)) & 1u) << 4)) * d + m;
            }
        }
    }
    static __device__ __forceinline__ float elem(const uint8_t *, uint32_t) { return 0.0f; }
};

struct forge__w_q8_0 {
    static const int block_elems = 32, block_bytes = 34, is_float = 0;
    static __device__ __forceinline__ void unit(const uint8_t *row, uint32_t u, uint32_t n_cols, float v[32]) {
        const bool packed = forge__q0_packed(n_cols);
        const uint8_t *b = row + (size_t)u * (packed ? 2 : 34), *qs = packed ? row + n_cols / 16 + (size_t)u * 32 : b + 2;
        const float d = forge__f16(forge__ld16(b));
#pragma unroll
        for (int i = 0; i < 16; i++) {
            uint32_t w = forge__ld16(qs + 2 * i);
            v[2 * i] = (float)(int8_t)(uint8_t)(w & 0xffu) * d;
            v[2 * i + 1] = (float)(int8_t)(uint8_t)(w >> 8) * d;
        }
    }
    static __device__ __forceinline__ float elem(const uint8_t *, uint32_t) { return 0.0f; }
};

// Q2_K and Q3_K order a super-block as 2 halves x 4 shifts x 32: unit s (0..7) is half s/4, bit
// shift 2*(s%4), reading the half's 32 qs bytes; its two 16-element sub-blocks have scales 2s, 2s+1.
struct forge__w_q2_k {
    static const int block_elems = 256, block_bytes = 84, is_float = 0;
    static __device__ __forceinline__ void unit(const uint8_t *row, uint32_t u, uint32_t, float v[32]) {
        const uint8_t *b = row + (size_t)(u / 8) * 84;
        const uint32_t s = u % 8, shift = 2 * (s % 4);
        const uint8_t *qs = b + 16 + (s / 4) * 32;
        const uint32_t dd = forge__ld32(b + 80);
        const float d = forge__f16(dd & 0xffffu), dmin = forge__f16(dd >> 16);
        const uint32_t sc0 = b[2 * s], sc1 = b[2 * s + 1];
        const float dl0 = d * (float)(sc0 & 0xfu), ml0 = dmin * (float)(sc0 >> 4);
        const float dl1 = d * (float)(sc1 & 0xfu), ml1 = dmin * (float)(sc1 >> 4);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            uint32_t w = forge__ld32(qs + 4 * i);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const int j = 4 * i + k;
                float q = (float)((w >> (8 * k + shift)) & 3u);
                v[j] = j < 16 ? dl0 * q - ml0 : dl1 * q - ml1;
            }
        }
    }
    static __device__ __forceinline__ float elem(const uint8_t *, uint32_t) { return 0.0f; }
};

// Q3_K scale j: low 4 bits from byte j (j < 8) or the high nibble of byte j-8, high 2 bits from
// byte 8 + j%4 at bit 2*(j/4), minus 32. A clear hmask bit (bit s of byte k) subtracts 4.
__device__ __forceinline__ int forge__q3k_scale(const uint8_t *packed, uint32_t j) {
    int low = j < 8 ? (packed[j] & 0xf) : (packed[j - 8] >> 4);
    int high = (packed[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
    return (low | (high << 4)) - 32;
}

struct forge__w_q3_k {
    static const int block_elems = 256, block_bytes = 110, is_float = 0;
    static __device__ __forceinline__ void unit(const uint8_t *row, uint32_t u, uint32_t, float v[32]) {
        const uint8_t *b = row + (size_t)(u / 8) * 110;
        const uint32_t s = u % 8, shift = 2 * (s % 4);
        const uint8_t *qs = b + 32 + (s / 4) * 32;
        const float d = forge__f16(forge__ld16(b + 108));
        const float dl0 = d * (float)forge__q3k_scale(b + 96, 2 * s), dl1 = d * (float)forge__q3k_scale(b + 96, 2 * s + 1);
#pragma unroll
        for (int i = 0; i < 16; i++) {
            uint32_t w = forge__ld16(qs + 2 * i), m = forge__ld16(b + 2 * i);
#pragma unroll
            for (int k = 0; k < 2; k++) {
                const int j = 2 * i + k;
                int q = (int)((w >> (8 * k + shift)) & 3u) - (((m >> (8 * k + s)) & 1u) ? 0 : 4);
                v[j] = (j < 16 ? dl0 : dl1) * (float)q;
            }
        }
    }
    static __device__ __forceinline__ float elem(const uint8_t *, uint32_t) { return 0.0f; }
};

// Scale and min j (0..7) of the 12-byte packed 6-bit table of Q4_K and Q5_K.
__device__ __forceinline__ void forge__k4_scale_min(const uint8_t *packed, uint32_t j, float *scale, float *min) {
    if (j < 4) {
        *scale = (float)(packed[j] & 63);
        *min = (float)(packed[j + 4] & 63);
    } else {
        *scale = (float)((packed[j + 4] & 0xf) | ((packed[j - 4] >> 6) << 4));
        *min = (float)((packed[j + 4] >> 4) | ((packed[j] >> 6) << 4));
    }
}

// Q4_K / Q5_K: unit s reads the 32 qs bytes of chunk s/2, low nibbles for even s, high for odd;
// Q5_K adds bit s of qh[l] as the fifth bit.
struct forge__w_q4_k {
    static const int block_elems = 256, block_bytes = 144, is_float = 0;
    static __device__ __forceinline__ void unit(const uint8_t *row, uint32_t u, uint32_t, float v[32]) {
        const uint8_t *b = row + (size_t)(u / 8) * 144;
        const uint32_t s = u % 8, nibble_shift = 4 * (s & 1);
        const uint32_t dd = forge__ld32(b);
        float sc, mn;
        forge__k4_scale_min(b + 4, s, &sc, &mn);
        const float dl = forge__f16(dd & 0xffffu) * sc, ml = forge__f16(dd >> 16) * mn;
        const uint8_t *qs = b + 16 + (s / 2) * 32;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            uint4 q = forge__ld128(qs + 16 * i);
            uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
            for (int k = 0; k < 16; k++) v[16 * i + k] = dl * (float)((w[k / 4] >> (8 * (k % 4) + nibble_shift)) & 0xfu) - ml;
        }
    }
    static __device__ __forceinline__ float elem(const uint8_t *, uint32_t) { return 0.0f; }
};

struct forge__w_q5_k {
    static const int block_elems = 256, block_bytes = 176, is_float = 0;
    static __device__ __forceinline__ void unit(const uint8_t *row, uint32_t u, uint32_t, float v[32]) {
        const uint8_t *b = row + (size_t)(u / 8) * 176;
        const uint32_t s = u % 8, nibble_shift = 4 * (s & 1);
        const uint32_t dd = forge__ld32(b);
        float sc, mn;
        forge__k4_scale_min(b + 4, s, &sc, &mn);
        const float dl = forge__f16(dd & 0xffffu) * sc, ml = forge__f16(dd >> 16) * mn;
        const uint8_t *qh = b + 16, *qs = b + 48 + (s / 2) * 32;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            uint4 q = forge__ld128(qs + 16 * i), h = forge__ld128(qh + 16 * i);
            uint32_t w[4] = {q.x, q.y, q.z, q.w}, hw[4] = {h.x, h.y, h.z, h.w};
#pragma unroll
            for (int k = 0; k < 16; k++) {
                uint32_t low = (w[k / 4] >> (8 * (k % 4) + nibble_shift)) & 0xfu;
                uint32_t fifth = (hw[k / 4] >> (8 * (k % 4) + s)) & 1u;
                v[16 * i + k] = dl * (float)(low + 16 * fifth) - ml;
            }
        }
    }
    static __device__ __forceinline__ float elem(const uint8_t *, uint32_t) { return 0.0f; }
};

// How a Q6_K matrix of n_cols columns is stored on the device (the table above): 16, every row
// 16-aligned (2048k columns); 4, rows 4-aligned (512k columns, an even number of super-blocks); 2,
// rows alternately 4- and 2-aligned, the latter with d first (an odd number). The launchers refuse a
// matrix at an address of less alignment than its first row's (forge__q6_k_align, forge__hip_weights).
// One answer for every row of a launch, so the readers' branch on it is uniform, and the decode
// products and prompt tiles are separate instantiations for each (forge__hip_kind). forge.h's upload
// packs every Q6_K matrix, and the Q4_0 / Q8_0 ones forge__q0_packed says (forge__gpu_packed_row_bytes).
__host__ __device__ __forceinline__ uint32_t forge__q6_k_layout(uint32_t n_cols) {
    return n_cols % 2048 == 0 ? 16u : n_cols % 512 == 0 ? 4u : 2u;
}
__host__ __device__ __forceinline__ uint32_t forge__q6_k_align(uint32_t n_cols) { return forge__q6_k_layout(n_cols) == 16 ? 16u : 4u; }

// Where the arrays of a Q6_K row of nb super-blocks in the device layout start past 0: 2 nb for a row
// that keeps its d array first (layout 2, a row 2 bytes past a 4-byte boundary), else 0; and its d array.
template <int LAYOUT> __device__ __forceinline__ uint32_t forge__q6_k_shift(const uint8_t *row, uint32_t nb) {
    return LAYOUT == 2 && ((uintptr_t)row & 2) ? 2 * nb : 0u;
}
__device__ __forceinline__ const uint8_t *forge__q6_k_d(const uint8_t *row, uint32_t nb, uint32_t shift) {
    return row + (shift ? 0u : 208 * nb);
}

// N aligned 4-byte words from p
template <int N> __device__ __forceinline__ void forge__ld_u32(const uint8_t *p, uint32_t out[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) out[i] = ((const uint32_t *)p)[i];
}

// Q6_K: unit s = u % 8 of super-block j is half s/4, quarter k = s%4, elements l = 0..31 of it: ql
// byte l of (k&1) 32 of the half at nibble 4 (k>>1), qh byte l of the half at bits 2k, scale
// 8 half + 2k + l/16. In the device layout ql byte l is byte l % 8 of the (k&1) 8 of piece
// 4 half + l/8.
struct forge__w_q6_k {
    static const int block_elems = 256, block_bytes = 210, is_float = 0;
    static __device__ __forceinline__ void unit(const uint8_t *row, uint32_t u, uint32_t n_cols, float v[32]) {
        const uint32_t j = u / 8, s = u % 8, half = s / 4, k4 = s % 4;
        const uint32_t nb = n_cols / 256, o = forge__q6_k_shift<2>(row, nb); // the device layout (>>weights)
        const uint8_t *ql = row + o + 128 * j + 64 * half + 8 * (k4 & 1);
        const uint8_t *qh = row + o + 128 * nb + 64 * j + 32 * half;
        const int8_t *scales = (const int8_t *)(row + o + 192 * nb + 16 * j + 8 * half + 2 * k4);
        const float d = forge__f16(forge__ld16(forge__q6_k_d(row, nb, o) + 2 * j));
        const float d0 = d * (float)scales[0], d1 = d * (float)scales[1];
        const uint32_t nibble_shift = 4 * (k4 >> 1), high_shift = 2 * k4;
#pragma unroll
        for (int i = 0; i < 16; i++) { // ql bytes 8t.. are 16t.. of the unit's pieces
            uint32_t lw = forge__ld16(ql + 16 * (i / 4) + 2 * (i % 4)), hw = forge__ld16(qh + 2 * i);
#pragma unroll
            for (int k = 0; k < 2; k++) {
                const int e = 2 * i + k;
                int q = (int)(((lw >> (8 * k + nibble_shift)) & 0xfu) | (((hw >> (8 * k + high_shift)) & 3u) << 4)) - 32;
                v[e] = (e < 16 ? d0 : d1) * (float)q;
            }
        }
    }
    static __device__ __forceinline__ float elem(const uint8_t *, uint32_t) { return 0.0f; }
};

// IQ4_XS: unit g is 32-element group g of the super-block: qs bytes 16g.., 6-bit scale minus 32.
struct forge__w_iq4_xs {
    static const int block_elems = 256, block_bytes = 136, is_float = 0;
    static __device__ __forceinline__ void unit(const uint8_t *row, uint32_t u, uint32_t, float v[32]) {
        const uint8_t *b = row + (size_t)(u / 8) * 136;
        const uint32_t g = u % 8, head = forge__ld32(b);
        const float d = forge__f16(head & 0xffffu);
        const uint32_t scale = ((b[4 + g / 2] >> (4 * (g % 2))) & 0xfu) | (((head >> 16 >> (2 * g)) & 3u) << 4);
        const float dl = d * (float)((int)scale - 32);
        const uint8_t *qs = b + 8 + 16 * g;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint32_t w = forge__ld32(qs + 4 * i);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                uint32_t byte = (w >> (8 * k)) & 0xffu;
                v[4 * i + k] = dl * forge__iq4_level(byte & 0xfu);
                v[4 * i + k + 16] = dl * forge__iq4_level(byte >> 4);
            }
        }
    }
    static __device__ __forceinline__ float elem(const uint8_t *, uint32_t) { return 0.0f; }
};

// Units of the row that go through unit(); F32/F16/BF16 rows whose width is not a multiple of 32
// are read element by element instead (their rows are then not 16-byte aligned either).
template <class W> __device__ __forceinline__ uint32_t forge__fast_units(uint32_t n_cols) {
    return W::is_float && (n_cols % 32) != 0 ? 0u : n_cols / 32;
}

// One switch from a type id to its unit reader, shared by every launcher that reads weights.
#define FORGE__WEIGHT_TYPES(X)                                                                           \
    X(FORGE_HIP_F32, forge__w_f32) X(FORGE_HIP_F16, forge__w_f16) X(FORGE_HIP_BF16, forge__w_bf16)        \
    X(FORGE_HIP_Q4_0, forge__w_q4_0) X(FORGE_HIP_Q4_1, forge__w_q4_1) X(FORGE_HIP_Q5_0, forge__w_q5_0)    \
    X(FORGE_HIP_Q5_1, forge__w_q5_1) X(FORGE_HIP_Q8_0, forge__w_q8_0) X(FORGE_HIP_Q2_K, forge__w_q2_k)    \
    X(FORGE_HIP_Q3_K, forge__w_q3_k) X(FORGE_HIP_Q4_K, forge__w_q4_k) X(FORGE_HIP_Q5_K, forge__w_q5_k)    \
    X(FORGE_HIP_Q6_K, forge__w_q6_k) X(FORGE_HIP_IQ4_NL, forge__w_iq4_nl) X(FORGE_HIP_IQ4_XS, forge__w_iq4_xs)

// Block geometry of a type id: 0 when the type is not one forge's kernels read.
static int forge__hip_block(uint32_t type, uint32_t *block_elems, uint32_t *block_bytes) {
    switch (type) {
#define FORGE__GEOMETRY(id, W)                                                                           \
    case id: *block_elems = W::block_elems, *block_bytes = W::block_bytes; return 1;
        FORGE__WEIGHT_TYPES(FORGE__GEOMETRY)
#undef FORGE__GEOMETRY
    default: return 0;
    }
}

// Which instantiation reads a matrix: its type, but Q6_K matrices whose rows are 16- or 4-aligned in
// the device layout (>>weights) have their own readers, under ids no GGUF type uses; FORGE_HIP_Q6_K
// reads an odd count of super-blocks (rows alternately 4- and 2-aligned). So do Q4_0 and Q8_0 matrices
// in their device layout (forge__q0_packed); FORGE_HIP_Q4_0 / Q8_0 read the file's.
#define FORGE__HIP_Q6_K_PACKED 0x1000Eu  // rows 16-aligned
#define FORGE__HIP_Q6_K_PACKED4 0x2000Eu // rows 4-aligned
#define FORGE__HIP_Q4_0_PACKED 0x10002u
#define FORGE__HIP_Q8_0_PACKED 0x10008u
static uint32_t forge__hip_kind(uint32_t type, uint32_t n_cols) {
    if ((type == FORGE_HIP_Q4_0 || type == FORGE_HIP_Q8_0) && forge__q0_packed(n_cols)) return type | 0x10000u;
    if (type != FORGE_HIP_Q6_K) return type;
    const uint32_t layout = forge__q6_k_layout(n_cols);
    return layout == 16 ? FORGE__HIP_Q6_K_PACKED : layout == 4 ? FORGE__HIP_Q6_K_PACKED4 : type;
}

// Checks a weight matrix's type, width and address (w: the first matrix; Q6_K, Q4_0 and Q8_0 rows in
// the device layout are read with loads of their alignment, forge__q6_k_layout, forge__q0_packed);
// fills row_bytes.
static int forge__hip_weights(uint32_t type, uint32_t n_cols, const void *w, size_t *row_bytes, const char *who, char *message,
                              size_t message_bytes) {
    uint32_t elems, bytes;
    if (!forge__hip_block(type, &elems, &bytes)) {
        if (message && message_bytes) snprintf(message, message_bytes, "%s: weight type %u is not supported on the GPU", who, type);
        return -1;
    }
    if (n_cols % elems != 0) {
        if (message && message_bytes)
            snprintf(message, message_bytes, "%s: rows of %u elements are not a whole number of %u-element blocks", who, n_cols, elems);
        return -1;
    }
    const uint32_t align = type == FORGE_HIP_Q6_K ? forge__q6_k_align(n_cols) : forge__hip_kind(type, n_cols) != type ? 16u : 0u;
    if (align && (uintptr_t)w % align != 0) {
        if (message && message_bytes)
            snprintf(message, message_bytes, "%s: a %s matrix of %u columns must start at a %u-byte aligned address", who,
                     type == FORGE_HIP_Q6_K ? "Q6_K" : type == FORGE_HIP_Q4_0 ? "Q4_0" : "Q8_0", n_cols, align);
        return -1;
    }
    *row_bytes = (size_t)(n_cols / elems) * bytes;
    return 0;
}

/* >>matmul ------------------------------------------------------------------------------------ */

// Decode: y[r] = W[r] . x (+ bias[r]) for one token. One wave per FORGE__MATVEC_ROWS rows; lane i
// reads units i, i + wave, ... so the lanes of a wave walk a row together (contiguous blocks,
// coalesced), each dequantizing its unit into registers. The unit's 32 activations are loaded once
// (float4) and used for all the wave's rows: measured on an H100, re-reading x per row and unit,
// not the weights, was what limited the one-row version (every quantized type took the same time).
// Memory-bound: every weight byte is read exactly once.
#define FORGE__MATVEC_ROWS 4
template <class W>
__global__ void forge__k_matvec(const uint8_t *__restrict__ w, size_t row_bytes, uint32_t n_rows, uint32_t n_cols,
                                const float *__restrict__ x, float *__restrict__ y, const float *__restrict__ bias) {
    const uint32_t wave = warpSize, lane = threadIdx.x % wave, waves_per_block = blockDim.x / wave;
    const uint32_t r0 = (blockIdx.x * waves_per_block + threadIdx.x / wave) * FORGE__MATVEC_ROWS;
    if (r0 >= n_rows) return; // the whole wave leaves together, so the shuffles below stay complete
    const uint32_t n_here = n_rows - r0 < FORGE__MATVEC_ROWS ? n_rows - r0 : FORGE__MATVEC_ROWS; // same for the wave
    const uint32_t n_units = forge__fast_units<W>(n_cols);
    float acc[FORGE__MATVEC_ROWS] = {0};
    for (uint32_t u = lane; u < n_units; u += wave) {
        float xr[32];
        const float4 *xv = (const float4 *)(x + (size_t)u * 32);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            float4 a = xv[i];
            xr[4 * i] = a.x, xr[4 * i + 1] = a.y, xr[4 * i + 2] = a.z, xr[4 * i + 3] = a.w;
        }
#pragma unroll
        for (int k = 0; k < FORGE__MATVEC_ROWS; k++) {
            if ((uint32_t)k < n_here) { // a condition, not a break: the loop must stay unrollable
                float v[32], s0 = 0.0f, s1 = 0.0f; // two partial sums: two dependency chains
                W::unit(w + (size_t)(r0 + k) * row_bytes, u, n_cols, v);
#pragma unroll
                for (int j = 0; j < 32; j += 2) s0 += v[j] * xr[j], s1 += v[j + 1] * xr[j + 1];
                acc[k] += s0 + s1;
            }
        }
    }
    if (W::is_float)
        for (uint32_t c = n_units * 32 + lane; c < n_cols; c += wave) {
            const float xc = x[c];
#pragma unroll
            for (int k = 0; k < FORGE__MATVEC_ROWS; k++)
                if ((uint32_t)k < n_here) acc[k] += W::elem(w + (size_t)(r0 + k) * row_bytes, c) * xc;
        }
#pragma unroll
    for (int k = 0; k < FORGE__MATVEC_ROWS; k++) {
        const float total = forge__wave_sum(acc[k]); // every lane takes part, whatever n_here is
        if (lane == 0 && (uint32_t)k < n_here) y[r0 + k] = bias ? total + bias[r0 + k] : total;
    }
}

// Fast decode matvec for the types that matter most (Q4_0, Q8_0, Q4_K, Q6_K). The unit readers above
// convert every element with an int -> float instruction, which runs at 1/8 of the FMA rate on NVIDIA
// and was what bounded the generic kernel (Q4 types ~1.1 TB/s on an H100 whatever the layout). Here a
// lane reads one 32-element piece of each of FORGE__MV_ROWS rows (all loads first, then the math) and
// turns quantized values into floats with byte permutes: a value q of up to 7 bits placed into bits
// 16..22 under the exponent byte 0x40 is the float 2 + q/64 (q already shifted so that the scale
// works out: nibbles as 8n give 2 + n/8, Q6_K's 6-bit values as 2v give 2 + v/32). The dot product
// sum x (2 + q/s) then yields sum x q = s (S - 2 sum x) with sum x per sub-block computed once per
// lane and shared by the rows. Q8_0 uses the exact magic 2^23 + (q + 128) and one subtraction.
// Measured on an H100, 16384 x 4096, GB/s of weights, generic -> this kernel: Q4_0 1081 -> 1522,
// Q8_0 1668 -> 1961, Q4_K 716 -> 1630, Q6_K 1020 -> 1656; normalized error at most 8.4e-7.
#define FORGE__MV_ROWS 4

// byte K of m into bits 16..23 under exponent byte 0x40 (m's byte must be < 128): 2 + byte/64
template <int K> __device__ __forceinline__ float forge__b2f(uint32_t m) {
#if defined(__HIP_PLATFORM_AMD__) || defined(__HIPCC__)
    return __uint_as_float(0x40000000u | (((m >> (8 * K)) & 0xffu) << 16));
#else
    return __uint_as_float(__byte_perm(m, 0x40000000u, 0x7044u | (K << 8)));
#endif
}

// byte K of m as the low byte of 2^23: 8388608 + byte, exactly
template <int K> __device__ __forceinline__ float forge__b2magic(uint32_t m) {
#if defined(__HIP_PLATFORM_AMD__) || defined(__HIPCC__)
    return __uint_as_float(0x4B000000u | ((m >> (8 * K)) & 0xffu));
#else
    return __uint_as_float(__byte_perm(m, 0x4B000000u, 0x7440u | K));
#endif
}

// small non-negative integer -> float without a conversion instruction (exact below 2^23)
__device__ __forceinline__ float forge__u2f(uint32_t v) { return __uint_as_float(0x4B000000u | v) - 8388608.0f; }

// N+1 aligned words around a 2-aligned address p, realigned into N words starting at p; the extra
// word is read only when p is not 4-aligned (it then holds bytes the caller needs).
template <int N> __device__ __forceinline__ void forge__ld_words(const uint8_t *p, uint32_t out[N]) {
    const uint32_t *base = (const uint32_t *)((uintptr_t)p & ~(uintptr_t)3);
    const bool odd = ((uintptr_t)p & 2) != 0;
    uint32_t w[N + 1];
#pragma unroll
    for (int i = 0; i < N; i++) w[i] = base[i];
    w[N] = odd ? base[N] : 0u;
#pragma unroll
    for (int i = 0; i < N; i++) out[i] = __byte_perm(w[i], w[i + 1], odd ? 0x5432u : 0x3210u);
}

// x for a piece of 32 consecutive elements starting at element e
__device__ __forceinline__ void forge__x32(const float *__restrict__ x, uint32_t e, float xr[32]) {
    const float4 *xv = (const float4 *)(x + e);
#pragma unroll
    for (int i = 0; i < 8; i++) {
        float4 a = xv[i];
        xr[4 * i] = a.x, xr[4 * i + 1] = a.y, xr[4 * i + 2] = a.z, xr[4 * i + 3] = a.w;
    }
}

// The raw words of one Q4_0 (NQ 4) or Q8_0 (NQ 8) block as the decode readers load them. In the file's
// layout (PACKED 0) the block is 2-aligned: the NQ + 1 aligned words around it, x telling whether it
// starts 2 bytes into the first; in the device layout (PACKED 1, forge__q0_packed) the quants' NQ words
// and x the scale. q(i): quant bytes 4i .. 4i + 3; d(): the scale.
template <int NQ, int PACKED> struct forge__q0_raw {
    uint32_t w[NQ + 1], x;
    __device__ __forceinline__ uint32_t q(int i) const { return PACKED ? w[i] : __byte_perm(w[i], w[i + 1], x ? 0x7654u : 0x5432u); }
    __device__ __forceinline__ float d() const { return forge__f16(PACKED ? x : x ? w[0] >> 16 : w[0] & 0xffffu); }
};
template <int NQ, int PACKED> __device__ __forceinline__ void forge__q0_load(const uint8_t *row, uint32_t p, uint32_t n_cols,
                                                                            forge__q0_raw<NQ, PACKED> &r) {
    if (PACKED) {
        const uint8_t *q = row + n_cols / 16 + (size_t)p * 4 * NQ;
#pragma unroll
        for (int i = 0; i < NQ / 4; i++) {
            const uint4 v = forge__ld128(q + 16 * i);
            r.w[4 * i] = v.x, r.w[4 * i + 1] = v.y, r.w[4 * i + 2] = v.z, r.w[4 * i + 3] = v.w;
        }
        r.w[NQ] = 0u;
        r.x = forge__ld16(row + 2 * (size_t)p);
    } else {
        const uint8_t *b = row + (size_t)p * (4 * NQ + 2);
        const uint32_t *base = (const uint32_t *)((uintptr_t)b & ~(uintptr_t)3);
        r.x = ((uintptr_t)b & 2) != 0;
#pragma unroll
        for (int i = 0; i <= NQ; i++) r.w[i] = base[i]; // reads at most 2 bytes past the block, inside an aligned word
    }
}

// Q4_0: piece = one block: 5 aligned words hold d and the 16 qs bytes (file layout), or one 16-byte
// load and d (device layout).
template <int PACKED> struct forge__p_q4_0_t {
    typedef forge__q0_raw<4, PACKED> raw;
    static __device__ __forceinline__ void load(const uint8_t *row, uint32_t p, uint32_t n_cols, raw &r) { forge__q0_load(row, p, n_cols, r); }
    static __device__ __forceinline__ void load_x(const float *__restrict__ x, uint32_t p, float xr[32], float xs[4]) {
        forge__x32(x, p * 32, xr);
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < 32; i++) s += xr[i];
        xs[0] = s;
    }
    static __device__ __forceinline__ float dot(const raw &r, uint32_t, const float xr[32], const float xs[4]) {
        const float d = r.d();
        float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t q = r.q(i);
            const uint32_t lo = (q << 3) & 0x78787878u, hi = (q >> 1) & 0x78787878u; // 8n per byte
            s0 += xr[4 * i + 0] * forge__b2f<0>(lo) + xr[4 * i + 1] * forge__b2f<1>(lo);
            s1 += xr[4 * i + 2] * forge__b2f<2>(lo) + xr[4 * i + 3] * forge__b2f<3>(lo);
            s0 += xr[16 + 4 * i + 0] * forge__b2f<0>(hi) + xr[16 + 4 * i + 1] * forge__b2f<1>(hi);
            s1 += xr[16 + 4 * i + 2] * forge__b2f<2>(hi) + xr[16 + 4 * i + 3] * forge__b2f<3>(hi);
        }
        return d * (8.0f * (s0 + s1) - 24.0f * xs[0]); // sum x (n - 8), S = sum x (2 + n/8)
    }
};

// Q8_0: piece = one block: 9 aligned words (file layout), or two 16-byte loads and d (device layout).
template <int PACKED> struct forge__p_q8_0_t {
    typedef forge__q0_raw<8, PACKED> raw;
    static __device__ __forceinline__ void load(const uint8_t *row, uint32_t p, uint32_t n_cols, raw &r) { forge__q0_load(row, p, n_cols, r); }
    static __device__ __forceinline__ void load_x(const float *__restrict__ x, uint32_t p, float xr[32], float xs[4]) {
        forge__x32(x, p * 32, xr);
        xs[0] = 0.0f;
    }
    static __device__ __forceinline__ float dot(const raw &r, uint32_t, const float xr[32], const float xs[4]) {
        (void)xs;
        const float d = r.d();
        const float magic = 8388736.0f; // 2^23 + 128
        float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t q = r.q(i) ^ 0x80808080u; // q + 128 per byte
            s0 += xr[4 * i + 0] * (forge__b2magic<0>(q) - magic);
            s1 += xr[4 * i + 1] * (forge__b2magic<1>(q) - magic);
            s0 += xr[4 * i + 2] * (forge__b2magic<2>(q) - magic);
            s1 += xr[4 * i + 3] * (forge__b2magic<3>(q) - magic);
        }
        return d * (s0 + s1);
    }
};
typedef forge__p_q4_0_t<0> forge__p_q4_0;
typedef forge__p_q4_0_t<1> forge__p_q4_0_packed;
typedef forge__p_q8_0_t<0> forge__p_q8_0;
typedef forge__p_q8_0_t<1> forge__p_q8_0_packed;

// Q4_K: piece pi (0..7) of a super-block = 16 qs bytes at 16 pi (16-aligned): low nibbles are
// elements 64c + 16h + i of sub-block 2c, high nibbles elements 64c + 32 + 16h + i of sub-block 2c+1
// (c = pi/2, h = pi%2). The 16-byte head (d, dmin, 12 scale bytes) is one load, shared by 8 lanes.
struct forge__p_q4_k {
    struct raw { uint4 head, qs; };
    static __device__ __forceinline__ void load(const uint8_t *row, uint32_t p, uint32_t, raw &r) {
        const uint8_t *b = row + (size_t)(p / 8) * 144;
        r.head = forge__ld128(b);
        r.qs = forge__ld128(b + 16 + 16 * (p % 8));
    }
    static __device__ __forceinline__ void load_x(const float *__restrict__ x, uint32_t p, float xr[32], float xs[4]) {
        const uint32_t pi = p % 8;
        const float4 *lo = (const float4 *)(x + (size_t)(p / 8) * 256 + 64 * (pi / 2) + 16 * (pi % 2)), *hi = lo + 8;
        float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float4 a = lo[i], b = hi[i];
            xr[4 * i] = a.x, xr[4 * i + 1] = a.y, xr[4 * i + 2] = a.z, xr[4 * i + 3] = a.w;
            xr[16 + 4 * i] = b.x, xr[16 + 4 * i + 1] = b.y, xr[16 + 4 * i + 2] = b.z, xr[16 + 4 * i + 3] = b.w;
            s0 += (a.x + a.y) + (a.z + a.w), s1 += (b.x + b.y) + (b.z + b.w);
        }
        xs[0] = s0, xs[1] = s1;
    }
    static __device__ __forceinline__ float dot(const raw &r, uint32_t p, const float xr[32], const float xs[4]) {
        const uint32_t c = (p % 8) / 2;
        const float d = forge__f16(r.head.x & 0xffffu), dmin = forge__f16(r.head.x >> 16);
        const uint32_t A = r.head.y, B = r.head.z, C = r.head.w; // scale bytes 0..3, 4..7, 8..11
        uint32_t sc, mn;                                          // bytes 0, 1: sub-blocks 2c, 2c+1
        if (c < 2) {
            sc = (A >> (16 * c)) & 0x3f3fu, mn = (B >> (16 * c)) & 0x3f3fu;
        } else {
            const uint32_t sh = 16 * (c - 2), cl = C >> sh;
            sc = (cl & 0x0f0fu) | ((A >> sh >> 2) & 0x3030u);
            mn = ((cl >> 4) & 0x0f0fu) | ((B >> sh >> 2) & 0x3030u);
        }
        const float dl0 = d * forge__u2f(sc & 0xffu), dl1 = d * forge__u2f(sc >> 8);
        const float ml0 = dmin * forge__u2f(mn & 0xffu), ml1 = dmin * forge__u2f(mn >> 8);
        const uint32_t q[4] = {r.qs.x, r.qs.y, r.qs.z, r.qs.w};
        float s0 = 0.0f, s1 = 0.0f, t0 = 0.0f, t1 = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t lo = (q[i] << 3) & 0x78787878u, hi = (q[i] >> 1) & 0x78787878u;
            s0 += xr[4 * i + 0] * forge__b2f<0>(lo) + xr[4 * i + 1] * forge__b2f<1>(lo);
            s1 += xr[4 * i + 2] * forge__b2f<2>(lo) + xr[4 * i + 3] * forge__b2f<3>(lo);
            t0 += xr[16 + 4 * i + 0] * forge__b2f<0>(hi) + xr[16 + 4 * i + 1] * forge__b2f<1>(hi);
            t1 += xr[16 + 4 * i + 2] * forge__b2f<2>(hi) + xr[16 + 4 * i + 3] * forge__b2f<3>(hi);
        }
        // sum x (dl n - ml) = dl (8 S - 16 sum x) - ml sum x
        return 8.0f * (dl0 * (s0 + s1) + dl1 * (t0 + t1)) - (16.0f * dl0 + ml0) * xs[0] - (16.0f * dl1 + ml1) * xs[1];
    }
};

// Q6_K: piece pi (0..7) of a super-block: half h = pi/4, t = pi%4, elements 128h + 32k + 8t + i
// (quarter k = 0..3, i = 0..7): ql bytes 64h + 8t.. (k = 0 low, 2 high nibbles) and 64h + 32 + 8t..
// (k = 1, 3), qh bytes 128 + 32h + 8t.. (bits 2k), scale 8h + 2k + t/2 in the file, whose 2-aligned
// blocks would take about a dozen 4-byte loads a piece. On the device (>>weights) the piece's 16 ql
// bytes are together, its 8 qh bytes and the half's 8 scales in arrays after them: one 16-byte, two
// 8-byte and one 2-byte load where rows are 16-aligned, eight words and the 2-byte d elsewhere.
template <int PACKED> struct forge__p_q6_k_t {
    // sc: the piece's four scales, quarter k in byte k (one register a row instead of the half's two
    // words: the decode products run at their register limit)
    struct raw { uint32_t a[2], b[2], h[2], sc; float d; };
    static __device__ __forceinline__ void load(const uint8_t *row, uint32_t p, uint32_t n_cols, raw &r) {
        const uint32_t j = p / 8, pi = p % 8, h = pi / 4, t = pi % 4;
        uint32_t s[2];
        const uint32_t nb = n_cols / 256, o = forge__q6_k_shift<PACKED>(row, nb);
        const uint8_t *ql = row + o + 128 * j + 16 * pi, *qh = row + o + 128 * nb + 64 * j + 8 * pi, *sc = row + o + 192 * nb + 16 * j + 8 * h;
        if (PACKED == 16) {
            const uint4 q = forge__ld128(ql);
            const uint2 hv = *(const uint2 *)qh, sv = *(const uint2 *)sc;
            r.a[0] = q.x, r.a[1] = q.y, r.b[0] = q.z, r.b[1] = q.w;
            r.h[0] = hv.x, r.h[1] = hv.y, s[0] = sv.x, s[1] = sv.y;
        } else { // the same arrays in 4-byte words
            forge__ld_u32<2>(ql, r.a);
            forge__ld_u32<2>(ql + 8, r.b);
            forge__ld_u32<2>(qh, r.h);
            forge__ld_u32<2>(sc, s);
        }
        r.d = forge__f16(forge__ld16(forge__q6_k_d(row, nb, o) + 2 * j));
        // quarters 0, 1 in word 0 bytes t/2 and 2 + t/2; quarters 2, 3 likewise in word 1
        r.sc = __byte_perm(s[0] >> (8 * (t / 2)), s[1] >> (8 * (t / 2)), 0x6420u);
    }
    static __device__ __forceinline__ void load_x(const float *__restrict__ x, uint32_t p, float xr[32], float xs[4]) {
        const uint32_t pi = p % 8;
        const float *base = x + (size_t)(p / 8) * 256 + 128 * (pi / 4) + 8 * (pi % 4);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float4 a = *(const float4 *)(base + 32 * k), b = *(const float4 *)(base + 32 * k + 4);
            xr[8 * k] = a.x, xr[8 * k + 1] = a.y, xr[8 * k + 2] = a.z, xr[8 * k + 3] = a.w;
            xr[8 * k + 4] = b.x, xr[8 * k + 5] = b.y, xr[8 * k + 6] = b.z, xr[8 * k + 7] = b.w;
            xs[k] = ((a.x + a.y) + (a.z + a.w)) + ((b.x + b.y) + (b.z + b.w));
        }
    }
    static __device__ __forceinline__ float dot(const raw &r, uint32_t p, const float xr[32], const float xs[4]) {
        (void)p;
        const uint32_t sx = __byte_perm(r.sc, 0u, 0x3120u); // bytes: k = 0, 2, 1, 3
        const uint32_t su = sx ^ 0x80808080u;
        const float magic = 8388736.0f;
        const float sc[4] = {forge__b2magic<0>(su) - magic, forge__b2magic<2>(su) - magic, forge__b2magic<1>(su) - magic,
                             forge__b2magic<3>(su) - magic};
        float total = 0.0f;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
            for (int g = 0; g < 2; g++) {
                const uint32_t ql = (k & 1) ? r.b[g] : r.a[g];
                const uint32_t lo = (k & 2) ? (ql >> 3) & 0x1e1e1e1eu : (ql << 1) & 0x1e1e1e1eu; // 2 * low 4 bits
                const uint32_t hb = k == 3 ? r.h[g] >> 1 : r.h[g] << (5 - 2 * k);
                const uint32_t v = lo | (hb & 0x60606060u); // 2v per byte, v = 0..63
                s0 += xr[8 * k + 4 * g + 0] * forge__b2f<0>(v) + xr[8 * k + 4 * g + 1] * forge__b2f<1>(v);
                s1 += xr[8 * k + 4 * g + 2] * forge__b2f<2>(v) + xr[8 * k + 4 * g + 3] * forge__b2f<3>(v);
            }
            // sum x (v - 32) with S = sum x (2 + v/32): 32 S - 96 sum x
            total += sc[k] * (32.0f * (s0 + s1) - 96.0f * xs[k]);
        }
        return r.d * total;
    }
};
// rows 16- or 4-aligned, or alternately 4- and 2-aligned (forge__q6_k_layout 16, 4, 2): separate
// instantiations, chosen at launch (forge__hip_kind), so that each decode product keeps the registers
// of one way of loading
typedef forge__p_q6_k_t<2> forge__p_q6_k;
typedef forge__p_q6_k_t<16> forge__p_q6_k_packed;
typedef forge__p_q6_k_t<4> forge__p_q6_k_packed4;

// The fast decode kernel: one wave per FORGE__MV_ROWS rows, lane i takes pieces i, i + wave, ...
template <class P>
__global__ void __launch_bounds__(256) forge__k_matvec_fast(const uint8_t *__restrict__ w, size_t row_bytes, uint32_t n_rows,
                                                            uint32_t n_cols, const float *__restrict__ x, float *__restrict__ y,
                                                            const float *__restrict__ bias) {
    const uint32_t wave = warpSize, lane = threadIdx.x % wave, waves_per_block = blockDim.x / wave;
    const uint32_t r0 = (blockIdx.x * waves_per_block + threadIdx.x / wave) * FORGE__MV_ROWS;
    if (r0 >= n_rows) return; // the whole wave leaves together
    const uint8_t *rows[FORGE__MV_ROWS];
#pragma unroll
    for (int k = 0; k < FORGE__MV_ROWS; k++) rows[k] = w + (size_t)min(r0 + k, n_rows - 1) * row_bytes; // extra rows: re-read, dropped
    const uint32_t n_pieces = n_cols / 32;
    float acc[FORGE__MV_ROWS] = {0};
    for (uint32_t p = lane; p < n_pieces; p += wave) {
        typename P::raw raw[FORGE__MV_ROWS];
#pragma unroll
        for (int k = 0; k < FORGE__MV_ROWS; k++) P::load(rows[k], p, n_cols, raw[k]);
        float xr[32], xs[4];
        P::load_x(x, p, xr, xs);
#pragma unroll
        for (int k = 0; k < FORGE__MV_ROWS; k++) acc[k] += P::dot(raw[k], p, xr, xs);
    }
#pragma unroll
    for (int k = 0; k < FORGE__MV_ROWS; k++) {
        const float total = forge__wave_sum(acc[k]);
        if (lane == 0 && r0 + k < n_rows) y[r0 + k] = bias ? total + bias[r0 + k] : total;
    }
}

#define FORGE__MMA_MAX_SPLIT 32   // the matrix-unit products' most parts of the columns (forge_hip_matmul_split)
#define FORGE__MMA_SPLIT_ROWS 512 // parts x tokens at most: the workspace holds that many rows of a product's outputs

__device__ __forceinline__ float forge__gelu(float x); // defined in >>rows

// ---- decode on 8-bit activations ----
// For one token, the input vector of a quantized product is first rounded to 8 bits per element in
// groups of 32 (one float scale d = max|x| / 127 per group, q = round(x / d)), and the product then
// runs on integer dot products of four bytes (dp4a): sum_j w_j x_j = d_w d_x sum_j q_w,j q_x,j with
// the weight type's offsets and minimums applied through per-group sums of q_x. Four weights cost
// one instruction instead of four conversions and four multiply-adds, and the activations a lane
// reads shrink from 128 to 32 bytes per piece: the float kernel above was bound by its instruction
// count, not by memory. The cost is the rounding of the activations (relative error about 0.4% of
// a group's largest value per element), the same trade the reference engine makes in its quantized
// products; the fixtures' tolerances leave room for it.
//
// Layout of a quantized vector of n elements (n a multiple of 32), forge_hip_q8_bytes(n) bytes:
// n int8 values, then from byte FORGE__Q8_DS(n) one float4 per group: d, d * sum of q over the
// group's first 16 elements, d * sum over its last 16, and 0 (or, in a vector prepared for an RMS
// norm by forge_hip_matvec_norm_q8, the sum of squares of the group's unnormalized values).
#define FORGE__Q8_DS(n) (((size_t)(n) + 255) & ~(size_t)255)
#define FORGE__MVQ_ROWS 4   // rows per wave
#define FORGE__MVQ_WAVES 8  // waves per block: 32 rows of a block are one group of the quantized output
#define FORGE__MVQ_MAX_THREADS (FORGE__MVQ_WAVES * 64)

__device__ __forceinline__ int forge__dp4a(int a, int b, int c) {
#if defined(__HIP_PLATFORM_AMD__) || defined(__HIPCC__)
    return c + (int)(int8_t)(a) * (int)(int8_t)(b) + (int)(int8_t)(a >> 8) * (int)(int8_t)(b >> 8) +
           (int)(int8_t)(a >> 16) * (int)(int8_t)(b >> 16) + (int)(int8_t)(a >> 24) * (int)(int8_t)(b >> 24);
#else
    return __dp4a(a, b, c);
#endif
}

// Lanes 32g .. 32g + 31 of a wave hold elements 32 (group) .. of the vector, element i in lane i % 32;
// each rounds its element and lane 0 of the group writes the group's float4. Every lane of the wave
// must call this (shuffles); `store` says whether this lane's element exists.
__device__ __forceinline__ void forge__q8_put(float v, size_t i, int store, int8_t *__restrict__ qs, float4 *__restrict__ ds,
                                             float fourth = 0.0f) {
    float amax = fabsf(v);
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) amax = fmaxf(amax, FORGE_SHFL_XOR(amax, m));
    const float d = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    const int q = __float2int_rn(v * inv);
    int s = q;
#pragma unroll
    for (int m = 8; m > 0; m >>= 1) s += FORGE_SHFL_XOR(s, m);
    const int other = FORGE_SHFL_XOR(s, 16);
    if (store) {
        qs[i] = (int8_t)q;
        if (i % 32 == 0) ds[i / 32] = make_float4(d, d * (float)s, d * (float)other, fourth);
    }
}

__global__ void forge__k_q8_quantize(const float *__restrict__ x, uint32_t n, uint8_t *__restrict__ q8) {
    FORGE__GRID_ENTER();
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    forge__q8_put(i < n ? x[i] : 0.0f, i, i < n, (int8_t *)q8, (float4 *)(q8 + FORGE__Q8_DS(n)));
}

// forge__k_rmsnorm for one row, also writing the result as a quantized vector. Every block adds up
// the squares of the whole row (the same order in every block, so the same scale) and
// then writes its own slice: a decode step runs this where no product before the norm prepares it
// (forge_hip_matvec_norm_q8), and a single block's latency was what it cost. y may be x only with
// one block (the launcher sees to it).
#define FORGE__NORM_Q8_THREADS 256
__global__ void __launch_bounds__(FORGE__NORM_Q8_THREADS)
forge__k_rmsnorm_q8(const float *x, const float *__restrict__ w, float *y, uint32_t n, float eps, uint8_t *__restrict__ q8) {
    const uint32_t i0 = blockIdx.x * blockDim.x + threadIdx.x;
    const float w0 = i0 < n ? w[i0] : 0.0f; // the thread's first weight, asked for before the grid wait
    FORGE__GRID_ENTER();
    // thread t adds elements 16c .. 16c + 15 for c = t, t + blockDim.x, ...: four 16-byte loads in
    // flight at a time, one turn for rows up to 4096 (n is a multiple of 32)
    float sum = 0.0f;
    for (uint32_t c = threadIdx.x; c < n / 16; c += blockDim.x) {
        float4 a[4];
#pragma unroll
        for (int j = 0; j < 4; j++) a[j] = *(const float4 *)(x + 16 * c + 4 * j);
#pragma unroll
        for (int j = 0; j < 4; j++) sum += a[j].x * a[j].x + a[j].y * a[j].y + a[j].z * a[j].z + a[j].w * a[j].w;
    }
    sum = forge__block_sum(sum); // with one block, every element is read before any is written
    const float scale = (float)(1.0 / sqrt((double)sum / n + (double)eps));
    int8_t *qs = (int8_t *)q8;
    float4 *ds = (float4 *)(q8 + FORGE__Q8_DS(n));
    const uint32_t end = (n + blockDim.x - 1) / blockDim.x * blockDim.x; // whole waves take every turn
    for (uint32_t i = i0; i < end; i += gridDim.x * blockDim.x) {
        float v = 0.0f;
        if (i < n) v = x[i] * scale * (i == i0 ? w0 : w[i]), y[i] = v;
        forge__q8_put(v, i, i < n, qs, ds);
    }
}

// A normalized input (forge_hip_matvec_norm_q8): the quantized vector holds x * w, rounded in groups
// of 32 as any other, with each group's sum of squares of x in the fourth float of its scales. RMS
// norm's 1 / sqrt(mean of squares + eps) is one number for the whole vector, so a product reading it
// multiplies its row sums by that and nothing else changes. The groups' sums are added lane by lane,
// then across the 32 lanes in butterfly order: every lane (and every block) gets the same bits. The
// factor is computed in float with correctly rounded operations (no double: a kernel that holds a
// double division or square root reserves a call frame, and these are the decode step's products).
// A product copies the groups' sums into shared memory as it starts (forge__norm_sums_fetch, an
// asynchronous copy on NVIDIA sm_80 and newer that holds no registers while the rows stream) and
// reads them there at the end; elsewhere, or past FORGE__NORM_SUMS groups, from the vector itself.
#define FORGE__NORM_SUMS 1024
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(__HIP_PLATFORM_AMD__)
#define FORGE__ASYNC_COPY 1
// 4 bytes from global to shared memory without a register (cp.async); forge__copy_wait before the
// barrier after which the block reads them
__device__ __forceinline__ void forge__copy4_async(float *dst, const float *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"((uint32_t)__cvta_generic_to_shared(dst)), "l"(__cvta_generic_to_global(src))
                 : "memory");
}
__device__ __forceinline__ void forge__copy16_async(void *dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"((uint32_t)__cvta_generic_to_shared(dst)), "l"(__cvta_generic_to_global(src))
                 : "memory");
}
__device__ __forceinline__ void forge__copy_wait(void) { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
__device__ __forceinline__ void forge__wave_sync(void) { __syncwarp(); }
#else
#define FORGE__ASYNC_COPY 0
__device__ __forceinline__ void forge__copy4_async(float *, const float *) {}
__device__ __forceinline__ void forge__copy16_async(void *, const void *) {} // nothing is staged here (forge__stage_ok)
__device__ __forceinline__ void forge__wave_sync(void) {}
__device__ __forceinline__ void forge__copy_wait(void) {}
#endif

// bytes from src to dst, dst - src a multiple of 16, by threads t of t_count: the 16-aligned middle
// as asynchronous 16-byte copies (forge__copy_wait, then a barrier, before the threads read dst),
// the up to 15 bytes before and after it one byte a thread
__device__ __forceinline__ void forge__copy_async(uint8_t *dst, const uint8_t *src, uint32_t bytes, uint32_t t, uint32_t t_count) {
    const uint32_t head = min((uint32_t)(-(uintptr_t)src & 15u), bytes), body = (bytes - head) & ~15u, tail = bytes - head - body;
    if (t < head) dst[t] = src[t];
    if (t < tail) dst[head + body + t] = src[head + body + t];
    for (uint32_t i = t; i < body / 16; i += t_count) forge__copy16_async(dst + head + 16 * i, src + head + 16 * i);
}

__device__ __forceinline__ void forge__norm_sums_fetch(const float4 *ds, uint32_t n, float *sums) {
    if (!FORGE__ASYNC_COPY || n / 32 > FORGE__NORM_SUMS) return;
    for (uint32_t g = threadIdx.x; g < n / 32; g += blockDim.x) forge__copy4_async(sums + g, &ds[g].w);
}

__device__ __forceinline__ float forge__q8_norm_scale(const float4 *ds, const float *sums, uint32_t n, float eps) {
    const bool shared = FORGE__ASYNC_COPY && n / 32 <= FORGE__NORM_SUMS;
    float s = 0.0f;
    for (uint32_t g = threadIdx.x % 32; g < n / 32; g += 32) s = __fadd_rn(s, shared ? sums[g] : ds[g].w);
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) s = __fadd_rn(s, FORGE_SHFL_XOR(s, m));
    return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(s, (float)n), eps)));
}

// The activations of one piece: 8 words of 4 bytes and the scales and sums of the groups it touches.
struct forge__xq {
    int q[8];
    float4 g0, g1, g2, g3;
};

__device__ __forceinline__ void forge__ld_q16(const int8_t *p, int *q) {
    const int4 a = *(const int4 *)p;
    q[0] = a.x, q[1] = a.y, q[2] = a.z, q[3] = a.w;
}

// Q4_0 and Q8_0: a piece is one block = one group.
template <int PACKED> struct forge__pq_q4_0_t : forge__p_q4_0_t<PACKED> {
    typedef typename forge__p_q4_0_t<PACKED>::raw raw;
    static __device__ __forceinline__ void load_q(const int8_t *qs, const float4 *ds, uint32_t p, forge__xq &x) {
        forge__ld_q16(qs + 32 * (size_t)p, x.q);
        forge__ld_q16(qs + 32 * (size_t)p + 16, x.q + 4);
        x.g0 = ds[p];
    }
    static __device__ __forceinline__ float dotq(const raw &r, uint32_t, const forge__xq &x) {
        const float d = r.d();
        int s = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t q = r.q(i);
            s = forge__dp4a((int)(q & 0x0f0f0f0fu), x.q[i], s);
            s = forge__dp4a((int)((q >> 4) & 0x0f0f0f0fu), x.q[4 + i], s);
        }
        return d * (x.g0.x * (float)s - 8.0f * (x.g0.y + x.g0.z)); // sum x (n - 8)
    }
    // A piece unpacked once for the products of several tokens (forge__k_mvq_rows): the bytes as
    // dp4a takes them and the floats that do not depend on the token.
    struct unp { int q[8]; float d; };
    static __device__ __forceinline__ void unpack(const raw &r, uint32_t, unp &u) {
        u.d = r.d();
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t q = r.q(i);
            u.q[i] = (int)(q & 0x0f0f0f0fu), u.q[4 + i] = (int)((q >> 4) & 0x0f0f0f0fu);
        }
    }
    static __device__ __forceinline__ float dotu(const unp &u, uint32_t, const forge__xq &x) {
        int s = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) s = forge__dp4a(u.q[i], x.q[i], s);
        return u.d * (x.g0.x * (float)s - 8.0f * (x.g0.y + x.g0.z));
    }
};

template <int PACKED> struct forge__pq_q8_0_t : forge__p_q8_0_t<PACKED> {
    typedef typename forge__p_q8_0_t<PACKED>::raw raw;
    static __device__ __forceinline__ void load_q(const int8_t *qs, const float4 *ds, uint32_t p, forge__xq &x) {
        forge__pq_q4_0_t<PACKED>::load_q(qs, ds, p, x);
    }
    static __device__ __forceinline__ float dotq(const raw &r, uint32_t, const forge__xq &x) {
        const float d = r.d();
        int s = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) s = forge__dp4a((int)r.q(i), x.q[i], s);
        return d * x.g0.x * (float)s;
    }
    struct unp { int q[8]; float d; };
    static __device__ __forceinline__ void unpack(const raw &r, uint32_t, unp &u) {
        u.d = r.d();
#pragma unroll
        for (int i = 0; i < 8; i++) u.q[i] = (int)r.q(i);
    }
    static __device__ __forceinline__ float dotu(const unp &u, uint32_t, const forge__xq &x) {
        int s = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) s = forge__dp4a(u.q[i], x.q[i], s);
        return u.d * x.g0.x * (float)s;
    }
};
typedef forge__pq_q4_0_t<0> forge__pq_q4_0;
typedef forge__pq_q4_0_t<1> forge__pq_q4_0_packed;
typedef forge__pq_q8_0_t<0> forge__pq_q8_0;
typedef forge__pq_q8_0_t<1> forge__pq_q8_0_packed;

// Q4_K: piece pi of a super-block holds 16 elements of group 2c (offset 16h) in its low nibbles and
// 16 of group 2c + 1 in its high nibbles (c = pi / 2, h = pi % 2), as in forge__p_q4_k.
struct forge__pq_q4_k : forge__p_q4_k {
    static __device__ __forceinline__ void load_q(const int8_t *qs, const float4 *ds, uint32_t p, forge__xq &x) {
        const size_t g = (size_t)(p / 8) * 8 + 2 * ((p % 8) / 2);
        const uint32_t h = p % 2;
        forge__ld_q16(qs + 32 * g + 16 * h, x.q);
        forge__ld_q16(qs + 32 * (g + 1) + 16 * h, x.q + 4);
        x.g0 = ds[g], x.g1 = ds[g + 1];
    }
    static __device__ __forceinline__ float dotq(const raw &r, uint32_t p, const forge__xq &x) {
        // the scale and min bytes of sub-blocks 2c, 2c + 1 without a branch (lanes of a wave differ
        // in c): c < 2 takes them whole from words A, B; c >= 2 puts the low nibbles of C under the
        // top two bits of A, B. The masks and the shift depend on the lane only, not on the row.
        const uint32_t c = (p % 8) / 2, h = p % 2, s16 = 16 * (c & 1);
        const bool upper = c >= 2;
        const uint32_t m_lo = upper ? 0x0f0fu : 0x3f3fu, m_hi = upper ? 0x3030u : 0u;
        const uint32_t a = r.head.y >> s16, b = r.head.z >> s16, cl = r.head.w >> s16;
        const uint32_t sc = ((upper ? cl : a) & m_lo) | ((a >> 2) & m_hi);
        const uint32_t mn = ((upper ? cl >> 4 : b) & m_lo) | ((b >> 2) & m_hi);
        const float d = forge__f16(r.head.x & 0xffffu), dmin = forge__f16(r.head.x >> 16);
        const uint32_t q[4] = {r.qs.x, r.qs.y, r.qs.z, r.qs.w};
        int s0 = 0, s1 = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            s0 = forge__dp4a((int)(q[i] & 0x0f0f0f0fu), x.q[i], s0);
            s1 = forge__dp4a((int)((q[i] >> 4) & 0x0f0f0f0fu), x.q[4 + i], s1);
        }
        const float sum0 = h ? x.g0.z : x.g0.y, sum1 = h ? x.g1.z : x.g1.y;
        // scale times sum in integers, exact (|s| <= 16 * 15 * 127, scales < 64): one conversion each
        return d * (x.g0.x * (float)((int)(sc & 0xffu) * s0) + x.g1.x * (float)((int)(sc >> 8) * s1)) -
               dmin * (forge__u2f(mn & 0xffu) * sum0 + forge__u2f(mn >> 8) * sum1);
    }
    // unpacked: the nibbles, the two groups' scales as integers, d, and dmin times each minimum
    struct unp { int q[8]; int sc0, sc1; float d, m0, m1; };
    static __device__ __forceinline__ void unpack(const raw &r, uint32_t p, unp &u) {
        const uint32_t c = (p % 8) / 2, s16 = 16 * (c & 1);
        const bool upper = c >= 2;
        const uint32_t m_lo = upper ? 0x0f0fu : 0x3f3fu, m_hi = upper ? 0x3030u : 0u;
        const uint32_t a = r.head.y >> s16, b = r.head.z >> s16, cl = r.head.w >> s16;
        const uint32_t sc = ((upper ? cl : a) & m_lo) | ((a >> 2) & m_hi);
        const uint32_t mn = ((upper ? cl >> 4 : b) & m_lo) | ((b >> 2) & m_hi);
        const float dmin = forge__f16(r.head.x >> 16);
        u.d = forge__f16(r.head.x & 0xffffu);
        u.sc0 = (int)(sc & 0xffu), u.sc1 = (int)(sc >> 8);
        u.m0 = dmin * forge__u2f(mn & 0xffu), u.m1 = dmin * forge__u2f(mn >> 8);
        const uint32_t q[4] = {r.qs.x, r.qs.y, r.qs.z, r.qs.w};
#pragma unroll
        for (int i = 0; i < 4; i++) u.q[i] = (int)(q[i] & 0x0f0f0f0fu), u.q[4 + i] = (int)((q[i] >> 4) & 0x0f0f0f0fu);
    }
    static __device__ __forceinline__ float dotu(const unp &u, uint32_t p, const forge__xq &x) {
        int s0 = 0, s1 = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) s0 = forge__dp4a(u.q[i], x.q[i], s0), s1 = forge__dp4a(u.q[4 + i], x.q[4 + i], s1);
        const uint32_t h = p % 2;
        const float sum0 = h ? x.g0.z : x.g0.y, sum1 = h ? x.g1.z : x.g1.y;
        return u.d * (x.g0.x * (float)(u.sc0 * s0) + x.g1.x * (float)(u.sc1 * s1)) - (u.m0 * sum0 + u.m1 * sum1);
    }
};

// Q6_K: piece pi of a super-block: quarter k (0..3) holds 8 elements at offset 8t of group 4h + k
// (h = pi / 4, t = pi % 4), as in forge__p_q6_k. The 6-bit values v become signed bytes v - 32 with
// one add and one xor per word: v + 96 never carries out of its byte, and flipping the top bit
// subtracts 128.
template <int PACKED> struct forge__pq_q6_k_t : forge__p_q6_k_t<PACKED> {
    typedef typename forge__p_q6_k_t<PACKED>::raw raw;
    static __device__ __forceinline__ void load_q(const int8_t *qs, const float4 *ds, uint32_t p, forge__xq &x) {
        const uint32_t pi = p % 8, h = pi / 4, t = pi % 4;
        const size_t g = (size_t)(p / 8) * 8 + 4 * h;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int2 a = *(const int2 *)(qs + 32 * (g + k) + 8 * t);
            x.q[2 * k] = a.x, x.q[2 * k + 1] = a.y;
        }
        // only the groups' scales: the sums are not used here, and four 16-byte loads cost registers
        x.g0.x = ds[g].x, x.g1.x = ds[g + 1].x, x.g2.x = ds[g + 2].x, x.g3.x = ds[g + 3].x;
    }
    static __device__ __forceinline__ float dotq(const raw &r, uint32_t p, const forge__xq &x) {
        (void)p;
        const int sc[4] = {(int)(int8_t)(r.sc & 0xffu), (int)(int8_t)((r.sc >> 8) & 0xffu), (int)(int8_t)((r.sc >> 16) & 0xffu),
                           (int)(int8_t)(r.sc >> 24)};
        const float dx[4] = {x.g0.x, x.g1.x, x.g2.x, x.g3.x};
        float total = 0.0f;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            int s = 0;
#pragma unroll
            for (int g = 0; g < 2; g++) {
                const uint32_t ql = (k & 1) ? r.b[g] : r.a[g];
                const uint32_t lo = (k & 2) ? (ql >> 4) & 0x0f0f0f0fu : ql & 0x0f0f0f0fu;
                const uint32_t v = lo | (((r.h[g] >> (2 * k)) & 0x03030303u) << 4);
                s = forge__dp4a((int)((v + 0x60606060u) ^ 0x80808080u), x.q[2 * k + g], s);
            }
            total += (float)(sc[k] * s) * dx[k];
        }
        return r.d * total;
    }
    // unpacked: the signed bytes v - 32 of the four quarters (2 words each), the scales, d
    struct unp { int q[8]; int sc[4]; float d; };
    static __device__ __forceinline__ void unpack(const raw &r, uint32_t, unp &u) {
        u.sc[0] = (int)(int8_t)(r.sc & 0xffu), u.sc[1] = (int)(int8_t)((r.sc >> 8) & 0xffu);
        u.sc[2] = (int)(int8_t)((r.sc >> 16) & 0xffu), u.sc[3] = (int)(int8_t)(r.sc >> 24);
        u.d = r.d;
#pragma unroll
        for (int k = 0; k < 4; k++)
#pragma unroll
            for (int g = 0; g < 2; g++) {
                const uint32_t ql = (k & 1) ? r.b[g] : r.a[g];
                const uint32_t lo = (k & 2) ? (ql >> 4) & 0x0f0f0f0fu : ql & 0x0f0f0f0fu;
                const uint32_t v = lo | (((r.h[g] >> (2 * k)) & 0x03030303u) << 4);
                u.q[2 * k + g] = (int)((v + 0x60606060u) ^ 0x80808080u);
            }
    }
    static __device__ __forceinline__ float dotu(const unp &u, uint32_t, const forge__xq &x) {
        const float dx[4] = {x.g0.x, x.g1.x, x.g2.x, x.g3.x};
        float total = 0.0f;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int s = forge__dp4a(u.q[2 * k + 1], x.q[2 * k + 1], forge__dp4a(u.q[2 * k], x.q[2 * k], 0));
            total += (float)(u.sc[k] * s) * dx[k];
        }
        return u.d * total;
    }
};
typedef forge__pq_q6_k_t<2> forge__pq_q6_k;
typedef forge__pq_q6_k_t<16> forge__pq_q6_k_packed;
typedef forge__pq_q6_k_t<4> forge__pq_q6_k_packed4;

// The decode product on quantized activations. A block is FORGE__MVQ_WAVES waves; the waves are
// split into KSPLIT sets that walk interleaved pieces of the same rows (for matrices with few rows:
// more blocks and more loads in flight), so a block covers FORGE__MVQ_ROWS * WAVES / KSPLIT rows.
// Lane l of wave set j takes pieces (l + wave * j), then steps by wave * KSPLIT; sums meet in shared
// memory and are added in wave order. GLU: two matrices (gate, up) of the same type share the
// activations; the block writes h = act(gate) * up for its 32 rows and rounds them to q8_out
// (blocks then cover exactly 32 rows: KSPLIT must be 1). Otherwise y = W x + bias, or y += that.
// NORM_OUT: a block of WAVES = 8 * KSPLIT waves covers 32 rows, adds them into y (the residual)
// and writes y * norm_w to q8_out as a normalized input (see forge__q8_norm_scale). NORM_IN: the
// input q8 is such a vector and the rows are scaled by its norm with epsilon norm_eps (a separate
// instantiation: the plain kernels keep their registers).
template <class P, int KSPLIT, int GLU, int WAVES = FORGE__MVQ_WAVES, int NORM_OUT = 0, int NORM_IN = 0, int STAGE = 0>
__device__ __forceinline__ void forge__mvq_block(uint32_t block, const uint8_t *__restrict__ w_in, const uint8_t *__restrict__ w_up_in,
                                                 size_t row_bytes, uint32_t n_rows, uint32_t n_cols, const uint8_t *__restrict__ q8,
                                                 float *y, const float *__restrict__ bias, int accumulate, int act,
                                                 uint8_t *__restrict__ q8_out, float norm_eps, const float *__restrict__ norm_w) {
    __shared__ float part[WAVES][2 * FORGE__MVQ_ROWS];
    __shared__ float norm_sums[NORM_IN ? FORGE__NORM_SUMS : 1];
    __shared__ float ends[NORM_OUT ? 64 : 1]; // NORM_OUT: the block's 32 residual values and norm weights
    const uint32_t wave = warpSize, lane = threadIdx.x % wave, wid = threadIdx.x / wave;
    const uint32_t set = wid % KSPLIT, rows_per_block = FORGE__MVQ_ROWS * (WAVES / KSPLIT);
    const uint32_t r0 = block * rows_per_block + (wid / KSPLIT) * FORGE__MVQ_ROWS;
    const uint32_t n_pieces = n_cols / 32;
    const int8_t *qs = (const int8_t *)q8;
    const float4 *ds = (const float4 *)(q8 + FORGE__Q8_DS(n_cols));
    float acc[2 * FORGE__MVQ_ROWS] = {0};
    // The lane's first piece of weights is asked for before the grid wait (FORGE__GRID_ENTER): the
    // weights do not depend on the kernel before, so their latency passes while it finishes. Nothing
    // the kernel before writes is read until after the wait.
    size_t rows0[FORGE__MVQ_ROWS]; // the rows' offsets in w (and w_up)
    const uint32_t p_first = GLU == 2 ? lane : lane + wave * set;
    const bool first = p_first < (GLU == 2 ? 2 : 1) * n_pieces;
    typename P::raw pre[FORGE__MVQ_ROWS];
    // STAGE: the block's rows (of w, and of w_up) are copied to shared memory as they are (forge__stage_ok),
    // asked for before the wait, so that they stream while the kernel before finishes; the waves of
    // a group of rows copy them and wait for them alone. In shared memory a row keeps its address
    // modulo 16 (the readers' alignment; the odd Q6_K rows tell their order from it).
    extern __shared__ __align__(16) uint8_t stage[];
    const uint32_t row_first = block * rows_per_block;
    const size_t from = (size_t)row_first * row_bytes, slab = (size_t)rows_per_block * row_bytes;
    const uint32_t at_w = (uint32_t)((uintptr_t)(w_in + from) & 15), at_up = GLU ? (uint32_t)((uintptr_t)(w_up_in + from) & 15) : 0u;
    const uint8_t *w = STAGE ? stage + at_w : w_in, *w_up = STAGE ? stage + (at_w + slab + 15) / 16 * 16 + at_up : w_up_in;
#pragma unroll
    for (int k = 0; k < FORGE__MVQ_ROWS; k++) // rows past the end: re-read, dropped
        rows0[k] = (size_t)(min(r0 + k, n_rows - 1) - (STAGE ? row_first : 0u)) * row_bytes;
    if (STAGE) {
        const uint32_t n = r0 < n_rows ? min((uint32_t)FORGE__MVQ_ROWS, n_rows - r0) : 0u, t = lane + wave * set;
        const size_t at = (size_t)(r0 - row_first) * row_bytes;
        if (n) forge__copy_async((uint8_t *)w + at, w_in + from + at, n * (uint32_t)row_bytes, t, wave * KSPLIT);
        if (n && GLU) forge__copy_async((uint8_t *)w_up + at, w_up_in + from + at, n * (uint32_t)row_bytes, t, wave * KSPLIT);
        FORGE__GRID_ENTER();
        forge__copy_wait(); // a wave set reads its own rows, but rows past the end are the last row's
        if (KSPLIT > 1 || row_first + rows_per_block > n_rows) __syncthreads(); // uniform in the block
        else forge__wave_sync();
    }
    if (first) { // staged: from shared memory after the wait; else from device memory before it
        const bool up = GLU == 2 && p_first >= n_pieces;
#pragma unroll
        for (int k = 0; k < FORGE__MVQ_ROWS; k++)
            P::load((up ? w_up : w) + rows0[k], up ? p_first - n_pieces : p_first, n_cols, pre[k]);
    }
    if (!STAGE) FORGE__GRID_ENTER();
    if (NORM_IN) forge__norm_sums_fetch(ds, n_cols, norm_sums);
    if (NORM_OUT && threadIdx.x < 64) // fetched as the rows start streaming: the tail after them is shorter
        forge__copy4_async(ends + threadIdx.x, threadIdx.x < 32 ? y + block * 32 + threadIdx.x : norm_w + block * 32 + threadIdx.x - 32);
    // GLU: the gate rows over all the pieces, then the up rows (the activations are read twice, from
    // cache): the registers of a single product, so four blocks fit a multiprocessor and the grid of
    // a large FFN runs in one wave. GLU 2: the gate's pieces and then the up's as one list the lanes
    // walk together, for rows whose pieces are not a multiple of the wave (Qwen2.5-1.5B's 48: three
    // full rounds of loads instead of two full and two half)
    if (GLU == 2) {
        if (first) {
            const bool up = p_first >= n_pieces;
            const uint32_t p = up ? p_first - n_pieces : p_first;
            forge__xq xq;
            P::load_q(qs, ds, p, xq);
#pragma unroll
            for (int k = 0; k < FORGE__MVQ_ROWS; k++) {
                const float v = P::dotq(pre[k], p, xq);
                acc[k] += up ? 0.0f : v, acc[FORGE__MVQ_ROWS + k] += up ? v : 0.0f;
            }
        }
        for (uint32_t i = lane + wave; i < 2 * n_pieces; i += wave) {
            const bool up = i >= n_pieces;
            const uint32_t p = up ? i - n_pieces : i;
            const uint8_t *base = up ? w_up : w;
            typename P::raw raw[FORGE__MVQ_ROWS];
#pragma unroll
            for (int k = 0; k < FORGE__MVQ_ROWS; k++) P::load(base + rows0[k], p, n_cols, raw[k]);
            forge__xq xq;
            P::load_q(qs, ds, p, xq);
#pragma unroll
            for (int k = 0; k < FORGE__MVQ_ROWS; k++) {
                const float v = P::dotq(raw[k], p, xq);
                acc[k] += up ? 0.0f : v, acc[FORGE__MVQ_ROWS + k] += up ? v : 0.0f;
            }
        }
    }
#pragma unroll
    for (int m = 0; m < (GLU == 2 ? 0 : GLU ? 2 : 1); m++) {
        const uint8_t *rows[FORGE__MVQ_ROWS];
#pragma unroll
        for (int k = 0; k < FORGE__MVQ_ROWS; k++) rows[k] = (m ? w_up : w) + rows0[k];
        uint32_t p = p_first;
        if (m == 0 && first) {
            forge__xq xq;
            P::load_q(qs, ds, p, xq);
#pragma unroll
            for (int k = 0; k < FORGE__MVQ_ROWS; k++) acc[k] += P::dotq(pre[k], p, xq);
            p += wave * KSPLIT;
        }
        for (; p < n_pieces; p += wave * KSPLIT) {
            typename P::raw raw[FORGE__MVQ_ROWS];
#pragma unroll
            for (int k = 0; k < FORGE__MVQ_ROWS; k++) P::load(rows[k], p, n_cols, raw[k]);
            forge__xq xq;
            P::load_q(qs, ds, p, xq);
#pragma unroll
            for (int k = 0; k < FORGE__MVQ_ROWS; k++) acc[m * FORGE__MVQ_ROWS + k] += P::dotq(raw[k], p, xq);
        }
    }
#pragma unroll
    for (int k = 0; k < (GLU ? 2 : 1) * FORGE__MVQ_ROWS; k++) {
        const float total = forge__wave_sum(acc[k]);
        if (lane == 0) part[wid][k] = total;
    }
    if (NORM_IN || NORM_OUT) forge__copy_wait();
    if (KSPLIT > 1 || GLU || NORM_OUT || NORM_IN) __syncthreads();
    const float scale = NORM_IN ? forge__q8_norm_scale(ds, norm_sums, n_cols, norm_eps) : 1.0f;
    if (NORM_OUT) { // threads 0..31: one row each of the block's 32, their sum of squares, one group
        if (threadIdx.x < 32) {
            const uint32_t t = threadIdx.x, q = t / FORGE__MVQ_ROWS, k = t % FORGE__MVQ_ROWS, r = block * 32 + t;
            float total = 0.0f;
            for (int j = 0; j < KSPLIT; j++) total += part[q * KSPLIT + j][k];
            if (bias) total += bias[r];
            const float x = (FORGE__ASYNC_COPY ? ends[t] : y[r]) + total; // as the plain product's accumulate
            y[r] = x;
            float ss = __fmul_rn(x, x);
#pragma unroll
            for (int m = 16; m > 0; m >>= 1) ss = __fadd_rn(ss, FORGE_SHFL_XOR(ss, m));
            forge__q8_put(__fmul_rn(x, FORGE__ASYNC_COPY ? ends[32 + t] : norm_w[r]), r, 1, (int8_t *)q8_out,
                          (float4 *)(q8_out + FORGE__Q8_DS(n_rows)), ss);
        }
        return;
    }
    if (GLU) { // threads 0..31: one row each of the block's 32, rounded as one group
        if (threadIdx.x < rows_per_block) {
            const uint32_t wr = threadIdx.x / FORGE__MVQ_ROWS, k = threadIdx.x % FORGE__MVQ_ROWS;
            const uint32_t r = block * rows_per_block + threadIdx.x;
            float g = part[wr][k], u = part[wr][FORGE__MVQ_ROWS + k];
            if (NORM_IN) g = __fmul_rn(g, scale), u = __fmul_rn(u, scale);
            const float h = (act ? forge__gelu(g) : g / (1.0f + expf(-g))) * u;
            if (r < n_rows) y[r] = h;
            forge__q8_put(r < n_rows ? h : 0.0f, r, r < n_rows, (int8_t *)q8_out, (float4 *)(q8_out + FORGE__Q8_DS(n_rows)));
        }
        return;
    }
    if (set == 0 && lane < FORGE__MVQ_ROWS && r0 + lane < n_rows) {
        float total = 0.0f;
        for (int j = 0; j < KSPLIT; j++) total += part[wid + j][lane];
        const uint32_t r = r0 + lane;
        if (NORM_IN) total = __fmul_rn(total, scale);
        if (bias) total += bias[r];
        y[r] = accumulate ? y[r] + total : total;
    }
}

// at most 64 registers: four 256-thread blocks a multiprocessor
template <class P, int KSPLIT, int GLU, int NORM_IN, int STAGE = 0>
__global__ void __launch_bounds__(FORGE__MVQ_MAX_THREADS, 2)
forge__k_mvq(const uint8_t *__restrict__ w, const uint8_t *__restrict__ w_up, size_t row_bytes, uint32_t n_rows, uint32_t n_cols,
             const uint8_t *__restrict__ q8, float *y, const float *__restrict__ bias, int accumulate, int act,
             uint8_t *__restrict__ q8_out, float norm_eps) {
    forge__mvq_block<P, KSPLIT, GLU, FORGE__MVQ_WAVES, 0, NORM_IN, STAGE>(blockIdx.x, w, w_up, row_bytes, n_rows, n_cols, q8, y, bias, accumulate, act,
                                                                  q8_out, norm_eps, NULL);
}

// y += W x + bias with the result prepared for the RMS norm that follows (NORM_OUT above): blocks of
// 8 * KSPLIT waves, at most 1024 threads and so at most 64 registers
template <class P, int KSPLIT>
__global__ void __launch_bounds__(1024, 1)
forge__k_mvq_norm(const uint8_t *__restrict__ w, size_t row_bytes, uint32_t n_rows, uint32_t n_cols, const uint8_t *__restrict__ q8,
                  float *y, const float *__restrict__ bias, const float *__restrict__ norm_w, uint8_t *__restrict__ q8_out) {
    forge__mvq_block<P, KSPLIT, 0, FORGE__MVQ_WAVES * KSPLIT, 1>(blockIdx.x, w, NULL, row_bytes, n_rows, n_cols, q8, y, bias, 1, 0, q8_out,
                                                                 -1.0f, norm_w);
}

// Three products of the same quantized input in one launch (the query, key and value projections):
// the blocks of the first matrix, then the second's, then the third's; the first two of type PA.
struct forge__mv3 {
    const uint8_t *w[3];
    size_t row_bytes[3];
    uint32_t n_rows[3], first[3];
    float *y[3];
    const float *bias[3];
    float norm_eps;
};

template <class PA, class PB, int KSPLIT, int NORM_IN>
__global__ void __launch_bounds__(FORGE__MVQ_MAX_THREADS, 2) forge__k_mvq3(forge__mv3 m, uint32_t n_cols, const uint8_t *__restrict__ q8) {
    const uint32_t b = blockIdx.x;
    if (b < m.first[1])
        forge__mvq_block<PA, KSPLIT, 0, FORGE__MVQ_WAVES, 0, NORM_IN>(b, m.w[0], NULL, m.row_bytes[0], m.n_rows[0], n_cols, q8, m.y[0],
                                                                      m.bias[0], 0, 0, NULL, m.norm_eps, NULL);
    else if (b < m.first[2])
        forge__mvq_block<PA, KSPLIT, 0, FORGE__MVQ_WAVES, 0, NORM_IN>(b - m.first[1], m.w[1], NULL, m.row_bytes[1], m.n_rows[1], n_cols, q8,
                                                                      m.y[1], m.bias[1], 0, 0, NULL, m.norm_eps, NULL);
    else
        forge__mvq_block<PB, KSPLIT, 0, FORGE__MVQ_WAVES, 0, NORM_IN>(b - m.first[2], m.w[2], NULL, m.row_bytes[2], m.n_rows[2], n_cols, q8,
                                                                      m.y[2], m.bias[2], 0, 0, NULL, m.norm_eps, NULL);
}

static int forge__hip_sm_count(void) { // the current device's, asked once a device, as forge__pdl_enabled
    static std::atomic<int> cached[64];
    int device = 0, n = 0;
    if (hipGetDevice(&device) != hipSuccess) (void)hipGetLastError(), device = 0;
    if (device >= 0 && device < 64 && (n = cached[device].load(std::memory_order_relaxed)) > 0) return n;
    if (hipDeviceGetAttribute(&n, hipDeviceAttributeMultiprocessorCount, device) != hipSuccess || n <= 0)
        (void)hipGetLastError(), n = 64;
    if (device >= 0 && device < 64) cached[device].store(n, std::memory_order_relaxed);
    return n;
}

#if defined(__HIP_PLATFORM_AMD__) || defined(__HIPCC__)
#define FORGE__STAGING 0
#else
#define FORGE__STAGING 1
#endif
// Shared memory a staged block takes for `copies` matrices of `rows` rows (forge__mvq_block's STAGE)
static size_t forge__stage_bytes(size_t row_bytes, uint32_t rows, int copies) { return copies * ((rows * row_bytes + 15) / 16 * 16 + 32); }

// Whether a decode product of `blocks` blocks stages each block's rows in shared memory (STAGE
// above), taking `bytes` of it, when its lanes would otherwise walk `rounds` rounds of loads: sm_90
// code on a device that runs it (the copies pay by streaming while the kernel before finishes, so
// overlapped launches must be on), more than one round (with one, the weights a lane loads before
// the wait are all it reads, and the copy only adds its trip through shared memory), the grid in
// one wave of at most four blocks a multiprocessor, and their rows within FORGE__STAGE_SM_BYTES of a
// multiprocessor's shared memory. The context's gpu_no_stage turns it off (FORGE_HIP_NO_STAGE).
// A test hook sets staging off (0), on where the rule allows (1) or back to the context's switch (-1).
#define FORGE__STAGE_SM_BYTES (200u << 10)
static std::atomic<int> forge__stage_state(-1);
extern "C" void forge_hip_set_staging(int on) { forge__stage_state.store(on < 0 ? -1 : on ? 1 : 0); }
static int forge__stage_ok(size_t bytes, uint32_t blocks, uint32_t rounds) {
#if !FORGE__STAGING
    (void)bytes, (void)blocks, (void)rounds;
    return 0;
#else
    int state = forge__stage_state.load(std::memory_order_relaxed);
    if (state < 0) state = !(forge__hip_switches & FORGE_HIP_NO_STAGE);
    const uint32_t sms = (uint32_t)forge__hip_sm_count(), per_sm = (blocks + sms - 1) / sms;
    return state && forge__pdl_enabled() && rounds >= 2 && per_sm <= 4 && per_sm * bytes <= FORGE__STAGE_SM_BYTES;
#endif
}

#if FORGE__STAGING
// Lets a staged kernel take up to FORGE__STAGE_SM_BYTES of dynamic shared memory on the current
// device, which the runtime sets for each device; `known` keeps the answer a device gave (bits 0..31:
// asked, 32..63: allowed; devices past 31 ask each time). A device that refuses (less shared memory
// a multiprocessor) gets the unstaged product, and the refusal is not left as the runtime's last
// error for the launch check to find.
template <typename... KArgs> static int forge__stage_allow(void (*kernel)(KArgs...), std::atomic<unsigned long long> &known) {
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return (void)cudaGetLastError(), 0;
    const unsigned long long asked = device >= 0 && device < 32 ? 1ull << device : 0ull, yes = asked << 32;
    const unsigned long long k = known.load(std::memory_order_relaxed);
    if (asked && (k & asked)) return (k & yes) != 0;
    const int ok = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)FORGE__STAGE_SM_BYTES) == cudaSuccess;
    if (!ok) (void)cudaGetLastError();
    known.fetch_or(asked | (ok ? yes : 0ull));
    return ok;
}
#endif

#define FORGE__Q8_TYPES(X)                                                                               \
    X(FORGE_HIP_Q4_0, forge__pq_q4_0) X(FORGE_HIP_Q8_0, forge__pq_q8_0) X(FORGE_HIP_Q4_K, forge__pq_q4_k) \
    X(FORGE_HIP_Q6_K, forge__pq_q6_k)

#define FORGE__Q8_KINDS(X)                                                                               \
    FORGE__Q8_TYPES(X) X(FORGE__HIP_Q6_K_PACKED, forge__pq_q6_k_packed)                                 \
    X(FORGE__HIP_Q6_K_PACKED4, forge__pq_q6_k_packed4) X(FORGE__HIP_Q4_0_PACKED, forge__pq_q4_0_packed)  \
    X(FORGE__HIP_Q8_0_PACKED, forge__pq_q8_0_packed)

template <class P, int NI>
static void forge__mvq_launch(const uint8_t *w, const uint8_t *w_up, size_t row_bytes, uint32_t n_rows, uint32_t n_cols,
                              const uint8_t *q8, float *y, const float *bias, int accumulate, int act, uint8_t *q8_out, float norm_eps,
                              hipStream_t s) {
    const uint32_t wave = (uint32_t)forge__hip_wave_size(), pieces = n_cols / 32;
    const uint32_t threads = FORGE__MVQ_WAVES * wave, rows = FORGE__MVQ_ROWS * FORGE__MVQ_WAVES;
#if FORGE__STAGING // the staged instantiation of the product, once forge__stage_ok has said yes
#define FORGE__MVQ_STAGED(K, G)                                                                          \
    {                                                                                                    \
        static std::atomic<unsigned long long> known(0);                                                 \
        if (forge__stage_allow(forge__k_mvq<P, K, G, NI, 1>, known)) {                                   \
            forge__launch_smem(1, forge__k_mvq<P, K, G, NI, 1>, dim3(blocks), dim3(threads), bytes, s, w, w_up, row_bytes, n_rows, n_cols, \
                               q8, y, bias, accumulate, act, q8_out, norm_eps);                          \
            return;                                                                                      \
        }                                                                                                \
    }
#endif
    if (w_up) {
        const uint32_t blocks = (n_rows + rows - 1) / rows;
#if FORGE__STAGING
        const size_t bytes = forge__stage_bytes(row_bytes, rows, 2);
        if (forge__stage_ok(bytes, blocks, (2 * pieces + wave - 1) / wave)) {
            if (pieces % wave) FORGE__MVQ_STAGED(1, 2) else FORGE__MVQ_STAGED(1, 1)
        }
#endif
        if (pieces % wave)
            forge__launch(forge__k_mvq<P, 1, 2, NI>, dim3(blocks), dim3(threads), s, w, w_up, row_bytes, n_rows, n_cols, q8, y,
                          (const float *)NULL, 0, act, q8_out, norm_eps);
        else
            forge__launch(forge__k_mvq<P, 1, 1, NI>, dim3(blocks), dim3(threads), s, w, w_up, row_bytes, n_rows, n_cols, q8, y,
                          (const float *)NULL, 0, act, q8_out, norm_eps);
        return;
    }
    // split the waves of a block over the columns until the grid covers the machine twice
    uint32_t split = 1;
    while (split < 8 && (n_rows + rows / split - 1) / (rows / split) < 2u * (uint32_t)forge__hip_sm_count()) split *= 2;
    const uint32_t blocks = (n_rows + rows / split - 1) / (rows / split);
#if FORGE__STAGING
    const size_t bytes = forge__stage_bytes(row_bytes, rows / split, 1);
    if (forge__stage_ok(bytes, blocks, (pieces + split * wave - 1) / (split * wave))) {
        switch (split) {
        case 1: FORGE__MVQ_STAGED(1, 0) break;
        case 2: FORGE__MVQ_STAGED(2, 0) break;
        case 4: FORGE__MVQ_STAGED(4, 0) break;
        default: FORGE__MVQ_STAGED(8, 0) break;
        }
    }
#undef FORGE__MVQ_STAGED
#endif
    switch (split) {
    case 1: forge__launch(forge__k_mvq<P, 1, 0, NI>, dim3(blocks), dim3(threads), s, w, (const uint8_t *)NULL, row_bytes, n_rows, n_cols, q8, y, bias, accumulate, 0, (uint8_t *)NULL, norm_eps); break;
    case 2: forge__launch(forge__k_mvq<P, 2, 0, NI>, dim3(blocks), dim3(threads), s, w, (const uint8_t *)NULL, row_bytes, n_rows, n_cols, q8, y, bias, accumulate, 0, (uint8_t *)NULL, norm_eps); break;
    case 4: forge__launch(forge__k_mvq<P, 4, 0, NI>, dim3(blocks), dim3(threads), s, w, (const uint8_t *)NULL, row_bytes, n_rows, n_cols, q8, y, bias, accumulate, 0, (uint8_t *)NULL, norm_eps); break;
    default: forge__launch(forge__k_mvq<P, 8, 0, NI>, dim3(blocks), dim3(threads), s, w, (const uint8_t *)NULL, row_bytes, n_rows, n_cols, q8, y, bias, accumulate, 0, (uint8_t *)NULL, norm_eps); break;
    }
}

// A product of a few tokens (a step of several sequences) on 8-bit activations: each wave takes
// FORGE__MVR_ROWS rows, its lanes walk the rows' pieces as the decode product does; each piece of
// weights is loaded and unpacked once (P::unpack) and then meets the same piece of every token's
// quantized activations (P::dotu: dp4a and the token's scales), so the weights are read from memory
// once for up to NT tokens and their unpacking is not repeated a token. The waves of a block may be
// split into `sets` that walk interleaved pieces of the same rows (matrices with few rows), their
// sums meeting in shared memory, added in set order. q8: the n_tokens rows of x quantized one after
// another as a single vector of q8_n = n_tokens * n_cols (forge__k_q8_quantize's layout; n_cols is a
// multiple of 32, so no group spans two tokens), nt <= NT of them. y: [nt][n_rows].
#define FORGE__MVR_ROWS 4
#define FORGE__MVR_THREADS 256 // a block's most threads (8 waves of 32, 4 of 64)
// The most tokens a product takes this path with (forge_hip_matmul_rows_q8): its time grows with
// the tokens (the dp4a products are the work), the f16 matrix-unit kernel's with split columns hardly
// below 32, and they meet (H100 and H200, tests/PERF.md "Steps of several sequences: weights unpacked
// once") at about 16 tokens for Q4_0 and Q8_0, 11 to 15 for Q4_K and Q6_K (their scales cost more a
// token; Q4_K from FORGE__MH_MIN tokens takes forge__k_mmh_rows instead).
#define FORGE__MVR_MAX 16
#define FORGE__MVR_MAX_K 12

// Sums each of a lane's N values over the wave (N a power of two): at every halving of the lanes
// exchanged, each lane keeps half of the values and sends the other half, so the whole takes about N
// + log2(wave) shuffles instead of N log2(wave). Afterwards value j of lane l is the total of value
// forge__wave_sums_index<N>(j, l), for j < max(N / 32, 1); with N < 32, lanes that differ only in
// their bits below 32 / N hold the same totals. Step M (16, 8, .., 1) with n values left:
template <int N, int n, int M> struct forge__wave_sums_step {
    static __device__ __forceinline__ void run(float (&v)[N], uint32_t lane) {
        const bool up = (lane & (uint32_t)M) != 0;
#pragma unroll
        for (int i = 0; i < n / 2; i++) {
            const float keep = up ? v[i + n / 2] : v[i], send = up ? v[i] : v[i + n / 2];
            v[i] = keep + FORGE_SHFL_XOR(send, M);
        }
        forge__wave_sums_step<N, n / 2, M / 2>::run(v, lane);
    }
};
template <int N, int M> struct forge__wave_sums_step<N, 1, M> { // one value left: plain sums over the rest
    static __device__ __forceinline__ void run(float (&v)[N], uint32_t lane) {
        v[0] += FORGE_SHFL_XOR(v[0], M);
        forge__wave_sums_step<N, 1, M / 2>::run(v, lane);
    }
};
template <int N, int n> struct forge__wave_sums_step<N, n, 0> {
    static __device__ __forceinline__ void run(float (&)[N], uint32_t) {}
};
template <int N> struct forge__wave_sums_step<N, 1, 0> {
    static __device__ __forceinline__ void run(float (&)[N], uint32_t) {}
};
template <int N>
__device__ __forceinline__ void forge__wave_sums(float (&v)[N], uint32_t lane) {
    if (warpSize == 64) {
#pragma unroll
        for (int i = 0; i < N; i++) v[i] += FORGE_SHFL_XOR(v[i], 32);
    }
    forge__wave_sums_step<N, N, 16>::run(v, lane);
}
template <int N>
__device__ __forceinline__ uint32_t forge__wave_sums_index(uint32_t j, uint32_t lane) {
    uint32_t index = j;
#pragma unroll
    for (int m = 16, n = N; m > 0 && n > 1; m >>= 1, n /= 2)
        if (lane & (uint32_t)m) index += (uint32_t)n / 2;
    return index;
}

template <class P, int NT>
__global__ void __launch_bounds__(FORGE__MVR_THREADS)
forge__k_mvq_rows(const uint8_t *__restrict__ w, size_t row_bytes, uint32_t n_rows, uint32_t n_cols, const uint8_t *__restrict__ q8,
                  uint32_t nt, uint32_t sets, float *__restrict__ y, const float *__restrict__ bias) {
    constexpr int N = NT * FORGE__MVR_ROWS, KEPT = N >= 32 ? N / 32 : 1;
    __shared__ float part[FORGE__MVR_THREADS / 32][N];
    const uint32_t wave = warpSize, lane = threadIdx.x % wave, wid = threadIdx.x / wave, waves = blockDim.x / wave;
    const uint32_t set = wid % sets, group = wid / sets, groups = waves / sets;
    const uint32_t r0 = (blockIdx.x * groups + group) * FORGE__MVR_ROWS, n_pieces = n_cols / 32;
    const int8_t *qs = (const int8_t *)q8;
    const float4 *ds = (const float4 *)(q8 + FORGE__Q8_DS((size_t)nt * n_cols));
    float acc[N]; // token t, row k at t * ROWS + k
    size_t rows[FORGE__MVR_ROWS]; // rows past the end re-read the last; never stored
#pragma unroll
    for (int k = 0; k < FORGE__MVR_ROWS; k++) rows[k] = (size_t)min(r0 + k, n_rows - 1) * row_bytes;
#pragma unroll
    for (int i = 0; i < N; i++) acc[i] = 0.0f;
    for (uint32_t p = lane + wave * set; p < n_pieces; p += wave * sets) {
        typename P::unp u[FORGE__MVR_ROWS];
#pragma unroll
        for (int k = 0; k < FORGE__MVR_ROWS; k++) {
            typename P::raw raw;
            P::load(w + rows[k], p, n_cols, raw);
            P::unpack(raw, p, u[k]);
        }
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if ((uint32_t)t < nt) { // the same in every lane
                forge__xq xq;
                P::load_q(qs + (size_t)t * n_cols, ds + (size_t)t * n_pieces, p, xq);
#pragma unroll
                for (int k = 0; k < FORGE__MVR_ROWS; k++) acc[t * FORGE__MVR_ROWS + k] += P::dotu(u[k], p, xq);
            }
        }
    }
    forge__wave_sums<N>(acc, lane);
    if (N >= 32 ? lane < 32 : (lane & (32 / N - 1)) == 0 && lane < 32) // each total written once
#pragma unroll
        for (int j = 0; j < KEPT; j++) part[wid][forge__wave_sums_index<N>(j, lane)] = acc[j];
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < groups * N; i += blockDim.x) {
        const uint32_t g = i / N, j = i % N, t = j / FORGE__MVR_ROWS, row = (blockIdx.x * groups + g) * FORGE__MVR_ROWS + j % FORGE__MVR_ROWS;
        float total = part[g * sets][j];
        for (uint32_t k = 1; k < sets; k++) total += part[g * sets + k][j];
        if (t < nt && row < n_rows) y[(size_t)t * n_rows + row] = bias ? total + bias[row] : total;
    }
}

template <class P>
static void forge__mvq_rows_launch(const uint8_t *w, size_t row_bytes, uint32_t n_rows, uint32_t n_cols, const uint8_t *q8, uint32_t n_tokens,
                                   float *y, const float *bias, hipStream_t s) {
    const uint32_t wave = (uint32_t)forge__hip_wave_size(), sms = (uint32_t)forge__hip_sm_count(), n_pieces = n_cols / 32;
    // split a block's waves over the columns while the grid would not cover the machine twice and
    // every lane keeps at least two pieces; then make the blocks smaller while the grid still would not
    uint32_t waves = FORGE__MVR_THREADS / wave, sets = 1;
#define FORGE__MVR_BLOCKS(sets, waves) ((n_rows + FORGE__MVR_ROWS * ((waves) / (sets)) - 1) / (FORGE__MVR_ROWS * ((waves) / (sets))))
    while (sets < waves && FORGE__MVR_BLOCKS(sets, waves) < 2 * sms && n_pieces >= 4 * sets * wave) sets *= 2;
    while (waves > sets && FORGE__MVR_BLOCKS(sets, waves) < 2 * sms) waves /= 2;
    const uint32_t blocks = FORGE__MVR_BLOCKS(sets, waves), threads = waves * wave;
#undef FORGE__MVR_BLOCKS
    // n_tokens is at most FORGE__MVR_MAX (forge__mvq_rows_max)
    if (n_tokens <= 2) forge__k_mvq_rows<P, 2><<<blocks, threads, 0, s>>>(w, row_bytes, n_rows, n_cols, q8, n_tokens, sets, y, bias);
    else if (n_tokens <= 4) forge__k_mvq_rows<P, 4><<<blocks, threads, 0, s>>>(w, row_bytes, n_rows, n_cols, q8, n_tokens, sets, y, bias);
    else if (n_tokens <= 8) forge__k_mvq_rows<P, 8><<<blocks, threads, 0, s>>>(w, row_bytes, n_rows, n_cols, q8, n_tokens, sets, y, bias);
    else forge__k_mvq_rows<P, 16><<<blocks, threads, 0, s>>>(w, row_bytes, n_rows, n_cols, q8, n_tokens, sets, y, bias);
}

// The most tokens of a product forge__mvq_rows_launch takes for this matrix: 0 without an 8-bit
// decode reader for its type.
static uint32_t forge__mvq_rows_max(uint32_t type, uint32_t n_cols) {
    if (n_cols % 32 != 0) return 0;
    switch (forge__hip_kind(type, n_cols)) {
#define FORGE__MVR_OK(id, P) case id: return (id & 0xffffu) == FORGE_HIP_Q4_0 || (id & 0xffffu) == FORGE_HIP_Q8_0 ? FORGE__MVR_MAX : FORGE__MVR_MAX_K;
        FORGE__Q8_KINDS(FORGE__MVR_OK)
#undef FORGE__MVR_OK
    default: return 0;
    }
}

static void forge__mvq_rows(uint32_t type, const uint8_t *w, size_t row_bytes, uint32_t n_rows, uint32_t n_cols, const uint8_t *q8,
                            uint32_t n_tokens, float *y, const float *bias, hipStream_t s) {
    switch (forge__hip_kind(type, n_cols)) {
#define FORGE__MVR_GO(id, P) case id: forge__mvq_rows_launch<P>(w, row_bytes, n_rows, n_cols, q8, n_tokens, y, bias, s); break;
        FORGE__Q8_KINDS(FORGE__MVR_GO)
#undef FORGE__MVR_GO
    default: break;
    }
}

extern "C" {

size_t forge_hip_q8_bytes(uint32_t n) { return FORGE__Q8_DS(n) + (size_t)(n / 32) * 16; }

#define FORGE_HIP_FORM_Q8 1  // the forms of a product's input in its workspace (forge_hip_matmul_rows_q8_form)
#define FORGE_HIP_FORM_F16 2
#define FORGE_HIP_FORM_F16_ROWS 3
#define FORGE_HIP_FORM_F16_PROMPT 4 // a prompt's rows as f16 alone, in order (forge__k_matmul_staged's input)
// The f16 form of n activations (forge__k_mh_prep; FORGE_HIP_FORM_F16_ROWS for forge__k_mmh_rows,
// its quads reordered within each 256 columns, FORGE_HIP_FORM_F16 for the staged kernels): n halves,
// then from byte FORGE__MH_SUMS(n) an f32 sum a group of 32; FORGE__MH_BYTES(n) bytes in all.
#define FORGE__MH_SUMS(n) FORGE__Q8_DS((size_t)(n) * 2)
#define FORGE__MH_BYTES(n) (FORGE__MH_SUMS(n) + (size_t)(n) / 32 * sizeof(float))

// The workspace forge_hip_matmul_rows_q8 needs for n = tokens x columns: the 8-bit form (dp4a) or
// the f16 form with its group sums (forge__k_mmh_rows), whichever is larger.
size_t forge_hip_rows_bytes(uint32_t n) {
    const size_t q8 = forge_hip_q8_bytes(n), h = FORGE__MH_BYTES(n);
    return q8 > h ? q8 : h;
}

int forge_hip_q8_type(uint32_t type) {
    switch (type) {
#define FORGE__Q8_CASE(id, P) case id: return 1;
        FORGE__Q8_TYPES(FORGE__Q8_CASE)
#undef FORGE__Q8_CASE
    default: return 0;
    }
}

int forge_hip_q8_quantize(const float *x, uint32_t n, void *q8, void *stream, char *message, size_t message_bytes) {
    if (n % 32) return forge__hip_refuse(message, message_bytes, "q8 quantize: the width must be a multiple of 32");
    if (n == 0) return 0;
    forge__launch(forge__k_q8_quantize, dim3((n + 255) / 256), dim3(256), (hipStream_t)stream, x, n, (uint8_t *)q8);
    return forge__hip_launched("q8 quantize launch", message, message_bytes);
}

int forge_hip_rmsnorm_q8(const float *x, const float *w, float *y, uint32_t n, float eps, void *q8, void *stream, char *message,
                         size_t message_bytes) {
    if (n % 32 || n == 0) return forge__hip_refuse(message, message_bytes, "rmsnorm q8: the width must be a positive multiple of 32");
    const uint32_t threads = FORGE__NORM_Q8_THREADS, blocks = x == y ? 1 : (n + threads - 1) / threads;
    forge__launch(forge__k_rmsnorm_q8, dim3(blocks), dim3(threads), (hipStream_t)stream, x, w, y, n, eps, (uint8_t *)q8);
    return forge__hip_launched("rmsnorm q8 launch", message, message_bytes);
}

// y = W x (+ bias), or y += that when accumulate, for one token whose x is the quantized vector q8
// (forge_hip_q8_quantize). Types: those forge_hip_q8_type accepts. norm_eps >= 0: q8 is a vector
// forge_hip_matvec_norm_q8 prepared, and x is its RMS norm with that epsilon (negative: plain).
int forge_hip_matvec_q8(uint32_t type, const void *w, uint32_t n_rows, uint32_t n_cols, const void *q8, float *y, const float *bias,
                        int accumulate, float norm_eps, void *stream, char *message, size_t message_bytes) {
    size_t row_bytes;
    if (!forge_hip_q8_type(type)) return forge__hip_refuse(message, message_bytes, "matvec q8: the weight type has no 8-bit path");
    if (forge__hip_weights(type, n_cols, w, &row_bytes, "matvec q8", message, message_bytes)) return -1;
    if (n_rows == 0) return 0;
    switch (forge__hip_kind(type, n_cols)) {
#define FORGE__Q8_CASE(id, P)                                                                            \
    case id:                                                                                             \
        (norm_eps >= 0.0f ? forge__mvq_launch<P, 1> : forge__mvq_launch<P, 0>)((const uint8_t *)w, NULL, row_bytes, n_rows, n_cols,   \
                                                                               (const uint8_t *)q8, y, bias, accumulate, 0, NULL,     \
                                                                               norm_eps, (hipStream_t)stream);                        \
        break;
        FORGE__Q8_KINDS(FORGE__Q8_CASE)
#undef FORGE__Q8_CASE
    }
    return forge__hip_launched("matvec q8 launch", message, message_bytes);
}

// h = act(W_gate x) * (W_up x) for one token (act 0 silu, 1 gelu), both matrices of one type and
// shape, and h again as a quantized vector in q8_out (which must not be q8). n_rows a multiple of 32.
// norm_eps as forge_hip_matvec_q8's.
int forge_hip_glu_q8(uint32_t type, const void *w_gate, const void *w_up, uint32_t n_rows, uint32_t n_cols, const void *q8, float *h,
                     void *q8_out, int act, float norm_eps, void *stream, char *message, size_t message_bytes) {
    size_t row_bytes;
    if (!forge_hip_q8_type(type)) return forge__hip_refuse(message, message_bytes, "glu q8: the weight type has no 8-bit path");
    if (forge__hip_weights(type, n_cols, w_gate, &row_bytes, "glu q8", message, message_bytes) ||
        forge__hip_weights(type, n_cols, w_up, &row_bytes, "glu q8", message, message_bytes))
        return -1;
    if (n_rows % 32) return forge__hip_refuse(message, message_bytes, "glu q8: the rows must be a multiple of 32");
    if (n_rows == 0) return 0;
    switch (forge__hip_kind(type, n_cols)) {
#define FORGE__Q8_CASE(id, P)                                                                            \
    case id:                                                                                             \
        (norm_eps >= 0.0f ? forge__mvq_launch<P, 1> : forge__mvq_launch<P, 0>)((const uint8_t *)w_gate, (const uint8_t *)w_up, row_bytes, \
                                                                               n_rows, n_cols, (const uint8_t *)q8, h, NULL, 0, act,  \
                                                                               (uint8_t *)q8_out, norm_eps, (hipStream_t)stream);     \
        break;
        FORGE__Q8_KINDS(FORGE__Q8_CASE)
#undef FORGE__Q8_CASE
    }
    return forge__hip_launched("glu q8 launch", message, message_bytes);
}

}  // extern "C"

// forge_hip_matvec_norm_q8's column split for `blocks` groups of 32 rows: as forge__mvq_launch's,
// more waves until they cover the machine twice, here within the block (a block keeps its 32 rows),
// at most 4 sets and 1024 threads
static uint32_t forge__mvq_norm_split(uint32_t blocks) {
    const uint32_t wave = (uint32_t)forge__hip_wave_size();
    uint32_t split = 1;
    while (split < 4 && 2 * split * FORGE__MVQ_WAVES * wave <= 1024 && blocks * split < 2u * (uint32_t)forge__hip_sm_count()) split *= 2;
    return split;
}

template <class P>
static void forge__mvq_norm_launch(const uint8_t *w, size_t row_bytes, uint32_t n_rows, uint32_t n_cols, const uint8_t *q8, float *y,
                                   const float *bias, const float *norm_w, uint8_t *q8_out, hipStream_t s) {
    const uint32_t blocks = n_rows / 32, split = forge__mvq_norm_split(blocks);
    const dim3 threads(split * FORGE__MVQ_WAVES * (uint32_t)forge__hip_wave_size());
    switch (split) {
    case 1: forge__launch(forge__k_mvq_norm<P, 1>, dim3(blocks), threads, s, w, row_bytes, n_rows, n_cols, q8, y, bias, norm_w, q8_out); break;
    case 2: forge__launch(forge__k_mvq_norm<P, 2>, dim3(blocks), threads, s, w, row_bytes, n_rows, n_cols, q8, y, bias, norm_w, q8_out); break;
    default: forge__launch(forge__k_mvq_norm<P, 4>, dim3(blocks), threads, s, w, row_bytes, n_rows, n_cols, q8, y, bias, norm_w, q8_out); break;
    }
}

extern "C" {

// Whether forge_hip_matvec_norm_q8 is the faster way to run a product of this type and n_rows rows
// and the norm after it (against forge_hip_matvec_q8 accumulating, then forge_hip_rmsnorm_q8). Its
// blocks keep whole groups of 32 rows and split the columns over at most 1024 threads, so the
// launch is slower than the plain product's; a norm launch costs about 2-3 us of a recorded step.
// Since each product asks for its first weights before its grid wait (forge__mvq_block), the trade
// pays where the blocks fill the machine (Llama-3-8B's 4096 rows) and, with fewer blocks, where each
// lane reads at most one piece of a row, so the first weights are all it reads (the o-projections of
// Qwen2.5-1.5B, 1536 x 1536, and Qwen2.5-0.5B); their down projections (8960 and 4864 columns: three
// or two rounds of loads a lane in 48 or 28 blocks) keep the plain product and the norm launch (tests/PERF.md,
// H100: 1.5B +4% in all). Never for Q6_K of an odd count of super-blocks (rows alternately 4- and
// 2-aligned, whose product with the wider blocks loses more than the launch it saves).
int forge_hip_matvec_norm_q8_ok(uint32_t type, uint32_t n_rows, uint32_t n_cols) {
    const uint32_t blocks = n_rows / 32, split = forge__mvq_norm_split(blocks);
    const int fills = blocks * split >= 2u * (uint32_t)forge__hip_sm_count(), one_round = n_cols / 32 <= split * (uint32_t)forge__hip_wave_size();
    return forge_hip_q8_type(type) && forge__hip_kind(type, n_cols) != FORGE_HIP_Q6_K && n_rows % 32 == 0 && (fills || one_round);
}

// y += W x (+ bias) for one token, x the quantized vector q8 and y the residual stream (its bits as
// forge_hip_matvec_q8 with accumulate gives them where the columns split alike), then y prepared
// for the RMS norm with weights norm_w that reads it: q8_out holds y * norm_w rounded in groups of 32 and each group's sum of
// squares of y. A product given q8_out and norm_eps >= 0 computes W' (rmsnorm(y) * norm_w) from it:
// the norm's one factor 1 / sqrt(mean + eps) multiplies its row sums. n_rows a multiple of 32;
// q8_out must not be q8.
int forge_hip_matvec_norm_q8(uint32_t type, const void *w, uint32_t n_rows, uint32_t n_cols, const void *q8, float *y, const float *bias,
                             const float *norm_w, void *q8_out, void *stream, char *message, size_t message_bytes) {
    size_t row_bytes;
    if (!forge_hip_q8_type(type)) return forge__hip_refuse(message, message_bytes, "matvec norm q8: the weight type has no 8-bit path");
    if (forge__hip_weights(type, n_cols, w, &row_bytes, "matvec norm q8", message, message_bytes)) return -1;
    if (n_rows % 32) return forge__hip_refuse(message, message_bytes, "matvec norm q8: the rows must be a multiple of 32");
    if (!norm_w) return forge__hip_refuse(message, message_bytes, "matvec norm q8: no norm weights");
    if (n_rows == 0) return 0;
    switch (forge__hip_kind(type, n_cols)) {
#define FORGE__Q8_CASE(id, P)                                                                            \
    case id: forge__mvq_norm_launch<P>((const uint8_t *)w, row_bytes, n_rows, n_cols, (const uint8_t *)q8, y, bias, norm_w, \
                                       (uint8_t *)q8_out, (hipStream_t)stream); break;
        FORGE__Q8_KINDS(FORGE__Q8_CASE)
#undef FORGE__Q8_CASE
    }
    return forge__hip_launched("matvec norm q8 launch", message, message_bytes);
}

}  // extern "C"

template <class PA, class PB, int NI>
static void forge__mvq3_launch(forge__mv3 &m, uint32_t n_cols, const uint8_t *q8, hipStream_t s) {
    const uint32_t threads = FORGE__MVQ_WAVES * (uint32_t)forge__hip_wave_size(), rows = FORGE__MVQ_ROWS * FORGE__MVQ_WAVES;
    uint32_t split = 1, blocks = 0;
    for (;;) { // as forge__mvq_launch: split until the three matrices' blocks cover the machine twice
        blocks = 0;
        for (int i = 0; i < 3; i++) m.first[i] = blocks, blocks += (m.n_rows[i] + rows / split - 1) / (rows / split);
        if (split == 8 || blocks >= 2u * (uint32_t)forge__hip_sm_count()) break;
        split *= 2;
    }
    switch (split) {
    case 1: forge__launch(forge__k_mvq3<PA, PB, 1, NI>, dim3(blocks), dim3(threads), s, m, n_cols, q8); break;
    case 2: forge__launch(forge__k_mvq3<PA, PB, 2, NI>, dim3(blocks), dim3(threads), s, m, n_cols, q8); break;
    case 4: forge__launch(forge__k_mvq3<PA, PB, 4, NI>, dim3(blocks), dim3(threads), s, m, n_cols, q8); break;
    default: forge__launch(forge__k_mvq3<PA, PB, 8, NI>, dim3(blocks), dim3(threads), s, m, n_cols, q8); break;
    }
}

// The type pairs forge_hip_matvec3_q8 takes: the first two matrices of type_a, the third of type_b.
#define FORGE__Q8_PAIRS(X)                                                                               \
    X(FORGE_HIP_Q4_0, forge__pq_q4_0, FORGE_HIP_Q4_0, forge__pq_q4_0)                                    \
    X(FORGE_HIP_Q8_0, forge__pq_q8_0, FORGE_HIP_Q8_0, forge__pq_q8_0)                                    \
    X(FORGE_HIP_Q4_K, forge__pq_q4_k, FORGE_HIP_Q4_K, forge__pq_q4_k)                                    \
    X(FORGE_HIP_Q4_K, forge__pq_q4_k, FORGE_HIP_Q6_K, forge__pq_q6_k)                                    \
    X(FORGE_HIP_Q6_K, forge__pq_q6_k, FORGE_HIP_Q6_K, forge__pq_q6_k)
// and the instantiations that run them (forge__hip_kind)
#define FORGE__Q8_PAIR_KINDS(X)                                                                          \
    FORGE__Q8_PAIRS(X) X(FORGE_HIP_Q4_K, forge__pq_q4_k, FORGE__HIP_Q6_K_PACKED, forge__pq_q6_k_packed) \
    X(FORGE__HIP_Q6_K_PACKED, forge__pq_q6_k_packed, FORGE__HIP_Q6_K_PACKED, forge__pq_q6_k_packed)     \
    X(FORGE_HIP_Q4_K, forge__pq_q4_k, FORGE__HIP_Q6_K_PACKED4, forge__pq_q6_k_packed4)                  \
    X(FORGE__HIP_Q6_K_PACKED4, forge__pq_q6_k_packed4, FORGE__HIP_Q6_K_PACKED4, forge__pq_q6_k_packed4) \
    X(FORGE__HIP_Q4_0_PACKED, forge__pq_q4_0_packed, FORGE__HIP_Q4_0_PACKED, forge__pq_q4_0_packed)    \
    X(FORGE__HIP_Q8_0_PACKED, forge__pq_q8_0_packed, FORGE__HIP_Q8_0_PACKED, forge__pq_q8_0_packed)

extern "C" {

int forge_hip_matvec3_q8_ok(uint32_t type_a, uint32_t type_b) {
#define FORGE__PAIR_OK(ta, PA, tb, PB) if (type_a == ta && type_b == tb) return 1;
    FORGE__Q8_PAIRS(FORGE__PAIR_OK)
#undef FORGE__PAIR_OK
    return 0;
}

// y[i] = W[i] x (+ bias[i]) for i = 0, 1, 2 in one launch, x the quantized vector q8 of n_cols
// elements: W[0], W[1] of type_a, W[2] of type_b (a pair forge_hip_matvec3_q8_ok accepts); norm_eps
// as forge_hip_matvec_q8's.
int forge_hip_matvec3_q8(uint32_t type_a, uint32_t type_b, const void *const w[3], const uint32_t n_rows[3], uint32_t n_cols,
                         const void *q8, float *const y[3], const float *const bias[3], float norm_eps, void *stream, char *message,
                         size_t message_bytes) {
    forge__mv3 m;
    m.norm_eps = norm_eps;
    if (!forge_hip_matvec3_q8_ok(type_a, type_b)) return forge__hip_refuse(message, message_bytes, "matvec3 q8: unsupported type pair");
    for (int i = 0; i < 3; i++) {
        if (forge__hip_weights(i < 2 ? type_a : type_b, n_cols, w[i], &m.row_bytes[i], "matvec3 q8", message, message_bytes)) return -1;
        if (n_rows[i] == 0) return forge__hip_refuse(message, message_bytes, "matvec3 q8: a matrix without rows");
        m.w[i] = (const uint8_t *)w[i], m.n_rows[i] = n_rows[i], m.y[i] = y[i], m.bias[i] = bias[i];
    }
    const uint32_t kind_a = forge__hip_kind(type_a, n_cols), kind_b = forge__hip_kind(type_b, n_cols);
#define FORGE__PAIR_LAUNCH(ta, PA, tb, PB)                                                               \
    if (kind_a == ta && kind_b == tb)                                                                    \
        (norm_eps >= 0.0f ? forge__mvq3_launch<PA, PB, 1> : forge__mvq3_launch<PA, PB, 0>)(m, n_cols, (const uint8_t *)q8, (hipStream_t)stream);
    FORGE__Q8_PAIR_KINDS(FORGE__PAIR_LAUNCH)
#undef FORGE__PAIR_LAUNCH
    return forge__hip_launched("matvec3 q8 launch", message, message_bytes);
}

}  // extern "C"

// Prompt, the fallback (AMD, F32/BF16 weights, no sm_80 code): a shared-memory tiled product in
// f32. A block computes 64 rows x 64 tokens, 4 x 4 outputs per thread, walking the columns one
// 32-element unit at a time: 64 threads dequantize one unit of one row each into shared memory,
// every thread stages 8 of the 64 x 32 activations, then each thread does 32 x 16 multiply-adds.
#define FORGE__TILE_ROWS 64
#define FORGE__TILE_TOKENS 64
#define FORGE__TILE_THREADS 256

template <class W>
__global__ void __launch_bounds__(FORGE__TILE_THREADS)
forge__k_matmul_tiled(const uint8_t *__restrict__ w, size_t row_bytes, uint32_t n_rows, uint32_t n_cols,
                      const float *__restrict__ x, float *__restrict__ y, uint32_t n_tokens, const float *__restrict__ bias) {
    __shared__ float w_tile[FORGE__TILE_ROWS][33]; // +1 column: rows land in different banks
    __shared__ float x_tile[FORGE__TILE_TOKENS][33];
    const uint32_t tid = threadIdx.x, row0 = blockIdx.x * FORGE__TILE_ROWS, tok0 = blockIdx.y * FORGE__TILE_TOKENS;
    const uint32_t tx = tid % 16, ty = tid / 16; // rows tx + 16i, tokens ty + 16j
    const uint32_t n_units = forge__fast_units<W>(n_cols), n_steps = (n_cols + 31) / 32;
    float acc[4][4] = {{0}};
    for (uint32_t step = 0; step < n_steps; step++) {
        const uint32_t col0 = step * 32;
        if (tid < FORGE__TILE_ROWS) { // weights: one unit of one row, dequantized in registers, then stored
            const uint32_t r = row0 + tid;
            float v[32];
            if (r < n_rows && step < n_units) {
                W::unit(w + (size_t)r * row_bytes, step, n_cols, v);
            } else {
#pragma unroll
                for (int k = 0; k < 32; k++)
                    v[k] = (W::is_float && r < n_rows && col0 + k < n_cols) ? W::elem(w + (size_t)r * row_bytes, col0 + k) : 0.0f;
            }
#pragma unroll
            for (int k = 0; k < 32; k++) w_tile[tid][k] = v[k];
        }
        { // activations: token tid/4, 8 columns starting at 8 * (tid % 4)
            const uint32_t t = tok0 + tid / 4, c = 8 * (tid % 4);
            const float *src = x + (size_t)t * n_cols + col0 + c;
#pragma unroll
            for (int k = 0; k < 8; k++) x_tile[tid / 4][c + k] = (t < n_tokens && col0 + c + k < n_cols) ? src[k] : 0.0f;
        }
        __syncthreads();
#pragma unroll 8
        for (int k = 0; k < 32; k++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++) a[i] = w_tile[tx + 16 * i][k], b[i] = x_tile[ty + 16 * i][k];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint32_t r = row0 + tx + 16 * i;
        if (r >= n_rows) continue;
        const float add = bias ? bias[r] : 0.0f;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const uint32_t t = tok0 + ty + 16 * j;
            if (t < n_tokens) y[(size_t)t * n_rows + r] = acc[i][j] + add;
        }
    }
}

// Prompt on the matrix units (NVIDIA, compute capability 8.0 and later): the same product as the
// tiled kernel above, with f16 operands and f32 accumulation through mma.sync m16n8k16. A block
// computes (64 WM) rows x (32 WN) tokens with WM x WN warps of 64 x 32 each, walking the columns
// 32 at a time (one weight unit). Each step, every thread dequantizes half a unit (16 values) of
// one row and converts 4-float pieces of the activations, both to f16 in shared memory (two
// buffers: the global loads of step k+1 are issued before the products of step k, and their
// conversion and stores come after them, so one barrier per step suffices), then the warps read
// their fragments with ldmatrix. Weight values are computed in f32 as in the matvec and rounded
// once to f16; Q4_0 and Q8_0 values (an integer times an f16 scale) are computed in f16 arithmetic,
// which rounds the exact product once as well. Activations are rounded to f16 (values beyond
// 65504 would overflow: forge's matmul inputs are normalized or gated, far below). The error
// against a double reference is about 3e-4 of the output's norm (tests/test_kernels.c).
// Grid: x = token blocks, y = row blocks, so the blocks running together share weight rows (one
// read from memory) and re-read the small activations from L2. F32 and BF16 weights, F16 rows that
// are not a multiple of 32 wide, AMD targets and builds without sm_80 code keep the tiled kernel.
// Measured on an H100, 512 tokens (tests/PERF.md): Q4_K 146-162 TFLOP/s, Q6_K 117-125, Q4_0 and
// Q8_0 120-134, F16 152-188 on the Llama-3-8B shapes, 8x the tiled kernel. Copying the activations
// through a cp.async ring of 2 to 4 stages instead of registers measured 10-20% slower.
#if !defined(__HIP_PLATFORM_AMD__) && !defined(__HIPCC__) && !defined(FORGE_NO_MMA)
#define FORGE__MMA 1
#endif

#ifdef FORGE__MMA
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define FORGE__MMA_DEVICE 1 // the instructions below exist: sm_80 and later
#endif
#define FORGE__MMA_LD 40    // halves per shared row: 32 + 8 of padding, so ldmatrix's 8 rows hit 8 different bank groups

// f32 pair -> f16x2 bits (lo in the low half), round to nearest even
__device__ __forceinline__ uint32_t forge__h2_pack(float lo, float hi) {
    uint32_t r = 0;
#ifdef FORGE__MMA_DEVICE
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#else
    (void)lo, (void)hi;
#endif
    return r;
}

// (a - b) * c on f16x2 bits, each step rounded to nearest (exact for the small integers it is used on)
__device__ __forceinline__ uint32_t forge__h2_sub_mul(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t r = 0;
#ifdef FORGE__MMA_DEVICE
    asm("{ .reg .b32 t;\n sub.rn.f16x2 t, %1, %2;\n mul.rn.f16x2 %0, t, %3; }" : "=r"(r) : "r"(a), "r"(b), "r"(c));
#else
    (void)a, (void)b, (void)c;
#endif
    return r;
}

// Readers of half a unit: 16 values of row `row`, elements 32u + 16h .. 32u + 16h + 15, as 8 f16x2
// words in column order. load() issues the global loads, convert() does the arithmetic.

// Q4_0 / Q8_0 scale into both halves of a word
__device__ __forceinline__ uint32_t forge__h2_dup(uint32_t h16) { return (h16 & 0xffffu) * 0x10001u; }

// Q4_0: 16 qs bytes (element j: nibble h of byte j) and d; the f16 of 1024 + n comes from placing
// n under the exponent byte 0x64, minus 1032 gives n - 8 exactly.
// PACKED: the device layout (forge__q0_packed), the quants one 16-byte load.
template <int PACKED> struct forge__h_q4_0_t {
    struct raw { uint32_t q[4], d; };
    static __device__ __forceinline__ void load(const uint8_t *row, uint32_t u, uint32_t, uint32_t n_cols, raw &r) {
        if (PACKED) {
            const uint4 q = forge__ld128(row + n_cols / 16 + (size_t)u * 16);
            r.q[0] = q.x, r.q[1] = q.y, r.q[2] = q.z, r.q[3] = q.w;
            r.d = forge__ld16(row + 2 * (size_t)u);
        } else {
            const uint8_t *b = row + (size_t)u * 18;
            forge__ld_words<4>(b + 2, r.q);
            r.d = forge__ld16(b);
        }
    }
    static __device__ __forceinline__ void convert(const raw &r, uint32_t, uint32_t h, uint32_t out[8]) {
        const uint32_t d2 = forge__h2_dup(r.d);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t n = (h ? r.q[i] >> 4 : r.q[i]) & 0x0f0f0f0fu;
            out[2 * i] = forge__h2_sub_mul(__byte_perm(n, 0x64646464u, 0x4140u), 0x64086408u, d2);
            out[2 * i + 1] = forge__h2_sub_mul(__byte_perm(n, 0x64646464u, 0x4342u), 0x64086408u, d2);
        }
    }
};

// Q8_0: 16 int8 and d; q + 128 under the exponent byte 0x64 is 1152 + q, minus 1152 gives q.
template <int PACKED> struct forge__h_q8_0_t {
    struct raw { uint32_t q[4], d; };
    static __device__ __forceinline__ void load(const uint8_t *row, uint32_t u, uint32_t h, uint32_t n_cols, raw &r) {
        if (PACKED) {
            const uint4 q = forge__ld128(row + n_cols / 16 + (size_t)u * 32 + 16 * h);
            r.q[0] = q.x, r.q[1] = q.y, r.q[2] = q.z, r.q[3] = q.w;
            r.d = forge__ld16(row + 2 * (size_t)u);
        } else {
            const uint8_t *b = row + (size_t)u * 34;
            forge__ld_words<4>(b + 2 + 16 * h, r.q);
            r.d = forge__ld16(b);
        }
    }
    static __device__ __forceinline__ void convert(const raw &r, uint32_t, uint32_t, uint32_t out[8]) {
        const uint32_t d2 = forge__h2_dup(r.d);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t q = r.q[i] ^ 0x80808080u;
            out[2 * i] = forge__h2_sub_mul(__byte_perm(q, 0x64646464u, 0x4140u), 0x64806480u, d2);
            out[2 * i + 1] = forge__h2_sub_mul(__byte_perm(q, 0x64646464u, 0x4342u), 0x64806480u, d2);
        }
    }
};
typedef forge__h_q4_0_t<0> forge__h_q4_0;
typedef forge__h_q4_0_t<1> forge__h_q4_0_packed;
typedef forge__h_q8_0_t<0> forge__h_q8_0;
typedef forge__h_q8_0_t<1> forge__h_q8_0_packed;

// Q4_K: unit s = u % 8 is sub-block s: nibble s & 1 of the 32 qs bytes of chunk s / 2; half h takes
// bytes 16h.. of the chunk. The 16-byte head (d, dmin, scales) is one load. Values 8n per byte give
// the float 2 + n/8 (forge__b2f), so dl n - ml = 8 dl f - (16 dl + ml): one fma, one rounding.
struct forge__h_q4_k {
    struct raw { uint4 head, qs; };
    static __device__ __forceinline__ void load(const uint8_t *row, uint32_t u, uint32_t h, uint32_t, raw &r) {
        const uint8_t *b = row + (size_t)(u / 8) * 144;
        r.head = forge__ld128(b);
        r.qs = forge__ld128(b + 16 + 32 * ((u % 8) / 2) + 16 * h);
    }
    static __device__ __forceinline__ void convert(const raw &r, uint32_t u, uint32_t, uint32_t out[8]) {
        const uint32_t s = u % 8, c = s / 2;
        const float d = forge__f16(r.head.x & 0xffffu), dmin = forge__f16(r.head.x >> 16);
        const uint32_t A = r.head.y, B = r.head.z, C = r.head.w; // scale bytes 0..3, 4..7, 8..11
        uint32_t sc, mn;                                          // bytes 0, 1: sub-blocks 2c, 2c+1
        if (c < 2) {
            sc = (A >> (16 * c)) & 0x3f3fu, mn = (B >> (16 * c)) & 0x3f3fu;
        } else {
            const uint32_t sh = 16 * (c - 2), cl = C >> sh;
            sc = (cl & 0x0f0fu) | ((A >> sh >> 2) & 0x3030u);
            mn = ((cl >> 4) & 0x0f0fu) | ((B >> sh >> 2) & 0x3030u);
        }
        if (s & 1) sc >>= 8, mn >>= 8;
        const float dl = d * forge__u2f(sc & 0xffu), ml = dmin * forge__u2f(mn & 0xffu);
        const float a = 8.0f * dl, b = 16.0f * dl + ml;
        const uint32_t q[4] = {r.qs.x, r.qs.y, r.qs.z, r.qs.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t t = (s & 1) ? (q[i] >> 1) & 0x78787878u : (q[i] << 3) & 0x78787878u; // 8n per byte
            out[2 * i] = forge__h2_pack(a * forge__b2f<0>(t) - b, a * forge__b2f<1>(t) - b);
            out[2 * i + 1] = forge__h2_pack(a * forge__b2f<2>(t) - b, a * forge__b2f<3>(t) - b);
        }
    }
};

// Q6_K: unit s = u % 8 is half s/4, quarter k = s%4 (as forge__w_q6_k): ql bytes 64 half + 32 (k&1)
// + 16h.. at nibble 4 (k>>1), qh bytes 128 + 32 half + 16h.. at bits 2k, scale 8 half + 2k + h; in
// the device layout (>>weights) the ql bytes are the (k&1) 8 of pieces 4 half + 2h and + 1. 6-bit v
// placed as 2v gives the float 2 + v/32: dl (v - 32) = 32 dl f - 96 dl.
template <int PACKED> struct forge__h_q6_k_t { // PACKED: forge__q6_k_layout's answer, a launch of its own
    struct raw { uint32_t ql[4], qh[4], sd; };
    static __device__ __forceinline__ void load(const uint8_t *row, uint32_t u, uint32_t h, uint32_t n_cols, raw &r) {
        const uint32_t j = u / 8, s = u % 8, half = s / 4, k = s % 4;
        const uint32_t nb = n_cols / 256, o = forge__q6_k_shift<PACKED>(row, nb);
        const uint8_t *ql = row + o + 128 * j + 64 * half + 32 * h + 8 * (k & 1), *qh = row + o + 128 * nb + 64 * j + 32 * half + 16 * h;
        if (PACKED == 16) {
            const uint2 a = *(const uint2 *)ql, b = *(const uint2 *)(ql + 16);
            const uint4 q = forge__ld128(qh);
            r.ql[0] = a.x, r.ql[1] = a.y, r.ql[2] = b.x, r.ql[3] = b.y;
            r.qh[0] = q.x, r.qh[1] = q.y, r.qh[2] = q.z, r.qh[3] = q.w;
        } else {
            forge__ld_u32<2>(ql, r.ql);
            forge__ld_u32<2>(ql + 16, r.ql + 2);
            forge__ld_u32<4>(qh, r.qh);
        }
        r.sd = (uint32_t)row[o + 192 * nb + 16 * j + 8 * half + 2 * k + h] | (forge__ld16(forge__q6_k_d(row, nb, o) + 2 * j) << 16);
    }
    static __device__ __forceinline__ void convert(const raw &r, uint32_t u, uint32_t, uint32_t out[8]) {
        const uint32_t k = u % 4, nibble_shift = 4 * (k >> 1), high_shift = 2 * k;
        const float dl = forge__f16(r.sd >> 16) * (float)(int8_t)(uint8_t)(r.sd & 0xffu);
        const float a = 32.0f * dl, b = 96.0f * dl;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t v = ((r.ql[i] >> nibble_shift) & 0x0f0f0f0fu) | (((r.qh[i] >> high_shift) & 0x03030303u) << 4);
            const uint32_t t = v << 1; // 2v per byte, below 128
            out[2 * i] = forge__h2_pack(a * forge__b2f<0>(t) - b, a * forge__b2f<1>(t) - b);
            out[2 * i + 1] = forge__h2_pack(a * forge__b2f<2>(t) - b, a * forge__b2f<3>(t) - b);
        }
    }
};
typedef forge__h_q6_k_t<2> forge__h_q6_k;
typedef forge__h_q6_k_t<16> forge__h_q6_k_packed;
typedef forge__h_q6_k_t<4> forge__h_q6_k_packed4;

// F16: the 32 bytes themselves (rows are 64-byte multiples here, so 16-aligned).
struct forge__h_f16 {
    struct raw { uint4 a, b; };
    static __device__ __forceinline__ void load(const uint8_t *row, uint32_t u, uint32_t h, uint32_t, raw &r) {
        const uint8_t *p = row + (size_t)u * 64 + 32 * h;
        r.a = forge__ld128(p), r.b = forge__ld128(p + 16);
    }
    static __device__ __forceinline__ void convert(const raw &r, uint32_t, uint32_t, uint32_t out[8]) {
        out[0] = r.a.x, out[1] = r.a.y, out[2] = r.a.z, out[3] = r.a.w;
        out[4] = r.b.x, out[5] = r.b.y, out[6] = r.b.z, out[7] = r.b.w;
    }
};

// Every other quantized type through its unit reader (>>weights): loads and arithmetic together at
// conversion time, both halves computed and one kept by selects (no run-time register indexing).
template <class W> struct forge__h_unit {
    struct raw { const uint8_t *row; uint32_t n_cols; };
    static __device__ __forceinline__ void load(const uint8_t *row, uint32_t, uint32_t, uint32_t n_cols, raw &r) { r.row = row, r.n_cols = n_cols; }
    static __device__ __forceinline__ void convert(const raw &r, uint32_t u, uint32_t h, uint32_t out[8]) {
        float v[32];
        W::unit(r.row, u, r.n_cols, v);
#pragma unroll
        for (int i = 0; i < 8; i++) out[i] = h ? forge__h2_pack(v[16 + 2 * i], v[17 + 2 * i]) : forge__h2_pack(v[2 * i], v[2 * i + 1]);
    }
};

// ldmatrix x4: four 8 x 8 f16 matrices, lanes 8i..8i+7 give the row addresses of matrix i
__device__ __forceinline__ void forge__ldsm4(uint32_t out[4], uint32_t shared_address) {
#ifdef FORGE__MMA_DEVICE
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(out[0]), "=r"(out[1]), "=r"(out[2]), "=r"(out[3])
                 : "r"(shared_address));
#else
    out[0] = out[1] = out[2] = out[3] = shared_address;
#endif
}

// c (16 x 8, f32) += a (16 x 16, f16, row-major) b (16 x 8, f16, column-major)
__device__ __forceinline__ void forge__mma16816(float c[4], const uint32_t a[4], const uint32_t b[2]) {
#ifdef FORGE__MMA_DEVICE
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    (void)c, (void)a, (void)b;
#endif
}

// H: a half-unit reader above; WM x WN warps (mma.sync is NVIDIA's, whose warps are 32 lanes).
template <class H, int WM, int WN>
__global__ void __launch_bounds__(32 * WM * WN, WM * WN == 8 ? 2 : 1) // the large tile: two blocks a multiprocessor, 128 registers
forge__k_matmul_mma(const uint8_t *__restrict__ w, size_t row_bytes, uint32_t n_rows, uint32_t n_cols,
                    const float *__restrict__ x, float *__restrict__ y, uint32_t n_tokens, const float *__restrict__ bias,
                    float *__restrict__ partial, uint32_t split_steps) {
#ifdef FORGE__MMA_DEVICE
    constexpr int BM = 64 * WM, BN = 32 * WN, THREADS = 32 * WM * WN, LD = FORGE__MMA_LD;
    constexpr int TASKS = 2 * BM / THREADS; // half-units of weights per thread per step (4 / WN)
    constexpr int PIECES = 8 * BN / THREADS; // float4 pieces of activations per thread per step (8 / WM)
    __shared__ __align__(16) uint16_t w_tile[2][BM * LD];
    __shared__ __align__(16) uint16_t x_tile[2][BN * LD];
    const uint32_t tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const uint32_t warp_m = warp % WM, warp_n = warp / WM;
    const uint32_t tok0 = blockIdx.x * BN, row0 = blockIdx.y * BM, n_steps = n_cols / 32;
    // split over the columns (blockIdx.z, split_steps steps each): the block's sums go to its part of partial
    const uint32_t s0 = partial ? blockIdx.z * split_steps : 0, s1 = partial ? min(s0 + split_steps, n_steps) : n_steps;

    const uint8_t *rows[TASKS]; // out-of-range rows and tokens read the last valid one; never stored
#pragma unroll
    for (int i = 0; i < TASKS; i++) rows[i] = w + (size_t)min(row0 + (tid + i * THREADS) / 2, n_rows - 1) * row_bytes;
    const float *xs[PIECES];
#pragma unroll
    for (int i = 0; i < PIECES; i++) {
        const uint32_t piece = tid + i * THREADS;
        xs[i] = x + (size_t)min(tok0 + piece / 8, n_tokens - 1) * n_cols + 4 * (piece % 8);
    }
    typename H::raw raw[TASKS];
    float4 xv[PIECES];
    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int k = 0; k < 4; k++) acc[i][j][k] = 0.0f;

    // step s0: load and store; then each step loads the next, multiplies, stores the next
#pragma unroll
    for (int i = 0; i < TASKS; i++) H::load(rows[i], s0, (tid + i * THREADS) % 2, n_cols, raw[i]);
#pragma unroll
    for (int i = 0; i < PIECES; i++) xv[i] = *(const float4 *)(xs[i] + 32 * s0);
    for (uint32_t step = s0;; step++) {
        const uint32_t buf = (step - s0) & 1;
        { // store step `step` (its loads are in raw / xv) into buffer buf
#pragma unroll
            for (int i = 0; i < TASKS; i++) {
                const uint32_t task = tid + i * THREADS, h = task % 2;
                uint32_t v[8];
                H::convert(raw[i], step, h, v);
                uint4 *dst = (uint4 *)&w_tile[buf][(task / 2) * LD + 16 * h];
                dst[0] = make_uint4(v[0], v[1], v[2], v[3]);
                dst[1] = make_uint4(v[4], v[5], v[6], v[7]);
            }
#pragma unroll
            for (int i = 0; i < PIECES; i++) {
                const uint32_t piece = tid + i * THREADS;
                *(uint2 *)&x_tile[buf][(piece / 8) * LD + 4 * (piece % 8)] =
                    make_uint2(forge__h2_pack(xv[i].x, xv[i].y), forge__h2_pack(xv[i].z, xv[i].w));
            }
        }
        __syncthreads(); // buffer buf is complete; the other one is free (its products were done before the last barrier)
        if (step + 1 < s1) {
#pragma unroll
            for (int i = 0; i < TASKS; i++) H::load(rows[i], step + 1, (tid + i * THREADS) % 2, n_cols, raw[i]);
#pragma unroll
            for (int i = 0; i < PIECES; i++) xv[i] = *(const float4 *)(xs[i] + 32 * (step + 1));
        }
        const uint32_t w_base = (uint32_t)__cvta_generic_to_shared(&w_tile[buf][0]);
        const uint32_t x_base = (uint32_t)__cvta_generic_to_shared(&x_tile[buf][0]);
#pragma unroll
        for (int ks = 0; ks < 2; ks++) {
            uint32_t a[4][4], b[4][2];
#pragma unroll
            for (int mt = 0; mt < 4; mt++) // rows 16mt + lane%16, columns 8 (lane/16)
                forge__ldsm4(a[mt], w_base + 2 * ((warp_m * 64 + mt * 16 + (lane & 15)) * LD + ks * 16 + (lane >> 4) * 8));
#pragma unroll
            for (int np = 0; np < 2; np++) { // tokens 16np + lane%8 + 8 (lane/16), columns 8 ((lane/8)%2)
                uint32_t t[4];
                forge__ldsm4(t, x_base + 2 * ((warp_n * 32 + np * 16 + (lane & 7) + ((lane >> 4) << 3)) * LD + ks * 16 +
                                              ((lane >> 3) & 1) * 8));
                b[2 * np][0] = t[0], b[2 * np][1] = t[1], b[2 * np + 1][0] = t[2], b[2 * np + 1][1] = t[3];
            }
#pragma unroll
            for (int mt = 0; mt < 4; mt++)
#pragma unroll
                for (int nt = 0; nt < 4; nt++) forge__mma16816(acc[mt][nt], a[mt], b[nt]);
        }
        if (step + 1 >= s1) break;
    }
    // accumulator element k of tile (mt, nt): row 16mt + lane/4 + 8 (k/2), token 8nt + 2 (lane%4) + k%2
#pragma unroll
    for (int mt = 0; mt < 4; mt++)
#pragma unroll
        for (int k2 = 0; k2 < 2; k2++) {
            const uint32_t r = row0 + warp_m * 64 + mt * 16 + lane / 4 + 8 * k2;
            if (r >= n_rows) continue;
            const float add = bias ? bias[r] : 0.0f;
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
#pragma unroll
                for (int k1 = 0; k1 < 2; k1++) {
                    const uint32_t t = tok0 + warp_n * 32 + nt * 8 + 2 * (lane % 4) + k1;
                    if (t >= n_tokens) continue;
                    if (partial) partial[((size_t)blockIdx.z * n_tokens + t) * n_rows + r] = acc[mt][nt][2 * k2 + k1];
                    else y[(size_t)t * n_rows + r] = acc[mt][nt][2 * k2 + k1] + add;
                }
        }
#else
    (void)w, (void)row_bytes, (void)n_rows, (void)n_cols, (void)x, (void)y, (void)n_tokens, (void)bias, (void)partial, (void)split_steps;
#endif
}

static unsigned forge__hip_blocks(size_t n, unsigned threads);

// y = the sum of a split product's parts, in split order (the same sums on every run), plus the bias.
__global__ void forge__k_split_sum(const float *__restrict__ partial, uint32_t n_split, size_t n, uint32_t n_rows,
                                   const float *__restrict__ bias, float *__restrict__ y) {
    FORGE__GRID_ENTER();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float sum = partial[i];
        for (uint32_t z = 1; z < n_split; z++) sum += partial[z * n + i];
        y[i] = bias ? sum + bias[i % n_rows] : sum;
    }
}

// Host side of the matrix-unit path: picks the tile and launches; 0 when the tiled kernel must run
// instead (the kernels were built without sm_80 code). Tiles: 32 WN tokens by the token count; then
// 128 rows, or 64 when 128 would leave multiprocessors idle; 64 tokens instead of 128 when 128 x 128
// tiles give fewer than two blocks a multiprocessor (4096 rows x 512 tokens: 156 -> 162 TFLOP/s).
// A grid of few warps for the device (a few tokens: a step of several sequences; blocks of one or two
// warps then) leaves it mostly idle while each block walks every column; with room for the parts in
// `partial` (floats), the columns are split among up to FORGE__MMA_MAX_SPLIT blocks, each part at
// least 4 steps of 32 columns, until the grid has about 8 warps a multiprocessor, and the parts are
// summed.
// Whether the kernels hold sm_80 code for the current device (the matrix-unit instructions), asked
// once a device (forge__device_once).
static bool forge__mma_ask(int) {
    cudaFuncAttributes fa;
    return cudaFuncGetAttributes(&fa, forge__k_grid_probe) == cudaSuccess && fa.ptxVersion >= 80;
}
static int forge__mma_available(void) {
    static std::atomic<int> known[64];
    return forge__device_once(known, forge__mma_ask);
}

template <class H>
static int forge__mma_launch(const uint8_t *w, size_t row_bytes, uint32_t n_rows, uint32_t n_cols, const float *x, float *y,
                             uint32_t n_tokens, const float *bias, hipStream_t s, float *partial = NULL, size_t partial_floats = 0) {
    if (!forge__mma_available()) return 0;
    const int n_sm = forge__hip_sm_count();
    uint32_t wn = n_tokens <= 32 ? 1 : n_tokens <= 64 ? 2 : 4;
    const uint32_t wm = (uint64_t)((n_rows + 127) / 128) * ((n_tokens + 32 * wn - 1) / (32 * wn)) >= (uint64_t)n_sm ? 2 : 1;
    if (wm == 2 && wn == 4 && (uint64_t)((n_rows + 127) / 128) * ((n_tokens + 127) / 128) < 2 * (uint64_t)n_sm) wn = 2;
    const uint32_t bn = 32 * wn, n_steps = n_cols / 32;
    dim3 grid((n_tokens + bn - 1) / bn, (n_rows + 64 * wm - 1) / (64 * wm));
    uint32_t split = 1, split_steps = n_steps;
    const uint64_t blocks = (uint64_t)grid.x * grid.y, part = (uint64_t)n_tokens * n_rows;
    const uint64_t warps = blocks * wm * wn, want = 8 * (uint64_t)n_sm;
    if (partial && warps < want && n_steps >= 8) {
        split = (uint32_t)((want + warps - 1) / warps);
        split = split > FORGE__MMA_MAX_SPLIT ? FORGE__MMA_MAX_SPLIT : split;
        split = split > n_steps / 4 ? n_steps / 4 : split;
        while (split > 1 && ((uint64_t)split * part > partial_floats || (uint64_t)split * n_tokens > FORGE__MMA_SPLIT_ROWS)) split--;
        split_steps = (n_steps + split - 1) / split;
        split = (n_steps + split_steps - 1) / split_steps; // no empty part
    }
    float *parts = split > 1 ? partial : NULL;
    grid.z = split;
    switch (wm * 10 + wn) {
#define FORGE__MMA_TILE(WM, WN)                                                                           \
    case WM * 10 + WN:                                                                                    \
        forge__k_matmul_mma<H, WM, WN><<<grid, 32 * WM * WN, 0, s>>>(w, row_bytes, n_rows, n_cols, x, y, n_tokens, bias, parts, split_steps); \
        break;
        FORGE__MMA_TILE(2, 4) FORGE__MMA_TILE(1, 4) FORGE__MMA_TILE(2, 2) FORGE__MMA_TILE(1, 2) FORGE__MMA_TILE(2, 1)
        FORGE__MMA_TILE(1, 1)
#undef FORGE__MMA_TILE
    }
    if (parts) forge__launch(forge__k_split_sum, dim3(forge__hip_blocks(part, 256)), dim3(256), s, (const float *)parts, split, (size_t)part, n_rows, bias, y);
    return 1;
}

// The weight types the matrix-unit path reads: the common ones with their own readers, the rest
// through their unit readers. F32 and BF16 stay on the tiled kernel (f32 precision, bf16 range).
#define FORGE__MMA_TYPES(X)                                                                              \
    X(FORGE_HIP_F16, forge__h_f16) X(FORGE_HIP_Q4_0, forge__h_q4_0) X(FORGE_HIP_Q8_0, forge__h_q8_0)      \
    X(FORGE_HIP_Q4_K, forge__h_q4_k) X(FORGE_HIP_Q6_K, forge__h_q6_k)                                     \
    X(FORGE__HIP_Q6_K_PACKED, forge__h_q6_k_packed) X(FORGE__HIP_Q6_K_PACKED4, forge__h_q6_k_packed4)    \
    X(FORGE__HIP_Q4_0_PACKED, forge__h_q4_0_packed) X(FORGE__HIP_Q8_0_PACKED, forge__h_q8_0_packed)     \
    X(FORGE_HIP_Q4_1, forge__h_unit<forge__w_q4_1>) X(FORGE_HIP_Q5_0, forge__h_unit<forge__w_q5_0>)        \
    X(FORGE_HIP_Q5_1, forge__h_unit<forge__w_q5_1>) X(FORGE_HIP_Q2_K, forge__h_unit<forge__w_q2_k>)        \
    X(FORGE_HIP_Q3_K, forge__h_unit<forge__w_q3_k>) X(FORGE_HIP_Q5_K, forge__h_unit<forge__w_q5_k>)        \
    X(FORGE_HIP_IQ4_NL, forge__h_unit<forge__w_iq4_nl>) X(FORGE_HIP_IQ4_XS, forge__h_unit<forge__w_iq4_xs>)

static int forge__mma_matmul(uint32_t type, const uint8_t *w, size_t row_bytes, uint32_t n_rows, uint32_t n_cols, const float *x,
                             float *y, uint32_t n_tokens, const float *bias, hipStream_t s, float *partial = NULL, size_t partial_floats = 0) {
    if (n_cols < 32 || n_cols % 32 != 0) return 0;
    switch (forge__hip_kind(type, n_cols)) {
#define FORGE__MMA_CASE(id, H) \
    case id: return forge__mma_launch<H>(w, row_bytes, n_rows, n_cols, x, y, n_tokens, bias, s, partial, partial_floats);
        FORGE__MMA_TYPES(FORGE__MMA_CASE)
#undef FORGE__MMA_CASE
    default: return 0;
    }
}

// ---- products of a few tokens on the f16 matrix units, Q4_K weights kept exact (steps of several sequences) ----
//
// forge__k_mvq_rows multiplies each piece of weights with every token through dp4a and spends about
// twenty instructions a row, token and 32 columns of Q4_K: its time grows with the tokens. Here a warp
// takes 32 rows of a Q4_K matrix and up to 16 (or 32) tokens, and the scaling that costs the 8-bit
// paths a few float instructions for every row, token and group of 32 columns goes into the operands:
// a weight enters the f16 matrix unit as s q (its group's 6-bit scale times the 4-bit value, an
// integer of at most 945, so exact in f16), the activations enter as f16 (not rounded to 8 bits), the
// f32 sums run over a whole piece of a super-block, and only then does a row's d multiply them: one
// multiply-add a row and token per piece instead of four a group. The minimums, dmin m_g times the
// sum of group g's activations, are a product of (rows x 8 groups) by (8 groups x tokens) for each
// super-block: one tf32 mma of m16n8k8 a tile, with each group sum split into two tf32 parts, so the
// term is as exact as f32. Error against the same product on f16-rounded activations about 1e-7 of
// the output's norm (f32 sums in another order); against f32 activations about 2e-4, where the 8-bit
// paths measure 4e-3 to 1e-2 (test_kernels). Measured on an H100 (tests/PERF.md "Steps of several sequences on the f16
// matrix units"): 14336 x 4096 of 16 tokens 26 us, 1.85x the integer-unit kernel it replaces.
//
// Activations: forge__k_mh_prep writes the tokens as f16 rows with each quad of columns stored in the
// order 0, 2, 1, 3, then from byte FORGE__MH_SUMS(n) the f32 sum of each group of 32 of the f16
// values. The order matches the weights: a lane's 4-byte word of Q4_K holds columns 4c..4c+3 (low
// nibbles, group 2p) and 32 + 4c.. (high nibbles, group 2p + 1); masking nibbles 0 and 2 of it under
// the f16 exponent of 1024 gives columns (4c, 4c + 2), nibbles 1 and 3 columns (4c + 1, 4c + 3). A k16
// step of m16n8k16 takes the first pair as its k (2c, 2c + 1) and the second as (2c + 8, 2c + 9), and
// the B fragment of a token is then one 8-byte load of the reordered quad. That plain order is what
// the staged kernels read (FORGE_HIP_FORM_F16); forge__k_mmh_rows reads the same quads placed as
// forge__mh_rows_pos says (FORGE_HIP_FORM_F16_ROWS), for its 16-byte loads.
//
// Fragments (a lane: g = lane / 4, c = lane % 4): m16n8k16 as forge__mma16816; m16n8k8 tf32: A a0 (row
// g, k c), a1 (row g + 8, k c), a2 (row g, k c + 4), a3 (row g + 8, k c + 4); B b0 (k c, token g), b1
// (k c + 4, token g); C as m16n8k16's.
#define FORGE__MH_ROWS 32   // rows a block (two 16-row tiles a warp)
#define FORGE__MH_MAX_WAVES 8
#define FORGE__MH_TOKENS 32 // tokens a launch, at most (two or four 8-token tiles)
#define FORGE__MH_MIN 8     // forge_hip_matmul_rows_q8 takes this path from this many tokens of Q4_K (dp4a below)
#define FORGE__MH_STAGED_FROM 16   // more tokens of Q4_K than this take forge__k_mmh4_rows (activations shared by a block)
#define FORGE__MH_STAGED_TOKENS 64 // ... up to this many
#define FORGE__MH_STAGED_ROWS 4096 // ... of a matrix of this many rows or more

// Where forge__k_mmh_rows reads quad k (columns 4k .. 4k + 3) of a super-block's 64: a lane of it
// loads 16 bytes of each of its rows' 64-byte halves j of the quants (units 2j, 2j + 1: lane c the
// bytes 16c .. 16c + 15, unit 2j + c / 2, half c % 2) and takes word w of them, low nibbles (group
// G = 0) then high (G = 1), as the k16 steps (j, w, G); lane c's quad of step (j, w, G) sits beside its
// quad of (j, w, 1 - G), so one 16-byte load gives a token's two steps, and the four lanes' loads are
// 64 consecutive bytes: quad k of unit u (k / 16), group G, half h, word w at (4 (u / 2) + w) 8 +
// 2 (2 (u % 2) + h) + G.
__host__ __device__ __forceinline__ uint32_t forge__mh_rows_pos(uint32_t k) {
    const uint32_t u = k / 16, G = (k / 8) % 2, h = (k / 4) % 2, w = k % 4;
    return ((u / 2) * 4 + w) * 8 + 2 * (2 * (u % 2) + h) + G;
}

// Quad q (columns 4q .. 4q + 3 of the n values) of the f16 form at out: its halves, and, from the
// lane of a group's first quad, the group's sum. Called by whole warps, a group's 8 quads on 8
// consecutive lanes (the sum is exchanged among them); `in` false: a lane past the end (v zeros),
// storing nothing. rows: the order forge__k_mmh_rows reads (forge__mh_rows_pos within each 64
// quads; the rows a multiple of 256 values), else quad q at q.
__device__ __forceinline__ void forge__mh_quad(float4 v, bool in, size_t q, size_t n, uint8_t *__restrict__ out, bool rows) {
    const uint32_t h02 = forge__h2_pack(v.x, v.z), h13 = forge__h2_pack(v.y, v.w);
    float s = (forge__f16(h02 & 0xffffu) + forge__f16(h13 & 0xffffu)) + (forge__f16(h02 >> 16) + forge__f16(h13 >> 16));
    s += FORGE_SHFL_XOR(s, 1);
    s += FORGE_SHFL_XOR(s, 2);
    s += FORGE_SHFL_XOR(s, 4);
    if (in) {
        const size_t at = rows ? (q & ~(size_t)63) + forge__mh_rows_pos((uint32_t)q & 63u) : q;
        *(uint2 *)(out + 8 * at) = make_uint2(h02, h13);
        if (q % 8 == 0) ((float *)(out + FORGE__MH_SUMS(n)))[q / 8] = s;
    }
}

__global__ void forge__k_mh_prep(const float *__restrict__ x, uint32_t n, uint8_t *__restrict__ out, uint32_t rows) {
    FORGE__GRID_ENTER();
    const size_t q = (size_t)blockIdx.x * blockDim.x + threadIdx.x; // a quad; 8 lanes a group
    const bool in = q * 4 < n;
    forge__mh_quad(in ? *(const float4 *)(x + 4 * q) : make_float4(0.0f, 0.0f, 0.0f, 0.0f), in, q, n, out, rows != 0);
}

// a b + c on f16x2 bits, one rounding (exact for the small integers it is used on)
__device__ __forceinline__ uint32_t forge__h2_fma(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t r = 0;
#ifdef FORGE__MMA_DEVICE
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
#else
    (void)a, (void)b, (void)c;
#endif
    return r;
}

// c (16 x 8, f32) += a (16 x 8, tf32) b (8 x 8, tf32)
__device__ __forceinline__ void forge__mma_tf32(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
#ifdef FORGE__MMA_DEVICE
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    (void)c, (void)a, (void)b0, (void)b1;
#endif
}

// f32 -> tf32 bits, round to nearest (ties away)
__device__ __forceinline__ uint32_t forge__tf32(float f) {
    uint32_t r = 0;
#ifdef FORGE__MMA_DEVICE
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(f));
#else
    (void)f;
#endif
    return r;
}

// Q4_K on the f16 matrix units (forge__k_mmh_rows, forge__k_mmh4_rows). A row's scales s of groups
// 2 unit and 2 unit + 1 of its super-block (head: d, dmin, the 12 bytes of scales and minimums) as
// f16x2 (s, s), and (-1024 s, -1024 s) for forge__q4k_sq.
__device__ __forceinline__ void forge__q4k_scales(const uint4 &head, uint32_t unit, uint32_t s2[2], uint32_t n2[2]) {
    const uint32_t s16 = 16 * (unit & 1), A = head.y >> s16, Cw = head.w >> s16;
    const uint32_t sv = unit >= 2 ? (Cw & 0x0f0fu) | ((A >> 2) & 0x3030u) : A & 0x3f3fu;
#pragma unroll
    for (int G = 0; G < 2; G++) {
        const float sf = forge__u2f((sv >> (8 * G)) & 0xffu);
        s2[G] = forge__h2_pack(sf, sf), n2[G] = forge__h2_pack(-1024.0f * sf, -1024.0f * sf);
    }
}
// A lane's word of 4-bit values, shifted down to its group's nibbles, as s q in f16 (exact): lo the
// k (2c, 2c + 1) of a k16 step, hi its (2c + 8, 2c + 9)
__device__ __forceinline__ void forge__q4k_sq(uint32_t v, uint32_t s2, uint32_t n2, uint32_t &lo, uint32_t &hi) {
    lo = forge__h2_fma((v & 0x000f000fu) | 0x64006400u, s2, n2);
    hi = forge__h2_fma(((v >> 8) & 0x000f000fu) | 0x64006400u, s2, n2);
}
// A row's minimums m of groups c and c + 4 of its super-block as tf32 bits (whole numbers), 0 where
// the group is not in the piece
__device__ __forceinline__ void forge__q4k_mins(const uint4 &head, uint32_t c, bool in0, bool in1, uint32_t am[2]) {
    const uint32_t z = head.z >> (8 * c), x = head.w >> (8 * c);
    const uint32_t m0 = z & 63u, m1 = ((x >> 4) & 15u) | (((z >> 6) & 3u) << 4);
    am[0] = in0 ? __float_as_uint(forge__u2f(m0)) : 0u, am[1] = in1 ? __float_as_uint(forge__u2f(m1)) : 0u;
}
// f32 s as two tf32 parts whose sum is s to f32's precision
__device__ __forceinline__ void forge__tf32_split(float s, uint32_t &hi, uint32_t &lo) {
    hi = forge__tf32(s), lo = forge__tf32(s - __uint_as_float(hi));
}

// Up to FORGE__MH_GROUP products of one input (q, k and v; gate and up) in one launch of
// forge__k_mmh_rows: product i takes the blocks from first[i] on, FORGE__MH_ROWS rows a block (each
// product but the last has a multiple of them); first[i] is UINT32_MAX past the last product. parts
// (one product, grid y above 1): the pieces split over grid y, each share's sums written to parts
// (share z of token t at (z nt + t) n_rows) for forge__k_split_sum.
struct forge__mh_group {
    const uint8_t *w[FORGE__MH_GROUP];
    float *y[FORGE__MH_GROUP];
    const float *bias[FORGE__MH_GROUP];
    uint32_t n_rows[FORGE__MH_GROUP], first[FORGE__MH_GROUP];
    float *parts;
};
// Sets first[] for the first n products of grp, block_rows rows a block; the blocks in all
static uint32_t forge__mh_group_blocks(forge__mh_group &grp, uint32_t n, uint32_t block_rows) {
    uint32_t blocks = 0, i;
    for (i = 0; i < FORGE__MH_GROUP; i++) {
        grp.first[i] = i < n ? blocks : UINT32_MAX;
        if (i < n) blocks += (grp.n_rows[i] + block_rows - 1) / block_rows;
    }
    return blocks;
}
// A group of one product
static forge__mh_group forge__mh_group_of(const uint8_t *w, float *y, const float *bias, uint32_t n_rows) {
    forge__mh_group grp;
    memset(&grp, 0, sizeof grp);
    grp.w[0] = w, grp.y[0] = y, grp.bias[0] = bias, grp.n_rows[0] = n_rows;
    return grp;
}

// PU: units of 64 columns a piece (4: a whole super-block, 2: half of one, for short rows); NTILE:
// 8-token tiles; MINB 2: registers held to what lets two blocks of eight warps share a
// multiprocessor (a few spilled), for the grids that then take fewer waves. xh: the f16 form in
// forge__mh_rows_pos's order (FORGE_HIP_FORM_F16_ROWS). Each lane loads 16 bytes of a row's quants at
// a time and a token's quads of two k16 steps with one 16-byte load, where 4-byte loads of the quants
// and 8-byte loads of the activations had the L1 busy 82% of the kernel's time (14336 x 4096, 16
// tokens, H100): 1.1-1.5x faster on the shapes of tests/PERF.md "Q4_K rows loaded 16 bytes a lane".
template <int PU, int NTILE, int MINB>
__global__ void __launch_bounds__(32 * FORGE__MH_MAX_WAVES, MINB)
forge__k_mmh_rows(const forge__mh_group grp, size_t row_bytes, uint32_t n_cols, const uint8_t *__restrict__ xh, uint32_t nt) {
    constexpr int OUT = 2 * NTILE * 4; // a lane's outputs: 2 row tiles x NTILE token tiles x 4
    __shared__ float part[FORGE__MH_MAX_WAVES][OUT][32];
    // the block's product (the selects keep the parameters out of local memory)
    const uint32_t m = blockIdx.x >= grp.first[2] ? 2u : blockIdx.x >= grp.first[1] ? 1u : 0u;
    const uint8_t *__restrict__ w = m == 2 ? grp.w[2] : m == 1 ? grp.w[1] : grp.w[0];
    float *__restrict__ y = m == 2 ? grp.y[2] : m == 1 ? grp.y[1] : grp.y[0];
    const float *__restrict__ bias = m == 2 ? grp.bias[2] : m == 1 ? grp.bias[1] : grp.bias[0];
    const uint32_t n_rows = m == 2 ? grp.n_rows[2] : m == 1 ? grp.n_rows[1] : grp.n_rows[0];
    const uint32_t first = m == 2 ? grp.first[2] : m == 1 ? grp.first[1] : grp.first[0];
    const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32, sets = blockDim.x / 32, g = lane / 4, c = lane % 4;
    const uint32_t r0 = (blockIdx.x - first) * FORGE__MH_ROWS, n_sb = n_cols / 256, n_pieces = n_sb * (4 / PU);
    const float *sums = (const float *)(xh + FORGE__MH_SUMS((size_t)nt * n_cols));
    const uint8_t *rows[4]; // rows g, g + 8, 16 + g, 24 + g; past the end: the last row, never stored
#pragma unroll
    for (int r = 0; r < 4; r++) rows[r] = w + (size_t)min(r0 + 16 * (r / 2) + 8 * (r % 2) + g, n_rows - 1) * row_bytes;
    const uint8_t *xr[NTILE]; // token g of each tile, at its quads 2c, 2c + 1; tokens past nt read the last, never stored
    const float *sr[NTILE];
#pragma unroll
    for (int i = 0; i < NTILE; i++) {
        const uint32_t t = min(8 * i + g, nt - 1);
        xr[i] = xh + ((size_t)t * n_cols + 8 * c) * 2;
        sr[i] = sums + (size_t)t * (n_cols / 32);
    }
    float acc[2][NTILE][4];
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int i = 0; i < NTILE; i++)
#pragma unroll
            for (int k = 0; k < 4; k++) acc[m][i][k] = 0.0f;
    const uint32_t share = (n_pieces + gridDim.y - 1) / gridDim.y, p_end = min(n_pieces, (blockIdx.y + 1) * share);
    FORGE__GRID_ENTER(); // the activations' form (and the outputs) are the kernels' before
    for (uint32_t piece = blockIdx.y * share + warp; piece < p_end; piece += sets) {
        const uint32_t sb = piece / (4 / PU), u0 = (piece % (4 / PU)) * PU; // super-block; its first unit in the piece
        constexpr int NJ = PU / 2;      // 64-byte halves of the quants in the piece
        const uint32_t j0 = u0 / 2;
        uint4 head[4];  // d, dmin, the 12 bytes of scales and minimums
        uint4 wv[4][NJ]; // a row's bytes 16c .. 16c + 15 of each half (forge__mh_rows_pos)
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const uint8_t *b = rows[r] + (size_t)sb * 144;
            head[r] = forge__ld128(b);
#pragma unroll
            for (int jj = 0; jj < NJ; jj++) wv[r][jj] = forge__ld128(b + 16 + 64 * (j0 + jj) + 16 * c);
        }
        float C[2][NTILE][4];
#pragma unroll
        for (int m = 0; m < 2; m++)
#pragma unroll
            for (int i = 0; i < NTILE; i++)
#pragma unroll
                for (int k = 0; k < 4; k++) C[m][i][k] = 0.0f;
#pragma unroll
        for (int jj = 0; jj < NJ; jj++) {
            const uint32_t unit = 2 * (j0 + jj) + c / 2; // this lane's unit: groups 2 unit (low nibbles), 2 unit + 1
            uint32_t s2[4][2], n2[4][2];                 // a row's scale s of each group as f16x2 (s, s), and (-1024 s, -1024 s)
#pragma unroll
            for (int r = 0; r < 4; r++) forge__q4k_scales(head[r], unit, s2[r], n2[r]);
#pragma unroll
            for (int wd = 0; wd < 4; wd++) {
                uint4 xb[NTILE]; // token g of each tile: this lane's quads of steps (j, wd, 0) and (j, wd, 1)
#pragma unroll
                for (int i = 0; i < NTILE; i++) xb[i] = *(const uint4 *)(xr[i] + 2 * (256 * (size_t)sb + 32 * (4 * (j0 + jj) + wd)));
#pragma unroll
                for (int G = 0; G < 2; G++) {
                    uint32_t lo[4], hi[4]; // a row's k (2c, 2c + 1) and (2c + 8, 2c + 9) of this k16 step: s q, exact
#pragma unroll
                    for (int r = 0; r < 4; r++) {
                        const uint32_t word = wd == 0 ? wv[r][jj].x : wd == 1 ? wv[r][jj].y : wd == 2 ? wv[r][jj].z : wv[r][jj].w;
                        forge__q4k_sq(word >> (4 * G), s2[r][G], n2[r][G], lo[r], hi[r]);
                    }
#pragma unroll
                    for (int i = 0; i < NTILE; i++) {
                        const uint32_t bf[2] = {G ? xb[i].z : xb[i].x, G ? xb[i].w : xb[i].y};
#pragma unroll
                        for (int m = 0; m < 2; m++) {
                            const uint32_t af[4] = {lo[2 * m], lo[2 * m + 1], hi[2 * m], hi[2 * m + 1]};
                            forge__mma16816(C[m][i], af, bf);
                        }
                    }
                }
            }
        }
        // the minimums of the piece's groups (c and c + 4 of the super-block, zero outside the piece)
        uint32_t am[4][2];
        const bool in0 = c / 2 >= u0 && c / 2 < u0 + PU, in1 = (c + 4) / 2 >= u0 && (c + 4) / 2 < u0 + PU;
#pragma unroll
        for (int r = 0; r < 4; r++) forge__q4k_mins(head[r], c, in0, in1, am[r]);
        float D[2][NTILE][4];
#pragma unroll
        for (int i = 0; i < NTILE; i++) {
            uint32_t h0, h1, l0, l1;
            forge__tf32_split(sr[i][8 * (size_t)sb + c], h0, l0), forge__tf32_split(sr[i][8 * (size_t)sb + c + 4], h1, l1);
#pragma unroll
            for (int m = 0; m < 2; m++) {
                const uint32_t af[4] = {am[2 * m][0], am[2 * m + 1][0], am[2 * m][1], am[2 * m + 1][1]};
#pragma unroll
                for (int k = 0; k < 4; k++) D[m][i][k] = 0.0f;
                forge__mma_tf32(D[m][i], af, l0, l1);
                forge__mma_tf32(D[m][i], af, h0, h1);
            }
        }
        float d[4], dm[4];
#pragma unroll
        for (int r = 0; r < 4; r++) d[r] = forge__f16(head[r].x & 0xffffu), dm[r] = forge__f16(head[r].x >> 16);
#pragma unroll
        for (int m = 0; m < 2; m++)
#pragma unroll
            for (int i = 0; i < NTILE; i++)
#pragma unroll
                for (int k = 0; k < 4; k++) acc[m][i][k] += d[2 * m + k / 2] * C[m][i][k] - dm[2 * m + k / 2] * D[m][i][k];
    }
    // the warps' shares added in warp order
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int i = 0; i < NTILE; i++)
#pragma unroll
            for (int k = 0; k < 4; k++) part[warp][(m * NTILE + i) * 4 + k][lane] = acc[m][i][k];
    __syncthreads();
    for (uint32_t j = threadIdx.x; j < OUT * 32; j += blockDim.x) {
        const uint32_t o = j / 32, l = j % 32, m = o / (NTILE * 4), i = (o / 4) % NTILE, k = o % 4;
        const uint32_t row = r0 + 16 * m + 8 * (k / 2) + l / 4, t = 8 * i + 2 * (l % 4) + k % 2;
        float total = part[0][o][l];
        for (uint32_t s2 = 1; s2 < sets; s2++) total += part[s2][o][l];
        if (t < nt && row < n_rows) {
            if (gridDim.y > 1) grp.parts[((size_t)blockIdx.y * nt + t) * n_rows + row] = total;
            else y[(size_t)t * n_rows + row] = bias ? total + bias[row] : total;
        }
    }
}

// Whether the f16 matrix units take this product: Q4_K on a device with them, forge__mmh_rows to
// FORGE__MH_TOKENS tokens; forge__mmh4_rows from FORGE__MH_STAGED_FROM to FORGE__MH_STAGED_TOKENS tokens
// where the matrix has FORGE__MH_STAGED_ROWS rows (its 128-row blocks would not fill the device on
// fewer: 1536 x 1536 at 24 tokens 16.2 us against forge__mmh_rows's 8.9, 1536 x 8960 at 64 36.4
// against the split kernel's 30.8, on an H200).
static int forge__mmh_rows_ok(uint32_t type, uint32_t n_rows, uint32_t n_cols, uint32_t n_tokens) {
    return type == FORGE_HIP_Q4_K && n_cols % 256 == 0 && forge__mma_available() &&
           (n_tokens <= FORGE__MH_TOKENS || (n_tokens <= FORGE__MH_STAGED_TOKENS && n_rows >= FORGE__MH_STAGED_ROWS));
}

// Whether a product that forge__mmh_rows_ok takes runs on forge__k_mmh_rows (else forge__k_mmh4_rows)
static int forge__mmh_rows_plain(uint32_t n_rows, uint32_t n_tokens) {
    return n_tokens <= FORGE__MH_TOKENS && !(n_tokens > FORGE__MH_STAGED_FROM && n_rows >= FORGE__MH_STAGED_ROWS);
}

// Blocks of `threads` threads (and smem bytes of dynamic shared memory) of a kernel that fit a
// multiprocessor of the current device (0 where the runtime cannot say), asked once a device; known[d]
// holds device d's answer plus one.
template <typename... KArgs>
static uint32_t forge__fit_blocks(void (*kernel)(KArgs...), uint32_t threads, std::atomic<uint32_t> (&known)[64], size_t smem = 0) {
    int device = 0, fit = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return (void)cudaGetLastError(), 0u;
    const uint32_t k = device >= 0 && device < 64 ? known[device].load(std::memory_order_relaxed) : 0u;
    if (k) return k - 1;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, kernel, (int)threads, smem) != cudaSuccess || fit < 0) (void)cudaGetLastError(), fit = 0;
    if (device >= 0 && device < 64) known[device].store((uint32_t)fit + 1, std::memory_order_relaxed);
    return (uint32_t)fit;
}

// forge__k_mmh_rows<PU, NTILE> on the grid: the register-held build (MINB 2) where it takes fewer
// waves of blocks than the other (which spills nothing), measured faster only then (tests/PERF.md).
template <int PU, int NTILE>
static void forge__mmh_rows_launch(dim3 grid, dim3 block, hipStream_t s, const forge__mh_group &grp, size_t row_bytes, uint32_t n_cols,
                                   const uint8_t *xh, uint32_t n_tokens) {
    static std::atomic<uint32_t> known[2][2][64]; // [MINB 2][eight warps][device]
    const uint32_t sms = (uint32_t)forge__hip_sm_count(), all = grid.x * grid.y, eight = block.x > 128;
    const uint32_t fit1 = forge__fit_blocks(forge__k_mmh_rows<PU, NTILE, 1>, block.x, known[0][eight]);
    const uint32_t fit2 = forge__fit_blocks(forge__k_mmh_rows<PU, NTILE, 2>, block.x, known[1][eight]);
    const uint32_t waves1 = fit1 ? (all + fit1 * sms - 1) / (fit1 * sms) : UINT32_MAX, waves2 = fit2 ? (all + fit2 * sms - 1) / (fit2 * sms) : UINT32_MAX;
    if (waves2 < waves1) forge__launch(forge__k_mmh_rows<PU, NTILE, 2>, grid, block, s, grp, row_bytes, n_cols, xh, n_tokens);
    else forge__launch(forge__k_mmh_rows<PU, NTILE, 1>, grid, block, s, grp, row_bytes, n_cols, xh, n_tokens);
}

// The first n products of grp (its first[] set here) in one launch; xh: the rows form
// (FORGE_HIP_FORM_F16_ROWS) of the n_tokens x n_cols activations they all read. One product of long rows (FORGE__MH_SPLIT_SB
// super-blocks or more) whose blocks would leave most multiprocessors idle has its super-blocks split
// over grid y, at least 8 a share, while the grid fits one wave of two blocks a multiprocessor and
// parts_floats (the workspace at parts) holds the shares' sums, added by forge__k_split_sum.
#define FORGE__MH_SPLIT_SB 32
static void forge__mmh_rows_group(forge__mh_group grp, uint32_t n, size_t row_bytes, uint32_t n_cols, const uint8_t *xh, uint32_t n_tokens,
                                  float *parts, size_t parts_floats, hipStream_t s) {
    const uint32_t blocks = forge__mh_group_blocks(grp, n, FORGE__MH_ROWS);
    uint32_t split = 1;
    const uint32_t n_sb = n_cols / 256, sms = (uint32_t)forge__hip_sm_count();
    if (n == 1 && parts && n_sb >= FORGE__MH_SPLIT_SB && blocks < sms)
        while (2 * split * blocks <= 2 * sms && 2 * split * 8 <= n_sb && (size_t)2 * split * n_tokens * grp.n_rows[0] <= parts_floats) split *= 2;
    grp.parts = parts;
    // four warps a block, eight where the blocks would not cover the machine twice; whole super-blocks
    // a piece where each warp gets two, else halves
    const uint32_t warps = blocks * split < 2u * sms ? 8 : 4;
    const int whole = n_sb / split >= 2 * warps;
    const dim3 grid(blocks, split), block(32 * warps);
    if (n_tokens <= 8) {
        if (whole) forge__mmh_rows_launch<4, 1>(grid, block, s, grp, row_bytes, n_cols, xh, n_tokens);
        else forge__mmh_rows_launch<2, 1>(grid, block, s, grp, row_bytes, n_cols, xh, n_tokens);
    } else if (n_tokens <= 16) {
        if (whole) forge__mmh_rows_launch<4, 2>(grid, block, s, grp, row_bytes, n_cols, xh, n_tokens);
        else forge__mmh_rows_launch<2, 2>(grid, block, s, grp, row_bytes, n_cols, xh, n_tokens);
    } else {
        if (whole) forge__mmh_rows_launch<4, 4>(grid, block, s, grp, row_bytes, n_cols, xh, n_tokens);
        else forge__mmh_rows_launch<2, 4>(grid, block, s, grp, row_bytes, n_cols, xh, n_tokens);
    }
    if (split > 1) {
        const size_t total = (size_t)n_tokens * grp.n_rows[0];
        forge__launch(forge__k_split_sum, dim3(forge__hip_blocks(total, 256)), dim3(256), s, (const float *)parts, split, total, grp.n_rows[0],
                      grp.bias[0], grp.y[0]);
    }
}

static void forge__mmh_rows(const uint8_t *w, size_t row_bytes, uint32_t n_rows, uint32_t n_cols, const uint8_t *xh, uint32_t n_tokens,
                            float *y, const float *bias, float *parts, size_t parts_floats, hipStream_t s) {
    forge__mmh_rows_group(forge__mh_group_of(w, y, bias, n_rows), 1, row_bytes, n_cols, xh, n_tokens, parts, parts_floats, s);
}

// Q6_K products of a few tokens on the f16 matrix units (forge__k_mmh6_rows). A Q6_K weight is d s
// (q - 32) with q of 6 bits and s an int8 scale a 16 columns. A k16 step of m16n8k16 is one scale
// group: columns 128 h + 32 k + 16 s' + 0..15 of a super-block (half h, quarter k). Lane c takes the
// four consecutive columns 4c..4c+3 of it, one ql word (piece 4 h + 2 s' + c / 2 of the device
// layout, >>weights, its (k & 1) 8 bytes, word c % 2; nibble k >> 1) and one qh word (bits 2k of each
// byte): bytes 0, 2 of them are the step's k (2c, 2c + 1), bytes 1, 3 its (2c + 8, 2c + 9), the
// order of forge__k_mh_prep's quads, so the activations' form is the one the Q4_K kernel reads. A
// weight enters as f16 (1024 + q) - 1056 = q - 32, exact, times s in f16: exact up to 2048, rounded
// once above (|s (q - 32)| reaches 4096); f32 sums over a super-block, then d.
// A block is FORGE__M6_WAVES warps of 32 rows each walking the same super-blocks; a super-block's
// activations (tokens x 256 halves) and the block's rows of it are copied into shared memory by
// cp.async, two stages, the next while the current one is multiplied, so each activation is read
// once a block rather than once a warp. Grid y splits the super-blocks where the row blocks alone
// would leave the device idle; the parts go into the workspace after the activations' form and
// forge__k_split_sum adds them in order. Measured on an H200 (tests/PERF.md "Q6_K steps of several
// sequences"): 14336 x 4096 of 16 tokens 55 us where the split f16 kernel took 89 and dp4a 90.
#define FORGE__M6_WAVES 4
#define FORGE__M6_ROW 224 // shared bytes a row of a super-block: ql 128, qh 64, scales 16, the 4-byte word holding d
#define FORGE__M6_X 544   // shared bytes a token's 256 halves (512 + 32: a quarter-warp's loads on distinct banks)
#define FORGE__M6_MIN 9   // forge_hip_matmul_rows_q8 takes this path from this many tokens of Q6_K (dp4a below)
#define FORGE__M6_STAGE(ntile) ((size_t)8 * (ntile) * FORGE__M6_X + (size_t)32 * FORGE__M6_WAVES * FORGE__M6_ROW)

__device__ __forceinline__ void forge__copy_commit(void) {
#ifdef FORGE__MMA_DEVICE
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
// wait until at most N of this thread's committed copy groups are still in flight
template <int N> __device__ __forceinline__ void forge__copy_keep(void) {
#ifdef FORGE__MMA_DEVICE
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}
// f16x2 a - b and a b, one rounding each
__device__ __forceinline__ uint32_t forge__h2_sub(uint32_t a, uint32_t b) {
    uint32_t r = 0;
#ifdef FORGE__MMA_DEVICE
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
#else
    (void)a, (void)b;
#endif
    return r;
}
__device__ __forceinline__ uint32_t forge__h2_mul(uint32_t a, uint32_t b) {
    uint32_t r = 0;
#ifdef FORGE__MMA_DEVICE
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
#else
    (void)a, (void)b;
#endif
    return r;
}

// A super-block's activations (tokens x 256 halves of forge__k_mh_prep's form) into shared memory at
// FORGE__M6_X bytes a token, by cp.async; tokens past nt copy the last, never stored.
template <uint32_t NT> __device__ __forceinline__ void forge__mh_stage_x(uint8_t *base, const uint8_t *xh, uint32_t n_cols, uint32_t nt, uint32_t sb) {
    for (uint32_t j = threadIdx.x; j < NT * 32; j += blockDim.x) {
        const uint32_t t = j / 32, q = j % 32;
        forge__copy16_async(base + t * FORGE__M6_X + 16 * q, xh + ((size_t)min(t, nt - 1) * n_cols + 256 * (size_t)sb) * 2 + 16 * q);
    }
}
// A warp's 32 rows from row r0 (two 16-row tiles, m16n8 accumulators) to y, or to part blockIdx.y of
// the parts where the super-blocks are split (gridDim.y > 1: bias then added by the sum)
template <int NTILE> __device__ __forceinline__ void forge__mh_store(const float (&acc)[2][NTILE][4], uint32_t r0, uint32_t n_rows, uint32_t nt,
                                                                    float *__restrict__ y, const float *__restrict__ bias) {
    const uint32_t lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
    const bool whole = gridDim.y == 1;
    float *out = whole ? y : y + (size_t)blockIdx.y * nt * n_rows;
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int ii = 0; ii < NTILE; ii++)
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const uint32_t row = r0 + 16 * m + 8 * (k / 2) + g, t = 8 * ii + 2 * c + k % 2;
                if (t < nt && row < n_rows) out[(size_t)t * n_rows + row] = whole && bias ? acc[m][ii][k] + bias[row] : acc[m][ii][k];
            }
}

// Rows 16-aligned in the device layout (forge__q6_k_layout 16: nb a multiple of 8, every array copied 16
// bytes at a time); y: the output, or part blockIdx.y of the workspace's parts where gridDim.y > 1
// (bias then added by the sum).
template <int NTILE>
__global__ void __launch_bounds__(32 * FORGE__M6_WAVES)
forge__k_mmh6_rows(const uint8_t *__restrict__ w, uint32_t n_rows, uint32_t n_cols, const uint8_t *__restrict__ xh, uint32_t nt,
                   float *__restrict__ y, const float *__restrict__ bias) {
    extern __shared__ __align__(16) uint8_t forge__m6_smem[];
    FORGE__GRID_ENTER();
    constexpr uint32_t NT = 8 * NTILE, X = NT * FORGE__M6_X, STAGE = (uint32_t)FORGE__M6_STAGE(NTILE);
    const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, c = lane % 4;
    const uint32_t nb = n_cols / 256, parts = gridDim.y;
    const size_t row_bytes = (size_t)210 * nb;
    const uint32_t sb0 = (uint32_t)((uint64_t)nb * blockIdx.y / parts), sb1 = (uint32_t)((uint64_t)nb * (blockIdx.y + 1) / parts);
    const uint32_t rb0 = blockIdx.x * 32 * FORGE__M6_WAVES;
    // super-block sb's activations and rows into stage slot
    auto issue = [&](uint32_t sb, uint32_t slot) {
        uint8_t *base = forge__m6_smem + slot * STAGE;
        forge__mh_stage_x<NT>(base, xh, n_cols, nt, sb);
        uint8_t *wb = base + X;
        for (uint32_t j = threadIdx.x; j < 32 * FORGE__M6_WAVES * 14; j += blockDim.x) { // a row: ql 8, qh 4, scales 1, d's word
            const uint32_t r = j / 14, q = j % 14;
            const uint8_t *row = w + (size_t)min(rb0 + r, n_rows - 1) * row_bytes;
            uint8_t *dst = wb + FORGE__M6_ROW * r;
            if (q < 8) forge__copy16_async(dst + 16 * q, row + 128 * (size_t)sb + 16 * q);
            else if (q < 12) forge__copy16_async(dst + 128 + 16 * (q - 8), row + 128 * (size_t)nb + 64 * (size_t)sb + 16 * (q - 8));
            else if (q == 12) forge__copy16_async(dst + 192, row + 192 * (size_t)nb + 16 * (size_t)sb);
            else forge__copy4_async((float *)(dst + 208), (const float *)(row + 208 * (size_t)nb + 4 * (size_t)(sb / 2)));
        }
    };
    float acc[2][NTILE][4];
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int i = 0; i < NTILE; i++)
#pragma unroll
            for (int k = 0; k < 4; k++) acc[m][i][k] = 0.0f;
    const uint32_t n_my = sb1 - sb0, k1056 = 0x64206420u; // f16x2 (1056, 1056)
    if (n_my) issue(sb0, 0);
    forge__copy_commit();
    for (uint32_t i = 0; i < n_my; i++) {
        if (i + 1 < n_my) issue(sb0 + i + 1, (i + 1) % 2);
        forge__copy_commit();
        forge__copy_keep<1>();
        __syncthreads();
        const uint32_t sb = sb0 + i;
        const uint8_t *base = forge__m6_smem + (i % 2) * STAGE, *xs = base;
        const uint8_t *rp[4]; // rows g, g + 8, 16 + g, 24 + g of the warp's 32
#pragma unroll
        for (int r = 0; r < 4; r++) rp[r] = base + X + FORGE__M6_ROW * (32 * warp + 16 * (r / 2) + 8 * (r % 2) + g);
        float C[2][NTILE][4];
#pragma unroll
        for (int m = 0; m < 2; m++)
#pragma unroll
            for (int ii = 0; ii < NTILE; ii++)
#pragma unroll
                for (int k = 0; k < 4; k++) C[m][ii][k] = 0.0f;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            uint32_t scw[4][2]; // the int8 scales 8 h .. 8 h + 7 of each row
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const uint2 v = *(const uint2 *)(rp[r] + 192 + 8 * h);
                scw[r][0] = v.x, scw[r][1] = v.y;
            }
#pragma unroll
            for (int s = 0; s < 2; s++) {
                const uint32_t pi = 4 * h + 2 * s + c / 2;
                uint32_t qa[4], qb[4], qh[4];
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    qa[r] = *(const uint32_t *)(rp[r] + 16 * pi + 4 * (c % 2));
                    qb[r] = *(const uint32_t *)(rp[r] + 16 * pi + 8 + 4 * (c % 2));
                    qh[r] = *(const uint32_t *)(rp[r] + 128 + 8 * pi + 4 * (c % 2));
                }
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    uint32_t lo[4], hi[4];
#pragma unroll
                    for (int r = 0; r < 4; r++) {
                        const uint32_t ql = (k & 1) ? qb[r] : qa[r], nib = (k & 2) ? ql >> 4 : ql, hb = (qh[r] >> (2 * k)) << 4;
                        const uint32_t v0 = (nib & 0x000f000fu) | (hb & 0x00300030u) | 0x64006400u;
                        const uint32_t v1 = ((nib >> 8) & 0x000f000fu) | ((hb >> 8) & 0x00300030u) | 0x64006400u;
                        const int idx = 2 * k + s; // scale 8 h + 2 k + s
                        const float sf = (float)(int8_t)((scw[r][idx / 4] >> (8 * (idx % 4))) & 0xffu);
                        const uint32_t s2 = forge__h2_pack(sf, sf);
                        lo[r] = forge__h2_mul(forge__h2_sub(v0, k1056), s2);
                        hi[r] = forge__h2_mul(forge__h2_sub(v1, k1056), s2);
                    }
                    const uint32_t col = 128 * h + 32 * k + 16 * s;
#pragma unroll
                    for (int ii = 0; ii < NTILE; ii++) {
                        const uint2 b = *(const uint2 *)(xs + (8 * ii + g) * FORGE__M6_X + 2 * (col + 4 * c));
                        const uint32_t bf[2] = {b.x, b.y};
#pragma unroll
                        for (int m = 0; m < 2; m++) {
                            const uint32_t af[4] = {lo[2 * m], lo[2 * m + 1], hi[2 * m], hi[2 * m + 1]};
                            forge__mma16816(C[m][ii], af, bf);
                        }
                    }
                }
            }
        }
        float d[4]; // d of the super-block, half of the 4-byte word copied
#pragma unroll
        for (int r = 0; r < 4; r++) d[r] = forge__f16(*(const uint16_t *)(rp[r] + 208 + 2 * (sb % 2)));
#pragma unroll
        for (int m = 0; m < 2; m++)
#pragma unroll
            for (int ii = 0; ii < NTILE; ii++)
#pragma unroll
                for (int k = 0; k < 4; k++) acc[m][ii][k] += d[2 * m + k / 2] * C[m][ii][k];
        __syncthreads(); // the slot is refilled next round
    }
    forge__copy_keep<0>();
    forge__mh_store<NTILE>(acc, rb0 + 32 * warp, n_rows, nt, y, bias);
}


// Q4_K products of 17 to 64 tokens: forge__k_mmh_rows's arithmetic (weights exact, d after the
// super-block, the minimums by tf32 mma) in forge__k_mmh6_rows's blocks: four warps of 32 rows
// walking the same super-blocks, each super-block's activations, their group sums and the block's
// 128 rows of it staged in shared memory by cp.async (two stages) and the activations read once a
// block instead of once a warp, super-blocks split over grid y into the workspace where the row
// blocks would leave the device idle. From 17 tokens the activations are most of what a warp reads
// (16 KB a super-block at 32 tokens against 4.6 KB of its rows), and sharing them is what pays:
// 14336 x 4096 of 64 tokens 50 us where the split f16 kernel takes 102, of 32 tokens 38 us where
// forge__k_mmh_rows takes 52 (H200, tests/PERF.md "Q4_K steps of 17 to 64 sequences").
#define FORGE__M4_STAGE(ntile) ((size_t)8 * (ntile) * (FORGE__M6_X + 32) + (size_t)32 * FORGE__M6_WAVES * 144)
// Up to FORGE__MH_GROUP products of one input as forge__k_mmh_rows takes them (grp: product i from
// block first[i] on, 128 rows a block here; parts: one product split over grid y).
template <int NTILE>
__global__ void __launch_bounds__(32 * FORGE__M6_WAVES)
forge__k_mmh4_rows(const forge__mh_group grp, size_t row_bytes, uint32_t n_cols, const uint8_t *__restrict__ xh, uint32_t nt) {
    extern __shared__ __align__(16) uint8_t forge__m4_smem[];
    // the block's product (the selects keep the parameters out of local memory)
    const uint32_t m = blockIdx.x >= grp.first[2] ? 2u : blockIdx.x >= grp.first[1] ? 1u : 0u;
    const uint8_t *__restrict__ w = m == 2 ? grp.w[2] : m == 1 ? grp.w[1] : grp.w[0];
    float *__restrict__ y = gridDim.y > 1 ? grp.parts : m == 2 ? grp.y[2] : m == 1 ? grp.y[1] : grp.y[0];
    const float *__restrict__ bias = gridDim.y > 1 ? NULL : m == 2 ? grp.bias[2] : m == 1 ? grp.bias[1] : grp.bias[0];
    const uint32_t n_rows = m == 2 ? grp.n_rows[2] : m == 1 ? grp.n_rows[1] : grp.n_rows[0];
    const uint32_t first = m == 2 ? grp.first[2] : m == 1 ? grp.first[1] : grp.first[0];
    FORGE__GRID_ENTER();
    constexpr uint32_t NT = 8 * NTILE, X = NT * FORGE__M6_X, SUMS = NT * 32, STAGE = (uint32_t)FORGE__M4_STAGE(NTILE);
    const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, c = lane % 4;
    const uint32_t nb = n_cols / 256, parts = gridDim.y;
    const uint32_t sb0 = (uint32_t)((uint64_t)nb * blockIdx.y / parts), sb1 = (uint32_t)((uint64_t)nb * (blockIdx.y + 1) / parts);
    const uint32_t rb0 = (blockIdx.x - first) * 32 * FORGE__M6_WAVES;
    const float *sums = (const float *)(xh + FORGE__MH_SUMS((size_t)nt * n_cols));
    auto issue = [&](uint32_t sb, uint32_t slot) {
        uint8_t *base = forge__m4_smem + slot * STAGE;
        forge__mh_stage_x<NT>(base, xh, n_cols, nt, sb);
        for (uint32_t j = threadIdx.x; j < NT * 2; j += blockDim.x) { // the 8 group sums of each token
            const uint32_t t = j / 2;
            forge__copy16_async(base + X + 32 * t + 16 * (j % 2), sums + (size_t)min(t, nt - 1) * (n_cols / 32) + 8 * (size_t)sb + 4 * (j % 2));
        }
        for (uint32_t j = threadIdx.x; j < 32 * FORGE__M6_WAVES * 9; j += blockDim.x) { // a row's 144 bytes of the super-block
            const uint32_t r = j / 9, q = j % 9;
            forge__copy16_async(base + X + SUMS + 144 * r + 16 * q, w + (size_t)min(rb0 + r, n_rows - 1) * row_bytes + 144 * (size_t)sb + 16 * q);
        }
    };
    float acc[2][NTILE][4];
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int i = 0; i < NTILE; i++)
#pragma unroll
            for (int k = 0; k < 4; k++) acc[m][i][k] = 0.0f;
    const uint32_t n_my = sb1 - sb0;
    if (n_my) issue(sb0, 0);
    forge__copy_commit();
    for (uint32_t i = 0; i < n_my; i++) {
        if (i + 1 < n_my) issue(sb0 + i + 1, (i + 1) % 2);
        forge__copy_commit();
        forge__copy_keep<1>();
        __syncthreads();
        const uint8_t *base = forge__m4_smem + (i % 2) * STAGE, *xs = base, *ss = base + X;
        const uint8_t *rp[4]; // rows g, g + 8, 16 + g, 24 + g of the warp's 32
#pragma unroll
        for (int r = 0; r < 4; r++) rp[r] = base + X + SUMS + 144 * (32 * warp + 16 * (r / 2) + 8 * (r % 2) + g);
        uint4 head[4]; // d, dmin, the 12 bytes of scales and minimums
#pragma unroll
        for (int r = 0; r < 4; r++) head[r] = *(const uint4 *)rp[r];
        float C[2][NTILE][4];
#pragma unroll
        for (int m = 0; m < 2; m++)
#pragma unroll
            for (int ii = 0; ii < NTILE; ii++)
#pragma unroll
                for (int k = 0; k < 4; k++) C[m][ii][k] = 0.0f;
#pragma unroll
        for (int unit = 0; unit < 4; unit++) { // groups 2 unit (low nibbles) and 2 unit + 1 (high)
            uint32_t s2[4][2], n2[4][2];      // a row's scale s of each group as f16x2 (s, s), and (-1024 s, -1024 s)
#pragma unroll
            for (int r = 0; r < 4; r++) forge__q4k_scales(head[r], unit, s2[r], n2[r]);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                uint32_t wq[4];
#pragma unroll
                for (int r = 0; r < 4; r++) wq[r] = *(const uint32_t *)(rp[r] + 16 + 32 * unit + 16 * h + 4 * c);
#pragma unroll
                for (int G = 0; G < 2; G++) {
                    uint32_t lo[4], hi[4]; // a row's k (2c, 2c + 1) and (2c + 8, 2c + 9) of this k16 step: s q, exact
#pragma unroll
                    for (int r = 0; r < 4; r++) forge__q4k_sq(wq[r] >> (4 * G), s2[r][G], n2[r][G], lo[r], hi[r]);
                    const uint32_t col = 64 * unit + 32 * G + 16 * h;
#pragma unroll
                    for (int ii = 0; ii < NTILE; ii++) {
                        const uint2 b = *(const uint2 *)(xs + (8 * ii + g) * FORGE__M6_X + 2 * (col + 4 * c));
                        const uint32_t bf[2] = {b.x, b.y};
#pragma unroll
                        for (int m = 0; m < 2; m++) {
                            const uint32_t af[4] = {lo[2 * m], lo[2 * m + 1], hi[2 * m], hi[2 * m + 1]};
                            forge__mma16816(C[m][ii], af, bf);
                        }
                    }
                }
            }
        }
        // the minimums: (row minimums) x (group sums), the sums split in two tf32 parts
        uint32_t am[4][2];
#pragma unroll
        for (int r = 0; r < 4; r++) forge__q4k_mins(head[r], c, true, true, am[r]);
        float d[4], dm[4];
#pragma unroll
        for (int r = 0; r < 4; r++) d[r] = forge__f16(head[r].x & 0xffffu), dm[r] = forge__f16(head[r].x >> 16);
#pragma unroll
        for (int ii = 0; ii < NTILE; ii++) {
            const float *st = (const float *)(ss + 32 * (8 * ii + g));
            uint32_t h0, h1, l0, l1;
            forge__tf32_split(st[c], h0, l0), forge__tf32_split(st[c + 4], h1, l1);
#pragma unroll
            for (int m = 0; m < 2; m++) {
                const uint32_t af[4] = {am[2 * m][0], am[2 * m + 1][0], am[2 * m][1], am[2 * m + 1][1]};
                float D[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                forge__mma_tf32(D, af, l0, l1);
                forge__mma_tf32(D, af, h0, h1);
#pragma unroll
                for (int k = 0; k < 4; k++) acc[m][ii][k] += d[2 * m + k / 2] * C[m][ii][k] - dm[2 * m + k / 2] * D[k];
            }
        }
        __syncthreads(); // the slot is refilled next round
    }
    forge__copy_keep<0>();
    forge__mh_store<NTILE>(acc, rb0 + 32 * warp, n_rows, nt, y, bias);
}

// How many parts grid y splits a row-block kernel's super-blocks into: doubling while the grid has
// fewer than `blocks` blocks and the parts fit in parts_floats.
static uint32_t forge__mh_split(uint32_t bx, uint32_t nb, uint32_t n_tokens, uint32_t n_rows, size_t parts_floats, uint32_t blocks) {
    uint32_t split = 1;
    while (bx * split < blocks && 2 * split <= nb && (size_t)2 * split * n_tokens * n_rows <= parts_floats) split *= 2;
    return split;
}

// Whether forge__mmh6_rows reads this product: Q6_K rows of a multiple of 2048 columns (16-aligned in
// the device layout) of up to 32 tokens on a device with the matrix units. Rows 4- or 2-aligned (the
// Qwen2.5-1.5B's 1536 and 8960 columns) measured slower copied 4 bytes at a time than on the paths
// they had, and keep them.
static int forge__mmh6_rows_ok(uint32_t type, uint32_t n_cols, uint32_t n_tokens) {
    return type == FORGE_HIP_Q6_K && forge__q6_k_layout(n_cols) == 16 && n_tokens <= 32 && forge__mma_available();
}

// Which f16 matrix-unit path forge__hip_matmul gives a product (q8_rows as there: 1 the faster for the
// shape, 2 dp4a, 3 the matrix units from one token): 1 Q4_K (forge__k_mmh_rows, forge__k_mmh4_rows),
// 2 Q6_K (forge__k_mmh6_rows), 0 none.
static int forge__mh_path(uint32_t type, uint32_t n_rows, uint32_t n_cols, uint32_t n_tokens, int q8_rows) {
    if (!q8_rows || q8_rows == 2) return 0;
    if (forge__mmh_rows_ok(type, n_rows, n_cols, n_tokens) && (q8_rows == 3 || n_tokens >= FORGE__MH_MIN)) return 1;
    if (forge__mmh6_rows_ok(type, n_cols, n_tokens) && (q8_rows == 3 || n_tokens >= FORGE__M6_MIN)) return 2;
    return 0;
}

// The f16 form a product on path (forge__mh_path's 1 or 2) reads: the plain one for the staged
// kernels (forge__k_mmh6_rows, forge__k_mmh4_rows), the rows order for forge__k_mmh_rows.
static int forge__mh_form(int path, uint32_t n_rows, uint32_t n_tokens) {
    return path == 2 || (n_tokens > FORGE__MH_STAGED_FROM && n_rows >= FORGE__MH_STAGED_ROWS) ? FORGE_HIP_FORM_F16 : FORGE_HIP_FORM_F16_ROWS;
}
// forge__k_mh_prep of the n values at x into xh, in the order of form
static void forge__mh_make(const float *x, uint32_t n, uint8_t *xh, int form, hipStream_t s) {
    forge__launch(forge__k_mh_prep, dim3((n / 4 + 255) / 256), dim3(256), s, x, n, xh, (uint32_t)(form == FORGE_HIP_FORM_F16_ROWS));
}

// The products of p not yet taken that forge_hip_matmul_rows_q8_group runs together: on forge__k_mmh_rows
// (staged 0) or forge__k_mmh4_rows (staged 1), each that would run alone there, those of whole blocks
// (32 or 128 rows) first, then at most one that is not (it goes last), in order[]; taken[i] set for
// each. How many; fewer than two go together as none (none of them taken).
static uint32_t forge__mh_group_pick(uint32_t n, const forge_hip_product *p, uint32_t n_cols, uint32_t n_tokens, int staged,
                                     uint32_t order[FORGE__MH_GROUP], int taken[FORGE__MH_GROUP]) {
    const uint32_t block_rows = staged ? 32 * FORGE__M6_WAVES : FORGE__MH_ROWS;
    uint32_t together = 0, odd = 0, pass, i;
    for (pass = 0; pass < 2; pass++) /* the products of whole blocks first, then one that is not */
        for (i = 0; i < n; i++) {
            const int whole = p[i].n_rows % block_rows == 0;
            if (taken[i] || (pass == 0) != whole || (!whole && odd) || p[i].n_rows == 0 ||
                forge__mh_path(p[i].type, p[i].n_rows, n_cols, n_tokens, 1) != 1 || forge__mmh_rows_plain(p[i].n_rows, n_tokens) == staged)
                continue;
            odd |= !whole;
            order[together++] = i, taken[i] = 1;
        }
    if (together < 2)
        for (i = 0; i < together; i++) taken[order[i]] = 0;
    return together < 2 ? 0 : together;
}

// xh: forge__k_mh_prep's form of the n_tokens x n_cols activations; parts: parts_floats floats of the
// workspace past it for the split super-blocks' sums. 0 when the kernel cannot run here (its shared
// memory refused), the product then left to another path.
static int forge__mmh6_rows(const uint8_t *w, uint32_t n_rows, uint32_t n_cols, const uint8_t *xh, uint32_t n_tokens, float *y,
                            const float *bias, float *parts, size_t parts_floats, hipStream_t s) {
#if FORGE__STAGING
    static std::atomic<unsigned long long> known[2];
    static std::atomic<uint32_t> fits[2][64];
    const uint32_t wide = n_tokens > 16, nb = n_cols / 256;
    const uint32_t bx = (n_rows + 32 * FORGE__M6_WAVES - 1) / (32 * FORGE__M6_WAVES);
    const dim3 block(32 * FORGE__M6_WAVES);
    const size_t smem = 2 * FORGE__M6_STAGE(wide ? 4 : 2);
    if (wide ? !forge__stage_allow(forge__k_mmh6_rows<4>, known[0]) : !forge__stage_allow(forge__k_mmh6_rows<2>, known[1])) return 0;
    // the super-blocks split over grid y into as many parts as keep the grid within the blocks that fit
    // the device at once (one wave): doubling past it, as before, measured slower (4096 x 14336 of 16
    // tokens split 16 ways, 512 blocks where 396 fit, 53.7 us a launch on an H100; 12 ways 43.9 us; 8
    // ways, about two blocks a multiprocessor, 46.4)
    const uint32_t fit = wide ? forge__fit_blocks(forge__k_mmh6_rows<4>, block.x, fits[0], smem) : forge__fit_blocks(forge__k_mmh6_rows<2>, block.x, fits[1], smem);
    const uint32_t sms = (uint32_t)forge__hip_sm_count(), target = fit ? fit * sms : 2 * sms;
    uint32_t split = bx < target ? target / bx : 1;
    if (split > nb) split = nb;
    while (split > 1 && (size_t)split * n_tokens * n_rows > parts_floats) split--;
    const dim3 grid(bx, split);
    float *out = split > 1 ? parts : y;
    if (wide) {
        forge__launch_smem(1, forge__k_mmh6_rows<4>, grid, block, smem, s, w, n_rows, n_cols, xh, n_tokens, out, split > 1 ? NULL : bias);
    } else {
        forge__launch_smem(1, forge__k_mmh6_rows<2>, grid, block, smem, s, w, n_rows, n_cols, xh, n_tokens, out, split > 1 ? NULL : bias);
    }
    if (split > 1) {
        const size_t n = (size_t)n_tokens * n_rows;
        forge__launch(forge__k_split_sum, dim3(forge__hip_blocks(n, 256)), dim3(256), s, (const float *)parts, split, n, n_rows, bias, y);
    }
    return 1;
#else
    (void)w, (void)n_rows, (void)n_cols, (void)xh, (void)n_tokens, (void)y, (void)bias, (void)parts, (void)parts_floats, (void)s;
    return 0;
#endif
}

// The first n products of grp (its first[] and parts set here) on forge__k_mmh4_rows; xh: the plain f16
// form (FORGE_HIP_FORM_F16) of the n_tokens x n_cols activations (17 to 64 tokens); parts as
// forge__mmh6_rows (one product alone splits). 0 when the kernel cannot run here.
static int forge__mmh4_rows_group(forge__mh_group grp, uint32_t n, size_t row_bytes, uint32_t n_cols, const uint8_t *xh, uint32_t n_tokens,
                                  float *parts, size_t parts_floats, hipStream_t s) {
#if FORGE__STAGING
    static std::atomic<unsigned long long> known[2];
    const uint32_t wide = n_tokens > 32, nb = n_cols / 256;
    const uint32_t bx = forge__mh_group_blocks(grp, n, 32 * FORGE__M6_WAVES);
    // the grid doubles while it has at most one block a multiprocessor: two fit (110 KB of shared memory
    // each at 64 tokens), so it stays one wave; splitting on to two blocks a multiprocessor, as
    // forge__mmh6_rows does, measured 8-9% slower on the Llama-3-8B at 32-64 sequences (more parts
    // written and summed). Products together fill the grid instead of splitting.
    const uint32_t split = n == 1 ? forge__mh_split(bx, nb, n_tokens, grp.n_rows[0], parts_floats, (uint32_t)forge__hip_sm_count() + 1) : 1;
    const dim3 grid(bx, split), block(32 * FORGE__M6_WAVES);
    const size_t smem = 2 * FORGE__M4_STAGE(wide ? 8 : 4);
    grp.parts = parts;
    if (wide) {
        if (!forge__stage_allow(forge__k_mmh4_rows<8>, known[0])) return 0;
        forge__launch_smem(1, forge__k_mmh4_rows<8>, grid, block, smem, s, grp, row_bytes, n_cols, xh, n_tokens);
    } else {
        if (!forge__stage_allow(forge__k_mmh4_rows<4>, known[1])) return 0;
        forge__launch_smem(1, forge__k_mmh4_rows<4>, grid, block, smem, s, grp, row_bytes, n_cols, xh, n_tokens);
    }
    if (split > 1) {
        const size_t all = (size_t)n_tokens * grp.n_rows[0];
        forge__launch(forge__k_split_sum, dim3(forge__hip_blocks(all, 256)), dim3(256), s, (const float *)parts, split, all, grp.n_rows[0],
                      grp.bias[0], grp.y[0]);
    }
    return 1;
#else
    (void)grp, (void)n, (void)row_bytes, (void)n_cols, (void)xh, (void)n_tokens, (void)parts, (void)parts_floats, (void)s;
    return 0;
#endif
}

static int forge__mmh4_rows(const uint8_t *w, size_t row_bytes, uint32_t n_rows, uint32_t n_cols, const uint8_t *xh, uint32_t n_tokens,
                            float *y, const float *bias, float *parts, size_t parts_floats, hipStream_t s) {
    return forge__mmh4_rows_group(forge__mh_group_of(w, y, bias, n_rows), 1, row_bytes, n_cols, xh, n_tokens, parts, parts_floats, s);
}

// ---- prompt products with the activations staged as f16 (forge_hip_matmul_split, more than 64 tokens) ----
//
// forge__k_matmul_mma reads the f32 activations through registers and converts them in every block,
// and its lanes load their weights from 16 or 32 rows at once in 4-byte pieces: on the Llama-3-8B's
// gate (14336 x 4096, 512 tokens, Q4_0) Nsight Compute finds it held by L1 (93% busy; 44% of the
// global load sectors excess, the shared stores 5-way conflicted) with the tensor pipe 21% busy.
// Here the activations are rounded to f16 once (forge__k_f16_rows, the same rounding) into the
// workspace and each block copies its tokens' slices of 32 KU columns with cp.async into a ring of S
// stages, holding no registers; the weights are read with the same readers, but the KU lanes next to
// each other take the KU units of one row (KU 18-byte Q4_0 units: contiguous bytes), each a whole
// unit, converted to f16 into the same ring one step behind their loads. Warps of 64 rows by 8 NT
// tokens. The sums run in the order of forge__k_matmul_mma's: the same bits. Measured on an H100
// (tests/PERF.md "Prompt products with staged f16 activations"), 512 tokens, the Llama-3-8B's shapes
// against forge__k_matmul_mma: Q4_0 1.4-1.6x, Q8_0 1.3-1.6x, Q4_K 1.2-1.7x, Q6_K 1.1-1.3x.
#define FORGE__MMS_MIN_TOKENS 65 // fewer tokens keep forge__k_matmul_mma (its smaller tiles and split columns)
#define FORGE__MMS_CHUNK 512     // tokens a workspace holds at most (forge_hip_prompt_bytes): longer batches go in chunks
#define FORGE__MMS_SMEM(BM, BN, KU, S) ((size_t)(S) * ((BM) + (BN)) * (32 * (KU) + 8) * 2)
// The readers whose matrices of 8192 rows or more take the 128 x 128 tile (forge__mms_tile)
template <class H> struct forge__mms_wide { static const int value = 0; };
template <> struct forge__mms_wide<forge__h_q4_k> { static const int value = 1; };
template <> struct forge__mms_wide<forge__h_q4_0_packed> { static const int value = 1; };
template <> struct forge__mms_wide<forge__h_q8_0_packed> { static const int value = 1; };
// Q4_0 / Q8_0 in the device layout: the 128 x 128 tile from 6144 rows (q, k and v of the 8B) and 128 x
// 128 in 2 x 4 warps for 8192 columns or more (the down projection) (forge__mms_tile)
template <class H> struct forge__mms_deep { static const int value = 0; };
template <> struct forge__mms_deep<forge__h_q4_0_packed> { static const int value = 1; };
template <> struct forge__mms_deep<forge__h_q8_0_packed> { static const int value = 1; };

// f32 rows -> f16 rows (round to nearest even, as forge__h2_pack), n2 pairs
__global__ void forge__k_f16_rows(const float *__restrict__ x, uint32_t *__restrict__ out, size_t n2) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n2; i += (size_t)gridDim.x * blockDim.x) {
        const float2 v = ((const float2 *)x)[i];
        out[i] = forge__h2_pack(v.x, v.y);
    }
}

// h = silu(gate) * up (forge__k_swiglu's expression), four values a thread: its f16 rows to h16 (as
// forge__k_f16_rows rounds them), and to gate as well where keep
__global__ void forge__k_swiglu_f16(float *__restrict__ gate, const float *__restrict__ up, uint2 *__restrict__ h16, size_t n4, int keep) {
    FORGE__GRID_ENTER();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) {
        const float4 g = ((const float4 *)gate)[i], u = ((const float4 *)up)[i];
        float4 h;
        h.x = g.x / (1.0f + expf(-g.x)) * u.x;
        h.y = g.y / (1.0f + expf(-g.y)) * u.y;
        h.z = g.z / (1.0f + expf(-g.z)) * u.z;
        h.w = g.w / (1.0f + expf(-g.w)) * u.w;
        if (keep) ((float4 *)gate)[i] = h;
        h16[i] = make_uint2(forge__h2_pack(h.x, h.y), forge__h2_pack(h.z, h.w));
    }
}

// y = W x (+ bias) for the block's 64 WM rows and 8 NT WN tokens; xh: the tokens' f16 rows; n_cols a
// multiple of 32 KU. Dynamic shared memory: FORGE__MMS_SMEM(64 WM, 8 NT WN, KU, S); a row of a stage
// is 32 KU + 8 halves (ldmatrix's 8 rows on distinct banks). grp: up to three products of one input
// and one reader (q, k and v), product i taking the rows of blocks from grp.first[i] on in grid y.
template <class H, int WM, int WN, int NT, int KU, int S>
__global__ void __launch_bounds__(32 * WM * WN, 32 * WM * WN > 128 ? 1 : 2)
forge__k_matmul_staged(const forge__mh_group grp, size_t row_bytes, uint32_t n_cols, const uint16_t *__restrict__ xh, uint32_t n_tokens) {
#ifdef FORGE__MMA_DEVICE
    constexpr int BM = 64 * WM, BN = 8 * NT * WN, THREADS = 32 * WM * WN, KC = 32 * KU, LD = KC + 8;
    constexpr int TASKS = KU * BM / THREADS, CHUNKS = BN * KC / 8 / THREADS; // units and 16-byte activation pieces a thread a step
    static_assert(TASKS * THREADS == KU * BM && CHUNKS * THREADS == BN * KC / 8 && S >= 2, "whole tasks a thread");
    extern __shared__ __align__(16) uint16_t forge__mms_smem[];
    uint16_t *w_ring = forge__mms_smem, *x_ring = forge__mms_smem + S * BM * LD;
    // the block's product (the selects keep the parameters out of local memory)
    const uint32_t m = blockIdx.y >= grp.first[2] ? 2u : blockIdx.y >= grp.first[1] ? 1u : 0u;
    const uint8_t *__restrict__ w = m == 2 ? grp.w[2] : m == 1 ? grp.w[1] : grp.w[0];
    float *__restrict__ y = m == 2 ? grp.y[2] : m == 1 ? grp.y[1] : grp.y[0];
    const float *__restrict__ bias = m == 2 ? grp.bias[2] : m == 1 ? grp.bias[1] : grp.bias[0];
    const uint32_t n_rows = m == 2 ? grp.n_rows[2] : m == 1 ? grp.n_rows[1] : grp.n_rows[0];
    const uint32_t first = m == 2 ? grp.first[2] : m == 1 ? grp.first[1] : grp.first[0];
    const uint32_t tid = threadIdx.x, lane = tid % 32, warp = tid / 32, warp_m = warp % WM, warp_n = warp / WM;
    const uint32_t tok0 = blockIdx.x * BN, row0 = (blockIdx.y - first) * BM, n_steps = n_cols / KC;
    // task = tid + i THREADS: row task / KU, unit task % KU of the step; out-of-range rows and tokens
    // read the last valid one, never stored
    const uint8_t *rows[TASKS];
    uint16_t *w_dst[TASKS];
#pragma unroll
    for (int i = 0; i < TASKS; i++) {
        const uint32_t task = tid + i * THREADS;
        rows[i] = w + (size_t)min(row0 + task / KU, n_rows - 1) * row_bytes;
        w_dst[i] = w_ring + (task / KU) * LD + 32 * (task % KU);
    }
    const uint16_t *x_src[CHUNKS]; // 16-byte pieces: token c / (KC / 8), columns 8 (c % (KC / 8)) of a step
    uint16_t *x_dst[CHUNKS];
#pragma unroll
    for (int i = 0; i < CHUNKS; i++) {
        const uint32_t c = tid + i * THREADS, t = c / (KC / 8), k8 = c % (KC / 8);
        x_src[i] = xh + (size_t)min(tok0 + t, n_tokens - 1) * n_cols + 8 * k8;
        x_dst[i] = x_ring + t * LD + 8 * k8;
    }
    typename H::raw raw[TASKS][2];
    float acc[4][NT][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int k = 0; k < 4; k++) acc[i][j][k] = 0.0f;
    // the activations of steps 0 .. S-2 in flight, the weights of step 0 in registers
#pragma unroll
    for (int p = 0; p < S - 1; p++) {
        if (p < (int)n_steps)
#pragma unroll
            for (int i = 0; i < CHUNKS; i++) forge__copy16_async(x_dst[i] + p * BN * LD, x_src[i] + KC * p);
        forge__copy_commit();
    }
#pragma unroll
    for (int i = 0; i < TASKS; i++) {
        const uint32_t u = (tid + i * THREADS) % KU;
        H::load(rows[i], u, 0, n_cols, raw[i][0]), H::load(rows[i], u, 1, n_cols, raw[i][1]);
    }
    for (uint32_t step = 0; step < n_steps; step++) {
        const uint32_t slot = step % S;
        // this step's weights into its slot: its last readers were step - S's products, which every
        // thread finished before the barrier of step - S + 1
#pragma unroll
        for (int i = 0; i < TASKS; i++) {
            const uint32_t u = KU * step + (tid + i * THREADS) % KU;
            uint32_t v[8];
            uint4 *dst = (uint4 *)(w_dst[i] + slot * BM * LD);
            H::convert(raw[i][0], u, 0, v);
            dst[0] = make_uint4(v[0], v[1], v[2], v[3]), dst[1] = make_uint4(v[4], v[5], v[6], v[7]);
            H::convert(raw[i][1], u, 1, v);
            dst[2] = make_uint4(v[0], v[1], v[2], v[3]), dst[3] = make_uint4(v[4], v[5], v[6], v[7]);
        }
        forge__copy_keep<S - 2>(); // this thread's copies of this step have landed
        __syncthreads();           // everyone's have, and step - 1's slot is free
        const uint32_t ahead = step + S - 1;
        if (ahead < n_steps)
#pragma unroll
            for (int i = 0; i < CHUNKS; i++) forge__copy16_async(x_dst[i] + (ahead % S) * BN * LD, x_src[i] + (size_t)KC * ahead);
        forge__copy_commit(); // an empty group past the end keeps the count
        if (step + 1 < n_steps)
#pragma unroll
            for (int i = 0; i < TASKS; i++) {
                const uint32_t u = KU * (step + 1) + (tid + i * THREADS) % KU;
                H::load(rows[i], u, 0, n_cols, raw[i][0]), H::load(rows[i], u, 1, n_cols, raw[i][1]);
            }
        const uint32_t w_base = (uint32_t)__cvta_generic_to_shared(w_ring + slot * BM * LD);
        const uint32_t x_base = (uint32_t)__cvta_generic_to_shared(x_ring + slot * BN * LD);
#pragma unroll
        for (int ks = 0; ks < 2 * KU; ks++) {
            uint32_t a[4][4], b[NT][2];
#pragma unroll
            for (int mt = 0; mt < 4; mt++) // rows 16mt + lane%16, columns 8 (lane/16)
                forge__ldsm4(a[mt], w_base + 2 * ((warp_m * 64 + mt * 16 + (lane & 15)) * LD + ks * 16 + (lane >> 4) * 8));
#pragma unroll
            for (int np = 0; np < NT / 2; np++) { // tokens 16np + lane%8 + 8 (lane/16), columns 8 ((lane/8)%2)
                uint32_t t[4];
                forge__ldsm4(t, x_base + 2 * ((warp_n * 8 * NT + np * 16 + (lane & 7) + ((lane >> 4) << 3)) * LD + ks * 16 +
                                              ((lane >> 3) & 1) * 8));
                b[2 * np][0] = t[0], b[2 * np][1] = t[1], b[2 * np + 1][0] = t[2], b[2 * np + 1][1] = t[3];
            }
#pragma unroll
            for (int mt = 0; mt < 4; mt++)
#pragma unroll
                for (int nt = 0; nt < NT; nt++) forge__mma16816(acc[mt][nt], a[mt], b[nt]);
        }
    }
    // accumulator element k of tile (mt, nt): row 16mt + lane/4 + 8 (k/2), token 8nt + 2 (lane%4) + k%2
#pragma unroll
    for (int mt = 0; mt < 4; mt++)
#pragma unroll
        for (int k2 = 0; k2 < 2; k2++) {
            const uint32_t r = row0 + warp_m * 64 + mt * 16 + lane / 4 + 8 * k2;
            if (r >= n_rows) continue;
            const float add = bias ? bias[r] : 0.0f;
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int k1 = 0; k1 < 2; k1++) {
                    const uint32_t t = tok0 + warp_n * 8 * NT + nt * 8 + 2 * (lane % 4) + k1;
                    if (t < n_tokens) y[(size_t)t * n_rows + r] = acc[mt][nt][2 * k2 + k1] + add;
                }
        }
#else
    (void)grp, (void)row_bytes, (void)n_cols, (void)xh, (void)n_tokens;
#endif
}

// ---- prompt products on warpgroup matrix instructions (sm_90a) ----
//
// The same products as forge__k_matmul_staged (f16 activations in the workspace, the weights converted
// by the same readers) on wgmma: warpgroups of 64 rows each (two, or one where the blocks would not
// fill the device) and 128 tokens a block, 64 columns a step, three stages. The converted weights and
// the activations sit in shared memory in the layout the instruction reads without registers (rows of
// 128 bytes, their 16-byte pieces swizzled by the row's index mod 8: forge__wg_desc); each step's
// products run asynchronously while the block copies the next step's activations and converts its
// weights. The products run over the columns in the same order as forge__k_matmul_mma's, 16 at a
// time; on an H100 they gave its bits (test_kernels compares within 1e-5: the instructions do not
// promise the order of their sums). Only machine code built for sm_90a has the instructions (the
// Makefile builds it for -arch=sm_90): forge__wg_takes asks whether the loaded code is that; the
// context's gpu_no_wgmma turns the path off (FORGE_HIP_NO_WGMMA). Measured on an H100 (tests/PERF.md):
// a 512-token prompt of the Llama-3-8B 1.26x (Q8_0) to 1.36x (Q4_K_M) as fast as on the mma.sync tiles.
#if defined(FORGE__MMA_DEVICE) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FORGE__WG_DEVICE 1
#endif
#define FORGE__WG_STAGES 3
#define FORGE__WG_SMEM(BM, BN) ((size_t)FORGE__WG_STAGES * ((BM) + (BN)) * 128 + 1024) // + alignment to 1024 bytes
// Which code the kernels were loaded as: its static shared memory is 16 bytes where the warpgroup
// instructions were compiled in, none elsewhere (forge__wg_takes reads it through the function's
// attributes)
__global__ void forge__k_wg_probe(uint32_t *out) {
#ifdef FORGE__WG_DEVICE
    __shared__ uint32_t mark[4];
    mark[threadIdx.x % 4] = threadIdx.x;
    __syncthreads();
    if (out) out[threadIdx.x] = mark[(threadIdx.x + 1) % 4];
#else
    (void)out;
#endif
}
#ifdef FORGE__WG_DEVICE
// a shared-memory matrix of rows of 128 bytes (64 halves of K), 8-row groups 1024 bytes apart, 128-byte
// swizzle (the 16-byte piece c of row r at c ^ (r % 8)); addr 1024-aligned, plus 32 bytes a k16 step
__device__ __forceinline__ uint64_t forge__wg_desc(uint32_t addr) {
    return (uint64_t)((addr & 0x3ffffu) >> 4) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}
__device__ __forceinline__ void forge__wg_fence_smem(void) { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void forge__wg_arrive(void) { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void forge__wg_commit(void) { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void forge__wg_wait(void) { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
// forge__copy16_async on a shared address already in hand: converting the generic pointer back per
// copy measured 2% slower on the 8B's Q4_0 prompt (H100)
__device__ __forceinline__ void forge__wg_copy16(uint32_t dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(__cvta_generic_to_global(src)) : "memory");
}
__device__ __forceinline__ void forge__st_shared128(uint32_t a, const uint32_t v[4]) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(a), "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3]) : "memory");
}
// d (64 rows x 128 tokens, f32) += a (64 x 16, f16, K-major) b (16 x 128, K-major); d[4j + k]: row
// 16 (warp % 4) + lane / 4 + 8 (k / 2), token 8j + 2 (lane % 4) + k % 2
__device__ __forceinline__ void forge__wg_mma128(float *d, uint64_t a, uint64_t b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                 "%64, %65, 1, 1, 1, 0, 0;\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]),
                   "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),
                   "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
                   "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
                   "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]),
                   "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]),
                   "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(a), "l"(b));
}
#endif

// y = W x (+ bias) for the block's 64 WG rows and 128 tokens (grp and the rest as forge__k_matmul_staged;
// n_cols a multiple of 64). Dynamic shared memory FORGE__WG_SMEM(64 WG, 128): two blocks a
// multiprocessor. Step s: its products issued on slot s % 3, then step s + 1's activations copied and
// weights converted into slot (s + 1) % 3 (their raw units loaded a step before), step s + 2's units
// loaded. A slot is written only after every warpgroup has waited for the products that read it: the
// wait at the end of step s - 1 leaves at most step s - 1's in flight, and the barrier of step s
// follows every thread's wait, so step s - 2's slot, (s + 1) % 3, is free.
template <class H, int WG>
__global__ void __launch_bounds__(128 * WG, 2)
forge__k_matmul_wg(const forge__mh_group grp, size_t row_bytes, uint32_t n_cols, const uint16_t *__restrict__ xh, uint32_t n_tokens) {
#ifdef FORGE__WG_DEVICE
    constexpr int BM = 64 * WG, BN = 128, THREADS = 128 * WG, S = FORGE__WG_STAGES;
    constexpr int TASKS = 2 * BM / THREADS, CHUNKS = BN * 8 / THREADS; // units and 16-byte activation pieces a thread a step
    constexpr uint32_t A_BYTES = BM * 128, STAGE = (BM + BN) * 128;
    static_assert(TASKS * THREADS == 2 * BM && CHUNKS * THREADS == BN * 8 && S == 3, "whole tasks a thread; the slots above");
    extern __shared__ __align__(16) uint8_t forge__wg_smem[];
    const uint32_t base = ((uint32_t)__cvta_generic_to_shared(forge__wg_smem) + 1023u) & ~1023u;
    const uint32_t m = blockIdx.y >= grp.first[2] ? 2u : blockIdx.y >= grp.first[1] ? 1u : 0u;
    const uint8_t *__restrict__ w = m == 2 ? grp.w[2] : m == 1 ? grp.w[1] : grp.w[0];
    float *__restrict__ y = m == 2 ? grp.y[2] : m == 1 ? grp.y[1] : grp.y[0];
    const float *__restrict__ bias = m == 2 ? grp.bias[2] : m == 1 ? grp.bias[1] : grp.bias[0];
    const uint32_t n_rows = m == 2 ? grp.n_rows[2] : m == 1 ? grp.n_rows[1] : grp.n_rows[0];
    const uint32_t first = m == 2 ? grp.first[2] : m == 1 ? grp.first[1] : grp.first[0];
    const uint32_t tid = threadIdx.x, wg = tid / 128;
    const uint32_t tok0 = blockIdx.x * BN, row0 = (blockIdx.y - first) * BM, n_steps = n_cols / 64;
    // task = tid + i THREADS: row task / 2, unit task % 2 of the step (its 16-byte pieces 4 (task % 2)
    // .. + 3); out-of-range rows and tokens read the last valid one, never stored
    const uint8_t *rows[TASKS];
#pragma unroll
    for (int i = 0; i < TASKS; i++) rows[i] = w + (size_t)min(row0 + (tid + i * THREADS) / 2, n_rows - 1) * row_bytes;
    const uint16_t *x_src[CHUNKS]; // piece c: token c / 8, columns 8 (c % 8) of a step
    uint32_t x_off[CHUNKS];
#pragma unroll
    for (int i = 0; i < CHUNKS; i++) {
        const uint32_t c = tid + i * THREADS, t = c / 8, k8 = c % 8;
        x_src[i] = xh + (size_t)min(tok0 + t, n_tokens - 1) * n_cols + 8 * k8;
        x_off[i] = A_BYTES + t * 128 + ((k8 ^ (t % 8)) * 16);
    }
    float acc[64];
#pragma unroll
    for (int i = 0; i < 64; i++) acc[i] = 0.0f;
    typename H::raw raw[TASKS][2];
    auto load = [&](uint32_t step) {
#pragma unroll
        for (int i = 0; i < TASKS; i++) {
            const uint32_t u = 2 * step + (tid + i * THREADS) % 2;
            H::load(rows[i], u, 0, n_cols, raw[i][0]), H::load(rows[i], u, 1, n_cols, raw[i][1]);
        }
    };
    auto convert = [&](uint32_t step) {
        const uint32_t slot = base + (step % S) * STAGE;
#pragma unroll
        for (int i = 0; i < TASKS; i++) {
            const uint32_t task = tid + i * THREADS, row = task / 2, u = 2 * step + task % 2;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                uint32_t v[8];
                H::convert(raw[i][h], u, h, v);
                const uint32_t c = 4 * (task % 2) + 2 * h;
                forge__st_shared128(slot + row * 128 + ((c ^ (row % 8)) * 16), v);
                forge__st_shared128(slot + row * 128 + (((c + 1) ^ (row % 8)) * 16), v + 4);
            }
        }
    };
    auto copy = [&](uint32_t step) {
        const uint32_t slot = base + (step % S) * STAGE;
#pragma unroll
        for (int i = 0; i < CHUNKS; i++) forge__wg_copy16(slot + x_off[i], x_src[i] + (size_t)64 * step);
        forge__copy_commit();
    };
    copy(0);
    load(0);
    convert(0);
    if (n_steps > 1) load(1);
    for (uint32_t step = 0; step < n_steps; step++) {
        forge__copy_keep<0>();  // this thread's copies of this step have landed
        forge__wg_fence_smem(); // its shared stores and copies are visible to the matrix instructions
        __syncthreads();
        const uint32_t slot = base + (step % S) * STAGE;
        forge__wg_arrive();
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            forge__wg_mma128(acc, forge__wg_desc(slot + wg * 64 * 128 + 32 * kk), forge__wg_desc(slot + A_BYTES + 32 * kk));
        forge__wg_commit();
        if (step + 1 < n_steps) {
            copy(step + 1);
            convert(step + 1);
            if (step + 2 < n_steps) load(step + 2);
        }
        forge__wg_wait<1>();
    }
    forge__wg_wait<0>();
    const uint32_t lane = tid % 32, warp = (tid % 128) / 32;
#pragma unroll
    for (int k2 = 0; k2 < 2; k2++) {
        const uint32_t r = row0 + wg * 64 + warp * 16 + lane / 4 + 8 * k2;
        if (r >= n_rows) continue;
        const float add = bias ? bias[r] : 0.0f;
#pragma unroll
        for (int j = 0; j < 16; j++)
#pragma unroll
            for (int k1 = 0; k1 < 2; k1++) {
                const uint32_t t = tok0 + 8 * j + 2 * (lane % 4) + k1;
                if (t < n_tokens) y[(size_t)t * n_rows + r] = acc[4 * j + 2 * k2 + k1] + add;
            }
    }
#else
    (void)grp, (void)row_bytes, (void)n_cols, (void)xh, (void)n_tokens;
#endif
}

// One tile's launch over the first n products of grp (its first[] set here); with grp NULL, only
// whether the kernel may take its shared memory on this device (asked once a device).
template <class H, int WM, int WN, int NT, int KU, int S>
static int forge__mms_run(forge__mh_group *grp, uint32_t n, size_t row_bytes, uint32_t n_cols, const uint16_t *xh, uint32_t n_tokens,
                          hipStream_t s) {
    static std::atomic<unsigned long long> known;
    constexpr int BM = 64 * WM, BN = 8 * NT * WN;
    if (!grp) return forge__stage_allow(forge__k_matmul_staged<H, WM, WN, NT, KU, S>, known);
    const dim3 grid((n_tokens + BN - 1) / BN, forge__mh_group_blocks(*grp, n, BM));
    forge__launch_smem(0, forge__k_matmul_staged<H, WM, WN, NT, KU, S>, grid, dim3(32 * WM * WN), FORGE__MMS_SMEM(BM, BN, KU, S), s, *grp,
                       row_bytes, n_cols, xh, n_tokens);
    return 1;
}

// The warpgroup kernel's launch, as forge__mms_run's
template <class H, int WG>
static int forge__mmw_run(forge__mh_group *grp, uint32_t n, size_t row_bytes, uint32_t n_cols, const uint16_t *xh, uint32_t n_tokens,
                          hipStream_t s) {
    static std::atomic<unsigned long long> known;
    if (!grp) return forge__stage_allow(forge__k_matmul_wg<H, WG>, known);
    const dim3 grid((n_tokens + 127) / 128, forge__mh_group_blocks(*grp, n, 64 * WG));
    forge__launch_smem(0, forge__k_matmul_wg<H, WG>, grid, dim3(128 * WG), FORGE__WG_SMEM(64 * WG, 128), s, *grp, row_bytes, n_cols, xh,
                       n_tokens);
    return 1;
}

// Whether the kernels loaded for the current device hold the warpgroup instructions (sm_90a code:
// forge__k_wg_probe's shared memory), asked once a device (forge__device_once), the calling thread's
// switches allow them (FORGE_HIP_NO_WGMMA) and the warpgroup kernel takes n_cols (a multiple of 64)
static bool forge__wg_ask(int) {
    cudaFuncAttributes fa;
    return cudaFuncGetAttributes(&fa, forge__k_wg_probe) == cudaSuccess && fa.sharedSizeBytes > 0;
}
static int forge__wg_takes(uint32_t n_cols) {
    static std::atomic<int> known[64];
    return n_cols % 64 == 0 && !(forge__hip_switches & FORGE_HIP_NO_WGMMA) && forge__device_once(known, forge__wg_ask);
}

// The tiles, measured at 512 tokens on an H100 (tests/PERF.md): 64 rows x 128 tokens a block, 128
// columns a step, two stages; 64 tokens where those blocks would not fill the multiprocessors (the
// 1024-row k and v: 1.6-1.8x instead of 1.35-1.5x); Q4_K, and Q4_0 / Q8_0 in the device layout, with
// 8192 rows or more 128 x 128 in 2 x 2 warps, 64 columns a step, three stages (gate and up: Q4_K 1.51x
// instead of 1.23x; Q4_0 / Q8_0 215 / 241 us where the file's layout took 320 / 344 on 64 x 128). Q4_0 /
// Q8_0 in the device layout (forge__mms_deep), more than 384 tokens: 128 x 128 from 6144 rows (Q8_0's
// q, k and v 120 instead of 140 us, Q4_0's 110 / 112), and 128 x 128 in 2 x 4 warps, 64 columns a step,
// three stages, for 8192 columns or more where the blocks fill the multiprocessors once (the down
// projection: Q4_0 222 instead of 241 us, Q8_0 244 / 254).
// Where the warpgroup kernel runs (forge__wg_takes: sm_90a code, columns a multiple of 64) it takes every
// product: 128 rows a block, 64 where those blocks would not fill the multiprocessors once (the 8B's o
// and down projections, 128 blocks on an H100's 132: 64 rows there measured 1-1.5% faster than 128).
enum { FORGE__MMS_TILE = 0, FORGE__MMS_NARROW = 1, FORGE__MMS_WIDE = 2, FORGE__MMS_DEEP = 3, FORGE__MMS_WG = 4, FORGE__MMS_WG1 = 5 };
template <class H> static int forge__mms_tile(uint32_t n_rows, uint32_t n_cols, uint32_t n_tokens) {
    if (forge__wg_takes(n_cols))
        return (uint64_t)((n_rows + 127) / 128) * ((n_tokens + 127) / 128) < (uint64_t)forge__hip_sm_count() ? FORGE__MMS_WG1 : FORGE__MMS_WG;
    const bool deep = forge__mms_deep<H>::value && n_tokens > 384 && n_cols % 64 == 0;
    if (forge__mms_wide<H>::value && (n_rows >= 8192 || (deep && n_rows >= 6144)) && n_cols % 64 == 0) return FORGE__MMS_WIDE;
    if (deep && n_cols >= 8192 && (uint64_t)((n_rows + 127) / 128) * ((n_tokens + 127) / 128) * 8 >= (uint64_t)forge__hip_sm_count() * 7)
        return FORGE__MMS_DEEP;
    if (n_cols % 128 != 0) return -1;
    return (uint64_t)((n_rows + 63) / 64) * ((n_tokens + 127) / 128) < (uint64_t)forge__hip_sm_count() ? FORGE__MMS_NARROW : FORGE__MMS_TILE;
}
template <class H>
static int forge__mms_tile_run(int tile, forge__mh_group *grp, uint32_t n, size_t row_bytes, uint32_t n_cols, const uint16_t *xh,
                               uint32_t n_tokens, hipStream_t s) {
    switch (tile) {
    case FORGE__MMS_WG: return forge__mmw_run<H, 2>(grp, n, row_bytes, n_cols, xh, n_tokens, s);
    case FORGE__MMS_WG1: return forge__mmw_run<H, 1>(grp, n, row_bytes, n_cols, xh, n_tokens, s);
    case FORGE__MMS_WIDE: return forge__mms_run<H, 2, 2, 8, 2, 3>(grp, n, row_bytes, n_cols, xh, n_tokens, s);
    case FORGE__MMS_DEEP: return forge__mms_run<H, 2, 4, 4, 2, 3>(grp, n, row_bytes, n_cols, xh, n_tokens, s);
    case FORGE__MMS_NARROW: return forge__mms_run<H, 1, 4, 2, 4, 2>(grp, n, row_bytes, n_cols, xh, n_tokens, s);
    default: return forge__mms_run<H, 1, 4, 4, 4, 2>(grp, n, row_bytes, n_cols, xh, n_tokens, s);
    }
}

// Tokens of n_cols columns whose f16 rows a workspace of ws_bytes holds for the staged products at
// once: a chunk, at most FORGE__MMS_CHUNK.
static uint32_t forge__mms_chunk(uint32_t n_cols, size_t ws_bytes) {
    const size_t fit = n_cols ? ws_bytes / ((size_t)n_cols * 2) : 0;
    return fit < FORGE__MMS_CHUNK ? (uint32_t)fit : FORGE__MMS_CHUNK;
}

// The tile forge__mms_launch runs rows x n_cols products of n_tokens on with a workspace of ws_bytes
// for the f16 activations, in chunks of *chunk tokens; -1 where the staged kernel does not take them
// (too few tokens, a workspace of too few, no matrix units, a shape no tile takes, a tile whose shared
// memory this device refuses).
template <class H> static int forge__mms_plan(uint32_t rows, uint32_t n_cols, uint32_t n_tokens, size_t ws_bytes, uint32_t *chunk) {
    *chunk = forge__mms_chunk(n_cols, ws_bytes);
    if (n_tokens < FORGE__MMS_MIN_TOKENS || *chunk < FORGE__MMS_MIN_TOKENS || !forge__mma_available()) return -1;
    const int tile = forge__mms_tile<H>(rows, n_cols, *chunk < n_tokens ? *chunk : n_tokens);
    return tile >= 0 && forge__mms_tile_run<H>(tile, NULL, 0, 0, 0, NULL, 0, (hipStream_t)0) ? tile : -1;
}

// The prompt products (the first n of grp, one input x, one reader H: q, k and v in one launch) through
// forge__k_matmul_staged with ws (ws_bytes, 16-byte aligned) for the f16 activations, in chunks of as
// many tokens as it holds; 0 (nothing launched) where it does not apply. *form:
// FORGE_HIP_FORM_F16_PROMPT where ws holds x's f16 rows already (all of them in one chunk: they are not
// made again), and so on return where they fit one chunk, else 0.
template <class H>
static int forge__mms_launch(const forge__mh_group &grp, uint32_t n, size_t row_bytes, uint32_t n_cols, const float *x, uint32_t n_tokens,
                             void *ws, size_t ws_bytes, int *form, hipStream_t s) {
    uint32_t rows = 0, chunk;
    for (uint32_t i = 0; i < n; i++) rows += grp.n_rows[i];
    const int tile = ((uintptr_t)ws & 15) != 0 ? -1 : forge__mms_plan<H>(rows, n_cols, n_tokens, ws_bytes, &chunk);
    if (tile < 0) return 0;
    const bool whole = n_tokens <= chunk, made = whole && form && *form == FORGE_HIP_FORM_F16_PROMPT;
    for (uint32_t t0 = 0; t0 < n_tokens; t0 += chunk) {
        const uint32_t c = n_tokens - t0 < chunk ? n_tokens - t0 : chunk;
        const size_t n2 = (size_t)c * n_cols / 2;
        forge__mh_group part = grp; // the chunk's outputs
        for (uint32_t i = 0; i < n; i++) part.y[i] = grp.y[i] + (size_t)t0 * grp.n_rows[i];
        if (!made) forge__k_f16_rows<<<forge__hip_blocks(n2, 256), 256, 0, s>>>(x + (size_t)t0 * n_cols, (uint32_t *)ws, n2);
        forge__mms_tile_run<H>(tile, &part, n, row_bytes, n_cols, (const uint16_t *)ws, c, s);
    }
    if (form) *form = whole ? FORGE_HIP_FORM_F16_PROMPT : 0;
    return 1;
}

// The types the staged kernel takes (the common ones with their own readers)
#define FORGE__MMS_TYPES(X)                                                                              \
    X(FORGE_HIP_Q4_0, forge__h_q4_0) X(FORGE_HIP_Q8_0, forge__h_q8_0) X(FORGE_HIP_Q4_K, forge__h_q4_k)    \
    X(FORGE_HIP_Q6_K, forge__h_q6_k) X(FORGE__HIP_Q6_K_PACKED, forge__h_q6_k_packed)                      \
    X(FORGE__HIP_Q6_K_PACKED4, forge__h_q6_k_packed4) X(FORGE__HIP_Q4_0_PACKED, forge__h_q4_0_packed)   \
    X(FORGE__HIP_Q8_0_PACKED, forge__h_q8_0_packed)

// The first n products of grp, all of type `type`, on the staged kernel in one launch (a chunk), else 0.
static int forge__mms_matmul(uint32_t type, const forge__mh_group &grp, uint32_t n, size_t row_bytes, uint32_t n_cols, const float *x,
                             uint32_t n_tokens, void *ws, size_t ws_bytes, int *form, hipStream_t s) {
    if (!ws) return 0;
    switch (forge__hip_kind(type, n_cols)) {
#define FORGE__MMS_CASE(id, H) \
    case id: return forge__mms_launch<H>(grp, n, row_bytes, n_cols, x, n_tokens, ws, ws_bytes, form, s);
        FORGE__MMS_TYPES(FORGE__MMS_CASE)
#undef FORGE__MMS_CASE
    default: return 0;
    }
}
#endif // FORGE__MMA


#define FORGE__MATVEC_THREADS 256

extern "C" {

// y[t][r] = sum_c W[r][c] x[t][c] (+ bias[r]) for t < n_tokens. W: n_rows rows of n_cols elements of
// GGUF type `type`, stored as in the file (row r at w + r * row_bytes, row_bytes = n_cols /
// block_elems * block_bytes; Q6_K rows, and Q4_0 / Q8_0 rows of 256k elements, in the device layouts
// of >>weights, forge.h's forge__gpu_pack); x f32 [n_tokens][n_cols]; y f32 [n_tokens][n_rows], must not alias x;
// bias f32 [n_rows] or NULL. One token runs the fused decode matvec, more the matrix-unit kernel
// (f16 operands, f32 sums) where it applies, else the tiled kernel.
static int forge__hip_matmul(uint32_t type, const void *w, uint32_t n_rows, uint32_t n_cols, const float *x, float *y,
                             uint32_t n_tokens, const float *bias, float *partial, size_t partial_floats, int q8_rows, void *stream,
                             char *message, size_t message_bytes, int *form = NULL) {
    size_t row_bytes;
    if (forge__hip_weights(type, n_cols, w, &row_bytes, "matmul", message, message_bytes)) return -1;
    if (n_rows == 0 || n_tokens == 0) return 0;
    if (n_tokens > 65535u * FORGE__TILE_TOKENS) return forge__hip_refuse(message, message_bytes, "matmul: too many tokens in one batch");
    hipStream_t s = (hipStream_t)stream;
    const uint8_t *wb = (const uint8_t *)w;
    // a few tokens, each weight read once for all: Q4_K on the f16 matrix units with the weights kept
    // exact and the activations as f16 (forge__mmh_rows), else on 8-bit activations by dp4a
    // (forge__mvq_rows); the activations' form goes into the workspace. q8_rows: 1 the faster for
    // the shape, 2 dp4a, 3 the matrix units (tests).
#ifdef FORGE__MMA
    // Q4_K and Q6_K on the f16 matrix units: the activations' f16 form at the start of the workspace,
    // the parts of split super-blocks after it
    const int path = forge__mh_path(type, n_rows, n_cols, n_tokens, q8_rows), mmh = path == 1, mmh6 = path == 2;
    if ((mmh || mmh6) && partial && FORGE__MH_BYTES((size_t)n_tokens * n_cols) <= partial_floats * sizeof(float)) {
        const uint32_t n = n_tokens * n_cols;
        uint8_t *xh = (uint8_t *)partial;
        const int want = forge__mh_form(path, n_rows, n_tokens); // the staged kernels read the plain form
        if (!form || *form != want) forge__mh_make(x, n, xh, want, s);
        if (form) *form = want;
        const size_t used = (FORGE__MH_BYTES((size_t)n) + 255) & ~(size_t)255;
        const size_t parts_floats = used <= partial_floats * sizeof(float) ? (partial_floats * sizeof(float) - used) / sizeof(float) : 0;
        float *parts = (float *)(xh + used);
        const int staged = want == FORGE_HIP_FORM_F16 && (mmh6 ? forge__mmh6_rows(wb, n_rows, n_cols, xh, n_tokens, y, bias, parts, parts_floats, s)
                                                                : forge__mmh4_rows(wb, row_bytes, n_rows, n_cols, xh, n_tokens, y, bias, parts, parts_floats, s));
        if (staged) return forge__hip_launched("matmul rows launch", message, message_bytes);
        if (mmh && n_tokens <= FORGE__MH_TOKENS) { // also where the staged kernel could not run here
            if (want != FORGE_HIP_FORM_F16_ROWS) forge__mh_make(x, n, xh, FORGE_HIP_FORM_F16_ROWS, s);
            if (form) *form = FORGE_HIP_FORM_F16_ROWS;
            forge__mmh_rows(wb, row_bytes, n_rows, n_cols, xh, n_tokens, y, bias, parts, parts_floats, s);
            return forge__hip_launched("matmul rows launch", message, message_bytes);
        }
    }
#endif
    if (q8_rows && partial && q8_rows != 3 && n_tokens <= forge__mvq_rows_max(type, n_cols) &&
        FORGE__Q8_DS((size_t)n_tokens * n_cols) + (size_t)n_tokens * n_cols / 2 <= partial_floats * sizeof(float)) {
        const uint32_t n = n_tokens * n_cols;
        uint8_t *q8 = (uint8_t *)partial;
        if (!form || *form != FORGE_HIP_FORM_Q8) forge__launch(forge__k_q8_quantize, dim3((n + 255) / 256), dim3(256), s, x, n, q8);
        if (form) *form = FORGE_HIP_FORM_Q8;
        forge__mvq_rows(type, wb, row_bytes, n_rows, n_cols, q8, n_tokens, y, bias, s);
        return forge__hip_launched("matmul rows launch", message, message_bytes);
    }
    const int form_in = form ? *form : 0;
    if (form) *form = 0; // the paths below may use the workspace for their parts
    if (n_tokens == 1) {
        const uint32_t rows_per_block = FORGE__MATVEC_THREADS / (uint32_t)forge__hip_wave_size() * FORGE__MATVEC_ROWS;
        const uint32_t blocks = (n_rows + rows_per_block - 1) / rows_per_block;
        const uint32_t fast_rows = FORGE__MATVEC_THREADS / (uint32_t)forge__hip_wave_size() * FORGE__MV_ROWS;
        const uint32_t fast_blocks = (n_rows + fast_rows - 1) / fast_rows;
        switch (forge__hip_kind(type, n_cols)) {
#define FORGE__LAUNCH_FAST(id, P)                                                                        \
    case id: forge__k_matvec_fast<P><<<fast_blocks, FORGE__MATVEC_THREADS, 0, s>>>(wb, row_bytes, n_rows, n_cols, x, y, bias); \
        return forge__hip_launched("matvec launch", message, message_bytes);
            FORGE__LAUNCH_FAST(FORGE_HIP_Q4_0, forge__p_q4_0)
            FORGE__LAUNCH_FAST(FORGE_HIP_Q8_0, forge__p_q8_0)
            FORGE__LAUNCH_FAST(FORGE_HIP_Q4_K, forge__p_q4_k)
            FORGE__LAUNCH_FAST(FORGE_HIP_Q6_K, forge__p_q6_k)
            FORGE__LAUNCH_FAST(FORGE__HIP_Q6_K_PACKED, forge__p_q6_k_packed)
            FORGE__LAUNCH_FAST(FORGE__HIP_Q6_K_PACKED4, forge__p_q6_k_packed4)
            FORGE__LAUNCH_FAST(FORGE__HIP_Q4_0_PACKED, forge__p_q4_0_packed)
            FORGE__LAUNCH_FAST(FORGE__HIP_Q8_0_PACKED, forge__p_q8_0_packed)
#undef FORGE__LAUNCH_FAST
        default: break;
        }
        switch (type) {
#define FORGE__LAUNCH_MATVEC(id, W)                                                                      \
    case id: forge__k_matvec<W><<<blocks, FORGE__MATVEC_THREADS, 0, s>>>(wb, row_bytes, n_rows, n_cols, x, y, bias); break;
            FORGE__WEIGHT_TYPES(FORGE__LAUNCH_MATVEC)
#undef FORGE__LAUNCH_MATVEC
        }
        return forge__hip_launched("matvec launch", message, message_bytes);
    }
#ifdef FORGE__MMA
    // a prompt with a workspace: its activations staged as f16 (forge__k_matmul_staged)
    int staged_form = form_in;
    if (forge__mms_matmul(type, forge__mh_group_of(wb, y, bias, n_rows), 1, row_bytes, n_cols, x, n_tokens, partial,
                          partial_floats * sizeof(float), form ? &staged_form : NULL, s)) {
        if (form) *form = staged_form;
        return forge__hip_launched("matmul launch", message, message_bytes);
    }
    if (forge__mma_matmul(type, wb, row_bytes, n_rows, n_cols, x, y, n_tokens, bias, s, partial, partial_floats))
        return forge__hip_launched("matmul launch", message, message_bytes);
#else
    (void)partial, (void)partial_floats, (void)form_in;
#endif
    dim3 grid((n_rows + FORGE__TILE_ROWS - 1) / FORGE__TILE_ROWS, (n_tokens + FORGE__TILE_TOKENS - 1) / FORGE__TILE_TOKENS);
    switch (type) {
#define FORGE__LAUNCH_TILED(id, W)                                                                       \
    case id: forge__k_matmul_tiled<W><<<grid, FORGE__TILE_THREADS, 0, s>>>(wb, row_bytes, n_rows, n_cols, x, y, n_tokens, bias); break;
        FORGE__WEIGHT_TYPES(FORGE__LAUNCH_TILED)
#undef FORGE__LAUNCH_TILED
    }
    return forge__hip_launched("matmul launch", message, message_bytes);
}

int forge_hip_matmul(uint32_t type, const void *w, uint32_t n_rows, uint32_t n_cols, const float *x, float *y,
                     uint32_t n_tokens, const float *bias, void *stream, char *message, size_t message_bytes) {
    return forge__hip_matmul(type, w, n_rows, n_cols, x, y, n_tokens, bias, NULL, 0, 0, stream, message, message_bytes);
}

// Device bytes of the workspace that lets forge_hip_matmul_split split the columns of products of up to
// max_rows rows for up to max_tokens tokens as finely as it splits any.
size_t forge_hip_matmul_split_bytes(uint32_t max_rows, uint32_t max_tokens) {
#ifdef FORGE__MMA
    const uint32_t parts_x_tokens = max_tokens * FORGE__MMA_MAX_SPLIT < FORGE__MMA_SPLIT_ROWS ? max_tokens * FORGE__MMA_MAX_SPLIT : FORGE__MMA_SPLIT_ROWS;
    return (size_t)parts_x_tokens * max_rows * sizeof(float);
#else
    (void)max_rows, (void)max_tokens;
    return 0; // no matrix-unit path: nothing is split
#endif
}

// Device bytes of the workspace with which forge_hip_matmul_split runs prompts of up to max_tokens
// tokens and max_cols columns with their activations staged as f16 (more than 64 tokens: one copy of
// up to 512 tokens' activations in f16; longer prompts go through it in chunks); 0 where that path
// does not exist (AMD, builds without the matrix-unit path) or max_tokens is 64 or fewer.
size_t forge_hip_prompt_bytes(uint32_t max_tokens, uint32_t max_cols) {
#ifdef FORGE__MMA
    if (max_tokens < FORGE__MMS_MIN_TOKENS) return 0;
    return (size_t)(max_tokens < FORGE__MMS_CHUNK ? max_tokens : FORGE__MMS_CHUNK) * max_cols * 2;
#else
    (void)max_tokens, (void)max_cols;
    return 0;
#endif
}

// forge_hip_matmul with a workspace (device memory, at least 4-byte aligned): where the matrix-unit
// grid would leave the device mostly idle (few tokens), the columns are split among several blocks,
// their parts written there and summed in a fixed order (the same result on every run; not the same
// rounding as the unsplit sum). A smaller workspace splits less; none, not at all. More than 64
// tokens (a prompt) with a 16-byte aligned workspace of at least 65 tokens' activations in f16
// (forge_hip_prompt_bytes) stage the activations there as f16 (the same results as without it, faster:
// Q4_0, Q8_0, Q4_K, Q6_K with columns a multiple of 128, Q4_K of 8192 rows or more of 64).
int forge_hip_matmul_split(uint32_t type, const void *w, uint32_t n_rows, uint32_t n_cols, const float *x, float *y,
                           uint32_t n_tokens, const float *bias, void *workspace, size_t workspace_bytes, void *stream,
                           char *message, size_t message_bytes) {
    return forge__hip_matmul(type, w, n_rows, n_cols, x, y, n_tokens, bias, (float *)workspace, workspace ? workspace_bytes / sizeof(float) : 0,
                             0, stream, message, message_bytes);
}

// forge_hip_matmul_split for the products of a prompt that read the same x in a row (q, k and v; gate
// and up): *form is FORGE_HIP_FORM_F16_PROMPT where the workspace holds x's f16 rows already (made by
// the product before, or by forge_hip_add_rmsnorm), which are then not made again, and is set to what
// it holds after the call (0: nothing the next product can take); the caller sets it to 0 whenever x
// or the workspace changes.
int forge_hip_matmul_prompt(uint32_t type, const void *w, uint32_t n_rows, uint32_t n_cols, const float *x, float *y, uint32_t n_tokens,
                            const float *bias, void *workspace, size_t workspace_bytes, int *form, void *stream, char *message,
                            size_t message_bytes) {
    return forge__hip_matmul(type, w, n_rows, n_cols, x, y, n_tokens, bias, (float *)workspace, workspace ? workspace_bytes / sizeof(float) : 0,
                             0, stream, message, message_bytes, form);
}

// forge_hip_matmul_prompt for n (1 to 3) products of the same x of n_cols columns (q, k and v; gate and
// up; the type and rows of each in p, and its output and bias): two or more of one type that the
// staged kernel takes run in one launch, their blocks one after another, on one copy of x's f16 rows;
// the others each as forge_hip_matmul_prompt runs it; *form as forge_hip_matmul_prompt's. The same
// bits as each alone (the same sums in the same order: tests/test_kernels.c).
int forge_hip_matmul_prompt_group(uint32_t n, const forge_hip_product *p, uint32_t n_cols, const float *x, uint32_t n_tokens,
                                  void *workspace, size_t workspace_bytes, int *form, void *stream, char *message, size_t message_bytes) {
    int done[FORGE__MH_GROUP] = {0, 0, 0};
    uint32_t i, j;
    if (!p || n == 0 || n > FORGE__MH_GROUP) return forge__hip_refuse(message, message_bytes, "matmul prompt group: 1 to 3 products");
#ifdef FORGE__MMA
    for (i = 0; i + 1 < n; i++) {
        uint32_t idx[FORGE__MH_GROUP], k = 0;
        size_t row_bytes = 0;
        forge__mh_group grp;
        if (done[i]) continue;
        for (j = i; j < n; j++)
            if (!done[j] && forge__hip_kind(p[j].type, n_cols) == forge__hip_kind(p[i].type, n_cols)) idx[k++] = j;
        if (k < 2) continue; // alone, below
        memset(&grp, 0, sizeof grp);
        for (j = 0; j < k; j++) {
            const forge_hip_product *one = &p[idx[j]];
            if (forge__hip_weights(one->type, n_cols, one->w, &row_bytes, "matmul", message, message_bytes)) return -1;
            grp.w[j] = (const uint8_t *)one->w, grp.y[j] = one->y, grp.bias[j] = one->bias, grp.n_rows[j] = one->n_rows;
        }
        int f = form ? *form : 0;
        if (forge__mms_matmul(p[i].type, grp, k, row_bytes, n_cols, x, n_tokens, workspace, workspace_bytes, &f, (hipStream_t)stream)) {
            if (form) *form = f;
            for (j = 0; j < k; j++) done[idx[j]] = 1;
            if (forge__hip_launched("matmul prompt group launch", message, message_bytes)) return -1;
        }
    }
#endif
    for (i = 0; i < n; i++)
        if (!done[i] && forge_hip_matmul_prompt(p[i].type, p[i].w, p[i].n_rows, n_cols, x, p[i].y, n_tokens, p[i].bias, workspace,
                                                workspace_bytes, form, stream, message, message_bytes))
            return -1;
    return 0;
}

// Whether forge_hip_matmul_prompt runs a product of this type and shape (n_rows x n_cols, n_tokens) on
// the staged kernel in one chunk of a 16-byte aligned workspace of workspace_bytes (forge__mms_plan):
// then an input given as FORGE_HIP_FORM_F16_PROMPT is read from the workspace alone, never from x. 0
// elsewhere (AMD).
int forge_hip_prompt_staged(uint32_t type, uint32_t n_rows, uint32_t n_cols, uint32_t n_tokens, size_t workspace_bytes) {
#ifdef FORGE__MMA
    uint32_t chunk;
    if (n_rows == 0) return 0;
    switch (forge__hip_kind(type, n_cols)) {
#define FORGE__STAGED_OK(id, H) \
    case id: return forge__mms_plan<H>(n_rows, n_cols, n_tokens, workspace_bytes, &chunk) >= 0 && n_tokens <= chunk;
        FORGE__MMS_TYPES(FORGE__STAGED_OK)
#undef FORGE__STAGED_OK
    default: return 0;
    }
#else
    (void)type, (void)n_rows, (void)n_cols, (void)n_tokens, (void)workspace_bytes;
    return 0;
#endif
}

// Whether prompt products of n_cols columns run on the warpgroup kernel on the current device with
// the calling thread's switches (forge__k_matmul_wg: sm_90a code, gpu_no_wgmma off, n_cols a multiple
// of 64), where the staged kernel takes them (forge_hip_prompt_staged); its sums are not the bits of
// the other kernels.
int forge_hip_prompt_wgmma(uint32_t n_cols) {
#ifdef FORGE__MMA
    return forge__mma_available() && forge__wg_takes(n_cols);
#else
    (void)n_cols;
    return 0;
#endif
}

// gate[i] = silu(gate[i]) * up[i] for i < n (forge_hip_swiglu's values), written as f16 rows to h16 (n
// halves, as the staged products take FORGE_HIP_FORM_F16_PROMPT input: a prompt's down projection, see
// forge_hip_prompt_staged), and to gate too where keep (else gate is left as it was). n a multiple of 4;
// gate, up and h16 16-byte aligned and apart. NVIDIA builds with the matrix-unit path only: refused
// elsewhere, nothing launched.
int forge_hip_swiglu_f16(float *gate, const float *up, size_t n, void *h16, int keep, void *stream, char *message, size_t message_bytes) {
    if (n == 0) return 0;
    if (n % 4 != 0 || !gate || !up || !h16 || (((uintptr_t)gate | (uintptr_t)up | (uintptr_t)h16) & 15) != 0)
        return forge__hip_refuse(message, message_bytes, "swiglu f16: n a multiple of 4 and 16-byte aligned buffers");
#ifdef FORGE__MMA
    forge__launch(forge__k_swiglu_f16, dim3(forge__hip_blocks(n / 4, 256)), dim3(256), (hipStream_t)stream, gate, up, (uint2 *)h16, n / 4, keep);
    return forge__hip_launched("swiglu f16 launch", message, message_bytes);
#else
    (void)keep, (void)stream;
    return forge__hip_refuse(message, message_bytes, "swiglu f16: this build has no matrix-unit kernels");
#endif
}

// Whether a workspace of workspace_bytes holds the f16 rows of n_tokens x n_cols activations that
// forge_hip_matmul_prompt's staged products take in one piece (FORGE_HIP_FORM_F16_PROMPT): more than
// 64 tokens, at most one chunk of them (forge__mms_launch's whole batch); 0 where there is no staged
// path (AMD).
int forge_hip_prompt_form_ok(uint32_t n_tokens, uint32_t n_cols, size_t workspace_bytes) {
#ifdef FORGE__MMA
    return n_cols % 32 == 0 && n_tokens >= FORGE__MMS_MIN_TOKENS && n_tokens <= forge__mms_chunk(n_cols, workspace_bytes);
#else
    (void)n_tokens, (void)n_cols, (void)workspace_bytes;
    return 0;
#endif
}

// forge_hip_matmul_split for the step of several sequences on 8-bit activations: a few tokens of a
// type with an 8-bit decode reader (columns a multiple of 32) are rounded as the decode step rounds
// one token, into the workspace (which must then hold forge_hip_rows_bytes(n_tokens * n_cols)), and
// each weight is read once for all of them: by dp4a up to 16 tokens of Q4_0 and Q8_0, 12 of Q6_K (8
// where the matrix units take it) and 7 of Q4_K; on the f16 matrix units, the activations as f16 (no
// 8-bit rounding there), Q4_K from FORGE__MH_MIN (8) to 32 tokens, and to 64 where the matrix has
// FORGE__MH_STAGED_ROWS rows or more, its weights exact, and Q6_K of 9 to 32 tokens whose rows are
// 16-aligned on the device (a multiple of 2048 columns), its weights rounded once past 2048; anything
// else runs as forge_hip_matmul_split (forge_hip_rows_bytes covers the forms, the split super-blocks'
// parts use what is left).
int forge_hip_matmul_rows_q8(uint32_t type, const void *w, uint32_t n_rows, uint32_t n_cols, const float *x, float *y,
                             uint32_t n_tokens, const float *bias, void *workspace, size_t workspace_bytes, void *stream,
                             char *message, size_t message_bytes) {
    return forge__hip_matmul(type, w, n_rows, n_cols, x, y, n_tokens, bias, (float *)workspace, workspace ? workspace_bytes / sizeof(float) : 0,
                             1, stream, message, message_bytes);
}

// forge_hip_matmul_rows_q8 for products that read the same x in a row (q, k and v; gate and up):
// *form says which form of x the workspace holds already (0 none, FORGE_HIP_FORM_Q8 its 8-bit form,
// FORGE_HIP_FORM_F16 its f16 form with group sums), and is set to what it holds after the call; the
// caller sets it to 0 whenever x or the workspace changes. A form found there is not made again.
int forge_hip_matmul_rows_q8_form(uint32_t type, const void *w, uint32_t n_rows, uint32_t n_cols, const float *x, float *y,
                                  uint32_t n_tokens, const float *bias, void *workspace, size_t workspace_bytes, int *form, void *stream,
                                  char *message, size_t message_bytes) {
    return forge__hip_matmul(type, w, n_rows, n_cols, x, y, n_tokens, bias, (float *)workspace, workspace ? workspace_bytes / sizeof(float) : 0,
                             1, stream, message, message_bytes, form);
}

// forge_hip_matmul_rows_q8_form for n (1 to 3) products of the same x of n_cols columns (q, k and v;
// gate and up; the type and rows of each in p, and its output and bias): two or more that would each
// run on forge__k_mmh_rows (Q4_K of FORGE__MH_MIN to FORGE__MH_TOKENS tokens, off the staged kernel)
// run in one launch, their blocks one after another (one whose rows are not a multiple of 32 last:
// only one such), on the one f16 form; then two or more that would each run on forge__k_mmh4_rows
// (Q4_K of 17 to 64 tokens, 4096 rows or more) in one launch the same way (128-row blocks), none of
// them split (the blocks of both fill the device: the Llama-3-8B's gate and up at 64 tokens as 224
// blocks instead of 2 x 112 split in two and summed); the others each as
// forge_hip_matmul_rows_q8_form runs it.
int forge_hip_matmul_rows_q8_group(uint32_t n, const forge_hip_product *p, uint32_t n_cols, const float *x, uint32_t n_tokens,
                                   void *workspace, size_t workspace_bytes, int *form, void *stream, char *message, size_t message_bytes) {
    int taken[FORGE__MH_GROUP] = {0, 0, 0};
    uint32_t i;
    if (!p || n == 0 || n > FORGE__MH_GROUP) return forge__hip_refuse(message, message_bytes, "matmul group: 1 to 3 products");
#ifdef FORGE__MMA
    uint32_t order[FORGE__MH_GROUP], together;
    int staged;
    for (staged = 0; staged < 2; staged++) /* those on forge__k_mmh_rows together, then those on forge__k_mmh4_rows */
        if (n >= 2 && workspace && FORGE__MH_BYTES((size_t)n_tokens * n_cols) <= workspace_bytes &&
            (together = forge__mh_group_pick(n, p, n_cols, n_tokens, staged, order, taken)) >= 2) {
            forge__mh_group grp;
            size_t row_bytes = 0;
            const uint32_t elems = n_tokens * n_cols;
            const int want = staged ? FORGE_HIP_FORM_F16 : FORGE_HIP_FORM_F16_ROWS;
            uint8_t *xh = (uint8_t *)workspace;
            hipStream_t s = (hipStream_t)stream;
            memset(&grp, 0, sizeof grp);
            for (i = 0; i < together; i++) {
                const forge_hip_product *one = &p[order[i]];
                if (forge__hip_weights(one->type, n_cols, one->w, &row_bytes, "matmul", message, message_bytes)) return -1;
                grp.w[i] = (const uint8_t *)one->w, grp.y[i] = one->y, grp.bias[i] = one->bias, grp.n_rows[i] = one->n_rows;
            }
            if (!form || *form != want) forge__mh_make(x, elems, xh, want, s);
            if (form) *form = want;
            if (!staged) forge__mmh_rows_group(grp, together, row_bytes, n_cols, xh, n_tokens, NULL, 0, s);
            else if (!forge__mmh4_rows_group(grp, together, row_bytes, n_cols, xh, n_tokens, NULL, 0, s))
                for (i = 0; i < together; i++) taken[order[i]] = 0; /* the staged kernel cannot run here: each alone below */
            if (forge__hip_launched("matmul group launch", message, message_bytes)) return -1;
        }
#endif
    for (i = 0; i < n; i++)
        if (!taken[i] && forge_hip_matmul_rows_q8_form(p[i].type, p[i].w, p[i].n_rows, n_cols, x, p[i].y, n_tokens, p[i].bias, workspace,
                                                       workspace_bytes, form, stream, message, message_bytes))
            return -1;
    return 0;
}

// The f16 form (FORGE_HIP_FORM_F16_ROWS or FORGE_HIP_FORM_F16) that forge_hip_matmul_rows_q8_group
// would first make of x for these products (the form a norm before them can write instead,
// forge_hip_add_rmsnorm), else 0.
int forge_hip_matmul_rows_q8_group_form(uint32_t n, const forge_hip_product *p, uint32_t n_cols, uint32_t n_tokens, size_t workspace_bytes) {
#ifdef FORGE__MMA
    uint32_t order[FORGE__MH_GROUP];
    int taken[FORGE__MH_GROUP];
    if (!p || n == 0 || n > FORGE__MH_GROUP || FORGE__MH_BYTES((size_t)n_tokens * n_cols) > workspace_bytes) return 0;
    // the products together first (on forge__k_mmh_rows, then forge__k_mmh4_rows), else the first one
    // alone, as forge_hip_matmul_rows_q8_group runs them
    taken[0] = taken[1] = taken[2] = 0;
    if (n >= 2 && forge__mh_group_pick(n, p, n_cols, n_tokens, 0, order, taken) >= 2) return FORGE_HIP_FORM_F16_ROWS;
    if (n >= 2 && forge__mh_group_pick(n, p, n_cols, n_tokens, 1, order, taken) >= 2) return FORGE_HIP_FORM_F16;
    const int path = forge__mh_path(p[0].type, p[0].n_rows, n_cols, n_tokens, 1);
    if (path) return forge__mh_form(path, p[0].n_rows, n_tokens);
#else
    (void)n, (void)p, (void)n_cols, (void)n_tokens, (void)workspace_bytes;
#endif
    return 0;
}

// forge_hip_matmul_rows_q8 on one path, for measuring and testing them: 2 dp4a (forge__k_mvq_rows), 3
// the f16 matrix units (forge__k_mmh_rows, forge__k_mmh4_rows, forge__k_mmh6_rows) from one token;
// anything the path does not take runs as forge_hip_matmul_split.
int forge_hip_matmul_rows_q8_path(int path, uint32_t type, const void *w, uint32_t n_rows, uint32_t n_cols, const float *x, float *y,
                                  uint32_t n_tokens, const float *bias, void *workspace, size_t workspace_bytes, void *stream,
                                  char *message, size_t message_bytes) {
    return forge__hip_matmul(type, w, n_rows, n_cols, x, y, n_tokens, bias, (float *)workspace, workspace ? workspace_bytes / sizeof(float) : 0,
                             path == 2 || path == 3 ? path : 1, stream, message, message_bytes);
}

// The decode case alone: y = W x (+ bias) for one token.
int forge_hip_matvec(uint32_t type, const void *w, uint32_t n_rows, uint32_t n_cols, const float *x, float *y,
                     const float *bias, void *stream, char *message, size_t message_bytes) {
    return forge_hip_matmul(type, w, n_rows, n_cols, x, y, 1, bias, stream, message, message_bytes);
}

}  // extern "C"

/* >>rows -------------------------------------------------------------------------------------- */

// dst[t] = row tokens[t] of the embedding matrix, dequantized, times scale. One block per token;
// a token outside the vocabulary (the host checks first) yields a zero row instead of a wild read.
template <class W>
__global__ void forge__k_embed(const uint8_t *__restrict__ table, size_t row_bytes, uint32_t n_vocab, uint32_t n,
                               const int32_t *__restrict__ tokens, float scale, float *__restrict__ dst) {
    const int32_t token = tokens[blockIdx.x];
    const int valid = token >= 0 && (uint32_t)token < n_vocab;
    const uint8_t *row = table + (size_t)(valid ? token : 0) * row_bytes;
    float *out = dst + (size_t)blockIdx.x * n;
    const uint32_t n_units = forge__fast_units<W>(n);
    for (uint32_t u = threadIdx.x; u < n_units; u += blockDim.x) {
        float v[32];
        W::unit(row, u, n, v);
#pragma unroll
        for (int k = 0; k < 32; k++) out[u * 32 + k] = valid ? v[k] * scale : 0.0f;
    }
    if (W::is_float)
        for (uint32_t c = n_units * 32 + threadIdx.x; c < n; c += blockDim.x) out[c] = valid ? W::elem(row, c) * scale : 0.0f;
}

// y = x / sqrt(mean(x^2) + eps) * w, one block per row (y may be x: each thread rewrites only the
// elements it read). The scale is computed as the CPU does, in double from the float sum.
__global__ void forge__k_rmsnorm(const float *x, const float *__restrict__ w, float *y, uint32_t n, float eps) {
    const float *row = x + (size_t)blockIdx.x * n;
    float *out = y + (size_t)blockIdx.x * n;
    float sum = 0.0f;
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) sum += row[i] * row[i];
    sum = forge__block_sum(sum);
    const float scale = (float)(1.0 / sqrt((double)sum / n + (double)eps));
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) out[i] = row[i] * scale * w[i];
}

// x += r (r not NULL), then y = rmsnorm(x) * w: forge__k_add and forge__k_rmsnorm in one launch, the
// same arithmetic in the same order (the same bits), one block per row. xh (not NULL, n a multiple
// of 32): y's f16 form for the products that read it, as forge__k_mh_prep makes it from y (the
// same bytes; n_rows rows in all), after y is written. E > 0: a thread keeps its E values (n at
// most E x the block) and their weights in registers, the weights asked for before the grid wait;
// E 0: any n, each pass reading the row again. (y's row passed to the form's quads through 16 KB of
// shared memory instead of memory measured 5% slower on the Llama-3-8B at 24 sequences: the
// staged product after it was placed beside the norm's blocks.)
template <int E>
__global__ void forge__k_add_rmsnorm(float *x, const float *__restrict__ r, const float *__restrict__ w, float *y, uint32_t n, float eps,
                                     uint8_t *__restrict__ xh, uint32_t n_rows, uint32_t rows_order) {
    constexpr int K = E > 0 ? E : 1;
    float v[K], wv[K];
    if (E > 0) {
#pragma unroll
        for (int e = 0; e < K; e++) {
            const uint32_t i = threadIdx.x + e * blockDim.x;
            wv[e] = i < n ? w[i] : 0.0f; // no kernel writes the weights
        }
    }
    FORGE__GRID_ENTER();
    float *row = x + (size_t)blockIdx.x * n;
    const float *add = r ? r + (size_t)blockIdx.x * n : NULL;
    float *out = y + (size_t)blockIdx.x * n;
    float sum = 0.0f;
    if (E > 0) {
#pragma unroll
        for (int e = 0; e < K; e++) {
            const uint32_t i = threadIdx.x + e * blockDim.x;
            v[e] = 0.0f;
            if (i < n) {
                v[e] = add ? row[i] + add[i] : row[i];
                if (add) row[i] = v[e];
                sum += v[e] * v[e];
            }
        }
    } else {
        for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
            const float vi = add ? row[i] + add[i] : row[i];
            if (add) row[i] = vi;
            sum += vi * vi;
        }
    }
    sum = forge__block_sum(sum);
    const float scale = (float)(1.0 / sqrt((double)sum / n + (double)eps));
    if (E > 0) {
#pragma unroll
        for (int e = 0; e < K; e++) {
            const uint32_t i = threadIdx.x + e * blockDim.x;
            if (i < n) out[i] = v[e] * scale * wv[e];
        }
    } else {
        for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) out[i] = row[i] * scale * w[i];
    }
#ifdef FORGE__MMA
    if (!xh) return;
    __syncthreads(); // the quads below read what other threads of the block wrote
    if (rows_order == 2) { // FORGE_HIP_FORM_F16_PROMPT: the row's halves in order, as forge__k_f16_rows rounds them
        uint32_t *h = (uint32_t *)xh + (size_t)blockIdx.x * (n / 2);
        for (uint32_t i = threadIdx.x; i < n / 2; i += blockDim.x) {
            const float2 p = *(const float2 *)(out + 2 * i);
            h[i] = forge__h2_pack(p.x, p.y);
        }
        return;
    }
    const size_t all = (size_t)n_rows * n, first = (size_t)blockIdx.x * (n / 4);
    for (uint32_t base = 0; base < n / 4; base += blockDim.x) { // whole warps: a group's 8 lanes share its sum
        const uint32_t qd = base + threadIdx.x;
        const bool in = qd < n / 4;
        forge__mh_quad(in ? *(const float4 *)(out + 4 * qd) : make_float4(0.0f, 0.0f, 0.0f, 0.0f), in, first + qd, all, xh, rows_order != 0);
    }
#else
    (void)xh, (void)n_rows, (void)rows_order; // no f16 form without the matrix-unit kernels (forge_hip_add_rmsnorm refuses one)
#endif
}

// Rotary embedding in place over x [n_tokens][n_heads][head_dim], the first n_rot dims of each head.
// One block per token: the angles are computed once per token in double (as the CPU does; pow and
// sin/cos of angles of thousands of radians need it), then applied to every head.
#define FORGE__ROPE_MAX_HALF 256
// Pair i's frequency, base^(-2i / n_rot); the angle at position p is p * freq_scale * that, divided by
// the pair's rope factor where the model has them.
__device__ __forceinline__ double forge__rope_freq(float freq_base, uint32_t i, uint32_t n_rot) {
    return pow((double)freq_base, -2.0 * i / n_rot);
}
// The cosine and sine of a pair's rotation at position p, as every rope launch computes them (the
// same bits wherever the rotation happens): p * freq_scale * freq, divided by the pair's factor where
// the model has them (divide), in float64, rounded to float.
__device__ __forceinline__ void forge__rope_cs(double p, float freq_scale, double freq, bool divide, double factor, float *c, float *s) {
    double theta = p * (double)freq_scale * freq;
    if (divide) theta /= factor;
    *c = (float)cos(theta), *s = (float)sin(theta);
}
// One pair rotated, its roundings spelled out so that forge__k_rope and forge__k_rope_store (prompt
// and decode) give the same bits whatever the compiler would contract.
__device__ __forceinline__ void forge__rope_pair(float x0, float x1, float c, float s, float *y0, float *y1) {
    *y0 = fmaf(x0, c, -(x1 * s));
    *y1 = fmaf(x0, s, x1 * c);
}
// dev_pos (a decode graph's): the first position is read from device memory instead of pos0.
// row_pos (a step of several sequences): token t's position is row_pos[t].
__global__ void forge__k_rope(float *x, uint32_t n_heads, uint32_t head_dim, uint32_t n_rot, int neox, uint32_t pos0,
                              float freq_base, float freq_scale, const float *__restrict__ freq_factors,
                              const uint32_t *__restrict__ dev_pos = NULL, const uint32_t *__restrict__ row_pos = NULL) {
    __shared__ float cos_t[FORGE__ROPE_MAX_HALF], sin_t[FORGE__ROPE_MAX_HALF];
    const uint32_t half = n_rot / 2;
    const double pos = (double)(row_pos ? row_pos[blockIdx.x] : (dev_pos ? *dev_pos : pos0) + blockIdx.x);
    for (uint32_t i = threadIdx.x; i < half; i += blockDim.x)
        forge__rope_cs(pos, freq_scale, forge__rope_freq(freq_base, i, n_rot), freq_factors, freq_factors ? (double)freq_factors[i] : 1.0,
                       &cos_t[i], &sin_t[i]);
    __syncthreads();
    float *token = x + (size_t)blockIdx.x * n_heads * head_dim;
    for (uint32_t k = threadIdx.x; k < n_heads * half; k += blockDim.x) {
        const uint32_t h = k / half, i = k % half;
        float *v = token + (size_t)h * head_dim;
        const uint32_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        const float x0 = v[a], x1 = v[b];
        forge__rope_pair(x0, x1, cos_t[i], sin_t[i], &v[a], &v[b]);
    }
}

__global__ void forge__k_add(float *__restrict__ dst, const float *__restrict__ src, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) dst[i] += src[i];
}

// gate = silu(gate) * up, the same expression as the CPU backend.
__global__ void forge__k_swiglu(float *__restrict__ gate, const float *__restrict__ up, size_t n) {
    FORGE__GRID_ENTER();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

// gelu, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), ggml's constants and grouping.
__device__ __forceinline__ float forge__gelu(float x) {
    return 0.5f * x * (1.0f + tanhf(0.79788456080286535588f * x * (1.0f + 0.044715f * x * x)));
}

// gate = gelu(gate) * up (Gemma's GeGLU).
__global__ void forge__k_geglu(float *__restrict__ gate, const float *__restrict__ up, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        gate[i] = forge__gelu(gate[i]) * up[i];
}

// The row kernels below take a 2D grid: x over the columns of a row, y over the tokens, both strided,
// so no thread divides a flat index by the row width.
#define FORGE__ROW_LOOP(n_tokens, n)                                                                     \
    for (uint32_t t = blockIdx.y; t < (n_tokens); t += gridDim.y)                                      \
        for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += gridDim.x * blockDim.x)

// dst[t][i] = act(src[t][i]) * src[t][n + i]: a fused gate|up projection (Phi-3) split and gated;
// act 0 silu, 1 gelu.
__global__ void forge__k_glu_split(float *__restrict__ dst, const float *__restrict__ src, uint32_t n_tokens, uint32_t n, int act) {
    FORGE__ROW_LOOP(n_tokens, n) {
        const float *row = src + (size_t)t * 2 * n;
        const float g = row[i];
        dst[(size_t)t * n + i] = (act ? forge__gelu(g) : g / (1.0f + expf(-g))) * row[n + i];
    }
}

// dst[t][i] = src[t][offset + i]: one part of a fused QKV row.
__global__ void forge__k_copy_cols(float *__restrict__ dst, const float *__restrict__ src, uint32_t n_tokens, uint32_t src_width,
                                   uint32_t offset, uint32_t n) {
    FORGE__ROW_LOOP(n_tokens, n) dst[(size_t)t * n + i] = src[(size_t)t * src_width + offset + i];
}

// x = cap * tanh(x / cap): Gemma-2's logit soft-cap.
__global__ void forge__k_softcap(float *__restrict__ x, size_t n, float cap) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = cap * tanhf(x[i] / cap);
}

// x[t][i] *= sigmoid(s[t]): the shared expert's gate, one scalar per token.
__global__ void forge__k_sigmoid_scale(float *__restrict__ x, const float *__restrict__ s, uint32_t n_tokens, uint32_t n) {
    FORGE__ROW_LOOP(n_tokens, n) x[(size_t)t * n + i] *= 1.0f / (1.0f + expf(-s[t]));
}

// Index of the largest value (the first one on ties; NaN never wins), in two launches: each of
// FORGE__ARGMAX_PARTS blocks scans a strided slice and reduces it by a tree in shared memory that
// prefers the lower index on equal values, writing one (value, index) pair; one block then reduces
// the pairs the same way. The same answer as one pass, in any order of the blocks.
#define FORGE__ARGMAX_THREADS 256
#define FORGE__ARGMAX_PARTS 128
__global__ void __launch_bounds__(FORGE__ARGMAX_THREADS)
forge__k_argmax(const float *__restrict__ x, const uint32_t *__restrict__ x_index, uint32_t n, float *part_value, uint32_t *part_index,
                int32_t *out) {
    FORGE__GRID_ENTER();
    __shared__ float best_value[FORGE__ARGMAX_THREADS];
    __shared__ uint32_t best_index[FORGE__ARGMAX_THREADS];
    float best = -INFINITY;
    uint32_t index = UINT32_MAX;
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const float v = x[i];
        const uint32_t at = x_index ? x_index[i] : i; // partial pairs: indices ascend with i, UINT32_MAX for none
        if (at != UINT32_MAX && (v > best || (index == UINT32_MAX && v == best))) best = v, index = at;
    }
    best_value[threadIdx.x] = best;
    best_index[threadIdx.x] = index;
    __syncthreads();
    for (uint32_t stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) {
            float other = best_value[threadIdx.x + stride];
            uint32_t other_index = best_index[threadIdx.x + stride];
            if (other_index != UINT32_MAX &&
                (best_index[threadIdx.x] == UINT32_MAX || other > best_value[threadIdx.x] ||
                 (other == best_value[threadIdx.x] && other_index < best_index[threadIdx.x]))) {
                best_value[threadIdx.x] = other;
                best_index[threadIdx.x] = other_index;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        if (out) *out = best_index[0] == UINT32_MAX ? 0 : (int32_t)best_index[0];
        else part_value[blockIdx.x] = best_value[0], part_index[blockIdx.x] = best_index[0];
    }
}

// A grid for n elements with a grid-stride loop: enough blocks to fill any device, no more.
static unsigned forge__hip_blocks(size_t n, unsigned threads) {
    size_t blocks = (n + threads - 1) / threads;
    return (unsigned)(blocks < 4096 ? (blocks ? blocks : 1) : 4096);
}

// The 2D grid of FORGE__ROW_LOOP for n_tokens rows of n: 256 threads a block.
static dim3 forge__hip_row_grid(uint32_t n_tokens, uint32_t n) {
    const unsigned x = forge__hip_blocks(n, 256), y = n_tokens < 65535u ? n_tokens : 65535u;
    return dim3(x, y ? y : 1);
}

extern "C" {

// dst[t][0..n) = token_embd row tokens[t] (any weight type) * scale, t < n_tokens; tokens is a
// device array of int32; a token outside [0, n_vocab) gives a zero row.
int forge_hip_embed(uint32_t type, const void *table, uint32_t n_vocab, uint32_t n, const int32_t *tokens, uint32_t n_tokens,
                    float scale, float *dst, void *stream, char *message, size_t message_bytes) {
    size_t row_bytes;
    if (forge__hip_weights(type, n, table, &row_bytes, "embed", message, message_bytes)) return -1;
    if (n_tokens == 0) return 0;
    hipStream_t s = (hipStream_t)stream;
    switch (type) {
#define FORGE__LAUNCH_EMBED(id, W)                                                                       \
    case id: forge__k_embed<W><<<n_tokens, 128, 0, s>>>((const uint8_t *)table, row_bytes, n_vocab, n, tokens, scale, dst); break;
        FORGE__WEIGHT_TYPES(FORGE__LAUNCH_EMBED)
#undef FORGE__LAUNCH_EMBED
    }
    return forge__hip_launched("embed launch", message, message_bytes);
}

// The threads of a norm's block, one block a row, by the row's length (the step of a few sequences
// runs few rows of 2048 or more: 256 threads took 9.5 us for 16 rows of 4096 on an H100, each thread
// 16 loads in turn). forge_hip_rmsnorm and forge_hip_add_rmsnorm both take it: the same sums.
static uint32_t forge__norm_threads(uint32_t n) { return n <= 128 ? 64 : n <= 1024 ? 256 : n <= 2048 ? 512 : 1024; }

// y[r] = rmsnorm(x[r]) * w for n_rows rows of n floats; y may equal x. Per-head norm (Q/K norm) is
// the same op over n_tokens * n_heads rows of head_dim: see forge_hip_headnorm.
int forge_hip_rmsnorm(const float *x, const float *w, float *y, uint32_t n_rows, uint32_t n, float eps, void *stream,
                      char *message, size_t message_bytes) {
    if (n_rows == 0 || n == 0) return 0;
    if (n_rows > 2147483647u) return forge__hip_refuse(message, message_bytes, "rmsnorm: too many rows");
    forge__k_rmsnorm<<<n_rows, forge__norm_threads(n), 0, (hipStream_t)stream>>>(x, w, y, n, eps);
    return forge__hip_launched("rmsnorm launch", message, message_bytes);
}

// forge_hip_add(x, r, n_rows * n) then forge_hip_rmsnorm(x, w, y, n_rows, n, eps) in one launch, the
// same bits (the residual add and the norm that reads it; y may equal x); r NULL: the norm alone.
// form (not NULL): also y's f16 form there, of type form_type (FORGE_HIP_FORM_F16, or
// FORGE_HIP_FORM_F16_ROWS: n then a multiple of 256), the bytes forge_hip_matmul_rows_q8_form would
// make of y before a product on the f16 matrix units that reads that form (it then finds it made);
// or FORGE_HIP_FORM_F16_PROMPT, the f16 rows forge_hip_matmul_prompt would make of y before a staged
// product (n_rows x n halves, forge_hip_prompt_form_ok); n a multiple of 32, y not x.
int forge_hip_add_rmsnorm(float *x, const float *r, const float *w, float *y, uint32_t n_rows, uint32_t n, float eps, void *form,
                          int form_type, void *stream, char *message, size_t message_bytes) {
    if (n_rows == 0 || n == 0) return 0;
    if (n_rows > 2147483647u) return forge__hip_refuse(message, message_bytes, "add_rmsnorm: too many rows");
    if (form && (n % 32 || y == x)) return forge__hip_refuse(message, message_bytes, "add_rmsnorm: an f16 form needs rows of 32s, y apart");
    if (form && form_type != FORGE_HIP_FORM_F16 && form_type != FORGE_HIP_FORM_F16_PROMPT && !(form_type == FORGE_HIP_FORM_F16_ROWS && n % 256 == 0))
        return forge__hip_refuse(message, message_bytes,
                                 "add_rmsnorm: the form is FORGE_HIP_FORM_F16 or _PROMPT, or FORGE_HIP_FORM_F16_ROWS of rows of 256s");
#ifndef FORGE__MMA
    if (form) return forge__hip_refuse(message, message_bytes, "add_rmsnorm: this build has no f16 form (no matrix-unit kernels)");
#endif
    // values in registers where a thread's share is at most 8
    const uint32_t threads = forge__norm_threads(n), rows_order = form_type == FORGE_HIP_FORM_F16_ROWS ? 1 : form_type == FORGE_HIP_FORM_F16_PROMPT ? 2 : 0;
    const hipStream_t s = (hipStream_t)stream;
    if (n <= 4 * threads)
        forge__launch(forge__k_add_rmsnorm<4>, dim3(n_rows), dim3(threads), s, x, r, w, y, n, eps, (uint8_t *)form, n_rows, rows_order);
    else if (n <= 8 * threads)
        forge__launch(forge__k_add_rmsnorm<8>, dim3(n_rows), dim3(threads), s, x, r, w, y, n, eps, (uint8_t *)form, n_rows, rows_order);
    else
        forge__launch(forge__k_add_rmsnorm<0>, dim3(n_rows), dim3(threads), s, x, r, w, y, n, eps, (uint8_t *)form, n_rows, rows_order);
    return forge__hip_launched("add_rmsnorm launch", message, message_bytes);
}

// In place over x [n_tokens][n_heads][head_dim]: each head normalized with the same w [head_dim].
int forge_hip_headnorm(float *x, const float *w, uint32_t n_tokens, uint32_t n_heads, uint32_t head_dim, float eps,
                       void *stream, char *message, size_t message_bytes) {
    return forge_hip_rmsnorm(x, w, x, n_tokens * n_heads, head_dim, eps, stream, message, message_bytes);
}

// Rotary embedding in place over x [n_tokens][n_heads][head_dim] at positions pos0 .. pos0+n_tokens-1.
// mode: 0 NORM (adjacent pairs), 2 NEOX (halves), forge_rope_type's values. Angle of pair i:
// pos * freq_scale * freq_base^(-2i/n_rot) / freq_factors[i] (freq_factors: device f32 [n_rot/2] or NULL).
static int forge__hip_rope(float *x, uint32_t n_tokens, uint32_t n_heads, uint32_t head_dim, uint32_t n_rot, int mode,
                           uint32_t pos0, const uint32_t *dev_pos, float freq_base, float freq_scale, const float *freq_factors,
                           void *stream, char *message, size_t message_bytes, const uint32_t *row_pos = NULL) {
    if (n_rot % 2 != 0 || n_rot > head_dim || n_rot / 2 > FORGE__ROPE_MAX_HALF || (mode != 0 && mode != 2)) {
        if (message && message_bytes)
            snprintf(message, message_bytes, "rope: n_rot %u (head_dim %u, mode %d) is not even, <= head_dim and <= %d with mode 0 or 2",
                     n_rot, head_dim, mode, 2 * FORGE__ROPE_MAX_HALF);
        return -1;
    }
    if (n_tokens == 0 || n_rot == 0) return 0;
    forge__k_rope<<<n_tokens, 256, 0, (hipStream_t)stream>>>(x, n_heads, head_dim, n_rot, mode == 2, pos0, freq_base,
                                                                freq_scale, freq_factors, dev_pos, row_pos);
    return forge__hip_launched("rope launch", message, message_bytes);
}

// forge_hip_rope with each token's position read from device memory: token t at row_pos[t] (a step
// of several sequences, each row at its own sequence's next position).
int forge_hip_rope_rows(float *x, uint32_t n_tokens, uint32_t n_heads, uint32_t head_dim, uint32_t n_rot, int mode,
                        const uint32_t *row_pos, float freq_base, float freq_scale, const float *freq_factors, void *stream,
                        char *message, size_t message_bytes) {
    if (!row_pos) return forge__hip_refuse(message, message_bytes, "rope_rows: no row positions");
    return forge__hip_rope(x, n_tokens, n_heads, head_dim, n_rot, mode, 0, NULL, freq_base, freq_scale, freq_factors, stream,
                           message, message_bytes, row_pos);
}

int forge_hip_rope(float *x, uint32_t n_tokens, uint32_t n_heads, uint32_t head_dim, uint32_t n_rot, int mode,
                   uint32_t pos0, float freq_base, float freq_scale, const float *freq_factors, void *stream,
                   char *message, size_t message_bytes) {
    return forge__hip_rope(x, n_tokens, n_heads, head_dim, n_rot, mode, pos0, NULL, freq_base, freq_scale, freq_factors, stream,
                           message, message_bytes);
}

// forge_hip_rope with the first position read from device memory (*dev_pos, a uint32) when the
// kernel runs: the variant a recorded graph replays at every position.
int forge_hip_rope_at(float *x, uint32_t n_tokens, uint32_t n_heads, uint32_t head_dim, uint32_t n_rot, int mode,
                      const uint32_t *dev_pos, float freq_base, float freq_scale, const float *freq_factors, void *stream,
                      char *message, size_t message_bytes) {
    if (!dev_pos) return forge__hip_refuse(message, message_bytes, "rope_at: no device position");
    return forge__hip_rope(x, n_tokens, n_heads, head_dim, n_rot, mode, 0, dev_pos, freq_base, freq_scale, freq_factors, stream,
                           message, message_bytes);
}

// dst[i] += src[i], i < n.
int forge_hip_add(float *dst, const float *src, size_t n, void *stream, char *message, size_t message_bytes) {
    if (n == 0) return 0;
    forge__k_add<<<forge__hip_blocks(n, 256), 256, 0, (hipStream_t)stream>>>(dst, src, n);
    return forge__hip_launched("add launch", message, message_bytes);
}

// gate[i] = silu(gate[i]) * up[i], i < n.
int forge_hip_swiglu(float *gate, const float *up, size_t n, void *stream, char *message, size_t message_bytes) {
    if (n == 0) return 0;
    forge__launch(forge__k_swiglu, dim3(forge__hip_blocks(n, 256)), dim3(256), (hipStream_t)stream, gate, up, n);
    return forge__hip_launched("swiglu launch", message, message_bytes);
}

// gate[i] = gelu(gate[i]) * up[i], i < n; gelu the tanh form (see forge__gelu).
int forge_hip_geglu(float *gate, const float *up, size_t n, void *stream, char *message, size_t message_bytes) {
    if (n == 0) return 0;
    forge__k_geglu<<<forge__hip_blocks(n, 256), 256, 0, (hipStream_t)stream>>>(gate, up, n);
    return forge__hip_launched("geglu launch", message, message_bytes);
}

// dst[t][i] = act(src[t][i]) * src[t][n + i], i < n, t < n_tokens: src rows are 2n wide (gate, then
// up), dst rows n wide; dst must not overlap src. act 0 silu, 1 gelu (tanh form).
int forge_hip_glu_split(float *dst, const float *src, uint32_t n_tokens, uint32_t n, int act, void *stream, char *message,
                        size_t message_bytes) {
    if (act != 0 && act != 1) {
        if (message && message_bytes) snprintf(message, message_bytes, "glu_split: activation %d is neither 0 (silu) nor 1 (gelu)", act);
        return -1;
    }
    if (n > UINT32_MAX / 2) return forge__hip_refuse(message, message_bytes, "glu_split: rows too wide");
    if (n_tokens == 0 || n == 0) return 0;
    forge__k_glu_split<<<forge__hip_row_grid(n_tokens, n), 256, 0, (hipStream_t)stream>>>(dst, src, n_tokens, n, act);
    return forge__hip_launched("glu_split launch", message, message_bytes);
}

// dst[t][i] = src[t][offset + i], i < n, t < n_tokens: src rows src_width wide, dst rows n wide
// (splitting a fused QKV projection); offset + n <= src_width; dst must not overlap src.
int forge_hip_copy_cols(float *dst, const float *src, uint32_t n_tokens, uint32_t src_width, uint32_t offset, uint32_t n,
                        void *stream, char *message, size_t message_bytes) {
    if (n > src_width || offset > src_width - n) {
        if (message && message_bytes)
            snprintf(message, message_bytes, "copy_cols: columns %u..%u are outside rows of %u", offset, offset + n, src_width);
        return -1;
    }
    if (n_tokens == 0 || n == 0) return 0;
    forge__k_copy_cols<<<forge__hip_row_grid(n_tokens, n), 256, 0, (hipStream_t)stream>>>(dst, src, n_tokens, src_width, offset, n);
    return forge__hip_launched("copy_cols launch", message, message_bytes);
}

// x[i] = cap * tanh(x[i] / cap), i < n; cap > 0.
int forge_hip_softcap(float *x, size_t n, float cap, void *stream, char *message, size_t message_bytes) {
    if (!(cap > 0.0f)) {
        if (message && message_bytes) snprintf(message, message_bytes, "softcap: cap %g is not positive", (double)cap);
        return -1;
    }
    if (n == 0) return 0;
    forge__k_softcap<<<forge__hip_blocks(n, 256), 256, 0, (hipStream_t)stream>>>(x, n, cap);
    return forge__hip_launched("softcap launch", message, message_bytes);
}

// x[t][i] *= 1 / (1 + exp(-s[t])), i < n, t < n_tokens: s holds one value per token.
int forge_hip_sigmoid_scale(float *x, const float *s, uint32_t n_tokens, uint32_t n, void *stream, char *message,
                            size_t message_bytes) {
    if (n_tokens == 0 || n == 0) return 0;
    forge__k_sigmoid_scale<<<forge__hip_row_grid(n_tokens, n), 256, 0, (hipStream_t)stream>>>(x, s, n_tokens, n);
    return forge__hip_launched("sigmoid_scale launch", message, message_bytes);
}

// *out_index (device int32) = index of the largest of x[0..n), the first on ties: greedy decoding
// copies back 4 bytes instead of the vocabulary's logits.
size_t forge_hip_argmax_scratch_bytes(void) { return FORGE__ARGMAX_PARTS * (sizeof(float) + sizeof(uint32_t)); }

// scratch: forge_hip_argmax_scratch_bytes() of device memory, 4-byte aligned.
int forge_hip_argmax(const float *x, uint32_t n, void *scratch, int32_t *out_index, void *stream, char *message, size_t message_bytes) {
    if (n == 0) return forge__hip_refuse(message, message_bytes, "argmax: no values");
    float *part_value = (float *)scratch;
    uint32_t *part_index = (uint32_t *)(part_value + FORGE__ARGMAX_PARTS);
    forge__launch(forge__k_argmax, dim3(FORGE__ARGMAX_PARTS), dim3(FORGE__ARGMAX_THREADS), (hipStream_t)stream, x, (const uint32_t *)NULL, n,
                  part_value, part_index, (int32_t *)NULL);
    forge__launch(forge__k_argmax, dim3(1), dim3(FORGE__ARGMAX_THREADS), (hipStream_t)stream, (const float *)part_value,
                  (const uint32_t *)part_index, (uint32_t)FORGE__ARGMAX_PARTS, (float *)NULL, (uint32_t *)NULL, out_index);
    return forge__hip_launched("argmax launch", message, message_bytes);
}

}  // extern "C"

/* >>kv ---------------------------------------------------------------------------------------- */

// Cache layout: for one layer, K rows at cache_k + (cell * n_head_kv + h) * row_k_bytes and V rows
// likewise at cache_v; a row is one head's vector in the cache type: F32, F16, or blocks of 32 as
// Q8_0 / Q4_0. Position pos lives in cell pos % n_cells, a ring of n_cells rows (a sliding-window
// layer keeps only the window's cells); n_cells 0: cell = pos. A Q8_0 / Q4_0 row holds the same
// bytes as forge.h's CPU rows (forge__kv_encode) in another order: the quants of every block first
// (32 bytes a block for Q8_0, 16 for Q4_0, each block's bytes in their CPU order), then the blocks'
// f16 scales. So a row's quants start where the row starts, and 8 values are one 8-byte load (4-byte
// when the row size is only a multiple of 4) instead of a run of 2-byte loads from 34- or 18-byte
// blocks. The encoders below repeat forge__kv_encode's steps (same divisions, round-to-nearest,
// clamps, no fused multiply-add), so the values and scales are identical.

// Where block `block` of a Q8_0 / Q4_0 cache row of `dim` values keeps its quants and its scale.
template <int TYPE> __device__ __forceinline__ uint32_t forge__kv_qoff(uint32_t block) { return block * (TYPE == FORGE_HIP_Q8_0 ? 32u : 16u); }
template <int TYPE> __device__ __forceinline__ uint32_t forge__kv_soff(uint32_t dim, uint32_t block) {
    return (TYPE == FORGE_HIP_Q8_0 ? dim : dim / 2) + 2 * block;
}

// forge.h's forge__block_finite and forge__kv_inverse_scale: a block holding a NaN or an infinity
// is stored as a NaN scale; 1/d that is not finite (d = 0, or d below float's normal range) is 0.
__device__ __forceinline__ bool forge__kv_block_finite(const float *v) {
    for (int j = 0; j < 32; j++)
        if ((__float_as_uint(v[j]) & 0x7f800000u) == 0x7f800000u) return false;
    return true;
}
__device__ __forceinline__ float forge__kv_inverse_scale(float d) {
    const float inv = d != 0.0f ? 1.0f / d : 0.0f;
    return (__float_as_uint(inv) & 0x7f800000u) == 0x7f800000u ? 0.0f : inv;
}

// Item `item` of one cache row of `dim` values: element `item` (F32, F16) or 32-element block `item`
// (Q8_0, Q4_0) of the row x, encoded into the cache row dst.
template <int TYPE>
__device__ __forceinline__ void forge__kv_put(const float *__restrict__ x, uint32_t item, uint8_t *__restrict__ dst, uint32_t dim) {
    if (TYPE == FORGE_HIP_F32) {
        ((float *)dst)[item] = x[item];
    } else if (TYPE == FORGE_HIP_F16) {
        ((uint16_t *)dst)[item] = (uint16_t)forge__to_f16(x[item]);
    } else if (TYPE == FORGE_HIP_Q8_0) {
        const float *v = x + 32 * item;
        uint8_t *b = dst + forge__kv_qoff<TYPE>(item), *sc = dst + forge__kv_soff<TYPE>(dim, item);
        if (!forge__kv_block_finite(v)) { // forge.h's FORGE__KV_NAN_SCALE: a NaN scale over the codes of zero
            sc[0] = 0x00u, sc[1] = 0x7eu;
            for (int j = 0; j < 32; j++) b[j] = 0;
            return;
        }
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fabsf(v[j]) > amax ? fabsf(v[j]) : amax;
        const float d = amax / 127.0f, inv = forge__kv_inverse_scale(d);
        const uint32_t h16 = forge__to_f16(d);
        sc[0] = (uint8_t)(h16 & 0xffu), sc[1] = (uint8_t)(h16 >> 8);
        for (int j = 0; j < 32; j++) b[j] = (uint8_t)(int8_t)(int)rintf(__fmul_rn(v[j], inv));
    } else { // Q4_0: the value of largest magnitude maps to -8
        const float *v = x + 32 * item;
        uint8_t *b = dst + forge__kv_qoff<TYPE>(item), *sc = dst + forge__kv_soff<TYPE>(dim, item);
        if (!forge__kv_block_finite(v)) {
            sc[0] = 0x00u, sc[1] = 0x7eu;
            for (int j = 0; j < 16; j++) b[j] = 0x88u;
            return;
        }
        float max = 0.0f, amax = 0.0f;
        for (int j = 0; j < 32; j++)
            if (fabsf(v[j]) > amax) amax = fabsf(v[j]), max = v[j];
        const float d = max / -8.0f, inv = forge__kv_inverse_scale(d);
        const uint32_t h16 = forge__to_f16(d);
        sc[0] = (uint8_t)(h16 & 0xffu), sc[1] = (uint8_t)(h16 >> 8);
        for (int j = 0; j < 16; j++) {
            // __fmul_rn keeps the product rounded on its own, as the CPU computes it (no FMA)
            int lo = (int)(__fmul_rn(v[j], inv) + 8.5f), hi = (int)(__fmul_rn(v[16 + j], inv) + 8.5f);
            lo = lo < 0 ? 0 : lo > 15 ? 15 : lo;
            hi = hi < 0 ? 0 : hi > 15 ? 15 : hi;
            b[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

// One thread per element (F32, F16) or per 32-element block (Q8_0, Q4_0) of n_tokens x n_head_kv rows.
// dev_pos (a decode graph's): the first position is read from device memory instead of pos0. row_seq
// (a step of several sequences): a row whose id has FORGE_HIP_ROW_NO_STORE stores nothing.
template <int TYPE>
__global__ void forge__k_kv_store(const float *__restrict__ src, uint8_t *__restrict__ cache, uint32_t n_tokens,
                                  uint32_t n_head_kv, uint32_t dim, uint32_t pos0, uint32_t n_cells, size_t row_bytes,
                                  const uint32_t *__restrict__ dev_pos = NULL, const uint32_t *__restrict__ row_pos = NULL,
                                  const uint32_t *__restrict__ row_seq = NULL, size_t seq_stride = 0) {
    const uint32_t per_row = (TYPE == FORGE_HIP_F32 || TYPE == FORGE_HIP_F16) ? dim : dim / 32;
    const size_t total = (size_t)n_tokens * n_head_kv * per_row;
    const uint32_t first_pos = dev_pos ? *dev_pos : pos0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const size_t row = i / per_row; // token * n_head_kv + head
        const uint32_t item = (uint32_t)(i % per_row), t = (uint32_t)(row / n_head_kv), h = (uint32_t)(row % n_head_kv);
        if (!forge__row_stores(row_seq, t)) continue;
        const float *x = src + row * dim;
        const uint32_t pos = row_pos ? row_pos[t] : first_pos + t, cell = n_cells ? pos % n_cells : pos;
        uint8_t *dst = cache + forge__row_seq_base(row_seq, t, seq_stride) + ((size_t)cell * n_head_kv + h) * row_bytes;
        forge__kv_put<TYPE>(x, item, dst, dim);
    }
}

// Bytes of one cache row of `dim` values, 0 when the type or width does not suit the cache.
static size_t forge__hip_kv_row_bytes(uint32_t kv_type, uint32_t dim) {
    switch (kv_type) {
    case FORGE_HIP_F32: return (size_t)dim * 4;
    case FORGE_HIP_F16: return (size_t)dim * 2;
    case FORGE_HIP_Q8_0: return dim % 32 ? 0 : (size_t)dim / 32 * 34;
    case FORGE_HIP_Q4_0: return dim % 32 ? 0 : (size_t)dim / 32 * 18;
    default: return 0;
    }
}

static int forge__hip_kv_store_one(uint32_t kv_type, const float *src, void *cache, uint32_t n_tokens, uint32_t n_head_kv,
                                   uint32_t dim, uint32_t pos0, uint32_t n_cells, hipStream_t s, const uint32_t *dev_pos = NULL,
                                   const uint32_t *row_pos = NULL, const uint32_t *row_seq = NULL, size_t seq_stride = 0) {
    const size_t row_bytes = forge__hip_kv_row_bytes(kv_type, dim);
    const size_t items = (size_t)n_tokens * n_head_kv * (kv_type == FORGE_HIP_F32 || kv_type == FORGE_HIP_F16 ? dim : dim / 32);
    const unsigned blocks = forge__hip_blocks(items, 128);
    uint8_t *c = (uint8_t *)cache;
    switch (kv_type) {
    case FORGE_HIP_F32: forge__k_kv_store<FORGE_HIP_F32><<<blocks, 128, 0, s>>>(src, c, n_tokens, n_head_kv, dim, pos0, n_cells, row_bytes, dev_pos, row_pos, row_seq, seq_stride); break;
    case FORGE_HIP_F16: forge__k_kv_store<FORGE_HIP_F16><<<blocks, 128, 0, s>>>(src, c, n_tokens, n_head_kv, dim, pos0, n_cells, row_bytes, dev_pos, row_pos, row_seq, seq_stride); break;
    case FORGE_HIP_Q8_0: forge__k_kv_store<FORGE_HIP_Q8_0><<<blocks, 128, 0, s>>>(src, c, n_tokens, n_head_kv, dim, pos0, n_cells, row_bytes, dev_pos, row_pos, row_seq, seq_stride); break;
    default: forge__k_kv_store<FORGE_HIP_Q4_0><<<blocks, 128, 0, s>>>(src, c, n_tokens, n_head_kv, dim, pos0, n_cells, row_bytes, dev_pos, row_pos, row_seq, seq_stride); break;
    }
    return 0;
}

// Decode, one token: the rotary embedding of its query and key heads (in place, forge__k_rope's
// arithmetic) and its key and value rows stored into the cache, in one launch instead of four. One
// block per head: query heads, then key heads (rotated, then stored), then value heads (stored);
// thread i computes the angle of pair i itself, so no block waits on another. row_pos (a step of
// several sequences): grid y over its tokens, token t at position row_pos[t] in the cache of
// sequence row_seq[t] (seq_stride bytes a sequence), stored unless FORGE_HIP_ROW_NO_STORE.
template <int TYPE>
__global__ void forge__k_rope_store(float *q, float *k, const float *__restrict__ v, uint32_t n_head, uint32_t n_head_kv,
                                    uint32_t head_dim, uint32_t head_dim_v, uint32_t n_rot, int neox, uint32_t pos0,
                                    const uint32_t *__restrict__ dev_pos, float freq_base, float freq_scale,
                                    const float *__restrict__ freq_factors, uint8_t *__restrict__ cache_k, uint8_t *__restrict__ cache_v,
                                    uint32_t n_cells, size_t row_k_bytes, size_t row_v_bytes, const uint32_t *__restrict__ row_pos = NULL,
                                    const uint32_t *__restrict__ row_seq = NULL, size_t seq_stride = 0) {
    // the frequency of this thread's pair (blockDim.x >= n_rot / 2) depends on no earlier kernel:
    // worked out before the grid wait, it leaves only the angle and its sine and cosine after it
    const uint32_t half = n_rot / 2, b = blockIdx.x, i = threadIdx.x, t = blockIdx.y;
    const double freq = i < half ? forge__rope_freq(freq_base, i, n_rot) : 0.0;
    const double factor = i < half && freq_factors ? (double)freq_factors[i] : 1.0;
    FORGE__GRID_ENTER();
    const uint32_t p = row_pos ? row_pos[t] : dev_pos ? *dev_pos : pos0, cell = n_cells ? p % n_cells : p;
    const int per_element = TYPE == FORGE_HIP_F32 || TYPE == FORGE_HIP_F16, store = forge__row_stores(row_seq, t);
    const size_t seq_base = forge__row_seq_base(row_seq, t, seq_stride);
    q += (size_t)t * n_head * head_dim, k += (size_t)t * n_head_kv * head_dim, v += (size_t)t * n_head_kv * head_dim_v;
    cache_k += seq_base, cache_v += seq_base;
    if (b < n_head + n_head_kv) {
        float *x = b < n_head ? q + (size_t)b * head_dim : k + (size_t)(b - n_head) * head_dim;
        if (i < half) {
            const uint32_t a = neox ? i : 2 * i, e = neox ? i + half : 2 * i + 1;
            const float x0 = x[a], x1 = x[e]; // asked for before the angle's arithmetic
            float c, s;
            forge__rope_cs((double)p, freq_scale, freq, freq_factors, factor, &c, &s);
            forge__rope_pair(x0, x1, c, s, &x[a], &x[e]);
        }
        if (b < n_head || !store) return;
        __syncthreads(); // the rotated key row is stored below by other threads of the block
        const uint32_t h = b - n_head, items = per_element ? head_dim : head_dim / 32;
        for (uint32_t j = threadIdx.x; j < items; j += blockDim.x)
            forge__kv_put<TYPE>(x, j, cache_k + ((size_t)cell * n_head_kv + h) * row_k_bytes, head_dim);
        return;
    }
    if (!store) return;
    const uint32_t h = b - n_head - n_head_kv, items = per_element ? head_dim_v : head_dim_v / 32;
    for (uint32_t j = threadIdx.x; j < items; j += blockDim.x)
        forge__kv_put<TYPE>(v + (size_t)h * head_dim_v, j, cache_v + ((size_t)cell * n_head_kv + h) * row_v_bytes, head_dim_v);
}

__global__ void forge__k_rope_freqs(double *dst, uint32_t n_rot, float freq_base) {
    FORGE__GRID_ENTER();
    if (threadIdx.x < n_rot / 2) dst[threadIdx.x] = forge__rope_freq(freq_base, threadIdx.x, n_rot);
}

// The token's rotation at *dev_pos into angles (forge_hip_rope_args's): cosines, then sines, as the
// tile kernel computes and writes them; for a launch that rotates in forge__k_rope_store instead.
__global__ void forge__k_rope_angles(float *angles, const double *__restrict__ freq, const float *__restrict__ freq_factors, float freq_scale,
                                     uint32_t n_rot, const uint32_t *__restrict__ dev_pos) {
    FORGE__GRID_ENTER();
    const uint32_t half = n_rot / 2, i = threadIdx.x;
    if (i >= half) return;
    forge__rope_cs((double)*dev_pos, freq_scale, freq[i], freq_factors, freq_factors ? (double)freq_factors[i] : 1.0, &angles[i],
                   &angles[half + i]);
}

extern "C" {

// forge__k_rope_store over n_tokens tokens: one decode token at pos0 or *dev_pos (row_pos NULL), or a
// step's rows at row_pos[t] of sequence row_seq[t]; who names the caller in a refusal.
static int forge__hip_rope_store(const char *who, uint32_t kv_type, float *q, float *k, const float *v, uint32_t n_tokens, uint32_t n_head,
                                 uint32_t n_head_kv, uint32_t head_dim, uint32_t head_dim_v, uint32_t n_rot, int mode, uint32_t pos0,
                                 const uint32_t *dev_pos, const uint32_t *row_pos, const uint32_t *row_seq, size_t seq_stride, float freq_base,
                                 float freq_scale, const float *freq_factors, void *cache_k, void *cache_v, uint32_t n_cells, void *stream,
                                 char *message, size_t message_bytes) {
    const size_t row_k = forge__hip_kv_row_bytes(kv_type, head_dim), row_v = forge__hip_kv_row_bytes(kv_type, head_dim_v);
    hipStream_t s = (hipStream_t)stream;
    const char *refusal = NULL;
    char why[160];
    if (!row_k || !row_v) refusal = "the cache type does not suit the head size";
    else if (n_rot > head_dim || n_rot % 2 || n_rot / 2 > FORGE__ROPE_MAX_HALF || (mode != 0 && mode != 2))
        refusal = "unsupported rotary dimensions or mode";
    else if (n_tokens > 65535u) refusal = "too many tokens in one launch";
    if (refusal) {
        snprintf(why, sizeof why, "%s: %s", who, refusal);
        return forge__hip_refuse(message, message_bytes, why);
    }
    if (n_head_kv == 0 || n_tokens == 0) return 0;
    const uint32_t threads = n_rot / 2 > 128 ? (n_rot / 2 + 63) / 64 * 64 : 128; // a thread for each rotated pair
    switch (kv_type) {
#define FORGE__ROPE_STORE(T)                                                                             \
    forge__launch(forge__k_rope_store<T>, dim3(n_head + 2 * n_head_kv, n_tokens), dim3(threads), s, q, k, v, n_head, n_head_kv, head_dim, \
                  head_dim_v, n_rot, (int)(mode == 2), pos0, dev_pos, freq_base, freq_scale, freq_factors, (uint8_t *)cache_k, \
                  (uint8_t *)cache_v, n_cells, row_k, row_v, row_pos, row_seq, seq_stride)
    case FORGE_HIP_F32: FORGE__ROPE_STORE(FORGE_HIP_F32); break;
    case FORGE_HIP_F16: FORGE__ROPE_STORE(FORGE_HIP_F16); break;
    case FORGE_HIP_Q8_0: FORGE__ROPE_STORE(FORGE_HIP_Q8_0); break;
    default: FORGE__ROPE_STORE(FORGE_HIP_Q4_0); break;
#undef FORGE__ROPE_STORE
    }
    return forge__hip_launched("rope_store launch", message, message_bytes);
}

// One decode token: forge_hip_rope over q (n_head heads) and k (n_head_kv heads), then
// forge_hip_kv_store of k and v, in one launch. dev_pos: the position read from device memory when
// the kernel runs (a graph's), else pos0.
int forge_hip_rope_store(uint32_t kv_type, float *q, float *k, const float *v, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim,
                         uint32_t head_dim_v, uint32_t n_rot, int mode, uint32_t pos0, const uint32_t *dev_pos, float freq_base,
                         float freq_scale, const float *freq_factors, void *cache_k, void *cache_v, uint32_t n_cells, void *stream,
                         char *message, size_t message_bytes) {
    return forge__hip_rope_store("rope_store", kv_type, q, k, v, 1, n_head, n_head_kv, head_dim, head_dim_v, n_rot, mode, pos0, dev_pos, NULL,
                                 NULL, 0, freq_base, freq_scale, freq_factors, cache_k, cache_v, n_cells, stream, message, message_bytes);
}

// forge_hip_rope_store for a step of several sequences (forge_hip_rope_rows of q and k, then
// forge_hip_kv_store_rows of k and v, the same bits): token t at position row_pos[t] of sequence
// row_seq[t], whose cache starts seq_stride bytes after the one before (cache_k / cache_v: sequence
// 0's layer regions); a row whose id has FORGE_HIP_ROW_NO_STORE is rotated and not stored.
int forge_hip_rope_store_rows(uint32_t kv_type, float *q, float *k, const float *v, uint32_t n_tokens, uint32_t n_head, uint32_t n_head_kv,
                              uint32_t head_dim, uint32_t head_dim_v, uint32_t n_rot, int mode, const uint32_t *row_pos,
                              const uint32_t *row_seq, size_t seq_stride, float freq_base, float freq_scale, const float *freq_factors,
                              void *cache_k, void *cache_v, uint32_t n_cells, void *stream, char *message, size_t message_bytes) {
    if (!row_pos || !row_seq) return forge__hip_refuse(message, message_bytes, "rope_store_rows: no row positions or sequences");
    return forge__hip_rope_store("rope_store_rows", kv_type, q, k, v, n_tokens, n_head, n_head_kv, head_dim, head_dim_v, n_rot, mode, 0, NULL,
                                 row_pos, row_seq, seq_stride, freq_base, freq_scale, freq_factors, cache_k, cache_v, n_cells, stream, message,
                                 message_bytes);
}

}  // extern "C"

/* >>attention --------------------------------------------------------------------------------- */

// Value d of a cache row of `dim` values, dequantized where it is read (no staging buffer).
template <int TYPE> __device__ __forceinline__ float forge__kv_at(const uint8_t *row, uint32_t d, uint32_t dim) {
    if (TYPE == FORGE_HIP_F32) return ((const float *)row)[d];
    if (TYPE == FORGE_HIP_F16) return forge__f16(((const uint16_t *)row)[d]);
    const float scale = forge__f16(forge__ld16(row + forge__kv_soff<TYPE>(dim, d / 32)));
    if (TYPE == FORGE_HIP_Q8_0) return (float)(int8_t)row[d] * scale;
    const uint32_t j = d % 32, byte = row[forge__kv_qoff<TYPE>(d / 32) + (j & 15)]; // Q4_0
    return (float)((int)(j < 16 ? byte & 0xfu : byte >> 4) - 8) * scale;
}

typedef struct forge_hip_attention_args {
    const float *q;          // [n_tokens][n_head][head_dim]
    float *out;              // [n_tokens][n_head][head_dim_v]
    const void *cache_k;     // the layer's K rows: (cell * n_head_kv + kv_head) * row_k_bytes, cell = pos % n_cells
    const void *cache_v;     // the layer's V rows, likewise
    uint32_t kv_type;        // GGUF id of the cache's storage: F32, F16, Q8_0 or Q4_0
    uint32_t n_tokens;       // queries; token t sits at position P = pos0 + t and sees positions 0..P
    uint32_t n_head, n_head_kv; // n_head a multiple of n_head_kv: query head h reads KV head h / (n_head / n_head_kv)
    uint32_t head_dim, head_dim_v; // each <= FORGE_HIP_ATTENTION_MAX_HEAD_DIM; multiples of 32 for Q8_0/Q4_0
    uint32_t pos0;
    float scale;             // scores are q.k * scale; 0 means 1 / sqrt(head_dim)
    uint32_t window;         // 0: full causal; else P sees only p with P - p < window (sliding window)
    uint32_t n_cells;        // rows of the layer's cache, a ring (pos % n_cells); 0: no wrap. Must hold every
                             // position the batch reads: n_cells >= pos0 + n_tokens - max(0, pos0 + 1 - window)
    float softcap;           // 0: none; else each score s becomes softcap * tanh(s / softcap) before the softmax
    uint32_t *counters;      // forge_hip_attention_at: NULL, or n_head * n_tokens uint32 zeros in device memory that
                             // let split decode blocks merge in the same launch (left zero after each launch)
    // forge_hip_attention only: NULL, or n_tokens device positions, one per query row, whose rows may
    // belong to different sequences (a step of several sequences); pos0 then holds the largest of
    // them. row_seq: n_tokens device sequence ids; row t reads the cache at cache_k / cache_v +
    // row_seq[t] * seq_stride bytes (each sequence's cache laid out as one sequence's; the bit
    // FORGE_HIP_ROW_NO_STORE of an id is not part of it).
    const uint32_t *row_pos;
    const uint32_t *row_seq;
    size_t seq_stride;
} forge_hip_attention_args;

typedef struct forge_hip_rope_args {
    uint32_t n_rot;              // rotated dims of each head (even, <= head_dim)
    int mode;                    // 0: adjacent pairs; 2: halves (NEOX)
    float freq_base, freq_scale; // the angle of pair i at position p: p * freq_scale * freq_base^(-2i / n_rot) / factor_i
    const float *freq_factors;   // NULL, or n_rot / 2 device floats (factor_i)
    const double *freq;          // n_rot / 2 device doubles: forge_hip_rope_freqs(freq, n_rot, freq_base)
    // forge_hip_rope_attention_q8 only: NULL, or n_rot device floats for the token's rotation, the
    // cosines of its n_rot / 2 pair angles, then their sines. angles_ready 0: the launch computes them
    // and also writes them there; 1: a launch before it wrote them for the same position and
    // frequencies, and this one reads them instead of computing them again.
    float *angles;
    int angles_ready;
} forge_hip_rope_args;

#define FORGE_HIP_ATTENTION_MAX_HEAD_DIM 512
#define FORGE__ATT_THREADS 128
#define FORGE__ATT_PER_LANE 16  // dims per lane: head_dim <= 16 * 32 on the narrowest wave
#define FORGE__ATT_CHUNK 256    // positions per split when splitting a long context
#define FORGE__ATT_MAX_SPLIT 32
// A decode step (forge_hip_attention_at) has one query per head, too few blocks to fill the device
// with 256-position splits: it splits finer, into chunks of at least FORGE__ATT_DECODE_CHUNK
// positions, until heads x splits reaches FORGE__ATT_DECODE_BLOCKS (more splits only add merge
// work). Measured on H100 at depth 4096 (tg t/s, chunk 256 / 64 / 32): Qwen2.5-1.5B (12 heads)
// 141 / 187 / 190, Llama-3-8B (32 heads) 98 / 94 / 93.
#ifndef FORGE__ATT_DECODE_CHUNK
#define FORGE__ATT_DECODE_CHUNK 64
#endif
#ifndef FORGE__ATT_DECODE_MAX_SPLIT
#define FORGE__ATT_DECODE_MAX_SPLIT 128
#endif
#ifndef FORGE__ATT_DECODE_BLOCKS
#define FORGE__ATT_DECODE_BLOCKS 1024
#endif
// The decode kernels of forge_hip_attention_at split a context into chunks of FORGE__ATTD_MIN_CHUNK
// positions or more, at most FORGE__ATTD_MAX_SPLIT of them; a span of up to FORGE__ATTD_ONE_SPLIT
// positions is one split, written out directly with no records and no merge, which at such depths
// cost more than the positions (tests/PERF.md, "On the H200: where decode stands, shorter latency chains").
#define FORGE__ATTD_MAX_SPLIT 128
#define FORGE__ATTD_MAX_DIM 256 // widest head the decode kernels and the split merge's pair path take
#ifndef FORGE__ATTD_MIN_CHUNK
#define FORGE__ATTD_MIN_CHUNK 32
#endif
#ifndef FORGE__ATTD_ONE_SPLIT
#define FORGE__ATTD_ONE_SPLIT 128
#endif
// The decode splits a span of positions wants (before the grid's and the scratch's limits).
__host__ __device__ __forceinline__ uint32_t forge__attd_want(uint32_t span) {
    return span <= FORGE__ATTD_ONE_SPLIT ? 1 : (span + FORGE__ATTD_MIN_CHUNK - 1) / FORGE__ATTD_MIN_CHUNK;
}

// Flash-style attention, one pass with online softmax. A block serves one (query head, token, split):
// each wave walks its own positions of the split (wave w takes w, w + n_waves, ...), lane l holds dims
// l, l + wave, ... of q and of its running output; a score is a wave-wide sum. Each wave keeps its
// own running max m, denominator l and output; the waves merge through shared memory at the end.
// Nothing grows with the context: the state is registers plus a fixed shared array.
// Token t reads positions first..P (first = P - window + 1 with a window, else 0); split s takes the
// chunk first + s * chunk .. of that range, so splits cover only positions inside the window.
// With n_split == 1 the block writes the normalized output; otherwise it writes its unnormalized
// (m, l, o) to `partial` and forge__k_attention_merge combines the splits (flash-decoding).
template <int TYPE>
__global__ void __launch_bounds__(FORGE__ATT_THREADS)
forge__k_attention(forge_hip_attention_args a, size_t row_k_bytes, size_t row_v_bytes, uint32_t n_split, uint32_t chunk,
                   float *__restrict__ partial, const uint32_t *__restrict__ dev_pos = NULL) {
    __shared__ float wave_m[32], wave_l[32];
    __shared__ float wave_o[FORGE__ATT_THREADS / 32][FORGE_HIP_ATTENTION_MAX_HEAD_DIM];
    const uint32_t wave = warpSize, lane = threadIdx.x % wave, id = threadIdx.x / wave, n_waves = blockDim.x / wave;
    const uint32_t h = blockIdx.x, t = blockIdx.y, split = blockIdx.z;
    const uint32_t kv_head = h / (a.n_head / a.n_head_kv), hd = a.head_dim, hdv = a.head_dim_v;
    const uint32_t kv_len = (a.row_pos ? a.row_pos[t] : (dev_pos ? *dev_pos : a.pos0) + t) + 1;
    const uint32_t first = a.window && kv_len > a.window ? kv_len - a.window : 0;
    uint32_t n_used = n_split;
    if (dev_pos) { // the grid has the splits of the longest span (a graph's is fixed): use those this position needs
        const uint32_t span = kv_len - first, want = (span + FORGE__ATT_DECODE_CHUNK - 1) / FORGE__ATT_DECODE_CHUNK;
        n_used = want < 1 ? 1 : want < n_split ? want : n_split;
        chunk = (span + n_used - 1) / n_used;
        if (split >= n_used) { // an unused split records m = -inf, l = 0, o = 0: it weighs nothing in the merge
            float *rec = partial + (((size_t)t * a.n_head + h) * n_split + split) * (hdv + 2);
            for (uint32_t i = threadIdx.x; i < hdv + 2; i += blockDim.x) rec[i] = i == 0 ? -INFINITY : 0.0f; // (m, l, o) of no position
            return;
        }
    }
    const uint32_t begin = first + split * chunk, end = begin + chunk < kv_len ? begin + chunk : kv_len;
    const float *q = a.q + ((size_t)t * a.n_head + h) * hd;
    const size_t seq_base = forge__row_seq_base(a.row_seq, t, a.seq_stride);
    const uint8_t *ck = (const uint8_t *)a.cache_k + seq_base, *cv = (const uint8_t *)a.cache_v + seq_base;

    float qv[FORGE__ATT_PER_LANE], o[FORGE__ATT_PER_LANE];
#pragma unroll
    for (int j = 0; j < FORGE__ATT_PER_LANE; j++) {
        const uint32_t d = lane + j * wave;
        qv[j] = d < hd ? q[d] * a.scale : 0.0f;
        o[j] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (uint32_t p = begin + id; p < end; p += n_waves) {
        const uint32_t cell = a.n_cells ? p % a.n_cells : p;
        const uint8_t *krow = ck + ((size_t)cell * a.n_head_kv + kv_head) * row_k_bytes;
        const uint8_t *vrow = cv + ((size_t)cell * a.n_head_kv + kv_head) * row_v_bytes;
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < FORGE__ATT_PER_LANE; j++) {
            const uint32_t d = lane + j * wave;
            if (d < hd) s += qv[j] * forge__kv_at<TYPE>(krow, d, hd);
        }
        s = forge__wave_sum(s);
        if (a.softcap > 0.0f) s = a.softcap * tanhf(s / a.softcap);
        const float m_new = fmaxf(m, s), shrink = expf(m - m_new), weight = expf(s - m_new); // expf(-inf) = 0
        l = l * shrink + weight;
#pragma unroll
        for (int j = 0; j < FORGE__ATT_PER_LANE; j++) {
            const uint32_t d = lane + j * wave;
            if (d < hdv) o[j] = o[j] * shrink + weight * forge__kv_at<TYPE>(vrow, d, hdv);
        }
        m = m_new;
    }
    if (lane == 0) wave_m[id] = m, wave_l[id] = l;
#pragma unroll
    for (int j = 0; j < FORGE__ATT_PER_LANE; j++) {
        const uint32_t d = lane + j * wave;
        if (d < hdv) wave_o[id][d] = o[j];
    }
    __syncthreads();
    float m_all = -INFINITY;
    for (uint32_t w = 0; w < n_waves; w++) m_all = fmaxf(m_all, wave_m[w]);
    float l_all = 0.0f;
    for (uint32_t w = 0; w < n_waves; w++)
        if (wave_m[w] != -INFINITY) l_all += wave_l[w] * expf(wave_m[w] - m_all);
    if (n_split == 1) {
        float *out = a.out + ((size_t)t * a.n_head + h) * hdv;
        for (uint32_t d = threadIdx.x; d < hdv; d += blockDim.x) {
            float sum = 0.0f;
            for (uint32_t w = 0; w < n_waves; w++)
                if (wave_m[w] != -INFINITY) sum += wave_o[w][d] * expf(wave_m[w] - m_all);
            out[d] = sum / l_all;
        }
    } else { // record (m, l, o[hdv]) of this split; an empty split records m = -inf, l = 0
        float *rec = partial + (((size_t)t * a.n_head + h) * n_split + split) * (hdv + 2);
        if (threadIdx.x == 0) rec[0] = m_all, rec[1] = l_all;
        for (uint32_t d = threadIdx.x; d < hdv; d += blockDim.x) {
            float sum = 0.0f;
            for (uint32_t w = 0; w < n_waves; w++)
                if (wave_m[w] != -INFINITY) sum += wave_o[w][d] * expf(wave_m[w] - m_all);
            rec[2 + d] = sum;
        }
    }
}

// the cache coherent read of a record another block wrote in this launch
__device__ __forceinline__ float forge__ld_shared_l2(const float *p) {
#if defined(__HIP_PLATFORM_AMD__) || defined(__HIPCC__)
    return *(const volatile float *)p;
#else
    return __ldcg(p);
#endif
}

// two consecutive floats of such a record, 8-byte aligned
__device__ __forceinline__ float2 forge__ld2_shared_l2(const float *p) {
#if defined(__HIP_PLATFORM_AMD__) || defined(__HIPCC__)
    return make_float2(((const volatile float *)p)[0], ((const volatile float *)p)[1]);
#else
    return __ldcg((const float2 *)p);
#endif
}

// Combines the first n_used of the n_split (m, l, o) records (m in base e) of each of cnt heads
// (head g's record s at recs + (g * n_split + s) * (hdv + 2)) into out (head g at out + g * hdv)
// and, given q8, into the quantized vector of q8_n values whose element q8_first is out[0]. The
// whole block takes part: a wave per head turns the records' m and l into weights exp(m_s - max) /
// sum, then each output is the weighted sum of the records in split order (the same bits whichever
// block runs it). Records may have been written by other blocks of the same launch.
template <int G>
__device__ void forge__att_merge(const float *recs, uint32_t n_split, uint32_t n_used, uint32_t cnt, uint32_t hdv, float *out,
                                 uint8_t *q8, size_t q8_first, uint32_t q8_n) {
    __shared__ float s_w[G][FORGE__ATTD_MAX_SPLIT];
    const uint32_t wave = warpSize, lane = threadIdx.x % wave, wid = threadIdx.x / wave, n_waves = blockDim.x / wave;
    const size_t rec_len = hdv + 2;
    for (uint32_t i = threadIdx.x; i < cnt * n_used; i += blockDim.x)
        s_w[i / n_used][i % n_used] = forge__ld_shared_l2(recs + ((i / n_used) * n_split + i % n_used) * rec_len);
    __syncthreads();
    for (uint32_t g = wid; g < cnt; g += n_waves) {
        float mx = -INFINITY, lsum = 0.0f;
        for (uint32_t s = lane; s < n_used; s += wave) mx = fmaxf(mx, s_w[g][s]);
        for (uint32_t mask = wave / 2; mask > 0; mask >>= 1) mx = fmaxf(mx, FORGE_SHFL_XOR(mx, mask));
        for (uint32_t s = lane; s < n_used; s += wave) {
            const float f = s_w[g][s] == -INFINITY ? 0.0f : expf(s_w[g][s] - mx);
            lsum += f * forge__ld_shared_l2(recs + (g * n_split + s) * rec_len + 1);
            s_w[g][s] = f;
        }
        for (uint32_t mask = wave / 2; mask > 0; mask >>= 1) lsum += FORGE_SHFL_XOR(lsum, mask);
        for (uint32_t s = lane; s < n_used; s += wave) s_w[g][s] /= lsum;
    }
    __syncthreads();
    // each output the weighted sum of the records in split order; with an even hdv in pairs, two
    // pairs a thread, 8-byte loads (a record's o starts 8 bytes in), eight splits in flight, the sums
    // through shared memory to the rounds below
    __shared__ float s_out[G][FORGE__ATTD_MAX_DIM];
    const bool pairs = hdv % 2 == 0 && hdv <= FORGE__ATTD_MAX_DIM;
    if (pairs) {
        const uint32_t n_pairs = cnt * hdv / 2;
        for (uint32_t p0 = 0; p0 < n_pairs; p0 += 2 * blockDim.x) {
            float2 sum[2];
            uint32_t g[2], d[2];
            bool ok[2];
#pragma unroll
            for (int k = 0; k < 2; k++) {
                const uint32_t p = p0 + k * blockDim.x + threadIdx.x;
                ok[k] = p < n_pairs, g[k] = ok[k] ? 2 * p / hdv : 0, d[k] = ok[k] ? 2 * p % hdv : 0, sum[k] = make_float2(0.0f, 0.0f);
            }
#pragma unroll 8
            for (uint32_t s = 0; s < n_used; s++) {
#pragma unroll
                for (int k = 0; k < 2; k++)
                    if (ok[k]) {
                        const float2 v = forge__ld2_shared_l2(recs + (g[k] * n_split + s) * rec_len + 2 + d[k]);
                        const float w = s_w[g[k]][s];
                        sum[k].x += w * v.x, sum[k].y += w * v.y;
                    }
            }
#pragma unroll
            for (int k = 0; k < 2; k++)
                if (ok[k]) s_out[g[k]][d[k]] = sum[k].x, s_out[g[k]][d[k] + 1] = sum[k].y;
        }
        __syncthreads();
    }
    for (uint32_t i0 = 0; i0 < cnt * hdv; i0 += blockDim.x) { // uniform rounds: forge__q8_put takes whole waves
        const uint32_t i = i0 + threadIdx.x, g = i < cnt * hdv ? i / hdv : 0, d = i % hdv;
        float sum = 0.0f;
        if (pairs) sum = s_out[g][d];
        else
            for (uint32_t s = 0; s < n_used; s++) sum += s_w[g][s] * forge__ld_shared_l2(recs + (g * n_split + s) * rec_len + 2 + d);
        if (i < cnt * hdv) out[(size_t)g * hdv + d] = sum;
        if (q8) forge__q8_put(sum, q8_first + (size_t)g * hdv + d, i < cnt * hdv, (int8_t *)q8, (float4 *)(q8 + FORGE__Q8_DS(q8_n)));
    }
}

// Combines the splits of one (head, token), n_split <= FORGE__ATTD_MAX_SPLIT (a split that saw no
// position records m = -inf, l = 0, o = 0: it weighs nothing). q8: one token, hdv a multiple of 32.
__global__ void forge__k_attention_merge(const float *__restrict__ partial, float *__restrict__ out, uint32_t n_head,
                                         uint32_t hdv, uint32_t n_split, uint8_t *__restrict__ q8 = NULL) {
    FORGE__GRID_ENTER();
    const uint32_t h = blockIdx.x, t = blockIdx.y;
    forge__att_merge<1>(partial + ((size_t)t * n_head + h) * n_split * (hdv + 2), n_split, n_split, 1, hdv,
                        out + ((size_t)t * n_head + h) * hdv, q8, (size_t)h * hdv, n_head * hdv);
}
#if FORGE__ATT_MAX_SPLIT > FORGE__ATTD_MAX_SPLIT || FORGE__ATT_DECODE_MAX_SPLIT > FORGE__ATTD_MAX_SPLIT
#error "forge__k_attention_merge takes at most FORGE__ATTD_MAX_SPLIT splits"
#endif

// Splits for a context of kv_len positions: one per FORGE__ATT_CHUNK, at most FORGE__ATT_MAX_SPLIT.
static uint32_t forge__hip_attention_splits(uint32_t kv_len) {
    uint32_t n = (kv_len + FORGE__ATT_CHUNK - 1) / FORGE__ATT_CHUNK;
    return n < 1 ? 1 : n > FORGE__ATT_MAX_SPLIT ? FORGE__ATT_MAX_SPLIT : n;
}

// The decode step's splits for a span of kv_len positions: one per FORGE__ATT_DECODE_CHUNK, at most
// FORGE__ATT_DECODE_MAX_SPLIT.
static uint32_t forge__hip_decode_splits(uint32_t kv_len) {
    uint32_t n = (kv_len + FORGE__ATT_DECODE_CHUNK - 1) / FORGE__ATT_DECODE_CHUNK;
    return n < 1 ? 1 : n > FORGE__ATT_DECODE_MAX_SPLIT ? FORGE__ATT_DECODE_MAX_SPLIT : n;
}

// ---- prompt attention (n_tokens > 1): tiles of queries against tiles of the cache ----
//
// A block takes a tile of query rows of one KV head: row R = t * group + g is token t of query head
// kv_head * group + g (group = n_head / n_head_kv), so the K and V rows it stages in shared memory
// serve every query head that reads them. It walks its positions a tile at a time: K and V rows are
// dequantized into shared memory once, the scores of all its rows are computed, then an online
// softmax per row (running max m, sum l) and the output accumulate. Row R sees positions
// first(P)..P of its own token (P = pos0 + t; the window and the causal mask per row and position);
// the block's range runs from its first token's first position to its last token's P. With
// n_split > 1, split s takes the s-th chunk of that range (a whole number of position tiles) and
// records (m, l, o) per row for forge__k_attention_merge, as the decode kernel's splits do.
// Two kernels: on NVIDIA sm_80+ the scores and the output go through mma.sync (f16 operands, f32
// sums); elsewhere (AMD, F32 caches, head dims not a multiple of 16) a vector-unit kernel in f32.

#define FORGE__ATT_TILE_THREADS 128 // both prompt kernels: their thread roles below are fixed to 128
#define FORGE__ATT_TILE_MAX_DIM 256 // head dims above this take the per-query kernel

__device__ __forceinline__ uint32_t forge__att_first(uint32_t window, uint32_t pos) {
    return window && pos + 1 > window ? pos + 1 - window : 0;
}

// Positions [*begin, *end) of split `split` for the block of rows row0 .. row0 + rows - 1: chunks are
// whole tiles of `tile` positions; a split past the range gets begin == end.
__device__ __forceinline__ void forge__att_range(const forge_hip_attention_args &a, uint32_t group, uint32_t row0, uint32_t rows,
                                                 uint32_t tile, uint32_t split, uint32_t n_split, uint32_t *begin, uint32_t *end) {
    const uint32_t n_rows = a.n_tokens * group, last_row = (row0 + rows < n_rows ? row0 + rows : n_rows) - 1;
    const uint32_t lo = forge__att_first(a.window, a.pos0 + row0 / group), hi = a.pos0 + last_row / group + 1;
    const uint64_t chunk = ((uint64_t)(hi - lo) + n_split - 1) / n_split, chunk_tiles = (chunk + tile - 1) / tile * tile;
    const uint64_t b = lo + (uint64_t)split * chunk_tiles, e = b + chunk_tiles;
    *begin = b < hi ? (uint32_t)b : hi;
    *end = e < hi ? (uint32_t)e : hi;
}

// Where row R's result goes: token t, query head h. Rows past the batch (the last tile's padding)
// stand in for the last token and are never stored.
__device__ __forceinline__ void forge__att_row(const forge_hip_attention_args &a, uint32_t group, uint32_t kv_head, uint32_t row,
                                               uint32_t *t, uint32_t *h) {
    const uint32_t tt = row / group;
    *t = tt < a.n_tokens ? tt : a.n_tokens - 1;
    *h = kv_head * group + row % group;
}

// A split with no positions for this block: m = -inf, l = 0, o = 0, which weigh nothing in the merge.
__device__ __forceinline__ void forge__att_empty_split(const forge_hip_attention_args &a, uint32_t group, uint32_t kv_head,
                                                       uint32_t row0, uint32_t rows, uint32_t split, uint32_t n_split,
                                                       float *__restrict__ partial) {
    for (uint32_t r = threadIdx.x; r < rows; r += blockDim.x) {
        uint32_t t, h;
        if (row0 + r >= a.n_tokens * group) break;
        forge__att_row(a, group, kv_head, row0 + r, &t, &h);
        float *rec = partial + (((size_t)t * a.n_head + h) * n_split + split) * (a.head_dim_v + 2);
        rec[0] = -INFINITY, rec[1] = 0.0f;
        for (uint32_t d = 0; d < a.head_dim_v; d++) rec[2 + d] = 0.0f;
    }
}

// Vector-unit kernel. 16 rows a block, BN positions a tile held in f32 (K, then V in the same
// buffer). Scores: thread tid owns row tid / 8 and positions tid % 8 + 8k (the 8 threads of a row
// are consecutive lanes of one wave for any wave size, so a row's max and sum are three shuffles).
// Output: thread tid owns rows 4 (tid / 32) .. + 3 and dims tid % 32 + 32k.
template <int TYPE, int D>
__global__ void __launch_bounds__(FORGE__ATT_TILE_THREADS)
forge__k_attention_tile(forge_hip_attention_args a, size_t row_k_bytes, size_t row_v_bytes, uint32_t group, uint32_t n_split,
                        float *__restrict__ partial) {
    constexpr uint32_t BM = 16, BN = D <= 128 ? 32 : 16, LD = D + 4, SPT = BN / 8, DPT = D / 32;
    __shared__ __align__(16) float q_s[BM * LD];
    __shared__ __align__(16) float kv_s[BN * LD];
    __shared__ float p_s[BM][BN], alpha_s[BM], m_s[BM], l_s[BM];
    FORGE__GRID_ENTER();
    const uint32_t tid = threadIdx.x, hd = a.head_dim, hdv = a.head_dim_v, n_rows = a.n_tokens * group;
    const uint32_t row0 = blockIdx.x * BM, kv_head = blockIdx.y, split = blockIdx.z;
    const uint8_t *ck = (const uint8_t *)a.cache_k, *cv = (const uint8_t *)a.cache_v;
    uint32_t begin, end;
    forge__att_range(a, group, row0, BM, BN, split, n_split, &begin, &end);
    if (begin >= end) { // only a split can be empty
        forge__att_empty_split(a, group, kv_head, row0, BM, split, n_split, partial);
        return;
    }
    for (uint32_t i = tid; i < BM * D; i += FORGE__ATT_TILE_THREADS) {
        const uint32_t r = i / D, d = i % D;
        uint32_t t, h;
        forge__att_row(a, group, kv_head, row0 + r, &t, &h);
        q_s[r * LD + d] = row0 + r < n_rows && d < hd ? a.q[((size_t)t * a.n_head + h) * hd + d] * a.scale : 0.0f;
    }
    const uint32_t sr = tid / 8, sub = tid % 8, orow = tid / 32 * 4, ocol = tid % 32;
    uint32_t t_s, h_s;
    forge__att_row(a, group, kv_head, row0 + sr, &t_s, &h_s);
    const uint32_t lo = forge__att_first(a.window, a.pos0 + t_s), hi = a.pos0 + t_s + 1 < end ? a.pos0 + t_s + 1 : end;
    const uint32_t hd4 = (hd + 3) & ~3u;
    float m = -INFINITY, l = 0.0f, o[4][DPT];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int k = 0; k < (int)DPT; k++) o[i][k] = 0.0f;

    for (uint32_t p0 = begin; p0 < end; p0 += BN) {
        for (uint32_t i = tid; i < BN * D; i += FORGE__ATT_TILE_THREADS) { // K rows p0.., zeros past hd and end
            const uint32_t j = i / D, d = i % D, p = p0 + j;
            float v = 0.0f;
            if (p < end && d < hd) {
                const uint32_t cell = a.n_cells ? p % a.n_cells : p;
                v = forge__kv_at<TYPE>(ck + ((size_t)cell * a.n_head_kv + kv_head) * row_k_bytes, d, hd);
            }
            kv_s[j * LD + d] = v;
        }
        __syncthreads();
        float s[SPT];
#pragma unroll
        for (int k = 0; k < (int)SPT; k++) s[k] = 0.0f;
        for (uint32_t d = 0; d < hd4; d += 4) {
            const float4 qv = *(const float4 *)&q_s[sr * LD + d];
#pragma unroll
            for (int k = 0; k < (int)SPT; k++) {
                const float4 kv = *(const float4 *)&kv_s[(sub + 8 * k) * LD + d];
                s[k] += qv.x * kv.x + qv.y * kv.y + qv.z * kv.z + qv.w * kv.w;
            }
        }
        float mx = -INFINITY;
#pragma unroll
        for (int k = 0; k < (int)SPT; k++) {
            const uint32_t p = p0 + sub + 8 * k;
            float v = s[k];
            if (a.softcap > 0.0f) v = a.softcap * tanhf(v / a.softcap);
            s[k] = p < lo || p >= hi ? -INFINITY : v;
            mx = fmaxf(mx, s[k]);
        }
        for (int lane_mask = 4; lane_mask > 0; lane_mask >>= 1) mx = fmaxf(mx, FORGE_SHFL_XOR(mx, lane_mask));
        const float m_new = fmaxf(m, mx), m_ref = m_new == -INFINITY ? 0.0f : m_new, alpha = expf(m - m_ref);
        float sum = 0.0f;
#pragma unroll
        for (int k = 0; k < (int)SPT; k++) {
            s[k] = expf(s[k] - m_ref); // expf(-inf) = 0
            sum += s[k];
            p_s[sr][sub + 8 * k] = s[k];
        }
        for (int lane_mask = 4; lane_mask > 0; lane_mask >>= 1) sum += FORGE_SHFL_XOR(sum, lane_mask);
        l = l * alpha + sum;
        m = m_new;
        if (sub == 0) alpha_s[sr] = alpha;
        __syncthreads(); // scores read K; V may take its place
        for (uint32_t i = tid; i < BN * D; i += FORGE__ATT_TILE_THREADS) {
            const uint32_t j = i / D, d = i % D, p = p0 + j;
            float v = 0.0f;
            if (p < end && d < hdv) {
                const uint32_t cell = a.n_cells ? p % a.n_cells : p;
                v = forge__kv_at<TYPE>(cv + ((size_t)cell * a.n_head_kv + kv_head) * row_v_bytes, d, hdv);
            }
            kv_s[j * LD + d] = v;
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float al = alpha_s[orow + i];
#pragma unroll
            for (int k = 0; k < (int)DPT; k++) o[i][k] *= al;
        }
        for (uint32_t j = 0; j < BN; j++) {
            float v[DPT], w[4];
#pragma unroll
            for (int k = 0; k < (int)DPT; k++) v[k] = kv_s[j * LD + ocol + 32 * k];
#pragma unroll
            for (int i = 0; i < 4; i++) w[i] = p_s[orow + i][j];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int k = 0; k < (int)DPT; k++) o[i][k] += w[i] * v[k];
        }
        __syncthreads(); // the next tile's K overwrites V and p_s
    }
    if (sub == 0) m_s[sr] = m, l_s[sr] = l;
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint32_t row = row0 + orow + i;
        uint32_t t, h;
        if (row >= n_rows) break;
        forge__att_row(a, group, kv_head, row, &t, &h);
        if (n_split == 1) {
            float *out = a.out + ((size_t)t * a.n_head + h) * hdv;
            const float inv = 1.0f / l_s[orow + i];
#pragma unroll
            for (int k = 0; k < (int)DPT; k++)
                if (ocol + 32 * k < hdv) out[ocol + 32 * k] = o[i][k] * inv;
        } else {
            float *rec = partial + (((size_t)t * a.n_head + h) * n_split + split) * (hdv + 2);
            if (ocol == 0) rec[0] = m_s[orow + i], rec[1] = l_s[orow + i];
#pragma unroll
            for (int k = 0; k < (int)DPT; k++)
                if (ocol + 32 * k < hdv) rec[2 + ocol + 32 * k] = o[i][k];
        }
    }
}

// Matrix-unit kernel (NVIDIA sm_80+; mma.sync is NVIDIA's, its warps are 32 lanes).
#if !defined(__HIP_PLATFORM_AMD__) && !defined(__HIPCC__) && !defined(FORGE_NO_MMA)
#define FORGE__ATT_MMA 1
#endif

#ifdef FORGE__ATT_MMA
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define FORGE__ATT_MMA_DEVICE 1
#endif

// f32 pair -> f16x2 bits (lo in the low half), round to nearest even
__device__ __forceinline__ uint32_t forge__att_h2(float lo, float hi) {
    uint32_t r = 0;
#ifdef FORGE__ATT_MMA_DEVICE
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#else
    (void)lo, (void)hi;
#endif
    return r;
}

// ldmatrix x4 (trans: each 8 x 8 matrix transposed); lanes 8i..8i+7 give the row addresses of matrix i
template <bool TRANS> __device__ __forceinline__ void forge__att_ldsm4(uint32_t out[4], uint32_t shared_address) {
#ifdef FORGE__ATT_MMA_DEVICE
    if (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(out[0]), "=r"(out[1]), "=r"(out[2]), "=r"(out[3])
                     : "r"(shared_address));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(out[0]), "=r"(out[1]), "=r"(out[2]), "=r"(out[3])
                     : "r"(shared_address));
#else
    out[0] = out[1] = out[2] = out[3] = shared_address;
#endif
}

// c (16 x 8, f32) += a (16 x 16, f16, row-major) b (16 x 8, f16, column-major)
__device__ __forceinline__ void forge__att_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
#ifdef FORGE__ATT_MMA_DEVICE
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    (void)c, (void)a, (void)b0, (void)b1;
#endif
}

// 8 values of a cache row (values 8c .. 8c + 7) as f16x2 words: the raw bytes first, so that a
// thread's loads of a whole tile are in flight together, then the conversion.
template <int TYPE> struct forge__att_piece {
    uint32_t w[4], d;
    __device__ __forceinline__ void load(const uint8_t *row, uint32_t c, uint32_t dim) {
        if (TYPE == FORGE_HIP_F16) {
            const uint4 v = *(const uint4 *)(row + 16 * c);
            w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w, d = 0;
        } else { // the 8 quant bytes (Q4_0: 8 bytes of nibbles, low or high by c) as 2-byte words, and the scale
            const uint8_t *q = row + forge__kv_qoff<TYPE>(c / 4) + (TYPE == FORGE_HIP_Q8_0 ? 8 * (c % 4) : 8 * (c % 2));
            d = forge__ld16(row + forge__kv_soff<TYPE>(dim, c / 4));
#pragma unroll
            for (int i = 0; i < 4; i++) w[i] = forge__ld16(q + 2 * i);
        }
    }
    __device__ __forceinline__ uint4 convert(uint32_t c) const {
        if (TYPE == FORGE_HIP_F16) return make_uint4(w[0], w[1], w[2], w[3]);
        const float scale = forge__f16(d);
        uint32_t h[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float v0, v1;
            if (TYPE == FORGE_HIP_Q8_0) {
                v0 = (float)(int8_t)(uint8_t)(w[i] & 0xffu), v1 = (float)(int8_t)(uint8_t)(w[i] >> 8);
            } else { // values 0..15 are the low nibbles of the 16 bytes, 16..31 the high ones
                const uint32_t shift = (c % 4) >= 2 ? 4 : 0;
                v0 = (float)((int)((w[i] >> shift) & 0xfu) - 8), v1 = (float)((int)((w[i] >> (8 + shift)) & 0xfu) - 8);
            }
            h[i] = forge__att_h2(v0 * scale, v1 * scale);
        }
        return make_uint4(h[0], h[1], h[2], h[3]);
    }
};

// The cache row of position p0 + j, given cell0 = the cell of p0: one division a tile, not a piece.
__device__ __forceinline__ size_t forge__att_row_index(uint32_t cell0, uint32_t j, uint32_t n_cells, uint32_t n_head_kv,
                                                       uint32_t kv_head) {
    uint32_t cell = cell0 + j;
    if (n_cells && cell >= n_cells) cell = cell - n_cells < n_cells ? cell - n_cells : cell % n_cells;
    return (size_t)cell * n_head_kv + kv_head;
}

// Rows p0 .. p0 + BN - 1 of one KV head, K and V, into shared memory as f16, LD halves a row; rows
// at or past `end` and values past the head dim are zeros (a zero V row keeps a masked position
// out of the sums). A thread's pieces of K and V sit in the same rows.
template <int TYPE, int D, int BN>
__device__ __forceinline__ void forge__att_stage(uint16_t *k_dst, uint16_t *v_dst, const forge_hip_attention_args &a, size_t row_k_bytes,
                                                 size_t row_v_bytes, uint32_t kv_head, uint32_t p0, uint32_t end) {
    constexpr uint32_t LD = D + 8, PIECES = D / 8, PER_THREAD = BN * PIECES / FORGE__ATT_TILE_THREADS;
    const uint32_t cell0 = a.n_cells ? p0 % a.n_cells : p0;
#pragma unroll
    for (int half = 0; half < 2; half++) { // K, then V: a thread's loads of one tile are in flight together
        const uint8_t *cache = (const uint8_t *)(half ? a.cache_v : a.cache_k);
        const size_t row_bytes = half ? row_v_bytes : row_k_bytes;
        const uint32_t dim = half ? a.head_dim_v : a.head_dim;
        uint16_t *dst = half ? v_dst : k_dst;
        forge__att_piece<TYPE> piece[PER_THREAD];
        bool live[PER_THREAD];
#pragma unroll
        for (uint32_t k = 0; k < PER_THREAD; k++) {
            const uint32_t i = threadIdx.x + k * FORGE__ATT_TILE_THREADS, j = i / PIECES, c = i % PIECES;
            live[k] = p0 + j < end && 8 * c < dim;
            if (live[k]) piece[k].load(cache + forge__att_row_index(cell0, j, a.n_cells, a.n_head_kv, kv_head) * row_bytes, c, dim);
        }
#pragma unroll
        for (uint32_t k = 0; k < PER_THREAD; k++) {
            const uint32_t i = threadIdx.x + k * FORGE__ATT_TILE_THREADS, j = i / PIECES, c = i % PIECES;
            *(uint4 *)(dst + j * LD + 8 * c) = live[k] ? piece[k].convert(c) : make_uint4(0, 0, 0, 0);
        }
    }
}

// The same for an F16 cache without registers: cp.async copies (16 bytes, zero-filled where the
// source size is 0) that land while the block computes the previous tile.
template <int D, int BN>
__device__ __forceinline__ void forge__att_stage_async(uint16_t *k_dst, uint16_t *v_dst, const forge_hip_attention_args &a,
                                                       size_t row_k_bytes, size_t row_v_bytes, uint32_t kv_head, uint32_t p0,
                                                       uint32_t end) {
    constexpr uint32_t LD = D + 8, PIECES = D / 8, PER_THREAD = BN * PIECES / FORGE__ATT_TILE_THREADS;
    const uint32_t cell0 = a.n_cells ? p0 % a.n_cells : p0;
#pragma unroll
    for (uint32_t k = 0; k < PER_THREAD; k++) {
        const uint32_t i = threadIdx.x + k * FORGE__ATT_TILE_THREADS, j = i / PIECES, c = i % PIECES;
        const size_t row = p0 + j < end ? forge__att_row_index(cell0, j, a.n_cells, a.n_head_kv, kv_head) : 0;
        const uint32_t k_size = p0 + j < end && 8 * c < a.head_dim ? 16 : 0, v_size = p0 + j < end && 8 * c < a.head_dim_v ? 16 : 0;
        const uint8_t *k_src = (const uint8_t *)a.cache_k + (k_size ? row * row_k_bytes + 16 * c : 0);
        const uint8_t *v_src = (const uint8_t *)a.cache_v + (v_size ? row * row_v_bytes + 16 * c : 0);
#ifdef FORGE__ATT_MMA_DEVICE
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"((uint32_t)__cvta_generic_to_shared(k_dst + j * LD + 8 * c)),
                     "l"(k_src), "r"(k_size));
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"((uint32_t)__cvta_generic_to_shared(v_dst + j * LD + 8 * c)),
                     "l"(v_src), "r"(v_size));
#else
        (void)k_dst, (void)v_dst, (void)k_src, (void)v_src;
#endif
    }
#ifdef FORGE__ATT_MMA_DEVICE
    asm volatile("cp.async.commit_group;");
#endif
}

// Waits for this thread's cp.async groups but the newest `pending`.
template <int PENDING> __device__ __forceinline__ void forge__att_async_wait(void) {
#ifdef FORGE__ATT_MMA_DEVICE
    asm volatile("cp.async.wait_group %0;" ::"n"(PENDING));
#endif
}

// Shared memory of forge__k_attention_mma: Q (when it is not kept in registers), then K and V tiles,
// two of each for an F16 cache (copied ahead). Q kept in registers passes through the first K tile.
static constexpr size_t forge__att_mma_smem(int type, int D, int BN, bool q_regs) {
    return (size_t)2 * (D + 8) * ((q_regs ? 0 : 64) + (type == FORGE_HIP_F16 ? 4 : 2) * BN);
}

// 64 rows a block, 16 a warp; BN positions a tile. Scores S = Q K^T and output O += P V are
// m16n8k16 products: Q as A fragments (registers for D <= 128, else read from shared memory each
// tile), K tile rows as column-major B (ldmatrix), P straight from the score accumulators (the
// C layout of two 16 x 8 tiles is the A layout of one 16 x 16), V through ldmatrix.trans. Each lane
// holds rows lane / 4 and lane / 4 + 8 of its warp's 16: the row max and sum over a tile are two
// shuffles within a quad. Scores are kept in base-2 units (times log2 e) for exp2f.
// An F16 cache is copied a tile ahead with cp.async into a second pair of buffers, and its 128 and
// 64 wide heads run three blocks a multiprocessor (168 registers, no spills with nvcc 13 for sm_90):
// on an H100, Llama-3-8B pp16384 8,065 -> 8,922 t/s and pp512 at depth 16384 5,189 -> 6,092 against
// loading through registers at two blocks. Quantized caches dequantize through registers.
template <int TYPE, int D, int BN, bool Q_REGS>
__global__ void __launch_bounds__(FORGE__ATT_TILE_THREADS, TYPE == FORGE_HIP_F16 && D <= 128 ? 3 : 2)
forge__k_attention_mma(forge_hip_attention_args a, size_t row_k_bytes, size_t row_v_bytes, uint32_t group, uint32_t n_split,
                       float *__restrict__ partial) {
#ifdef FORGE__ATT_MMA_DEVICE
    constexpr uint32_t BM = 64, LD = D + 8, KS = D / 16, NT = BN / 8, OT = D / 8;
    constexpr bool ASYNC = TYPE == FORGE_HIP_F16;
    constexpr float LOG2E = 1.4426950408889634f, LN2 = 0.6931471805599453f;
    static_assert(!Q_REGS || BN >= BM, "Q passes through the first K tile");
    extern __shared__ __align__(16) uint16_t forge__att_mma_shared[];
    uint16_t *q_s = forge__att_mma_shared, *k_s = Q_REGS ? q_s : q_s + BM * LD, *v_s = k_s + BN * LD; // tile 0; tile 1 follows
    const uint32_t tid = threadIdx.x, lane = tid % 32, warp = tid / 32, hd = a.head_dim, hdv = a.head_dim_v;
    const uint32_t n_rows = a.n_tokens * group, row0 = blockIdx.x * BM, kv_head = blockIdx.y, split = blockIdx.z;
    uint32_t begin, end;
    forge__att_range(a, group, row0, BM, BN, split, n_split, &begin, &end);
    if (begin >= end) {
        forge__att_empty_split(a, group, kv_head, row0, BM, split, n_split, partial);
        return;
    }
    // Q tile: f32 * scale -> f16, zeros past hd and past the batch
    for (uint32_t i = tid; i < BM * (D / 4); i += FORGE__ATT_TILE_THREADS) {
        const uint32_t r = i / (D / 4), d = 4 * (i % (D / 4));
        uint32_t t, h;
        forge__att_row(a, group, kv_head, row0 + r, &t, &h);
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (row0 + r < n_rows && d < hd) v = *(const float4 *)(a.q + ((size_t)t * a.n_head + h) * hd + d);
        *(uint2 *)(q_s + r * LD + d) = make_uint2(forge__att_h2(v.x * a.scale, v.y * a.scale), forge__att_h2(v.z * a.scale, v.w * a.scale));
    }
    __syncthreads();
    const uint32_t q_base = (uint32_t)__cvta_generic_to_shared(q_s) + 2 * ((warp * 16 + (lane & 15)) * LD + (lane >> 4) * 8);
    uint32_t qa[Q_REGS ? KS : 1][4];
    if (Q_REGS) {
#pragma unroll
        for (uint32_t ks = 0; ks < (Q_REGS ? KS : 1); ks++) forge__att_ldsm4<false>(qa[ks], q_base + 2 * 16 * ks);
        __syncthreads(); // K takes Q's place
    }
    // this lane's two rows: positions [lo, hi) are visible to them
    uint32_t lo[2], hi[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        uint32_t t, h;
        forge__att_row(a, group, kv_head, row0 + warp * 16 + lane / 4 + 8 * r, &t, &h);
        lo[r] = forge__att_first(a.window, a.pos0 + t);
        hi[r] = a.pos0 + t + 1 < end ? a.pos0 + t + 1 : end;
    }
    // tiles inside [safe_lo, safe_hi) need no mask: every row of the block sees all their positions
    const uint32_t last_row = (row0 + BM < n_rows ? row0 + BM : n_rows) - 1;
    const uint32_t safe_lo = forge__att_first(a.window, a.pos0 + last_row / group);
    const uint32_t safe_hi = a.pos0 + row0 / group + 1 < end ? a.pos0 + row0 / group + 1 : end;
    if (ASYNC) forge__att_stage_async<D, BN>(k_s, v_s, a, row_k_bytes, row_v_bytes, kv_head, begin, end);
    const uint32_t k_base = (uint32_t)__cvta_generic_to_shared(k_s) + 2 * (((lane & 7) + ((lane >> 4) << 3)) * LD + ((lane >> 3) & 1) * 8);
    const uint32_t v_base = (uint32_t)__cvta_generic_to_shared(v_s) + 2 * (((lane & 7) + ((lane >> 3) & 1) * 8) * LD + (lane >> 4) * 8);

    float o[OT][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (uint32_t i = 0; i < OT; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;

    for (uint32_t p0 = begin, buf = 0; p0 < end; p0 += BN, buf ^= ASYNC ? 1u : 0u) {
        const uint32_t tile_bytes = buf * 2 * 2 * BN * LD; // byte offset of this tile's K and V
        if (ASYNC) { // copy the next tile into the other buffers (read two barriers ago), wait for this one
            if (p0 + BN < end) {
                forge__att_stage_async<D, BN>(k_s + (buf ^ 1) * 2 * BN * LD, v_s + (buf ^ 1) * 2 * BN * LD, a, row_k_bytes, row_v_bytes,
                                              kv_head, p0 + BN, end);
                forge__att_async_wait<1>();
            } else {
                forge__att_async_wait<0>();
            }
        } else {
            forge__att_stage<TYPE, D, BN>(k_s, v_s, a, row_k_bytes, row_v_bytes, kv_head, p0, end);
        }
        __syncthreads();
        float s[NT][4];
#pragma unroll
        for (uint32_t i = 0; i < NT; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
        for (uint32_t ks = 0; ks < KS; ks++) {
            if (16 * ks >= hd) break;
            uint32_t qf[4];
            if (Q_REGS) qf[0] = qa[Q_REGS ? ks : 0][0], qf[1] = qa[Q_REGS ? ks : 0][1], qf[2] = qa[Q_REGS ? ks : 0][2], qf[3] = qa[Q_REGS ? ks : 0][3];
            else forge__att_ldsm4<false>(qf, q_base + 2 * 16 * ks);
#pragma unroll
            for (uint32_t np = 0; np < NT / 2; np++) { // positions 16 np.., dims 16 ks..
                uint32_t kb[4];
                forge__att_ldsm4<false>(kb, k_base + tile_bytes + 2 * (16 * np * LD + 16 * ks));
                forge__att_mma(s[2 * np], qf, kb[0], kb[1]);
                forge__att_mma(s[2 * np + 1], qf, kb[2], kb[3]);
            }
        }
        // accumulator element k of tile nt: row lane / 4 + 8 (k / 2), position p0 + 8 nt + 2 (lane % 4) + k % 2
        const bool edge = p0 < safe_lo || p0 + BN > safe_hi;
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (uint32_t nt = 0; nt < NT; nt++)
#pragma unroll
            for (int k = 0; k < 4; k++) {
                float v = s[nt][k];
                if (a.softcap > 0.0f) v = a.softcap * tanhf(v / a.softcap);
                v *= LOG2E;
                if (edge) {
                    const uint32_t p = p0 + 8 * nt + 2 * (lane % 4) + (k & 1);
                    if (p < lo[k / 2] || p >= hi[k / 2]) v = -INFINITY;
                }
                s[nt][k] = v;
                mx[k / 2] = fmaxf(mx[k / 2], v);
            }
        float m_ref[2], alpha[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], FORGE_SHFL_XOR(mx[r], 1));
            mx[r] = fmaxf(mx[r], FORGE_SHFL_XOR(mx[r], 2));
            const float m_new = fmaxf(m[r], mx[r]);
            m_ref[r] = m_new == -INFINITY ? 0.0f : m_new; // a row with nothing visible yet: every weight 0
            alpha[r] = exp2f(m[r] - m_ref[r]);
            m[r] = m_new;
        }
#pragma unroll
        for (uint32_t nt = 0; nt < NT; nt++)
#pragma unroll
            for (int k = 0; k < 4; k++) {
                s[nt][k] = exp2f(s[nt][k] - m_ref[k / 2]);
                sum[k / 2] += s[nt][k];
            }
        l[0] = l[0] * alpha[0] + sum[0], l[1] = l[1] * alpha[1] + sum[1]; // this lane's columns; the quad adds up at the end
#pragma unroll
        for (uint32_t i = 0; i < OT; i++) o[i][0] *= alpha[0], o[i][1] *= alpha[0], o[i][2] *= alpha[1], o[i][3] *= alpha[1];
#pragma unroll
        for (uint32_t kk = 0; kk < BN / 16; kk++) { // positions 16 kk..
            const uint32_t pa[4] = {forge__att_h2(s[2 * kk][0], s[2 * kk][1]), forge__att_h2(s[2 * kk][2], s[2 * kk][3]),
                                    forge__att_h2(s[2 * kk + 1][0], s[2 * kk + 1][1]), forge__att_h2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
            for (uint32_t np = 0; np < D / 16; np++) { // dims 16 np..
                if (16 * np >= hdv) break;
                uint32_t vb[4];
                forge__att_ldsm4<true>(vb, v_base + tile_bytes + 2 * (16 * kk * LD + 16 * np));
                forge__att_mma(o[2 * np], pa, vb[0], vb[1]);
                forge__att_mma(o[2 * np + 1], pa, vb[2], vb[3]);
            }
        }
        __syncthreads(); // K and V of this tile may be overwritten
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += FORGE_SHFL_XOR(l[r], 1);
        l[r] += FORGE_SHFL_XOR(l[r], 2);
        const uint32_t row = row0 + warp * 16 + lane / 4 + 8 * r;
        uint32_t t, h;
        if (row >= n_rows) continue;
        forge__att_row(a, group, kv_head, row, &t, &h);
        float *dst;
        float mul;
        if (n_split == 1) {
            dst = a.out + ((size_t)t * a.n_head + h) * hdv;
            mul = 1.0f / l[r];
        } else { // unnormalized, m in natural units as the merge expects
            float *rec = partial + (((size_t)t * a.n_head + h) * n_split + split) * (hdv + 2);
            if (lane % 4 == 0) rec[0] = m[r] * LN2, rec[1] = l[r];
            dst = rec + 2;
            mul = 1.0f;
        }
#pragma unroll
        for (uint32_t i = 0; i < OT; i++) {
            const uint32_t col = 8 * i + 2 * (lane % 4);
            if (col < hdv) *(float2 *)(dst + col) = make_float2(o[i][2 * r] * mul, o[i][2 * r + 1] * mul);
        }
    }
#else
    (void)a, (void)row_k_bytes, (void)row_v_bytes, (void)group, (void)n_split, (void)partial;
#endif
}

// Readies forge__k_attention_mma<TYPE, D> for launching: 0 when it cannot run here (built without
// sm_80 code, or its shared memory refused).
template <int TYPE, int D> static int forge__att_mma_ready(void) {
    constexpr int BN = D == 256 ? 32 : 64;
    constexpr bool QR = D <= 128;
    const size_t smem = forge__att_mma_smem(TYPE, D, BN, QR);
    cudaFuncAttributes attr;
    if (cudaFuncGetAttributes(&attr, (const void *)forge__k_attention_mma<TYPE, D, BN, QR>) != cudaSuccess || attr.ptxVersion < 80 ||
        (smem > 48 * 1024 && cudaFuncSetAttribute((const void *)forge__k_attention_mma<TYPE, D, BN, QR>,
                                                  cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess)) {
        (void)cudaGetLastError();
        return 0;
    }
    return 1;
}

template <int TYPE, int D>
static void forge__att_mma_launch(const forge_hip_attention_args &a, size_t row_k_bytes, size_t row_v_bytes, uint32_t group,
                                  dim3 grid, uint32_t n_split, float *partial, hipStream_t s) {
    constexpr int BN = D == 256 ? 32 : 64;
    constexpr bool QR = D <= 128;
    forge__k_attention_mma<TYPE, D, BN, QR><<<grid, FORGE__ATT_TILE_THREADS, forge__att_mma_smem(TYPE, D, BN, QR), s>>>(
        a, row_k_bytes, row_v_bytes, group, n_split, partial);
}
#endif // FORGE__ATT_MMA

static int forge__att_sm_count(void) {
    int device = 0, n = 0;
#if defined(__HIP_PLATFORM_AMD__) || defined(__HIPCC__)
    if (hipGetDevice(&device) != hipSuccess || hipDeviceGetAttribute(&n, hipDeviceAttributeMultiprocessorCount, device) != hipSuccess)
        n = 0;
#else
    if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
        n = 0;
#endif
    return n > 0 ? n : 1;
}

// Prompt attention, a.scale set, shapes checked by forge_hip_attention; head dims <= 256. Picks the
// kernel, then splits the positions when the query tiles alone give fewer than two blocks a
// multiprocessor (few tokens over a long context, or few KV heads), as far as the scratch allows.
static int forge__hip_attention_prompt(const forge_hip_attention_args &a, size_t row_k_bytes, size_t row_v_bytes, void *scratch,
                                       size_t scratch_bytes, hipStream_t s, char *message, size_t message_bytes) {
    const uint32_t group = a.n_head / a.n_head_kv, width = a.head_dim > a.head_dim_v ? a.head_dim : a.head_dim_v;
    const int dim = width <= 64 ? 64 : width <= 128 ? 128 : 256;
    int mma = 0;
#ifdef FORGE__ATT_MMA
    if (a.kv_type != FORGE_HIP_F32 && a.head_dim % 16 == 0 && a.head_dim_v % 16 == 0) { // F32 caches keep f32 arithmetic
        switch (a.kv_type * 1000 + dim) {
#define FORGE__ATT_READY(T, D) case T * 1000 + D: mma = forge__att_mma_ready<T, D>(); break;
            FORGE__ATT_READY(FORGE_HIP_F16, 64) FORGE__ATT_READY(FORGE_HIP_F16, 128) FORGE__ATT_READY(FORGE_HIP_F16, 256)
            FORGE__ATT_READY(FORGE_HIP_Q8_0, 64) FORGE__ATT_READY(FORGE_HIP_Q8_0, 128) FORGE__ATT_READY(FORGE_HIP_Q8_0, 256)
            FORGE__ATT_READY(FORGE_HIP_Q4_0, 64) FORGE__ATT_READY(FORGE_HIP_Q4_0, 128) FORGE__ATT_READY(FORGE_HIP_Q4_0, 256)
#undef FORGE__ATT_READY
        default: break;
        }
    }
#endif
    const uint32_t rows = mma ? 64 : 16; // query rows a block
    const uint32_t n_tiles = (uint32_t)(((uint64_t)a.n_tokens * group + rows - 1) / rows);
    const uint64_t blocks = (uint64_t)n_tiles * a.n_head_kv, target = 2 * (uint64_t)forge__att_sm_count();
    const uint32_t max_len = a.pos0 + a.n_tokens, tokens = (rows + group - 1) / group + 1;
    const uint32_t span = a.window && (uint64_t)a.window + tokens < max_len ? a.window + tokens : max_len; // most positions a block reads
    uint32_t n_split = 1;
    if (blocks < target && span >= 512) { // a whole number of waves: 96 blocks split in 2, not 3 (288 > 264 places)
        const uint64_t want = target / blocks, most = span / 256;
        n_split = (uint32_t)(want < most ? want : most);
        if (n_split > FORGE__ATT_MAX_SPLIT) n_split = FORGE__ATT_MAX_SPLIT;
        const size_t per_split = (size_t)a.n_tokens * a.n_head * (a.head_dim_v + 2) * sizeof(float);
        if (!scratch || (size_t)n_split * per_split > scratch_bytes) n_split = scratch ? (uint32_t)(scratch_bytes / per_split) : 1;
        if (n_split < 1) n_split = 1;
    }
    const dim3 grid(n_tiles, a.n_head_kv, n_split);
    float *partial = (float *)scratch;
#ifdef FORGE__ATT_MMA
    if (mma) {
        switch (a.kv_type * 1000 + dim) {
#define FORGE__ATT_MMA_CASE(T, D) case T * 1000 + D: forge__att_mma_launch<T, D>(a, row_k_bytes, row_v_bytes, group, grid, n_split, partial, s); break;
            FORGE__ATT_MMA_CASE(FORGE_HIP_F16, 64) FORGE__ATT_MMA_CASE(FORGE_HIP_F16, 128) FORGE__ATT_MMA_CASE(FORGE_HIP_F16, 256)
            FORGE__ATT_MMA_CASE(FORGE_HIP_Q8_0, 64) FORGE__ATT_MMA_CASE(FORGE_HIP_Q8_0, 128) FORGE__ATT_MMA_CASE(FORGE_HIP_Q8_0, 256)
            FORGE__ATT_MMA_CASE(FORGE_HIP_Q4_0, 64) FORGE__ATT_MMA_CASE(FORGE_HIP_Q4_0, 128) FORGE__ATT_MMA_CASE(FORGE_HIP_Q4_0, 256)
#undef FORGE__ATT_MMA_CASE
        default: break;
        }
    }
#endif
    if (!mma) {
        switch (a.kv_type * 1000 + dim) {
#define FORGE__ATT_TILE_CASE(T, D)                                                                                        \
    case T * 1000 + D:                                                                                                    \
        forge__launch(forge__k_attention_tile<T, D>, grid, dim3(FORGE__ATT_TILE_THREADS), s, a, row_k_bytes, row_v_bytes, group, n_split, partial); \
        break;
            FORGE__ATT_TILE_CASE(FORGE_HIP_F32, 64) FORGE__ATT_TILE_CASE(FORGE_HIP_F32, 128) FORGE__ATT_TILE_CASE(FORGE_HIP_F32, 256)
            FORGE__ATT_TILE_CASE(FORGE_HIP_F16, 64) FORGE__ATT_TILE_CASE(FORGE_HIP_F16, 128) FORGE__ATT_TILE_CASE(FORGE_HIP_F16, 256)
            FORGE__ATT_TILE_CASE(FORGE_HIP_Q8_0, 64) FORGE__ATT_TILE_CASE(FORGE_HIP_Q8_0, 128) FORGE__ATT_TILE_CASE(FORGE_HIP_Q8_0, 256)
            FORGE__ATT_TILE_CASE(FORGE_HIP_Q4_0, 64) FORGE__ATT_TILE_CASE(FORGE_HIP_Q4_0, 128) FORGE__ATT_TILE_CASE(FORGE_HIP_Q4_0, 256)
#undef FORGE__ATT_TILE_CASE
        default: break;
        }
    }
    if (n_split > 1)
        forge__launch(forge__k_attention_merge, dim3(a.n_head, a.n_tokens), dim3(128), s, (const float *)partial, a.out, a.n_head, a.head_dim_v,
                      n_split, (uint8_t *)NULL);
    return forge__hip_launched("attention launch", message, message_bytes);
}

struct forge__rope_kv;
// the decode attention launcher, defined with its kernels below
static int forge__hip_attention_decode(const forge_hip_attention_args &a, size_t row_k_bytes, size_t row_v_bytes,
                                       const uint32_t *dev_pos, void *scratch, size_t scratch_bytes, hipStream_t s,
                                       uint8_t *q8 = NULL, const forge__rope_kv *rope = NULL);

extern "C" {

// Keys k [n_tokens][n_head_kv][head_dim] and values v [n_tokens][n_head_kv][head_dim_v] (f32) into
// the layer's cache at positions pos0.., encoded as kv_type (GGUF id F32, F16, Q8_0 or Q4_0) exactly
// as forge__kv_encode does. cache_k / cache_v: the layer's K and V regions (see >>kv); position p
// goes to cell p % n_cells (n_cells 0: cell p), so a batch may not exceed n_cells tokens.
int forge_hip_kv_store(uint32_t kv_type, const float *k, const float *v, void *cache_k, void *cache_v, uint32_t n_tokens,
                       uint32_t n_head_kv, uint32_t head_dim, uint32_t head_dim_v, uint32_t pos0, uint32_t n_cells,
                       void *stream, char *message, size_t message_bytes) {
    if (!forge__hip_kv_row_bytes(kv_type, head_dim) || !forge__hip_kv_row_bytes(kv_type, head_dim_v)) {
        if (message && message_bytes)
            snprintf(message, message_bytes, "kv_store: cache type %u with head dims %u/%u is not supported (F32, F16, Q8_0, Q4_0; "
                     "quantized caches need multiples of 32)", kv_type, head_dim, head_dim_v);
        return -1;
    }
    if (n_cells && n_tokens > n_cells) {
        if (message && message_bytes)
            snprintf(message, message_bytes, "kv_store: %u tokens do not fit a ring of %u cells", n_tokens, n_cells);
        return -1;
    }
    if (n_tokens == 0 || n_head_kv == 0) return 0;
    forge__hip_kv_store_one(kv_type, k, cache_k, n_tokens, n_head_kv, head_dim, pos0, n_cells, (hipStream_t)stream);
    forge__hip_kv_store_one(kv_type, v, cache_v, n_tokens, n_head_kv, head_dim_v, pos0, n_cells, (hipStream_t)stream);
    return forge__hip_launched("kv_store launch", message, message_bytes);
}

// forge_hip_kv_store with the first position read from device memory (*dev_pos, a uint32) when the
// kernels run: the variant a recorded graph replays at every position. The caller keeps that
// position inside the cache (below n_ctx); the ring needs only n_tokens <= n_cells.
int forge_hip_kv_store_at(uint32_t kv_type, const float *k, const float *v, void *cache_k, void *cache_v, uint32_t n_tokens,
                          uint32_t n_head_kv, uint32_t head_dim, uint32_t head_dim_v, const uint32_t *dev_pos, uint32_t n_cells,
                          void *stream, char *message, size_t message_bytes) {
    if (!dev_pos) return forge__hip_refuse(message, message_bytes, "kv_store_at: no device position");
    // the checks of the plain launcher (no tokens: nothing is launched)
    if (forge_hip_kv_store(kv_type, k, v, cache_k, cache_v, 0, n_head_kv, head_dim, head_dim_v, 0, n_cells, stream, message,
                           message_bytes))
        return -1;
    if (n_cells && n_tokens > n_cells) {
        if (message && message_bytes)
            snprintf(message, message_bytes, "kv_store_at: %u tokens do not fit a ring of %u cells", n_tokens, n_cells);
        return -1;
    }
    if (n_tokens == 0 || n_head_kv == 0) return 0;
    forge__hip_kv_store_one(kv_type, k, cache_k, n_tokens, n_head_kv, head_dim, 0, n_cells, (hipStream_t)stream, dev_pos);
    forge__hip_kv_store_one(kv_type, v, cache_v, n_tokens, n_head_kv, head_dim_v, 0, n_cells, (hipStream_t)stream, dev_pos);
    return forge__hip_launched("kv_store launch", message, message_bytes);
}

// forge_hip_kv_store for a step of several sequences: token t goes to position row_pos[t] of sequence
// row_seq[t], whose cache starts seq_stride bytes after the one before (cache_k / cache_v: sequence 0's
// layer regions); a row whose id has FORGE_HIP_ROW_NO_STORE is not stored. Each sequence has at most
// n_cells tokens in the step.
int forge_hip_kv_store_rows(uint32_t kv_type, const float *k, const float *v, void *cache_k, void *cache_v, uint32_t n_tokens,
                            uint32_t n_head_kv, uint32_t head_dim, uint32_t head_dim_v, const uint32_t *row_pos, const uint32_t *row_seq,
                            size_t seq_stride, uint32_t n_cells, void *stream, char *message, size_t message_bytes) {
    if (!row_pos || !row_seq) return forge__hip_refuse(message, message_bytes, "kv_store_rows: no row positions or sequences");
    if (forge_hip_kv_store(kv_type, k, v, cache_k, cache_v, 0, n_head_kv, head_dim, head_dim_v, 0, n_cells, stream, message,
                           message_bytes))
        return -1;
    if (n_tokens == 0 || n_head_kv == 0) return 0;
    forge__hip_kv_store_one(kv_type, k, cache_k, n_tokens, n_head_kv, head_dim, 0, n_cells, (hipStream_t)stream, NULL, row_pos, row_seq,
                            seq_stride);
    forge__hip_kv_store_one(kv_type, v, cache_v, n_tokens, n_head_kv, head_dim_v, 0, n_cells, (hipStream_t)stream, NULL, row_pos, row_seq,
                            seq_stride);
    return forge__hip_launched("kv_store launch", message, message_bytes);
}

// Scratch that lets forge_hip_attention split a context of up to n_ctx positions for batches of up to
// n_tokens queries, and forge_hip_attention_at split a one-token step as finely as it can use
// (flash-decoding); the plan reserves it once. Any smaller scratch (or none) also works: the
// launchers then use fewer splits, down to the single-pass kernels.
// Scratch that lets forge_hip_attention split the positions of a step of several sequences (row_pos)
// as finely as it does: about 4 blocks a multiprocessor, up to 256 multiprocessors, a record each.
size_t forge_hip_attention_rows_scratch_bytes(uint32_t head_dim_v) {
    return (size_t)8 * 256 * (head_dim_v + 2) * sizeof(float);
}

size_t forge_hip_attention_scratch_bytes(uint32_t n_ctx, uint32_t n_tokens, uint32_t n_head, uint32_t head_dim_v) {
    const uint32_t n_split = forge__hip_attention_splits(n_ctx), wanted = forge__attd_want(n_ctx);
    const uint32_t decode = wanted > FORGE__ATTD_MAX_SPLIT ? FORGE__ATTD_MAX_SPLIT : wanted;
    const size_t rec = (size_t)n_head * (head_dim_v + 2) * sizeof(float);
    const size_t prompt = n_split <= 1 ? 0 : (size_t)n_split * n_tokens * rec;
    return decode <= 1 ? prompt : prompt > decode * rec ? prompt : decode * rec;
}

// out = causal softmax(q k^T * scale) v over the cache, for every query head and token (see the
// args struct: sliding window, ring of cells, soft-cap). scratch: device memory of scratch_bytes
// (may be NULL / 0), see above; a window needs no more scratch than its n_ctx.
int forge_hip_attention(const forge_hip_attention_args *args, void *scratch, size_t scratch_bytes, void *stream,
                        char *message, size_t message_bytes) {
    forge_hip_attention_args a = *args;
    const size_t row_k_bytes = forge__hip_kv_row_bytes(a.kv_type, a.head_dim), row_v_bytes = forge__hip_kv_row_bytes(a.kv_type, a.head_dim_v);
    hipStream_t s = (hipStream_t)stream;
    if (!row_k_bytes || !row_v_bytes || a.head_dim > FORGE_HIP_ATTENTION_MAX_HEAD_DIM || a.head_dim_v > FORGE_HIP_ATTENTION_MAX_HEAD_DIM ||
        a.n_head == 0 || a.n_head_kv == 0 || a.n_head % a.n_head_kv != 0 || a.n_head > 65535u || a.n_tokens > 65535u) {
        if (message && message_bytes)
            snprintf(message, message_bytes, "attention: unsupported shape (cache type %u, head dims %u/%u <= %d, %u heads over %u KV heads, %u tokens)",
                     a.kv_type, a.head_dim, a.head_dim_v, FORGE_HIP_ATTENTION_MAX_HEAD_DIM, a.n_head, a.n_head_kv, a.n_tokens);
        return -1;
    }
    if (!(a.softcap >= 0.0f) || a.pos0 + a.n_tokens < a.pos0) {
        if (message && message_bytes)
            snprintf(message, message_bytes, "attention: soft-cap %g is negative or positions %u + %u overflow", (double)a.softcap, a.pos0,
                     a.n_tokens);
        return -1;
    }
    // one past the last position of the batch (rows of several sequences: pos0 is the largest row's)
    const uint32_t max_len = a.row_pos ? a.pos0 + 1 : a.pos0 + a.n_tokens;
    const uint32_t oldest = a.window && a.pos0 + 1 > a.window ? a.pos0 + 1 - a.window : 0; // first position any query reads
    if (a.row_pos ? a.n_cells && a.window && a.n_cells < a.window + a.n_tokens - 1 : a.n_cells && a.n_cells < max_len - oldest) {
        if (message && message_bytes)
            snprintf(message, message_bytes, "attention: a ring of %u cells cannot hold positions %u..%u (window %u, %u tokens at %u)",
                     a.n_cells, oldest, max_len - 1, a.window, a.n_tokens, a.pos0);
        return -1;
    }
    if (a.n_tokens == 0) return 0;
    if (a.scale == 0.0f) a.scale = (float)(1.0 / sqrt((double)a.head_dim));
    if (a.n_tokens > 1 && !a.row_pos && a.head_dim <= FORGE__ATT_TILE_MAX_DIM && a.head_dim_v <= FORGE__ATT_TILE_MAX_DIM) // prompts: the tiled kernels
        return forge__hip_attention_prompt(a, row_k_bytes, row_v_bytes, scratch, scratch_bytes, s, message, message_bytes);
    // a step of several sequences: each row as a decode step at its own position in its own sequence's
    // cache, a KV head's query heads in one block (the decode kernels read a.row_pos and a.row_seq)
    if (a.row_pos && forge__hip_attention_decode(a, row_k_bytes, row_v_bytes, NULL, scratch, scratch_bytes, s))
        return forge__hip_launched("attention launch", message, message_bytes);
    const uint32_t span = a.window && a.window < max_len ? a.window : max_len; // the most positions one query reads
    uint32_t n_split = forge__hip_attention_splits(span);
    const size_t per_split = (size_t)a.n_tokens * a.n_head * (a.head_dim_v + 2) * sizeof(float);
    if ((size_t)a.n_tokens * a.n_head >= 256) n_split = 1; // enough blocks already to fill the device
    if (a.row_pos) { // a step of several sequences: parts of at least 32 positions until about 4 blocks a multiprocessor
        const uint64_t blocks = (uint64_t)a.n_tokens * a.n_head, want = (4 * (uint64_t)forge__hip_sm_count() + blocks - 1) / blocks;
        const uint32_t most = (span + 31) / 32;
        n_split = (uint32_t)(want < most ? want : most);
        n_split = n_split < 1 ? 1 : n_split > FORGE__ATT_MAX_SPLIT ? FORGE__ATT_MAX_SPLIT : n_split;
    }
    if (!scratch || (size_t)n_split * per_split > scratch_bytes) n_split = scratch ? (uint32_t)(scratch_bytes / per_split) : 1;
    if (n_split < 1) n_split = 1;
    const uint32_t chunk = (span + n_split - 1) / n_split;
    dim3 grid(a.n_head, a.n_tokens, n_split);
    float *partial = (float *)scratch;
    switch (a.kv_type) {
    case FORGE_HIP_F32: forge__k_attention<FORGE_HIP_F32><<<grid, FORGE__ATT_THREADS, 0, s>>>(a, row_k_bytes, row_v_bytes, n_split, chunk, partial); break;
    case FORGE_HIP_F16: forge__k_attention<FORGE_HIP_F16><<<grid, FORGE__ATT_THREADS, 0, s>>>(a, row_k_bytes, row_v_bytes, n_split, chunk, partial); break;
    case FORGE_HIP_Q8_0: forge__k_attention<FORGE_HIP_Q8_0><<<grid, FORGE__ATT_THREADS, 0, s>>>(a, row_k_bytes, row_v_bytes, n_split, chunk, partial); break;
    default: forge__k_attention<FORGE_HIP_Q4_0><<<grid, FORGE__ATT_THREADS, 0, s>>>(a, row_k_bytes, row_v_bytes, n_split, chunk, partial); break;
    }
    if (n_split > 1) forge__k_attention_merge<<<dim3(a.n_head, a.n_tokens), 128, 0, s>>>(partial, a.out, a.n_head, a.head_dim_v, n_split);
    return forge__hip_launched("attention launch", message, message_bytes);
}

// forge_hip_attention's checks of shape, soft-cap and ring, for the launcher below.
static int forge__hip_attention_check(const forge_hip_attention_args *a, char *message, size_t message_bytes) {
    if (!forge__hip_kv_row_bytes(a->kv_type, a->head_dim) || !forge__hip_kv_row_bytes(a->kv_type, a->head_dim_v) ||
        a->head_dim > FORGE_HIP_ATTENTION_MAX_HEAD_DIM || a->head_dim_v > FORGE_HIP_ATTENTION_MAX_HEAD_DIM || a->n_head == 0 ||
        a->n_head_kv == 0 || a->n_head % a->n_head_kv != 0 || a->n_head > 65535u || a->n_tokens > 65535u) {
        if (message && message_bytes)
            snprintf(message, message_bytes, "attention: unsupported shape (cache type %u, head dims %u/%u <= %d, %u heads over %u KV heads, %u tokens)",
                     a->kv_type, a->head_dim, a->head_dim_v, FORGE_HIP_ATTENTION_MAX_HEAD_DIM, a->n_head, a->n_head_kv, a->n_tokens);
        return -1;
    }
    if (!(a->softcap >= 0.0f) || a->pos0 + a->n_tokens < a->pos0) {
        if (message && message_bytes)
            snprintf(message, message_bytes, "attention: soft-cap %g is negative or positions %u + %u overflow", (double)a->softcap,
                     a->pos0, a->n_tokens);
        return -1;
    }
    const uint32_t max_len = a->pos0 + a->n_tokens, oldest = a->window && a->pos0 + 1 > a->window ? a->pos0 + 1 - a->window : 0;
    if (a->n_cells && a->n_cells < max_len - oldest) { // the cells needed grow with the position: the largest decides
        if (message && message_bytes)
            snprintf(message, message_bytes, "attention: a ring of %u cells cannot hold positions %u..%u (window %u, %u tokens at %u)",
                     a->n_cells, oldest, max_len - 1, a->window, a->n_tokens, a->pos0);
        return -1;
    }
    return 0;
}

}  // extern "C"

// ---- decode attention for the graph path (forge_hip_attention_at): one block per (group of query heads, token, split) ----
//
// A block serves up to FORGE__ATTD_MAX_GROUP query heads that read the same KV head (a larger GQA
// group is cut into even parts, one block each), so each K and V row is read once for all of them.
// A position goes to a lane-group of L = head_dim / 8 lanes: lane i of it loads dims 8i..8i+7 of the
// K and V rows (one 16-byte load for F16, two for F32; Q8_0/Q4_0 one 8-byte load of quants where
// the row size allows it and one of the block's scale), the group's scores are L-lane shuffle sums, and each lane-group keeps its own
// online softmax (m, l, o) per head. A wave takes wave / L positions at a time, two such sets per
// step, and the rows of the next step are loaded (raw, not yet converted) before the current step is
// computed, so a lane has eight row loads in flight while it works. The waves merge through shared
// memory in one pass.
// Splits follow the position read from device memory, not the grid: a span of P positions takes
// forge__attd_want(P) splits, at most the grid's, so a short context uses a few blocks and
// a long one the whole grid. One split writes the normalized output; several write (m, l, o) records,
// and with args.counters the last block of a head group to finish (an atomic count, reset by that
// block) merges them in the same launch; without counters forge__k_attention_merge does (the records
// of unused splits then hold m = -inf, l = 0, o = 0, which weigh nothing). Either way the merge reads the records in
// split order, so a step gives the same bits every time it runs.
// Shapes: head_dim == head_dim_v in {8, 16, 32, 64, 128, 256} (L a power of two no wider than 32);
// anything else takes forge__k_attention.
#define FORGE__ATTD_THREADS 128
#define FORGE__ATTD_MAX_WAVES (FORGE__ATTD_THREADS / 32)
#define FORGE__ATTD_MAX_GROUP 4
#ifndef FORGE__ATTD_MIN_BLOCKS
#define FORGE__ATTD_MIN_BLOCKS 4 // blocks a multiprocessor: at most 128 registers
#endif

// Eight consecutive values of a cache row as loaded (converted by forge__kv_cvt8): F16 one 16-byte
// word, F32 two, Q8_0 / Q4_0 the eight (or eight nibbles of) quant bytes in w[0].x/.y and the block's
// f16 scale in w[0].z. All zero reads as eight zeros in every type (Q4_0: eight -8 times a zero scale).
template <int TYPE> struct forge__kv8 {
    uint4 w[TYPE == FORGE_HIP_F32 ? 2 : 1];
};

// W8: the rows' quants are 8-byte aligned (row size and cache address multiples of 8): one 8-byte
// load; else four 2-byte loads.
template <int TYPE, bool W8>
__device__ __forceinline__ void forge__kv_raw8(const uint8_t *row, uint32_t d0, uint32_t dim, forge__kv8<TYPE> &r) {
    if (TYPE == FORGE_HIP_F32) {
        r.w[0] = forge__ld128(row + 4 * (size_t)d0);
        r.w[TYPE == FORGE_HIP_F32 ? 1 : 0] = forge__ld128(row + 4 * (size_t)d0 + 16);
    } else if (TYPE == FORGE_HIP_F16) {
        r.w[0] = forge__ld128(row + 2 * (size_t)d0);
    } else { // Q8_0: bytes d0%32.. of the block's quants; Q4_0: bytes (d0%32)&15.., low or high nibbles (forge__kv_cvt8)
        const uint32_t j = TYPE == FORGE_HIP_Q8_0 ? d0 % 32 : (d0 % 32) & 15;
        const uint8_t *p = row + forge__kv_qoff<TYPE>(d0 / 32) + j;
        const uint2 q = W8 ? *(const uint2 *)p : make_uint2(forge__ld16(p) | forge__ld16(p + 2) << 16, forge__ld16(p + 4) | forge__ld16(p + 6) << 16);
        r.w[0] = make_uint4(q.x, q.y, forge__ld16(row + forge__kv_soff<TYPE>(dim, d0 / 32)), 0u);
    }
}

template <int TYPE> __device__ __forceinline__ void forge__kv_zero8(forge__kv8<TYPE> &r) {
#pragma unroll
    for (int i = 0; i < (TYPE == FORGE_HIP_F32 ? 2 : 1); i++) r.w[i] = make_uint4(0u, 0u, 0u, 0u);
}

// The factor of forge__kv_cvt8's values: the block's scale (Q8_0, Q4_0), else 1.
template <int TYPE> __device__ __forceinline__ float forge__kv_scale8(const forge__kv8<TYPE> &r) {
    return TYPE == FORGE_HIP_Q8_0 || TYPE == FORGE_HIP_Q4_0 ? forge__f16(r.w[0].z) : 1.0f;
}

// The 8 values, F32 / F16 as stored; Q8_0 / Q4_0 their integers q (q - 8 for Q4_0's nibbles), to be
// multiplied by forge__kv_scale8 once per sum: each comes exactly from the float 2^23 + byte (a byte
// permute, no int -> float conversion, which runs at 1/8 of the FMA rate on NVIDIA) minus a constant.
// shift: Q4_0's nibble (0 for dims 0..15 of a block, 4 for 16..31)
template <int TYPE> __device__ __forceinline__ void forge__kv_cvt8(const forge__kv8<TYPE> &r, uint32_t shift, float v[8]) {
    if (TYPE == FORGE_HIP_F32) {
        const uint4 x = r.w[0], y = r.w[TYPE == FORGE_HIP_F32 ? 1 : 0];
        v[0] = __uint_as_float(x.x), v[1] = __uint_as_float(x.y), v[2] = __uint_as_float(x.z), v[3] = __uint_as_float(x.w);
        v[4] = __uint_as_float(y.x), v[5] = __uint_as_float(y.y), v[6] = __uint_as_float(y.z), v[7] = __uint_as_float(y.w);
    } else if (TYPE == FORGE_HIP_F16) {
        const uint4 w = r.w[0];
        v[0] = forge__f16(w.x & 0xffffu), v[1] = forge__f16(w.x >> 16), v[2] = forge__f16(w.y & 0xffffu), v[3] = forge__f16(w.y >> 16);
        v[4] = forge__f16(w.z & 0xffffu), v[5] = forge__f16(w.z >> 16), v[6] = forge__f16(w.w & 0xffffu), v[7] = forge__f16(w.w >> 16);
    } else if (TYPE == FORGE_HIP_Q8_0) { // q + 128 in each byte: 2^23 + q + 128
        const uint32_t a = r.w[0].x ^ 0x80808080u, b = r.w[0].y ^ 0x80808080u;
        const float c = 8388736.0f;
        v[0] = forge__b2magic<0>(a) - c, v[1] = forge__b2magic<1>(a) - c, v[2] = forge__b2magic<2>(a) - c, v[3] = forge__b2magic<3>(a) - c;
        v[4] = forge__b2magic<0>(b) - c, v[5] = forge__b2magic<1>(b) - c, v[6] = forge__b2magic<2>(b) - c, v[7] = forge__b2magic<3>(b) - c;
    } else { // Q4_0: the nibble n in each byte: 2^23 + n
        const uint32_t a = (r.w[0].x >> shift) & 0x0f0f0f0fu, b = (r.w[0].y >> shift) & 0x0f0f0f0fu;
        const float c = 8388616.0f;
        v[0] = forge__b2magic<0>(a) - c, v[1] = forge__b2magic<1>(a) - c, v[2] = forge__b2magic<2>(a) - c, v[3] = forge__b2magic<3>(a) - c;
        v[4] = forge__b2magic<0>(b) - c, v[5] = forge__b2magic<1>(b) - c, v[6] = forge__b2magic<2>(b) - c, v[7] = forge__b2magic<3>(b) - c;
    }
}

// What a decode attention block takes: its query heads h0 .. h0 + cnt - 1 (a part of the KV head's
// group), its token t, and of the span the position read from device memory gives, its split's
// positions begin .. end - 1 (n_used splits in use, at most n_split). direct: the block is the only
// split and writes the output itself. A block past n_used returns false, having written (without
// counters) the records of no position that forge__k_attention_merge reads.
struct forge__attd_block {
    uint32_t kv_head, t, split, h0, cnt, n_used, begin, end;
    bool direct;
};

// The heads of this block (from its index alone): KV head kv_head, query heads h0 .. h0 + cnt - 1.
__device__ __forceinline__ void forge__attd_heads(const forge_hip_attention_args &a, uint32_t per_block, uint32_t &kv_head, uint32_t &h0,
                                                  uint32_t &cnt) {
    const uint32_t group = a.n_head / a.n_head_kv, parts = (group + per_block - 1) / per_block, part = blockIdx.x % parts;
    kv_head = blockIdx.x / parts, h0 = kv_head * group + part * per_block;
    cnt = per_block < group - part * per_block ? per_block : group - part * per_block;
}

__device__ __forceinline__ bool forge__attd_block_of(const forge_hip_attention_args &a, uint32_t n_split, uint32_t per_block,
                                                     const uint32_t *dev_pos, float *partial, forge__attd_block &b) {
    const uint32_t hd = a.head_dim;
    forge__attd_heads(a, per_block, b.kv_head, b.h0, b.cnt);
    b.t = blockIdx.y, b.split = blockIdx.z;
    // a step of several sequences (a.row_pos): row t's own position; else the decode step's
    const uint32_t kv_len = (a.row_pos ? a.row_pos[b.t] : *dev_pos + b.t) + 1, first = a.window && kv_len > a.window ? kv_len - a.window : 0;
    const uint32_t span = kv_len - first, want = forge__attd_want(span);
    b.n_used = want < n_split ? want : n_split; // want >= 1
    const uint32_t chunk = (span + b.n_used - 1) / b.n_used;
    const size_t rec_len = hd + 2;
    b.direct = b.n_used == 1 && (a.counters || n_split == 1); // else forge__k_attention_merge reads every split's record
    if (b.split >= b.n_used) {
        if (!a.counters) // (m, l, o) of no position for each head, for forge__k_attention_merge
            for (uint32_t i = threadIdx.x; i < b.cnt * rec_len; i += blockDim.x)
                partial[(((size_t)b.t * a.n_head + b.h0 + i / rec_len) * n_split + b.split) * rec_len + i % rec_len] =
                    i % rec_len == 0 ? -INFINITY : 0.0f;
        return false;
    }
    b.begin = first + b.split * chunk, b.end = b.begin + chunk < kv_len ? b.begin + chunk : kv_len;
    return true;
}

// The end of a decode attention block, after each wave has put its (m, l, o) per head in s_m, s_l,
// s_o (m in base 2): the waves merged in a fixed order into the block's (m, l, o); the output when
// the block is the only split, else its record, and with counters the last block of the head group
// merges the records.
// hd: the head dim, a constant where the kernel has one (its divisions become shifts).
template <int G>
__device__ __forceinline__ void forge__attd_finish(const forge_hip_attention_args &a, const forge__attd_block &b, uint32_t hd,
                                                   const float (*s_m)[G], const float (*s_l)[G], const float (*s_o)[G][FORGE__ATTD_MAX_DIM],
                                                   int *s_last_p, uint32_t n_waves, uint32_t n_split, float *__restrict__ partial,
                                                   uint8_t *__restrict__ q8) {
    const uint32_t cnt = b.cnt, h0 = b.h0, t = b.t, split = b.split, n_used = b.n_used;
    const bool direct = b.direct;
    const size_t rec_len = hd + 2;
    int &s_last = *s_last_p;
    __syncthreads();
    // the waves in a fixed order: the block's (m, l, o) per head; out (one split) or a record
    for (uint32_t i0 = 0; i0 < cnt * hd; i0 += blockDim.x) { // uniform rounds: forge__q8_put takes whole waves
        const uint32_t i = i0 + threadIdx.x, g = i < cnt * hd ? i / hd : 0, d = i % hd;
        float m_all = -INFINITY, lsum = 0.0f, osum = 0.0f;
        for (uint32_t w = 0; w < n_waves; w++) m_all = fmaxf(m_all, s_m[w][g]);
        for (uint32_t w = 0; w < n_waves; w++) {
            const float f = s_m[w][g] == -INFINITY ? 0.0f : exp2f(s_m[w][g] - m_all);
            lsum += s_l[w][g] * f, osum += s_o[w][g][d] * f;
        }
        if (direct) {
            if (i < cnt * hd) a.out[((size_t)t * a.n_head + h0 + g) * hd + d] = osum / lsum;
            if (q8) forge__q8_put(osum / lsum, (size_t)(h0 + g) * hd + d, i < cnt * hd, (int8_t *)q8, (float4 *)(q8 + FORGE__Q8_DS(a.n_head * hd)));
        } else if (i < cnt * hd) {
            float *rec = partial + (((size_t)t * a.n_head + h0 + g) * n_split + split) * rec_len;
            if (d == 0) rec[0] = m_all * 0.6931471805599453f, rec[1] = lsum; // records are in base e, as the merge kernel's
            rec[2 + d] = osum;
        }
    }
    if (direct || !a.counters) return;
    // the last block of this head group to finish merges the n_used records
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        uint32_t *counter = a.counters + (size_t)t * gridDim.x + blockIdx.x;
        const uint32_t done = atomicAdd(counter, 1u);
        s_last = done == n_used - 1;
        if (s_last) *counter = 0; // every block of the group has counted: ready for the next launch
    }
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    forge__att_merge<G>(partial + ((size_t)t * a.n_head + h0) * n_split * rec_len, n_split, n_used, cnt, hd,
                        a.out + ((size_t)t * a.n_head + h0) * hd, q8, (size_t)h0 * hd, a.n_head * hd);
}

template <int TYPE, int G, bool W8>
__global__ void __launch_bounds__(FORGE__ATTD_THREADS, FORGE__ATTD_MIN_BLOCKS)
forge__k_attention_decode(forge_hip_attention_args a, size_t row_k_bytes, size_t row_v_bytes, uint32_t n_split, uint32_t per_block,
                          float *__restrict__ partial, const uint32_t *__restrict__ dev_pos, uint8_t *__restrict__ q8) {
    FORGE__GRID_ENTER();
    __shared__ float s_m[FORGE__ATTD_MAX_WAVES][G], s_l[FORGE__ATTD_MAX_WAVES][G];
    __shared__ float s_o[FORGE__ATTD_MAX_WAVES][G][FORGE__ATTD_MAX_DIM];
    __shared__ int s_last;
    const uint32_t hd = a.head_dim, L = hd / 8, wave = warpSize, lane = threadIdx.x % wave, wid = threadIdx.x / wave;
    const uint32_t n_waves = blockDim.x / wave, per_wave = wave / L, sub = lane % L, grp = lane / L;
    forge__attd_block b;
    if (!forge__attd_block_of(a, n_split, per_block, dev_pos, partial, b)) return;
    const uint32_t kv_head = b.kv_head, t = b.t, h0 = b.h0, cnt = b.cnt, begin = b.begin, end = b.end;
    const size_t seq_base = forge__row_seq_base(a.row_seq, t, a.seq_stride); // row t's sequence's cache
    const uint8_t *ck = (const uint8_t *)a.cache_k + seq_base, *cv = (const uint8_t *)a.cache_v + seq_base;
    const uint32_t d0 = sub * 8, shift = d0 % 32 < 16 ? 0 : 4;

    float qv[G][8], o[G][8], m[G], l[G];
#pragma unroll
    for (int g = 0; g < G; g++) {
        const float *q = a.q + ((size_t)t * a.n_head + h0 + ((uint32_t)g < cnt ? g : 0)) * hd + d0;
#pragma unroll
        for (int j = 0; j < 8; j++) qv[g][j] = (uint32_t)g < cnt ? q[j] * a.scale : 0.0f, o[g][j] = 0.0f;
        m[g] = -INFINITY, l[g] = 0.0f;
    }

    const uint32_t step = n_waves * per_wave * 2;
    uint32_t base = begin + wid * per_wave * 2; // uniform over the wave
    forge__kv8<TYPE> rk[2], rv[2];
#pragma unroll
    for (int u = 0; u < 2; u++) {
        const uint32_t p = base + u * per_wave + grp, cell = a.n_cells ? p % a.n_cells : p;
        if (p < end) {
            forge__kv_raw8<TYPE, W8>(ck + ((size_t)cell * a.n_head_kv + kv_head) * row_k_bytes, d0, hd, rk[u]);
            forge__kv_raw8<TYPE, W8>(cv + ((size_t)cell * a.n_head_kv + kv_head) * row_v_bytes, d0, hd, rv[u]);
        } else
            forge__kv_zero8<TYPE>(rk[u]), forge__kv_zero8<TYPE>(rv[u]);
    }
    for (; base < end; base += step) {
        forge__kv8<TYPE> nk[2], nv[2]; // the next step's rows, in flight while this one is computed
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const uint32_t p = base + step + u * per_wave + grp, cell = a.n_cells ? p % a.n_cells : p;
            if (p < end) {
                forge__kv_raw8<TYPE, W8>(ck + ((size_t)cell * a.n_head_kv + kv_head) * row_k_bytes, d0, hd, nk[u]);
                forge__kv_raw8<TYPE, W8>(cv + ((size_t)cell * a.n_head_kv + kv_head) * row_v_bytes, d0, hd, nv[u]);
            } else
                forge__kv_zero8<TYPE>(nk[u]), forge__kv_zero8<TYPE>(nv[u]);
        }
        // the scores of both positions, then one online-softmax step for the pair: one rescale of the
        // running sums per two positions, in base 2 (m and the scores times log2(e), exp2 throughout)
        float s[2][G];
#pragma unroll
        for (int u = 0; u < 2; u++) {
            float k[8];
            forge__kv_cvt8<TYPE>(rk[u], shift, k);
            const float ks = forge__kv_scale8<TYPE>(rk[u]);
#pragma unroll
            for (int g = 0; g < G; g++) {
                float acc = 0.0f;
#pragma unroll
                for (int j = 0; j < 8; j++) acc += qv[g][j] * k[j];
                s[u][g] = acc * ks;
            }
        }
        for (uint32_t mask = L / 2; mask > 0; mask >>= 1) {
#pragma unroll
            for (int u = 0; u < 2; u++)
#pragma unroll
                for (int g = 0; g < G; g++) s[u][g] += FORGE_SHFL_XOR(s[u][g], mask);
        }
        float v0[8], v1[8];
        forge__kv_cvt8<TYPE>(rv[0], shift, v0);
        forge__kv_cvt8<TYPE>(rv[1], shift, v1);
        const float vs0 = forge__kv_scale8<TYPE>(rv[0]), vs1 = forge__kv_scale8<TYPE>(rv[1]);
#pragma unroll
        for (int g = 0; g < G; g++) {
            float sc[2];
#pragma unroll
            for (int u = 0; u < 2; u++) {
                float x = s[u][g];
                if (a.softcap > 0.0f) x = a.softcap * tanhf(x / a.softcap);
                sc[u] = base + u * per_wave + grp < end ? x * 1.4426950408889634f : -INFINITY;
            }
            const float m_new = fmaxf(m[g], fmaxf(sc[0], sc[1]));
            if (m_new == -INFINITY) continue; // neither position is in range (the same for the lane group)
            const float shrink = exp2f(m[g] - m_new), w0 = exp2f(sc[0] - m_new), w1 = exp2f(sc[1] - m_new);
            l[g] = l[g] * shrink + w0 + w1;
            const float f0 = w0 * vs0, f1 = w1 * vs1;
#pragma unroll
            for (int j = 0; j < 8; j++) o[g][j] = o[g][j] * shrink + f0 * v0[j] + f1 * v1[j];
            m[g] = m_new;
        }
#pragma unroll
        for (int u = 0; u < 2; u++) rk[u] = nk[u], rv[u] = nv[u];
    }
    // each wave: its max per head over its lane-groups, their sums rescaled to it by a butterfly
#pragma unroll
    for (int g = 0; g < G; g++) {
        float mw = m[g];
        for (uint32_t mask = L; mask < wave; mask <<= 1) mw = fmaxf(mw, FORGE_SHFL_XOR(mw, mask));
        const float f = m[g] == -INFINITY ? 0.0f : exp2f(m[g] - mw);
#pragma unroll
        for (int j = 0; j < 8; j++) o[g][j] *= f;
        l[g] *= f;
        for (uint32_t mask = L; mask < wave; mask <<= 1) {
#pragma unroll
            for (int j = 0; j < 8; j++) o[g][j] += FORGE_SHFL_XOR(o[g][j], mask);
            l[g] += FORGE_SHFL_XOR(l[g], mask);
        }
        if (grp == 0) {
#pragma unroll
            for (int j = 0; j < 8; j++) s_o[wid][g][d0 + j] = o[g][j];
            if (sub == 0) s_m[wid][g] = mw, s_l[wid][g] = l[g];
        }
    }
    forge__attd_finish<G>(a, b, hd, s_m, s_l, s_o, &s_last, n_waves, n_split, partial, q8);
}

// The rotary embedding and cache store that forge_hip_rope_attention_q8 folds into the tile kernel:
// the token's query heads arrive unrotated in a.q, its key and value rows in k and v (k NULL: q is
// rotated and the rows are in the cache already, the plain launch); freq is the table of pair
// frequencies (forge_hip_rope_freqs). The arithmetic is forge__k_rope_store's, so the cache bytes
// and the scores are the same bits either way.
// angles, ready: forge_hip_rope_args's (the token's cosines and sines: written by the launch's
// first block, or read by every block).
struct forge__rope_kv {
    const float *k, *v;
    const double *freq;
    const float *freq_factors;
    float *angles;
    float freq_scale;
    uint32_t n_rot, neox, ready;
};

// ---- decode attention in tiles (forge__k_attention_tile): the shapes of real models ----
//
// forge__k_attention_decode spends most of its instructions on work that every lane of a lane-group
// repeats or shares: the L-lane shuffle sums of each score and the softmax of each position, done by
// all L lanes. This kernel (F16, Q8_0, Q4_0 caches, head_dim == head_dim_v in {64, 128, 256}, no ring
// or a ring of 64 cells or more) splits
// a step into the two products instead. A wave takes a tile of wave / KL positions:
//   scores: KL lanes a position (KL = 2, 4 for 256 dims), each over every KL-th 8-dim piece of the K
//     row, with the block's query heads read from shared memory; KL - 1 shuffles join the parts;
//   softmax: the tile's maximum over the wave (m is the same in every lane), one exp2 a lane a head;
//   values: the lane-groups of forge__k_attention_decode (L = head_dim / 8 lanes a position, 8 dims a
//     lane), each weight fetched by one shuffle from the lane that scored the position.
// A tile's K rows are all loaded before its first product; its V rows with them in a block of one
// query head, else after the scores (both sets fit only the one-head block's registers). The block's
// end is forge__attd_finish, as for forge__k_attention_decode; the splits are the same.
// The wave size as a constant where the compiler knows it (NVIDIA 32; AMD's device passes define
// __AMDGCN_WAVEFRONT_SIZE), so shuffle loops over it unroll; the host pass never runs the kernels.
#if defined(__AMDGCN_WAVEFRONT_SIZE)
#define FORGE__WAVE_C __AMDGCN_WAVEFRONT_SIZE
#elif defined(__HIP_PLATFORM_AMD__) || defined(__HIPCC__)
#define FORGE__WAVE_C 64
#else
#define FORGE__WAVE_C 32
#endif

// The V rows of a tile of forge__k_attention_tile: positions tile + j * PW + grp, dims dv0 .. dv0 + 7;
// zeros from `end` on.
template <int TYPE, uint32_t NV, uint32_t HD>
__device__ __forceinline__ void forge__attd_load_v(const forge_hip_attention_args &a, const uint8_t *cv, size_t row_v_bytes, uint32_t kv_head,
                                                   uint32_t tile, uint32_t cell0, uint32_t end, uint32_t PW, uint32_t grp, uint32_t dv0,
                                                   forge__kv8<TYPE> (&rv)[NV]) {
#pragma unroll
    for (uint32_t j = 0; j < NV; j++) {
        const uint32_t p = tile + j * PW + grp, c0 = cell0 + j * PW + grp, cell = a.n_cells && c0 >= a.n_cells ? c0 - a.n_cells : c0;
        if (p < end) forge__kv_raw8<TYPE, true>(cv + ((size_t)cell * a.n_head_kv + kv_head) * row_v_bytes, dv0, HD, rv[j]);
        else forge__kv_zero8<TYPE>(rv[j]);
    }
}

// THREADS: the block's threads, FORGE__ATTD_THREADS, or twice that for a span of one split and one
// query head a block (forge__hip_attention_decode): each wave a tile, so up to 128 positions are one
// round of the waves instead of two, at the same registers a thread.
template <int TYPE, int G, int HD, int THREADS = FORGE__ATTD_THREADS>
__global__ void __launch_bounds__(THREADS, FORGE__ATTD_MIN_BLOCKS * FORGE__ATTD_THREADS / THREADS)
forge__k_attention_tile(forge_hip_attention_args a, size_t row_k_bytes, size_t row_v_bytes, uint32_t n_split, uint32_t per_block,
                        float *__restrict__ partial, const uint32_t *__restrict__ dev_pos, uint8_t *__restrict__ q8, forge__rope_kv rk) {
    FORGE__GRID_ENTER();
    constexpr uint32_t L = HD / 8, KL = HD > 128 ? HD / 64 : 2, NC = HD / 8 / KL, NV = L / KL; // NV: V rows a lane loads a tile
    constexpr uint32_t MAX_WAVES = THREADS / 32;
    constexpr bool VK = G == 1; // the V rows loaded with the K rows
    __shared__ __align__(16) float s_q[G][HD];
    __shared__ float s_m[MAX_WAVES][G], s_l[MAX_WAVES][G];
    __shared__ float s_o[MAX_WAVES][G][FORGE__ATTD_MAX_DIM];
    __shared__ int s_last;
    constexpr uint32_t wave = FORGE__WAVE_C;
    const uint32_t hd = HD, lane = threadIdx.x % wave, wid = threadIdx.x / wave, n_waves = blockDim.x / wave;
    const uint32_t T = wave / KL, kp = lane / KL, part_k = lane % KL; // scores: position kp of the tile, pieces part_k, part_k + KL, ...
    const uint32_t PW = wave / L, sub = lane % L, grp = lane / L;     // values: position grp + j * PW, dims 8 sub ..
    // with the rotary embedding, the block's first loads (its query heads, the token's key and value
    // rows of its KV head, the pair frequencies and factors) leave together with the position's: the
    // heads follow from the block's index alone (forge__attd_heads)
    constexpr uint32_t QE = (G * HD + THREADS - 1) / THREADS, KE = (HD + THREADS - 1) / THREADS;
    float xq[QE], xk[KE], xv[KE];
    double freq = 0.0, factor = 1.0;
    float c_ready = 0.0f, s_ready = 0.0f; // the angles an earlier launch of the step computed (rk.ready)
    const uint32_t half = rk.n_rot / 2;
    if (rk.k) {
        uint32_t kvh, hq0, qcnt;
        forge__attd_heads(a, per_block, kvh, hq0, qcnt);
#pragma unroll
        for (uint32_t e = 0; e < QE; e++) {
            const uint32_t i = threadIdx.x + e * THREADS, g = i / HD;
            xq[e] = i < G * HD && g < qcnt ? a.q[(size_t)(hq0 + g) * HD + i % HD] : 0.0f;
        }
#pragma unroll
        for (uint32_t e = 0; e < KE; e++) {
            const uint32_t i = threadIdx.x + e * THREADS;
            xk[e] = i < HD ? rk.k[(size_t)kvh * HD + i] : 0.0f;
            xv[e] = i < HD ? rk.v[(size_t)kvh * HD + i] : 0.0f;
        }
        if (threadIdx.x < half && rk.ready) {
            c_ready = rk.angles[threadIdx.x], s_ready = rk.angles[half + threadIdx.x];
        } else if (threadIdx.x < half) {
            freq = rk.freq[threadIdx.x];
            if (rk.freq_factors) factor = (double)rk.freq_factors[threadIdx.x];
        }
    }
    forge__attd_block b;
    if (!forge__attd_block_of(a, n_split, per_block, dev_pos, partial, b)) return;
    const uint32_t kv_head = b.kv_head, t = b.t, h0 = b.h0, cnt = b.cnt, begin = b.begin, end = b.end;
    const size_t seq_base = forge__row_seq_base(a.row_seq, t, a.seq_stride); // row t's sequence's cache
    const uint8_t *ck = (const uint8_t *)a.cache_k + seq_base, *cv = (const uint8_t *)a.cache_v + seq_base;
    if (!rk.k) {
        for (uint32_t i = threadIdx.x; i < G * HD; i += blockDim.x) {
            const uint32_t g = i / HD;
            s_q[g][i % HD] = g < cnt ? a.q[((size_t)t * a.n_head + h0 + g) * hd + i % HD] * a.scale : 0.0f;
        }
    } else {
        // one token at p = *dev_pos: the rows as loaded and the angles in shared memory (s_o's room,
        // unused until the end), then each pair rotated in place, the query's scaled; the block whose
        // split holds p stores the key and value rows into cell p (other parts of the group store the
        // same bytes), which the loop below reads back after the barrier
        static_assert(3 * HD <= MAX_WAVES * FORGE__ATTD_MAX_DIM, "the angles and the two rows fit s_o");
        float *cs = &s_o[0][0][0], *sk = cs + HD, *sv = sk + HD; // cs: n_rot <= HD floats
        const uint32_t p = *dev_pos, cell = a.n_cells ? p % a.n_cells : p;
#pragma unroll
        for (uint32_t e = 0; e < QE; e++) {
            const uint32_t i = threadIdx.x + e * THREADS;
            if (i < G * HD) s_q[i / HD][i % HD] = xq[e];
        }
#pragma unroll
        for (uint32_t e = 0; e < KE; e++) {
            const uint32_t i = threadIdx.x + e * THREADS;
            if (i < HD) sk[i] = xk[e], sv[i] = xv[e];
        }
        if (threadIdx.x < half && rk.ready) {
            cs[threadIdx.x] = c_ready, cs[half + threadIdx.x] = s_ready;
        } else if (threadIdx.x < half) {
            forge__rope_cs((double)p, rk.freq_scale, freq, rk.freq_factors, factor, &cs[threadIdx.x], &cs[half + threadIdx.x]);
            if (rk.angles && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0)
                rk.angles[threadIdx.x] = cs[threadIdx.x], rk.angles[half + threadIdx.x] = cs[half + threadIdx.x];
        }
        __syncthreads();
        for (uint32_t j = threadIdx.x; j < (G + 1) * half; j += blockDim.x) { // G query heads, then the key
            const uint32_t g = j / half, i = j % half, e0 = rk.neox ? i : 2 * i, e1 = rk.neox ? i + half : 2 * i + 1;
            float *x = g < G ? s_q[g] : sk, y0, y1;
            forge__rope_pair(x[e0], x[e1], cs[i], cs[half + i], &y0, &y1);
            x[e0] = g < G ? y0 * a.scale : y0, x[e1] = g < G ? y1 * a.scale : y1;
        }
        for (uint32_t j = threadIdx.x; j < G * (HD - rk.n_rot); j += blockDim.x) // the query's dims past n_rot
            s_q[j / (HD - rk.n_rot)][rk.n_rot + j % (HD - rk.n_rot)] *= a.scale;
        if (b.begin <= p && p < b.end) {
            __syncthreads();
            constexpr uint32_t items = TYPE == FORGE_HIP_F16 ? HD : HD / 32;
            uint8_t *dk = (uint8_t *)a.cache_k + ((size_t)cell * a.n_head_kv + kv_head) * row_k_bytes;
            uint8_t *dv = (uint8_t *)a.cache_v + ((size_t)cell * a.n_head_kv + kv_head) * row_v_bytes;
            for (uint32_t j = threadIdx.x; j < 2 * items; j += blockDim.x) {
                if (j < items) forge__kv_put<TYPE>(sk, j, dk, HD);
                else forge__kv_put<TYPE>(sv, j - items, dv, HD);
            }
        }
    }
    __syncthreads();

    float o[G][8], m[G], l[G]; // m: the same in every lane of the wave; l: this lane's positions (each counted KL times)
#pragma unroll
    for (int g = 0; g < G; g++) {
#pragma unroll
        for (int j = 0; j < 8; j++) o[g][j] = 0.0f;
        m[g] = -INFINITY, l[g] = 0.0f;
    }
    const uint32_t dv0 = sub * 8, shift_v = dv0 % 32 < 16 ? 0 : 4;
    for (uint32_t tile = begin + wid * T; tile < end; tile += n_waves * T) { // uniform over the wave
        forge__kv8<TYPE> rk[NC], rv[NV];
        const uint32_t cell0 = a.n_cells ? tile % a.n_cells : tile; // n_cells >= T: a tile wraps at most once
        {
            const uint32_t p = tile + kp, c0 = cell0 + kp, cell = a.n_cells && c0 >= a.n_cells ? c0 - a.n_cells : c0;
            const uint8_t *row = ck + ((size_t)cell * a.n_head_kv + kv_head) * row_k_bytes;
#pragma unroll
            for (uint32_t c = 0; c < NC; c++) {
                if (p < end) forge__kv_raw8<TYPE, true>(row, (c * KL + part_k) * 8, HD, rk[c]);
                else forge__kv_zero8<TYPE>(rk[c]);
            }
        }
        if (VK) forge__attd_load_v<TYPE, NV, HD>(a, cv, row_v_bytes, kv_head, tile, cell0, end, PW, grp, dv0, rv);
        // scores: this lane's pieces, then the KL lanes of the position joined
        float sc[G];
#pragma unroll
        for (int g = 0; g < G; g++) sc[g] = 0.0f;
#pragma unroll
        for (uint32_t c = 0; c < NC; c++) {
            const uint32_t d0 = (c * KL + part_k) * 8;
            float k[8];
            forge__kv_cvt8<TYPE>(rk[c], d0 % 32 < 16 ? 0 : 4, k);
            const float ks = forge__kv_scale8<TYPE>(rk[c]);
#pragma unroll
            for (int g = 0; g < G; g++) {
                const float4 qa = *(const float4 *)&s_q[g][d0], qb = *(const float4 *)&s_q[g][d0 + 4];
                const float dot = qa.x * k[0] + qa.y * k[1] + qa.z * k[2] + qa.w * k[3] + qb.x * k[4] + qb.y * k[5] + qb.z * k[6] + qb.w * k[7];
                sc[g] += dot * ks;
            }
        }
        // the tile's V rows, in flight while the scores are joined and the softmax runs; a block of one
        // query head loads them with the K rows (both sets fit its registers), else after the scores
        // (written out here: through forge__attd_load_v, ptxas spills in the 4-head instantiations)
        if (!VK) {
#pragma unroll
            for (uint32_t j = 0; j < NV; j++) {
                const uint32_t p = tile + j * PW + grp, c0 = cell0 + j * PW + grp, cell = a.n_cells && c0 >= a.n_cells ? c0 - a.n_cells : c0;
                if (p < end) forge__kv_raw8<TYPE, true>(cv + ((size_t)cell * a.n_head_kv + kv_head) * row_v_bytes, dv0, HD, rv[j]);
                else forge__kv_zero8<TYPE>(rv[j]);
            }
        }
        const bool in = tile + kp < end;
#pragma unroll
        for (int g = 0; g < G; g++) {
#pragma unroll
            for (uint32_t mask = 1; mask < KL; mask <<= 1) sc[g] += FORGE_SHFL_XOR(sc[g], mask);
            float x = sc[g];
            if (a.softcap > 0.0f) x = a.softcap * tanhf(x / a.softcap);
            sc[g] = in ? x * 1.4426950408889634f : -INFINITY; // base 2
        }
        // softmax: the tile's maximum over the wave, the running sums rescaled to it
        float w[G];
#pragma unroll
        for (int g = 0; g < G; g++) {
            float mt = sc[g];
            for (uint32_t mask = KL; mask < wave; mask <<= 1) mt = fmaxf(mt, FORGE_SHFL_XOR(mt, mask));
            const float m_new = fmaxf(m[g], mt);
            if (m_new == -INFINITY) { // no position of the tile is in range yet (the same for the whole wave)
                w[g] = 0.0f;
                continue;
            }
            const float shrink = exp2f(m[g] - m_new);
            w[g] = exp2f(sc[g] - m_new);
            l[g] = l[g] * shrink + w[g];
#pragma unroll
            for (int j = 0; j < 8; j++) o[g][j] *= shrink;
            m[g] = m_new;
        }
        // values: each lane-group's positions, weighted
#pragma unroll
        for (uint32_t j = 0; j < NV; j++) {
            float v[8];
            forge__kv_cvt8<TYPE>(rv[j], shift_v, v);
            const float vs = forge__kv_scale8<TYPE>(rv[j]);
            const uint32_t src = (j * PW + grp) * KL;
#pragma unroll
            for (int g = 0; g < G; g++) {
                const float f = FORGE_SHFL(w[g], src) * vs;
#pragma unroll
                for (int jj = 0; jj < 8; jj++) o[g][jj] += f * v[jj];
            }
        }
    }
    // each wave: m is already common; l over its positions, o over its lane-groups
#pragma unroll
    for (int g = 0; g < G; g++) {
        float lw = l[g];
        for (uint32_t mask = KL; mask < wave; mask <<= 1) lw += FORGE_SHFL_XOR(lw, mask);
        for (uint32_t mask = L; mask < wave; mask <<= 1) {
#pragma unroll
            for (int j = 0; j < 8; j++) o[g][j] += FORGE_SHFL_XOR(o[g][j], mask);
        }
        if (grp == 0) {
#pragma unroll
            for (int j = 0; j < 8; j++) s_o[wid][g][dv0 + j] = o[g][j];
            if (sub == 0) s_m[wid][g] = m[g], s_l[wid][g] = lw;
        }
    }
    forge__attd_finish<G>(a, b, hd, s_m, s_l, s_o, &s_last, n_waves, n_split, partial, q8);
}

// How many query heads of a KV head's group one decode attention block takes, for a span of up to
// `span` positions. Smaller parts put more blocks on the span's positions (shorter chains, more loads
// in flight) and read each K and V row once a part: they pay while the span is short, and cost once
// the re-reads and the machine's fill weigh more. So: the smallest part of 1, 2 or 4 heads that
// divides the group and keeps the blocks of one split (n_head_kv x parts) within
// FORGE__ATTD_PARTS_ONE for a span of one split, FORGE__ATTD_PARTS_SHORT up to FORGE__ATTD_SHORT
// positions, else FORGE__ATTD_PARTS_LONG; a group none divides takes even parts of at most 4. On the
// H100, tg128 (tests/PERF.md, "Decode attention cut by the span, one graph a band of positions"):
// Llama-3-8B (8 KV heads, groups of 4) from 0, 1024, 4096 and 8192 positions with parts of 4 / 2 / 1: 418-422 / 435 / 440, 385 / 401-404 / 388,
// 355 / 379 / 339, 333 / 349-351 / 291, and 16384 (q8_0 and f16) and 65536 favour 4; Qwen2.5-1.5B
// (2 KV heads, groups of 6) with parts of 2 / 1: 912 / 935, 748 / 762 at 4096, 703 / 714 at 8192,
// 654 / 627 at 16384.
#define FORGE__ATTD_SHORT 8192
#define FORGE__ATTD_PARTS_ONE 32
#define FORGE__ATTD_PARTS_SHORT 16
#define FORGE__ATTD_PARTS_LONG 8
static uint32_t forge__attd_per_block(uint32_t group, uint32_t n_head_kv, uint32_t span) {
    const uint32_t limit = span <= FORGE__ATTD_ONE_SPLIT ? FORGE__ATTD_PARTS_ONE : span <= FORGE__ATTD_SHORT ? FORGE__ATTD_PARTS_SHORT
                                                                                                          : FORGE__ATTD_PARTS_LONG;
    for (uint32_t p = 1; p <= FORGE__ATTD_MAX_GROUP; p *= 2)
        if (group % p == 0 && (uint64_t)n_head_kv * (group / p) <= limit) return p;
    if (group % 4 == 0) return 4;
    if (group % 2 == 0) return 2;
    const uint32_t parts = (group + FORGE__ATTD_MAX_GROUP - 1) / FORGE__ATTD_MAX_GROUP;
    return (group + parts - 1) / parts;
}

// Launches forge__k_attention_tile or forge__k_attention_decode when the shape suits one (see above); returns 0 when it does not.
// rk (forge_hip_rope_attention_q8's): the tile kernel rotates and stores the token's rows; 0 when the shape needs another kernel.
static int forge__hip_attention_decode(const forge_hip_attention_args &a, size_t row_k_bytes, size_t row_v_bytes,
                                       const uint32_t *dev_pos, void *scratch, size_t scratch_bytes, hipStream_t s,
                                       uint8_t *q8, const forge__rope_kv *rope) {
    const uint32_t hd = a.head_dim, group = a.n_head / a.n_head_kv;
    if (hd != a.head_dim_v || hd > FORGE__ATTD_MAX_DIM || hd < 8 || (hd & (hd - 1)) != 0 || (uint64_t)a.n_head > 65535u)
        return 0;
    const uintptr_t at = (uintptr_t)a.cache_k | (uintptr_t)a.cache_v | (a.row_seq ? (uintptr_t)a.seq_stride : 0u); // every row's base
    if ((a.kv_type == FORGE_HIP_F16 || a.kv_type == FORGE_HIP_F32) && (at & 15u)) return 0;
    if ((a.kv_type == FORGE_HIP_Q8_0 || a.kv_type == FORGE_HIP_Q4_0) && (at & 1u)) return 0;
    const uint32_t max_len = a.row_pos ? a.pos0 + 1 : a.pos0 + a.n_tokens, span = a.window && a.window < max_len ? a.window : max_len;
    const uint32_t per_block = forge__attd_per_block(group, a.n_head_kv, span);
    const uint32_t parts = (group + per_block - 1) / per_block;
    const int gp = per_block <= 1 ? 1 : per_block <= 2 ? 2 : 4;
    const bool w8 = (at | row_k_bytes | row_v_bytes) % 8 == 0; // Q8_0 / Q4_0 quants
    const bool tiled = (a.kv_type == FORGE_HIP_F16 || ((a.kv_type == FORGE_HIP_Q8_0 || a.kv_type == FORGE_HIP_Q4_0) && w8)) &&
                       (hd == 64 || hd == 128 || hd == 256) && (a.n_cells == 0 || a.n_cells >= 64);
    if (rope && (!tiled || a.n_tokens != 1 || a.row_pos)) return 0;
    const forge__rope_kv rk = rope ? *rope : forge__rope_kv(); // zeros: no rotation
    const uint64_t blocks = (uint64_t)a.n_head_kv * parts * a.n_tokens, target = FORGE__ATTD_MIN_BLOCKS * (uint64_t)forge__hip_sm_count();
    uint64_t n_split = forge__attd_want(span);
    if (n_split > (target + blocks - 1) / blocks) n_split = (target + blocks - 1) / blocks; // the splits that fill the device
    if (n_split > FORGE__ATTD_MAX_SPLIT) n_split = FORGE__ATTD_MAX_SPLIT;
    const size_t per_split = (size_t)a.n_tokens * a.n_head * (hd + 2) * sizeof(float);
    if (!scratch || n_split * per_split > scratch_bytes) n_split = scratch ? scratch_bytes / per_split : 1;
    if (n_split < 1) n_split = 1;
    dim3 grid((uint32_t)(a.n_head_kv * parts), a.n_tokens, (uint32_t)n_split);
    const bool wide = span <= FORGE__ATTD_ONE_SPLIT && a.n_tokens == 1 && !a.row_pos; // one split of one-head blocks: twice the waves
    float *partial = (float *)scratch;
#define FORGE__ATTD_LAUNCH(T, GP) \
    forge__launch(T != FORGE_HIP_F32 && T != FORGE_HIP_F16 && w8 ? forge__k_attention_decode<T, GP, T != FORGE_HIP_F32 && T != FORGE_HIP_F16> \
                                                                 : forge__k_attention_decode<T, GP, false>, grid, dim3(FORGE__ATTD_THREADS), s, a, row_k_bytes, row_v_bytes, (uint32_t)n_split, \
                  per_block, partial, dev_pos, q8)
#define FORGE__ATTD_TYPE(T) \
    switch (gp) { \
    case 1: FORGE__ATTD_LAUNCH(T, 1); break; \
    case 2: FORGE__ATTD_LAUNCH(T, 2); break; \
    default: FORGE__ATTD_LAUNCH(T, 4); break; \
    }
#define FORGE__ATTT_LAUNCH(T, GP, HD) \
    if (GP == 1 && wide) \
        forge__launch_as(!rope, forge__k_attention_tile<T, 1, HD, 2 * FORGE__ATTD_THREADS>, grid, dim3(2 * FORGE__ATTD_THREADS), s, a, \
                         row_k_bytes, row_v_bytes, (uint32_t)n_split, per_block, partial, dev_pos, q8, rk); \
    else \
        forge__launch_as(!rope, forge__k_attention_tile<T, GP, HD>, grid, dim3(FORGE__ATTD_THREADS), s, a, row_k_bytes, row_v_bytes, \
                         (uint32_t)n_split, per_block, partial, dev_pos, q8, rk)
#define FORGE__ATTT_DIM(T, GP) \
    switch (hd) { \
    case 64: FORGE__ATTT_LAUNCH(T, GP, 64); break; \
    case 128: FORGE__ATTT_LAUNCH(T, GP, 128); break; \
    default: FORGE__ATTT_LAUNCH(T, GP, 256); break; \
    }
#define FORGE__ATTT_TYPE(T) \
    switch (gp) { \
    case 1: FORGE__ATTT_DIM(T, 1); break; \
    case 2: FORGE__ATTT_DIM(T, 2); break; \
    default: FORGE__ATTT_DIM(T, 4); break; \
    }
    if (tiled) {
        switch (a.kv_type) {
        case FORGE_HIP_F16: FORGE__ATTT_TYPE(FORGE_HIP_F16); break;
        case FORGE_HIP_Q8_0: FORGE__ATTT_TYPE(FORGE_HIP_Q8_0); break;
        default: FORGE__ATTT_TYPE(FORGE_HIP_Q4_0); break;
        }
    } else {
        switch (a.kv_type) {
        case FORGE_HIP_F32: FORGE__ATTD_TYPE(FORGE_HIP_F32); break;
        case FORGE_HIP_F16: FORGE__ATTD_TYPE(FORGE_HIP_F16); break;
        case FORGE_HIP_Q8_0: FORGE__ATTD_TYPE(FORGE_HIP_Q8_0); break;
        default: FORGE__ATTD_TYPE(FORGE_HIP_Q4_0); break;
        }
    }
#undef FORGE__ATTD_TYPE
#undef FORGE__ATTD_LAUNCH
#undef FORGE__ATTT_TYPE
#undef FORGE__ATTT_DIM
#undef FORGE__ATTT_LAUNCH
    if (n_split > 1 && !a.counters)
        forge__launch(forge__k_attention_merge, dim3(a.n_head, a.n_tokens), dim3(128), s, (const float *)partial, a.out, a.n_head, hd,
                      (uint32_t)n_split, q8);
    return 1;
}

extern "C" {

// The spans (positions a decode step reads) at which the decode attention launch changes how it
// cuts a group of query heads into blocks (forge__attd_per_block), ascending, at most max of them.
// A launch sized for a span of L (args->pos0 + n_tokens = L) serves every position below L, so a
// caller that records one decode graph for each band between these serves each position with the
// blocks that suit it.
uint32_t forge_hip_attention_span_limits(uint32_t *limits, uint32_t max) {
    const uint32_t all[2] = {FORGE__ATTD_ONE_SPLIT, FORGE__ATTD_SHORT};
    uint32_t i;
    for (i = 0; i < 2 && i < max; i++) limits[i] = all[i];
    return i;
}

// forge_hip_attention with the first position read from device memory (*dev_pos, a uint32) when the
// kernels run: the decode step's variant, which a recorded graph replays at every position.
// args->pos0 is the largest first position a replay will read (n_ctx - n_tokens for a context):
// the checks hold for it, and the grid gets the splits of its span (sized by n_ctx, not by the
// position), FORGE__ATT_DECODE_CHUNK positions or more each. At run time each block takes the
// splits the real position needs; those past them record m = -inf, l = 0, o = 0, which weigh nothing.
int forge_hip_attention_at(const forge_hip_attention_args *args, const uint32_t *dev_pos, void *scratch, size_t scratch_bytes,
                           void *stream, char *message, size_t message_bytes) {
    forge_hip_attention_args a = *args;
    const size_t row_k_bytes = forge__hip_kv_row_bytes(a.kv_type, a.head_dim), row_v_bytes = forge__hip_kv_row_bytes(a.kv_type, a.head_dim_v);
    hipStream_t s = (hipStream_t)stream;
    if (!dev_pos) return forge__hip_refuse(message, message_bytes, "attention_at: no device position");
    // the checks of the plain launcher, at the largest position
    if (a.n_tokens == 0) return 0;
    if (forge__hip_attention_check(&a, message, message_bytes)) return -1;
    if (a.scale == 0.0f) a.scale = (float)(1.0 / sqrt((double)a.head_dim));
    if (forge__hip_attention_decode(a, row_k_bytes, row_v_bytes, dev_pos, scratch, scratch_bytes, s))
        return forge__hip_launched("attention launch", message, message_bytes);
    const uint32_t max_len = a.pos0 + a.n_tokens;
    const uint32_t span = a.window && a.window < max_len ? a.window : max_len;
    uint32_t n_split = forge__hip_decode_splits(span);
    const uint32_t fill = FORGE__ATT_DECODE_BLOCKS / (a.n_head * a.n_tokens); // splits that fill the device
    const size_t per_split = (size_t)a.n_tokens * a.n_head * (a.head_dim_v + 2) * sizeof(float);
    if (n_split > fill) n_split = fill ? fill : 1;
    if ((size_t)a.n_tokens * a.n_head >= 256) n_split = 1;
    if (!scratch || (size_t)n_split * per_split > scratch_bytes) n_split = scratch ? (uint32_t)(scratch_bytes / per_split) : 1;
    if (n_split < 1) n_split = 1;
    const uint32_t chunk = (span + n_split - 1) / n_split; // replaced in the kernel by the position's own
    dim3 grid(a.n_head, a.n_tokens, n_split);
    float *partial = (float *)scratch;
    switch (a.kv_type) {
    case FORGE_HIP_F32: forge__k_attention<FORGE_HIP_F32><<<grid, FORGE__ATT_THREADS, 0, s>>>(a, row_k_bytes, row_v_bytes, n_split, chunk, partial, dev_pos); break;
    case FORGE_HIP_F16: forge__k_attention<FORGE_HIP_F16><<<grid, FORGE__ATT_THREADS, 0, s>>>(a, row_k_bytes, row_v_bytes, n_split, chunk, partial, dev_pos); break;
    case FORGE_HIP_Q8_0: forge__k_attention<FORGE_HIP_Q8_0><<<grid, FORGE__ATT_THREADS, 0, s>>>(a, row_k_bytes, row_v_bytes, n_split, chunk, partial, dev_pos); break;
    default: forge__k_attention<FORGE_HIP_Q4_0><<<grid, FORGE__ATT_THREADS, 0, s>>>(a, row_k_bytes, row_v_bytes, n_split, chunk, partial, dev_pos); break;
    }
    if (n_split > 1) forge__k_attention_merge<<<dim3(a.n_head, a.n_tokens), 128, 0, s>>>(partial, a.out, a.n_head, a.head_dim_v, n_split);
    return forge__hip_launched("attention launch", message, message_bytes);
}

// forge_hip_attention_at for one token that also writes its output as a quantized vector (see
// forge_hip_q8_quantize) into q8, for the product that reads it: by the decode kernel or its merge
// where they serve the shape, else by a quantize launch after it.
int forge_hip_attention_at_q8(const forge_hip_attention_args *args, const uint32_t *dev_pos, void *q8, void *scratch,
                              size_t scratch_bytes, void *stream, char *message, size_t message_bytes) {
    forge_hip_attention_args a = *args;
    const size_t row_k_bytes = forge__hip_kv_row_bytes(a.kv_type, a.head_dim), row_v_bytes = forge__hip_kv_row_bytes(a.kv_type, a.head_dim_v);
    if (!dev_pos || !q8) return forge__hip_refuse(message, message_bytes, "attention_at_q8: no device position or no q8 vector");
    if (a.n_tokens != 1 || a.head_dim_v % 32) return forge__hip_refuse(message, message_bytes, "attention_at_q8: one token, heads of 32k values");
    if (forge__hip_attention_check(&a, message, message_bytes)) return -1;
    if (a.scale == 0.0f) a.scale = (float)(1.0 / sqrt((double)a.head_dim));
    if (forge__hip_attention_decode(a, row_k_bytes, row_v_bytes, dev_pos, scratch, scratch_bytes, (hipStream_t)stream, (uint8_t *)q8))
        return forge__hip_launched("attention launch", message, message_bytes);
    if (forge_hip_attention_at(args, dev_pos, scratch, scratch_bytes, stream, message, message_bytes)) return -1;
    return forge_hip_q8_quantize(a.out, a.n_head * a.head_dim_v, q8, stream, message, message_bytes);
}

// The pair frequencies of a rotary embedding, base^(-2i / n_rot) for i < n_rot / 2, into dst (device
// doubles): the table forge_hip_rope_attention_q8 reads, the same bits as the rope kernels' own.
int forge_hip_rope_freqs(double *dst, uint32_t n_rot, float freq_base, void *stream, char *message, size_t message_bytes) {
    if (!dst || n_rot == 0 || n_rot % 2 || n_rot / 2 > FORGE__ROPE_MAX_HALF)
        return forge__hip_refuse(message, message_bytes, "rope_freqs: no table, or unsupported rotary dimensions");
    forge__launch(forge__k_rope_freqs, dim3(1), dim3(FORGE__ROPE_MAX_HALF), (hipStream_t)stream, dst, n_rot, freq_base);
    return forge__hip_launched("rope_freqs launch", message, message_bytes);
}

// One decode token's rotary embedding, cache store and attention, its output also quantized into q8
// (forge_hip_attention_at_q8): args->q holds the token's query heads unrotated, k and v its key and
// value rows (n_head_kv heads each) as the projections wrote them; the rotation is forge_hip_rope's
// at position *dev_pos (rope->freq: forge_hip_rope_freqs's table for rope->freq_base), and the rows
// go into cell *dev_pos % n_cells. Where the tile kernel serves the shape it does all of it in one
// launch and leaves q and k as they were; else forge_hip_rope_store (rotating q and k in place) and
// forge_hip_attention_at_q8 do it in two. Either way the cache and the output are the same bits.
// The one launch is not overlapped with the kernel before it: on an H200 its blocks, placed early
// beside the query, key and value products, made a Llama-3-8B decode step 6% slower (tests/PERF.md).
// rope->angles lets the layers of a step share the rotation: the first launch of the step computes
// the angles (float64, as the rope kernels) and writes them, the later ones read them (the same bits).
int forge_hip_rope_attention_q8(const forge_hip_attention_args *args, const forge_hip_rope_args *rope, float *k, const float *v,
                                const uint32_t *dev_pos, void *q8, void *scratch, size_t scratch_bytes, void *stream, char *message,
                                size_t message_bytes) {
    forge_hip_attention_args a = *args;
    const size_t row_k_bytes = forge__hip_kv_row_bytes(a.kv_type, a.head_dim), row_v_bytes = forge__hip_kv_row_bytes(a.kv_type, a.head_dim_v);
    if (!rope || !rope->freq || !dev_pos || !q8 || !a.q || !k || !v)
        return forge__hip_refuse(message, message_bytes,
                                 "rope_attention_q8: no rotary table, device position, q8 vector, query, key or value");
    if (a.n_tokens != 1 || a.head_dim_v % 32) return forge__hip_refuse(message, message_bytes, "rope_attention_q8: one token, heads of 32k values");
    if (rope->n_rot > a.head_dim || rope->n_rot % 2 || rope->n_rot / 2 > FORGE__ROPE_MAX_HALF || (rope->mode != 0 && rope->mode != 2))
        return forge__hip_refuse(message, message_bytes, "rope_attention_q8: unsupported rotary dimensions or mode");
    if (forge__hip_attention_check(&a, message, message_bytes)) return -1;
    if (a.scale == 0.0f) a.scale = (float)(1.0 / sqrt((double)a.head_dim));
    forge__rope_kv rk;
    rk.k = k, rk.v = v, rk.freq = rope->freq, rk.freq_factors = rope->freq_factors, rk.freq_scale = rope->freq_scale;
    rk.n_rot = rope->n_rot, rk.neox = rope->mode == 2, rk.angles = rope->angles, rk.ready = rope->angles && rope->angles_ready;
    if (forge__hip_attention_decode(a, row_k_bytes, row_v_bytes, dev_pos, scratch, scratch_bytes, (hipStream_t)stream, (uint8_t *)q8, &rk))
        return forge__hip_launched("attention launch", message, message_bytes);
    if (rope->angles && !rope->angles_ready) // the rotation below computes its own: the angles for the launches after this one
        forge__launch(forge__k_rope_angles, dim3(1), dim3(FORGE__ROPE_MAX_HALF), (hipStream_t)stream, rope->angles, rope->freq,
                      rope->freq_factors, rope->freq_scale, rope->n_rot, dev_pos);
    if (forge_hip_rope_store(a.kv_type, (float *)a.q, k, v, a.n_head, a.n_head_kv, a.head_dim, a.head_dim_v, rope->n_rot, rope->mode, 0,
                             dev_pos, rope->freq_base, rope->freq_scale, rope->freq_factors, (void *)a.cache_k, (void *)a.cache_v,
                             a.n_cells, stream, message, message_bytes))
        return -1;
    return forge_hip_attention_at_q8(args, dev_pos, q8, scratch, scratch_bytes, stream, message, message_bytes);
}

}  // extern "C"

/* >>moe --------------------------------------------------------------------------------------- */

// Mixture of experts. A route row per token holds 2k floats: the k chosen expert ids (exact small
// integers as floats), then their k weights. forge_hip_moe_route writes it from the router logits,
// forge_hip_matmul_id multiplies each (token, slot) by its expert's matrix, forge_hip_moe_sum adds
// the slots up with their weights.
#define FORGE_HIP_MOE_MAX_EXPERTS 256
#define FORGE__MOE_PER_LANE 8   // experts per lane: 256 over the narrowest wave
#define FORGE__MOE_THREADS 256
#define FORGE__MOE_ROWS 4       // rows per wave in the per-pair matvec
#define FORGE__MOE_TILE 64      // rows and (token, slot) pairs of a tile in the gathered matmul
#define FORGE__MOE_TILED_MIN_PAIRS 1024 // from here on a batch takes the gathered tiled kernel

// Expert of pair (t, j), pair = t * k + j; an id that is not a number or negative reads expert 0.
__device__ __forceinline__ int forge__moe_expert(const float *__restrict__ route, uint32_t pair, uint32_t k) {
    const float id = route[(size_t)(pair / k) * 2 * k + pair % k];
    return id >= 0.0f ? (int)id : 0;
}

// One wave per token: p = softmax(logits), then k rounds of a wave-wide arg-max over the experts not
// yet taken (larger p first, the lower index on equal p). Lane l holds experts l, l + wave, ...; a
// probability that is not a number counts as 0, so every round finds an expert.
__global__ void forge__k_moe_route(const float *__restrict__ logits, uint32_t n_expert, uint32_t k, int renorm,
                                   float *__restrict__ route) {
    const uint32_t wave = warpSize, lane = threadIdx.x;
    if (lane >= wave) return; // the launcher sized the block as one wave; a larger guess leaves the rest idle
    const float *row = logits + (size_t)blockIdx.x * n_expert;
    float *out = route + (size_t)blockIdx.x * 2 * k;
    float p[FORGE__MOE_PER_LANE], max = -INFINITY, sum = 0.0f;
#pragma unroll
    for (int j = 0; j < FORGE__MOE_PER_LANE; j++) {
        const uint32_t e = lane + j * wave;
        p[j] = e < n_expert ? row[e] : -INFINITY;
        max = fmaxf(max, p[j]);
    }
    max = forge__wave_max(max);
#pragma unroll
    for (int j = 0; j < FORGE__MOE_PER_LANE; j++) {
        const uint32_t e = lane + j * wave;
        p[j] = e < n_expert ? expf(p[j] - max) : 0.0f;
        sum += p[j];
    }
    sum = forge__wave_sum(sum);
#pragma unroll
    for (int j = 0; j < FORGE__MOE_PER_LANE; j++) p[j] = sum > 0.0f && p[j] == p[j] ? p[j] / sum : 0.0f;
    uint32_t taken = 0; // bit j: expert lane + j * wave is chosen
    float chosen_sum = 0.0f;
    for (uint32_t i = 0; i < k; i++) {
        float best = -1.0f;
        uint32_t best_e = UINT32_MAX;
#pragma unroll
        for (int j = 0; j < FORGE__MOE_PER_LANE; j++) { // ascending e: strict > keeps the lower index
            const uint32_t e = lane + j * wave;
            if (e < n_expert && !((taken >> j) & 1u) && p[j] > best) best = p[j], best_e = e;
        }
        for (int lane_mask = warpSize / 2; lane_mask > 0; lane_mask >>= 1) {
            const float other = FORGE_SHFL_XOR(best, lane_mask);
            const uint32_t other_e = (uint32_t)FORGE_SHFL_XOR((int)best_e, lane_mask);
            if (other > best || (other == best && other_e < best_e)) best = other, best_e = other_e;
        }
        if (best_e % wave == lane) taken |= 1u << (best_e / wave);
        if (lane == 0) out[i] = (float)best_e, out[k + i] = best;
        chosen_sum += best;
    }
    if (renorm && lane == 0 && chosen_sum > 0.0f)
        for (uint32_t i = 0; i < k; i++) out[k + i] /= chosen_sum; // lane 0 wrote them: no sync needed
}

// Per-pair matvec, the decode case: blockIdx.y walks the (token, slot) pairs, reads the pair's expert
// on the device and runs the body of >>matmul's forge__k_matvec over that expert's matrix (its own
// copy here: the >>matmul kernels take one fixed matrix). Every weight type.
template <class W>
__global__ void __launch_bounds__(FORGE__MOE_THREADS)
forge__k_matvec_id(const uint8_t *__restrict__ w, size_t expert_bytes, size_t row_bytes, uint32_t n_rows, uint32_t n_cols,
                   const float *__restrict__ x, int x_per_slot, const float *__restrict__ route, uint32_t k, uint32_t n_pairs,
                   float *__restrict__ y) {
    const uint32_t wave = warpSize, lane = threadIdx.x % wave, waves_per_block = blockDim.x / wave;
    const uint32_t r0 = (blockIdx.x * waves_per_block + threadIdx.x / wave) * FORGE__MOE_ROWS;
    if (r0 >= n_rows) return; // the whole wave leaves together
    const uint32_t n_here = n_rows - r0 < FORGE__MOE_ROWS ? n_rows - r0 : FORGE__MOE_ROWS;
    const uint32_t n_units = forge__fast_units<W>(n_cols);
    for (uint32_t pair = blockIdx.y; pair < n_pairs; pair += gridDim.y) {
        const uint8_t *we = w + (size_t)forge__moe_expert(route, pair, k) * expert_bytes + (size_t)r0 * row_bytes;
        const float *xin = x + (size_t)(x_per_slot ? pair : pair / k) * n_cols;
        float acc[FORGE__MOE_ROWS] = {0};
        for (uint32_t u = lane; u < n_units; u += wave) {
            float xr[32];
            const float4 *xv = (const float4 *)(xin + (size_t)u * 32);
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const float4 f = xv[i];
                xr[4 * i] = f.x, xr[4 * i + 1] = f.y, xr[4 * i + 2] = f.z, xr[4 * i + 3] = f.w;
            }
#pragma unroll
            for (int r = 0; r < FORGE__MOE_ROWS; r++) {
                if ((uint32_t)r < n_here) {
                    float v[32], s0 = 0.0f, s1 = 0.0f;
                    W::unit(we + (size_t)r * row_bytes, u, n_cols, v);
#pragma unroll
                    for (int j = 0; j < 32; j += 2) s0 += v[j] * xr[j], s1 += v[j + 1] * xr[j + 1];
                    acc[r] += s0 + s1;
                }
            }
        }
        if (W::is_float)
            for (uint32_t c = n_units * 32 + lane; c < n_cols; c += wave) {
                const float xc = xin[c];
#pragma unroll
                for (int r = 0; r < FORGE__MOE_ROWS; r++)
                    if ((uint32_t)r < n_here) acc[r] += W::elem(we + (size_t)r * row_bytes, c) * xc;
            }
#pragma unroll
        for (int r = 0; r < FORGE__MOE_ROWS; r++) {
            const float total = forge__wave_sum(acc[r]);
            if (lane == 0 && (uint32_t)r < n_here) y[(size_t)pair * n_rows + r0 + r] = total;
        }
    }
}

// The same over >>matmul's fast piece readers (Q4_0, Q8_0, Q4_K, Q6_K): forge__k_matvec_fast's body.
template <class P>
__global__ void __launch_bounds__(FORGE__MOE_THREADS)
forge__k_matvec_id_fast(const uint8_t *__restrict__ w, size_t expert_bytes, size_t row_bytes, uint32_t n_rows, uint32_t n_cols,
                        const float *__restrict__ x, int x_per_slot, const float *__restrict__ route, uint32_t k, uint32_t n_pairs,
                        float *__restrict__ y) {
    const uint32_t wave = warpSize, lane = threadIdx.x % wave, waves_per_block = blockDim.x / wave;
    const uint32_t r0 = (blockIdx.x * waves_per_block + threadIdx.x / wave) * FORGE__MOE_ROWS;
    if (r0 >= n_rows) return;
    const uint32_t n_pieces = n_cols / 32;
    for (uint32_t pair = blockIdx.y; pair < n_pairs; pair += gridDim.y) {
        const uint8_t *we = w + (size_t)forge__moe_expert(route, pair, k) * expert_bytes;
        const float *xin = x + (size_t)(x_per_slot ? pair : pair / k) * n_cols;
        const uint8_t *rows[FORGE__MOE_ROWS];
#pragma unroll
        for (int r = 0; r < FORGE__MOE_ROWS; r++) rows[r] = we + (size_t)min(r0 + r, n_rows - 1) * row_bytes; // extra rows: dropped
        float acc[FORGE__MOE_ROWS] = {0};
        for (uint32_t p = lane; p < n_pieces; p += wave) {
            typename P::raw raw[FORGE__MOE_ROWS];
#pragma unroll
            for (int r = 0; r < FORGE__MOE_ROWS; r++) P::load(rows[r], p, n_cols, raw[r]);
            float xr[32], xs[4];
            P::load_x(xin, p, xr, xs);
#pragma unroll
            for (int r = 0; r < FORGE__MOE_ROWS; r++) acc[r] += P::dot(raw[r], p, xr, xs);
        }
#pragma unroll
        for (int r = 0; r < FORGE__MOE_ROWS; r++) {
            const float total = forge__wave_sum(acc[r]);
            if (lane == 0 && r0 + r < n_rows) y[(size_t)pair * n_rows + r0 + r] = total;
        }
    }
}

// Prompt batches: a block owns FORGE__MOE_TILE rows of one expert (blockIdx.y) and gathers the pairs
// routed to it, 256 route entries at a time, into a list in shared memory (in any order: each pair's
// sum is the same wherever it sits); every FORGE__MOE_TILE pairs taken from the list's end go through
// a shared-memory tiled product like >>matmul's, so an expert's weights are read once per 64 pairs
// instead of once per pair. An expert that no pair chose costs one scan of the routes.
template <class W>
__global__ void __launch_bounds__(FORGE__MOE_THREADS)
forge__k_matmul_id_tiled(const uint8_t *__restrict__ w, size_t expert_bytes, size_t row_bytes, uint32_t n_rows, uint32_t n_cols,
                         const float *__restrict__ x, int x_per_slot, const float *__restrict__ route, uint32_t k, uint32_t n_pairs,
                         float *__restrict__ y) {
    __shared__ float w_tile[FORGE__MOE_TILE][33]; // +1 column: rows land in different banks
    __shared__ float x_tile[FORGE__MOE_TILE][33];
    __shared__ uint32_t list[FORGE__MOE_TILE + FORGE__MOE_THREADS];
    __shared__ uint32_t count;
    const uint32_t tid = threadIdx.x, row0 = blockIdx.x * FORGE__MOE_TILE, tx = tid % 16, ty = tid / 16;
    const int expert = (int)blockIdx.y;
    const uint8_t *we = w + (size_t)expert * expert_bytes;
    const uint32_t n_units = forge__fast_units<W>(n_cols), n_steps = (n_cols + 31) / 32;
    if (tid == 0) count = 0;
    __syncthreads();
    for (uint32_t base = 0; base < n_pairs; base += FORGE__MOE_THREADS) {
        if (base + tid < n_pairs && forge__moe_expert(route, base + tid, k) == expert) list[atomicAdd(&count, 1u)] = base + tid;
        __syncthreads();
        uint32_t have = count; // the same in every thread
        const int last = base + FORGE__MOE_THREADS >= n_pairs;
        while (have >= FORGE__MOE_TILE || (last && have > 0)) {
            const uint32_t n_here = have < FORGE__MOE_TILE ? have : FORGE__MOE_TILE, *pairs = list + (have - n_here);
            float acc[4][4] = {{0}};
            for (uint32_t step = 0; step < n_steps; step++) {
                const uint32_t col0 = step * 32;
                if (tid < FORGE__MOE_TILE) {
                    const uint32_t r = row0 + tid;
                    float v[32];
                    if (r < n_rows && step < n_units) {
                        W::unit(we + (size_t)r * row_bytes, step, n_cols, v);
                    } else {
#pragma unroll
                        for (int c = 0; c < 32; c++)
                            v[c] = (W::is_float && r < n_rows && col0 + c < n_cols) ? W::elem(we + (size_t)r * row_bytes, col0 + c) : 0.0f;
                    }
#pragma unroll
                    for (int c = 0; c < 32; c++) w_tile[tid][c] = v[c];
                }
                { // activations: slot tid/4, 8 columns from 8 * (tid % 4)
                    const uint32_t slot = tid / 4, c = 8 * (tid % 4);
                    const float *src = NULL;
                    if (slot < n_here) src = x + (size_t)(x_per_slot ? pairs[slot] : pairs[slot] / k) * n_cols + col0 + c;
#pragma unroll
                    for (int j = 0; j < 8; j++) x_tile[slot][c + j] = (src && col0 + c + j < n_cols) ? src[j] : 0.0f;
                }
                __syncthreads();
#pragma unroll 8
                for (int c = 0; c < 32; c++) {
                    float a[4], b[4];
#pragma unroll
                    for (int i = 0; i < 4; i++) a[i] = w_tile[tx + 16 * i][c], b[i] = x_tile[ty + 16 * i][c];
#pragma unroll
                    for (int i = 0; i < 4; i++)
#pragma unroll
                        for (int j = 0; j < 4; j++) acc[i][j] += a[i] * b[j];
                }
                __syncthreads();
            }
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const uint32_t slot = ty + 16 * j;
                if (slot >= n_here) continue;
                float *out = y + (size_t)pairs[slot] * n_rows;
#pragma unroll
                for (int i = 0; i < 4; i++)
                    if (row0 + tx + 16 * i < n_rows) out[row0 + tx + 16 * i] = acc[i][j];
            }
            have -= n_here;
        }
        __syncthreads(); // every thread has read count and the list's tail before they change
        if (tid == 0) count = have;
        __syncthreads();
    }
}

// dst[t][i] = sum_j route weight j * src[t * k + j][i], slots added in order j = 0, 1, ...
__global__ void forge__k_moe_sum(const float *__restrict__ src, const float *__restrict__ route, uint32_t n_tokens, uint32_t k,
                                 uint32_t n, float *__restrict__ dst) {
    FORGE__ROW_LOOP(n_tokens, n) {
        const float *weights = route + (size_t)t * 2 * k + k;
        float sum = 0.0f;
        for (uint32_t j = 0; j < k; j++) sum += weights[j] * src[((size_t)t * k + j) * n + i];
        dst[(size_t)t * n + i] = sum;
    }
}

extern "C" {

// route [n_tokens][2k] from logits [n_tokens][n_expert]: per token p = softmax(logits), the k largest
// p in descending order (the lower index first on equal p) as ids, then their p as weights, divided
// by the sum of the k when renorm != 0. 1 <= k <= n_expert <= FORGE_HIP_MOE_MAX_EXPERTS (256).
int forge_hip_moe_route(const float *logits, uint32_t n_tokens, uint32_t n_expert, uint32_t k, int renorm, float *route,
                        void *stream, char *message, size_t message_bytes) {
    if (n_expert == 0 || n_expert > FORGE_HIP_MOE_MAX_EXPERTS || k == 0 || k > n_expert) {
        if (message && message_bytes)
            snprintf(message, message_bytes, "moe_route: %u of %u experts (at most %d experts, 1 <= k <= experts)", k, n_expert,
                     FORGE_HIP_MOE_MAX_EXPERTS);
        return -1;
    }
    if (n_tokens > 2147483647u) return forge__hip_refuse(message, message_bytes, "moe_route: too many tokens");
    if (n_tokens == 0) return 0;
    forge__k_moe_route<<<n_tokens, forge__hip_wave_size(), 0, (hipStream_t)stream>>>(logits, n_expert, k, renorm, route);
    return forge__hip_launched("moe_route launch", message, message_bytes);
}

// y[(t * k + j) * n_rows + r] = sum_c W_e[r][c] xin[c] for every token t < n_tokens and slot j < k,
// e = route[t * 2k + j] (see forge_hip_moe_route). w: the 3D GGUF tensor [n_expert][n_rows][n_cols],
// expert e's matrix at w + e * expert_bytes (expert_bytes >= n_rows * row_bytes; GGUF stores them
// back to back), any weight type forge_hip_matmul reads. xin = x + t * n_cols when x_per_slot == 0
// (every slot reads the token's row), x + (t * k + j) * n_cols otherwise (e.g. the down projection
// of each slot's own activations). y [n_tokens * k][n_rows] must not overlap x. Expert ids must be
// below the tensor's n_expert and FORGE_HIP_MOE_MAX_EXPERTS. Small batches run a matvec per pair
// (every expert byte read once per pair: right for decode), batches of FORGE__MOE_TILED_MIN_PAIRS
// pairs or more gather each expert's pairs into tiles.
int forge_hip_matmul_id(uint32_t type, const void *w, size_t expert_bytes, uint32_t n_rows, uint32_t n_cols, const float *x,
                        int x_per_slot, const float *route, uint32_t k, uint32_t n_tokens, float *y, void *stream, char *message,
                        size_t message_bytes) {
    size_t row_bytes;
    if (forge__hip_weights(type, n_cols, w, &row_bytes, "matmul_id", message, message_bytes)) return -1;
    if (n_rows == 0 || n_tokens == 0 || k == 0) return 0;
    if (n_cols == 0 || expert_bytes / row_bytes < n_rows || (size_t)n_tokens * k > UINT32_MAX) {
        if (message && message_bytes)
            snprintf(message, message_bytes, "matmul_id: experts of %zu bytes cannot hold %u rows of %u columns (%zu bytes), or %u x %u pairs overflow",
                     expert_bytes, n_rows, n_cols, row_bytes, n_tokens, k);
        return -1;
    }
    if (type == FORGE_HIP_Q6_K && expert_bytes % forge__q6_k_layout(n_cols) != 0)
        return forge__hip_refuse(message, message_bytes, "matmul_id: Q6_K experts in the device layout must keep its row alignment apart");
    hipStream_t s = (hipStream_t)stream;
    const uint8_t *wb = (const uint8_t *)w;
    const uint32_t n_pairs = n_tokens * k, pair_blocks = n_pairs < 65535u ? n_pairs : 65535u;
    if (n_pairs >= FORGE__MOE_TILED_MIN_PAIRS) {
        dim3 grid((n_rows + FORGE__MOE_TILE - 1) / FORGE__MOE_TILE, FORGE_HIP_MOE_MAX_EXPERTS);
        switch (type) {
#define FORGE__LAUNCH_ID_TILED(id, W)                                                                    \
    case id: forge__k_matmul_id_tiled<W><<<grid, FORGE__MOE_THREADS, 0, s>>>(wb, expert_bytes, row_bytes, n_rows, n_cols, x, x_per_slot, route, k, n_pairs, y); break;
            FORGE__WEIGHT_TYPES(FORGE__LAUNCH_ID_TILED)
#undef FORGE__LAUNCH_ID_TILED
        }
        return forge__hip_launched("matmul_id launch", message, message_bytes);
    }
    const uint32_t rows_per_block = FORGE__MOE_THREADS / (uint32_t)forge__hip_wave_size() * FORGE__MOE_ROWS;
    dim3 grid((n_rows + rows_per_block - 1) / rows_per_block, pair_blocks);
    switch (forge__hip_kind(type, n_cols)) {
#define FORGE__LAUNCH_ID_FAST(id, P)                                                                     \
    case id: forge__k_matvec_id_fast<P><<<grid, FORGE__MOE_THREADS, 0, s>>>(wb, expert_bytes, row_bytes, n_rows, n_cols, x, x_per_slot, route, k, n_pairs, y); \
        return forge__hip_launched("matmul_id launch", message, message_bytes);
        FORGE__LAUNCH_ID_FAST(FORGE_HIP_Q4_0, forge__p_q4_0)
        FORGE__LAUNCH_ID_FAST(FORGE_HIP_Q8_0, forge__p_q8_0)
        FORGE__LAUNCH_ID_FAST(FORGE_HIP_Q4_K, forge__p_q4_k)
        FORGE__LAUNCH_ID_FAST(FORGE_HIP_Q6_K, forge__p_q6_k)
        FORGE__LAUNCH_ID_FAST(FORGE__HIP_Q6_K_PACKED, forge__p_q6_k_packed)
        FORGE__LAUNCH_ID_FAST(FORGE__HIP_Q6_K_PACKED4, forge__p_q6_k_packed4)
        FORGE__LAUNCH_ID_FAST(FORGE__HIP_Q4_0_PACKED, forge__p_q4_0_packed)
        FORGE__LAUNCH_ID_FAST(FORGE__HIP_Q8_0_PACKED, forge__p_q8_0_packed)
#undef FORGE__LAUNCH_ID_FAST
    default: break;
    }
    switch (type) {
#define FORGE__LAUNCH_ID(id, W)                                                                          \
    case id: forge__k_matvec_id<W><<<grid, FORGE__MOE_THREADS, 0, s>>>(wb, expert_bytes, row_bytes, n_rows, n_cols, x, x_per_slot, route, k, n_pairs, y); break;
        FORGE__WEIGHT_TYPES(FORGE__LAUNCH_ID)
#undef FORGE__LAUNCH_ID
    }
    return forge__hip_launched("matmul_id launch", message, message_bytes);
}

// dst[t][i] = sum_j route[t * 2k + k + j] * src[(t * k + j) * n + i], i < n, t < n_tokens: the
// experts' outputs weighted and added (slots in order). dst must not overlap src.
int forge_hip_moe_sum(const float *src, const float *route, uint32_t n_tokens, uint32_t k, uint32_t n, float *dst, void *stream,
                      char *message, size_t message_bytes) {
    if (n_tokens == 0 || n == 0) return 0;
    forge__k_moe_sum<<<forge__hip_row_grid(n_tokens, n), 256, 0, (hipStream_t)stream>>>(src, route, n_tokens, k, n, dst);
    return forge__hip_launched("moe_sum launch", message, message_bytes);
}

}  // extern "C"

/* >>capture ----------------------------------------------------------------------------------- */

// Hidden-state capture: f32 rows into the capture staging as f32, f16 or bf16, rounded to nearest
// even with the same integer steps as forge.h's forge__capture_store, so CPU and GPU captures agree
// bit for bit on the same values.
__global__ void forge__k_capture_store(uint8_t *__restrict__ dst, const float *__restrict__ src, size_t n, int dtype) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float v = src[i];
        if (dtype == 0) {
            ((float *)dst)[i] = v;
        } else if (dtype == 1) {
            ((uint16_t *)dst)[i] = (uint16_t)forge__to_f16(v);
        } else {
            const uint32_t bits = __float_as_uint(v);
            ((uint16_t *)dst)[i] = (bits & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((bits >> 16) | 0x40u)
                                                                      : (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
        }
    }
}

extern "C" {

// n floats of src into dst as dtype (0 f32, 1 f16, 2 bf16). dst: device memory, 4-byte aligned.
int forge_hip_capture_store(void *dst, const float *src, size_t n, int dtype, void *stream, char *message, size_t message_bytes) {
    if (dtype < 0 || dtype > 2) {
        if (message && message_bytes) snprintf(message, message_bytes, "capture_store: type %d is not 0 (f32), 1 (f16) or 2 (bf16)", dtype);
        return -1;
    }
    if (n == 0) return 0;
    forge__k_capture_store<<<forge__hip_blocks(n, 256), 256, 0, (hipStream_t)stream>>>((uint8_t *)dst, src, n, dtype);
    return forge__hip_launched("capture_store launch", message, message_bytes);
}

}  // extern "C"

// Attention patterns: one block per (query row, chosen head). Each thread walks the keys its query
// sees in strides of the block, keeping a running maximum and sum of exp (online softmax); the block
// merges the threads' pairs in shared memory by halving (any block size that is a power of two, no
// assumption on the wave size), then writes the probabilities of the window's keys, 0 for keys the
// query cannot see, as the capture type. The scores are the attention's: the same cache reads, scale
// and soft-cap; float arithmetic (the CPU backend's pattern sums in double).
#define FORGE__PATTERN_THREADS 128

__device__ __forceinline__ void forge__capture_put(uint8_t *dst, size_t i, float v, int dtype) {
    if (dtype == 0) {
        ((float *)dst)[i] = v;
    } else if (dtype == 1) {
        ((uint16_t *)dst)[i] = (uint16_t)forge__to_f16(v);
    } else {
        const uint32_t bits = __float_as_uint(v);
        ((uint16_t *)dst)[i] = (bits & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((bits >> 16) | 0x40u)
                                                                  : (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
    }
}

template <int TYPE>
__device__ __forceinline__ float forge__pattern_score(const forge_hip_attention_args &a, const float *q, const uint8_t *cache,
                                                      uint32_t p, uint32_t kv_head, size_t row_k_bytes) {
    const uint8_t *row = cache + ((size_t)(a.n_cells ? p % a.n_cells : p) * a.n_head_kv + kv_head) * row_k_bytes;
    float dot = 0.0f;
    for (uint32_t d = 0; d < a.head_dim; d++) dot += q[d] * forge__kv_at<TYPE>(row, d, a.head_dim);
    dot *= a.scale != 0.0f ? a.scale : rsqrtf((float)a.head_dim);
    return a.softcap > 0.0f ? a.softcap * tanhf(dot / a.softcap) : dot;
}

template <int TYPE>
__global__ void __launch_bounds__(FORGE__PATTERN_THREADS)
forge__k_attn_pattern(forge_hip_attention_args a, const uint32_t *__restrict__ dev_pos, uint8_t *__restrict__ dst, int dtype,
                      uint32_t head_first, uint32_t n_heads, uint32_t key_first, uint32_t n_keys, size_t row_k_bytes) {
    extern __shared__ float q_row[]; // head_dim floats
    __shared__ float part_max[FORGE__PATTERN_THREADS], part_sum[FORGE__PATTERN_THREADS];
    const uint32_t t = blockIdx.x / n_heads, hh = blockIdx.x % n_heads, h = head_first + hh;
    const uint32_t kv_head = h / (a.n_head / a.n_head_kv);
    const uint32_t pos = a.row_pos ? a.row_pos[t] : (dev_pos ? *dev_pos : a.pos0) + t;
    const uint32_t first = a.window && pos >= a.window ? pos - a.window + 1 : 0;
    const uint8_t *cache = (const uint8_t *)a.cache_k + forge__row_seq_base(a.row_seq, t, a.seq_stride);
    const float *q = a.q + ((size_t)t * a.n_head + h) * a.head_dim;
    const float none = -__int_as_float(0x7f800000); // -inf: no key yet
    float m = none, l = 0.0f;
    for (uint32_t d = threadIdx.x; d < a.head_dim; d += blockDim.x) q_row[d] = q[d];
    __syncthreads();
    for (uint32_t p = first + threadIdx.x; p <= pos; p += blockDim.x) {
        const float x = forge__pattern_score<TYPE>(a, q_row, cache, p, kv_head, row_k_bytes);
        if (x > m) {
            l = m == none ? 0.0f : l * __expf(m - x);
            m = x;
        }
        l += __expf(x - m);
    }
    part_max[threadIdx.x] = m;
    part_sum[threadIdx.x] = l;
    __syncthreads();
    for (uint32_t half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half && part_max[threadIdx.x + half] != none) {
            const float m1 = part_max[threadIdx.x], m2 = part_max[threadIdx.x + half];
            const float top = m1 > m2 ? m1 : m2;
            part_sum[threadIdx.x] = (m1 == none ? 0.0f : part_sum[threadIdx.x] * __expf(m1 - top)) +
                                    part_sum[threadIdx.x + half] * __expf(m2 - top);
            part_max[threadIdx.x] = top;
        }
        __syncthreads();
    }
    const float max = part_max[0], sum = part_sum[0];
    const size_t row = ((size_t)t * n_heads + hh) * n_keys;
    for (uint32_t j = threadIdx.x; j < n_keys; j += blockDim.x) {
        const uint32_t key = key_first + j;
        const float w = key >= first && key <= pos ? __expf(forge__pattern_score<TYPE>(a, q_row, cache, key, kv_head, row_k_bytes) - max) / sum
                                                   : 0.0f;
        forge__capture_put(dst, row + j, w, dtype);
    }
}

extern "C" {

// The attention probabilities of query heads [head_first, head_first + n_heads) of args' queries (their
// rotated q and the layer's cache, as forge_hip_attention reads them) against the key positions
// [key_first, key_first + n_keys): dst holds n_tokens rows of n_heads x n_keys values of dtype
// (0 f32, 1 f16, 2 bf16). dev_pos: NULL, or the step's first position in device memory (graphs).
int forge_hip_attn_pattern(const forge_hip_attention_args *args, const uint32_t *dev_pos, void *dst, int dtype,
                           uint32_t head_first, uint32_t n_heads, uint32_t key_first, uint32_t n_keys, void *stream, char *message,
                           size_t message_bytes) {
    const forge_hip_attention_args &a = *args;
    const size_t row_k_bytes = forge__hip_kv_row_bytes(a.kv_type, a.head_dim);
    const uint64_t blocks = (uint64_t)a.n_tokens * n_heads;
    if (!row_k_bytes || dtype < 0 || dtype > 2 || n_heads == 0 || a.n_head_kv == 0 || a.n_head % a.n_head_kv ||
        head_first + n_heads > a.n_head || blocks > 0x7fffffffu || a.head_dim > 4096) {
        if (message && message_bytes)
            snprintf(message, message_bytes, "attn_pattern: kv type %u, dtype %d, heads %u + %u of %u (%u KV), %llu blocks", a.kv_type,
                     dtype, head_first, n_heads, a.n_head, a.n_head_kv, (unsigned long long)blocks);
        return -1;
    }
    if (blocks == 0 || n_keys == 0) return 0;
    const size_t shared = (size_t)a.head_dim * sizeof(float);
    hipStream_t s = (hipStream_t)stream;
    uint8_t *out = (uint8_t *)dst;
    switch (a.kv_type) {
    case FORGE_HIP_F32: forge__k_attn_pattern<FORGE_HIP_F32><<<(unsigned)blocks, FORGE__PATTERN_THREADS, shared, s>>>(a, dev_pos, out, dtype, head_first, n_heads, key_first, n_keys, row_k_bytes); break;
    case FORGE_HIP_F16: forge__k_attn_pattern<FORGE_HIP_F16><<<(unsigned)blocks, FORGE__PATTERN_THREADS, shared, s>>>(a, dev_pos, out, dtype, head_first, n_heads, key_first, n_keys, row_k_bytes); break;
    case FORGE_HIP_Q8_0: forge__k_attn_pattern<FORGE_HIP_Q8_0><<<(unsigned)blocks, FORGE__PATTERN_THREADS, shared, s>>>(a, dev_pos, out, dtype, head_first, n_heads, key_first, n_keys, row_k_bytes); break;
    default: forge__k_attn_pattern<FORGE_HIP_Q4_0><<<(unsigned)blocks, FORGE__PATTERN_THREADS, shared, s>>>(a, dev_pos, out, dtype, head_first, n_heads, key_first, n_keys, row_k_bytes); break;
    }
    return forge__hip_launched("attn_pattern launch", message, message_bytes);
}

}  // extern "C"

/* >>sample ------------------------------------------------------------------------------------ */

// The k best logits of a row for the sampler, so a sampled decode step copies back k candidates
// instead of the vocabulary. A logit and its token id become one 64-bit key that orders them as the
// sampler does (higher logit first, the lower id first among equal logits; -0 counts as +0): the
// float's bits made monotone in the high word, the inverted id in the low word. Each block sorts
// a chunk of 1024 keys in shared memory (bitonic, descending) and keeps its k best; the kept keys
// are chunked again until one chunk remains. Deterministic; NaN or +inf anywhere sets a flag (the
// host then takes the path that names the bad logit). Key 0 is padding, below every real key.
#define FORGE__TOPK_CHUNK 1024
#define FORGE__TOPK_THREADS 512
#define FORGE__TOPK_MAX 256

__device__ __forceinline__ unsigned long long forge__topk_key(float v, uint32_t id) {
    const uint32_t bits = __float_as_uint(v + 0.0f); // -0 becomes +0
    const uint32_t mono = (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
    return ((unsigned long long)mono << 32) | (unsigned long long)(~id);
}

__global__ void __launch_bounds__(FORGE__TOPK_THREADS)
forge__k_topk(const float *__restrict__ logits, const unsigned long long *__restrict__ in, uint32_t n, uint32_t k,
              unsigned long long *__restrict__ out, uint32_t *__restrict__ flag) {
    __shared__ unsigned long long key[FORGE__TOPK_CHUNK];
    const size_t base = (size_t)blockIdx.x * FORGE__TOPK_CHUNK;
    for (uint32_t i = threadIdx.x; i < FORGE__TOPK_CHUNK; i += blockDim.x) {
        const size_t at = base + i;
        unsigned long long v = 0ull;
        if (at < n) {
            if (logits) {
                const float x = logits[at];
                if (!(x <= 3.402823466e38f) && !(x < 0.0f)) atomicOr(flag, 1u); // NaN or +inf
                v = forge__topk_key(x, (uint32_t)at);
            } else {
                v = in[at];
            }
        }
        key[i] = v;
    }
    for (uint32_t size = 2; size <= FORGE__TOPK_CHUNK; size <<= 1)
        for (uint32_t stride = size / 2; stride > 0; stride >>= 1) {
            __syncthreads();
            for (uint32_t t = threadIdx.x; t < FORGE__TOPK_CHUNK / 2; t += blockDim.x) {
                const uint32_t i = 2 * t - (t & (stride - 1)), j = i + stride; // the pair (i, i + stride)
                const bool descending = (i & size) == 0;
                const unsigned long long a = key[i], b = key[j];
                if ((a < b) == descending) key[i] = b, key[j] = a;
            }
        }
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < k; i += blockDim.x) out[(size_t)blockIdx.x * k + i] = key[i];
}

static size_t forge__topk_count(uint32_t n, uint32_t k) { return (size_t)((n + FORGE__TOPK_CHUNK - 1) / FORGE__TOPK_CHUNK) * k; }

// The repetition penalty, as forge.h's forge__repeat_penalize computes it (in double, clamped to
// finite floats, -inf kept): applied to a copy of the row, so the logits themselves stay as they
// are. The copy also flags NaN and +inf of the original row (a penalty would hide +inf).
#define FORGE__TOPK_HISTORY 1024
__global__ void forge__k_row_copy(const float *__restrict__ row, uint32_t n, float *__restrict__ copy, uint32_t *__restrict__ flag) {
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const float x = row[i];
        if (!(x <= 3.402823466e38f) && !(x < 0.0f)) atomicOr(flag, 1u);
        copy[i] = x;
    }
}

__global__ void forge__k_penalize(const float *__restrict__ row, uint32_t n, float *__restrict__ copy, const int32_t *__restrict__ history,
                                  uint32_t n_history, float penalty) {
    const uint32_t j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n_history) return;
    const int32_t t = history[j];
    if (t < 0 || (uint32_t)t >= n) return;
    const float x = row[t];
    const double v = x > 0.0f ? (double)x / penalty : (double)x * penalty;
    float out = (float)v;
    if (x < -3.402823466e38f) out = x;
    else if (v > 3.402823466e38) out = 3.402823466e38f;
    else if (v < -3.402823466e38) out = -3.402823466e38f;
    copy[t] = out; // a token repeated in the history gets the same value each time: penalized once
}

extern "C" {

// Device scratch for forge_hip_top_k over rows of n logits: a 16-byte head (the flag), the k best
// keys, and two buffers for the rounds between.
size_t forge_hip_top_k_scratch_bytes(uint32_t n) {
    const size_t a = forge__topk_count(n, FORGE__TOPK_MAX), b = forge__topk_count((uint32_t)(a < 0xffffffffu ? a : 0xffffffffu), FORGE__TOPK_MAX);
    return 16 + (size_t)FORGE__TOPK_MAX * 8 + (a + b) * 8 + (size_t)n * 4 + FORGE__TOPK_HISTORY * 4;
}

uint32_t forge_hip_top_k_max(void) { return FORGE__TOPK_MAX; }
uint32_t forge_hip_top_k_history_max(void) { return FORGE__TOPK_HISTORY; }

// The k (1..forge_hip_top_k_max()) best of n logits as keys, best first, at scratch + 16; the uint32
// at scratch is nonzero when a logit is NaN or +inf. One copy of 16 + 8k bytes from scratch brings
// back both. Keys: high word the logit's bits made monotone (v >= 0: bits | 2^31, else ~bits),
// low word ~id; key 0 is padding (fewer than k logits).
//
// history (pinned host memory, n_history <= forge_hip_top_k_history_max() token ids) and penalty > 0:
// the keys are those of the row with the repetition penalty applied to those tokens (the row itself
// is not changed); n_history 0 or penalty 0: the row as it is.
int forge_hip_top_k(const float *logits, uint32_t n, uint32_t k, const int32_t *history, uint32_t n_history, float penalty, void *scratch,
                    void *stream, char *message, size_t message_bytes) {
    hipStream_t s = (hipStream_t)stream;
    uint8_t *base = (uint8_t *)scratch;
    uint32_t *flag = (uint32_t *)base;
    unsigned long long *final_keys = (unsigned long long *)(base + 16);
    const size_t a = forge__topk_count(n, FORGE__TOPK_MAX), b = forge__topk_count((uint32_t)(a < 0xffffffffu ? a : 0xffffffffu), FORGE__TOPK_MAX);
    unsigned long long *buf[2] = {final_keys + FORGE__TOPK_MAX, final_keys + FORGE__TOPK_MAX + a};
    float *copy = (float *)(final_keys + FORGE__TOPK_MAX + a + b);
    int32_t *dev_history = (int32_t *)(copy + n);
    const unsigned long long *in = NULL;
    hipError_t err;
    int which = 0;
    if (k == 0 || k > FORGE__TOPK_MAX || n == 0) return forge__hip_refuse(message, message_bytes, "top_k: k must be 1..256 and n positive");
    if (n_history > FORGE__TOPK_HISTORY) return forge__hip_refuse(message, message_bytes, "top_k: more history than its device slot holds");
    if ((err = hipMemsetAsync(flag, 0, 16, s)) != hipSuccess) return forge__hip_fail(err, "top_k flag", message, message_bytes);
    if (history && n_history && penalty > 0.0f) {
        if ((err = hipMemcpyAsync(dev_history, history, (size_t)n_history * 4, hipMemcpyHostToDevice, s)) != hipSuccess)
            return forge__hip_fail(err, "top_k history", message, message_bytes);
        forge__k_row_copy<<<forge__hip_blocks(n, 256), 256, 0, s>>>(logits, n, copy, flag);
        forge__k_penalize<<<(n_history + 255) / 256, 256, 0, s>>>(logits, n, copy, dev_history, n_history, penalty);
        logits = copy;
    }
    for (;;) {
        const uint32_t blocks = (n + FORGE__TOPK_CHUNK - 1) / FORGE__TOPK_CHUNK;
        unsigned long long *out = blocks == 1 ? final_keys : buf[which];
        forge__k_topk<<<blocks, FORGE__TOPK_THREADS, 0, s>>>(in ? NULL : logits, in, n, k, out, flag);
        if (blocks == 1) break;
        in = out, n = blocks * k, which ^= 1;
    }
    return forge__hip_launched("top_k launch", message, message_bytes);
}

}  // extern "C"
