/* test_gguf.c - forge's GGUF reader and configuration rules against hostile and honest files.

   Every malformed file is generated here, bent one field at a time from a valid one, and must be
   refused with its specific result code, a NULL out pointer, a filled error record and, where it
   matters, a message naming the key, tensor or number at fault. Truncated and generated files
   are copied into exactly-sized heap blocks so AddressSanitizer catches any read past the end.

   Build and run from the repository root:
      gcc -std=c99 -O1 -g -Wall -Wextra -Werror -fsanitize=address,undefined \
          -fno-sanitize-recover=all tests/test_gguf.c -o /tmp/test_gguf -lm && /tmp/test_gguf
   The fixtures are found through FORGE_FIXTURES, or ../shared/fixtures by default; a missing
   fixture is a failure, not a skip. TEST_VERBOSE=1 prints every refusal's code and message. */
#define FORGE_IMPLEMENTATION
#include "../forge.h"

#include "gguf_writer.h"
#include "test.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FIXTURE_MODEL "models/tiny-llama-q4_0.gguf"

/* =============================================================================================
   helpers */

/* An exactly-sized heap copy: any read past size lands outside the block. A zero-sized copy is
   still a valid pointer so the reader sees "no bytes", not "no buffer". */
static uint8_t *exact_copy(const void *bytes, size_t size) {
    uint8_t *copy = (uint8_t *)malloc(size ? size : 1);
    if (copy && size) memcpy(copy, bytes, size);
    return copy;
}

static int message_has(const forge_error *error, const char *text) {
    return text == NULL || strstr(error->message, text) != NULL;
}

/* The error record of a failed call: the code it returned, a NUL-terminated non-empty message. */
static void check_error_record(forge_result result, const forge_error *error) {
    CHECK(error->result == result, "error.result is %s, the call returned %s", forge_result_name(error->result),
          forge_result_name(result));
    CHECK(memchr(error->message, '\0', sizeof error->message) != NULL, "message is not NUL-terminated");
    CHECK(error->message[0] != '\0', "empty message for %s", forge_result_name(result));
}

static void reset_error(forge_error *error) {
    memset(error, 0, sizeof *error);
    error->result = FORGE_OK;
}

/* Parses file, checks the outcome, then frees file. expected (or also_accepted, where the spec
   allows either) is the code; text1 and text2, when not NULL, must appear in the message. */
static void expect_parse(const char *case_name, gw_buffer *file, forge_result expected, forge_result also_accepted,
                         const char *text1, const char *text2) {
    forge_gguf *gguf = NULL;
    forge_error error;
    forge_result result;
    uint8_t *copy;

    TEST_CASE(case_name);
    CHECK(!file->out_of_memory, "test file could not be built");
    copy = exact_copy(file->bytes, file->size);
    reset_error(&error);
    result = forge_gguf_parse(copy, file->size, NULL, &gguf, &error);
    if (getenv("TEST_VERBOSE")) printf("  [%s] %s: %s\n", case_name, forge_result_name(result), error.message);
    CHECK(result == expected || result == also_accepted, "got %s, expected %s (message: %s)", forge_result_name(result),
          forge_result_name(expected), error.message);
    if (result == FORGE_OK) {
        CHECK(gguf != NULL, "success without an index");
    } else {
        CHECK(gguf == NULL, "out pointer set on failure");
        check_error_record(result, &error);
        CHECK(message_has(&error, text1), "message lacks \"%s\": %s", text1, error.message);
        CHECK(message_has(&error, text2), "message lacks \"%s\": %s", text2, error.message);
    }
    forge_gguf_free(gguf);
    free(copy);
    gw_free(file);
}

static void expect_reject(const char *case_name, gw_buffer *file, forge_result expected, const char *text1,
                          const char *text2) {
    expect_parse(case_name, file, expected, expected, text1, text2);
}

static void expect_accept(const char *case_name, gw_buffer *file) {
    expect_parse(case_name, file, FORGE_OK, FORGE_OK, NULL, NULL);
}

/* A file with no metadata and one F32-or-other tensor, followed by data_bytes of data. */
static void one_tensor_file(gw_buffer *file, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                            uint64_t offset, size_t data_bytes) {
    gw_init(file);
    gw_header(file, 3, 1, 0);
    gw_tensor_info(file, name, n_dims, ne, type, offset);
    gw_pad(file, 32);
    gw_zeros(file, data_bytes);
}

/* A file with one kv whose value the caller appends. */
static void one_kv_file(gw_buffer *file, const char *key, uint32_t type) {
    gw_init(file);
    gw_header(file, 3, 0, 1);
    gw_key(file, key, type);
}

static void build_model(gw_buffer *file, const gw_model_options *options, gw_model_layout *layout) {
    if (!gw_build_model(file, options, layout)) file->out_of_memory = 1;
}

/* ---- keys added to or replacing those of a generated model ---- */

typedef struct kv_edit {
    const char *key;
    uint32_t type;            /* GW_U32, GW_I32, GW_U64, GW_F32, GW_STRING, or GW_ARRAY (of u32) */
    uint64_t integer;
    double real;
    const char *text;
    const uint32_t *u32_array;
    uint64_t array_count;
} kv_edit;

typedef struct kv_edits {
    kv_edit items[8];
    int count;
} kv_edits;

static uint64_t write_kv_edits(gw_buffer *kvs, void *user_data) {
    const kv_edits *edits = (const kv_edits *)user_data;
    int i;
    for (i = 0; i < edits->count; i++) {
        const kv_edit *e = &edits->items[i];
        switch (e->type) {
        case GW_U32: gw_kv_u32(kvs, e->key, (uint32_t)e->integer); break;
        case GW_I32: gw_kv_i32(kvs, e->key, (int32_t)(int64_t)e->integer); break;
        case GW_U64: gw_kv_u64(kvs, e->key, e->integer); break;
        case GW_F32: gw_kv_f32(kvs, e->key, (float)e->real); break;
        case GW_STRING: gw_kv_str(kvs, e->key, e->text); break;
        case GW_ARRAY: gw_kv_array(kvs, e->key, GW_U32, e->u32_array, e->array_count); break;
        default: break;
        }
    }
    return (uint64_t)edits->count;
}

static void omit_key(gw_model_options *options, const char *key) {
    int i;
    for (i = 0; i < GW_MAX_NAMES; i++)
        if (!options->omit_keys[i]) {
            options->omit_keys[i] = key;
            return;
        }
}

static void omit_tensor(gw_model_options *options, const char *name) {
    int i;
    for (i = 0; i < GW_MAX_NAMES; i++)
        if (!options->omit_tensors[i]) {
            options->omit_tensors[i] = name;
            return;
        }
}

/* Adds a kv to the model (replace: instead of the model's own key of that name). */
static kv_edit *edit_key(gw_model_options *options, kv_edits *edits, const char *key, uint32_t type, int replace) {
    kv_edit *e = &edits->items[edits->count++];
    memset(e, 0, sizeof *e);
    e->key = key;
    e->type = type;
    if (replace) omit_key(options, key);
    options->write_extra_kvs = write_kv_edits;
    options->user_data = edits;
    return e;
}

static void set_u32(gw_model_options *options, kv_edits *edits, const char *key, uint64_t value) {
    edit_key(options, edits, key, GW_U32, 1)->integer = value;
}

static void set_str(gw_model_options *options, kv_edits *edits, const char *key, const char *value) {
    edit_key(options, edits, key, GW_STRING, 1)->text = value;
}

static void init_edits(kv_edits *edits) { memset(edits, 0, sizeof *edits); }

/* ---- a generated model, parsed and derived ---- */

typedef struct parsed_model {
    gw_buffer file;
    gw_model_layout layout;
    uint8_t *bytes;             /* exactly-sized copy the index points into */
    forge_gguf *gguf;
    forge_result parse_result;
    forge_result config_result;
    forge_error error;
    forge_config config;
} parsed_model;

static void parsed_model_open(parsed_model *m, const gw_model_options *options) {
    memset(m, 0, sizeof *m);
    build_model(&m->file, options, &m->layout);
    m->bytes = exact_copy(m->file.bytes, m->file.size);
    reset_error(&m->error);
    m->parse_result = forge_gguf_parse(m->bytes, m->file.size, NULL, &m->gguf, &m->error);
    m->config_result = FORGE_ERR_ARGUMENT;
    if (m->parse_result == FORGE_OK) {
        reset_error(&m->error);
        m->config_result = forge_config_derive(m->gguf, &m->config, &m->error);
    }
}

static void parsed_model_close(parsed_model *m) {
    forge_gguf_free(m->gguf);
    free(m->bytes);
    gw_free(&m->file);
}

/* Opens the model and checks that both parse and derivation succeed; 1 when they did. */
static int open_valid_model(parsed_model *m, const gw_model_options *options) {
    parsed_model_open(m, options);
    CHECK(!m->file.out_of_memory, "test file could not be built");
    CHECK(m->parse_result == FORGE_OK, "parse: %s: %s", forge_result_name(m->parse_result), m->error.message);
    if (m->parse_result != FORGE_OK) return 0;
    CHECK(m->config_result == FORGE_OK, "derive: %s: %s", forge_result_name(m->config_result), m->error.message);
    return m->config_result == FORGE_OK;
}

/* The file parses but its configuration must be refused, by forge_config_derive and by
   forge_model_from_memory alike; each text that is not NULL must appear in the message. */
static void expect_config_error(const char *case_name, const gw_model_options *options, forge_result expected,
                                forge_result also_accepted, const char *text1, const char *text2,
                                const char *text3) {
    parsed_model m;
    forge_model *model = NULL;
    forge_error error;
    forge_result result;

    TEST_CASE(case_name);
    parsed_model_open(&m, options);
    CHECK(!m.file.out_of_memory, "test file could not be built");
    CHECK(m.parse_result == FORGE_OK, "parse: %s: %s", forge_result_name(m.parse_result), m.error.message);
    if (m.parse_result == FORGE_OK) {
        if (getenv("TEST_VERBOSE"))
            printf("  [%s] %s: %s\n", case_name, forge_result_name(m.config_result), m.error.message);
        CHECK(m.config_result == expected || m.config_result == also_accepted, "derive: got %s, expected %s (%s)",
              forge_result_name(m.config_result), forge_result_name(expected), m.error.message);
        if (m.config_result != FORGE_OK) {
            check_error_record(m.config_result, &m.error);
            CHECK(message_has(&m.error, text1), "message lacks \"%s\": %s", text1, m.error.message);
            CHECK(message_has(&m.error, text2), "message lacks \"%s\": %s", text2, m.error.message);
            CHECK(message_has(&m.error, text3), "message lacks \"%s\": %s", text3, m.error.message);
        }
        reset_error(&error);
        result = forge_model_from_memory(m.bytes, m.file.size, NULL, &model, &error);
        CHECK(result == m.config_result, "forge_model_from_memory: got %s, derive gave %s", forge_result_name(result),
              forge_result_name(m.config_result));
        if (result != FORGE_OK) {
            CHECK(model == NULL, "model out pointer set on failure");
            check_error_record(result, &error);
        }
        forge_model_close(model);
    }
    parsed_model_close(&m);
}

