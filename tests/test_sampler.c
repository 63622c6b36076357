/* Tests of the token sampler: greedy decoding, reproducibility from the seed, and the
   distribution after each filter. The statistical checks draw N tokens from fixed logits and
   require every token's count to lie within 5 standard deviations of its expected count
   N*p (sigma = sqrt(N*p*(1-p))); a token the filters must remove has to be drawn exactly 0 times.
   Seeds are fixed, so every run is the same run: a failure is a real one. */
#define FORGE_IMPLEMENTATION
#include "../forge.h"
#include "test.h"

#include <math.h>
#include <string.h>

#define DRAWS 200000
#define MAX_VOCAB 16


static forge_sampler_desc counted_desc(test_counting *c) {
    forge_sampler_desc d;
    memset(&d, 0, sizeof d);
    test_counting_init(c, -1);
    d.allocator.alloc = test_counting_alloc;
    d.allocator.free = test_counting_free;
    d.allocator.user_data = c;
    return d;
}

/* softmax(logits / temperature) in double */
static void softmax(const float *logits, int n, double temperature, double *p) {
    double max = logits[0], sum = 0.0;
    int i;
    for (i = 1; i < n; i++) max = logits[i] > max ? logits[i] : max;
    for (i = 0; i < n; i++) sum += p[i] = exp((logits[i] - max) / temperature);
    for (i = 0; i < n; i++) p[i] /= sum;
}

/* Draws DRAWS tokens and compares the counts with expected (probabilities summing to 1).
   Returns the largest deviation in sigmas; a token with p == 0 that is drawn counts as 1e9. */
static double draw_and_compare(forge_sampler *s, const float *logits, int n, const double *expected, long *counts) {
    int i;
    long d;
    double worst = 0.0;
    for (i = 0; i < n; i++) counts[i] = 0;
    for (d = 0; d < DRAWS; d++) {
        int32_t token = -1;
        if (forge_sampler_sample(s, logits, &token, NULL) != FORGE_OK || token < 0 || token >= n) return 1e9;
        counts[token]++;
    }
    for (i = 0; i < n; i++) {
        double mean = DRAWS * expected[i], sigma = sqrt(DRAWS * expected[i] * (1.0 - expected[i])), z;
        if (expected[i] == 0.0) z = counts[i] ? 1e9 : 0.0;
        else z = fabs(counts[i] - mean) / (sigma > 0 ? sigma : 1.0);
        if (z > worst) worst = z;
    }
    return worst;
}

static forge_sampler *make(const forge_sampler_desc *d, uint32_t n_vocab) {
    forge_sampler *s = NULL;
    forge_error e;
    forge_result r = forge_sampler_create(d, n_vocab, &s, &e);
    CHECK(r == FORGE_OK && s != NULL, "create: %s %s", forge_result_name(r), r ? e.message : "");
    return s;
}

static void test_greedy(void) {
    static const float logits[6] = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f, -INFINITY};
    static const float masked[4] = {-INFINITY, -INFINITY, -5.0f, -INFINITY};
    forge_sampler *s;
    int32_t token = -1;
    int i, same = 1;
    TEST_CASE("greedy");
    s = make(NULL, 6); /* NULL desc: greedy */
    if (!s) return;
    CHECK(forge_sampler_sample(s, logits, &token, NULL) == FORGE_OK && token == 1, "argmax with a tie at 1 and 3: %d",
          (int)token);
    for (i = 0; i < 100; i++) same &= forge_sampler_sample(s, logits, &token, NULL) == FORGE_OK && token == 1;
    CHECK(same, "greedy is the same every time");
    forge_sampler_destroy(s);

    s = make(NULL, 4);
    if (!s) return;
    CHECK(forge_sampler_sample(s, masked, &token, NULL) == FORGE_OK && token == 2, "the one unmasked token: %d", (int)token);
    {
        static const float none[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
        forge_error e;
        CHECK(forge_sampler_sample(s, none, &token, &e) == FORGE_ERR_ARGUMENT && token == -1 &&
                  strstr(e.message, "all 4 logits are -inf"),
              "greedy, all masked: '%s'", e.message);
    }
    forge_sampler_destroy(s);
    {
        forge_sampler_desc d;
        memset(&d, 0, sizeof d);
        d.temperature = 1.0f;
        d.repeat_penalty = 1.5f;
        s = make(&d, 4);
        if (!s) return;
        forge_sampler_accept(s, 0);
        for (i = 0; i < 100; i++) same &= forge_sampler_sample(s, masked, &token, NULL) == FORGE_OK && token == 2;
        CHECK(same, "sampling never draws a masked token, penalized or not");
        forge_sampler_destroy(s);
    }
}

