// step_floor.cu: the least time an NVIDIA card takes to read one decode step's bytes, with and
// without the step's chain of dependent launches. Not part of forge; a measuring tool for
// tests/PERF.md. A decode step has to read every weight once (and the attention's cache), so no
// kernel design beats the time this card needs to stream those bytes; and a step made of launches
// that each wait for the one before pays that chain on top. This program times both on buffers laid
// out like the step's tensors, so a target can be set against what the card does, not its datasheet.
//
//   make GPU=nvidia NVCC_ARCH=-arch=sm_90 build-nvidia/step_floor   (or nvcc -O3 -arch=sm_90 tools/step_floor.cu)
//   python3 tools/step_floor.py <(forge info --json MODEL) --span 64 > step.txt
//   ./step_floor step.txt [--reps N]
//
// The step file: one launch a line, "BYTES NAME" in launch order ('#' starts a comment). Each launch
// gets its own region of one buffer, so a step reads each region once, as a step reads each weight
// once; a step larger than the L2 cache comes from device memory as the weights do.
//
// Four forms of the step, each recorded once as a graph and replayed (the minimum and the median of
// --reps replays, after three unmeasured ones):
//   stream    one kernel reads all the step's bytes: the card's pace for this many bytes, no chain
//   early     one kernel a launch; each lets the next be placed as it starts, reads its region, then
//             waits for the one before (programmatic dependent launch): reads may run ahead of the
//             chain as far as the multiprocessors hold blocks. No real product can do better, since a
//             product's weights are useless until its input is known; forge stages what fits.
//   waiting   one kernel a launch; each waits for the one before, lets the next be placed, then reads
//             its region: the chain and the reads one after the other, launches overlapped as forge
//             overlaps them
//   empty     the same launches reading nothing: the chain alone (launch, wait, release)
// Each launch reads the value the one before it wrote after its wait and writes its own, so the
// chain is a real dependency in every form.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>

#define MAX_LAUNCHES 8192
#define THREADS 512
#define UNROLL 8

enum { FORM_STREAM, FORM_EARLY, FORM_WAITING, FORM_EMPTY };

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GRID_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#define GRID_RELEASE() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#else
#define GRID_WAIT() ((void)0)
#define GRID_RELEASE() ((void)0)
#endif

// Reads n16 16-byte units from p (UNROLL loads in flight a thread); `link` holds one word a launch:
// after its wait a launch reads its predecessor's word and its first thread writes its own.
template <int FORM>
__global__ void __launch_bounds__(THREADS) k_read(const uint4 *__restrict__ p, size_t n16, unsigned *link, int slot) {
    unsigned acc = 0;
    size_t stride = (size_t)gridDim.x * blockDim.x, i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (FORM == FORM_EARLY) GRID_RELEASE();
    if (FORM == FORM_WAITING || FORM == FORM_EMPTY) {
        GRID_WAIT();
        GRID_RELEASE();
    }
    if (FORM != FORM_EMPTY) {
        for (; i + (UNROLL - 1) * stride < n16; i += UNROLL * stride) {
            uint4 v[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; u++) v[u] = __ldg(p + i + u * stride);
#pragma unroll
            for (int u = 0; u < UNROLL; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
        }
        for (; i < n16; i += stride) {
            uint4 v = __ldg(p + i);
            acc ^= v.x ^ v.y ^ v.z ^ v.w;
        }
    }
    if (FORM == FORM_EARLY) GRID_WAIT();
    if (slot > 0) acc ^= ((volatile unsigned *)link)[slot - 1];
    // every thread's loads stay live through a store no buffer content makes (the buffer is 0x11 bytes)
    if (acc == 0x9e3779b9u) link[MAX_LAUNCHES] = acc;
    if (blockIdx.x == 0 && threadIdx.x == 0) link[slot] = acc + 1;
}

static void (*const kernels[])(const uint4 *, size_t, unsigned *, int) = {k_read<FORM_STREAM>, k_read<FORM_EARLY>, k_read<FORM_WAITING>,
                                                                           k_read<FORM_EMPTY>};

static int fail(cudaError_t err, const char *what) {
    fprintf(stderr, "step_floor: %s: %s\n", what, cudaGetErrorString(err));
    return 1;
}

static int blocks_for(size_t n16, int sms) {
    size_t b = (n16 + (size_t)THREADS * UNROLL - 1) / ((size_t)THREADS * UNROLL);
    if (b < 1) b = 1;
    if (b > (size_t)sms * 4) b = (size_t)sms * 4; // 2,048 threads a multiprocessor
    return (int)b;
}

static cudaError_t launch(int form, int pdl, const uint4 *p, size_t n16, unsigned *link, int slot, int sms, cudaStream_t s) {
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute attr[1];
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3(blocks_for(n16, sms));
    cfg.blockDim = dim3(THREADS);
    cfg.stream = s;
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kernels[form], p, n16, link, slot);
}

