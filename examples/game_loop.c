/* game_loop.c: several characters of a game talking at once, on one copy of the model. The context
   holds one sequence slot per character (desc.n_seq): the weights once, a KV cache for each. Every
   frame does one bounded step: the characters still reading their prompt put a few of its tokens in
   the step, the others one new token each, and forge_eval_batch evaluates all of them together (each
   weight read once for the whole step). Each character has its own sampler, so each its own voice.
   A character that has finished waits a few frames and then gets a new line to answer: its slot is
   reset and reused while the others go on talking. Nothing is allocated after the context is made.

   The frame loop reports the longest step, the number that decides whether a frame budget (16.7 ms
   at 60 frames per second) holds; desc.n_batch bounds the rows of a step and so its cost.

   build: cc -std=c99 -O2 examples/game_loop.c -o game_loop -lm -pthread
   run:   ./game_loop model.gguf */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#define FORGE_IMPLEMENTATION
#include "../forge.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHARACTERS 3
#define MAX_TOKENS 512  /* a character's prompt, tokenized */
#define MAX_REPLY 48    /* tokens a character says before it stops */
#define PROMPT_CHUNK 8  /* prompt tokens a character reads per frame */

typedef struct character {
    const char *name, *persona;
    const char *lines[2]; /* what the player says to them, one after the other */
    float temperature;
    forge_sampler *sampler;
    forge_detokenizer detok;
    int32_t prompt[MAX_TOKENS];
    size_t n_prompt, read;  /* prompt tokens, and how many are in the cache */
    int32_t next;           /* the token to evaluate next frame, -1 when none */
    int said, turn, wait;   /* tokens said this turn, the player's line answered, frames to wait */
    char reply[1024];
    size_t reply_len;
} character;

