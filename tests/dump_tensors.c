/* dump_tensors - dequantize every tensor of a GGUF file to little-endian f32.

   Usage: dump_tensors FILE.gguf OUT.bin

   Uses only the lower layers of forge (forge_file_open + forge_gguf_parse + forge_dequantize), not
   forge_model_open, so it works on any file forge can parse, whatever its architecture. Tensors are
   written in index order, all concatenated, n_elements floats each. tests/check_fixtures.py compares
   the result with the gguf Python package's dequantization.

   Tensors are converted a bounded chunk at a time so that memory use does not grow with the model. */
#define FORGE_IMPLEMENTATION
#include "../forge.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Elements converted per chunk (before rounding down to whole blocks); 1 MiB of floats. */
#define CHUNK_ELEMS (256u * 1024u)

/* Writes n floats as little-endian bytes whatever the host's byte order. */
static int write_floats_le(FILE *out, const float *src, size_t n, unsigned char *bytes) {
    size_t i;
    for (i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], sizeof u);
        bytes[4 * i + 0] = (unsigned char)(u & 0xffu);
        bytes[4 * i + 1] = (unsigned char)((u >> 8) & 0xffu);
        bytes[4 * i + 2] = (unsigned char)((u >> 16) & 0xffu);
        bytes[4 * i + 3] = (unsigned char)((u >> 24) & 0xffu);
    }
    return fwrite(bytes, 4, n, out) == n;
}

/* Prints the tensor's name (not NUL-terminated in the file) and the message. */
static void tensor_error(const forge_gguf_tensor *t, const char *what) {
    int len = t->name.len > 200 ? 200 : (int)t->name.len;
    fprintf(stderr, "dump_tensors: tensor '%.*s': %s\n", len, t->name.ptr, what);
}

int main(int argc, char **argv) {
    forge_file file;
    forge_gguf *gguf = NULL;
    forge_error err;
    FILE *out = NULL;
    float *values = NULL;
    unsigned char *bytes = NULL;
    uint64_t i, n_tensors;
    int status = 1;

    if (argc != 3) {
        fprintf(stderr, "usage: %s FILE.gguf OUT.bin\n", argv[0]);
        return 2;
    }

    memset(&file, 0, sizeof file);
    memset(&err, 0, sizeof err);
    if (forge_file_open(argv[1], NULL, &file, &err) != FORGE_OK) {
        fprintf(stderr, "dump_tensors: %s\n", err.message);
        return 1;
    }
    if (file.size > (uint64_t)SIZE_MAX) {
        fprintf(stderr, "dump_tensors: %s: file too large for this platform\n", argv[1]);
        goto done;
    }
    if (forge_gguf_parse(file.bytes, (size_t)file.size, NULL, &gguf, &err) != FORGE_OK) {
        fprintf(stderr, "dump_tensors: %s\n", err.message);
        goto done;
    }

    values = (float *)malloc(CHUNK_ELEMS * sizeof *values);
    bytes = (unsigned char *)malloc(CHUNK_ELEMS * 4u);
    if (!values || !bytes) {
        fprintf(stderr, "dump_tensors: out of memory\n");
        goto done;
    }
    out = fopen(argv[2], "wb");
    if (!out) {
        fprintf(stderr, "dump_tensors: cannot create %s\n", argv[2]);
        goto done;
    }

    n_tensors = forge_gguf_tensor_count(gguf);
    for (i = 0; i < n_tensors; i++) {
        const forge_gguf_tensor *t = forge_gguf_tensor_at(gguf, i);
        const forge_type_traits *traits;
        uint64_t chunk, done_elems = 0, bytes_per_chunk;

        if (!t) {
            fprintf(stderr, "dump_tensors: forge_gguf_tensor_at(%llu) returned NULL\n", (unsigned long long)i);
            goto done;
        }
        traits = forge_type_info(t->type);
        if (!traits || traits->block_elems == 0 || traits->block_elems > CHUNK_ELEMS) {
            tensor_error(t, "type has no usable traits");
            goto done;
        }
        /* A chunk is a whole number of blocks, so each forge_dequantize call starts on a block. */
        chunk = (CHUNK_ELEMS / traits->block_elems) * traits->block_elems;
        bytes_per_chunk = (chunk / traits->block_elems) * traits->block_bytes;

        while (done_elems < t->n_elements) {
            uint64_t n = t->n_elements - done_elems;
            const uint8_t *src = t->data + (done_elems / chunk) * bytes_per_chunk;
            forge_result r;
            if (n > chunk) n = chunk;
            r = forge_dequantize(t->type, src, values, n);
            if (r != FORGE_OK) {
                tensor_error(t, forge_result_string(r));
                goto done;
            }
            if (!write_floats_le(out, values, (size_t)n, bytes)) {
                fprintf(stderr, "dump_tensors: write to %s failed\n", argv[2]);
                goto done;
            }
            done_elems += n;
        }
    }

    status = 0;

done:
    if (out && fclose(out) != 0 && status == 0) {
        fprintf(stderr, "dump_tensors: write to %s failed\n", argv[2]);
        status = 1;
    }
    free(values);
    free(bytes);
    if (gguf) forge_gguf_free(gguf);
    forge_file_close(&file);
    return status;
}
