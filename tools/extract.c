/* forge extract: hidden states of chosen layers and points for a whole text, streamed chunk by chunk
   through the KV cache (so every chunk sees the tokens before it), written as .npy files numpy reads
   without forge, plus index.json. Included by tools/forge.c.

   forge extract -m FILE (-f TEXTFILE | -p TEXT | --tokens IDS) [--layers 0,12,-1] [--points resid_post]
                 [--chunk 512] [--dtype f32|f16|bf16] -o OUTDIR [--bos|--no-bos] [--cpu|--gpu] [--ctx N] [--kv TYPE]

   OUTDIR/<hook name>.npy: shape [n_tokens, width], '<f4' (f32), '<f2' (f16) or '<u2' (bf16 bits: numpy
   has no bfloat16; widen with (a.astype(np.uint32) << 16).view(np.float32)); an attention pattern
   (blocks.L.attn.hook_pattern) is [n_tokens, heads, keys] for --pattern-heads and --pattern-keys. OUTDIR/tokens.npy: the
   token ids, '<i4'. OUTDIR/index.json: model, tokens, chunk size, dtype, and per capture its hook name,
   layer, point, file, shape and dtype. Memory stays flat: each chunk's rows go to disk as they come. */
#include <errno.h>
#include <sys/stat.h>

/* The .npy header (format 1.0) for a C-order array of `descr` values of this shape: magic,
   version, little-endian header length, the dict padded with spaces to a multiple of 64 bytes. */
static int npy_header3(FILE *f, const char *descr, uint64_t rows, uint64_t cols, uint64_t depth, int two_d);
static int npy_header(FILE *f, const char *descr, uint64_t rows, uint64_t cols, int two_d) {
    return npy_header3(f, descr, rows, cols, 0, two_d);
}

/* The same with a third dimension when depth is not 0. */
static int npy_header3(FILE *f, const char *descr, uint64_t rows, uint64_t cols, uint64_t depth, int two_d) {
    char dict[200];
    unsigned char head[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
    size_t len, total;
    if (depth)
        len = (size_t)snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%llu, %llu, %llu), }", descr,
                               (unsigned long long)rows, (unsigned long long)cols, (unsigned long long)depth);
    else if (two_d)
        len = (size_t)snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%llu, %llu), }", descr,
                               (unsigned long long)rows, (unsigned long long)cols);
    else
        len = (size_t)snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%llu,), }", descr,
                               (unsigned long long)rows);
    total = (10 + len + 1 + 63) / 64 * 64; /* the dict ends in a newline */
    while (10 + len + 1 < total) dict[len++] = ' ';
    dict[len++] = '\n';
    head[8] = (unsigned char)(len & 0xff);
    head[9] = (unsigned char)(len >> 8);
    return fwrite(head, 1, 10, f) == 10 && fwrite(dict, 1, len, f) == len;
}

typedef struct extract_state {
    FILE *files[FORGE_MAX_CAPTURES];
    uint32_t n_files;
    uint64_t rows_written;
    int failed;
    int non_finite; /* a captured value was NaN or infinite */
    cli_monitor monitor;
} extract_state;

/* 1 when every value of a chunk's capture is finite (f32, f16 or bf16 bits). */
static int capture_finite(const void *data, uint64_t n, forge_capture_dtype dtype) {
    uint64_t i;
    if (dtype == FORGE_CAPTURE_F32) {
        const float *v = (const float *)data;
        for (i = 0; i < n; i++)
            if (!isfinite(v[i])) return 0;
    } else {
        const uint16_t *h = (const uint16_t *)data, exponent = dtype == FORGE_CAPTURE_F16 ? 0x7c00 : 0x7f80;
        for (i = 0; i < n; i++)
            if ((h[i] & exponent) == exponent) return 0;
    }
    return 1;
}

/* Every chunk: append its rows to each capture's file. */
static void extract_on_chunk(void *user, const forge_capture_chunk *chunk) {
    extract_state *st = (extract_state *)user;
    uint32_t i, elem = forge_capture_dtype_bytes(chunk->dtype);
    for (i = 0; i < chunk->n_captures && i < st->n_files; i++) {
        size_t bytes = (size_t)chunk->n_tokens * chunk->width[i] * elem;
        if (fwrite(chunk->data[i], 1, bytes, st->files[i]) != bytes) st->failed = 1;
        if (!capture_finite(chunk->data[i], (uint64_t)chunk->n_tokens * chunk->width[i], chunk->dtype)) st->non_finite = 1;
    }
    st->rows_written += chunk->n_tokens;
    monitor_poll(&st->monitor);
}

