/* Tests of the tokenizer.

   1. llama.cpp's own test vectors: for every vocabulary in FIXTURES/tokenizer/ (FORGE_FIXTURES, default
      ../shared/fixtures), every string of NAME.gguf.inp must tokenize (no BOS, no special parsing) to
      exactly the ids of line i of NAME.gguf.out, and detokenize back to exactly the string. Every string
      of every vocabulary there round-trips exactly, so no exception list is needed: SPM's added space
      prefix is removed by forge_detokenize, and characters without a token come back from byte tokens.
      300 random byte strings per vocabulary (invalid UTF-8 included, bytes the vocabulary can spell)
      must round-trip exactly as well.
   2. SmolLM2's real vocabulary (smollm pre-tokenizer) against Hugging Face `tokenizers` 0.23.3, built
      from the GGUF's own vocabulary and merges with SmolLM2's pre-tokenizer (Digits(individual_digits)
      + ByteLevel(add_prefix_space=False)) in Python (see the comment above smol_cases). The
      model file is FORGE_SMOLLM2, else ~/.cache/forge/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf; a
      missing model is a failure (`make test` fetches it first).
   3. Special tokens, capacity handling, the streaming detokenizer, hostile vocabularies built in
      memory, allocation failures. */
#define FORGE_IMPLEMENTATION
#include "../forge.h"
#include "gguf_writer.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>


static char *read_all(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return NULL;
    }
    buf = (char *)malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[n] = 0;
    *size = (size_t)n;
    return buf;
}

typedef struct loaded {
    forge_file file;
    forge_gguf *gguf;
    forge_tokenizer *tok;
} loaded;

static int load(const char *path, loaded *l) {
    forge_error e;
    memset(l, 0, sizeof *l);
    if (forge_file_open(path, NULL, &l->file, &e)) {
        printf("cannot open %s: %s\n", path, e.message);
        return 0;
    }
    if (forge_gguf_parse(l->file.bytes, (size_t)l->file.size, NULL, &l->gguf, &e) ||
        forge_tokenizer_create(l->gguf, NULL, &l->tok, &e)) {
        printf("%s: %s\n", path, e.message);
        return 0;
    }
    return 1;
}

static void unload(loaded *l) {
    forge_tokenizer_destroy(l->tok);
    forge_gguf_free(l->gguf);
    if (l->file.bytes) forge_file_close(&l->file);
}

static void print_ids(const char *label, const int32_t *ids, size_t n) {
    size_t i;
    printf("  %s:", label);
    for (i = 0; i < n && i < 64; i++) printf(" %ld", (long)ids[i]);
    printf("\n");
}

#define MAX_IDS 4096

