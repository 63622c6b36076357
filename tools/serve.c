/* forge serve: an HTTP server that speaks the OpenAI chat and completion API. Included by tools/forge.c
   when the build found libmicrohttpd and cJSON (FORGE_SERVE); forge.h knows nothing of either.

   Threads: libmicrohttpd runs one thread per connection; a handler parses and checks the request,
   tokenizes it and puts a job in its model's queue, then waits (or streams) while the model's one
   scheduler thread advances every active job with one forge_eval_batch per step: the prompt chunks of
   new jobs share the step with one token of each job already generating. A model's jobs, queue and
   counters sit under the model's mutex; the context itself is touched by its scheduler only.

   Memory: the server's budget is the share (--mem-fraction) of the free memory read at startup. A
   model is loaded when its plan fits what the loaded models leave of it; otherwise the least recently
   used idle models are unloaded first, and when even that cannot make room the request gets 507 with
   the plan's numbers and nothing is allocated. */
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <microhttpd.h>
#include <cjson/cJSON.h>

#define SERVE_MAX_BODY_DEFAULT (1u << 20) /* bytes of a request body; past it, 413 */
#define SERVE_MAX_DEPTH 32                /* nesting of arrays and objects in a request */
#define SERVE_MAX_MESSAGES 1024
#define SERVE_MAX_STOPS 4
#define SERVE_MAX_STOP_BYTES 256
#define SERVE_MAX_MODELS 64
#define SERVE_MESSAGE_BYTES 1024 /* a verdict's message and a little more */

enum { MODEL_UNLOADED = 0, MODEL_LOADING, MODEL_READY, MODEL_FAILED };
static const char *const model_status_names[] = {"unloaded", "loading", "ready", "failed"};
enum { JOB_QUEUED = 0, JOB_ACTIVE, JOB_DONE };

struct serve_model;

typedef struct serve_job {
    struct serve_model *model;
    int chat, stream;
    int32_t *prompt;
    uint32_t n_prompt, max_tokens;
    forge_sampler_desc sampling;
    char *stops[SERVE_MAX_STOPS];
    size_t n_stops;
    unsigned long id;
    long long created;
    /* the scheduler's alone */
    forge_sampler *sampler;
    forge_detokenizer detok;
    uint32_t seq, read;
    int32_t next;
    /* under the model's mutex */
    int state, cancelled, refs;
    char *text;             /* the reply so far (cut at a stop string) */
    size_t text_len, text_cap;
    size_t ready;           /* bytes of text that no stop string can take back: these may be streamed */
    uint32_t n_generated;
    const char *finish;     /* "stop" or "length" once done */
    int http_status;        /* nonzero: the job failed with this status and error */
    char error[SERVE_MESSAGE_BYTES];
    pthread_cond_t changed;
    struct serve_job *next_queued;
} serve_job;

typedef struct serve_server serve_server;

typedef struct serve_model {
    char name[256], path[4096];
    serve_server *server;
    pthread_mutex_t mu;
    pthread_cond_t work;
    int status, stop, thread_started, preload;
    char reason[SERVE_MESSAGE_BYTES];
    forge_model *model;
    forge_tokenizer *tok;
    forge_context *ctx;
    forge_chat_format format;
    uint32_t n_seq, n_ctx, n_batch, n_vocab;
    pthread_t thread;
    serve_job *queue_head, *queue_tail, **slots;
    uint32_t n_queued, busy, users; /* users: requests holding the model between tokenizing and their end */
    uint64_t planned_bytes, arena_bytes;
    uint64_t requests, prompt_tokens, generated_tokens, cancelled, refused;
    double step_seconds, last_used;
} serve_model;

#define SERVE_STATUS_CODES 12
static const int serve_codes[SERVE_STATUS_CODES] = {200, 400, 404, 405, 413, 500, 503, 507, 0, 0, 0, 0};

struct serve_server {
    forge_context_desc desc; /* every model's context, before the server's budget is applied */
    uint32_t queue_limit, max_body;
    forge_memory_reading memory; /* read at startup */
    uint64_t budget_bytes;
    pthread_mutex_t load_mu; /* one load (and its unloads) at a time; never taken under a model's mutex */
    pthread_mutex_t stats_mu;
    serve_model models[SERVE_MAX_MODELS];
    uint32_t n_models;
    volatile int stopping;
    uint32_t answering; /* generation requests given a job and not yet completed by libmicrohttpd (stats_mu) */
    unsigned long next_id;
    uint64_t responses[SERVE_STATUS_CODES];
};

typedef struct serve_conn {
    serve_server *server;
    char *body;
    size_t body_len, body_cap;
    int too_big, seen;
    serve_job *job;
    int fd;
    char *out; /* SSE bytes written but not yet taken by libmicrohttpd */
    size_t out_len, out_pos, sent;
    int stream_over;
    int answering; /* counted in the server's answering until the request completes */
} serve_conn;

/* ---- small helpers ----------------------------------------------------------------------------- */

/* JSON is written into a memory stream so the CLI's escaping helpers serve here too. */
typedef struct serve_buf {
    FILE *f;
    char *data;
    size_t size;
} serve_buf;

static int buf_open(serve_buf *b) {
    b->data = NULL, b->size = 0;
    b->f = open_memstream(&b->data, &b->size);
    return b->f != NULL;
}

static char *buf_close(serve_buf *b, size_t *len) {
    if (!b->f) return NULL;
    if (fclose(b->f) != 0) {
        free(b->data);
        return NULL;
    }
    b->f = NULL;
    if (len) *len = b->size;
    return b->data;
}

static void serve_count(serve_server *s, int status) {
    int i = 0;
    while (serve_codes[i] && serve_codes[i] != status) i++; /* the first 0 is the slot of every other status */
    pthread_mutex_lock(&s->stats_mu);
    s->responses[i]++;
    pthread_mutex_unlock(&s->stats_mu);
}

static enum MHD_Result serve_send(serve_conn *c, struct MHD_Connection *connection, int status, const char *type, char *body,
                                  size_t len, const char *header, const char *value) { /* header: one more, or NULL */
    struct MHD_Response *r;
    enum MHD_Result ret;
    if (!body) {
        status = 500, body = (char *)"{\"error\": {\"type\": \"server_error\", \"message\": \"out of memory\"}}\n", len = strlen(body);
        r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_PERSISTENT);
    } else {
        r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    }
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    if (header) MHD_add_response_header(r, header, value);
    ret = MHD_queue_response(connection, (unsigned int)status, r);
    MHD_destroy_response(r);
    serve_count(c->server, status);
    return ret;
}

/* An error in the shape OpenAI's clients read: {"error": {"type", "message", "code"}}. */
static enum MHD_Result serve_error(serve_conn *c, struct MHD_Connection *connection, int status, const char *type,
                                   const char *message) {
    serve_buf b;
    char *body;
    size_t len = 0;
    if (!buf_open(&b)) return serve_send(c, connection, 500, "application/json", NULL, 0, NULL, NULL);
    fprintf(b.f, "{\"error\": {\"type\": ");
    json_cstr(b.f, type);
    fprintf(b.f, ", \"message\": ");
    json_cstr(b.f, message);
    fprintf(b.f, ", \"code\": %d}}\n", status);
    body = buf_close(&b, &len);
    if (status == 503) return serve_send(c, connection, status, "application/json", body, len, "Retry-After", "1");
    if (status == 405) /* the two kinds of path answer one method each, and the message names it */
        return serve_send(c, connection, status, "application/json", body, len, "Allow", strstr(message, "POST") ? "POST" : "GET, HEAD");
    return serve_send(c, connection, status, "application/json", body, len, NULL, NULL);
}

static double serve_now(void) { return now_seconds(); }

/* Whether the client has gone: its end of the socket reads as closed (a pipelined request or data
   waiting counts as alive). */
static int client_gone(int fd) {
    char byte;
    ssize_t n;
    if (fd < 0) return 0;
    n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return 1;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return 1;
    return 0;
}

static void timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, long ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(cv, mu, &ts);
}

/* ---- jobs ------------------------------------------------------------------------------------- */

/* Drops one reference (under the model's mutex); the last one frees the job. */
static void job_release_locked(serve_job *j) {
    size_t i;
    if (--j->refs > 0) return;
    for (i = 0; i < j->n_stops; i++) free(j->stops[i]);
    free(j->prompt);
    free(j->text);
    pthread_cond_destroy(&j->changed);
    free(j);
}

static int job_append(serve_job *j, const char *bytes, size_t n) {
    if (j->text_len + n + 1 > j->text_cap) {
        size_t cap = j->text_cap ? j->text_cap * 2 : 256;
        char *t;
        while (cap < j->text_len + n + 1) cap *= 2;
        if (!(t = (char *)realloc(j->text, cap))) return 0;
        j->text = t, j->text_cap = cap;
    }
    memcpy(j->text + j->text_len, bytes, n);
    j->text_len += n;
    j->text[j->text_len] = 0;
    return 1;
}

/* After new text: cut it at the first stop string (1 returned), else mark as ready what no stop
   string could still claim (the longest tail that begins some stop string is held back). */
