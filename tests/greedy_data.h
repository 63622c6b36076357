/* The greedy-continuation data files of tests/data (<model>_greedy.txt): '#' comments and blank
   lines, then per prompt the lines prompt: (C escapes), prompt_ids:, greedy_ids: and agree:, in that
   order. Read by test_smollm2.c and test_greedy.c; include after test.h (CHECK). */
#ifndef FORGE_TESTS_GREEDY_DATA_H
#define FORGE_TESTS_GREEDY_DATA_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GREEDY_MAX_CASES 64
#define GREEDY_MAX_IDS 512
#define GREEDY_MAX_TEXT 2048

typedef struct greedy_case {
    char prompt[GREEDY_MAX_TEXT];
    size_t prompt_len;
    int32_t prompt_ids[GREEDY_MAX_IDS];
    size_t n_prompt_ids;
    int32_t greedy_ids[GREEDY_MAX_IDS];
    size_t n_greedy_ids;
    long agree; /* the file's agree: line, -1 when absent */
    int line;
} greedy_case;

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int hex_value(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The prompt line's C escapes (\\ \" \n \t \r \xHH) into out; 0 on a bad escape or no room. */
static int read_escaped(const char *s, char *out, size_t capacity, size_t *len) {
    size_t n = 0;
    while (*s) {
        int c = (unsigned char)*s++;
        if (c == '\\') {
            int e = (unsigned char)*s++;
            switch (e) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case '\\': case '"': c = e; break;
            case 'x':
                if (hex_value(s[0]) < 0 || hex_value(s[1]) < 0) return 0;
                c = hex_value(s[0]) * 16 + hex_value(s[1]);
                s += 2;
                break;
            default: return 0;
            }
        }
        if (n + 1 >= capacity) return 0;
        out[n++] = (char)c;
    }
    out[n] = 0;
    *len = n;
    return 1;
}

/* Space-separated non-negative token ids; 0 on anything else or more than capacity. */
static int read_ids(const char *s, int32_t *ids, size_t capacity, size_t *n) {
    *n = 0;
    for (;;) {
        char *end;
        long v;
        while (*s == ' ' || *s == '\t') s++;
        if (!*s) return 1;
        v = strtol(s, &end, 10);
        if (end == s || v < 0 || v > INT32_MAX || *n >= capacity) return 0;
        ids[(*n)++] = (int32_t)v;
        s = end;
    }
}

/* Returns the number of prompts read, or -1 after a failed check. */
static int read_cases(const char *path, greedy_case *cases, int max_cases) {
    FILE *f = fopen(path, "rb");
    static char line[16384];
    int n = 0, line_no = 0, ok = 1;
    if (!CHECK(f != NULL, "cannot open the data file %s", path)) return -1;
    while (ok && fgets(line, sizeof line, f)) {
        size_t len = strlen(line);
        greedy_case *c = n > 0 ? &cases[n - 1] : NULL;
        line_no++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (len == 0 || line[0] == '#') continue;
        if (strncmp(line, "prompt: ", 8) == 0) {
            if (!(ok = CHECK(n < max_cases, "%s:%d: more than %d prompts", path, line_no, max_cases))) break;
            c = &cases[n++];
            memset(c, 0, sizeof *c);
            c->agree = -1;
            c->line = line_no;
            ok = CHECK(read_escaped(line + 8, c->prompt, sizeof c->prompt, &c->prompt_len),
                       "%s:%d: bad escape or prompt too long", path, line_no);
        } else if (strncmp(line, "prompt_ids:", 11) == 0) {
            ok = CHECK(c != NULL && read_ids(line + 11, c->prompt_ids, GREEDY_MAX_IDS, &c->n_prompt_ids) &&
                           c->n_prompt_ids > 0,
                       "%s:%d: bad prompt_ids line", path, line_no);
        } else if (strncmp(line, "greedy_ids:", 11) == 0) {
            ok = CHECK(c != NULL && read_ids(line + 11, c->greedy_ids, GREEDY_MAX_IDS, &c->n_greedy_ids) &&
                           c->n_greedy_ids > 0,
                       "%s:%d: bad greedy_ids line", path, line_no);
        } else if (strncmp(line, "agree:", 6) == 0) {
            ok = CHECK(c != NULL, "%s:%d: agree before any prompt", path, line_no);
            if (ok) c->agree = strtol(line + 6, NULL, 10);
        } else {
            ok = CHECK(0, "%s:%d: unknown line '%.60s'", path, line_no, line);
        }
    }
    if (f) fclose(f);
    return ok ? n : -1;
}

#endif