static void fill_logits(float *logits, int n, uint32_t seed) {
    int i;
    for (i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        logits[i] = (float)(seed >> 8) / (float)(1u << 24) * 8.0f - 4.0f;
    }
}

static void test_seed(void) {
    enum { N_VOCAB = 1000, STEPS = 200 };
    static float logits[N_VOCAB];
    int32_t a[STEPS], b[STEPS], c[STEPS];
    forge_sampler_desc d;
    forge_sampler *s1, *s2, *s3;
    int i, equal_ab = 1, equal_ac = 1, after_reset = 1;
    TEST_CASE("seed");
    fill_logits(logits, N_VOCAB, 7);
    memset(&d, 0, sizeof d);
    d.temperature = 1.0f;
    d.top_k = 50;
    d.top_p = 0.95f;
    d.seed = 1234;
    s1 = make(&d, N_VOCAB);
    s2 = make(&d, N_VOCAB);
    d.seed = 1235;
    s3 = make(&d, N_VOCAB);
    if (!s1 || !s2 || !s3) return;
    for (i = 0; i < STEPS; i++) {
        forge_sampler_sample(s1, logits, &a[i], NULL);
        forge_sampler_sample(s2, logits, &b[i], NULL);
        forge_sampler_sample(s3, logits, &c[i], NULL);
        equal_ab &= a[i] == b[i];
        equal_ac &= a[i] == c[i];
    }
    CHECK(equal_ab, "same seed, same sequence");
    CHECK(!equal_ac, "different seed, different sequence");
    forge_sampler_reset(s1);
    for (i = 0; i < STEPS; i++) {
        int32_t t = -1;
        forge_sampler_sample(s1, logits, &t, NULL);
        after_reset &= t == a[i];
    }
    CHECK(after_reset, "reset replays the sequence");
    forge_sampler_destroy(s1);
    forge_sampler_destroy(s2);
    forge_sampler_destroy(s3);
}

static void test_temperature(void) {
    static const float logits[5] = {1.0f, 2.0f, 0.0f, -1.0f, 1.5f};
    double expected[MAX_VOCAB], z;
    long counts[MAX_VOCAB];
    forge_sampler_desc d;
    forge_sampler *s;
    static const float temperatures[3] = {1.0f, 0.5f, 2.0f};
    int t;
    TEST_CASE("temperature");
    for (t = 0; t < 3; t++) {
        memset(&d, 0, sizeof d);
        d.temperature = temperatures[t];
        d.seed = 42 + (uint64_t)t;
        s = make(&d, 5);
        if (!s) return;
        softmax(logits, 5, temperatures[t], expected);
        z = draw_and_compare(s, logits, 5, expected, counts);
        CHECK(z < 5.0, "temperature %g: worst deviation %.2f sigma (counts %ld %ld %ld %ld %ld)", (double)temperatures[t], z,
              counts[0], counts[1], counts[2], counts[3], counts[4]);
        forge_sampler_destroy(s);
    }
    /* sharpening: at 0.5 the favourite gets more than at 1 */
    {
        double p1[5], p05[5];
        softmax(logits, 5, 1.0, p1);
        softmax(logits, 5, 0.5, p05);
        CHECK(p05[1] > p1[1], "softmax(l/0.5) is sharper");
    }
    /* a temperature so small that logits / temperature overflow float still works */
    memset(&d, 0, sizeof d);
    d.temperature = 1e-30f;
    s = make(&d, 5);
    if (s) {
        int32_t token = -1;
        CHECK(forge_sampler_sample(s, logits, &token, NULL) == FORGE_OK && token == 1, "tiny temperature: %d", (int)token);
        forge_sampler_destroy(s);
    }
}