/* part 1 */
static void test_vocab(const char *dir, const char *name) {
    char path[1024], *inp, *outs, *s, *line;
    size_t inp_size, out_size, n_strings = 0;
    int passed = 0, failed = 0, rt_failed = 0;
    loaded l;
    static int32_t ids[MAX_IDS], expected[MAX_IDS];
    static char text[65536];
    const char *sep = "\n__ggml_vocab_test__\n";

    TEST_CASE(name);
    snprintf(path, sizeof path, "%s/tokenizer/%s.gguf", dir, name);
    if (!CHECK(load(path, &l), "%s does not load", path)) {
        unload(&l);
        return;
    }
    snprintf(path, sizeof path, "%s/tokenizer/%s.gguf.inp", dir, name);
    inp = read_all(path, &inp_size);
    snprintf(path, sizeof path, "%s/tokenizer/%s.gguf.out", dir, name);
    outs = read_all(path, &out_size);
    if (!CHECK(inp && outs, "%s: missing .inp or .out", name)) {
        free(inp);
        free(outs);
        unload(&l);
        return;
    }
    s = inp;
    line = outs;
    for (;;) {
        char *end = strstr(s, sep), *eol, *p;
        size_t len, n = 0, n_expected = 0, n_text = 0;
        forge_error e;
        forge_result r;
        int same;
        if (!end) break; /* the piece after the last separator is empty */
        len = (size_t)(end - s);
        eol = strchr(line, '\n');
        if (!CHECK(eol != NULL, "%s: .out has fewer lines than .inp has strings (%u)", name, (unsigned)n_strings)) break;
        *eol = 0;
        for (p = line; *p;) {
            char *next;
            long v = strtol(p, &next, 10);
            if (next == p) break;
            if (n_expected < MAX_IDS) expected[n_expected++] = (int32_t)v;
            p = next;
        }
        r = forge_tokenize(l.tok, s, len, 0, 0, ids, MAX_IDS, &n, &e);
        same = r == FORGE_OK && n == n_expected && memcmp(ids, expected, n * sizeof ids[0]) == 0;
        if (same) passed++;
        else {
            failed++;
            printf("FAIL %s string %u '%.*s' (%s)\n", name, (unsigned)n_strings, (int)len, s, r ? e.message : "ids differ");
            print_ids("expected", expected, n_expected);
            print_ids("got     ", ids, n);
        }
        CHECK(same, "%s string %u", name, (unsigned)n_strings);
        if (r == FORGE_OK) {
            r = forge_detokenize(l.tok, ids, n, 0, text, sizeof text, &n_text, &e);
            if (!(r == FORGE_OK && n_text == len && memcmp(text, s, len) == 0)) {
                rt_failed++;
                printf("FAIL %s round trip of string %u '%.*s' gave '%.*s'\n", name, (unsigned)n_strings, (int)len, s,
                       (int)n_text, text);
            }
            CHECK(r == FORGE_OK && n_text == len && memcmp(text, s, len) == 0, "%s round trip %u", name,
                  (unsigned)n_strings);
        }
        n_strings++;
        s = end + strlen(sep);
        line = eol + 1;
    }
    CHECK(n_strings > 10, "%s: only %u strings", name, (unsigned)n_strings);
    { /* random bytes (invalid UTF-8 included) round-trip exactly too, drawn from the bytes the
         vocabulary can spell (a byte that comes back as itself when tokenized alone) */
        uint32_t seed = 12345u, k, j;
        int rt_random_failed = 0, n_ok = 0;
        unsigned char ok_bytes[256];
        for (k = 0; k < 256; k++) {
            char one = (char)k;
            size_t n = 0, n_text = 0;
            if (forge_tokenize(l.tok, &one, 1, 0, 0, ids, MAX_IDS, &n, NULL) == FORGE_OK && n > 0 &&
                forge_detokenize(l.tok, ids, n, 0, text, sizeof text, &n_text, NULL) == FORGE_OK && n_text == 1 &&
                text[0] == one)
                ok_bytes[n_ok++] = (unsigned char)k;
        }
        printf("%s: %d of 256 bytes have a token\n", name, n_ok);
        CHECK(n_ok >= 128, "%s: only %d bytes have tokens", name, n_ok);
        for (k = 0; k < 300; k++) {
            char in[96];
            size_t len, n = 0, n_text = 0;
            forge_error e;
            forge_result r;
            seed = seed * 1103515245u + 12345u;
            len = (seed >> 16) % sizeof in;
            for (j = 0; j < len; j++) {
                seed = seed * 1103515245u + 12345u;
                in[j] = (char)((seed >> 16) & 1 ? " aZ9'\n\t.,<|>"[(seed >> 17) % 13] : ok_bytes[(seed >> 20) % n_ok]);
            }
            r = forge_tokenize(l.tok, in, len, 0, 0, ids, MAX_IDS, &n, &e);
            if (r == FORGE_OK) r = forge_detokenize(l.tok, ids, n, 0, text, sizeof text, &n_text, &e);
            if (r != FORGE_OK || n_text != len || memcmp(text, in, len) != 0) {
                if (!rt_random_failed++) {
                    printf("%s: random string %u does not round-trip:", name, (unsigned)k);
                    for (j = 0; j < len; j++) printf(" %02x", (unsigned)(unsigned char)in[j]);
                    printf("\n");
                }
            }
        }
        CHECK(rt_random_failed == 0, "%s: %d of 300 random byte strings do not round-trip", name, rt_random_failed);
    }
    printf("%s: %d of %u strings match llama.cpp, %d failed; %u round trips exact, %d not\n", name, passed,
           (unsigned)n_strings, failed, (unsigned)n_strings - rt_failed, rt_failed);
    free(inp);
    free(outs);
    unload(&l);
}

