/* Tests of the memory arithmetic: KV cache sizes worked out by hand for real model shapes, and the
   host memory query's parsers fed with the kernel's text formats. */
#define FORGE_IMPLEMENTATION
#include "../forge.h"
#include "test.h"

#include <string.h>

/* A configuration with only the fields the KV arithmetic reads. */
static forge_config *shape(forge_config *c, uint32_t n_layer, uint32_t n_head_kv, uint32_t head_dim) {
    uint32_t il;
    memset(c, 0, sizeof *c);
    c->n_layer = n_layer;
    c->n_head_kv = n_head_kv;
    c->head_dim = c->head_dim_v = head_dim;
    for (il = 0; il < n_layer; il++) c->layer_n_head_kv[il] = n_head_kv;
    return c;
}

static uint64_t kv(const forge_config *c, uint32_t n_ctx, forge_kv_type t) {
    uint64_t bytes = 0;
    forge_error e;
    forge_result r = forge_kv_cache_bytes(c, n_ctx, 0, t, &bytes, &e);
    CHECK(r == FORGE_OK, "kv_cache_bytes: %s", e.message);
    return bytes;
}

static void test_kv(void) {
    static forge_config c;
    uint64_t bytes = 0;
    forge_error e;
    forge_kv_type t;

    TEST_CASE("KV cache: Llama-3-8B shape (32 layers, 8 KV heads of 128)");
    shape(&c, 32, 8, 128);
    /* 32 x 8192 x 8 x (128 + 128) x 2 bytes */
    CHECK(kv(&c, 8192, FORGE_KV_F16) == 1073741824ull, "f16 at 8192 is exactly 1 GiB");
    CHECK(kv(&c, 8192, FORGE_KV_DEFAULT) == 1073741824ull, "default is f16");
    CHECK(kv(&c, 8192, FORGE_KV_F32) == 2147483648ull, "f32 at 8192 is 2 GiB");
    /* a 128-element row is 4 blocks: q8_0 4 x 34 = 136 bytes, q4_0 4 x 18 = 72 bytes */
    CHECK(kv(&c, 8192, FORGE_KV_Q8_0) == 32ull * 8192 * 8 * 272, "q8_0 at 8192 is 544 MiB");
    CHECK(kv(&c, 8192, FORGE_KV_Q4_0) == 32ull * 8192 * 8 * 144, "q4_0 at 8192 is 288 MiB");
    CHECK(kv(&c, 131072, FORGE_KV_F16) == 16ull << 30, "f16 at 128K is 16 GiB");

    TEST_CASE("KV cache: Qwen2.5-0.5B shape (24 layers, 2 KV heads of 64, not 14)");
    shape(&c, 24, 2, 64);
    CHECK(kv(&c, 2048, FORGE_KV_F16) == 24ull << 20, "f16 at 2048 is 24 MiB");

    TEST_CASE("KV cache: per-layer KV heads");
    shape(&c, 4, 2, 64);
    c.layer_n_head_kv[1] = 4;
    c.layer_n_head_kv[3] = 1;
    /* (2 + 4 + 2 + 1) heads x 100 positions x 128 elements x 2 bytes */
    CHECK(kv(&c, 100, FORGE_KV_F16) == 9ull * 100 * 128 * 2, "sum over layers");

    TEST_CASE("KV cache: value heads of another size");
    shape(&c, 2, 2, 192);
    c.head_dim_v = 128;
    CHECK(kv(&c, 10, FORGE_KV_F16) == 2ull * 10 * 2 * (192 + 128) * 2, "keys 192, values 128");

    TEST_CASE("KV cache: sliding-window layers keep window + batch - 1 rows (Gemma 3 270M shape)");
    shape(&c, 18, 1, 256); /* 18 layers, one KV head of 256; every 6th layer global, window 512 */
    c.n_swa = 512;
    {
        uint32_t il, local = 0;
        for (il = 0; il < 18; il++) local += c.layer_is_swa[il] = (uint8_t)(il % 6 < 5);
        CHECK(local == 15, "15 local layers");
        CHECK(forge_kv_layer_cells(&c, 0, 32768, 512) == 1023, "a local layer at 32K, batch 512: 1023 rows");
        CHECK(forge_kv_layer_cells(&c, 5, 32768, 512) == 32768, "a global layer keeps the context");
        CHECK(forge_kv_layer_cells(&c, 0, 600, 512) == 600, "never more rows than the context");
        CHECK(forge_kv_layer_cells(&c, 0, 32768, 0) == 32768, "batch 0: no bound");
        CHECK(forge_kv_layer_cells(&c, 18, 32768, 512) == 32768, "a layer out of range: the context");
        /* (15 x 1023 + 3 x 32768) rows x 1 head x (256 + 256) x 2 bytes */
        CHECK(forge_kv_cache_bytes(&c, 32768, 512, FORGE_KV_F16, &bytes, &e) == FORGE_OK &&
                  bytes == (15ull * 1023 + 3ull * 32768) * 512 * 2,
              "f16 at 32K: %llu bytes", (unsigned long long)bytes);
        CHECK(kv(&c, 32768, FORGE_KV_F16) == 18ull * 32768 * 512 * 2, "unbounded: every layer holds 32K");
    }

    TEST_CASE("KV cache: refusals");
    shape(&c, 32, 32, 80); /* a head size of 80 is not a whole number of 32-element blocks */
    CHECK(forge_kv_cache_bytes(&c, 2048, 0, FORGE_KV_Q8_0, &bytes, &e) == FORGE_ERR_UNSUPPORTED && strstr(e.message, "80"),
          "q8_0 with head size 80: %s", e.message);
    CHECK(forge_kv_cache_bytes(&c, 2048, 0, FORGE_KV_F16, &bytes, &e) == FORGE_OK && bytes == 32ull * 2048 * 32 * 160 * 2,
          "f16 with head size 80");
    CHECK(forge_kv_cache_bytes(&c, 0, 0, FORGE_KV_F16, &bytes, &e) == FORGE_ERR_ARGUMENT, "zero context");
    CHECK(forge_kv_cache_bytes(&c, 16, 0, (forge_kv_type)99, &bytes, &e) == FORGE_ERR_ARGUMENT, "bad type");

    TEST_CASE("KV type names");
    CHECK(forge_kv_type_parse("Q8_0", &t, &e) == FORGE_OK && t == FORGE_KV_Q8_0, "Q8_0");
    CHECK(forge_kv_type_parse("f16", &t, &e) == FORGE_OK && t == FORGE_KV_F16, "f16");
    CHECK(forge_kv_type_parse("q4_0", &t, &e) == FORGE_OK && t == FORGE_KV_Q4_0, "q4_0");
    CHECK(forge_kv_type_parse("q5_0", &t, &e) == FORGE_ERR_ARGUMENT && strstr(e.message, "q5_0"), "q5_0: %s", e.message);
    CHECK(strcmp(forge_kv_type_name(FORGE_KV_F32), "f32") == 0, "name");
}