int main(int argc, char **argv) {
    const char *path = NULL;
    int reps = 30, n = 0, sms = 0, device = 0, i, form;
    static size_t bytes[MAX_LAUNCHES], offset[MAX_LAUNCHES];
    size_t total = 0, read_total = 0;
    char line[512];
    FILE *f;
    unsigned char *buf = NULL;
    unsigned *link = NULL;
    cudaStream_t s;
    cudaEvent_t e0, e1;
    cudaError_t err;
    static const char *names[] = {"stream", "early", "waiting", "empty"};

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = atoi(argv[++i]);
        else if (argv[i][0] != '-' && !path) path = argv[i];
        else {
            fprintf(stderr, "usage: step_floor STEP_FILE [--reps N]\n");
            return 2;
        }
    }
    if (!path || reps < 1) {
        fprintf(stderr, "usage: step_floor STEP_FILE [--reps N]\n");
        return 2;
    }
    if (!(f = fopen(path, "r"))) {
        fprintf(stderr, "step_floor: cannot open '%s'\n", path);
        return 1;
    }
    while (fgets(line, sizeof line, f)) {
        char *end;
        unsigned long long b;
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        const char *first = line + strspn(line, " \t");
        if (*first == '-') {
            fprintf(stderr, "step_floor: '%s': a negative byte count\n", path);
            fclose(f);
            return 1;
        }
        b = strtoull(line, &end, 10);
        if (end == line) continue; // blank or comment
        if (n == MAX_LAUNCHES) {
            fprintf(stderr, "step_floor: more than %d launches in '%s'\n", MAX_LAUNCHES, path);
            fclose(f);
            return 1;
        }
        bytes[n] = (size_t)b & ~(size_t)15; // whole 16-byte units
        offset[n] = total;
        total += (bytes[n] + 4095) & ~(size_t)4095;
        read_total += bytes[n];
        n++;
    }
    fclose(f);
    if (n == 0) {
        fprintf(stderr, "step_floor: no launches in '%s'\n", path);
        return 1;
    }
    if ((err = cudaGetDevice(&device)) || (err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)))
        return fail(err, "device");
    if ((err = cudaMalloc(&buf, total + 16)) || (err = cudaMalloc(&link, (MAX_LAUNCHES + 1) * sizeof(unsigned))))
        return fail(err, "allocation");
    if ((err = cudaMemset(buf, 0x11, total + 16)) || (err = cudaMemset(link, 0, (MAX_LAUNCHES + 1) * sizeof(unsigned))))
        return fail(err, "fill");
    if ((err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) || (err = cudaEventCreate(&e0)) || (err = cudaEventCreate(&e1)))
        return fail(err, "stream");
    {
        cudaDeviceProp prop;
        cudaGetDeviceProperties(&prop, device);
        printf("device %s, %d multiprocessors, L2 %d MiB\n", prop.name, sms, prop.l2CacheSize >> 20);
    }
    printf("step: %d launches, %.1f MB read\n", n, read_total / 1e6);
    printf("%-8s %10s %10s %9s %10s\n", "form", "min us", "median us", "TB/s", "us/launch");
    for (form = FORM_STREAM; form <= FORM_EMPTY; form++) {
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        std::vector<float> t;
        float ms, lo, med;
        double moved = form == FORM_EMPTY ? 0.0 : form == FORM_STREAM ? (double)total : (double)read_total;
        if ((err = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal))) return fail(err, "capture");
        if (form == FORM_STREAM) err = launch(form, 0, (const uint4 *)buf, total / 16, link, 0, sms, s);
        else
            for (i = 0; i < n && !err; i++)
                err = launch(form, 1, (const uint4 *)(buf + offset[i]), form == FORM_EMPTY ? 0 : bytes[i] / 16, link, i, sms, s);
        if (err) return fail(err, "launch");
        if ((err = cudaStreamEndCapture(s, &graph)) || (err = cudaGraphInstantiateWithFlags(&exec, graph, 0)))
            return fail(err, "graph");
        for (i = 0; i < reps + 3; i++) {
            cudaEventRecord(e0, s);
            cudaGraphLaunch(exec, s);
            cudaEventRecord(e1, s);
            if ((err = cudaEventSynchronize(e1))) return fail(err, "replay");
            cudaEventElapsedTime(&ms, e0, e1);
            if (i >= 3) t.push_back(ms * 1000.0f);
        }
        std::sort(t.begin(), t.end());
        lo = t[0];
        med = t[t.size() / 2];
        printf("%-8s %10.1f %10.1f %9.2f %10.2f\n", names[form], lo, med, moved / (lo * 1e-6) / 1e12,
               form == FORM_STREAM ? 0.0 : lo / n);
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
    }
    cudaFree(buf);
    cudaFree(link);
    return 0;
}
