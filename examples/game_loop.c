/* game_loop.c: a model that talks while the application keeps running. Each frame asks the
   generator for one step: a bounded piece of work (one batch of the prompt, or one new token), so
   the frame loop never stalls on the whole answer. A real game would draw here; this loop counts
   frames, shows the text as it streams, and reports the longest step, the number that decides
   whether a frame budget (16.7 ms at 60 frames per second) holds.

   The prompt batch is kept small (desc.n_batch) so that reading a long prompt is also spread over
   frames. forge allocates everything when the context is created; no step allocates.

   build: cc -std=c99 -O2 examples/game_loop.c -o game_loop -lm -pthread
   run:   ./game_loop model.gguf "Greet the traveller who just entered the tavern." */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#define FORGE_IMPLEMENTATION
#include "../forge.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double seconds(void) { /* wall time, as a frame sees it */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    forge_model *model = NULL;
    forge_tokenizer *tok = NULL;
    forge_context *ctx = NULL;
    forge_generator *gen = NULL;
    forge_context_desc desc;
    forge_sampler_desc sampler;
    forge_error error;
    forge_chat_message message;
    char prompt[2048];
    size_t len = 0;
    double longest = 0.0, total = 0.0;
    int frame, tokens = 0, status = 1;

    if (argc != 3) {
        fprintf(stderr, "usage: %s MODEL.gguf LINE\n", argv[0]);
        return 1;
    }
    memset(&desc, 0, sizeof desc);
    desc.n_ctx = 1024;
    desc.n_batch = 16; /* at most 16 prompt tokens per frame */
    memset(&sampler, 0, sizeof sampler);
    sampler.temperature = 0.7f;
    sampler.top_p = 0.9f;
    sampler.seed = 42; /* same seed, same words */
    if (forge_model_open(argv[1], NULL, &model, &error) != FORGE_OK ||
        forge_tokenizer_create(forge_model_gguf(model), NULL, &tok, &error) != FORGE_OK ||
        forge_context_create(model, &desc, &ctx, &error) != FORGE_OK ||
        forge_generator_create(ctx, tok, &sampler, &gen, &error) != FORGE_OK) {
        fprintf(stderr, "%s\n", error.message);
        goto done;
    }
    message.role = "user";
    message.content = argv[2];
    if (forge_chat_render(forge_chat_detect(forge_model_gguf(model)), &message, 1, 1, prompt, sizeof prompt, &len, &error) !=
            FORGE_OK ||
        forge_generator_prompt(gen, prompt, len, 1, &error) != FORGE_OK) {
        fprintf(stderr, "%s\n", error.message);
        goto done;
    }
    for (frame = 0; frame < 2000; frame++) {
        forge_step step;
        double start = seconds(), spent;
        /* ... the game updates and draws its frame here ... */
        if (forge_generator_step(gen, &step, &error) != FORGE_OK) {
            fprintf(stderr, "\n%s\n", error.message);
            goto done;
        }
        spent = seconds() - start;
        total += spent;
        if (spent > longest) longest = spent;
        if (step.token >= 0) tokens++;
        fwrite(step.text, 1, step.text_len, stdout);
        fflush(stdout);
        if (step.done) break;
    }
    printf("\n[%d frames, %d tokens, longest step %.1f ms, average %.1f ms]\n", frame + 1, tokens, longest * 1000.0,
           total * 1000.0 / (frame + 1));
    status = 0;
done:
    forge_generator_destroy(gen);
    forge_context_destroy(ctx);
    forge_tokenizer_destroy(tok);
    forge_model_close(model);
    return status;
}