static void test_top_k(void) {
    static const float logits[6] = {1.0f, 3.0f, 0.5f, 2.5f, -2.0f, 2.0f};
    double expected[MAX_VOCAB] = {0}, z, e;
    long counts[MAX_VOCAB];
    forge_sampler_desc d;
    forge_sampler *s;
    TEST_CASE("top-k");
    memset(&d, 0, sizeof d);
    d.temperature = 1.0f;
    d.top_k = 2;
    d.seed = 9;
    s = make(&d, 6);
    if (!s) return;
    e = exp(2.5 - 3.0); /* tokens 1 and 3, renormalized */
    expected[1] = 1.0 / (1.0 + e);
    expected[3] = e / (1.0 + e);
    z = draw_and_compare(s, logits, 6, expected, counts);
    CHECK(z < 5.0, "top-2: worst deviation %.2f sigma (counts %ld %ld %ld %ld %ld %ld)", z, counts[0], counts[1], counts[2],
          counts[3], counts[4], counts[5]);
    forge_sampler_destroy(s);

    /* ties at the cut: the lower index is the larger */
    {
        static const float tied[5] = {1.0f, 2.0f, 1.0f, 1.0f, 0.0f};
        d.top_k = 2;
        s = make(&d, 5);
        if (!s) return;
        memset(expected, 0, sizeof expected);
        e = exp(1.0 - 2.0);
        expected[1] = 1.0 / (1.0 + e);
        expected[0] = e / (1.0 + e);
        z = draw_and_compare(s, tied, 5, expected, counts);
        CHECK(z < 5.0, "top-2 with ties keeps token 0: %.2f sigma (counts %ld %ld %ld %ld %ld)", z, counts[0], counts[1],
              counts[2], counts[3], counts[4]);
        forge_sampler_destroy(s);
    }
}

/* top-k against a brute-force answer on a larger vocabulary with many equal logits */
static void test_top_k_selection(void) {
    enum { N_VOCAB = 5000 };
    static float logits[N_VOCAB];
    static const int32_t ks[4] = {1, 7, 100, 4999};
    forge_sampler_desc d;
    int i, j, ki;
    TEST_CASE("top-k selection");
    for (i = 0; i < N_VOCAB; i++) logits[i] = (float)((i * 37) % 101) / 10.0f; /* many ties */
    for (ki = 0; ki < 4; ki++) {
        forge_sampler *s;
        int32_t k = ks[ki];
        int outside = 0, seen_inside = 0;
        /* the kth largest value and how many of that value fit: ids ascending among equals */
        static char allowed[N_VOCAB];
        int remaining = k, value;
        memset(allowed, 0, sizeof allowed);
        for (value = 100; remaining > 0 && value >= 0; value--) {
            for (j = 0; j < N_VOCAB && remaining > 0; j++)
                if ((j * 37) % 101 == value) allowed[j] = 1, remaining--;
        }
        memset(&d, 0, sizeof d);
        d.temperature = 100.0f; /* nearly uniform, so every kept token shows up */
        d.top_k = k;
        d.seed = (uint64_t)k;
        s = make(&d, N_VOCAB);
        if (!s) return;
        for (i = 0; i < 2000; i++) {
            int32_t t = -1;
            forge_sampler_sample(s, logits, &t, NULL);
            if (t < 0 || !allowed[t]) outside++;
            else if (allowed[t] == 1) allowed[t] = 2, seen_inside++;
        }
        CHECK(outside == 0, "top-%d: %d draws outside the top k", (int)k, outside);
        if (k <= 100) CHECK(seen_inside == k, "top-%d: %d of the k tokens seen", (int)k, seen_inside);
        forge_sampler_destroy(s);
    }
}