/* ---- fixtures ---- */

static const char *fixtures_dir(void) {
    const char *dir = getenv("FORGE_FIXTURES");
    return dir && dir[0] ? dir : "../shared/fixtures";
}

/* Reads a fixture into an exactly-sized heap block; NULL (with a failed check) when absent. */
static uint8_t *read_fixture(const char *relative_path, size_t *size) {
    char path[1024];
    FILE *f;
    long length;
    uint8_t *bytes = NULL;

    *size = 0;
    snprintf(path, sizeof path, "%s/%s", fixtures_dir(), relative_path);
    f = fopen(path, "rb");
    if (!CHECK(f != NULL, "cannot open fixture %s (set FORGE_FIXTURES)", path)) return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (length = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0) {
        bytes = (uint8_t *)malloc((size_t)length);
        if (bytes && fread(bytes, 1, (size_t)length, f) == (size_t)length) {
            *size = (size_t)length;
        } else {
            free(bytes);
            bytes = NULL;
        }
    }
    fclose(f);
    CHECK(bytes != NULL, "cannot read fixture %s", path);
    return bytes;
}

/* A cursor over a file known to be valid; any inconsistency sets failed. */
typedef struct trusted_cursor {
    const uint8_t *bytes;
    size_t size, at;
    int failed;
} trusted_cursor;

static uint64_t trusted_read(trusted_cursor *c, unsigned n_bytes) {
    uint64_t value = 0;
    unsigned i;
    if (c->failed || n_bytes > c->size - c->at) {
        c->failed = 1;
        return 0;
    }
    for (i = 0; i < n_bytes; i++) value |= (uint64_t)c->bytes[c->at + i] << (8 * i);
    c->at += n_bytes;
    return value;
}

static void trusted_skip(trusted_cursor *c, uint64_t n_bytes) {
    if (c->failed || n_bytes > c->size - c->at) c->failed = 1;
    else c->at += (size_t)n_bytes;
}

static void trusted_skip_value(trusted_cursor *c, uint32_t type) {
    if (type == GW_STRING) {
        trusted_skip(c, trusted_read(c, 8));
    } else if (type == GW_ARRAY) {
        uint32_t elem_type = (uint32_t)trusted_read(c, 4);
        uint64_t count = trusted_read(c, 8), i;
        for (i = 0; i < count && !c->failed; i++) trusted_skip_value(c, elem_type);
    } else if (gw_value_size(type)) {
        trusted_skip(c, gw_value_size(type));
    } else {
        c->failed = 1;
    }
}

/* Where the tensor infos of a valid file end, found without forge so that the truncation test's
   boundary does not come from the code under test. 0 when the walk fails. */
static size_t trusted_infos_end(const uint8_t *bytes, size_t size) {
    trusted_cursor c;
    uint64_t n_tensors, n_kv, i;
    c.bytes = bytes;
    c.size = size;
    c.at = 8;
    c.failed = size < 24;
    n_tensors = trusted_read(&c, 8);
    n_kv = trusted_read(&c, 8);
    for (i = 0; i < n_kv && !c.failed; i++) {
        trusted_skip(&c, trusted_read(&c, 8));
        trusted_skip_value(&c, (uint32_t)trusted_read(&c, 4));
    }
    for (i = 0; i < n_tensors && !c.failed; i++) {
        trusted_skip(&c, trusted_read(&c, 8));
        trusted_skip(&c, 8 * trusted_read(&c, 4) + 4 + 8);
    }
    return c.failed ? 0 : c.at;
}

/* =============================================================================================
   (a) malformed files */

/* ---- truncation ---- */

/* Parses each prefix cuts[i] of file in its own exactly-sized block. A cut inside the magic may
   say MAGIC or TRUNCATED, one before the end of the tensor infos TRUNCATED, one that keeps the
   infos but loses tensor data TENSOR_OFFSET; the whole file parses. */
static void check_truncations(const uint8_t *file, size_t size, size_t infos_end, size_t data_end, const size_t *cuts,
                              size_t n_cuts) {
    size_t i, n_wrong = 0, n_tried = 0;
    for (i = 0; i < n_cuts; i++) {
        size_t cut = cuts[i];
        uint8_t *prefix;
        forge_gguf *gguf = NULL;
        forge_error error;
        forge_result result, expected, also_accepted;
        int ok;

        if (cut > size) continue;
        expected = cut < infos_end ? FORGE_ERR_TRUNCATED : cut < data_end ? FORGE_ERR_TENSOR_OFFSET : FORGE_OK;
        also_accepted = cut < 4 ? FORGE_ERR_MAGIC : expected;
        prefix = exact_copy(file, cut);
        reset_error(&error);
        result = forge_gguf_parse(prefix, cut, NULL, &gguf, &error);
        ok = (result == expected || result == also_accepted) && (result == FORGE_OK) == (gguf != NULL) &&
             (result == FORGE_OK || (error.result == result && error.message[0] != '\0'));
        if (!ok && n_wrong < 5)
            CHECK(ok, "cut at %zu of %zu (infos end %zu, data end %zu): got %s, expected %s, out %p, error.result %s: %s",
                  cut, size, infos_end, data_end, forge_result_name(result), forge_result_name(expected), (void *)gguf,
                  forge_result_name(error.result), error.message);
        n_wrong += !ok;
        n_tried++;
        forge_gguf_free(gguf);
        free(prefix);
    }
    CHECK(n_wrong == 0, "%zu of %zu cuts gave the wrong result", n_wrong, n_tried);
    printf("  %zu cuts of a %zu-byte file (tensor infos end at %zu)\n", n_tried, size, infos_end);
}

static void test_truncation_generated(void) {
    gw_model_options options;
    gw_model_layout layout;
    gw_buffer file;
    size_t *cuts, i;

    TEST_CASE("truncation: generated llama at every offset");
    gw_model_options_init(&options);
    build_model(&file, &options, &layout);
    cuts = (size_t *)malloc((file.size + 1) * sizeof *cuts);
    for (i = 0; cuts && i <= file.size; i++) cuts[i] = i;
    CHECK(cuts != NULL && !file.out_of_memory, "setup");
    if (cuts && !file.out_of_memory)
        check_truncations(file.bytes, file.size, layout.infos_end, layout.data_end, cuts, file.size + 1);
    free(cuts);
    gw_free(&file);
}

static void test_truncation_fixture(void) {
    size_t size, infos_end, data_end = 0, n_cuts = 0, metadata_cuts, i;
    size_t *cuts;
    uint8_t *file;
    forge_gguf *gguf = NULL;
    forge_error error;
    forge_result result;

    TEST_CASE("truncation: fixture " FIXTURE_MODEL);
    file = read_fixture(FIXTURE_MODEL, &size);
    if (!file) return;
    infos_end = trusted_infos_end(file, size);
    CHECK(infos_end > 0, "fixture header walk failed");
    reset_error(&error);
    result = forge_gguf_parse(file, size, NULL, &gguf, &error);
    CHECK(result == FORGE_OK, "whole fixture: %s: %s", forge_result_name(result), error.message);
    if (result == FORGE_OK && infos_end > 0) {
        uint64_t t, n_tensors = forge_gguf_tensor_count(gguf);
        size_t data_offset = (size_t)forge_gguf_data_offset(gguf);
        CHECK(data_offset == (infos_end + 31) / 32 * 32, "data offset %zu, infos end %zu", data_offset, infos_end);
        for (t = 0; t < n_tensors; t++) {
            const forge_gguf_tensor *tensor = forge_gguf_tensor_at(gguf, t);
            size_t end = data_offset + (size_t)(tensor->offset + tensor->n_bytes);
            if (end > data_end) data_end = end;
        }
        CHECK(data_end == size, "fixture data ends at %zu, file size %zu", data_end, size);
        /* every offset through the metadata and infos, then ~200 spread over the data */
        metadata_cuts = data_offset + 64 < size ? data_offset + 64 : size;
        cuts = (size_t *)malloc((metadata_cuts + 202) * sizeof *cuts);
        if (cuts) {
            for (i = 0; i <= metadata_cuts; i++) cuts[n_cuts++] = i;
            for (i = 1; i <= 200; i++) cuts[n_cuts++] = metadata_cuts + (size - metadata_cuts) * i / 200;
            check_truncations(file, size, infos_end, data_end, cuts, n_cuts);
            free(cuts);
        }
    }
    forge_gguf_free(gguf);
    free(file);
}

/* ---- header ---- */

static void test_header(void) {
    gw_model_options options;
    gw_model_layout layout;
    gw_buffer file;

    gw_model_options_init(&options);
    build_model(&file, &options, &layout);
    file.bytes[3] = 'X';
    expect_reject("header: magic GGUX", &file, FORGE_ERR_MAGIC, NULL, NULL);

    gw_init(&file);
    gw_zeros(&file, 64);
    expect_reject("header: all-zero file", &file, FORGE_ERR_MAGIC, NULL, NULL);

    build_model(&file, &options, &layout);
    gw_patch_uint(&file, 4, 0, 4);
    expect_reject("header: version 0", &file, FORGE_ERR_VERSION, "0", NULL);

    build_model(&file, &options, &layout);
    gw_patch_uint(&file, 4, 1, 4);
    expect_reject("header: version 1", &file, FORGE_ERR_VERSION, "1", NULL);

    build_model(&file, &options, &layout);
    gw_patch_uint(&file, 4, 4, 4);
    expect_reject("header: version 4", &file, FORGE_ERR_VERSION, "4", NULL);

    build_model(&file, &options, &layout);
    gw_patch_uint(&file, 4, 0x03000000u, 4);
    expect_reject("header: version 3 byte-swapped (big-endian file)", &file, FORGE_ERR_BIG_ENDIAN, NULL, NULL);

    {
        parsed_model m;
        TEST_CASE("header: version 2 parses like 3");
        options.version = 2;
        if (open_valid_model(&m, &options))
            CHECK(forge_gguf_version(m.gguf) == 2, "version %u", (unsigned)forge_gguf_version(m.gguf));
        parsed_model_close(&m);
        options.version = 3;
    }
}

