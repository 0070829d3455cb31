/* bitnet_dequantize of one GGUF tensor against a float32 reference (ggml's to_float, written by
   tools/bitnetcpp_dequant.cpp): prints how many elements differ in their bits and the largest
   difference; exit 0 only when all are equal.
     cc -O2 -o build/dequant_check tools/dequant_check.c build/impl.o -lm -ldl -lpthread
     build/dequant_check MODEL.gguf TENSOR REF.f32 */
#include "../bitnet.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    bitnet_gguf *g = NULL;
    bitnet_tensor_info ti;
    float *ours, *ref;
    size_t n, i, diff = 0;
    double worst = 0.0;
    FILE *f;
    int d;
    if (argc != 4) return fprintf(stderr, "usage: dequant_check MODEL.gguf TENSOR REF.f32\n"), 2;
    if (bitnet_gguf_open(argv[1], &g) != BITNET_OK || bitnet_gguf_find_tensor(g, argv[2], &ti) != BITNET_OK)
        return fprintf(stderr, "%s\n", bitnet_last_error()), 1;
    for (n = 1, d = 0; d < 4; d++) n *= (size_t)ti.ne[d];
    ours = (float *)malloc(n * 4), ref = (float *)malloc(n * 4);
    if (!ours || !ref) return fprintf(stderr, "out of memory\n"), 1;
    if (bitnet_dequantize(ti.type, ti.data, (size_t)ti.bytes, ours, n) != BITNET_OK) return fprintf(stderr, "%s\n", bitnet_last_error()), 1;
    if (!(f = fopen(argv[3], "rb")) || fread(ref, 4, n, f) != n) return fprintf(stderr, "cannot read %zu floats from %s\n", n, argv[3]), 1;
    fclose(f);
    for (i = 0; i < n; i++)
        if (memcmp(&ours[i], &ref[i], 4) != 0) {
            const double e = fabs((double)ours[i] - (double)ref[i]);
            diff++;
            if (!(e <= worst)) worst = e;
        }
    printf("%s %s: %zu elements, %zu differ in their bits from ggml's to_float (largest difference %g)\n", argv[2],
           bitnet_tensor_type_name(ti.type), n, diff, worst);
    bitnet_gguf_close(g);
    free(ours), free(ref);
    return diff != 0;
}
