/* libFuzzer harness for bitnet_convert_hf: a one-layer checkpoint folder (dim 128, 260 tokens)
   written at start-up, with one of its files replaced by the input: the first byte picks
   model.safetensors, tokenizer.json or config.json (byte % 3), the rest is the file. A converted
   file must load as a model. tests/corpus/convert/ holds the three valid files, each behind its
   byte (written by this file built with -DFUZZ_CONVERT_SEEDS=DIR as a plain program). */
#include "../bitnet.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256], out[300];
static unsigned char *st;
static size_t st_len;

static const char config[] =
    "{\"model_type\": \"bitnet\", \"hidden_size\": 128, \"intermediate_size\": 128, \"num_hidden_layers\": 1,\n"
    " \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"hidden_act\": \"relu2\", \"max_position_embeddings\": 64,\n"
    " \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, \"tie_word_embeddings\": true, \"bos_token_id\": 258, \"eos_token_id\": [259],\n"
    " \"quantization_config\": {\"quant_method\": \"bitnet\", \"linear_class\": \"autobitlinear\"}}\n";
/* tokenizer.json: the 256 byte tokens (GPT-2's byte-to-character map), "ab", "ba", <s> and </s>. */
static char tokenizer[8192];
static void build_tokenizer(void) {
    size_t n = 0;
    unsigned b, below = 0;
    n += (size_t)sprintf(tokenizer + n,
        "{\"added_tokens\": [{\"id\": 258, \"content\": \"<s>\", \"special\": true}, {\"id\": 259, \"content\": \"</s>\", \"special\": true}],\n"
        " \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
        "{\"Regex\": \"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|"
        "\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", "
        "\"use_regex\": false}]},\n \"model\": {\"type\": \"BPE\", \"vocab\": {");
    for (b = 0; b < 256; b++) {
        int self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
        unsigned c = self ? b : 256 + below++;
        n += (size_t)sprintf(tokenizer + n, "\"");
        if (c == '"' || c == '\\') n += (size_t)sprintf(tokenizer + n, "\\%c", c);
        else if (c < 128) n += (size_t)sprintf(tokenizer + n, "%c", c);
        else n += (size_t)sprintf(tokenizer + n, "%c%c", 0xC0 | (c >> 6), 0x80 | (c & 63));
        n += (size_t)sprintf(tokenizer + n, "\": %u, ", b);
    }
    sprintf(tokenizer + n, "\"ab\": 256, \"ba\": 257}, \"merges\": [\"a b\", [\"b\", \"a\"]]}}\n");
}

/* The safetensors: F16 embedding [4][128], F32 norms, packed ternary matrices with F32 scales. */
static void build_safetensors(void) {
    static const struct { const char *name; int kind; int rows; } t[] = {
        {"model.embed_tokens.weight", 0, 260}, {"model.layers.0.input_layernorm.weight", 1, 128},
        {"model.layers.0.self_attn.q_proj.weight", 2, 128}, {"model.layers.0.self_attn.k_proj.weight", 2, 64},
        {"model.layers.0.self_attn.v_proj.weight", 2, 64}, {"model.layers.0.self_attn.o_proj.weight", 2, 128},
        {"model.layers.0.self_attn.attn_sub_norm.weight", 1, 128}, {"model.layers.0.post_attention_layernorm.weight", 1, 128},
        {"model.layers.0.mlp.gate_proj.weight", 2, 128}, {"model.layers.0.mlp.up_proj.weight", 2, 128},
        {"model.layers.0.mlp.down_proj.weight", 2, 128}, {"model.layers.0.mlp.ffn_sub_norm.weight", 1, 128},
        {"model.norm.weight", 1, 128}};
    char hdr[4096];
    size_t hl = 0, off = 0, i, data = 0, b;
    unsigned char *p;
    hl += (size_t)sprintf(hdr + hl, "{");
    for (i = 0; i < sizeof t / sizeof t[0]; i++) {
        size_t bytes = t[i].kind == 0 ? 260 * 128 * 2 : t[i].kind == 1 ? 128 * 4 : (size_t)t[i].rows / 4 * 128;
        if (t[i].kind == 1) hl += (size_t)sprintf(hdr + hl, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[128],\"data_offsets\":[%zu,%zu]}", i ? "," : "",
                                                  t[i].name, off, off + bytes);
        else hl += (size_t)sprintf(hdr + hl, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%d,128],\"data_offsets\":[%zu,%zu]}", i ? "," : "",
                                   t[i].name, t[i].kind ? "U8" : "F16", t[i].kind ? t[i].rows / 4 : 260, off, off + bytes);
        off += bytes;
        if (t[i].kind == 2) {
            hl += (size_t)sprintf(hdr + hl, ",\"%.*s_scale\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[%zu,%zu]}",
                                  (int)strlen(t[i].name), t[i].name, off, off + 4);
            off += 4;
        }
    }
    hdr[hl++] = '}';
    while (hl % 8) hdr[hl++] = ' ';
    st_len = 8 + hl + off;
    st = (unsigned char *)malloc(st_len);
    for (b = 0; b < 8; b++) st[b] = (unsigned char)((uint64_t)hl >> (8 * b));
    memcpy(st + 8, hdr, hl);
    p = st + 8 + hl;
    for (i = 0; i < sizeof t / sizeof t[0]; i++) {
        size_t bytes = t[i].kind == 0 ? 260 * 128 * 2 : t[i].kind == 1 ? 128 * 4 : (size_t)t[i].rows / 4 * 128;
        float one = 1.0f, scale = 0.5f;
        for (b = 0; b < bytes; b++) {
            if (t[i].kind == 0) p[data + b] = (unsigned char)(b % 2 ? 0x2c : (b * 7) & 0xff); /* small fp16 values */
            else if (t[i].kind == 1) memcpy(p + data + b - b % 4, &one, 4);
            else p[data + b] = (unsigned char)(((b * 37) % 3) | (((b * 11) % 3) << 2) | (((b * 5) % 3) << 4) | (((b * 3) % 3) << 6));
        }
        data += bytes;
        if (t[i].kind == 2) memcpy(p + data, &scale, 4), data += 4;
    }
}