static void test_top_p(void) {
    /* probabilities 0.4 0.3 0.2 0.1 (logits are their logs), shuffled */
    static const float logits[4] = {-2.302585f, -0.916291f, -1.609438f, -1.203973f}; /* 0.1 0.4 0.2 0.3 */
    static const struct { float p; int kept; } cases[5] = {{0.35f, 1}, {0.39f, 1}, {0.41f, 2}, {0.75f, 3}, {0.95f, 4}};
    double probs[4] = {0.1, 0.4, 0.2, 0.3}, expected[MAX_VOCAB], z, mass;
    static const int order[4] = {1, 3, 2, 0};
    long counts[MAX_VOCAB];
    forge_sampler_desc d;
    forge_sampler *s;
    int c, i;
    TEST_CASE("top-p");
    for (c = 0; c < 5; c++) {
        memset(&d, 0, sizeof d);
        d.temperature = 1.0f;
        d.top_p = cases[c].p;
        d.seed = 100 + (uint64_t)c;
        s = make(&d, 4);
        if (!s) return;
        memset(expected, 0, sizeof expected);
        mass = 0.0;
        for (i = 0; i < cases[c].kept; i++) mass += probs[order[i]];
        for (i = 0; i < cases[c].kept; i++) expected[order[i]] = probs[order[i]] / mass;
        z = draw_and_compare(s, logits, 4, expected, counts);
        CHECK(z < 5.0, "top_p %g keeps %d: %.2f sigma (counts %ld %ld %ld %ld)", (double)cases[c].p, cases[c].kept, z,
              counts[0], counts[1], counts[2], counts[3]);
        forge_sampler_destroy(s);
    }
}

/* top-p on a vocabulary whose nucleus is larger than the first partial sort (256), against a
   brute-force nucleus */
static const float *rank_logits;
static int by_rank(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (rank_logits[x] != rank_logits[y]) return rank_logits[x] > rank_logits[y] ? -1 : 1;
    return x < y ? -1 : 1;
}

static void test_top_p_large(void) {
    enum { N_VOCAB = 6000 };
    static float logits[N_VOCAB];
    static int32_t order[N_VOCAB];
    static int rank[N_VOCAB];
    forge_sampler_desc d;
    forge_sampler *s;
    double total = 0.0, cumulative = 0.0, max;
    int i, nucleus = 0, outside = 0, deepest = 0;
    TEST_CASE("top-p, large nucleus");
    fill_logits(logits, N_VOCAB, 99);
    for (i = 0; i < N_VOCAB; i++) order[i] = i;
    rank_logits = logits;
    qsort(order, N_VOCAB, sizeof order[0], by_rank);
    max = logits[order[0]];
    for (i = 0; i < N_VOCAB; i++) total += exp(logits[i] - max);
    for (i = 0; i < N_VOCAB; i++) {
        rank[order[i]] = i;
        if (nucleus == 0) {
            cumulative += exp(logits[order[i]] - max);
            if (cumulative >= 0.8 * total) nucleus = i + 1;
        }
    }
    CHECK(nucleus > 1024 && nucleus < N_VOCAB, "the nucleus has %d tokens", nucleus);
    memset(&d, 0, sizeof d);
    d.temperature = 1.0f;
    d.top_p = 0.8f;
    d.seed = 3;
    s = make(&d, N_VOCAB);
    if (!s) return;
    for (i = 0; i < 500; i++) {
        int32_t t = -1;
        forge_sampler_sample(s, logits, &t, NULL);
        if (t < 0 || rank[t] >= nucleus) outside++;
        else if (rank[t] > deepest) deepest = rank[t];
    }
    CHECK(outside == 0, "%d draws outside the nucleus of %d", outside, nucleus);
    CHECK(deepest > nucleus * 3 / 4, "deepest rank drawn %d of %d", deepest, nucleus);
    forge_sampler_destroy(s);
}