static double seconds(void) { /* wall time, as a frame sees it */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The character's next line as a chat prompt, tokenized; its sequence starts again empty. */
static int start_turn(character *c, forge_context *ctx, uint32_t seq, const forge_tokenizer *tok, forge_chat_format fmt,
                      forge_error *error) {
    forge_chat_message m[2];
    char text[2048];
    size_t len = 0;
    m[0].role = "system", m[0].content = c->persona;
    m[1].role = "user", m[1].content = c->lines[c->turn];
    if (forge_seq_reset(ctx, seq, error) != FORGE_OK ||
        forge_chat_render(fmt, m, 2, 1, text, sizeof text, &len, error) != FORGE_OK ||
        forge_tokenize(tok, text, len, 1, 1, c->prompt, MAX_TOKENS, &c->n_prompt, error) != FORGE_OK)
        return 0;
    forge_sampler_reset(c->sampler);
    forge_detokenizer_init(&c->detok, tok, 0);
    c->read = 0, c->next = -1, c->said = 0, c->reply_len = 0;
    return 1;
}

int main(int argc, char **argv) {
    character cast[CHARACTERS] = {
        {"Innkeeper", "You are Marta, the gruff but kind innkeeper of the Rusty Flagon. Answer in one or two sentences.",
         {"Do you have a room for the night?", "What is the news from the capital?"}, 0.7f, NULL, {0}, {0}, 0, 0, 0, 0, 0, 0, {0}, 0},
        {"Blacksmith", "You are Doran, a blacksmith who loves his craft and talks about steel. Answer in one or two sentences.",
         {"Can you mend my sword?", "Which metal makes the best armour?"}, 0.9f, NULL, {0}, {0}, 0, 0, 0, 0, 0, 0, {0}, 0},
        {"Bard", "You are Lyra, a cheerful bard who speaks in a playful way. Answer in one or two sentences.",
         {"Sing me something about the sea.", "Who is the bravest hero you know?"}, 1.0f, NULL, {0}, {0}, 0, 0, 0, 0, 0, 0, {0}, 0},
    };
    forge_model *model = NULL;
    forge_tokenizer *tok = NULL;
    forge_context *ctx = NULL;
    forge_context_desc desc;
    forge_verdict verdict;
    forge_error error;
    forge_chat_format fmt;
    double longest = 0.0, total = 0.0;
    int frame, status = 1, done = 0, i;

    if (argc != 2) {
        fprintf(stderr, "usage: %s MODEL.gguf\n", argv[0]);
        return 1;
    }
    memset(&desc, 0, sizeof desc);
    desc.n_seq = CHARACTERS; /* one sequence slot per character */
    desc.n_ctx = 512;        /* positions of each character's conversation */
    desc.n_batch = 32;       /* rows of one frame's step, at most */
    if (forge_model_open(argv[1], NULL, &model, &error) != FORGE_OK ||
        forge_tokenizer_create(forge_model_gguf(model), NULL, &tok, &error) != FORGE_OK ||
        forge_plan_check(model, &desc, &verdict, &error) != FORGE_OK) {
        fprintf(stderr, "%s\n", error.message);
        goto out;
    }
    printf("[%s]\n", verdict.message); /* the plan, once: weights once, a KV cache per character */
    if (forge_context_create(model, &desc, &ctx, &error) != FORGE_OK) {
        fprintf(stderr, "%s\n", error.message);
        goto out;
    }
    fmt = forge_chat_detect(forge_model_gguf(model));
    for (i = 0; i < CHARACTERS; i++) {
        forge_sampler_desc s;
        memset(&s, 0, sizeof s);
        s.temperature = cast[i].temperature;
        s.top_p = 0.9f;
        s.seed = 42 + (uint64_t)i; /* same seeds, same words */
        if (forge_sampler_create(&s, forge_model_config(model)->n_vocab, &cast[i].sampler, &error) != FORGE_OK ||
            !start_turn(&cast[i], ctx, (uint32_t)i, tok, fmt, &error)) {
            fprintf(stderr, "%s\n", error.message);
            goto out;
        }
    }
    for (frame = 0; frame < 5000 && done < 2 * CHARACTERS; frame++) {
        int32_t tokens[32];
        uint32_t seq[32], n = 0;
        double start = seconds(), spent;
        forge_batch batch;
        /* ... the game updates and draws its frame here ... */
        for (i = 0; i < CHARACTERS; i++) { /* what each character puts in this frame's step */
            character *c = &cast[i];
            if (c->wait > 0 && --c->wait == 0 && !start_turn(c, ctx, (uint32_t)i, tok, fmt, &error)) goto fail;
            if (c->wait > 0 || c->turn >= 2) continue;
            if (c->read < c->n_prompt) { /* reading the prompt, a chunk a frame */
                size_t k;
                for (k = 0; k < PROMPT_CHUNK && c->read < c->n_prompt; k++) {
                    forge_sampler_accept(c->sampler, c->prompt[c->read]);
                    tokens[n] = c->prompt[c->read++], seq[n++] = (uint32_t)i;
                }
            } else if (c->next >= 0) {
                tokens[n] = c->next, seq[n++] = (uint32_t)i;
            }
        }
        if (n > 0) {
            batch.tokens = tokens, batch.seq = seq, batch.n_tokens = n;
            if (forge_eval_batch(ctx, &batch, &error) != FORGE_OK) goto fail;
        }
        for (i = 0; i < CHARACTERS; i++) { /* each character that was in the step draws its next token */
            character *c = &cast[i];
            int32_t t;
            size_t got = 0;
            char piece[256];
            if (c->wait > 0 || c->turn >= 2 || c->read < c->n_prompt || !forge_seq_logits(ctx, (uint32_t)i)) continue;
            if (forge_seq_sample(ctx, (uint32_t)i, c->sampler, &t, &error) != FORGE_OK) goto fail;
            forge_sampler_accept(c->sampler, t);
            c->said++;
            if (!forge_tokenizer_is_eog(tok, t) && c->said < MAX_REPLY && forge_seq_pos(ctx, (uint32_t)i) + 1 < desc.n_ctx) {
                if (forge_detokenizer_push(&c->detok, t, piece, sizeof piece, &got, &error) != FORGE_OK) goto fail;
                if (c->reply_len + got < sizeof c->reply) memcpy(c->reply + c->reply_len, piece, got), c->reply_len += got;
                c->next = t;
                continue;
            }
            c->next = -1; /* the turn ends: say it, then wait for the player's next line */
            printf("%-10s (frame %4d) > %s\n%-10s (frame %4d) < %.*s\n", "Player", frame, c->lines[c->turn], c->name, frame,
                   (int)c->reply_len, c->reply);
            fflush(stdout);
            c->turn++, done++;
            c->wait = c->turn < 2 ? 10 + 5 * i : 0;
        }
        spent = seconds() - start;
        total += spent;
        if (spent > longest) longest = spent;
    }
    printf("[%d frames, longest step %.1f ms, average %.1f ms]\n", frame, longest * 1000.0, total * 1000.0 / (frame ? frame : 1));
    status = 0;
    goto out;
fail:
    fprintf(stderr, "%s\n", error.message);
out:
    for (i = 0; i < CHARACTERS; i++) forge_sampler_destroy(cast[i].sampler);
    forge_context_destroy(ctx);
    forge_tokenizer_destroy(tok);
    forge_model_close(model);
    return status;
}