/* part 2: ids from Hugging Face tokenizers 0.23.3 (Python 3.11), computed as
       vocab, merges = the GGUF's tokenizer.ggml.tokens / .merges
       tk = Tokenizer(models.BPE(vocab, merges)); tk.pre_tokenizer = Sequence([Digits(individual_digits=True),
            ByteLevel(add_prefix_space=False, use_regex=True)]); control tokens added as special AddedTokens
       tk.encode(s, add_special_tokens=False).ids
   (transformers' own GGUF loader needs torch, which was not installable here). Hugging Face matches
   added tokens in any text, so strings with "<|" are compared with parse_special = 1. */
typedef struct smol_case {
    const char *text;
    int32_t ids[40];
    int n;
} smol_case;

static const smol_case smol_cases[] = {
    {"Hello world",
     {19556, 905}, 2},
    {" Hello world",
     {38699, 905}, 2},
    {"Hello, world! How are you today?",
     {19556, 28, 905, 17, 1073, 359, 346, 1834, 47}, 9},
    {"The quick brown fox jumps over the lazy dog.",
     {504, 2365, 6354, 16438, 27003, 690, 260, 23790, 2767, 30}, 10},
    {"I'm sure it's what they've said, and we'll see; you'd know.",
     {57, 5248, 2090, 357, 506, 732, 502, 3543, 1137, 28, 284, 392, 3060, 963, 43, 346, 6737, 699, 30}, 19},
    {"Numbers: 1234567890 and 3.14159, 42nd, 1,000,000",
     {39006, 42, 216, 33, 34, 35, 36, 37, 38, 39, 40, 41, 32, 284, 216, 35, 30, 33, 36, 33, 37, 41, 28, 216, 36, 34, 268, 28, 216, 33, 28, 32, 32, 32, 28, 32, 32, 32}, 38},
    {"   leading and trailing spaces   ",
     {256, 2899, 284, 35079, 5600, 333}, 6},
    {"tabs\tand\nnewlines\n\n\nend",
     {100, 7366, 197, 397, 198, 2241, 5110, 1116, 198, 486}, 10},
    {"\xC3\x84pfel, na\xC3\xAFve caf\xC3\xA9, fa\xC3\xA7\x61\x64\x65, Stra\xC3\x9F\x65",
     {142, 222, 96, 34520, 28, 15486, 46494, 37366, 28, 40852, 28, 19144, 34878, 85}, 14},
    {"\xD0\xBD\xD0\xB5\xD1\x89\xD0\xBE \xD0\xBD\xD0\xB0 \xD0\x91\xD1\x8A\xD0\xBB\xD0\xB3\xD0\xB0\xD1\x80\xD1\x81\xD0\xBA\xD0\xB8",
     {8831, 6643, 46438, 6485, 40610, 5470, 235, 156, 228, 12681, 29441, 6511, 9175, 39511, 7872}, 15},
    {"\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9\xE3\x83\x88\xE3\x81\xA8\xE4\xB8\xAD\xE6\x96\x87\xE5\xAD\x97\xE7\xAC\xA6",
     {23274, 115, 40993, 179, 120, 248, 26453, 11100, 224, 10391, 251, 10391, 134, 11100, 226, 7365, 118, 28589, 29184, 36518, 40562, 116}, 22},
    {"emoji \xF0\x9F\xA6\x99\xF0\x9F\x94\xA5 and \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 family",
     {391, 33777, 15107, 116, 243, 10813, 238, 115, 284, 15107, 235, 118, 321, 231, 10813, 235, 119, 321, 231, 10813, 235, 117, 1564}, 23},
    {"def add(a, b):\n    return a + b  # sum\n",
     {1604, 803, 24, 81, 28, 278, 727, 472, 1003, 253, 1232, 278, 216, 907, 2028, 198}, 16},
    {"<|im_start|>user\nHi<|im_end|>",
     {1, 4093, 198, 26843, 2}, 5},
    {"x = {'key': [1, 2, 3]}; y = x['key'][0] ** 2",
     {104, 446, 7353, 2393, 1539, 933, 33, 28, 216, 34, 28, 216, 35, 28852, 43, 329, 446, 1792, 1601, 2393, 13237, 32, 77, 1903, 216, 34}, 26},
    {"SmolLM2 is a family of compact language models.",
     {9207, 308, 34519, 34, 314, 253, 1564, 282, 12633, 1789, 2859, 30}, 12},
    {"\xC3\x9Cn\xC3\xAF\x63\xC3\xB6\x64\xC3\xA9 \xE2\x80\x94 dashes \xE2\x80\x93 and \xE2\x80\x9Cquotes\xE2\x80\x9D \xE2\x80\x98here\xE2\x80\x99\xE2\x80\xA6",
     {142, 246, 94, 25972, 83, 7466, 84, 2756, 1841, 287, 9604, 816, 284, 619, 385, 2346, 573, 1551, 1531, 417, 2829}, 21},
    {"ab  cd   ef\t\tgh \n ij",
     {369, 216, 42038, 256, 297, 86, 197, 197, 460, 3717, 2056, 90}, 12},
    {"",
     {0}, 0},
    {" ",
     {216}, 1},
    {"\n",
     {198}, 1},
    {"I'M DON'T 'S 've",
     {57, 23, 61, 422, 2154, 23, 68, 637, 67, 637, 307}, 11},
    {"a\xC2\xA0\x62\xE2\x80\x83\x63\xE3\x80\x80\x64",
     {81, 15442, 82, 321, 221, 83, 12109, 218, 84}, 9},
};