static void test_min_p(void) {
    /* probabilities proportional to 8 4 2 1 (token 1, 3, 2, 0) */
    static const float logits[4] = {0.0f, 2.0794415f, 0.6931472f, 1.3862944f}; /* 1 8 2 4 */
    double expected[MAX_VOCAB] = {0}, z;
    long counts[MAX_VOCAB];
    forge_sampler_desc d;
    forge_sampler *s;
    TEST_CASE("min-p");
    memset(&d, 0, sizeof d);
    d.temperature = 1.0f;
    d.min_p = 0.3f;
    d.seed = 5;
    s = make(&d, 4);
    if (!s) return;
    expected[1] = 8.0 / 12.0; /* 0.3 * 8 = 2.4: token 2 (weight 2) goes too */
    expected[3] = 4.0 / 12.0;
    z = draw_and_compare(s, logits, 4, expected, counts);
    CHECK(z < 5.0, "min_p 0.3: %.2f sigma (counts %ld %ld %ld %ld)", z, counts[0], counts[1], counts[2], counts[3]);
    forge_sampler_destroy(s);

    d.min_p = 0.2f; /* 1.6: only token 0 (weight 1) goes */
    s = make(&d, 4);
    if (!s) return;
    expected[1] = 8.0 / 14.0;
    expected[3] = 4.0 / 14.0;
    expected[2] = 2.0 / 14.0;
    z = draw_and_compare(s, logits, 4, expected, counts);
    CHECK(z < 5.0, "min_p 0.2: %.2f sigma (counts %ld %ld %ld %ld)", z, counts[0], counts[1], counts[2], counts[3]);
    forge_sampler_destroy(s);
}

static void test_repeat_penalty(void) {
    static const float logits[4] = {2.0f, 1.9f, -1.0f, 0.5f};
    float penalized[4];
    double expected[MAX_VOCAB], z;
    long counts[MAX_VOCAB];
    forge_sampler_desc d;
    forge_sampler *s;
    int32_t token = -1;
    int i;
    TEST_CASE("repetition penalty");
    memset(&d, 0, sizeof d);
    d.repeat_penalty = 1.1f; /* greedy: 2.0 / 1.1 = 1.82 < 1.9 */
    s = make(&d, 4);
    if (!s) return;
    CHECK(forge_sampler_sample(s, logits, &token, NULL) == FORGE_OK && token == 0, "before: %d", (int)token);
    forge_sampler_accept(s, 0);
    CHECK(forge_sampler_sample(s, logits, &token, NULL) == FORGE_OK && token == 1, "after accepting 0: %d", (int)token);
    forge_sampler_accept(s, -3); /* ignored */
    forge_sampler_accept(s, 4);  /* ignored */
    CHECK(forge_sampler_sample(s, logits, &token, NULL) == FORGE_OK && token == 1, "out-of-range ids ignored: %d",
          (int)token);
    forge_sampler_reset(s);
    CHECK(forge_sampler_sample(s, logits, &token, NULL) == FORGE_OK && token == 0, "reset forgets: %d", (int)token);
    forge_sampler_destroy(s);

    /* the window: with repeat_last_n 2, token 0 drops out after two newer tokens */
    d.repeat_last_n = 2;
    s = make(&d, 4);
    if (!s) return;
    forge_sampler_accept(s, 0);
    forge_sampler_accept(s, 3);
    CHECK(forge_sampler_sample(s, logits, &token, NULL) == FORGE_OK && token == 1, "0 in the window: %d", (int)token);
    forge_sampler_accept(s, 3);
    CHECK(forge_sampler_sample(s, logits, &token, NULL) == FORGE_OK && token == 0, "0 out of the window: %d", (int)token);
    forge_sampler_destroy(s);

    /* the formula, through the distribution: history 0 2 0 (0 penalized once), penalty 1.3 */
    memset(&d, 0, sizeof d);
    d.temperature = 1.0f;
    d.repeat_penalty = 1.3f;
    d.seed = 77;
    s = make(&d, 4);
    if (!s) return;
    forge_sampler_accept(s, 0);
    forge_sampler_accept(s, 2);
    forge_sampler_accept(s, 0);
    for (i = 0; i < 4; i++) penalized[i] = logits[i];
    penalized[0] = 2.0f / 1.3f;
    penalized[2] = -1.0f * 1.3f;
    softmax(penalized, 4, 1.0, expected);
    z = draw_and_compare(s, logits, 4, expected, counts);
    CHECK(z < 5.0, "penalized distribution: %.2f sigma (counts %ld %ld %ld %ld)", z, counts[0], counts[1], counts[2],
          counts[3]);
    forge_sampler_destroy(s);
}