static int job_check_stops(serve_job *j, int final) {
    size_t i, hold = 0, cut = j->text_len;
    int found = 0;
    if (!j->text) return 0;
    for (i = 0; i < j->n_stops; i++) {
        const char *s = j->stops[i], *at;
        size_t n = strlen(s), k;
        size_t from = j->ready > n ? j->ready - n : 0;
        if ((at = strstr(j->text + from, s)) && (size_t)(at - j->text) < cut) cut = (size_t)(at - j->text), found = 1;
        for (k = n - 1; k > hold; k--)
            if (k <= j->text_len && !memcmp(j->text + j->text_len - k, s, k)) {
                hold = k;
                break;
            }
    }
    if (found) {
        j->text_len = cut;
        j->text[cut] = 0;
        j->ready = cut;
        return 1;
    }
    j->ready = final ? j->text_len : j->text_len - hold;
    return 0;
}

static void job_finish_locked(serve_job *j, const char *finish, int http_status, const char *error) {
    j->state = JOB_DONE;
    j->finish = finish;
    if (http_status) {
        j->http_status = http_status;
        snprintf(j->error, sizeof j->error, "%s", error);
    }
    j->ready = j->text_len;
    pthread_cond_broadcast(&j->changed);
}

/* ---- the scheduler: one thread per loaded model ------------------------------------------------- */

static void model_release_slot_locked(serve_model *m, uint32_t seq) {
    serve_job *j = m->slots[seq];
    m->slots[seq] = NULL;
    m->busy--;
    m->users--;
    if (j) {
        if (j->sampler) forge_sampler_destroy(j->sampler);
        j->sampler = NULL;
        job_release_locked(j);
    }
}

/* Samples one sequence's next token and adds its text; returns 1 when the job is over. */
static int schedule_sample(serve_model *m, serve_job *j, char *piece, size_t piece_size, int *failed, forge_error *err) {
    int32_t token;
    size_t n = 0;
    int over = 0, eog;
    if (forge_seq_sample(m->ctx, j->seq, j->sampler, &token, err) != FORGE_OK) {
        *failed = 1;
        return 1;
    }
    forge_sampler_accept(j->sampler, token);
    eog = forge_tokenizer_is_eog(m->tok, token);
    if (!eog && forge_detokenizer_push(&j->detok, token, piece, piece_size, &n, err) != FORGE_OK) n = 0;
    pthread_mutex_lock(&m->mu);
    if (!eog) j->n_generated++, m->generated_tokens++; /* the end-of-turn token is not part of the reply */
    if (n && !job_append(j, piece, n)) {
        job_finish_locked(j, "length", 500, "out of memory for the reply");
        over = 1;
    } else if (j->cancelled) {
        m->cancelled++;
        job_finish_locked(j, "stop", 499, "the client went away");
        over = 1;
    } else if (eog || j->n_generated >= j->max_tokens || forge_seq_pos(m->ctx, j->seq) >= m->n_ctx) {
        size_t k = 0;
        char tail[8];
        if (forge_detokenizer_flush(&j->detok, tail, sizeof tail, &k, NULL) == FORGE_OK && k) job_append(j, tail, k);
        job_finish_locked(j, job_check_stops(j, 1) || eog ? "stop" : "length", 0, NULL);
        over = 1;
    } else if (job_check_stops(j, 0)) {
        job_finish_locked(j, "stop", 0, NULL);
        over = 1;
    }
    if (!over) j->next = token;
    pthread_cond_broadcast(&j->changed);
    pthread_mutex_unlock(&m->mu);
    return over;
}

/* The model can no longer evaluate: every job fails with the reason, and /health says so. */
static void model_fail_locked(serve_model *m, const char *reason) {
    uint32_t s;
    serve_job *j;
    m->status = MODEL_FAILED;
    snprintf(m->reason, sizeof m->reason, "%s", reason);
    for (s = 0; s < m->n_seq; s++)
        if (m->slots[s]) {
            job_finish_locked(m->slots[s], "stop", 500, reason);
            model_release_slot_locked(m, s);
        }
    while ((j = m->queue_head)) {
        m->queue_head = j->next_queued;
        m->n_queued--;
        m->users--;
        job_finish_locked(j, "stop", 500, reason);
        job_release_locked(j);
    }
    m->queue_tail = NULL;
}

static void *model_scheduler(void *arg) {
    serve_model *m = (serve_model *)arg;
    uint32_t cap = m->n_batch, s;
    int32_t *tokens = (int32_t *)malloc(cap * sizeof *tokens);
    uint32_t *seqs = (uint32_t *)malloc(cap * sizeof *seqs);
    serve_job **step = (serve_job **)calloc(m->n_seq, sizeof *step);
    size_t piece_size = forge_tokenizer_max_piece_bytes(m->tok) + 3; /* what a push can never overflow */
    char *piece = (char *)malloc(piece_size);
    forge_error err;
    pthread_mutex_lock(&m->mu);
    if (!tokens || !seqs || !step || !piece) {
        model_fail_locked(m, "out of memory for the scheduler");
        m->stop = 1;
    }
    while (!m->stop) {
        uint32_t n = 0, n_step = 0, i;
        forge_batch batch;
        double t0;
        int failed = 0;
        if (m->busy == 0 && !m->queue_head) {
            pthread_cond_wait(&m->work, &m->mu);
            continue;
        }
        /* a cancelled job gives its sequence back before the step */
        for (s = 0; s < m->n_seq; s++)
            if (m->slots[s] && m->slots[s]->cancelled) {
                m->cancelled++;
                job_finish_locked(m->slots[s], "stop", 499, "the client went away");
                model_release_slot_locked(m, s);
            }
        /* queued jobs take the free sequences, oldest first */
        for (s = 0; s < m->n_seq && m->queue_head; s++) {
            serve_job *j;
            if (m->slots[s]) continue;
            j = m->queue_head;
            m->queue_head = j->next_queued;
            if (!m->queue_head) m->queue_tail = NULL;
            m->n_queued--;
            m->slots[s] = j, m->busy++;
            j->state = JOB_ACTIVE, j->seq = s, j->read = 0, j->next = -1;
            forge_detokenizer_init(&j->detok, m->tok, 0);
            if (forge_seq_reset(m->ctx, s, &err) != FORGE_OK ||
                forge_sampler_create(&j->sampling, m->n_vocab, &j->sampler, &err) != FORGE_OK) {
                job_finish_locked(j, "stop", 500, err.message);
                model_release_slot_locked(m, s);
            }
        }
        /* the step: one token of each generating job, then prompt chunks in the rows left */
        for (s = 0; s < m->n_seq; s++) {
            serve_job *j = m->slots[s];
            if (j && j->read == j->n_prompt && j->next >= 0 && n < cap) {
                tokens[n] = j->next, seqs[n++] = s;
                j->next = -1;
                step[n_step++] = j;
            }
        }
        for (s = 0; s < m->n_seq && n < cap; s++) {
            serve_job *j = m->slots[s];
            if (!j || j->read >= j->n_prompt) continue;
            while (j->read < j->n_prompt && n < cap) {
                forge_sampler_accept(j->sampler, j->prompt[j->read]);
                tokens[n] = j->prompt[j->read++], seqs[n++] = s;
            }
            if (j->read == j->n_prompt) step[n_step++] = j;
        }
        if (n == 0) { /* nothing to evaluate (every admission failed): wait instead of spinning */
            timed_wait(&m->work, &m->mu, 10);
            continue;
        }
        pthread_mutex_unlock(&m->mu);
        batch.tokens = tokens, batch.seq = seqs, batch.n_tokens = n;
        t0 = serve_now();
        if (forge_eval_batch(m->ctx, &batch, &err) != FORGE_OK) failed = 1;
        for (i = 0; i < n_step && !failed; i++) schedule_sample(m, step[i], piece, piece_size, &failed, &err);
        pthread_mutex_lock(&m->mu);
        m->step_seconds += serve_now() - t0;
        if (failed) {
            model_fail_locked(m, err.message);
            break;
        }
        for (s = 0; s < m->n_seq; s++)
            if (m->slots[s] && m->slots[s]->state == JOB_DONE) model_release_slot_locked(m, s);
    }
    /* stopping: what is left is cancelled */
    for (s = 0; s < m->n_seq; s++)
        if (m->slots[s]) {
            job_finish_locked(m->slots[s], "stop", 503, "the server is shutting down");
            model_release_slot_locked(m, s);
        }
    while (m->queue_head) {
        serve_job *j = m->queue_head;
        m->queue_head = j->next_queued;
        m->n_queued--;
        m->users--;
        job_finish_locked(j, "stop", 503, "the server is shutting down");
        job_release_locked(j);
    }
    m->queue_tail = NULL;
    pthread_mutex_unlock(&m->mu);
    free(tokens);
    free(seqs);
    free(step);
    free(piece);
    return NULL;
}

/* ---- loading and unloading ---------------------------------------------------------------------- */