static void test_counts(void) {
    gw_buffer file;
    static const uint64_t ne8[1] = {8};
    static const uint64_t huge[3] = {(uint64_t)1 << 40, (uint64_t)1 << 63, UINT64_MAX};
    static const char *const huge_names[3] = {"2^40", "2^63", "UINT64_MAX"};
    char name[128];
    int i;

    for (i = 0; i < 3; i++) {
        gw_init(&file);
        gw_header(&file, 3, huge[i], 0);
        gw_zeros(&file, 64);
        snprintf(name, sizeof name, "counts: tensor count %s", huge_names[i]);
        expect_reject(name, &file, FORGE_ERR_LIMIT, NULL, NULL);

        gw_init(&file);
        gw_header(&file, 3, 0, huge[i]);
        gw_zeros(&file, 64);
        snprintf(name, sizeof name, "counts: kv count %s", huge_names[i]);
        expect_reject(name, &file, FORGE_ERR_LIMIT, NULL, NULL);
    }

    gw_init(&file);
    gw_header(&file, 3, (uint64_t)FORGE_GGUF_MAX_TENSORS + 1, 0);
    expect_reject("counts: tensor count one above FORGE_GGUF_MAX_TENSORS", &file, FORGE_ERR_LIMIT, NULL, NULL);

    gw_init(&file);
    gw_header(&file, 3, 0, (uint64_t)FORGE_GGUF_MAX_KV + 1);
    expect_reject("counts: kv count one above FORGE_GGUF_MAX_KV", &file, FORGE_ERR_LIMIT, NULL, NULL);

    /* at the cap the count is legal, so what is wrong is that the bytes are not there */
    gw_init(&file);
    gw_header(&file, 3, FORGE_GGUF_MAX_TENSORS, 0);
    expect_reject("counts: tensor count at the cap, no infos", &file, FORGE_ERR_TRUNCATED, NULL, NULL);

    gw_init(&file);
    gw_header(&file, 3, 0, FORGE_GGUF_MAX_KV);
    expect_reject("counts: kv count at the cap, no kvs", &file, FORGE_ERR_TRUNCATED, NULL, NULL);

    gw_init(&file);
    gw_header(&file, 3, 1000, 1);
    gw_kv_u32(&file, "general.x", 1);
    gw_tensor_info(&file, "t0", 1, ne8, 0, 0);
    expect_reject("counts: 1000 tensors claimed, one info present", &file, FORGE_ERR_TRUNCATED, NULL, NULL);

    gw_init(&file);
    gw_header(&file, 3, 0, 1000);
    gw_kv_u32(&file, "general.x", 1);
    expect_reject("counts: 1000 kvs claimed, one present", &file, FORGE_ERR_TRUNCATED, NULL, NULL);
}

/* ---- strings and names ---- */

static void test_strings(void) {
    gw_buffer file;
    char *long_name = (char *)malloc(FORGE_GGUF_MAX_NAME_BYTES + 2);
    static const uint64_t ne8[1] = {8};

    gw_init(&file);
    gw_header(&file, 3, 0, 1);
    gw_str_claiming(&file, UINT64_MAX, "abcdefgh", 8);
    gw_u32(&file, GW_U32);
    gw_u32(&file, 1);
    expect_reject("strings: key length UINT64_MAX", &file, FORGE_ERR_LIMIT, NULL, NULL);

    gw_init(&file);
    gw_header(&file, 3, 0, 1);
    gw_str_claiming(&file, (uint64_t)1 << 63, "abcdefgh", 8);
    gw_u32(&file, GW_U32);
    gw_u32(&file, 1);
    expect_reject("strings: key length 2^63", &file, FORGE_ERR_LIMIT, NULL, NULL);

    if (!CHECK(long_name != NULL, "malloc")) return;
    memset(long_name, 'k', FORGE_GGUF_MAX_NAME_BYTES + 1);
    long_name[FORGE_GGUF_MAX_NAME_BYTES + 1] = '\0';
    gw_init(&file);
    gw_header(&file, 3, 0, 1);
    gw_kv_u32(&file, long_name, 1);
    expect_reject("strings: key of FORGE_GGUF_MAX_NAME_BYTES + 1 bytes", &file, FORGE_ERR_LIMIT, NULL, NULL);

    long_name[FORGE_GGUF_MAX_NAME_BYTES] = '\0';
    gw_init(&file);
    gw_header(&file, 3, 0, 1);
    gw_kv_u32(&file, long_name, 1);
    expect_accept("strings: key of exactly FORGE_GGUF_MAX_NAME_BYTES bytes", &file);

    gw_init(&file);
    gw_header(&file, 3, 0, 1);
    gw_str_claiming(&file, 100, "general.", 8);
    expect_reject("strings: key length 100 with 8 bytes left", &file, FORGE_ERR_TRUNCATED, NULL, NULL);

    one_kv_file(&file, "general.name", GW_STRING);
    gw_str_claiming(&file, UINT64_MAX, "abcdefgh", 8);
    expect_reject("strings: value length UINT64_MAX", &file, FORGE_ERR_LIMIT, NULL, NULL);

    one_kv_file(&file, "general.name", GW_STRING);
    gw_str_claiming(&file, (uint64_t)1 << 63, "abcdefgh", 8);
    expect_reject("strings: value length 2^63", &file, FORGE_ERR_LIMIT, NULL, NULL);

    one_kv_file(&file, "general.name", GW_STRING);
    gw_str_claiming(&file, (uint64_t)FORGE_GGUF_MAX_STRING_BYTES + 1, "abcdefgh", 8);
    expect_reject("strings: value length FORGE_GGUF_MAX_STRING_BYTES + 1", &file, FORGE_ERR_LIMIT, NULL, NULL);

    one_kv_file(&file, "general.name", GW_STRING);
    gw_str_claiming(&file, 100, "abcdefghij", 10);
    expect_reject("strings: value length 100 with 10 bytes left", &file, FORGE_ERR_TRUNCATED, NULL, NULL);

    long_name[FORGE_GGUF_MAX_NAME_BYTES] = 'k';
    one_tensor_file(&file, long_name, 1, ne8, GW_TYPE_F32, 0, 32);
    expect_reject("strings: tensor name of FORGE_GGUF_MAX_NAME_BYTES + 1 bytes", &file, FORGE_ERR_LIMIT, NULL, NULL);

    gw_init(&file);
    gw_header(&file, 3, 1, 0);
    gw_str_claiming(&file, UINT64_MAX, "abcdefgh", 8);
    gw_zeros(&file, 64);
    expect_reject("strings: tensor name length UINT64_MAX", &file, FORGE_ERR_LIMIT, NULL, NULL);

    free(long_name);
}

/* ---- arrays ---- */

static void test_arrays(void) {
    gw_buffer file;

    one_kv_file(&file, "test.nested", GW_ARRAY);
    gw_u32(&file, GW_ARRAY);
    gw_u64(&file, 1);
    gw_u32(&file, GW_U32);
    gw_u64(&file, 1);
    gw_u32(&file, 7);
    expect_reject("arrays: array of arrays", &file, FORGE_ERR_NESTED_ARRAY, NULL, NULL);

    one_kv_file(&file, "test.big", GW_ARRAY);
    gw_u32(&file, GW_U8);
    gw_u64(&file, (uint64_t)FORGE_GGUF_MAX_ARRAY_COUNT + 1);
    gw_zeros(&file, 64);
    expect_reject("arrays: count FORGE_GGUF_MAX_ARRAY_COUNT + 1", &file, FORGE_ERR_LIMIT, NULL, NULL);

    one_kv_file(&file, "test.big", GW_ARRAY);
    gw_u32(&file, GW_U64);
    gw_u64(&file, UINT64_MAX);
    gw_zeros(&file, 64);
    expect_reject("arrays: count UINT64_MAX", &file, FORGE_ERR_LIMIT, NULL, NULL);

    one_kv_file(&file, "test.short", GW_ARRAY);
    gw_u32(&file, GW_U32);
    gw_u64(&file, 1000);
    gw_u32(&file, 1);
    gw_u32(&file, 2);
    expect_reject("arrays: 1000 u32 claimed, 2 present", &file, FORGE_ERR_TRUNCATED, NULL, NULL);

    /* under the cap, but count * 8 is a quarter GiB: checked against the bytes, not allocated */
    one_kv_file(&file, "test.short", GW_ARRAY);
    gw_u32(&file, GW_F64);
    gw_u64(&file, FORGE_GGUF_MAX_ARRAY_COUNT);
    gw_zeros(&file, 16);
    expect_reject("arrays: FORGE_GGUF_MAX_ARRAY_COUNT f64 claimed, 2 present", &file, FORGE_ERR_TRUNCATED, NULL, NULL);

    /* enough bytes left for three length fields, so only reading the third string finds the end */
    one_kv_file(&file, "test.strings", GW_ARRAY);
    gw_u32(&file, GW_STRING);
    gw_u64(&file, 3);
    gw_str(&file, "a");
    gw_str(&file, "b");
    gw_str_claiming(&file, 1000, "ccc", 3);
    gw_zeros(&file, 61);
    expect_reject("arrays: third string of three runs past the end", &file, FORGE_ERR_TRUNCATED, NULL, NULL);

    one_kv_file(&file, "test.strings", GW_ARRAY);
    gw_u32(&file, GW_STRING);
    gw_u64(&file, 3);
    gw_str(&file, "a");
    gw_str_claiming(&file, UINT64_MAX, "bbbbbbbb", 8);
    expect_reject("arrays: string element of length UINT64_MAX", &file, FORGE_ERR_LIMIT, NULL, NULL);

    one_kv_file(&file, "test.strings", GW_ARRAY);
    gw_u32(&file, GW_STRING);
    gw_u64(&file, 1000000);
    gw_zeros(&file, 64); /* eight empty strings, then nothing */
    expect_reject("arrays: a million empty strings claimed, 8 present", &file, FORGE_ERR_TRUNCATED, NULL, NULL);

    one_kv_file(&file, "test.empty", GW_ARRAY);
    gw_u32(&file, GW_U32);
    gw_u64(&file, 0);
    expect_accept("arrays: empty u32 array parses", &file);
}

/* ---- value types ---- */

static void test_value_types(void) {
    static const uint32_t bad_types[3] = {13, 255, 0xFFFFFFFFu};
    static const char *const bad_type_texts[3] = {"13", "255", "4294967295"};
    char name[128];
    gw_buffer file;
    int i;

    for (i = 0; i < 3; i++) {
        one_kv_file(&file, "test.odd", bad_types[i]);
        gw_u32(&file, 0);
        gw_u32(&file, 0);
        snprintf(name, sizeof name, "value types: kv type %s", bad_type_texts[i]);
        expect_reject(name, &file, FORGE_ERR_VALUE_TYPE, bad_type_texts[i], NULL);
    }
    for (i = 0; i < 3; i += 2) {
        one_kv_file(&file, "test.odd", GW_ARRAY);
        gw_u32(&file, bad_types[i]);
        gw_u64(&file, 1);
        gw_u32(&file, 0);
        snprintf(name, sizeof name, "value types: array element type %s", bad_type_texts[i]);
        expect_reject(name, &file, FORGE_ERR_VALUE_TYPE, bad_type_texts[i], NULL);
    }
}

/* ---- alignment ---- */

static void expect_alignment_rejected(const char *case_name, uint32_t type, uint64_t integer, double real,
                                      const char *text) {
    gw_model_options options;
    kv_edits edits;
    kv_edit *e;
    gw_buffer file;

    gw_model_options_init(&options);
    init_edits(&edits);
    e = edit_key(&options, &edits, "general.alignment", type, 0);
    e->integer = integer;
    e->real = real;
    e->text = text;
    build_model(&file, &options, NULL);
    expect_reject(case_name, &file, FORGE_ERR_ALIGNMENT, NULL, NULL);
}

