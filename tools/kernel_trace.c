/* forge kernel trace: the start and end of every kernel a process runs on an NVIDIA GPU, kernels inside
   replayed graphs included, as the device timed them (CUPTI's activity records). Loaded by the CUDA
   driver into any CUDA program, forge's CLI for one, without rebuilding it:

       make GPU=nvidia build-nvidia/libkernel_trace.so
       CUDA_INJECTION64_PATH=$PWD/build-nvidia/libkernel_trace.so FORGE_TRACE_OUT=trace.txt \
           build-nvidia/forge bench -m MODEL.gguf -p 16 -n 64 -r 1 --gpu
       python3 tools/kernel_trace.py trace.txt

   One line a kernel: start and end in nanoseconds of the device clock, grid and block x, the kernel's
   mangled name. Records reach the file as CUPTI hands back its buffers and at exit. Needs the CUPTI
   library of the CUDA toolkit (libcupti). */
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>

#define TRACE_BUFFER_BYTES (8u << 20)

static FILE *trace_out;

static void CUPTIAPI trace_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = (uint8_t *)malloc(TRACE_BUFFER_BYTES); /* malloc's alignment is at least the 8 bytes CUPTI asks */
    *size = *buffer ? TRACE_BUFFER_BYTES : 0;
    *max_records = 0; /* as many as fit */
}

static void CUPTIAPI trace_buffer_completed(CUcontext context, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    CUpti_Activity *record = NULL;
    (void)context, (void)stream, (void)size;
    while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
        if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || record->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
            /* a record comes in the layout of the newest version of the kernel record, whose fields up to
               the name sit where the fourth version (still declared, as deprecated) has them */
            const CUpti_ActivityKernel4 *k = (const CUpti_ActivityKernel4 *)record;
            fprintf(trace_out, "%llu %llu %d %d %s\n", (unsigned long long)k->start, (unsigned long long)k->end, k->gridX, k->blockX,
                    k->name ? k->name : "?");
        }
    }
    free(buffer);
}

static void trace_finish(void) {
    cuptiActivityFlushAll(1);
    if (trace_out) fclose(trace_out), trace_out = NULL;
}

/* Called by the CUDA driver when CUDA_INJECTION64_PATH names this library. */
int InitializeInjection(void) {
    const char *path = getenv("FORGE_TRACE_OUT");
    trace_out = fopen(path && *path ? path : "kernel_trace.txt", "w");
    if (!trace_out) {
        fprintf(stderr, "kernel_trace: cannot write %s\n", path && *path ? path : "kernel_trace.txt");
        return 0;
    }
    if (cuptiActivityRegisterCallbacks(trace_buffer_requested, trace_buffer_completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
        fprintf(stderr, "kernel_trace: CUPTI refused the kernel activity records\n");
        fclose(trace_out), trace_out = NULL;
        return 0;
    }
    atexit(trace_finish);
    return 1;
}