static void model_unload(serve_model *m) {
    pthread_mutex_lock(&m->mu);
    m->stop = 1;
    pthread_cond_broadcast(&m->work);
    pthread_mutex_unlock(&m->mu);
    if (m->thread_started) pthread_join(m->thread, NULL);
    m->thread_started = 0;
    /* a request between its check of the model and its queue may still read the tokenizer: it finds the
       server stopping (or the model unloaded) and lets go */
    pthread_mutex_lock(&m->mu);
    while (m->users > 0) timed_wait(&m->work, &m->mu, 10);
    pthread_mutex_unlock(&m->mu);
    forge_context_destroy(m->ctx);
    forge_tokenizer_destroy(m->tok);
    forge_model_close(m->model);
    free(m->slots);
    pthread_mutex_lock(&m->mu);
    m->ctx = NULL, m->tok = NULL, m->model = NULL, m->slots = NULL;
    if (m->status != MODEL_FAILED) m->status = MODEL_UNLOADED;
    m->planned_bytes = m->arena_bytes = 0;
    m->stop = 0;
    pthread_mutex_unlock(&m->mu);
}

static uint64_t loaded_bytes(serve_server *s, int idle_too) {
    uint32_t i;
    uint64_t sum = 0;
    for (i = 0; i < s->n_models; i++) {
        serve_model *m = &s->models[i];
        pthread_mutex_lock(&m->mu);
        if (m->status == MODEL_READY && (idle_too || m->users > 0)) sum += m->planned_bytes;
        pthread_mutex_unlock(&m->mu);
    }
    return sum;
}

/* The plan against what the budget leaves, as a reading forge_plan_check takes at a fraction of 1. */
static void budget_desc(serve_server *s, uint64_t used, forge_context_desc *desc, forge_memory_reading *reading) {
    *desc = s->desc;
    *reading = s->memory;
    reading->free_bytes = s->budget_bytes > used ? s->budget_bytes - used : 0;
    desc->memory = reading;
    desc->mem_fraction = 1.0;
    desc->mem_headroom_bytes = 0;
    desc->policy = FORGE_BUDGET_REFUSE;
}

/* The verdict's message for the server: the reading behind the budget is the server's (what it leaves this
   model, at a fraction of 1), so its "(100% of ... free on ...)" is replaced by where that number comes from. */
static void refusal_message(const serve_server *s, const serve_model *m, const forge_verdict *v, char *out, size_t size) {
    const char *text = v->message, *open = strstr(text, " (100% of ");
    size_t head = open ? (size_t)(open - text) : strlen(text), k;
    int depth = 0;
    const char *rest = text + head;
    if (open) { /* past the matching parenthesis */
        for (k = 1; open[k]; k++) {
            if (open[k] == '(') depth++;
            else if (open[k] == ')' && --depth == 0) break;
        }
        rest = open[k] ? open + k + 1 : open + k;
    }
    snprintf(out, size, "model %.200s does not fit: %.*s (what the server's budget of %llu bytes, %.4g%% of the memory free at "
             "startup, leaves it once idle models are unloaded)%.400s",
             m->name, (int)(head < 400 ? head : 400), text, (unsigned long long)s->budget_bytes,
             (s->desc.mem_fraction > 0 ? s->desc.mem_fraction : 0.70) * 100.0, rest);
}

typedef struct serve_refusal {
    int status; /* 0: loaded */
    forge_verdict verdict;
    char message[SERVE_MESSAGE_BYTES];
} serve_refusal;

/* Makes m ready (under the server's load mutex): unloads idle models, least recently used first, when
   that makes room; refuses with the verdict when even then the plan does not fit. */
static void model_load(serve_server *s, serve_model *m, serve_refusal *out) {
    forge_context_desc desc;
    forge_memory_reading reading;
    forge_error err;
    uint64_t busy_bytes;
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&m->mu);
    m->status = MODEL_LOADING;
    pthread_mutex_unlock(&m->mu);
    if (forge_model_open(m->path, NULL, &m->model, &err) != FORGE_OK ||
        forge_tokenizer_create(forge_model_gguf(m->model), NULL, &m->tok, &err) != FORGE_OK) {
        out->status = 500;
        snprintf(out->message, sizeof out->message, "%s", err.message);
        goto fail;
    }
    /* the best case first: every idle model gone */
    busy_bytes = loaded_bytes(s, 0);
    budget_desc(s, busy_bytes, &desc, &reading);
    if (forge_plan_check(m->model, &desc, &out->verdict, &err) != FORGE_OK) {
        out->status = 500;
        snprintf(out->message, sizeof out->message, "%s", err.message);
        goto fail;
    }
    if (!out->verdict.fits) {
        out->status = 507;
        refusal_message(s, m, &out->verdict, out->message, sizeof out->message);
        goto fail;
    }
    for (;;) { /* then as few unloads as it takes */
        uint32_t i;
        serve_model *lru = NULL;
        uint64_t used = loaded_bytes(s, 1);
        if (used + out->verdict.plan.total_bytes <= s->budget_bytes) break;
        for (i = 0; i < s->n_models; i++) {
            serve_model *o = &s->models[i];
            pthread_mutex_lock(&o->mu);
            if (o != m && o->status == MODEL_READY && o->users == 0 && (!lru || o->last_used < lru->last_used)) lru = o;
            pthread_mutex_unlock(&o->mu);
        }
        if (lru) { /* no request may take it from here on: they wait for the load lock and load it again */
            int idle;
            pthread_mutex_lock(&lru->mu);
            idle = lru->status == MODEL_READY && lru->users == 0;
            if (idle) lru->status = MODEL_UNLOADED;
            pthread_mutex_unlock(&lru->mu);
            if (!idle) continue;
        }
        if (!lru) break; /* a busy model returned in the meantime: the create below refuses */
        fprintf(stderr, "forge serve: unloading %s (least recently used) to make room for %s\n", lru->name, m->name);
        model_unload(lru);
    }
    budget_desc(s, loaded_bytes(s, 1), &desc, &reading);
    if (forge_plan_check(m->model, &desc, &out->verdict, &err) != FORGE_OK || !out->verdict.fits) {
        out->status = out->verdict.fits ? 500 : 507;
        if (out->verdict.fits) snprintf(out->message, sizeof out->message, "model %.200s: %.700s", m->name, err.message);
        else refusal_message(s, m, &out->verdict, out->message, sizeof out->message);
        goto fail;
    }
    if (forge_context_create(m->model, &desc, &m->ctx, &err) != FORGE_OK) {
        out->status = err.result == FORGE_ERR_BUDGET ? 507 : 500;
        snprintf(out->message, sizeof out->message, "%s", err.message);
        goto fail;
    }
    m->n_seq = forge_context_n_seq(m->ctx);
    m->n_ctx = forge_context_plan(m->ctx)->n_ctx;
    m->n_batch = forge_context_plan(m->ctx)->n_batch;
    m->n_vocab = forge_model_config(m->model)->n_vocab;
    m->format = forge_chat_detect(forge_model_gguf(m->model));
    m->slots = (serve_job **)calloc(m->n_seq, sizeof *m->slots);
    m->stop = 0;
    if (!m->slots || pthread_create(&m->thread, NULL, model_scheduler, m) != 0) {
        out->status = 500;
        snprintf(out->message, sizeof out->message, "cannot start the scheduler of %s", m->name);
        goto fail;
    }
    m->thread_started = 1;
    pthread_mutex_lock(&m->mu);
    m->planned_bytes = forge_context_plan(m->ctx)->total_bytes;
    m->arena_bytes = forge_context_arena_bytes(m->ctx);
    m->status = MODEL_READY;
    m->reason[0] = 0;
    m->last_used = serve_now();
    pthread_mutex_unlock(&m->mu);
    fprintf(stderr, "forge serve: loaded %s: %u sequences of %u positions, %llu bytes planned\n", m->name, m->n_seq, m->n_ctx,
            (unsigned long long)m->planned_bytes);
    return;
fail:
    free(m->slots);
    forge_context_destroy(m->ctx);
    forge_tokenizer_destroy(m->tok);
    forge_model_close(m->model);
    pthread_mutex_lock(&m->mu);
    m->slots = NULL, m->ctx = NULL, m->tok = NULL, m->model = NULL;
    /* a refusal for memory leaves the model loadable later; a broken file is a failure /health reports */
    m->status = out->status == 507 ? MODEL_UNLOADED : MODEL_FAILED;
    snprintf(m->reason, sizeof m->reason, "%s", out->message);
    if (out->status == 507) m->refused++;
    pthread_mutex_unlock(&m->mu);
    fprintf(stderr, "forge serve: %s: %s\n", m->name, out->message);
}

