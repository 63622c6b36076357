/* generate.c: the smallest complete forge program. It opens a model, plans its memory and checks
   the plan against the budget before anything is allocated, then answers one prompt.

   forge_context_create refuses with FORGE_ERR_BUDGET (and a message that says what would fit) when
   the model does not fit in 70% of free memory; nothing is allocated in that case. The prompt is
   wrapped in the model's chat format when forge recognizes one (ChatML, Llama 3, Gemma).

   build: cc -std=c99 -O2 examples/generate.c -o generate -lm -pthread
   run:   ./generate model.gguf "Why is the sky blue?" */
#define FORGE_IMPLEMENTATION
#include "../forge.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    forge_model *model = NULL;
    forge_tokenizer *tok = NULL;
    forge_context *ctx = NULL;
    forge_generator *gen = NULL;
    forge_context_desc desc;
    forge_error error;
    forge_chat_message message;
    forge_chat_format format;
    char *prompt = NULL;
    size_t needed = 0, len = 0;
    int steps, status = 1;

    if (argc != 3) {
        fprintf(stderr, "usage: %s MODEL.gguf PROMPT\n", argv[0]);
        return 1;
    }
    memset(&desc, 0, sizeof desc); /* zero means default: 4096 positions, f16 KV cache, 70% budget */
    desc.n_ctx = 2048;
    if (forge_model_open(argv[1], NULL, &model, &error) != FORGE_OK ||
        forge_tokenizer_create(forge_model_gguf(model), NULL, &tok, &error) != FORGE_OK ||
        forge_context_create(model, &desc, &ctx, &error) != FORGE_OK ||
        forge_generator_create(ctx, tok, NULL, &gen, &error) != FORGE_OK) { /* NULL sampler: greedy */
        fprintf(stderr, "%s\n", error.message);
        goto done;
    }
    printf("[memory: %llu bytes planned, %llu in the arena]\n", (unsigned long long)forge_context_plan(ctx)->total_bytes,
           (unsigned long long)forge_context_arena_bytes(ctx));

    format = forge_chat_detect(forge_model_gguf(model));
    message.role = "user";
    message.content = argv[2];
    forge_chat_render(format, &message, 1, 1, NULL, 0, &needed, NULL); /* ask for the size first */
    prompt = (char *)malloc(needed + 1);
    if (!prompt || forge_chat_render(format, &message, 1, 1, prompt, needed, &len, &error) != FORGE_OK ||
        forge_generator_prompt(gen, prompt, len, 1, &error) != FORGE_OK) {
        fprintf(stderr, "%s\n", prompt ? error.message : "out of memory");
        goto done;
    }
    for (steps = 0; steps < 512; steps++) {
        forge_step step;
        if (forge_generator_step(gen, &step, &error) != FORGE_OK) {
            fprintf(stderr, "\n%s\n", error.message);
            goto done;
        }
        fwrite(step.text, 1, step.text_len, stdout);
        fflush(stdout);
        if (step.done) break;
    }
    printf("\n");
    status = 0;
done:
    free(prompt);
    forge_generator_destroy(gen);
    forge_context_destroy(ctx);
    forge_tokenizer_destroy(tok);
    forge_model_close(model);
    return status;
}