static void test_alignment(void) {
    gw_model_options options;
    parsed_model m;
    gw_buffer file;
    static const uint64_t ne8[1] = {8};

    expect_alignment_rejected("alignment: 0", GW_U32, 0, 0, NULL);
    expect_alignment_rejected("alignment: 3", GW_U32, 3, 0, NULL);
    expect_alignment_rejected("alignment: 48 (not a power of two)", GW_U32, 48, 0, NULL);
    expect_alignment_rejected("alignment: 65535 (not a power of two)", GW_U32, 65535, 0, NULL);
    expect_alignment_rejected("alignment: 2^20 (above FORGE_GGUF_MAX_ALIGNMENT)", GW_U32, (uint64_t)1 << 20, 0, NULL);
    expect_alignment_rejected("alignment: stored as float32", GW_F32, 0, 32.0, NULL);
    expect_alignment_rejected("alignment: stored as string", GW_STRING, 0, 0, "32");

    TEST_CASE("alignment: 64 with tensors aligned to 64");
    gw_model_options_init(&options);
    options.alignment = 64;
    if (open_valid_model(&m, &options)) {
        CHECK(forge_gguf_alignment(m.gguf) == 64, "alignment %" PRIu64, forge_gguf_alignment(m.gguf));
        CHECK(forge_gguf_data_offset(m.gguf) == m.layout.data_offset, "data offset %" PRIu64 ", written at %zu",
              forge_gguf_data_offset(m.gguf), m.layout.data_offset);
    }
    parsed_model_close(&m);

    TEST_CASE("alignment: default is 32");
    gw_model_options_init(&options);
    if (open_valid_model(&m, &options))
        CHECK(forge_gguf_alignment(m.gguf) == 32, "alignment %" PRIu64, forge_gguf_alignment(m.gguf));
    parsed_model_close(&m);

    /* FORGE_GGUF_MAX_ALIGNMENT itself is allowed */
    gw_init(&file);
    gw_header(&file, 3, 1, 1);
    gw_kv_u32(&file, "general.alignment", FORGE_GGUF_MAX_ALIGNMENT);
    gw_tensor_info(&file, "t", 1, ne8, GW_TYPE_F32, 0);
    gw_pad(&file, FORGE_GGUF_MAX_ALIGNMENT);
    gw_zeros(&file, 32);
    expect_accept("alignment: FORGE_GGUF_MAX_ALIGNMENT parses", &file);

    /* aligned to 32 but not to the file's 64 */
    gw_init(&file);
    gw_header(&file, 3, 2, 1);
    gw_kv_u32(&file, "general.alignment", 64);
    gw_tensor_info(&file, "a", 1, ne8, GW_TYPE_F32, 0);
    gw_tensor_info(&file, "b", 1, ne8, GW_TYPE_F32, 32);
    gw_pad(&file, 64);
    gw_zeros(&file, 64);
    expect_reject("alignment: offset 32 in a file aligned to 64", &file, FORGE_ERR_TENSOR_OFFSET, NULL, NULL);
}

/* ---- tensor dimensions, sizes and types ---- */

static void test_tensor_dims(void) {
    gw_buffer file;
    static const uint64_t ones[5] = {1, 1, 1, 1, 1};
    static const uint64_t zero_dim[2] = {4, 0};
    static const uint64_t above_int64[1] = {(uint64_t)1 << 63};
    static const uint64_t all_ones[1] = {UINT64_MAX};
    static const uint64_t elements_overflow[2] = {(uint64_t)1 << 32, (uint64_t)1 << 32};
    static const uint64_t bytes_overflow[3] = {(uint64_t)1 << 31, (uint64_t)1 << 31, 2};
    static const uint64_t bytes_overflow_2[3] = {(uint64_t)1 << 30, (uint64_t)1 << 30, 4};
    static const uint64_t four_dims[4] = {2, 2, 2, 2};

    one_tensor_file(&file, "t", 0, ones, GW_TYPE_F32, 0, 32);
    expect_reject("dims: n_dims 0", &file, FORGE_ERR_TENSOR_DIMS, "t", NULL);

    one_tensor_file(&file, "t", 5, ones, GW_TYPE_F32, 0, 32);
    expect_reject("dims: n_dims 5", &file, FORGE_ERR_TENSOR_DIMS, "5", NULL);

    gw_init(&file);
    gw_header(&file, 3, 1, 0);
    gw_str(&file, "t");
    gw_u32(&file, 0xFFFFFFFFu);
    gw_zeros(&file, 256);
    expect_reject("dims: n_dims 0xFFFFFFFF", &file, FORGE_ERR_TENSOR_DIMS, NULL, NULL);

    one_tensor_file(&file, "t", 2, zero_dim, GW_TYPE_F32, 0, 32);
    expect_reject("dims: ne [4, 0]", &file, FORGE_ERR_TENSOR_DIMS, NULL, NULL);

    one_tensor_file(&file, "t", 1, above_int64, GW_TYPE_F32, 0, 32);
    expect_reject("dims: ne [2^63] (above INT64_MAX)", &file, FORGE_ERR_OVERFLOW, NULL, NULL);

    one_tensor_file(&file, "t", 1, all_ones, GW_TYPE_F32, 0, 32);
    expect_reject("dims: ne [UINT64_MAX]", &file, FORGE_ERR_OVERFLOW, NULL, NULL);

    one_tensor_file(&file, "t", 2, elements_overflow, GW_TYPE_F32, 0, 32);
    expect_reject("dims: element count overflow [2^32, 2^32]", &file, FORGE_ERR_OVERFLOW, NULL, NULL);

    one_tensor_file(&file, "t", 3, bytes_overflow, GW_TYPE_F32, 0, 32);
    expect_reject("dims: F32 byte size overflow [2^31, 2^31, 2]", &file, FORGE_ERR_OVERFLOW, NULL, NULL);

    one_tensor_file(&file, "t", 3, bytes_overflow_2, GW_TYPE_F32, 0, 32);
    expect_reject("dims: F32 byte size overflow [2^30, 2^30, 4] (2^62 elements)", &file, FORGE_ERR_OVERFLOW, NULL,
                  NULL);

    one_tensor_file(&file, "t", 4, four_dims, GW_TYPE_F32, 0, 64);
    expect_accept("dims: four dimensions parse", &file);
}

static void test_tensor_types(void) {
    gw_buffer file;
    static const uint64_t ne_33[2] = {33, 2};
    static const uint64_t ne_32[2] = {32, 2};
    static const uint64_t ne_256[1] = {256};

    one_tensor_file(&file, "blk.0.q.weight", 2, ne_33, GW_TYPE_Q4_0, 0, 64);
    expect_reject("types: Q4_0 row of 33 elements", &file, FORGE_ERR_TENSOR_BLOCK, "blk.0.q.weight", NULL);

    one_tensor_file(&file, "blk.0.k.weight", 2, ne_32, GW_TYPE_Q4_K, 0, 512);
    expect_reject("types: Q4_K row of 32 elements (block is 256)", &file, FORGE_ERR_TENSOR_BLOCK, NULL, NULL);

    one_tensor_file(&file, "blk.0.q.weight", 2, ne_32, GW_TYPE_Q4_0, 0, 36);
    expect_accept("types: Q4_0 [32, 2] in 36 bytes parses", &file);

    one_tensor_file(&file, "weird.weight", 1, ne_256, 99, 0, 1024);
    expect_reject("types: unknown type 99", &file, FORGE_ERR_TENSOR_TYPE, "99", "weird.weight");

    one_tensor_file(&file, "weird.weight", 1, ne_256, 1000, 0, 1024);
    expect_reject("types: unknown type 1000", &file, FORGE_ERR_TENSOR_TYPE, "1000", "weird.weight");

    one_tensor_file(&file, "weird.weight", 1, ne_256, 0xFFFFFFFFu, 0, 1024);
    expect_reject("types: unknown type 0xFFFFFFFF", &file, FORGE_ERR_TENSOR_TYPE, "weird.weight", NULL);

    one_tensor_file(&file, "iq.weight", 1, ne_256, 16, 0, 1024);
    expect_reject("types: IQ2_XXS (known to ggml, not to forge)", &file, FORGE_ERR_TENSOR_TYPE, "IQ2_XXS", "iq.weight");

    /* ids 4 and 5 were Q4_2 and Q4_3, removed from ggml long ago */
    one_tensor_file(&file, "old.weight", 1, ne_256, 4, 0, 1024);
    expect_reject("types: removed type 4", &file, FORGE_ERR_TENSOR_TYPE, "old.weight", NULL);
}

/* ---- tensor offsets ---- */

static void test_tensor_offsets(void) {
    gw_buffer file;
    static const uint64_t ne8[1] = {8};   /* 32 bytes of F32 */
    static const uint64_t ne16[1] = {16}; /* 64 bytes */

    one_tensor_file(&file, "t", 1, ne8, GW_TYPE_F32, 4, 64);
    expect_reject("offsets: offset 4 (not a multiple of 32)", &file, FORGE_ERR_TENSOR_OFFSET, NULL, NULL);

    one_tensor_file(&file, "far.weight", 1, ne8, GW_TYPE_F32, 1024, 64);
    expect_reject("offsets: offset past the end of the file", &file, FORGE_ERR_TENSOR_OFFSET, "far.weight", NULL);

    one_tensor_file(&file, "t", 1, ne8, GW_TYPE_F32, 0, 31);
    expect_reject("offsets: data one byte short", &file, FORGE_ERR_TENSOR_OFFSET, NULL, NULL);

    one_tensor_file(&file, "t", 1, ne8, GW_TYPE_F32, UINT64_MAX - 31, 64);
    expect_reject("offsets: offset UINT64_MAX - 31 (offset + size overflows)", &file, FORGE_ERR_TENSOR_OFFSET, NULL,
                  NULL);

    /* offset + size fits in 64 bits, but the data section's start plus offset does not */
    one_tensor_file(&file, "t", 1, ne8, GW_TYPE_F32, UINT64_MAX - 63, 64);
    expect_reject("offsets: offset UINT64_MAX - 63 (data start + offset overflows)", &file, FORGE_ERR_TENSOR_OFFSET,
                  NULL, NULL);

    one_tensor_file(&file, "t", 1, ne8, GW_TYPE_F32, (uint64_t)1 << 63, 64);
    expect_reject("offsets: offset 2^63", &file, FORGE_ERR_TENSOR_OFFSET, NULL, NULL);

    gw_init(&file);
    gw_header(&file, 3, 2, 0);
    gw_tensor_info(&file, "a", 1, ne16, GW_TYPE_F32, 0);
    gw_tensor_info(&file, "b", 1, ne8, GW_TYPE_F32, 32);
    gw_pad(&file, 32);
    gw_zeros(&file, 96);
    expect_reject("offsets: second tensor starts inside the first", &file, FORGE_ERR_TENSOR_OFFSET, NULL, NULL);

    /* the same overlap listed the other way round: detection must not rely on the order */
    gw_init(&file);
    gw_header(&file, 3, 2, 0);
    gw_tensor_info(&file, "b", 1, ne8, GW_TYPE_F32, 32);
    gw_tensor_info(&file, "a", 1, ne16, GW_TYPE_F32, 0);
    gw_pad(&file, 32);
    gw_zeros(&file, 96);
    expect_reject("offsets: first tensor starts inside the second", &file, FORGE_ERR_TENSOR_OFFSET, NULL, NULL);

    gw_init(&file);
    gw_header(&file, 3, 2, 0);
    gw_tensor_info(&file, "a", 1, ne8, GW_TYPE_F32, 0);
    gw_tensor_info(&file, "b", 1, ne8, GW_TYPE_F32, 0);
    gw_pad(&file, 32);
    gw_zeros(&file, 64);
    expect_reject("offsets: two tensors at the same offset", &file, FORGE_ERR_TENSOR_OFFSET, NULL, NULL);

    gw_init(&file);
    gw_header(&file, 3, 2, 0);
    gw_tensor_info(&file, "b", 1, ne8, GW_TYPE_F32, 32);
    gw_tensor_info(&file, "a", 1, ne8, GW_TYPE_F32, 0);
    gw_pad(&file, 32);
    gw_zeros(&file, 64);
    expect_accept("offsets: adjacent tensors listed out of order parse", &file);
}