/* Takes a user reference on a ready model, loading it when needed. */
static void model_acquire(serve_server *s, serve_model *m, serve_refusal *out) {
    out->status = 0;
    for (;;) {
        pthread_mutex_lock(&m->mu);
        if (m->status == MODEL_READY) {
            m->users++;
            m->last_used = serve_now();
            pthread_mutex_unlock(&m->mu);
            return;
        }
        if (m->status == MODEL_FAILED) {
            out->status = 500;
            snprintf(out->message, sizeof out->message, "model %.200s failed: %.700s", m->name, m->reason);
            pthread_mutex_unlock(&m->mu);
            return;
        }
        pthread_mutex_unlock(&m->mu);
        pthread_mutex_lock(&s->load_mu);
        pthread_mutex_lock(&m->mu);
        if (m->status == MODEL_UNLOADED && !s->stopping) {
            pthread_mutex_unlock(&m->mu);
            model_load(s, m, out);
            pthread_mutex_unlock(&s->load_mu);
            if (out->status) return;
            continue;
        }
        pthread_mutex_unlock(&m->mu);
        pthread_mutex_unlock(&s->load_mu);
        if (s->stopping) {
            out->status = 503;
            snprintf(out->message, sizeof out->message, "the server is shutting down");
            return;
        }
    }
}

static void model_drop_user(serve_model *m) {
    pthread_mutex_lock(&m->mu);
    m->users--;
    pthread_cond_broadcast(&m->work);
    pthread_mutex_unlock(&m->mu);
}

/* ---- requests ---------------------------------------------------------------------------------- */

/* Nesting deeper than SERVE_MAX_DEPTH is refused before cJSON sees the text. */
static int json_depth_ok(const char *text, size_t len) {
    size_t i;
    int depth = 0, in_string = 0;
    for (i = 0; i < len; i++) {
        char ch = text[i];
        if (in_string) {
            if (ch == '\\') i++;
            else if (ch == '"') in_string = 0;
        } else if (ch == '"') in_string = 1;
        else if (ch == '[' || ch == '{') {
            if (++depth > SERVE_MAX_DEPTH) return 0;
        } else if (ch == ']' || ch == '}') depth--;
    }
    return 1;
}

typedef struct serve_params {
    int has_max_tokens, stream;
    uint32_t max_tokens;
    forge_sampler_desc sampling;
    char *stops[SERVE_MAX_STOPS];
    size_t n_stops;
} serve_params;

/* A number field within [lo, hi] (integer when asked); 1 absent, 2 present and good, 0 bad. */
static int get_number(const cJSON *root, const char *key, double lo, double hi, int integer, double *out, char *why, size_t why_size) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return 1;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi) || (integer && floor(v->valuedouble) != v->valuedouble)) {
        snprintf(why, why_size, "'%s' must be %s in [%.17g, %.17g]", key, integer ? "an integer" : "a number", lo, hi);
        return 0;
    }
    *out = v->valuedouble;
    return 2;
}

static int parse_params(const cJSON *root, serve_params *p, char *why, size_t why_size) {
    const cJSON *v;
    double x = 0.0;
    int r;
    memset(p, 0, sizeof *p);
    p->sampling.temperature = 1.0f; /* OpenAI's default */
    p->sampling.top_k = 40;          /* as other servers: on the GPU the candidates are then picked on the device */
    if (!(r = get_number(root, "max_tokens", 1, 1u << 30, 1, &x, why, why_size))) return 0;
    if (r == 1 && !(r = get_number(root, "max_completion_tokens", 1, 1u << 30, 1, &x, why, why_size))) return 0;
    if (r == 2) p->has_max_tokens = 1, p->max_tokens = (uint32_t)x;
    if (!(r = get_number(root, "temperature", 0, 2, 0, &x, why, why_size))) return 0;
    if (r == 2) p->sampling.temperature = (float)x;
    if (!(r = get_number(root, "top_p", 0, 1, 0, &x, why, why_size))) return 0;
    if (r == 2) p->sampling.top_p = (float)x;
    if (!(r = get_number(root, "top_k", 0, INT32_MAX, 1, &x, why, why_size))) return 0;
    if (r == 2) p->sampling.top_k = (int32_t)x;
    if (!(r = get_number(root, "min_p", 0, 1, 0, &x, why, why_size))) return 0;
    if (r == 2) p->sampling.min_p = (float)x;
    if (!(r = get_number(root, "seed", 0, 9007199254740991.0, 1, &x, why, why_size))) return 0;
    p->sampling.seed = r == 2 ? (uint64_t)x : random_seed_value();
    if (!(r = get_number(root, "n", 1, 1, 1, &x, why, why_size))) {
        snprintf(why, why_size, "'n' must be 1: forge serve answers one choice per request");
        return 0;
    }
    v = cJSON_GetObjectItemCaseSensitive(root, "stream");
    if (v && !cJSON_IsNull(v)) {
        if (!cJSON_IsBool(v)) {
            snprintf(why, why_size, "'stream' must be true or false");
            return 0;
        }
        p->stream = cJSON_IsTrue(v);
    }
    v = cJSON_GetObjectItemCaseSensitive(root, "stop");
    if (v && !cJSON_IsNull(v)) {
        const cJSON *item;
        int n = cJSON_IsString(v) ? 1 : cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
        if (n < 0 || n > SERVE_MAX_STOPS) {
            snprintf(why, why_size, "'stop' must be a string or a list of at most %d strings", SERVE_MAX_STOPS);
            return 0;
        }
        for (item = cJSON_IsString(v) ? v : v->child; item && p->n_stops < (size_t)n; item = item->next) {
            size_t len;
            if (!cJSON_IsString(item) || !(len = strlen(item->valuestring)) || len > SERVE_MAX_STOP_BYTES) {
                snprintf(why, why_size, "each stop must be a string of 1 to %d bytes", SERVE_MAX_STOP_BYTES);
                return 0;
            }
            if (!(p->stops[p->n_stops] = strdup(item->valuestring))) {
                snprintf(why, why_size, "out of memory");
                return 0;
            }
            p->n_stops++;
        }
    }
    return 1;
}

/* The text a chat request's messages render to in the model's format (the caller frees it). */
static char *render_messages(const cJSON *messages, forge_chat_format format, size_t *len, char *why, size_t why_size) {
    forge_chat_message *list;
    char **owned;
    const cJSON *msg;
    size_t n = 0, k, needed = 0;
    char *text = NULL;
    forge_error err;
    int count = cJSON_IsArray(messages) ? cJSON_GetArraySize(messages) : -1;
    if (count < 1 || count > SERVE_MAX_MESSAGES) {
        snprintf(why, why_size, "'messages' must be a list of 1 to %d messages", SERVE_MAX_MESSAGES);
        return NULL;
    }
    list = (forge_chat_message *)calloc((size_t)count, sizeof *list);
    owned = (char **)calloc((size_t)count, sizeof *owned);
    if (!list || !owned) {
        snprintf(why, why_size, "out of memory");
        goto done;
    }
    cJSON_ArrayForEach(msg, messages) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
        if (!cJSON_IsObject(msg) || !cJSON_IsString(role) ||
            (strcmp(role->valuestring, "system") && strcmp(role->valuestring, "user") && strcmp(role->valuestring, "assistant") &&
             strcmp(role->valuestring, "developer"))) {
            snprintf(why, why_size, "message %zu: 'role' must be system, developer, user or assistant", n);
            goto done;
        }
        list[n].role = strcmp(role->valuestring, "developer") ? role->valuestring : "system";
        if (cJSON_IsString(content)) list[n].content = content->valuestring;
        else if (cJSON_IsArray(content)) { /* text parts, joined */
            const cJSON *part;
            serve_buf b;
            if (!buf_open(&b)) goto oom;
            cJSON_ArrayForEach(part, content) {
                const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
                const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
                if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(t)) {
                    free(buf_close(&b, NULL));
                    snprintf(why, why_size, "message %zu: only text content parts are supported", n);
                    goto done;
                }
                fputs(t->valuestring, b.f);
            }
            if (!(owned[n] = buf_close(&b, NULL))) goto oom;
            list[n].content = owned[n];
        } else {
            snprintf(why, why_size, "message %zu: 'content' must be a string or a list of text parts", n);
            goto done;
        }
        n++;
    }
    forge_chat_render(format, list, n, 1, NULL, 0, &needed, NULL);
    if (!(text = (char *)malloc(needed + 1))) goto oom;
    if (forge_chat_render(format, list, n, 1, text, needed + 1, len, &err) != FORGE_OK) {
        snprintf(why, why_size, "%s", err.message);
        free(text);
        text = NULL;
    }
    goto done;
oom:
    snprintf(why, why_size, "out of memory");
done:
    for (k = 0; owned && k < (size_t)count; k++) free(owned[k]);
    free(owned);
    free(list);
    return text;
}

static serve_model *find_model(serve_server *s, const char *name) {
    uint32_t i;
    for (i = 0; i < s->n_models; i++)
        if (!strcmp(s->models[i].name, name)) return &s->models[i];
    return NULL;
}