static void test_invalid(void) {
    test_counting c;
    forge_sampler_desc d, base;
    forge_sampler *s = NULL;
    forge_error e;
    forge_result r;
    int i;
    float not_a_number = NAN;
    struct { const char *what, *needle; } expect[12] = {
        {"n_vocab 0", "n_vocab 0"},        {"temperature -0.5", "temperature -0.5"}, {"temperature NaN", "temperature"},
        {"top_p -0.1", "top_p -0.1"},     {"top_p 1.5", "top_p 1.5"},               {"min_p 1.5", "min_p 1.5"},
        {"min_p -1", "min_p -1"},          {"top_k -3", "top_k -3"},                 {"top_p NaN", "top_p"},
        {"repeat_penalty NaN", "repeat_penalty"}, {"repeat_last_n -1", "repeat_last_n -1"}, {"temperature inf", "temperature"}};
    TEST_CASE("invalid descs");
    base = counted_desc(&c);
    for (i = 0; i < 12; i++) {
        uint32_t n_vocab = 10;
        d = base;
        d.temperature = 1.0f;
        switch (i) {
        case 0: n_vocab = 0; break;
        case 1: d.temperature = -0.5f; break;
        case 2: d.temperature = not_a_number; break;
        case 3: d.top_p = -0.1f; break;
        case 4: d.top_p = 1.5f; break;
        case 5: d.min_p = 1.5f; break;
        case 6: d.min_p = -1.0f; break;
        case 7: d.top_k = -3; break;
        case 8: d.top_p = not_a_number; break;
        case 9: d.repeat_penalty = not_a_number; break;
        case 10: d.repeat_last_n = -1; break;
        default: d.temperature = INFINITY; break;
        }
        s = (forge_sampler *)&c; /* must be reset to NULL */
        memset(&e, 0, sizeof e);
        r = forge_sampler_create(&d, n_vocab, &s, &e);
        CHECK(r == FORGE_ERR_ARGUMENT && e.result == FORGE_ERR_ARGUMENT && s == NULL, "%s: %s", expect[i].what,
              forge_result_name(r));
        CHECK(strstr(e.message, expect[i].needle) != NULL, "%s: message '%s'", expect[i].what, e.message);
    }
    CHECK(c.allocs == 0 && c.frees == 0, "refused descs allocate nothing (%ld allocs)", c.allocs);
    CHECK(forge_sampler_create(&base, 10, NULL, NULL) == FORGE_ERR_ARGUMENT, "null out");

    TEST_CASE("out of memory");
    base = counted_desc(&c);
    c.fail_after = 0;
    r = forge_sampler_create(&base, 10, &s, &e);
    CHECK(r == FORGE_ERR_HOST_MEMORY && s == NULL && c.allocs == 0, "refused allocation: %s", forge_result_name(r));

    TEST_CASE("invalid logits");
    base = counted_desc(&c);
    base.temperature = 0.7f;
    base.top_k = 3;
    base.top_p = 0.9f;
    base.repeat_penalty = 1.2f;
    r = forge_sampler_create(&base, 6, &s, &e);
    CHECK(r == FORGE_OK && c.allocs == 1, "one allocation (%ld)", c.allocs);
    if (r == FORGE_OK) {
        float logits[6] = {0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f};
        int32_t token = 7;
        forge_sampler_accept(s, 1);
        logits[4] = not_a_number;
        r = forge_sampler_sample(s, logits, &token, &e);
        CHECK(r == FORGE_ERR_ARGUMENT && token == -1 && strstr(e.message, "logit 4") && strstr(e.message, "NaN"),
              "NaN logit: %s '%s'", forge_result_name(r), e.message);
        logits[4] = INFINITY;
        r = forge_sampler_sample(s, logits, &token, &e);
        CHECK(r == FORGE_ERR_ARGUMENT && strstr(e.message, "logit 4") && strstr(e.message, "+inf"), "+inf logit: '%s'",
              e.message);
        for (i = 0; i < 6; i++) logits[i] = -INFINITY;
        r = forge_sampler_sample(s, logits, &token, &e);
        CHECK(r == FORGE_ERR_ARGUMENT && strstr(e.message, "all 6 logits are -inf"), "all -inf: '%s'", e.message);
        CHECK(forge_sampler_sample(s, NULL, &token, &e) == FORGE_ERR_ARGUMENT, "null logits");
        CHECK(forge_sampler_sample(s, logits, NULL, &e) == FORGE_ERR_ARGUMENT, "null out_token");
        logits[2] = 0.0f;
        r = forge_sampler_sample(s, logits, &token, &e);
        CHECK(r == FORGE_OK && token == 2 && e.result == FORGE_OK, "recovers after errors: %d", (int)token);
        CHECK(c.allocs == 1, "sampling never allocates (%ld allocs)", c.allocs);
        forge_sampler_destroy(s);
    }
    CHECK(c.allocs == c.frees, "%ld allocs, %ld frees", c.allocs, c.frees);
    forge_sampler_destroy(NULL);
    forge_sampler_accept(NULL, 1);
    forge_sampler_reset(NULL);
}