/* The whole of a file into a NUL-terminated buffer. */
static char *read_text_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t cap = 0, n = 0;
    if (!f) return NULL;
    for (;;) {
        size_t got;
        if (n + 65536 + 1 > cap) {
            char *grown;
            cap = cap ? cap * 2 : 1 << 20;
            grown = (char *)realloc(buf, cap);
            if (!grown) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = grown;
        }
        got = fread(buf + n, 1, 65536, f);
        n += got;
        if (got < 65536) break;
    }
    if (ferror(f)) {
        free(buf);
        fclose(f);
        return NULL;
    }
    fclose(f);
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* "A" or "A-B" (inclusive) into first and count; 1 on success. */
static int parse_span(const char *text, const char *flag, uint32_t *first, uint32_t *count) {
    const char *dash = strchr(text, '-');
    uint32_t a = 0, b = 0;
    char head[32];
    if (!dash) {
        if (!parse_u32_in(text, flag, 0, 1u << 30, &a)) return 0;
        *first = a, *count = 1;
        return 1;
    }
    if ((size_t)(dash - text) >= sizeof head || dash == text) {
        fprintf(stderr, "forge: %s '%s' must be N or A-B\n", flag, text);
        return 0;
    }
    memcpy(head, text, (size_t)(dash - text));
    head[dash - text] = '\0';
    if (!parse_u32_in(head, flag, 0, 1u << 30, &a) || !parse_u32_in(dash + 1, flag, 0, 1u << 30, &b)) return 0;
    if (b < a) {
        fprintf(stderr, "forge: %s '%s' runs backwards\n", flag, text);
        return 0;
    }
    *first = a, *count = b - a + 1;
    return 1;
}

#define EXTRACT_USAGE \
    "usage: forge extract -m FILE (-f TEXTFILE | -p TEXT | --tokens IDS) -o OUTDIR [options]\n" \
    "  hidden states of chosen layers for a whole text, streamed chunk by chunk into OUTDIR/<hook>.npy, with\n" \
    "  OUTDIR/tokens.npy and OUTDIR/index.json; exit 1 when a captured value or a logit is NaN or infinite\n" \
    "  -m, --model FILE      the GGUF model\n" \
    "  -f TEXTFILE, -p TEXT  the text, from a file or the command line\n" \
    "  --tokens IDS          or comma-separated token ids\n" \
    "  -o OUTDIR             where the files go (created if missing)\n" \
    "  --layers LIST         layer indices, comma-separated; negative ones count from the end (-1 = the last)\n" \
    "  --points LIST         resid_pre, attn_out, mlp_out, resid_post (default), final, pattern, or hook names\n" \
    "                        (pattern: attention probabilities, blocks.L.attn.hook_pattern, [tokens, heads, keys])\n" \
    "  --pattern-heads H     query heads of the patterns, N or A-B; default every head\n" \
    "  --pattern-keys K      key positions of the patterns, N or A-B; default every position of the context\n" \
    "  --chunk N             tokens per step, [1, 65536]; default 512 (it is the batch: --batch is ignored)\n" \
    "  --dtype TYPE          f32 (default), f16 or bf16\n" \
    "  --bos, --no-bos       add the beginning-of-sequence token or not; default the model's choice\n" \
    MONITOR_HELP QUIET_HELP CONTEXT_OPTIONS_HELP \
    "  -h, --help            this text\n"

