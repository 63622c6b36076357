/* budget.c: will this model fit? The layers, one at a time: forge_model_open maps the file,
   forge_plan_check plans the memory of a context at a given length and checks the plan against the
   budget, without allocating anything for the model. It prints every term and the verdict, and
   when the model does not fit, the largest context and the KV cache type that would. The budget is
   70% of free memory, or what FORGE_MEM_FRACTION=F in the environment says: forge reads no
   environment variable by itself, so the example asks with forge_context_desc_apply_env.

   build: cc -std=c99 -O2 examples/budget.c -o budget -lm -pthread
   run:   ./budget model.gguf 32768        (exit status 0 when it fits, 1 when it does not) */
#define FORGE_IMPLEMENTATION
#include "../forge.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    forge_model *model;
    forge_context_desc desc;
    forge_verdict verdict;
    forge_error error;
    const forge_plan *p = &verdict.plan;

    if (argc != 3) {
        fprintf(stderr, "usage: %s MODEL.gguf CONTEXT_TOKENS\n", argv[0]);
        return 1;
    }
    if (forge_model_open(argv[1], NULL, &model, &error) != FORGE_OK) {
        fprintf(stderr, "%s\n", error.message);
        return 1;
    }
    memset(&desc, 0, sizeof desc); /* zero means default (`= {0}` would be C only: the first member is an enum) */
    desc.n_ctx = (uint32_t)strtoul(argv[2], NULL, 10);
    if (forge_context_desc_apply_env(&desc, &error) != FORGE_OK || forge_plan_check(model, &desc, &verdict, &error) != FORGE_OK) {
        fprintf(stderr, "%s\n", error.message);
        forge_model_close(model);
        return 1;
    }
    printf("device   %s: %llu bytes free of %llu\n", verdict.memory.device, (unsigned long long)verdict.memory.free_bytes,
           (unsigned long long)verdict.memory.total_bytes);
    printf("weights  %llu\nKV cache %llu (%u tokens, %s)\nscratch  %llu\nlogits   %llu\nreserve  %llu\ntotal    %llu\n",
           (unsigned long long)p->weights_bytes, (unsigned long long)p->kv_bytes, p->n_ctx, forge_kv_type_name(p->kv_type),
           (unsigned long long)p->scratch_bytes, (unsigned long long)p->logits_bytes, (unsigned long long)p->reserve_bytes,
           (unsigned long long)p->total_bytes);
    printf("budget   %llu\n%s\n", (unsigned long long)verdict.budget_bytes, verdict.message);
    forge_model_close(model);
    return verdict.fits ? 0 : 1;
}