/* ---- duplicates and scale ---- */

static void test_duplicates(void) {
    gw_buffer file;
    gw_model_options options;
    kv_edits edits;
    static const uint64_t ne8[1] = {8};
    uint64_t i;
    clock_t start;
    char name[64];

    gw_init(&file);
    gw_header(&file, 3, 0, 3);
    gw_kv_u32(&file, "test.first", 1);
    gw_kv_u32(&file, "test.twice", 2);
    gw_kv_str(&file, "test.twice", "again");
    expect_reject("duplicates: key", &file, FORGE_ERR_DUPLICATE_KEY, "test.twice", NULL);

    gw_model_options_init(&options);
    init_edits(&edits);
    edit_key(&options, &edits, "llama.block_count", GW_U32, 0)->integer = 2;
    build_model(&file, &options, NULL);
    expect_reject("duplicates: model key written twice", &file, FORGE_ERR_DUPLICATE_KEY, "llama.block_count", NULL);

    gw_init(&file);
    gw_header(&file, 3, 3, 0);
    gw_tensor_info(&file, "blk.0.x.weight", 1, ne8, GW_TYPE_F32, 0);
    gw_tensor_info(&file, "blk.0.twice.weight", 1, ne8, GW_TYPE_F32, 32);
    gw_tensor_info(&file, "blk.0.twice.weight", 1, ne8, GW_TYPE_F32, 64);
    gw_pad(&file, 32);
    gw_zeros(&file, 96);
    expect_reject("duplicates: tensor name", &file, FORGE_ERR_DUPLICATE_TENSOR, "blk.0.twice.weight", NULL);

    /* a key with an embedded NUL prints and looks up as its prefix: refused (two such keys would
       otherwise be distinct keys that read the same) */
    gw_init(&file);
    gw_header(&file, 3, 0, 2);
    gw_str_claiming(&file, 3, "a\0b", 3);
    gw_u32(&file, GW_U32);
    gw_u32(&file, 1);
    gw_str_claiming(&file, 3, "a\0c", 3);
    gw_u32(&file, GW_U32);
    gw_u32(&file, 2);
    expect_reject("keys: an embedded NUL", &file, FORGE_ERR_LIMIT, "NUL", NULL);

    gw_init(&file);
    gw_header(&file, 3, 0, 2);
    gw_kv_u32(&file, "test.first", 1);
    gw_str_claiming(&file, 0, "", 0);
    gw_u32(&file, GW_U32);
    gw_u32(&file, 2);
    expect_reject("keys: an empty key (llama.cpp refuses it too)", &file, FORGE_ERR_LIMIT, "key 1 is empty", NULL);

    gw_init(&file);
    gw_header(&file, 3, 1, 0);
    gw_str_claiming(&file, 9, "blk.0\0.x", 9);
    gw_u32(&file, 1);
    gw_u64(&file, 8);
    gw_u32(&file, GW_TYPE_F32);
    gw_u64(&file, 0);
    gw_pad(&file, 32);
    gw_zeros(&file, 32);
    expect_reject("tensors: a name with an embedded NUL", &file, FORGE_ERR_LIMIT, "NUL", NULL);

    gw_init(&file);
    gw_header(&file, 3, 0, 20000);
    for (i = 0; i < 20000; i++) {
        snprintf(name, sizeof name, "test.key.%05u", (unsigned)i);
        gw_kv_u32(&file, name, (uint32_t)i);
    }
    start = clock();
    expect_accept("duplicates: 20000 distinct keys", &file);
    printf("  20000 keys parsed in %.3f s\n", (double)(clock() - start) / CLOCKS_PER_SEC);

    gw_init(&file);
    gw_header(&file, 3, 20000, 0);
    for (i = 0; i < 20000; i++) {
        snprintf(name, sizeof name, "blk.%u.weight", (unsigned)i);
        gw_tensor_info(&file, name, 1, ne8, GW_TYPE_F32, i * 32);
    }
    gw_pad(&file, 32);
    gw_zeros(&file, 20000 * 32);
    start = clock();
    expect_accept("duplicates: 20000 distinct tensors", &file);
    printf("  20000 tensors parsed in %.3f s\n", (double)(clock() - start) / CLOCKS_PER_SEC);
}

/* ---- arguments ---- */

static void test_arguments(void) {
    gw_model_options options;
    gw_buffer file;
    forge_gguf *gguf = NULL;
    forge_error error;
    forge_result result;
    uint8_t *copy;

    TEST_CASE("arguments: NULL bytes");
    reset_error(&error);
    result = forge_gguf_parse(NULL, 100, NULL, &gguf, &error);
    CHECK(result == FORGE_ERR_ARGUMENT, "got %s", forge_result_name(result));
    CHECK(gguf == NULL, "out pointer set");
    check_error_record(result, &error);

    gw_model_options_init(&options);
    build_model(&file, &options, NULL);
    copy = exact_copy(file.bytes, file.size);

    TEST_CASE("arguments: NULL out");
    reset_error(&error);
    result = forge_gguf_parse(copy, file.size, NULL, NULL, &error);
    CHECK(result == FORGE_ERR_ARGUMENT, "got %s", forge_result_name(result));

    TEST_CASE("arguments: NULL error record is allowed");
    copy[0] = 'X';
    result = forge_gguf_parse(copy, file.size, NULL, &gguf, NULL);
    CHECK(result == FORGE_ERR_MAGIC, "got %s", forge_result_name(result));
    CHECK(gguf == NULL, "out pointer set");
    copy[0] = 'G';
    result = forge_gguf_parse(copy, file.size, NULL, &gguf, NULL);
    CHECK(result == FORGE_OK && gguf != NULL, "got %s", forge_result_name(result));
    forge_gguf_free(gguf);
    forge_gguf_free(NULL); /* freeing nothing is a no-op */

    free(copy);
    gw_free(&file);
}

/* ---- configuration refused ---- */

/* A tensor no schedule reads means a feature forge lacks: the model must not open, and the message
   names the tensor; the configuration itself derives. */
static void test_unread_tensor(void) {
    gw_model_options options;
    parsed_model m;
    forge_model *model = NULL;
    forge_error error;
    forge_result result;
    static const char *const names[] = {"rope_factors_long.weight", "blk.0.attn_rot_embd", "v.patch_embd.weight"};
    size_t i;
    for (i = 0; i < sizeof names / sizeof names[0]; i++) {
        char label[128];
        snprintf(label, sizeof label, "model: unread tensor '%s' is refused at open", names[i]);
        TEST_CASE(label);
        gw_model_options_init(&options);
        options.extra_tensor = names[i];
        parsed_model_open(&m, &options);
        CHECK(m.parse_result == FORGE_OK && m.config_result == FORGE_OK, "parses and derives: %s", m.error.message);
        reset_error(&error);
        result = forge_model_from_memory(m.bytes, m.file.size, NULL, &model, &error);
        CHECK(result == FORGE_ERR_UNSUPPORTED && model == NULL, "refused: %s", forge_result_name(result));
        CHECK(message_has(&error, names[i]), "message names the tensor: %s", error.message);
        forge_model_close(model);
        model = NULL;
        parsed_model_close(&m);
    }
    TEST_CASE("model: the same file without the extra tensor opens");
    gw_model_options_init(&options);
    parsed_model_open(&m, &options);
    result = forge_model_from_memory(m.bytes, m.file.size, NULL, &model, &error);
    CHECK(result == FORGE_OK, "opens: %s", error.message);
    forge_model_close(model);
    parsed_model_close(&m);
}