/* 507: the verdict's numbers and the machine's memory now. */
static enum MHD_Result send_insufficient(serve_conn *c, struct MHD_Connection *connection, const serve_refusal *r) {
    serve_buf b;
    char *body;
    size_t len = 0;
    forge_memory_reading now;
    const forge_verdict *v = &r->verdict;
    memset(&now, 0, sizeof now);
    if (v->plan.backend == FORGE_BACKEND_GPU) forge_memory_query_gpu(c->server->desc.device, &now, NULL);
    else forge_memory_query_cpu(&now, NULL);
    if (!buf_open(&b)) return serve_send(c, connection, 500, "application/json", NULL, 0, NULL, NULL);
    fprintf(b.f, "{\"error\": {\"type\": \"insufficient_memory\", \"message\": ");
    json_cstr(b.f, r->message);
    fprintf(b.f, ", \"code\": 507, \"required_bytes\": %llu, \"budget_bytes\": %llu, \"fits\": {\"ctx\": ",
            (unsigned long long)v->plan.total_bytes, (unsigned long long)v->budget_bytes);
    if (v->max_ctx_that_fits) fprintf(b.f, "%u", v->max_ctx_that_fits);
    else fputs("null", b.f);
    fprintf(b.f, ", \"kv\": ");
    if (v->kv_type_that_fits == FORGE_KV_DEFAULT) fputs("null", b.f);
    else json_cstr(b.f, forge_kv_type_name(v->kv_type_that_fits));
    fprintf(b.f, ", \"seqs\": %u}}, \"system\": {\"memory_total_bytes\": %llu, \"memory_free_bytes\": %llu}}\n", v->max_seq_that_fits,
            (unsigned long long)now.total_bytes, (unsigned long long)now.free_bytes);
    body = buf_close(&b, &len);
    return serve_send(c, connection, 507, "application/json", body, len, NULL, NULL);
}

static void write_usage(FILE *f, const serve_job *j) {
    fprintf(f, "\"usage\": {\"prompt_tokens\": %u, \"completion_tokens\": %u, \"total_tokens\": %u}", j->n_prompt, j->n_generated,
            j->n_prompt + j->n_generated);
}

