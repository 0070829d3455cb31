// ggml's to_float of one GGUF tensor, written as float32: the reference tools/dequant_check.c
// compares bitnet_dequantize against. Built by tools/bitnetcpp_convert_check.sh against a fetched
// bitnet.cpp build (its llama.cpp's ggml); not part of the library.
//   bitnetcpp_dequant MODEL.gguf TENSOR OUT.f32
#include "ggml.h"

#include <cstdio>
#include <vector>

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: bitnetcpp_dequant MODEL.gguf TENSOR OUT.f32\n");
        return 2;
    }
    ggml_context *meta = nullptr;
    gguf_init_params p = {true, &meta};
    gguf_context *g = gguf_init_from_file(argv[1], p);
    if (!g) return fprintf(stderr, "cannot read %s\n", argv[1]), 1;
    int i = gguf_find_tensor(g, argv[2]);
    ggml_tensor *t = meta ? ggml_get_tensor(meta, argv[2]) : nullptr;
    if (i < 0 || !t) return fprintf(stderr, "no tensor %s\n", argv[2]), 1;
    const ggml_type type = gguf_get_tensor_type(g, i);
    const int64_t n = ggml_nelements(t);
    const size_t bytes = ggml_nbytes(t);
    std::vector<unsigned char> raw(bytes);
    FILE *f = fopen(argv[1], "rb");
    if (!f || fseek(f, (long)(gguf_get_data_offset(g) + gguf_get_tensor_offset(g, i)), SEEK_SET) != 0 || fread(raw.data(), 1, bytes, f) != bytes)
        return fprintf(stderr, "cannot read the tensor's bytes\n"), 1;
    fclose(f);
    const ggml_type_traits *tr = ggml_get_type_traits(type);
    if (!tr || !tr->to_float) return fprintf(stderr, "type %s has no to_float\n", ggml_type_name(type)), 1;
    std::vector<float> out((size_t)n);
    tr->to_float(raw.data(), out.data(), n);
    FILE *o = fopen(argv[3], "wb");
    if (!o || fwrite(out.data(), 4, out.size(), o) != out.size()) return fprintf(stderr, "cannot write %s\n", argv[3]), 1;
    fclose(o);
    printf("%s %s: %lld elements, %zu bytes, to_float by ggml\n", argv[2], ggml_type_name(type), (long long)n, bytes);
    gguf_free(g);
    ggml_free(meta);
    return 0;
}
