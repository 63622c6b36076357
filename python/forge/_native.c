/* The shared library of the Python package: forge.h's implementation compiled once (the CPU backend,
   or with FORGE_HIP the GPU one, linked with forge_kernels.hip), plus the sizes of the structures the
   ctypes binding mirrors. The binding compares them at import, so a binding out of step with the
   header is refused there instead of reading the wrong bytes. Nothing else lives here: every call the
   package makes is forge.h's own. */
#define FORGE_IMPLEMENTATION
#include "forge.h"

#include <string.h>

#if defined(_WIN32)
#define FORGE_PY_EXPORT __declspec(dllexport)
#else
#define FORGE_PY_EXPORT __attribute__((visibility("default")))
#endif

#define FORGE_PY_LAYOUT(X)                                                                                                     \
    X(forge_error) X(forge_allocator) X(forge_sampler_desc) X(forge_memory_reading) X(forge_capture) X(forge_capture_chunk) \
    X(forge_context_desc) X(forge_plan) X(forge_verdict) X(forge_config) X(forge_host_memory) X(forge_step)                \
    X(forge_chat_message)                                                                        \
    X(forge_plan_part)                                                                           \
    X(forge_device_verdict)

/* sizeof the named structure, 0 for a name not in the list */
FORGE_PY_EXPORT size_t forge_py_sizeof(const char *name) {
#define FORGE_PY_SIZE(type) if (strcmp(name, #type) == 0) return sizeof(type);
    FORGE_PY_LAYOUT(FORGE_PY_SIZE)
#undef FORGE_PY_SIZE
    return 0;
}

/* 1 when this library was built with the GPU backend */
FORGE_PY_EXPORT int forge_py_has_gpu(void) {
#ifdef FORGE_HIP
    return 1;
#else
    return 0;
#endif
}