static void test_config_errors(void) {
    gw_model_options options;
    kv_edits edits;
    static const uint32_t head_kv_three_layers[3] = {2, 2, 2};

    gw_model_options_init(&options);
    init_edits(&edits);
    set_str(&options, &edits, "llama.block_count", "2");
    expect_config_error("config: block_count stored as a string", &options, FORGE_ERR_KEY_TYPE, FORGE_ERR_KEY_TYPE,
                        "llama.block_count", NULL, NULL);

    gw_model_options_init(&options);
    options.n_vocab = 20;
    options.n_token_strings = 13;
    expect_config_error("config: 13 tokens for a vocabulary of 20", &options, FORGE_ERR_TENSOR_SHAPE, FORGE_ERR_CONFIG,
                        "13", "20", NULL);

    gw_model_options_init(&options);
    omit_key(&options, "llama.embedding_length");
    expect_config_error("config: embedding_length missing", &options, FORGE_ERR_MISSING_KEY, FORGE_ERR_MISSING_KEY,
                        "llama.embedding_length", NULL, NULL);

    gw_model_options_init(&options);
    init_edits(&edits);
    set_u32(&options, &edits, "llama.attention.head_count", 0);
    expect_config_error("config: head_count 0", &options, FORGE_ERR_CONFIG, FORGE_ERR_CONFIG, NULL, NULL, NULL);

    gw_model_options_init(&options);
    options.n_embd = 64;
    options.n_head = 8;
    options.n_head_kv = 3;
    expect_config_error("config: head_count 8 with head_count_kv 3", &options, FORGE_ERR_CONFIG, FORGE_ERR_CONFIG, "8",
                        "3", NULL);

    gw_model_options_init(&options);
    init_edits(&edits);
    set_u32(&options, &edits, "llama.attention.head_count", 6); /* 16 / 6 is not whole; 6 % 2 is */
    expect_config_error("config: embedding_length 16 with 6 heads, no key_length", &options, FORGE_ERR_CONFIG,
                        FORGE_ERR_CONFIG, NULL, NULL, NULL);

    gw_model_options_init(&options);
    omit_tensor(&options, "blk.1.ffn_up.weight");
    expect_config_error("config: blk.1.ffn_up.weight missing", &options, FORGE_ERR_MISSING_TENSOR,
                        FORGE_ERR_MISSING_TENSOR, "blk.1.ffn_up.weight", NULL, NULL);

    gw_model_options_init(&options);
    omit_tensor(&options, "output_norm.weight");
    expect_config_error("config: output_norm.weight missing", &options, FORGE_ERR_MISSING_TENSOR,
                        FORGE_ERR_MISSING_TENSOR, "output_norm.weight", NULL, NULL);

    /* n_embd 48, head_dim 12, 2 KV heads: attn_k must be [48, 24]; it is written [48, 36] */
    gw_model_options_init(&options);
    options.n_embd = 48;
    options.reshape_tensor = "blk.0.attn_k.weight";
    options.reshape_n_dims = 2;
    options.reshape_ne[0] = 48;
    options.reshape_ne[1] = 36;
    options.reshape_ne[2] = 1;
    options.reshape_ne[3] = 1;
    expect_config_error("config: blk.0.attn_k.weight [48, 36] instead of [48, 24]", &options, FORGE_ERR_TENSOR_SHAPE,
                        FORGE_ERR_TENSOR_SHAPE, "blk.0.attn_k.weight", "36", "24");

    gw_model_options_init(&options);
    options.arch = "mamba99";
    expect_config_error("config: architecture mamba99", &options, FORGE_ERR_ARCH, FORGE_ERR_ARCH, "mamba99", NULL, NULL);

    gw_model_options_init(&options);
    init_edits(&edits);
    set_u32(&options, &edits, "llama.block_count", FORGE_MAX_LAYERS + 1);
    expect_config_error("config: block_count FORGE_MAX_LAYERS + 1", &options, FORGE_ERR_LIMIT, FORGE_ERR_LIMIT, NULL,
                        NULL, NULL);

    gw_model_options_init(&options);
    init_edits(&edits);
    set_u32(&options, &edits, "llama.block_count", 0);
    expect_config_error("config: block_count 0 (no dimension may be zero)", &options, FORGE_ERR_CONFIG,
                        FORGE_ERR_CONFIG, NULL, NULL, NULL);

    gw_model_options_init(&options);
    omit_key(&options, "general.architecture");
    expect_config_error("config: general.architecture missing", &options, FORGE_ERR_MISSING_KEY,
                        FORGE_ERR_MISSING_KEY, "general.architecture", NULL, NULL);

    gw_model_options_init(&options);
    options.n_rot = 3;
    expect_config_error("config: rope.dimension_count 3 (odd)", &options, FORGE_ERR_CONFIG, FORGE_ERR_CONFIG, NULL,
                        NULL, NULL);

    gw_model_options_init(&options);
    options.n_rot = 8; /* head_dim is 4 */
    expect_config_error("config: rope.dimension_count 8 above head_dim 4", &options, FORGE_ERR_CONFIG,
                        FORGE_ERR_CONFIG, NULL, NULL, NULL);

    gw_model_options_init(&options);
    init_edits(&edits);
    omit_key(&options, "llama.attention.head_count_kv");
    edit_key(&options, &edits, "llama.attention.head_count_kv", GW_ARRAY, 0)->u32_array = head_kv_three_layers;
    edits.items[0].array_count = 3;
    expect_config_error("config: per-layer head_count_kv of 3 entries for 2 layers", &options, FORGE_ERR_CONFIG,
                        FORGE_ERR_CONFIG, NULL, NULL, NULL);

    /* qwen3 with key_length 64: attn_q must be [256, 512]; it is written [256, 256] */
    gw_model_options_init(&options);
    options.arch = "qwen3";
    options.n_embd = 256;
    options.n_head = 8;
    options.n_head_kv = 4;
    options.head_dim = 64;
    options.n_ff = 64;
    options.n_layer = 1;
    options.reshape_tensor = "blk.0.attn_q.weight";
    options.reshape_n_dims = 2;
    options.reshape_ne[0] = 256;
    options.reshape_ne[1] = 256;
    options.reshape_ne[2] = 1;
    options.reshape_ne[3] = 1;
    expect_config_error("config: qwen3 attn_q [256, 256] with key_length 64", &options, FORGE_ERR_TENSOR_SHAPE,
                        FORGE_ERR_TENSOR_SHAPE, "blk.0.attn_q.weight", "512", NULL);
}

/* =============================================================================================
   (b) configuration rules on valid files */

static void test_config_rules(void) {
    gw_model_options options;
    kv_edits edits;
    parsed_model m;
    static const uint32_t layer_head_kv[2] = {1, 2};

    TEST_CASE("rules: a llama file that declares a sliding window (Mistral style) applies it on every layer");
    gw_model_options_init(&options);
    init_edits(&edits);
    set_u32(&options, &edits, "llama.attention.sliding_window", 8);
    if (open_valid_model(&m, &options)) {
        const forge_config *c = &m.config;
        uint64_t bytes = 0;
        CHECK(c->n_swa == 8 && c->layer_is_swa[0] && c->layer_is_swa[1], "n_swa %u, layers %d %d", c->n_swa, c->layer_is_swa[0],
              c->layer_is_swa[1]);
        CHECK(c->rope_freq_base_swa == c->rope_freq_base && c->rope_freq_scale_swa == c->rope_freq_scale, "one rope");
        /* 2 layers x (8 + 4 - 1) rows x 2 KV heads x (4 + 4) x 2 bytes */
        CHECK(forge_kv_cache_bytes(c, 100, 4, FORGE_KV_F16, &bytes, NULL) == FORGE_OK && bytes == 2ull * 11 * 2 * 8 * 2,
              "KV bytes %llu", (unsigned long long)bytes);
        parsed_model_close(&m);
    }

    TEST_CASE("rules: llama defaults");
    gw_model_options_init(&options);
    if (open_valid_model(&m, &options)) {
        const forge_config *c = &m.config;
        CHECK(c->arch == FORGE_ARCH_LLAMA, "arch %d", (int)c->arch);
        CHECK(strcmp(c->arch_name, "llama") == 0, "arch_name %s", c->arch_name);
        CHECK(c->n_layer == 2 && c->n_embd == 16 && c->n_head == 4 && c->n_head_kv == 2 && c->n_ff == 32,
              "n_layer %u n_embd %u n_head %u n_head_kv %u n_ff %u", c->n_layer, c->n_embd, c->n_head, c->n_head_kv,
              c->n_ff);
        CHECK(c->head_dim == 4, "head_dim %u, want n_embd / n_head = 4", c->head_dim);
        CHECK(c->head_dim_v == 4, "head_dim_v %u", c->head_dim_v);
        CHECK(c->n_rot == 4, "n_rot %u, want head_dim 4 without rope.dimension_count", c->n_rot);
        CHECK(c->rope_type == FORGE_ROPE_NORM, "rope type %d", (int)c->rope_type);
        CHECK(c->rope_freq_base == 10000.0f, "freq base %g", (double)c->rope_freq_base);
        CHECK(c->n_ctx_train == 128, "n_ctx_train %u", c->n_ctx_train);
        CHECK(c->rms_eps > 0.99e-5f && c->rms_eps < 1.01e-5f, "rms_eps %g", (double)c->rms_eps);
        CHECK(c->tied_output == 0, "tied_output %d with output.weight present", c->tied_output);
        CHECK(c->n_vocab == 16, "n_vocab %u", c->n_vocab);
        CHECK(c->layer_n_head[0] == 4 && c->layer_n_head[1] == 4, "layer_n_head %u %u", c->layer_n_head[0],
              c->layer_n_head[1]);
        CHECK(c->layer_n_head_kv[0] == 2 && c->layer_n_head_kv[1] == 2, "layer_n_head_kv %u %u",
              c->layer_n_head_kv[0], c->layer_n_head_kv[1]);
        CHECK(c->layer_n_ff[0] == 32 && c->layer_n_ff[1] == 32, "layer_n_ff %u %u", c->layer_n_ff[0],
              c->layer_n_ff[1]);
        CHECK(c->n_expert == 0 && c->n_swa == 0 && !c->has_qkv_bias && !c->has_qk_norm, "unexpected features");
        CHECK(c->bos_id == 1 && c->eos_id == 2, "bos %d eos %d", (int)c->bos_id, (int)c->eos_id);
    }
    parsed_model_close(&m);

    TEST_CASE("rules: vocabulary size is the tokens array length");
    gw_model_options_init(&options);
    options.n_vocab = 40;
    options.n_token_strings = 40;
    if (open_valid_model(&m, &options)) CHECK(m.config.n_vocab == 40, "n_vocab %u", m.config.n_vocab);
    parsed_model_close(&m);

    TEST_CASE("rules: rope.dimension_count overrides head_dim");
    gw_model_options_init(&options);
    options.n_rot = 2;
    if (open_valid_model(&m, &options)) CHECK(m.config.n_rot == 2, "n_rot %u", m.config.n_rot);
    parsed_model_close(&m);

    TEST_CASE("rules: n_head_kv defaults to n_head");
    gw_model_options_init(&options);
    options.n_head_kv = options.n_head;
    omit_key(&options, "llama.attention.head_count_kv");
    if (open_valid_model(&m, &options)) CHECK(m.config.n_head_kv == 4, "n_head_kv %u", m.config.n_head_kv);
    parsed_model_close(&m);

    TEST_CASE("rules: tied output without output.weight");
    gw_model_options_init(&options);
    options.tied_output = 1;
    if (open_valid_model(&m, &options)) CHECK(m.config.tied_output == 1, "tied_output %d", m.config.tied_output);
    parsed_model_close(&m);

    TEST_CASE("rules: freq base from the file");
    gw_model_options_init(&options);
    init_edits(&edits);
    edit_key(&options, &edits, "llama.rope.freq_base", GW_F32, 0)->real = 500000.0;
    if (open_valid_model(&m, &options))
        CHECK(m.config.rope_freq_base == 500000.0f, "freq base %g", (double)m.config.rope_freq_base);
    parsed_model_close(&m);

    TEST_CASE("rules: per-layer head_count_kv array");
    gw_model_options_init(&options);
    options.layer_n_head_kv = layer_head_kv;
    if (open_valid_model(&m, &options)) {
        CHECK(m.config.layer_n_head_kv[0] == 1 && m.config.layer_n_head_kv[1] == 2, "layer_n_head_kv %u %u",
              m.config.layer_n_head_kv[0], m.config.layer_n_head_kv[1]);
        CHECK(m.config.n_head_kv == 2, "n_head_kv %u, want the largest (2)", m.config.n_head_kv);
    }
    parsed_model_close(&m);

    TEST_CASE("rules: qwen2 without rope.dimension_count");
    gw_model_options_init(&options);
    options.arch = "qwen2";
    options.tied_output = 1;
    if (open_valid_model(&m, &options)) {
        CHECK(m.config.arch == FORGE_ARCH_QWEN2, "arch %d", (int)m.config.arch);
        CHECK(m.config.n_rot == m.config.head_dim && m.config.n_rot != 0, "n_rot %u head_dim %u", m.config.n_rot,
              m.config.head_dim);
        CHECK(m.config.rope_type == FORGE_ROPE_NEOX, "rope type %d", (int)m.config.rope_type);
        CHECK(m.config.has_qkv_bias == 1, "has_qkv_bias %d", m.config.has_qkv_bias);
        CHECK(m.config.tied_output == 1, "tied_output %d", m.config.tied_output);
        CHECK(m.config.rope_freq_base == 10000.0f, "freq base %g", (double)m.config.rope_freq_base);
    }
    parsed_model_close(&m);

    TEST_CASE("rules: qwen3 key_length 64 overrides n_embd / n_head");
    gw_model_options_init(&options);
    options.arch = "qwen3";
    options.n_embd = 256;
    options.n_head = 8;
    options.n_head_kv = 4;
    options.head_dim = 64;
    options.n_ff = 64;
    options.n_layer = 1;
    if (open_valid_model(&m, &options)) {
        const forge_gguf_tensor *q = forge_gguf_find_tensor(m.gguf, "blk.0.attn_q.weight");
        CHECK(m.config.arch == FORGE_ARCH_QWEN3, "arch %d", (int)m.config.arch);
        CHECK(m.config.head_dim == 64 && m.config.head_dim_v == 64, "head_dim %u head_dim_v %u", m.config.head_dim,
              m.config.head_dim_v);
        CHECK(m.config.n_rot == 64, "n_rot %u", m.config.n_rot);
        CHECK(m.config.rope_type == FORGE_ROPE_NEOX, "rope type %d", (int)m.config.rope_type);
        CHECK(m.config.has_qk_norm == 1, "has_qk_norm %d", m.config.has_qk_norm);
        CHECK(q && q->ne[0] == 256 && q->ne[1] == 512, "attn_q shape");
    }
    parsed_model_close(&m);
}