static void test_smollm2(void) {
    const char *path = getenv("FORGE_SMOLLM2");
    char fallback[1024];
    loaded l;
    size_t i;
    FILE *f;
    TEST_CASE("smollm2");
    if (!path || !*path) {
        const char *home = getenv("HOME");
        snprintf(fallback, sizeof fallback, "%s/.cache/forge/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", home ? home : "");
        path = fallback;
    }
    f = fopen(path, "rb");
    if (!CHECK(f != NULL, "%s not found (set FORGE_SMOLLM2, or run tools/fetch_model.sh smollm2)", path)) return;
    fclose(f);
    if (!CHECK(load(path, &l), "%s does not load", path)) {
        unload(&l);
        return;
    }
    CHECK(strcmp(forge_tokenizer_pre_name(l.tok), "smollm") == 0, "pre %s", forge_tokenizer_pre_name(l.tok));
    CHECK(forge_tokenizer_eos(l.tok) == 2 && forge_tokenizer_bos(l.tok) == 1 && forge_tokenizer_add_bos(l.tok) == 0,
          "eos %ld bos %ld", (long)forge_tokenizer_eos(l.tok), (long)forge_tokenizer_bos(l.tok));
    for (i = 0; i < sizeof smol_cases / sizeof smol_cases[0]; i++) {
        const smol_case *c = &smol_cases[i];
        int32_t ids[256];
        char text[1024];
        size_t n = 0, n_text = 0, len = strlen(c->text);
        int special = strstr(c->text, "<|") != NULL;
        forge_error e;
        forge_result r = forge_tokenize(l.tok, c->text, len, 0, special, ids, 256, &n, &e);
        int same = r == FORGE_OK && n == (size_t)c->n && memcmp(ids, c->ids, n * sizeof ids[0]) == 0;
        if (!same) {
            printf("FAIL smollm2 '%s' (%s)\n", c->text, r ? e.message : "ids differ");
            print_ids("expected", c->ids, (size_t)c->n);
            print_ids("got     ", ids, n);
        }
        CHECK(same, "smollm2 case %u", (unsigned)i);
        r = forge_detokenize(l.tok, ids, n, special, text, sizeof text, &n_text, &e);
        CHECK(r == FORGE_OK && n_text == len && memcmp(text, c->text, len) == 0, "smollm2 round trip %u: '%.*s'",
              (unsigned)i, (int)n_text, text);
    }
    unload(&l);
}