static int cmd_extract(int argc, char **argv) {
    const char *path = NULL, *text_path = NULL, *text_arg = NULL, *token_arg = NULL, *out_dir = NULL;
    const char *layers = NULL, *points = "resid_post", *dtype_name = "f32";
    uint32_t chunk = 512, n_captures = 0, i;
    double monitor = 0.85;
    int quiet = 0;
    upload_progress upload;
    int bad = 0, bos = -1, status = 1;
    forge_context_desc desc;
    forge_capture *captures = NULL;
    forge_model *model = NULL;
    forge_tokenizer *tok = NULL;
    forge_context *ctx = NULL;
    forge_error err;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    char *text = NULL;
    extract_state st;
    double t0, seconds;
    char file_path[4096], name[96];
    FILE *index = NULL;

    memset(&st, 0, sizeof st);
    if (wants_help(argc, argv)) {
        fputs(EXTRACT_USAGE, stdout);
        return 0;
    }
    if (!context_defaults(&desc)) return 1;
    for (i = 0; i < (uint32_t)argc; i++) {
        int k = (int)i;
        if (context_option(argc, argv, &k, &desc, &bad)) {
            i = (uint32_t)k;
            continue;
        }
        if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && i + 1 < (uint32_t)argc) path = argv[++i];
        else if (!strcmp(argv[i], "-f") && i + 1 < (uint32_t)argc) text_path = argv[++i];
        else if (!strcmp(argv[i], "-p") && i + 1 < (uint32_t)argc) text_arg = argv[++i];
        else if (!strcmp(argv[i], "--tokens") && i + 1 < (uint32_t)argc) token_arg = argv[++i];
        else if (!strcmp(argv[i], "-o") && i + 1 < (uint32_t)argc) out_dir = argv[++i];
        else if (!strcmp(argv[i], "--layers") && i + 1 < (uint32_t)argc) layers = argv[++i];
        else if ((!strcmp(argv[i], "--points") || !strcmp(argv[i], "--hooks")) && i + 1 < (uint32_t)argc) points = argv[++i];
        else if (!strcmp(argv[i], "--dtype") && i + 1 < (uint32_t)argc) dtype_name = argv[++i];
        else if (!strcmp(argv[i], "--pattern-heads") && i + 1 < (uint32_t)argc)
            bad |= !parse_span(argv[++i], "--pattern-heads", &desc.pattern_head_first, &desc.pattern_n_heads);
        else if (!strcmp(argv[i], "--pattern-keys") && i + 1 < (uint32_t)argc)
            bad |= !parse_span(argv[++i], "--pattern-keys", &desc.pattern_key_first, &desc.pattern_n_keys);
        else if (!strcmp(argv[i], "--chunk") && i + 1 < (uint32_t)argc) bad |= !parse_u32_in(argv[++i], "--chunk", 1, 65536, &chunk);
        else if (!strcmp(argv[i], "--monitor") && i + 1 < (uint32_t)argc)
            bad |= !parse_number_in(argv[++i], "--monitor", 0.0, 1.0, 0, &monitor);
        else if (!strcmp(argv[i], "--quiet")) quiet = 1;
        else if (!strcmp(argv[i], "--bos")) bos = 1;
        else if (!strcmp(argv[i], "--no-bos")) bos = 0;
        else {
            fprintf(stderr, "forge extract: unexpected '%s'\n", argv[i]);
            bad = 1;
        }
    }
    if (bad || !path || !out_dir || (!!text_path + !!text_arg + !!token_arg) != 1) return usage_error("extract", EXTRACT_USAGE);
    upload_progress_setup(&desc, &upload, quiet);
    if (forge_capture_dtype_parse(dtype_name, &desc.capture_dtype, &err) != FORGE_OK ||
        forge_model_open(path, NULL, &model, &err) != FORGE_OK) {
        fprintf(stderr, "forge extract: %s\n", err.message);
        goto done;
    }
    captures = (forge_capture *)malloc(FORGE_MAX_CAPTURES * sizeof *captures);
    if (!captures) goto done;
    if (forge_capture_parse(forge_model_config(model), layers, points, captures, FORGE_MAX_CAPTURES, &n_captures, &err) !=
        FORGE_OK) {
        fprintf(stderr, "forge extract: %s\n", err.message);
        goto done;
    }

    /* the tokens: ids given, or the text tokenized as one sequence */
    if (token_arg) {
        if (cli_parse_ids("forge extract", token_arg, &ids, &n_ids)) goto done;
    } else {
        size_t len = 0;
        if (text_path) {
            text = read_text_file(text_path, &len);
            if (!text) {
                fprintf(stderr, "forge extract: cannot read '%s': %s\n", text_path, strerror(errno));
                goto done;
            }
        } else {
            len = strlen(text_arg);
        }
        if (forge_tokenizer_create(forge_model_gguf(model), NULL, &tok, &err) != FORGE_OK) {
            fprintf(stderr, "forge extract: %s\n", err.message);
            goto done;
        }
        if (bos < 0) bos = forge_tokenizer_add_bos(tok);
        forge_tokenize(tok, text ? text : text_arg, len, bos, 0, NULL, 0, &n_ids, NULL);
        ids = (int32_t *)malloc((n_ids ? n_ids : 1) * sizeof *ids);
        if (!ids || forge_tokenize(tok, text ? text : text_arg, len, bos, 0, ids, n_ids, &n_ids, &err) != FORGE_OK) {
            fprintf(stderr, "forge extract: %s\n", ids ? err.message : "out of memory");
            goto done;
        }
    }
    if (n_ids == 0 || n_ids > 0x7fffffffu) {
        fprintf(stderr, "forge extract: %s\n", n_ids ? "too many tokens" : "the text has no tokens");
        goto done;
    }

    /* the context holds the whole sequence; chunks of --chunk tokens go through it in turn */
    if (!desc.n_ctx) desc.n_ctx = (uint32_t)n_ids;
    warn_ctx(model, desc.n_ctx, "extract");
    if (desc.n_ctx < n_ids) {
        fprintf(stderr, "forge extract: %llu tokens do not fit a context of %u positions (--ctx)\n", (unsigned long long)n_ids,
                desc.n_ctx);
        goto done;
    }
    desc.n_batch = chunk;
    desc.captures = captures;
    desc.n_captures = n_captures;
    desc.on_capture = extract_on_chunk;
    desc.capture_user_data = &st;
    if (forge_context_create(model, &desc, &ctx, &err) != FORGE_OK) {
        fprintf(stderr, "forge extract: %s\n", err.message);
        goto done;
    }
    monitor_start(&st.monitor, monitor, ctx, desc.device, "extract");
    monitor_poll(&st.monitor);
    if (mkdir(out_dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "forge extract: cannot create '%s': %s\n", out_dir, strerror(errno));
        goto done;
    }
    { /* token ids first, then one file per capture with its header: the rows follow as chunks come */
        FILE *f;
        snprintf(file_path, sizeof file_path, "%s/tokens.npy", out_dir);
        f = fopen(file_path, "wb");
        if (!f || !npy_header(f, "<i4", n_ids, 0, 0) || fwrite(ids, sizeof *ids, n_ids, f) != n_ids || fclose(f) != 0) {
            fprintf(stderr, "forge extract: cannot write '%s'\n", file_path);
            goto done;
        }
    }
    {
        forge_capture_chunk info;
        forge_context_captures(ctx, &info);
        for (i = 0; i < n_captures; i++) {
            const char *descr = desc.capture_dtype == FORGE_CAPTURE_F32 ? "<f4" : desc.capture_dtype == FORGE_CAPTURE_F16 ? "<f2" : "<u2";
            snprintf(file_path, sizeof file_path, "%s/%s.npy", out_dir, forge_capture_name(&captures[i], name, sizeof name));
            st.files[i] = fopen(file_path, "wb");
            st.n_files = i + 1;
            const forge_plan *plan = forge_context_plan(ctx);
            int pattern = captures[i].point == FORGE_CAPTURE_ATTN_PATTERN;
            if (!st.files[i] || !npy_header3(st.files[i], descr, n_ids, pattern ? info.width[i] / plan->pattern_n_keys : info.width[i],
                                             pattern ? plan->pattern_n_keys : 0, 1)) {
                fprintf(stderr, "forge extract: cannot write '%s'\n", file_path);
                goto done;
            }
        }
    }
    t0 = now_seconds();
    if (forge_eval(ctx, ids, (uint32_t)n_ids, &err) != FORGE_OK) {
        fprintf(stderr, "forge extract: %s\n", err.message);
        goto done;
    }
    seconds = now_seconds() - t0;
    for (i = 0; i < st.n_files; i++) {
        if (fclose(st.files[i]) != 0) st.failed = 1;
        st.files[i] = NULL;
    }
    if (st.non_finite) {
        fprintf(stderr, "forge extract: the model produced non-finite hidden states (NaN or infinite values; they are in "
                        "the files): its weights or activations hold NaN or infinite values\n");
        goto done;
    }
    if (!logits_finite(ctx, forge_model_config(model)->n_vocab, "extract")) goto done;
    if (st.failed || st.rows_written != n_ids) {
        fprintf(stderr, "forge extract: writing the captures failed (%llu of %llu rows)\n", (unsigned long long)st.rows_written,
                (unsigned long long)n_ids);
        goto done;
    }
    snprintf(file_path, sizeof file_path, "%s/index.json", out_dir);
    index = fopen(file_path, "w");
    if (!index) {
        fprintf(stderr, "forge extract: cannot write '%s'\n", file_path);
        goto done;
    }
    {
        forge_capture_chunk info;
        const forge_plan *plan = forge_context_plan(ctx);
        forge_context_captures(ctx, &info);
        fprintf(index, "{\"model\": ");
        json_cstr(index, path);
        fprintf(index, ", \"n_tokens\": %llu, \"tokens\": \"tokens.npy\", \"chunk\": %u, \"dtype\": \"%s\", \"backend\": \"%s\"",
                (unsigned long long)n_ids, plan->n_batch, forge_capture_dtype_name(desc.capture_dtype),
                plan->backend == FORGE_BACKEND_GPU ? "gpu" : "cpu");
        fprintf(index, ", \"capture_bytes\": %llu, \"plan_bytes\": %llu, \"seconds\": ", (unsigned long long)plan->capture_bytes,
                (unsigned long long)plan->total_bytes);
        json_float(index, seconds);
        fprintf(index, ", \"captures\": [");
        for (i = 0; i < n_captures; i++) {
            forge_capture_name(&captures[i], name, sizeof name);
            fprintf(index, "%s\n  {\"name\": \"%s\", \"layer\": ", i ? "," : "", name);
            if (captures[i].point == FORGE_CAPTURE_FINAL) fprintf(index, "null");
            else fprintf(index, "%u", captures[i].layer);
            fprintf(index, ", \"point\": \"%s\", \"file\": \"%s.npy\", \"shape\": [%llu, ",
                    captures[i].point == FORGE_CAPTURE_RESID_PRE    ? "resid_pre"
                    : captures[i].point == FORGE_CAPTURE_ATTN_OUT   ? "attn_out"
                    : captures[i].point == FORGE_CAPTURE_MLP_OUT    ? "mlp_out"
                    : captures[i].point == FORGE_CAPTURE_RESID_POST ? "resid_post"
                    : captures[i].point == FORGE_CAPTURE_FINAL      ? "final"
                                                                    : "pattern",
                    name, (unsigned long long)n_ids);
            if (captures[i].point == FORGE_CAPTURE_ATTN_PATTERN)
                fprintf(index, "%u, %u], \"heads\": [%u, %u], \"keys\": [%u, %u]", info.width[i] / plan->pattern_n_keys, plan->pattern_n_keys,
                        desc.pattern_head_first, desc.pattern_head_first + info.width[i] / plan->pattern_n_keys - 1, plan->pattern_key_first,
                        plan->pattern_key_first + plan->pattern_n_keys - 1);
            else
                fprintf(index, "%u]", info.width[i]);
            fprintf(index, ", \"dtype\": \"%s\"}", forge_capture_dtype_name(desc.capture_dtype));
        }
        fprintf(index, "\n]}\n");
    }
    if (fclose(index) != 0) {
        index = NULL;
        fprintf(stderr, "forge extract: cannot write the index\n");
        goto done;
    }
    index = NULL;
    fprintf(stderr, "forge extract: %llu tokens, %u captures, chunks of %u, %.2f s (%.1f tokens/s), written to %s\n",
            (unsigned long long)n_ids, n_captures, forge_context_plan(ctx)->n_batch, seconds,
            seconds > 0 ? (double)n_ids / seconds : 0.0, out_dir);
    status = 0;
done:
    for (i = 0; i < st.n_files; i++)
        if (st.files[i]) fclose(st.files[i]);
    if (index) fclose(index);
    forge_context_destroy(ctx);
    forge_tokenizer_destroy(tok);
    forge_model_close(model);
    free(captures);
    free(ids);
    free(text);
    return status;
}