/* The real fixtures agree with what llama.cpp derived from them (their hparams.txt). */
static void test_config_fixtures(void) {
    static const char *const paths[3] = {FIXTURE_MODEL, "models/tiny-qwen2-f32.gguf", "models/tiny-qwen3-q8_0.gguf"};
    /* n_layer n_embd n_head n_head_kv head_dim n_rot n_ff n_vocab rope_type tied */
    static const uint32_t expected[3][10] = {
        {4, 256, 8, 2, 32, 32, 512, 1024, FORGE_ROPE_NORM, 0},
        {3, 256, 4, 2, 64, 64, 512, 1024, FORGE_ROPE_NEOX, 1},
        {3, 256, 8, 4, 64, 64, 512, 1024, FORGE_ROPE_NEOX, 0},
    };
    int i;
    for (i = 0; i < 3; i++) {
        size_t size;
        uint8_t *bytes;
        forge_model *model = NULL;
        forge_error error;
        forge_result result;
        char name[128];

        snprintf(name, sizeof name, "rules: fixture %s", paths[i]);
        TEST_CASE(name);
        bytes = read_fixture(paths[i], &size);
        if (!bytes) continue;
        reset_error(&error);
        result = forge_model_from_memory(bytes, size, NULL, &model, &error);
        CHECK(result == FORGE_OK, "%s: %s", forge_result_name(result), error.message);
        if (result == FORGE_OK) {
            const forge_config *c = forge_model_config(model);
            uint32_t got[10];
            int k;
            got[0] = c->n_layer;
            got[1] = c->n_embd;
            got[2] = c->n_head;
            got[3] = c->n_head_kv;
            got[4] = c->head_dim;
            got[5] = c->n_rot;
            got[6] = c->n_ff;
            got[7] = c->n_vocab;
            got[8] = (uint32_t)c->rope_type;
            got[9] = (uint32_t)c->tied_output;
            for (k = 0; k < 10; k++)
                CHECK(got[k] == expected[i][k], "field %d (n_layer n_embd n_head n_head_kv head_dim n_rot n_ff n_vocab "
                      "rope tied): %u, want %u", k, got[k], expected[i][k]);
            CHECK(forge_model_gguf(model) != NULL, "model without its index");
        }
        forge_model_close(model);
        free(bytes);
    }
}

/* =============================================================================================
   (c) allocation failure */

typedef struct failing_allocator_state {
    long n_calls;   /* allocations asked for so far */
    long fail_at;   /* which call fails (0-based), -1 for none */
    long n_live;    /* allocations not yet freed */
} failing_allocator_state;

static void *failing_alloc(size_t size, void *user_data) {
    failing_allocator_state *state = (failing_allocator_state *)user_data;
    void *ptr;
    if (state->n_calls++ == state->fail_at) return NULL;
    ptr = malloc(size ? size : 1);
    if (ptr) state->n_live++;
    return ptr;
}

static void failing_free(void *ptr, void *user_data) {
    failing_allocator_state *state = (failing_allocator_state *)user_data;
    if (!ptr) return;
    state->n_live--;
    free(ptr);
}

enum { OPEN_WITH_PARSE, OPEN_WITH_MODEL };

/* Fails allocation k = 0, 1, 2, ... until the call succeeds: each failure must be
   FORGE_ERR_HOST_MEMORY with nothing left allocated, and the success must free to zero. */
static void check_allocation_failures(const char *case_name, const uint8_t *bytes, size_t size, int how) {
    failing_allocator_state state;
    forge_allocator allocator;
    long k, n_wrong = 0;
    int succeeded = 0;

    TEST_CASE(case_name);
    allocator.alloc = failing_alloc;
    allocator.free = failing_free;
    allocator.user_data = &state;
    for (k = 0; k < 100000 && !succeeded; k++) {
        forge_gguf *gguf = NULL;
        forge_model *model = NULL;
        forge_error error;
        forge_result result;
        int pointer_set;

        memset(&state, 0, sizeof state);
        state.fail_at = k;
        reset_error(&error);
        if (how == OPEN_WITH_PARSE) {
            result = forge_gguf_parse(bytes, size, &allocator, &gguf, &error);
        } else {
            forge_model_desc desc;
            memset(&desc, 0, sizeof desc);
            desc.allocator = allocator;
            result = forge_model_from_memory(bytes, size, &desc, &model, &error);
        }
        pointer_set = gguf != NULL || model != NULL;
        if (result == FORGE_OK) {
            succeeded = 1;
            CHECK(state.n_calls <= k, "succeeded although allocation %ld of %ld failed", k, state.n_calls);
            CHECK(pointer_set, "success without an object");
            forge_gguf_free(gguf);
            forge_model_close(model);
            CHECK(state.n_live == 0, "%ld allocations live after free (%ld made)", state.n_live, state.n_calls);
        } else {
            int ok = result == FORGE_ERR_HOST_MEMORY && !pointer_set && state.n_live == 0 &&
                     error.result == result && error.message[0] != '\0';
            if (!ok && n_wrong < 5)
                CHECK(ok, "allocation %ld failed: got %s, out %s, %ld live, error.result %s: %s", k,
                      forge_result_name(result), pointer_set ? "set" : "NULL", state.n_live,
                      forge_result_name(error.result), error.message);
            n_wrong += !ok;
            if (pointer_set) { /* wrong, but do not leak into the next round */
                forge_gguf_free(gguf);
                forge_model_close(model);
            }
        }
    }
    CHECK(succeeded, "never succeeded");
    CHECK(n_wrong == 0, "%ld of %ld failure points handled wrongly", n_wrong, k - 1);
    printf("  %s: %ld allocation failure points\n", case_name, k - 1);
}

static void test_allocation_failures(void) {
    gw_model_options options;
    gw_buffer file;
    uint8_t *copy, *fixture;
    size_t fixture_size;

    gw_model_options_init(&options);
    options.arch = "qwen2";
    build_model(&file, &options, NULL);
    copy = exact_copy(file.bytes, file.size);
    check_allocation_failures("allocation: forge_gguf_parse, generated qwen2", copy, file.size, OPEN_WITH_PARSE);
    check_allocation_failures("allocation: forge_model_from_memory, generated qwen2", copy, file.size,
                              OPEN_WITH_MODEL);
    free(copy);
    gw_free(&file);

    TEST_CASE("allocation: fixture " FIXTURE_MODEL);
    fixture = read_fixture(FIXTURE_MODEL, &fixture_size);
    if (fixture) {
        check_allocation_failures("allocation: forge_gguf_parse, fixture", fixture, fixture_size, OPEN_WITH_PARSE);
        check_allocation_failures("allocation: forge_model_from_memory, fixture", fixture, fixture_size,
                                  OPEN_WITH_MODEL);
        free(fixture);
    }
}

/* =============================================================================================
   (d) lookups and typed getters */

static uint64_t write_typed_kvs(gw_buffer *kvs, void *user_data) {
    static const uint16_t u16_array[3] = {1, 2, 65535};
    (void)user_data;
    gw_kv_u8(kvs, "test.u8", 200);
    gw_kv_i8(kvs, "test.i8", -5);
    gw_kv_u16(kvs, "test.u16", 60000);
    gw_kv_i16(kvs, "test.i16", -300);
    gw_kv_u32(kvs, "test.u32", 4000000000u);
    gw_kv_i32(kvs, "test.i32", -2000000000);
    gw_kv_f32(kvs, "test.f32", 0.5f);
    gw_kv_bool(kvs, "test.bool", 1);
    gw_kv_str(kvs, "test.str", "hello");
    gw_kv_u64(kvs, "test.u64", (uint64_t)1 << 40);
    gw_kv_u64(kvs, "test.u64_max", UINT64_MAX);
    gw_kv_i64(kvs, "test.i64", -((int64_t)1 << 40));
    gw_kv_f64(kvs, "test.f64", 0.25);
    gw_kv_array(kvs, "test.u16_array", GW_U16, u16_array, 3);
    gw_kv_array(kvs, "test.empty", GW_U32, NULL, 0);
    return 15;
}

static void check_int(const forge_gguf *gguf, const char *key, int64_t want) {
    const forge_gguf_kv *kv = forge_gguf_find_kv(gguf, key);
    int64_t value = 0;
    forge_error error;
    forge_result result;
    if (!CHECK(kv != NULL, "%s not found", key)) return;
    reset_error(&error);
    result = forge_gguf_kv_int(kv, &value, &error);
    CHECK(result == FORGE_OK && value == want, "%s: %s, %" PRId64 ", want %" PRId64 " (%s)", key,
          forge_result_name(result), value, want, error.message);
}

static void check_wrong_type(const forge_gguf *gguf, const char *key, const char *getter) {
    const forge_gguf_kv *kv = forge_gguf_find_kv(gguf, key);
    forge_error error;
    forge_result result = FORGE_OK;
    int64_t i;
    double d;
    int b;
    forge_gguf_str s;
    if (!CHECK(kv != NULL, "%s not found", key)) return;
    reset_error(&error);
    if (strcmp(getter, "int") == 0) result = forge_gguf_kv_int(kv, &i, &error);
    else if (strcmp(getter, "float") == 0) result = forge_gguf_kv_float(kv, &d, &error);
    else if (strcmp(getter, "bool") == 0) result = forge_gguf_kv_bool(kv, &b, &error);
    else if (strcmp(getter, "str") == 0) result = forge_gguf_kv_str(kv, &s, &error);
    else if (strcmp(getter, "int_at") == 0) result = forge_gguf_kv_int_at(kv, 0, &i, &error);
    else if (strcmp(getter, "float_at") == 0) result = forge_gguf_kv_float_at(kv, 0, &d, &error);
    CHECK(result == FORGE_ERR_KEY_TYPE, "kv_%s on %s: got %s", getter, key, forge_result_name(result));
    if (result != FORGE_OK) {
        check_error_record(result, &error);
        CHECK(message_has(&error, key), "message lacks the key %s: %s", key, error.message);
        CHECK(message_has(&error, forge_gguf_type_name(kv->type)), "message lacks the type %s: %s",
              forge_gguf_type_name(kv->type), error.message);
    }
}

