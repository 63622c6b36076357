/* inspect.c: open a GGUF model with forge and print the configuration forge derived from it.

   This is the smallest useful forge program. forge_model_open maps the file read-only, indexes
   it without copying any tensor data, derives the architecture's configuration and checks that
   every tensor the configuration needs is present with the right shape. A broken, truncated or
   hostile file is refused with a message that names what is wrong; nothing is left allocated.

   build: cc -std=c99 -O2 examples/inspect.c -o inspect -lm -pthread
   run:   ./inspect model.gguf */
#define FORGE_IMPLEMENTATION
#include "../forge.h"

#include <stdio.h>

int main(int argc, char **argv) {
    forge_model *model;
    forge_error error;
    const forge_config *c;

    if (argc != 2) {
        fprintf(stderr, "usage: %s MODEL.gguf\n", argv[0]);
        return 1;
    }
    if (forge_model_open(argv[1], NULL, &model, &error) != FORGE_OK) {
        fprintf(stderr, "cannot use %s\n  %s\n", argv[1], error.message);
        return 1;
    }
    c = forge_model_config(model);
    printf("%s: %s, %u layers, n_embd %u, %u heads (%u for keys and values) of %u dims, vocabulary %u\n", argv[1],
           c->arch_name, c->n_layer, c->n_embd, c->n_head, c->n_head_kv, c->head_dim, c->n_vocab);
    printf("trained context %u tokens, rope base %g over %u dims, output head %s\n", c->n_ctx_train,
           (double)c->rope_freq_base, c->n_rot, c->tied_output ? "shared with the embeddings" : "separate");
    forge_model_close(model);
    return 0;
}