/* One object of a reply: the whole answer, or a streamed chunk of text (finish NULL while going on). */
static void write_choice_object(FILE *f, const serve_job *j, const char *text, size_t len, int chunk, const char *finish, int usage,
                                int first) {
    fprintf(f, "{\"id\": \"%s-%lu\", \"object\": \"%s\", \"created\": %lld, \"model\": ", j->chat ? "chatcmpl" : "cmpl", j->id,
            j->chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion", j->created);
    json_cstr(f, j->model->name);
    fprintf(f, ", \"choices\": [{\"index\": 0, ");
    if (j->chat) {
        fprintf(f, chunk ? "\"delta\": {" : "\"message\": {");
        if (!chunk || first) fprintf(f, "\"role\": \"assistant\"%s", chunk && !len && finish ? "" : ", ");
        if (!chunk || len || !finish) {
            fprintf(f, "\"content\": ");
            json_str(f, text, len);
        }
        fprintf(f, "}, ");
    } else {
        fprintf(f, "\"text\": ");
        json_str(f, text, len);
        fprintf(f, ", \"logprobs\": null, ");
    }
    fprintf(f, "\"finish_reason\": ");
    if (finish) json_cstr(f, finish);
    else fputs("null", f);
    fprintf(f, "}]");
    if (usage) {
        fprintf(f, ", ");
        write_usage(f, j);
    }
    fprintf(f, "}");
}

/* Waits (under the model's mutex) until the job is over, or, when streaming, has bytes past `sent`;
   a client that has gone cancels its job. Returns 0 when the client is gone. */
static int wait_for_job(serve_conn *c, serve_job *j, size_t sent) {
    serve_model *m = j->model;
    while (j->state != JOB_DONE && (!j->stream || j->ready <= sent)) {
        timed_wait(&j->changed, &m->mu, 100);
        if (j->state != JOB_DONE && client_gone(c->fd)) {
            j->cancelled = 1;
            pthread_cond_broadcast(&m->work);
            return 0;
        }
    }
    return 1;
}

/* Cancels a job whose client left (queued: out of the queue now; active: its sequence freed before
   the next step) and drops the connection's reference. */
static void conn_drop_job(serve_conn *c) {
    serve_job *j = c->job;
    serve_model *m;
    if (!j) return;
    m = j->model;
    pthread_mutex_lock(&m->mu);
    if (j->state == JOB_QUEUED) {
        serve_job **p = &m->queue_head, *prev = NULL;
        while (*p && *p != j) prev = *p, p = &(*p)->next_queued;
        if (*p) {
            *p = j->next_queued;
            if (m->queue_tail == j) m->queue_tail = prev;
            m->n_queued--;
            m->users--;
            m->cancelled++;
            j->state = JOB_DONE;
            job_release_locked(j); /* the queue's reference */
        }
    } else if (j->state == JOB_ACTIVE) {
        j->cancelled = 1;
        pthread_cond_broadcast(&m->work);
    }
    job_release_locked(j);
    pthread_mutex_unlock(&m->mu);
    c->job = NULL;
}

/* libmicrohttpd pulls the stream from here, blocking until the scheduler has new text. */
static ssize_t stream_reader(void *cls, uint64_t pos, char *out, size_t max) {
    serve_conn *c = (serve_conn *)cls;
    serve_job *j = c->job;
    size_t n;
    (void)pos;
    while (c->out_pos >= c->out_len) {
        serve_buf b;
        serve_model *m;
        int first = c->sent == 0 && !c->stream_over, over;
        free(c->out);
        c->out = NULL, c->out_len = c->out_pos = 0;
        if (c->stream_over || !j) return MHD_CONTENT_READER_END_OF_STREAM;
        m = j->model;
        if (!buf_open(&b)) return MHD_CONTENT_READER_END_WITH_ERROR;
        pthread_mutex_lock(&m->mu);
        if (!wait_for_job(c, j, c->sent)) {
            pthread_mutex_unlock(&m->mu);
            free(buf_close(&b, NULL));
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        over = j->state == JOB_DONE && j->ready <= c->sent;
        if (j->ready > c->sent || first) {
            fprintf(b.f, "data: ");
            write_choice_object(b.f, j, j->text + c->sent, j->ready - c->sent, 1, NULL, 0, first);
            fprintf(b.f, "\n\n");
            c->sent = j->ready;
        }
        if (over) {
            if (j->http_status) {
                fprintf(b.f, "data: {\"error\": {\"type\": \"server_error\", \"message\": ");
                json_cstr(b.f, j->error);
                fprintf(b.f, ", \"code\": %d}}\n\n", j->http_status);
            } else {
                fprintf(b.f, "data: ");
                write_choice_object(b.f, j, "", 0, 1, j->finish, 1, 0);
                fprintf(b.f, "\n\ndata: [DONE]\n\n");
            }
            c->stream_over = 1;
        }
        pthread_mutex_unlock(&m->mu);
        if (!(c->out = buf_close(&b, &c->out_len))) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    n = c->out_len - c->out_pos < max ? c->out_len - c->out_pos : max;
    memcpy(out, c->out + c->out_pos, n);
    c->out_pos += n;
    return (ssize_t)n;
}

/* POST /v1/chat/completions and /v1/completions */
static enum MHD_Result handle_generate(serve_conn *c, struct MHD_Connection *connection, int chat) {
    serve_server *s = c->server;
    cJSON *root = NULL;
    const cJSON *v;
    const char *end = NULL;
    char why[SERVE_MESSAGE_BYTES], *text = NULL;
    size_t text_len = 0, n_ids = 0, i;
    serve_params p;
    serve_model *m = NULL;
    serve_refusal refusal;
    serve_job *j = NULL;
    int32_t *ids = NULL;
    enum MHD_Result ret;
    int status = 400, have_user = 0;
    const char *type = "invalid_request_error";
    memset(&p, 0, sizeof p);
    why[0] = 0;
    if (!json_depth_ok(c->body, c->body_len)) {
        snprintf(why, sizeof why, "the request nests deeper than %d levels", SERVE_MAX_DEPTH);
        goto refuse;
    }
    /* cJSON's strict mode wants the terminating NUL inside the length, so a NUL within the body is refused first */
    if (c->body && memchr(c->body, 0, c->body_len)) {
        snprintf(why, sizeof why, "the body holds a NUL byte (malformed JSON)");
        goto refuse;
    }
    root = cJSON_ParseWithLengthOpts(c->body ? c->body : "", c->body_len + 1, &end, 1);
    if (!root || !cJSON_IsObject(root)) {
        snprintf(why, sizeof why, "the body is not a JSON object%s", root ? "" : " (malformed JSON)");
        goto refuse;
    }
    if (!parse_params(root, &p, why, sizeof why)) goto refuse;
    v = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (v && !cJSON_IsNull(v) && !cJSON_IsString(v)) {
        snprintf(why, sizeof why, "'model' must be a string");
        goto refuse;
    }
    if (v && cJSON_IsString(v)) m = find_model(s, v->valuestring);
    else if (s->n_models == 1) m = &s->models[0];
    else {
        snprintf(why, sizeof why, "'model' is required: this server has %u models (GET /v1/models lists them)", s->n_models);
        goto refuse;
    }
    if (!m) {
        status = 404, type = "model_not_found";
        snprintf(why, sizeof why, "no model '%.200s' here (GET /v1/models lists them)", v->valuestring);
        goto refuse;
    }
    model_acquire(s, m, &refusal);
    if (refusal.status == 507) {
        ret = send_insufficient(c, connection, &refusal);
        goto done;
    }
    if (refusal.status) {
        status = refusal.status, type = refusal.status == 503 ? "server_busy" : "server_error";
        snprintf(why, sizeof why, "%s", refusal.message);
        goto refuse;
    }
    have_user = 1;
    if (chat) {
        if (!(text = render_messages(cJSON_GetObjectItemCaseSensitive(root, "messages"), m->format, &text_len, why, sizeof why)))
            goto refuse;
    } else {
        v = cJSON_GetObjectItemCaseSensitive(root, "prompt");
        if (!cJSON_IsString(v)) {
            snprintf(why, sizeof why, "'prompt' must be a string");
            goto refuse;
        }
        text_len = strlen(v->valuestring);
        if (!(text = strdup(v->valuestring))) goto oom;
    }
    /* chat text carries the template's special tokens; a plain prompt is text only */
    forge_tokenize(m->tok, text, text_len, forge_tokenizer_add_bos(m->tok), chat, NULL, 0, &n_ids, NULL);
    if (!(ids = (int32_t *)malloc((n_ids ? n_ids : 1) * sizeof *ids))) goto oom;
    if (forge_tokenize(m->tok, text, text_len, forge_tokenizer_add_bos(m->tok), chat, ids, n_ids, &n_ids, NULL) != FORGE_OK) goto oom;
    if (n_ids == 0) {
        snprintf(why, sizeof why, "the prompt is empty");
        goto refuse;
    }
    if (n_ids >= m->n_ctx) {
        snprintf(why, sizeof why, "the prompt is %zu tokens; a sequence holds %u positions, so at most %u prompt tokens leave room for one "
                 "generated token", n_ids, m->n_ctx, m->n_ctx - 1);
        goto refuse;
    }
    if (!p.has_max_tokens) p.max_tokens = m->n_ctx - (uint32_t)n_ids;
    if ((uint64_t)n_ids + p.max_tokens > m->n_ctx) {
        snprintf(why, sizeof why, "the prompt is %zu tokens and max_tokens is %u: %llu positions, above the %u a sequence holds "
                 "(max_tokens can be at most %u here)", n_ids, p.max_tokens, (unsigned long long)n_ids + p.max_tokens, m->n_ctx,
                 m->n_ctx - (uint32_t)n_ids);
        goto refuse;
    }
    if (!(j = (serve_job *)calloc(1, sizeof *j))) goto oom;
    pthread_cond_init(&j->changed, NULL);
    j->model = m, j->chat = chat, j->stream = p.stream, j->prompt = ids, j->n_prompt = (uint32_t)n_ids, j->max_tokens = p.max_tokens;
    ids = NULL;
    j->sampling = p.sampling;
    for (i = 0; i < p.n_stops; i++) j->stops[i] = p.stops[i], p.stops[i] = NULL;
    j->n_stops = p.n_stops;
    j->created = (long long)time(NULL);
    j->refs = 2; /* the connection's and the model's */
    pthread_mutex_lock(&m->mu);
    j->id = ++s->next_id;
    if (s->stopping || m->status != MODEL_READY || (m->busy + m->n_queued >= m->n_seq + s->queue_limit)) {
        int shutting = s->stopping || m->status != MODEL_READY;
        uint32_t busy = m->busy, queued = m->n_queued;
        j->refs = 1;
        job_release_locked(j);
        j = NULL;
        pthread_mutex_unlock(&m->mu);
        status = 503, type = "server_busy";
        if (shutting) snprintf(why, sizeof why, "model %s is not serving (the server is shutting down)", m->name);
        else
            snprintf(why, sizeof why, "all %u sequences of %s are busy and %u requests wait (the queue holds %u): retry later",
                     busy, m->name, queued, s->queue_limit);
        goto refuse;
    }
    if (m->queue_tail) m->queue_tail->next_queued = j;
    else m->queue_head = j;
    m->queue_tail = j;
    m->n_queued++;
    m->requests++;
    m->prompt_tokens += j->n_prompt;
    have_user = 0; /* the job holds it now, until its sequence is released */
    c->job = j;
    pthread_mutex_lock(&s->stats_mu);
    s->answering++, c->answering = 1;
    pthread_mutex_unlock(&s->stats_mu);
    pthread_cond_broadcast(&m->work);
    if (j->stream) {
        struct MHD_Response *r;
        pthread_mutex_unlock(&m->mu);
        r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, c, NULL);
        if (!r) {
            ret = MHD_NO;
            goto done;
        }
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        ret = MHD_queue_response(connection, 200, r);
        MHD_destroy_response(r);
        serve_count(s, 200);
        goto done;
    }
    if (!wait_for_job(c, j, 0)) {
        pthread_mutex_unlock(&m->mu);
        ret = MHD_NO;
        goto done;
    }
    if (j->http_status) {
        status = j->http_status == 499 ? 500 : j->http_status, type = "server_error";
        snprintf(why, sizeof why, "%s", j->error);
        pthread_mutex_unlock(&m->mu);
        goto refuse;
    } else {
        serve_buf b;
        char *body;
        size_t len = 0;
        if (!buf_open(&b)) {
            pthread_mutex_unlock(&m->mu);
            goto oom;
        }
        write_choice_object(b.f, j, j->text ? j->text : "", j->text_len, 0, j->finish, 1, 1);
        fputc('\n', b.f);
        pthread_mutex_unlock(&m->mu);
        body = buf_close(&b, &len);
        ret = serve_send(c, connection, 200, "application/json", body, len, NULL, NULL);
        goto done;
    }
oom:
    status = 500, type = "server_error";
    snprintf(why, sizeof why, "out of memory");
refuse:
    ret = serve_error(c, connection, status, type, why);
done:
    if (have_user) model_drop_user(m);
    for (i = 0; i < p.n_stops; i++) free(p.stops[i]);
    free(ids);
    free(text);
    cJSON_Delete(root);
    return ret;
}

/* ---- GET endpoints ---------------------------------------------------------------------------- */

static enum MHD_Result handle_models(serve_conn *c, struct MHD_Connection *connection) {
    serve_server *s = c->server;
    serve_buf b;
    uint32_t i;
    char *body;
    size_t len = 0;
    if (!buf_open(&b)) return serve_send(c, connection, 500, "application/json", NULL, 0, NULL, NULL);
    fprintf(b.f, "{\"object\": \"list\", \"data\": [");
    for (i = 0; i < s->n_models; i++) {
        fprintf(b.f, "%s{\"id\": ", i ? ", " : "");
        json_cstr(b.f, s->models[i].name);
        fprintf(b.f, ", \"object\": \"model\", \"created\": 0, \"owned_by\": \"forge\"}");
    }
    fprintf(b.f, "]}\n");
    body = buf_close(&b, &len);
    return serve_send(c, connection, 200, "application/json", body, len, NULL, NULL);
}

/* The truth: ready only while no model has failed and none is loading; 503 otherwise. */
static enum MHD_Result handle_health(serve_conn *c, struct MHD_Connection *connection) {
    serve_server *s = c->server;
    serve_buf b;
    uint32_t i;
    char *body;
    size_t len = 0;
    int failed = 0, loading = 0;
    if (!buf_open(&b)) return serve_send(c, connection, 500, "application/json", NULL, 0, NULL, NULL);
    fprintf(b.f, "\"models\": [");
    for (i = 0; i < s->n_models; i++) {
        serve_model *m = &s->models[i];
        pthread_mutex_lock(&m->mu);
        /* a model given with -m that is not loaded has failed, whatever the reason */
        failed |= m->status == MODEL_FAILED || (m->preload && m->status == MODEL_UNLOADED);
        loading |= m->status == MODEL_LOADING;
        fprintf(b.f, "%s{\"id\": ", i ? ", " : "");
        json_cstr(b.f, m->name);
        fprintf(b.f, ", \"status\": \"%s\", \"reason\": ",
                m->preload && m->status == MODEL_UNLOADED ? "failed" : model_status_names[m->status]);
        if (m->reason[0]) json_cstr(b.f, m->reason);
        else fputs("null", b.f);
        fprintf(b.f, ", \"sequences\": %u, \"busy\": %u, \"queued\": %u}", m->status == MODEL_READY ? m->n_seq : 0, m->busy,
                m->n_queued);
        pthread_mutex_unlock(&m->mu);
    }
    fprintf(b.f, "], \"budget_bytes\": %llu}\n", (unsigned long long)s->budget_bytes);
    body = buf_close(&b, &len);
    if (body) { /* the status goes first: prepend it */
        const char *status = s->stopping ? "stopping" : failed ? "failed" : loading ? "loading" : "ready";
        size_t head = strlen(status) + 16;
        char *whole = (char *)malloc(head + len + 1);
        if (whole) snprintf(whole, head + len + 1, "{\"status\": \"%s\", %s", status, body);
        free(body);
        body = whole, len = whole ? strlen(whole) : 0;
        return serve_send(c, connection, !strcmp(status, "ready") ? 200 : 503, "application/json", body, len, NULL, NULL);
    }
    return serve_send(c, connection, 500, "application/json", NULL, 0, NULL, NULL);
}

static void metric_model(FILE *f, const char *name, const char *model, double value) {
    fprintf(f, "%s{model=", name);
    json_cstr(f, model); /* a Prometheus label value escapes like a JSON string for the names forge gives */
    fprintf(f, "} %.17g\n", value);
}

static enum MHD_Result handle_metrics(serve_conn *c, struct MHD_Connection *connection) {
    serve_server *s = c->server;
    serve_buf b;
    uint32_t i;
    int k;
    char *body;
    size_t len = 0;
    static const struct {
        const char *name, *type, *help;
    } families[] = {
        {"forge_requests_total", "counter", "generation requests accepted into a model's queue"},
        {"forge_requests_cancelled_total", "counter", "requests whose client went away before the end"},
        {"forge_requests_refused_memory_total", "counter", "loads refused with 507: the plan did not fit"},
        {"forge_prompt_tokens_total", "counter", "prompt tokens evaluated"},
        {"forge_tokens_generated_total", "counter", "tokens generated"},
        {"forge_step_seconds_total", "counter", "seconds the scheduler spent in steps (evaluation and sampling)"},
        {"forge_tokens_per_second", "gauge", "tokens generated per second of steps, since the start"},
        {"forge_sequences_busy", "gauge", "sequences generating now"},
        {"forge_sequences", "gauge", "sequence slots of the loaded context"},
        {"forge_requests_queued", "gauge", "requests waiting for a sequence"},
        {"forge_model_loaded", "gauge", "1 while the model's context is allocated"},
        {"forge_model_planned_bytes", "gauge", "the plan's total bytes for the loaded context"},
        {"forge_model_arena_bytes", "gauge", "bytes the context really allocated (CPU: without the mapped weights)"},
    };
    if (!buf_open(&b)) return serve_send(c, connection, 500, "text/plain", NULL, 0, NULL, NULL);
    fprintf(b.f, "# HELP forge_http_responses_total HTTP responses by status\n# TYPE forge_http_responses_total counter\n");
    pthread_mutex_lock(&s->stats_mu);
    for (k = 0; k < SERVE_STATUS_CODES && serve_codes[k]; k++)
        fprintf(b.f, "forge_http_responses_total{code=\"%d\"} %llu\n", serve_codes[k], (unsigned long long)s->responses[k]);
    fprintf(b.f, "forge_http_responses_total{code=\"other\"} %llu\n", (unsigned long long)s->responses[k]);
    pthread_mutex_unlock(&s->stats_mu);
    fprintf(b.f, "# HELP forge_budget_bytes memory the server's models may plan together\n# TYPE forge_budget_bytes gauge\n"
                 "forge_budget_bytes %llu\n", (unsigned long long)s->budget_bytes);
    for (k = 0; k < (int)(sizeof families / sizeof families[0]); k++) {
        fprintf(b.f, "# HELP %s %s\n# TYPE %s %s\n", families[k].name, families[k].help, families[k].name, families[k].type);
        for (i = 0; i < s->n_models; i++) {
            serve_model *m = &s->models[i];
            double v = 0.0;
            pthread_mutex_lock(&m->mu);
            switch (k) {
            case 0: v = (double)m->requests; break;
            case 1: v = (double)m->cancelled; break;
            case 2: v = (double)m->refused; break;
            case 3: v = (double)m->prompt_tokens; break;
            case 4: v = (double)m->generated_tokens; break;
            case 5: v = m->step_seconds; break;
            case 6: v = m->step_seconds > 0 ? (double)m->generated_tokens / m->step_seconds : 0.0; break;
            case 7: v = m->busy; break;
            case 8: v = m->status == MODEL_READY ? m->n_seq : 0; break;
            case 9: v = m->n_queued; break;
            case 10: v = m->status == MODEL_READY; break;
            case 11: v = (double)m->planned_bytes; break;
            default: v = (double)m->arena_bytes; break;
            }
            pthread_mutex_unlock(&m->mu);
            metric_model(b.f, families[k].name, m->name, v);
        }
    }
    body = buf_close(&b, &len);
    return serve_send(c, connection, 200, "text/plain; version=0.0.4", body, len, NULL, NULL);
}

/* ---- libmicrohttpd callbacks ------------------------------------------------------------------- */

static enum MHD_Result serve_access(void *cls, struct MHD_Connection *connection, const char *url, const char *method,
                                    const char *version, const char *upload_data, size_t *upload_data_size, void **con_cls) {
    serve_server *s = (serve_server *)cls;
    serve_conn *c = (serve_conn *)*con_cls;
    int post = !strcmp(method, "POST"), get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    int chat = !strcmp(url, "/v1/chat/completions"), completion = !strcmp(url, "/v1/completions");
    (void)version;
    if (!c) { /* the headers have arrived: the body, if any, comes in the next calls */
        const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!(c = (serve_conn *)calloc(1, sizeof *c))) return MHD_NO;
        c->server = s;
        c->fd = info ? info->connect_fd : -1;
        *con_cls = c;
        return MHD_YES;
    }
    if (*upload_data_size) { /* a piece of the body; past the limit it is read and dropped */
        size_t n = *upload_data_size;
        if (!c->too_big && c->body_len + n > s->max_body) {
            c->too_big = 1;
            free(c->body);
            c->body = NULL, c->body_len = c->body_cap = 0;
        }
        if (!c->too_big) {
            if (c->body_len + n + 1 > c->body_cap) {
                size_t cap = c->body_cap ? c->body_cap : 4096;
                char *grown;
                while (cap < c->body_len + n + 1) cap *= 2;
                if (!(grown = (char *)realloc(c->body, cap))) return MHD_NO;
                c->body = grown, c->body_cap = cap;
            }
            memcpy(c->body + c->body_len, upload_data, n);
            c->body_len += n;
            c->body[c->body_len] = 0;
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (c->seen) return MHD_YES; /* the response is queued already */
    c->seen = 1;
    if (chat || completion) {
        char why[128];
        if (!post) return serve_error(c, connection, 405, "method_not_allowed", "this path answers POST only");
        if (c->too_big) {
            snprintf(why, sizeof why, "the body is larger than the limit of %u bytes (--max-body)", s->max_body);
            return serve_error(c, connection, 413, "request_too_large", why);
        }
        return handle_generate(c, connection, chat);
    }
    if (!strcmp(url, "/v1/models") || !strcmp(url, "/health") || !strcmp(url, "/metrics")) {
        if (!get) return serve_error(c, connection, 405, "method_not_allowed", "this path answers GET only");
        if (url[1] == 'v') return handle_models(c, connection);
        if (url[1] == 'h') return handle_health(c, connection);
        return handle_metrics(c, connection);
    }
    return serve_error(c, connection, 404, "not_found", "no such path: forge serve answers /v1/chat/completions, /v1/completions, "
                                                        "/v1/models, /health and /metrics");
}

/* The end of a request, answered or not: a job still going on is cancelled. */
static void serve_completed(void *cls, struct MHD_Connection *connection, void **con_cls, enum MHD_RequestTerminationCode toe) {
    serve_conn *c = (serve_conn *)*con_cls;
    (void)connection, (void)toe;
    if (!c) return;
    if (c->answering) {
        serve_server *s = (serve_server *)cls;
        pthread_mutex_lock(&s->stats_mu);
        s->answering--;
        pthread_mutex_unlock(&s->stats_mu);
    }
    conn_drop_job(c);
    free(c->body);
    free(c->out);
    free(c);
    *con_cls = NULL;
}

/* ---- forge serve ------------------------------------------------------------------------------- */

#define SERVE_USAGE \
    "usage: forge serve (-m FILE | --models DIR) [options]\n" \
    "  an HTTP server speaking the OpenAI API: POST /v1/chat/completions, POST /v1/completions (both with\n" \
    "  \"stream\": true as server-sent events), GET /v1/models, GET /health, GET /metrics (Prometheus text).\n" \
    "  A model whose plan does not fit the budget is refused with 507 and its numbers, nothing allocated.\n" \
    "  SIGINT or SIGTERM: stop accepting, end the requests, free every model, exit 0.\n" \
    "  -m, --model FILE      a GGUF model, loaded at startup (may be given more than once); its name is the\n" \
    "                        file name without .gguf\n" \
    "  --models DIR          every .gguf file in DIR, each loaded on its first request; several stay loaded\n" \
    "                        while their plans fit the budget, the least recently used idle one unloaded first\n" \
    "  --host ADDR           IPv4 address to listen on; default 127.0.0.1\n" \
    "  --port N              TCP port, [0, 65535]; default 8080; 0 = any free port (printed on stderr)\n" \
    "  --queue N             requests waiting per model once every sequence is busy, [0, 65536]; default 64;\n" \
    "                        past it, 503 with Retry-After\n" \
    "  --max-body SIZE       largest request body (e.g. 1M); default 1M; past it, 413\n" CONTEXT_OPTIONS_HELP \
    "  -h, --help            this text\n" \
    "  The memory budget is --mem-fraction of the memory free at startup (less --headroom), shared by\n" \
    "  every loaded model; each model's context has --seqs sequences (default 4 here) of --ctx positions.\n" \
    "  --on-budget warn is refused: a server answers 507 instead.\n"

static int serve_add_model(serve_server *s, const char *path) {
    serve_model *m;
    const char *base = strrchr(path, '/');
    size_t len;
    if (s->n_models == SERVE_MAX_MODELS) {
        fprintf(stderr, "forge serve: at most %d models\n", SERVE_MAX_MODELS);
        return 0;
    }
    m = &s->models[s->n_models];
    base = base ? base + 1 : path;
    len = strlen(base);
    if (len > 5 && !strcmp(base + len - 5, ".gguf")) len -= 5;
    if (len >= sizeof m->name || strlen(path) >= sizeof m->path) {
        fprintf(stderr, "forge serve: the path '%s' is too long\n", path);
        return 0;
    }
    if (len == 0) len = strlen(base);
    memcpy(m->name, base, len);
    m->name[len] = 0;
    if (find_model(s, m->name)) {
        fprintf(stderr, "forge serve: two models are named '%s'\n", m->name);
        memset(m->name, 0, sizeof m->name);
        return 0;
    }
    snprintf(m->path, sizeof m->path, "%s", path);
    m->server = s;
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->work, NULL);
    s->n_models++;
    return 1;
}

static int name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int serve_add_dir(serve_server *s, const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    char *names[SERVE_MAX_MODELS];
    size_t n = 0, k;
    int ok = 1;
    if (!d) {
        fprintf(stderr, "forge serve: cannot open the folder '%s': %s\n", dir, strerror(errno));
        return 0;
    }
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len <= 5 || strcmp(e->d_name + len - 5, ".gguf") || e->d_name[0] == '.') continue;
        if (n == SERVE_MAX_MODELS) {
            fprintf(stderr, "forge serve: '%s' holds more than %d models\n", dir, SERVE_MAX_MODELS);
            ok = 0;
            break;
        }
        if (!(names[n] = (char *)malloc(strlen(dir) + len + 2))) {
            ok = 0;
            break;
        }
        sprintf(names[n++], "%s/%s", dir, e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, name_cmp);
    for (k = 0; k < n; k++) {
        if (ok) ok = serve_add_model(s, names[k]);
        free(names[k]);
    }
    if (ok && n == 0) {
        fprintf(stderr, "forge serve: no .gguf file in '%s'\n", dir);
        ok = 0;
    }
    return ok;
}

static int cmd_serve(int argc, char **argv) {
    static serve_server server; /* large (the model table); one per process */
    serve_server *s = &server;
    const char *host = "127.0.0.1", *dir = NULL;
    const char *files[SERVE_MAX_MODELS];
    uint32_t n_files = 0, port = 8080, i;
    uint64_t max_body = SERVE_MAX_BODY_DEFAULT;
    int bad = 0, sig = 0, status = 1;
    double t_stop;
    struct sockaddr_in addr;
    struct MHD_Daemon *daemon = NULL;
    const union MHD_DaemonInfo *info;
    sigset_t signals;
    forge_error err;
    if (wants_help(argc, argv)) {
        fputs(SERVE_USAGE, stdout);
        return 0;
    }
    memset(s, 0, sizeof *s);
    s->queue_limit = 64;
    if (!context_defaults(&s->desc)) return 1;
    s->desc.n_seq = 4;
    for (i = 0; i < (uint32_t)argc; i++) {
        int k = (int)i;
        if (context_option(argc, argv, &k, &s->desc, &bad)) {
            i = (uint32_t)k;
            continue;
        }
        if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && i + 1 < (uint32_t)argc) {
            if (n_files < SERVE_MAX_MODELS) files[n_files++] = argv[++i];
            else bad = 1, i++;
        } else if (!strcmp(argv[i], "--models") && i + 1 < (uint32_t)argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--host") && i + 1 < (uint32_t)argc) host = argv[++i];
        else if (!strcmp(argv[i], "--port") && i + 1 < (uint32_t)argc) bad |= !parse_u32_in(argv[++i], "--port", 0, 65535, &port);
        else if (!strcmp(argv[i], "--queue") && i + 1 < (uint32_t)argc)
            bad |= !parse_u32_in(argv[++i], "--queue", 0, 65536, &s->queue_limit);
        else if (!strcmp(argv[i], "--max-body") && i + 1 < (uint32_t)argc) bad |= !parse_size(argv[++i], "--max-body", &max_body);
        else {
            fprintf(stderr, "forge serve: unexpected '%s'\n", argv[i]);
            bad = 1;
        }
    }
    if (bad || (!n_files && !dir)) return usage_error("serve", SERVE_USAGE);
    if (s->desc.policy == FORGE_BUDGET_WARN) {
        fprintf(stderr, "forge serve: --on-budget warn is not for a server: a model over the budget is refused with 507\n");
        return 1;
    }
    if (max_body < 2 || max_body > (1u << 30)) {
        fprintf(stderr, "forge serve: --max-body must be between 2 bytes and 1G\n");
        return 1;
    }
    s->max_body = (uint32_t)max_body;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, !strcmp(host, "localhost") ? "127.0.0.1" : host, &addr.sin_addr) != 1) {
        fprintf(stderr, "forge serve: --host '%s' is not an IPv4 address\n", host);
        return 1;
    }
    for (i = 0; i < n_files; i++) {
        if (!serve_add_model(s, files[i])) return 1;
        s->models[i].preload = 1;
    }
    if (dir && !serve_add_dir(s, dir)) return 1;
    /* the budget: the plan's rule (fraction of free memory less headroom), read once for every model */
    if ((s->desc.backend == FORGE_BACKEND_GPU || (s->desc.backend == FORGE_BACKEND_AUTO && forge_gpu_available()))
            ? forge_memory_query_gpu(s->desc.device, &s->memory, &err) != FORGE_OK
            : forge_memory_query_cpu(&s->memory, &err) != FORGE_OK) {
        fprintf(stderr, "forge serve: %s\n", err.message);
        return 1;
    }
    {
        double fraction = s->desc.mem_fraction > 0 ? s->desc.mem_fraction : 0.70;
        double budget = (double)s->memory.free_bytes * fraction - (double)s->desc.mem_headroom_bytes;
        s->budget_bytes = budget > 0 ? (uint64_t)budget : 0;
    }
    pthread_mutex_init(&s->load_mu, NULL);
    pthread_mutex_init(&s->stats_mu, NULL);
    /* the signals are taken by sigwait below: every thread started from here on has them blocked */
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals, NULL);
    signal(SIGPIPE, SIG_IGN);
    for (i = 0; i < n_files; i++) { /* -m models load now; a refusal leaves the server up and /health saying why */
        serve_refusal r;
        pthread_mutex_lock(&s->load_mu);
        model_load(s, &s->models[i], &r);
        pthread_mutex_unlock(&s->load_mu);
    }
    daemon = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC, (uint16_t)port, NULL,
                              NULL, serve_access, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED,
                              serve_completed, s, MHD_OPTION_CONNECTION_LIMIT, (unsigned int)1024, MHD_OPTION_CONNECTION_TIMEOUT,
                              (unsigned int)600, MHD_OPTION_END);
    if (!daemon) {
        fprintf(stderr, "forge serve: cannot listen on %s:%u (in use, or not an address of this machine)\n", host, port);
        goto shutdown;
    }
    info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    fprintf(stderr, "forge serve: listening on http://%s:%u (%u model%s, budget %llu bytes)\n", host,
            info ? (unsigned)info->port : port, s->n_models, s->n_models == 1 ? "" : "s", (unsigned long long)s->budget_bytes);
    if (sigwait(&signals, &sig) != 0) sig = 0;
    fprintf(stderr, "forge serve: %s: stopping\n", sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "signal");
    status = 0;