static void test_lookups(void) {
    gw_model_options options;
    parsed_model m;
    const forge_gguf_kv *kv;
    const forge_gguf_tensor *tensor;
    forge_error error;
    forge_result result;
    double real = 0;
    int boolean = 0;
    int64_t integer = 0;
    forge_gguf_str text;
    float first_value;

    TEST_CASE("lookups: keys and tensors");
    gw_model_options_init(&options);
    options.write_extra_kvs = write_typed_kvs;
    if (!open_valid_model(&m, &options)) {
        parsed_model_close(&m);
        return;
    }
    CHECK(forge_gguf_version(m.gguf) == 3, "version %u", (unsigned)forge_gguf_version(m.gguf));
    CHECK(forge_gguf_kv_count(m.gguf) == m.layout.n_kv, "kv count %" PRIu64 ", wrote %" PRIu64,
          forge_gguf_kv_count(m.gguf), m.layout.n_kv);
    CHECK(forge_gguf_tensor_count(m.gguf) == m.layout.n_tensors, "tensor count %" PRIu64 ", wrote %" PRIu64,
          forge_gguf_tensor_count(m.gguf), m.layout.n_tensors);
    CHECK(forge_gguf_data_offset(m.gguf) == m.layout.data_offset, "data offset %" PRIu64,
          forge_gguf_data_offset(m.gguf));
    kv = forge_gguf_kv_at(m.gguf, 0);
    CHECK(kv && forge_gguf_str_eq(kv->key, "general.architecture"), "first kv");
    CHECK(forge_gguf_kv_at(m.gguf, m.layout.n_kv) == NULL, "kv_at(count) is not NULL");
    CHECK(forge_gguf_tensor_at(m.gguf, m.layout.n_tensors) == NULL, "tensor_at(count) is not NULL");

    kv = forge_gguf_find_kv(m.gguf, "llama.block_count");
    CHECK(kv && kv->type == FORGE_GGUF_UINT32 && kv->count == 1, "llama.block_count");
    CHECK(forge_gguf_find_kv(m.gguf, "llama.block") == NULL, "a prefix of a key matched");
    CHECK(forge_gguf_find_kv(m.gguf, "llama.block_count.x") == NULL, "a longer key matched");
    CHECK(forge_gguf_find_kv(m.gguf, "") == NULL, "the empty key matched");
    CHECK(forge_gguf_find_kv(m.gguf, "no.such.key") == NULL, "an absent key matched");

    tensor = forge_gguf_find_tensor(m.gguf, "blk.1.ffn_down.weight");
    CHECK(tensor != NULL, "blk.1.ffn_down.weight not found");
    if (tensor) {
        CHECK(tensor->type == FORGE_TYPE_F32 && tensor->n_dims == 2 && tensor->ne[0] == 32 && tensor->ne[1] == 16 &&
                  tensor->ne[2] == 1 && tensor->ne[3] == 1,
              "type %u dims %u ne [%" PRIu64 ", %" PRIu64 "]", tensor->type, tensor->n_dims, tensor->ne[0],
              tensor->ne[1]);
        CHECK(tensor->n_elements == 512 && tensor->n_bytes == 2048, "n_elements %" PRIu64 " n_bytes %" PRIu64,
              tensor->n_elements, tensor->n_bytes);
        CHECK(tensor->offset % 32 == 0, "offset %" PRIu64, tensor->offset);
        CHECK(tensor->data == m.bytes + m.layout.data_offset + tensor->offset, "data does not point into the buffer");
        memcpy(&first_value, tensor->data, sizeof first_value);
        CHECK(first_value >= -0.1f && first_value <= 0.1f, "first value %g", (double)first_value);
    }
    CHECK(forge_gguf_find_tensor(m.gguf, "blk.1.ffn_down") == NULL, "a prefix of a tensor name matched");
    CHECK(forge_gguf_find_tensor(m.gguf, "blk.9.ffn_down.weight") == NULL, "an absent tensor matched");
    CHECK(forge_gguf_find_tensor(m.gguf, "token_embd.weight") != NULL, "token_embd.weight not found");

    TEST_CASE("lookups: integer getters convert every width");
    check_int(m.gguf, "test.u8", 200);
    check_int(m.gguf, "test.i8", -5);
    check_int(m.gguf, "test.u16", 60000);
    check_int(m.gguf, "test.i16", -300);
    check_int(m.gguf, "test.u32", 4000000000);
    check_int(m.gguf, "test.i32", -2000000000);
    check_int(m.gguf, "test.u64", (int64_t)1 << 40);
    check_int(m.gguf, "test.i64", -((int64_t)1 << 40));
    check_int(m.gguf, "llama.block_count", 2);
    kv = forge_gguf_find_kv(m.gguf, "test.u64_max");
    if (CHECK(kv != NULL, "test.u64_max not found")) {
        reset_error(&error);
        result = forge_gguf_kv_int(kv, &integer, &error);
        CHECK(result != FORGE_OK, "UINT64_MAX read as int64 %" PRId64, integer);
    }

    TEST_CASE("lookups: float, bool and string getters");
    kv = forge_gguf_find_kv(m.gguf, "test.f32");
    result = kv ? forge_gguf_kv_float(kv, &real, NULL) : FORGE_ERR_ARGUMENT;
    CHECK(result == FORGE_OK && real == 0.5, "test.f32: %s %g", forge_result_name(result), real);
    kv = forge_gguf_find_kv(m.gguf, "test.f64");
    result = kv ? forge_gguf_kv_float(kv, &real, NULL) : FORGE_ERR_ARGUMENT;
    CHECK(result == FORGE_OK && real == 0.25, "test.f64: %s %g", forge_result_name(result), real);
    kv = forge_gguf_find_kv(m.gguf, "test.bool");
    result = kv ? forge_gguf_kv_bool(kv, &boolean, NULL) : FORGE_ERR_ARGUMENT;
    CHECK(result == FORGE_OK && boolean == 1, "test.bool: %s %d", forge_result_name(result), boolean);
    kv = forge_gguf_find_kv(m.gguf, "test.str");
    result = kv ? forge_gguf_kv_str(kv, &text, NULL) : FORGE_ERR_ARGUMENT;
    CHECK(result == FORGE_OK && forge_gguf_str_eq(text, "hello") && text.len == 5, "test.str: %s",
          forge_result_name(result));
    CHECK(!forge_gguf_str_eq(text, "hell") && !forge_gguf_str_eq(text, "hello!"), "str_eq matches a prefix");

    TEST_CASE("lookups: array getters");
    kv = forge_gguf_find_kv(m.gguf, "test.u16_array");
    if (CHECK(kv != NULL, "test.u16_array not found")) {
        CHECK(kv->type == FORGE_GGUF_ARRAY && kv->elem_type == FORGE_GGUF_UINT16 && kv->count == 3, "array header");
        result = forge_gguf_kv_int_at(kv, 2, &integer, NULL);
        CHECK(result == FORGE_OK && integer == 65535, "element 2: %s %" PRId64, forge_result_name(result), integer);
        reset_error(&error);
        result = forge_gguf_kv_int_at(kv, 3, &integer, &error);
        CHECK(result != FORGE_OK, "element 3 of 3 read");
        reset_error(&error);
        result = forge_gguf_kv_int_at(kv, UINT64_MAX, &integer, &error);
        CHECK(result != FORGE_OK, "element UINT64_MAX of 3 read");
    }
    kv = forge_gguf_find_kv(m.gguf, "tokenizer.ggml.scores");
    if (CHECK(kv != NULL, "scores not found")) {
        result = forge_gguf_kv_float_at(kv, 3, &real, NULL);
        CHECK(result == FORGE_OK && real == -3.0, "score 3: %s %g", forge_result_name(result), real);
    }
    kv = forge_gguf_find_kv(m.gguf, "tokenizer.ggml.token_type");
    if (CHECK(kv != NULL, "token_type not found")) {
        result = forge_gguf_kv_int_at(kv, 0, &integer, NULL);
        CHECK(result == FORGE_OK && integer == 2, "token type 0: %s %" PRId64, forge_result_name(result), integer);
    }
    kv = forge_gguf_find_kv(m.gguf, "tokenizer.ggml.tokens");
    if (CHECK(kv != NULL && kv->strs != NULL, "tokens not found")) {
        CHECK(kv->count == 16 && kv->elem_type == FORGE_GGUF_STRING, "tokens count %" PRIu64, kv->count);
        CHECK(forge_gguf_str_eq(kv->strs[3], "tok3") && forge_gguf_str_eq(kv->strs[1], "<s>"), "token strings");
    }
    kv = forge_gguf_find_kv(m.gguf, "test.empty");
    CHECK(kv != NULL && kv->count == 0, "empty array");

    TEST_CASE("lookups: getters refuse the wrong type");
    check_wrong_type(m.gguf, "test.str", "int");
    check_wrong_type(m.gguf, "test.f32", "int");
    check_wrong_type(m.gguf, "test.str", "float");
    check_wrong_type(m.gguf, "test.u8", "float_at");
    {
        double as_float = 0.0;
        kv = forge_gguf_find_kv(m.gguf, "test.u32");
        CHECK(kv && forge_gguf_kv_float(kv, &as_float, NULL) == FORGE_OK && as_float == 4000000000.0,
              "kv_float converts an integer: %g", as_float);
    }
    check_wrong_type(m.gguf, "test.u32", "str");
    check_wrong_type(m.gguf, "test.u8", "bool");
    check_wrong_type(m.gguf, "test.str", "bool");
    check_wrong_type(m.gguf, "test.u16_array", "int");
    check_wrong_type(m.gguf, "tokenizer.ggml.tokens", "int_at");
    check_wrong_type(m.gguf, "tokenizer.ggml.tokens", "float_at");
    check_wrong_type(m.gguf, "tokenizer.ggml.tokens", "str");

    TEST_CASE("lookups: names");
    CHECK(strcmp(forge_gguf_type_name(FORGE_GGUF_UINT32), "uint32") == 0, "%s", forge_gguf_type_name(FORGE_GGUF_UINT32));
    CHECK(strcmp(forge_gguf_type_name(FORGE_GGUF_ARRAY), "array") == 0, "%s", forge_gguf_type_name(FORGE_GGUF_ARRAY));
    CHECK(strcmp(forge_result_name(FORGE_ERR_TRUNCATED), "FORGE_ERR_TRUNCATED") == 0, "%s",
          forge_result_name(FORGE_ERR_TRUNCATED));
    CHECK(forge_type_info(16) == NULL && forge_type_name(16) && strcmp(forge_type_name(16), "IQ2_XXS") == 0,
          "type 16");
    CHECK(forge_type_name(1000) == NULL, "type 1000 has a name");
    parsed_model_close(&m);
}

int main(void) {
    clock_t start = clock();

    test_header();
    test_counts();
    test_strings();
    test_arrays();
    test_value_types();
    test_alignment();
    test_tensor_dims();
    test_tensor_types();
    test_tensor_offsets();
    test_duplicates();
    test_arguments();
    test_config_errors();
    test_unread_tensor();
    test_truncation_generated();
    test_truncation_fixture();

    test_config_rules();
    test_config_fixtures();

    test_allocation_failures();

    test_lookups();

    printf("  %.1f s\n", (double)(clock() - start) / CLOCKS_PER_SEC);
    return test_summary();
}