/* part 3 */
static int valid_utf8(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        size_t len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0, k;
        if (!len || i + len > n) return 0;
        for (k = 1; k < len; k++)
            if (((unsigned char)s[i + k] & 0xC0) != 0x80) return 0;
        i += len;
    }
    return 1;
}

static void test_gpt2_behaviour(const char *dir) {
    char path[1024];
    loaded l;
    int32_t ids[64];
    size_t n = 0, i, n_out, total = 0;
    forge_error e;
    forge_result r;
    forge_detokenizer d;
    char out[256], joined[256];
    const char *emoji = "a \xF0\x9F\xA6\x99\xF0\x9F\x94\xA5 b"; /* llama and fire emoji */
    int partial_seen = 0;
    TEST_CASE("gpt-2 behaviour");
    snprintf(path, sizeof path, "%s/tokenizer/ggml-vocab-gpt-2.gguf", dir);
    if (!CHECK(load(path, &l), "%s", path)) {
        unload(&l);
        return;
    }
    /* special tokens */
    r = forge_tokenize(l.tok, "x<|endoftext|>y", 15, 0, 1, ids, 64, &n, &e);
    CHECK(r == FORGE_OK && n == 3 && ids[1] == 50256, "parse_special: n %u", (unsigned)n);
    r = forge_tokenize(l.tok, "x<|endoftext|>y", 15, 0, 0, ids, 64, &n, &e);
    CHECK(r == FORGE_OK && n > 3, "plain text: n %u", (unsigned)n);
    for (i = 0; i < n; i++) CHECK(ids[i] != 50256, "plain text gave the special id at %u", (unsigned)i);
    r = forge_tokenize(l.tok, "hi", 2, 1, 0, ids, 64, &n, &e);
    CHECK(r == FORGE_OK && n == 2 && ids[0] == 50256, "add_bos: n %u first %ld", (unsigned)n, (long)ids[0]);
    CHECK(forge_tokenizer_is_eog(l.tok, 50256) && !forge_tokenizer_is_eog(l.tok, 0), "eog");
    /* capacity */
    r = forge_tokenize(l.tok, "Hello world, again and again", 28, 0, 0, NULL, 0, &n, &e);
    CHECK(r == FORGE_ERR_LIMIT && n == 6, "size query: %s n %u", forge_result_name(r), (unsigned)n);
    r = forge_tokenize(l.tok, "Hello world, again and again", 28, 0, 0, ids, 2, &n, &e);
    CHECK(r == FORGE_ERR_LIMIT && n == 6 && ids[0] == 15496 && strstr(e.message, "6") != NULL, "short: %s", e.message);
    /* pieces */
    {
        const char *p;
        size_t len;
        r = forge_token_to_piece(l.tok, 50256, 0, &p, &len, &e);
        CHECK(r == FORGE_OK && len == 0, "control piece without special: %u bytes", (unsigned)len);
        r = forge_token_to_piece(l.tok, 50256, 1, &p, &len, &e);
        CHECK(r == FORGE_OK && len == 13 && memcmp(p, "<|endoftext|>", 13) == 0, "control piece with special");
        r = forge_token_to_piece(l.tok, 50257, 0, &p, &len, &e);
        CHECK(r == FORGE_ERR_ARGUMENT, "id out of range: %s", forge_result_name(r));
        r = forge_token_to_piece(l.tok, 220, 0, &p, &len, &e);
        CHECK(r == FORGE_OK && len == 1 && p[0] == ' ', "token 220 is a space");
    }
    /* streaming: the emoji come as several byte-level tokens; no output may end inside a character */
    r = forge_tokenize(l.tok, emoji, strlen(emoji), 0, 0, ids, 64, &n, &e);
    CHECK(r == FORGE_OK && n > 4, "emoji tokens: %u", (unsigned)n);
    forge_detokenizer_init(&d, l.tok, 0);
    for (i = 0; i < n; i++) {
        const char *p;
        size_t len;
        forge_token_to_piece(l.tok, ids[i], 0, &p, &len, NULL);
        if (!valid_utf8(p, len)) partial_seen = 1;
        r = forge_detokenizer_push(&d, ids[i], out, sizeof out, &n_out, &e);
        CHECK(r == FORGE_OK && valid_utf8(out, n_out), "push %u gave partial UTF-8 (%u bytes)", (unsigned)i,
              (unsigned)n_out);
        memcpy(joined + total, out, n_out);
        total += n_out;
    }
    CHECK(partial_seen, "the emoji did not split across tokens: the test proves nothing");
    r = forge_detokenizer_flush(&d, out, sizeof out, &n_out, &e);
    CHECK(r == FORGE_OK && n_out == 0, "flush after complete text: %u", (unsigned)n_out);
    CHECK(total == strlen(emoji) && memcmp(joined, emoji, total) == 0, "streamed text differs");
    /* an incomplete character at the end comes out at flush */
    forge_detokenizer_init(&d, l.tok, 0);
    r = forge_tokenize(l.tok, "\xF0\x9F\xA6", 3, 0, 0, ids, 64, &n, &e);
    CHECK(r == FORGE_OK && n >= 1, "truncated emoji tokenizes: %s", e.message);
    total = 0;
    for (i = 0; i < n; i++) {
        forge_detokenizer_push(&d, ids[i], out, sizeof out, &n_out, &e);
        total += n_out;
    }
    CHECK(total == 0, "incomplete character emitted early (%u bytes)", (unsigned)total);
    r = forge_detokenizer_flush(&d, out, sizeof out, &n_out, &e);
    CHECK(r == FORGE_OK && n_out == 3 && memcmp(out, "\xF0\x9F\xA6", 3) == 0, "flush gives the held bytes");
    /* invalid UTF-8 is kept byte for byte */
    {
        const char bad[] = "ok\xFF\xC3(\x80 end";
        char back[64];
        size_t nb = 0;
        r = forge_tokenize(l.tok, bad, sizeof bad - 1, 0, 0, ids, 64, &n, &e);
        CHECK(r == FORGE_OK, "invalid UTF-8: %s", e.message);
        r = forge_detokenize(l.tok, ids, n, 0, back, sizeof back, &nb, &e);
        CHECK(r == FORGE_OK && nb == sizeof bad - 1 && memcmp(back, bad, nb) == 0, "invalid UTF-8 round trip");
    }
    /* embedded NUL and empty text */
    r = forge_tokenize(l.tok, "a\0b", 3, 0, 0, ids, 64, &n, &e);
    CHECK(r == FORGE_OK && n == 3, "NUL is a character: n %u", (unsigned)n);
    r = forge_tokenize(l.tok, "", 0, 0, 0, ids, 64, &n, &e);
    CHECK(r == FORGE_OK && n == 0, "empty text");
    unload(&l);
}

