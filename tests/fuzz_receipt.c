/* libFuzzer harness for the receipt parser (the strict JSON reader and the schema checks behind
   `bitnet verify-receipt`). Seeds: tests/corpus/receipt/. Whatever the bytes, parsing returns a
   result code; an accepted receipt must write back, re-parse and go through every gate. */
#include "../bitnet.h"
#include <stdlib.h>
#include <string.h>

static bitnet_receipt fuzz_r, fuzz_back;
static char fuzz_json[1 << 18];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    bitnet_receipt_gates g;
    size_t len = 0;
    int n = 0;
    bitnet_result r = bitnet_receipt_parse((const char *)data, size, &fuzz_r);
    if (r != BITNET_OK) {
        if (r != BITNET_ERR_CORRUPT && r != BITNET_ERR_BAD_METADATA && r != BITNET_ERR_BAD_VERSION &&
            r != BITNET_ERR_BAD_SIZE)
            abort(); /* no other outcome is documented */
        return 0;
    }
    if (bitnet_receipt_write(&fuzz_r, fuzz_json, sizeof fuzz_json, &len) != BITNET_OK || len != strlen(fuzz_json))
        abort();
    /* what was written is valid JSON with the same fields; only rounding of numbers at their
       last digit may change a consistency verdict, so the result is not asserted */
    (void)bitnet_receipt_parse(fuzz_json, len, &fuzz_back);
    memset(&g, 0, sizeof g);
    g.require_gpu_kernels = 1;
    g.min_tps = size ? data[0] : 1;
    g.max_p95_ms = 1.5;
    g.max_wall_ms = 1e6;
    if (bitnet_receipt_check(&fuzz_r, &g, fuzz_json, 256, &n) != BITNET_OK || n < 0) abort();
    return 0;
}
