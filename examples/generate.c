/* generate.c: the short path, a streamed answer in a dozen lines. forge_llm_open opens a GGUF
   model, plans its memory and checks the plan against the budget before anything is allocated
   (FORGE_ERR_BUDGET, with every term and what would fit, when it does not), then forge_llm_chat
   wraps the prompt in the model's chat format (ChatML, Llama 3, Gemma) and streams the answer to a
   callback as each piece is generated. A NULL desc means every default: greedy decoding, a context
   of min(trained, 4096) positions, 70% of free memory, the GPU when the build has one.

   build: cc -std=c99 -O2 examples/generate.c -o generate -lm -pthread
   run:   ./generate model.gguf "Why is the sky blue?" */
#define FORGE_IMPLEMENTATION
#include "../forge.h"

#include <stdio.h>

static void show(void *user_data, const char *text, size_t len) {
    (void)user_data;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
}

int main(int argc, char **argv) {
    forge_llm *llm = NULL;
    forge_error error;
    int status = 0;
    if (argc != 3) {
        fprintf(stderr, "usage: %s MODEL.gguf PROMPT\n", argv[0]);
        return 1;
    }
    if (forge_llm_open(argv[1], NULL, &llm, &error) != FORGE_OK || forge_llm_chat(llm, argv[2], show, NULL, &error) != FORGE_OK) {
        fprintf(stderr, "%s\n", error.message);
        status = 1;
    }
    printf("\n");
    forge_llm_close(llm);
    return status;
}