static void test_spm_behaviour(const char *dir) {
    char path[1024], out[256];
    loaded l;
    int32_t ids[64];
    size_t n = 0, nb = 0;
    forge_error e;
    forge_result r;
    TEST_CASE("spm behaviour");
    snprintf(path, sizeof path, "%s/tokenizer/ggml-vocab-llama-spm.gguf", dir);
    if (!CHECK(load(path, &l), "%s", path)) {
        unload(&l);
        return;
    }
    CHECK(forge_tokenizer_type(l.tok) == FORGE_VOCAB_SPM && forge_tokenizer_add_bos(l.tok) == 1 &&
              forge_tokenizer_bos(l.tok) == 1 && forge_tokenizer_eos(l.tok) == 2 && forge_tokenizer_unk(l.tok) == 0,
          "ids");
    r = forge_tokenize(l.tok, "<s>Hi</s>", 9, 1, 1, ids, 64, &n, &e);
    CHECK(r == FORGE_OK && n >= 4 && ids[0] == 1 && ids[1] == 1 && ids[n - 1] == 2, "specials parsed: n %u", (unsigned)n);
    r = forge_detokenize(l.tok, ids, n, 1, out, sizeof out, &nb, &e);
    CHECK(r == FORGE_OK && nb == 13 && memcmp(out, "<s><s> Hi</s>", 13) == 0, "detokenize with specials: '%.*s'",
          (int)nb, out);
    r = forge_tokenize(l.tok, "<s>", 3, 0, 0, ids, 64, &n, &e);
    CHECK(r == FORGE_OK && !(n == 1 && ids[0] == 1), "control text without parse_special is plain text");
    /* byte fallback: a private-use character has no token of its own */
    r = forge_tokenize(l.tok, "\xEE\x80\x80", 3, 0, 0, ids, 64, &n, &e);
    CHECK(r == FORGE_OK && n == 4 && ids[1] == 3 + 0xEE && ids[2] == 3 + 0x80, "byte fallback: n %u", (unsigned)n);
    unload(&l);
}