static void test_kv_fixture(void) {
    forge_model *m;
    forge_error e;
    char path[512];
    const char *dir = getenv("FORGE_FIXTURES");
    TEST_CASE("KV cache: tiny-llama fixture (4 layers, 2 KV heads of 32)");
    snprintf(path, sizeof path, "%s/models/tiny-llama-q4_0.gguf", dir ? dir : "../shared/fixtures");
    if (!CHECK(forge_model_open(path, NULL, &m, &e) == FORGE_OK, "open %s: %s", path, e.message)) return;
    CHECK(kv(forge_model_config(m), 4096, FORGE_KV_F16) == 4ull * 4096 * 2 * 64 * 2, "f16 at 4096 is 4 MiB");
    CHECK(kv(forge_model_config(m), 4096, FORGE_KV_Q8_0) == 4ull * 4096 * 2 * 2 * 34, "q8_0: one block per row");
    forge_model_close(m);
}

static void test_host_memory(void) {
    static const char meminfo[] = "MemTotal:       24683656 kB\nMemFree:         1000000 kB\n"
                                  "MemAvailable:   23867596 kB\nBuffers:           12 kB\n";
    static const char cgroup_v1[] = "9:name=systemd:/\n5:devices:/\n4:memory:/process_api/f67d\n3:cpuset:/\n0::/\n";
    static const char cgroup_v1_joined[] = "7:cpu,memory,cpuacct:/a/b\n";
    static const char cgroup_v2[] = "0::/user.slice/session-1.scope\n";
    char path[64];
    uint64_t v = 0;
    forge_host_memory m;
    forge_error e;

    TEST_CASE("host memory: /proc/meminfo");
    CHECK(forge__meminfo_bytes(meminfo, "MemTotal", &v) && v == 24683656ull * 1024, "MemTotal %llu", (unsigned long long)v);
    CHECK(forge__meminfo_bytes(meminfo, "MemAvailable", &v) && v == 23867596ull * 1024, "MemAvailable");
    CHECK(!forge__meminfo_bytes(meminfo, "Mem", &v), "prefix of a field is not the field");
    CHECK(!forge__meminfo_bytes(meminfo, "SwapTotal", &v), "absent field");

    TEST_CASE("host memory: cgroup files");
    CHECK(forge__cgroup_number("max\n", &v) && v == UINT64_MAX, "v2 'max' is no limit");
    CHECK(forge__cgroup_number("8589934592\n", &v) && v == 8589934592ull, "8 GiB");
    CHECK(!forge__cgroup_number("\n", &v) && !forge__cgroup_number("junk", &v), "unreadable");
    CHECK(!forge__cgroup_number("99999999999999999999999", &v), "overflow is unreadable");
    CHECK(forge__stat_value("active_file 5\ninactive_file 4096\n", "inactive_file", &v) && v == 4096, "memory.stat");
    CHECK(forge__stat_value("total_inactive_file 77\n", "total_inactive_file", &v) && v == 77, "v1 memory.stat");
    CHECK(forge__cgroup_path(cgroup_v1, 0, path, sizeof path) && strcmp(path, "/process_api/f67d") == 0, "v1 path %s", path);
    CHECK(forge__cgroup_path(cgroup_v1_joined, 0, path, sizeof path) && strcmp(path, "/a/b") == 0, "joined controllers");
    CHECK(forge__cgroup_path(cgroup_v2, 1, path, sizeof path) && strcmp(path, "/user.slice/session-1.scope") == 0, "v2");
    CHECK(!forge__cgroup_path(cgroup_v2, 0, path, sizeof path), "no v1 memory line");

    TEST_CASE("host memory: combining readings");
    forge__host_memory_combine(16ull << 30, 10ull << 30, UINT64_MAX, 0, 0, &m);
    CHECK(m.total_bytes == 16ull << 30 && m.available_bytes == 10ull << 30 && !m.cgroup_limited && !m.adjusted, "no limit");
    /* a 4 GiB container that uses 3 GiB, 1 GiB of it reclaimable page cache: 2 GiB left */
    forge__host_memory_combine(16ull << 30, 10ull << 30, 4ull << 30, 3ull << 30, 1ull << 30, &m);
    CHECK(m.total_bytes == 4ull << 30 && m.available_bytes == 2ull << 30 && m.cgroup_limited, "container limit");
    forge__host_memory_combine(16ull << 30, 10ull << 30, 4ull << 30, 5ull << 30, 0, &m);
    CHECK(m.available_bytes == 0, "container over its limit has nothing left");
    forge__host_memory_combine(8ull << 30, 9ull << 30, UINT64_MAX, 0, 0, &m);
    CHECK(m.adjusted && m.available_bytes == 8ull << 30, "available above total is clamped and reported");
    forge__host_memory_combine(0, 9ull << 30, UINT64_MAX, 0, 0, &m);
    CHECK(m.adjusted && m.available_bytes == 0, "zero total: nothing available");

    TEST_CASE("host memory: this machine");
    CHECK(forge_host_memory_query(&m, &e) == FORGE_OK, "query: %s", e.message);
    CHECK(m.total_bytes > (64ull << 20) && m.available_bytes <= m.total_bytes, "total %llu, available %llu",
          (unsigned long long)m.total_bytes, (unsigned long long)m.available_bytes);
}

int main(void) {
    test_kv();
    test_kv_fixture();
    test_host_memory();
    return test_summary();
}