static void put(const char *name, const void *b, size_t n) {
    char p[320];
    FILE *f;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    if (!(f = fopen(p, "wb"))) abort();
    if (n) fwrite(b, 1, n, f);
    fclose(f);
}

static void setup(void) {
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/bitnet_fuzz_convert_%d", t && *t ? t : "/tmp", (int)getpid());
    snprintf(out, sizeof out, "%s.gguf", dir);
    mkdir(dir, 0755);
    build_tokenizer();
    build_safetensors();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int which;
    if (!st) setup();
    if (size < 1) return 0;
    which = data[0] % 3;
    put("model.safetensors", which == 0 ? data + 1 : st, which == 0 ? size - 1 : st_len);
    put("tokenizer.json", which == 1 ? (const void *)(data + 1) : tokenizer, which == 1 ? size - 1 : strlen(tokenizer));
    put("config.json", which == 2 ? (const void *)(data + 1) : config, which == 2 ? size - 1 : strlen(config));
    if (bitnet_convert_hf(dir, out) == BITNET_OK) {
        bitnet_model_desc d;
        bitnet_model *m = NULL;
        memset(&d, 0, sizeof d);
        d.path = out, d.backend = BITNET_BACKEND_CPU;
        if (bitnet_model_load(&d, &m) == BITNET_OK) bitnet_model_free(m);
        remove(out);
    }
    return 0;
}

#ifdef FUZZ_CONVERT_SEEDS
int main(void) {
    static const char *const names[3] = {"safetensors", "tokenizer", "config"};
    int i;
    setup();
    for (i = 0; i < 3; i++) {
        char p[512];
        FILE *f;
        unsigned char sel = (unsigned char)i;
        snprintf(p, sizeof p, "%s/%s", FUZZ_CONVERT_SEEDS, names[i]);
        f = fopen(p, "wb");
        fwrite(&sel, 1, 1, f);
        if (i == 0) fwrite(st, 1, st_len, f);
        else fputs(i == 1 ? tokenizer : config, f);
        fclose(f);
    }
    put("model.safetensors", st, st_len);
    put("tokenizer.json", tokenizer, strlen(tokenizer));
    put("config.json", config, strlen(config));
    if (bitnet_convert_hf(dir, out) != BITNET_OK) { fprintf(stderr, "seed folder: %s\n", bitnet_last_error()); return 1; }
    {
        bitnet_model_desc d;
        bitnet_model *m = NULL;
        memset(&d, 0, sizeof d);
        d.path = out, d.backend = BITNET_BACKEND_CPU;
        if (bitnet_model_load(&d, &m) != BITNET_OK) { fprintf(stderr, "seed model: %s\n", bitnet_last_error()); return 1; }
        bitnet_model_free(m);
    }
    remove(out);
    printf("seeds written to %s; the folder converts and loads\n", FUZZ_CONVERT_SEEDS);
    return 0;
}
#endif