/* vocabularies built in memory */
static void build_vocab(gw_buffer *b, const char *model, const char *pre, const char *const *tokens, uint32_t n_tokens,
                        const int32_t *types, const char *const *merges, uint32_t n_merges) {
    uint64_t n_kv = 1 + (pre != NULL) + (tokens != NULL) + (types != NULL) + (merges != NULL);
    gw_init(b);
    gw_header(b, 3, 0, n_kv);
    gw_kv_str(b, "tokenizer.ggml.model", model);
    if (pre) gw_kv_str(b, "tokenizer.ggml.pre", pre);
    if (tokens) gw_kv_array_str(b, "tokenizer.ggml.tokens", tokens, n_tokens);
    if (types) gw_kv_array(b, "tokenizer.ggml.token_type", GW_I32, types, n_tokens);
    if (merges) gw_kv_array_str(b, "tokenizer.ggml.merges", merges, n_merges);
    gw_pad(b, 32);
}

static forge_result create_from(gw_buffer *b, const forge_allocator *a, forge_tokenizer **tok, forge_gguf **g,
                                forge_error *e) {
    forge_result r = forge_gguf_parse(b->bytes, b->size, NULL, g, e);
    *tok = NULL;
    if (r) return r;
    return forge_tokenizer_create(*g, a, tok, e);
}

