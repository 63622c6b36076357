/* Compiles forge.h with its implementation under the strictest warnings, as C99 and as C++;
   tests/check_builds.sh builds it with every compiler and option set and runs the result. */
#define FORGE_IMPLEMENTATION
#include "../forge.h"
#include "../forge.h" /* a second include must be harmless */

int main(void) {
    forge_error error;
    forge_gguf *gguf = NULL;
    static const unsigned char not_gguf[8] = {'G', 'G', 'U', 'X', 3, 0, 0, 0};
    forge_result r = forge_gguf_parse(not_gguf, sizeof not_gguf, NULL, &gguf, &error);
    return r == FORGE_ERR_MAGIC && gguf == NULL && error.result == FORGE_ERR_MAGIC ? 0 : 1;
}