shutdown:
    s->stopping = 1;
    if (daemon) MHD_quiesce_daemon(daemon);
    /* the schedulers end every job (waiting connections wake and answer), then the connections close */
    pthread_mutex_lock(&s->load_mu);
    for (i = 0; i < s->n_models; i++)
        if (s->models[i].thread_started || s->models[i].ctx) model_unload(&s->models[i]);
    pthread_mutex_unlock(&s->load_mu);
    /* every job has ended; the requests' threads still write their last bytes (a stream's error
       event): stopping the daemon closes their sockets, so it waits for them, 5 s at most (a client
       that does not read) */
    for (t_stop = serve_now(); daemon && serve_now() - t_stop < 5.0;) {
        uint32_t left;
        pthread_mutex_lock(&s->stats_mu);
        left = s->answering;
        pthread_mutex_unlock(&s->stats_mu);
        if (!left) break;
        nanosleep(&(struct timespec){0, 10000000L}, NULL);
    }
    if (daemon) MHD_stop_daemon(daemon);
    for (i = 0; i < s->n_models; i++) {
        pthread_mutex_destroy(&s->models[i].mu);
        pthread_cond_destroy(&s->models[i].work);
    }
    pthread_mutex_destroy(&s->load_mu);
    pthread_mutex_destroy(&s->stats_mu);
    fprintf(stderr, "forge serve: stopped, every model freed\n");
    return status;
}