static void test_hostile(void) {
    static const char *const toks[] = {"a", "b", "ab", "ab", "\xFF\xFE", "c", "<x>", "abc", "\xC4\xA0"};
    static const int32_t types[] = {1, 1, 1, 1, 1, 1, 4, 1, 1};
    static const char *const merges[] = {"a b", "ab c", "nospace", "a b", " x", "", "\xFF \xFE"};
    gw_buffer b;
    forge_gguf *g = NULL;
    forge_tokenizer *tok = NULL;
    forge_error e;
    forge_result r;
    int32_t ids[64];
    size_t n = 0;
    long k;
    TEST_CASE("hostile vocabularies");

    build_vocab(&b, "gpt2", "no-such-pre", toks, 9, types, merges, 7);
    r = create_from(&b, NULL, &tok, &g, &e);
    CHECK(r == FORGE_ERR_UNSUPPORTED && strstr(e.message, "no-such-pre") != NULL, "unknown pre: %s", e.message);
    forge_tokenizer_destroy(tok);
    forge_gguf_free(g);
    gw_free(&b);

    build_vocab(&b, "bert", NULL, toks, 9, NULL, NULL, 0);
    r = create_from(&b, NULL, &tok, &g, &e);
    CHECK(r == FORGE_ERR_UNSUPPORTED && strstr(e.message, "bert") != NULL, "bert: %s", e.message);
    forge_gguf_free(g);
    gw_free(&b);

    build_vocab(&b, "gpt2", NULL, NULL, 0, NULL, NULL, 0);
    r = create_from(&b, NULL, &tok, &g, &e);
    CHECK(r == FORGE_ERR_MISSING_KEY, "no tokens: %s", forge_result_name(r));
    forge_gguf_free(g);
    gw_free(&b);

    /* duplicates (the later id wins), invalid UTF-8 tokens, malformed merges: tolerated */
    build_vocab(&b, "gpt2", "gpt-2", toks, 9, types, merges, 7);
    r = create_from(&b, NULL, &tok, &g, &e);
    CHECK(r == FORGE_OK, "hostile but usable vocabulary: %s", e.message);
    if (r == FORGE_OK) {
        r = forge_tokenize(tok, "abc<x>ab", 8, 0, 0, ids, 64, &n, &e);
        CHECK(r == FORGE_OK && n == 3 && ids[0] == 7 && ids[1] == 6 && ids[2] == 3, "n %u: %ld %ld %ld", (unsigned)n,
              (long)ids[0], (long)ids[1], (long)ids[2]);
        r = forge_tokenize(tok, "zz", 2, 0, 0, ids, 64, &n, &e);
        CHECK(r == FORGE_OK && n == 0, "BPE drops bytes without tokens when there is no unknown token: %u",
              (unsigned)n);
        r = forge_tokenize(tok, "ab", 2, 1, 0, ids, 64, &n, &e);
        CHECK(r == FORGE_ERR_ARGUMENT, "add_bos without BOS: %s", forge_result_name(r));
    }
    forge_tokenizer_destroy(tok);
    forge_gguf_free(g);

    /* every allocation failure is reported and leaks nothing */
    for (k = 0; k < 40; k++) {
        test_counting c;
        forge_allocator a;
        test_counting_init(&c, k);
        a.alloc = test_counting_alloc;
        a.free = test_counting_free;
        a.user_data = &c;
        g = NULL;
        r = forge_gguf_parse(b.bytes, b.size, NULL, &g, &e);
        if (r) break;
        r = forge_tokenizer_create(g, &a, &tok, &e);
        if (r == FORGE_OK) {
            forge_result r2 = forge_tokenize(tok, "abcabc", 6, 0, 0, ids, 64, &n, &e);
            CHECK(r2 == FORGE_OK || r2 == FORGE_ERR_HOST_MEMORY, "tokenize under failure: %s", forge_result_name(r2));
            forge_tokenizer_destroy(tok);
        } else
            CHECK(r == FORGE_ERR_HOST_MEMORY, "failure %ld gave %s", k, forge_result_name(r));
        forge_gguf_free(g);
        CHECK(c.allocs == c.frees, "failure at %ld: %ld allocations, %ld frees", k, c.allocs, c.frees);
        if (r == FORGE_OK && c.fail_after > c.allocs) break;
    }
    gw_free(&b);
}

int main(void) {
    static const char *const vocabs[] = {"ggml-vocab-llama-spm", "ggml-vocab-phi-3",       "ggml-vocab-gpt-2",
                                         "ggml-vocab-deepseek-coder", "ggml-vocab-deepseek-llm", "ggml-vocab-starcoder",
                                         "ggml-vocab-falcon"};
    const char *dir = getenv("FORGE_FIXTURES");
    size_t i;
    if (!dir || !*dir) dir = "../shared/fixtures";
    for (i = 0; i < sizeof vocabs / sizeof vocabs[0]; i++) test_vocab(dir, vocabs[i]);
    test_smollm2();
    test_gpt2_behaviour(dir);
    test_spm_behaviour(dir);
    test_hostile();
    return test_summary();
}