/* a real-sized vocabulary through every filter, to see that nothing is quadratic */
static void test_large_vocab(void) {
    enum { N_VOCAB = 152064 };
    static float logits[N_VOCAB];
    forge_sampler_desc d;
    forge_sampler *s;
    int i, ok = 1, modes;
    TEST_CASE("large vocabulary");
    fill_logits(logits, N_VOCAB, 3);
    for (modes = 0; modes < 3; modes++) {
        memset(&d, 0, sizeof d);
        d.temperature = 0.8f;
        d.repeat_penalty = 1.1f;
        d.min_p = 0.05f;
        if (modes == 0) d.top_k = 40, d.top_p = 0.95f;
        if (modes == 1) d.top_p = 0.9f; /* sorts everything */
        d.seed = 11;
        s = make(&d, N_VOCAB);
        if (!s) return;
        for (i = 0; i < 10; i++) {
            int32_t token = -1;
            ok &= forge_sampler_sample(s, logits, &token, NULL) == FORGE_OK && token >= 0 && token < N_VOCAB;
            forge_sampler_accept(s, token);
        }
        CHECK(ok, "mode %d samples in range", modes);
        forge_sampler_destroy(s);
    }
}

int main(void) {
    test_greedy();
    test_seed();
    test_temperature();
    test_top_k();
    test_top_k_selection();
    test_top_p();
    test_top_p_large();
    test_min_p();
    test_repeat_penalty();
    test_invalid();
    test_large_vocab();
    return test_summary();
}
