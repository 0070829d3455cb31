/* bitnet_convert_hf / `bitnet convert`: Hugging Face checkpoint folders written here from a GGUF
   (the tiny model; the LLaMA 3 vocabulary when ../shared has it), in every form the converter
   reads (packed or float master weights, one file or shards, merges as strings or pairs, the
   BitLinear inverse scale, a bf16 embedding, an untied head), converted back and compared with the
   source tensor by tensor and key by key; then broken and hostile folders, each refused with its
   own error and no file left behind. The packing here is written from the format's description
   (bitnet-facts.md), not with the library's bitnet_i2s_from_hf. */
#include "../bitnet.h"
#include "harness.h"
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir_buf[512];
static const char *tmp_path(const char *name) {
    static char path[640];
    const char *d = getenv("TMPDIR");
    snprintf(tmpdir_buf, sizeof tmpdir_buf, "%s", d && *d ? d : "/tmp");
    snprintf(path, sizeof path, "%s/bitnet_test_convert_%d_%s", tmpdir_buf, (int)getpid(), name);
    return path;
}

static const char llama3_split[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* ---- writing a checkpoint folder ---- */
static void json_str(FILE *f, const char *s, size_t n) {
    size_t i;
    fputc('"', f);
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

typedef struct st_entry {
    char name[96];
    const char *dtype;
    int n_dims;
    uint64_t shape[2];
    unsigned char *data; /* owned */
    size_t bytes;
    int file;
} st_entry;

typedef struct hf_opts {
    int merges_pairs; /* merges as ["a", "b"] */
    int shards;       /* two files and an index */
    int bitlinear;    /* linear_class bitlinear: weight_scale = 1 / scale; 2: by default (no linear_class) */
    int bf16_embed;   /* the embedding as BF16 */
    int untied;       /* lm_head.weight and tie_word_embeddings false */
    int master;       /* BF16 master weights (random) instead of packed codes */
    int pad;          /* embedding rows beyond the tokenizer's ids */
    int poison;       /* 1: code 3 in a packed matrix, 2: a NaN weight_scale, 3: an embedding value of 1e6, 4: a bias */
} hf_opts;

static st_entry ents[64];
static int n_ents;

static void st_add(const char *name, const char *dtype, int n_dims, uint64_t s0, uint64_t s1, const void *data, size_t bytes) {
    st_entry *e = &ents[n_ents++];
    snprintf(e->name, sizeof e->name, "%s", name);
    e->dtype = dtype, e->n_dims = n_dims, e->shape[0] = s0, e->shape[1] = s1;
    e->data = (unsigned char *)malloc(bytes ? bytes : 1);
    memcpy(e->data, data, bytes);
    e->bytes = bytes;
    e->file = 0;
}

static void st_write(const char *path, int file) {
    FILE *f = fopen(path, "wb");
    char *hdr = (char *)malloc(1 << 16);
    size_t len = 0, off = 0;
    uint64_t hl;
    int i;
    len += (size_t)sprintf(hdr + len, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (i = 0; i < n_ents; i++) {
        if (ents[i].file != file) continue;
        len += (size_t)sprintf(hdr + len, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", ents[i].name, ents[i].dtype);
        if (ents[i].n_dims >= 1) len += (size_t)sprintf(hdr + len, "%llu", (unsigned long long)ents[i].shape[0]);
        if (ents[i].n_dims == 2) len += (size_t)sprintf(hdr + len, ",%llu", (unsigned long long)ents[i].shape[1]);
        len += (size_t)sprintf(hdr + len, "],\"data_offsets\":[%zu,%zu]}", off, off + ents[i].bytes);
        off += ents[i].bytes;
    }
    hdr[len++] = '}';
    while (len % 8) hdr[len++] = ' ';
    hl = len;
    fwrite(&hl, 8, 1, f);
    fwrite(hdr, 1, len, f);
    for (i = 0; i < n_ents; i++)
        if (ents[i].file == file) fwrite(ents[i].data, 1, ents[i].bytes, f);
    fclose(f);
    free(hdr);
}

static uint16_t to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

/* The HF packing: byte [r % (n/4)][c] holds w[r][c] + 1 at bits 2 * (r / (n/4)). */
static unsigned char *hf_pack(const int8_t *q, size_t n, size_t k) {
    unsigned char *p = (unsigned char *)calloc(n / 4 * k, 1);
    size_t r, c;
    for (r = 0; r < n; r++)
        for (c = 0; c < k; c++) p[(r % (n / 4)) * k + c] |= (unsigned char)((q[r * k + c] + 1) << (2 * (r / (n / 4))));
    return p;
}

static const char *const parts[11][2] = {
    {"attn_norm", "input_layernorm"}, {"attn_q", "self_attn.q_proj"}, {"attn_k", "self_attn.k_proj"}, {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"}, {"attn_sub_norm", "self_attn.attn_sub_norm"}, {"ffn_norm", "post_attention_layernorm"},
    {"ffn_gate", "mlp.gate_proj"}, {"ffn_up", "mlp.up_proj"}, {"ffn_down", "mlp.down_proj"}, {"ffn_sub_norm", "mlp.ffn_sub_norm"}};

/* A u32 key; "%s" in key is the file's architecture. */
static uint32_t gu32(const bitnet_gguf *g, const char *key) {
    char k[128], arch[32] = "";
    bitnet_gguf_str a;
    uint32_t v = 0;
    if (bitnet_gguf_get_str(g, "general.architecture", &a) == BITNET_OK) snprintf(arch, sizeof arch, "%.*s", (int)a.len, a.ptr);
    snprintf(k, sizeof k, key, arch);
    bitnet_gguf_get_u32(g, k, &v);
    return v;
}
static int is_llama(const bitnet_gguf *g) {
    bitnet_gguf_str a;
    return bitnet_gguf_get_str(g, "general.architecture", &a) == BITNET_OK && a.len == 5 && memcmp(a.ptr, "llama", 5) == 0;
}

/* Writes dir from GGUF g: config.json, tokenizer.json, tokenizer_config.json, the safetensors. */
static void hf_write(const char *dir, const bitnet_gguf *g, const hf_opts *o) {
    char p[768], name[128];
    FILE *f;
    uint64_t i, n_tok = 0, n_merges = 0;
    bitnet_gguf_type et;
    const int32_t *types;
    bitnet_gguf_str s;
    bitnet_tensor_info ti;
    int l, k, first, falcon3;
    uint32_t dim = gu32(g, "%s.embedding_length"), layers = gu32(g, "%s.block_count");
    const char *rope = bitnet_gguf_find_tensor(g, "rope_freqs.weight", &ti) == BITNET_OK ? /* gen-model's --rope-scaling llama3 */
        "{\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192, "
        "\"rope_type\": \"llama3\"}" : "null";
    falcon3 = bitnet_gguf_get_str(g, "tokenizer.ggml.pre", &s) == BITNET_OK && s.len == 7 && memcmp(s.ptr, "falcon3", 7) == 0;
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/config.json", dir);
    f = fopen(p, "wb");
    fprintf(f, "{\"architectures\": [\"%s\"], \"model_type\": \"%s\", \"hidden_size\": %u, \"intermediate_size\": %u,\n"
               " \"num_hidden_layers\": %u, \"num_attention_heads\": %u, \"num_key_value_heads\": %u, \"hidden_act\": \"%s\",\n"
               " \"max_position_embeddings\": %u, \"rms_norm_eps\": 1e-05, \"rope_theta\": 500000.0, \"vocab_size\": %u,\n"
               " \"tie_word_embeddings\": %s, \"bos_token_id\": %u, \"eos_token_id\": [%u, %u], \"rope_scaling\": %s,\n"
               " \"quantization_config\": {\"quant_method\": \"bitnet\", %s\"quantization_mode\": \"%s\"}}\n",
            is_llama(g) ? "LlamaForCausalLM" : "BitNetForCausalLM", is_llama(g) ? "llama" : "bitnet",
            dim, gu32(g, "%s.feed_forward_length"), layers, gu32(g, "%s.attention.head_count"),
            gu32(g, "%s.attention.head_count_kv"), is_llama(g) ? "silu" : "relu2", gu32(g, "%s.context_length"), gu32(g, "%s.vocab_size"),
            o->untied ? "false" : "true", gu32(g, "tokenizer.ggml.bos_token_id"), gu32(g, "tokenizer.ggml.eos_token_id"),
            gu32(g, "tokenizer.ggml.eot_token_id"), rope, o->bitlinear == 2 ? "" : o->bitlinear ? "\"linear_class\": \"bitlinear\", " : "\"linear_class\": \"autobitlinear\", ", o->master ? "online" : "offline");
    fclose(f);
    /* tokenizer.json */
    bitnet_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n_tok);
    bitnet_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n_merges);
    types = (const int32_t *)bitnet_gguf_arr_data(g, "tokenizer.ggml.token_type");
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    f = fopen(p, "wb");
    fprintf(f, "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null, \"added_tokens\": [");
    for (i = 0, first = 1; i < n_tok; i++)
        if (types[i] == 3 || types[i] == 4) {
            bitnet_gguf_arr_str(g, "tokenizer.ggml.tokens", i, &s);
            fprintf(f, "%s\n {\"id\": %llu, \"content\": ", first ? "" : ",", (unsigned long long)i);
            json_str(f, s.ptr, (size_t)s.len);
            fprintf(f, ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": %s}",
                    types[i] == 3 ? "true" : "false");
            first = 0;
        }
    fprintf(f, "],\n \"normalizer\": null,\n \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [");
    if (falcon3) { /* Falcon 3's steps */
        fprintf(f, "{\"type\": \"Punctuation\", \"behavior\": \"Contiguous\"}, {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
                   "\"trim_offsets\": true, \"use_regex\": true}, {\"type\": \"Digits\", \"individual_digits\": true}");
    } else {
        fprintf(f, "{\"type\": \"Split\", \"pattern\": {\"Regex\": ");
        json_str(f, llama3_split, strlen(llama3_split));
        fprintf(f, "}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
                   "\"trim_offsets\": true, \"use_regex\": false}");
    }
    fprintf(f, "]},\n \"post_processor\": null, \"decoder\": {\"type\": \"ByteLevel\"},\n"
               " \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, \"byte_fallback\": false, \"ignore_merges\": true,\n"
               "  \"vocab\": {");
    for (i = 0, first = 1; i < n_tok; i++)
        if (types[i] == 1) {
            bitnet_gguf_arr_str(g, "tokenizer.ggml.tokens", i, &s);
            fprintf(f, "%s", first ? "" : ", ");
            json_str(f, s.ptr, (size_t)s.len);
            fprintf(f, ": %llu", (unsigned long long)i);
            first = 0;
        }
    fprintf(f, "},\n  \"merges\": [");
    for (i = 0; i < n_merges; i++) {
        const char *sp;
        bitnet_gguf_arr_str(g, "tokenizer.ggml.merges", i, &s);
        sp = (const char *)memchr(s.ptr, ' ', (size_t)s.len);
        fprintf(f, "%s", i ? ", " : "");
        if (!o->merges_pairs) {
            json_str(f, s.ptr, (size_t)s.len);
            continue;
        }
        fputc('[', f);
        json_str(f, s.ptr, (size_t)(sp - s.ptr));
        fputc(',', f);
        json_str(f, sp + 1, (size_t)(s.ptr + s.len - sp - 1));
        fputc(']', f);
    }
    fprintf(f, "]}}\n");
    fclose(f);
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    f = fopen(p, "wb");
    fprintf(f, "{\"bos_token\": \"<|begin_of_text|>\", \"chat_template\": ");
    bitnet_gguf_get_str(g, "tokenizer.chat_template", &s);
    json_str(f, s.ptr, (size_t)s.len);
    fprintf(f, "}\n");
    fclose(f);
    /* the tensors */
    n_ents = 0;
    bitnet_gguf_find_tensor(g, "token_embd.weight", &ti);
    {
        size_t ne = (size_t)(ti.ne[0] * (ti.ne[1] + (uint64_t)o->pad)), e;
        uint16_t *b = (uint16_t *)calloc(ne, 2);
        memcpy(b, ti.data, (size_t)(ti.ne[0] * ti.ne[1]) * 2);
        if (o->bf16_embed)
            for (e = 0; e < ne; e++) b[e] = to_bf16(bitnet_fp16_to_fp32(b[e]));
        if (o->poison == 3) b[ne / 2] = to_bf16(1e6f);
        st_add("model.embed_tokens.weight", o->bf16_embed ? "BF16" : "F16", 2, ti.ne[1] + (uint64_t)o->pad, ti.ne[0], b, ne * 2);
        if (o->untied) st_add("lm_head.weight", o->bf16_embed ? "BF16" : "F16", 2, ti.ne[1], ti.ne[0], b, ne * 2);
        free(b);
    }
    for (l = 0; l < (int)layers; l++)
        for (k = 0; k < 11; k++) {
            char gname[96];
            snprintf(gname, sizeof gname, "blk.%d.%s.weight", l, parts[k][0]);
            if (bitnet_gguf_find_tensor(g, gname, &ti) != BITNET_OK) continue; /* (a LLaMA's sub-norms) */
            snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, parts[k][1]);
            if (ti.type == BITNET_TENSOR_F32) {
                st_add(name, "F32", 1, ti.ne[0], 0, ti.data, (size_t)ti.ne[0] * 4);
            } else {
                size_t n = (size_t)ti.ne[1], kk = (size_t)ti.ne[0], e;
                int8_t *q = (int8_t *)malloc(n * kk);
                float sc = 0, ws;
                bitnet_i2s_unpack(ti.data, (size_t)ti.bytes, n, kk, q, &sc);
                if (is_llama(g) && (k == 1 || k == 2)) { /* llama.cpp's RoPE row order back to Hugging Face's */
                    const size_t hd = n / (k == 1 ? gu32(g, "%s.attention.head_count") : gu32(g, "%s.attention.head_count_kv"));
                    int8_t *h = (int8_t *)malloc(n * kk);
                    size_t r2;
                    for (r2 = 0; r2 < n; r2++) /* GGUF row (h, 2i + j) is HF row (h, j * hd / 2 + i) */
                        memcpy(h + (r2 / hd * hd + (r2 % hd) % 2 * (hd / 2) + (r2 % hd) / 2) * kk, q + r2 * kk, kk);
                    memcpy(q, h, n * kk);
                    free(h);
                }
                if (o->master) { /* random master weights; their quantization is the expected file */
                    uint16_t *b = (uint16_t *)malloc(n * kk * 2);
                    for (e = 0; e < n * kk; e++) b[e] = to_bf16(test_rand_float(-0.05f, 0.05f) * (1 + l + k));
                    st_add(name, "BF16", 2, n, kk, b, n * kk * 2);
                    free(b);
                } else {
                    unsigned char *pk = hf_pack(q, n, kk);
                    if (o->poison == 1 && l == 1 && k == 9) pk[7] = 0xff;
                    st_add(name, "U8", 2, n / 4, kk, pk, n / 4 * kk);
                    free(pk);
                    ws = o->bitlinear ? 1.0f / sc : sc;
                    if (o->poison == 2 && l == 0 && k == 4) ws = NAN;
                    snprintf(name, sizeof name, "model.layers.%d.%s.weight_scale", l, parts[k][1]);
                    st_add(name, "F32", 1, 1, 0, &ws, 4);
                }
                if (o->poison == 4 && l == 0 && k == 2) {
                    float zero[64] = {0};
                    snprintf(name, sizeof name, "model.layers.%d.%s.bias", l, parts[k][1]);
                    st_add(name, "F32", 1, n, 0, zero, n * 4);
                }
                free(q);
            }
        }
    bitnet_gguf_find_tensor(g, "output_norm.weight", &ti);
    st_add("model.norm.weight", "F32", 1, ti.ne[0], 0, ti.data, (size_t)ti.ne[0] * 4);
    if (!o->shards) {
        snprintf(p, sizeof p, "%s/model.safetensors", dir);
        st_write(p, 0);
    } else {
        for (k = 0; k < n_ents; k++) ents[k].file = k % 2;
        snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", dir);
        st_write(p, 0);
        snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
        st_write(p, 1);
        snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
        f = fopen(p, "wb");
        fprintf(f, "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {");
        for (k = 0; k < n_ents; k++)
            fprintf(f, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"", k ? ", " : "", ents[k].name, ents[k].file + 1);
        fprintf(f, "}}\n");
        fclose(f);
    }
    for (k = 0; k < n_ents; k++) free(ents[k].data);
}

static void rm_dir(const char *dir) {
    static const char *const files[] = {"config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors",
                                        "model.safetensors.index.json", "model-00001-of-00002.safetensors",
                                        "model-00002-of-00002.safetensors"};
    char p[768];
    size_t i;
    for (i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        remove(p);
    }
    rmdir(dir);
}

static bitnet_gguf *open_tiny(void) {
    bitnet_gguf *g = NULL;
    if (bitnet_gguf_open("tests/data/tiny.gguf", &g) != BITNET_OK) return NULL;
    return g;
}

/* ---- comparing the converted file with its source ---- */
static int same_str(bitnet_gguf_str a, bitnet_gguf_str b) { return a.len == b.len && memcmp(a.ptr, b.ptr, (size_t)a.len) == 0; }

static void check_metadata(const bitnet_gguf *a, const bitnet_gguf *b) {
    static const char *const u32s[] = {"%s.vocab_size", "%s.context_length", "%s.embedding_length",
                                       "%s.feed_forward_length", "%s.block_count",
                                       "%s.attention.head_count", "%s.attention.head_count_kv",
                                       "%s.rope.dimension_count", "tokenizer.ggml.bos_token_id",
                                       "tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "general.file_type"};
    static const char *const strs[] = {"general.architecture", "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.chat_template"};
    static const char *const arrs[] = {"tokenizer.ggml.tokens", "tokenizer.ggml.merges"};
    size_t i;
    uint64_t j, na = 0, nb = 0;
    float fa = 0, fb = 1;
    bitnet_gguf_type ta, tb;
    const char *arch = is_llama(a) ? "llama" : "bitnet-b1.58";
    char key[128];
    for (i = 0; i < sizeof u32s / sizeof u32s[0]; i++) {
        uint32_t va = 1, vb = 2;
        snprintf(key, sizeof key, u32s[i], arch);
        TEST_CHECKF(bitnet_gguf_get_u32(a, key, &va) == BITNET_OK && bitnet_gguf_get_u32(b, key, &vb) == BITNET_OK && va == vb,
                    "%s: %u against %u", key, va, vb);
    }
    for (i = 0; i < sizeof strs / sizeof strs[0]; i++) {
        bitnet_gguf_str sa = {0, 0}, sb = {0, 1};
        TEST_CHECKF(bitnet_gguf_get_str(a, strs[i], &sa) == BITNET_OK && bitnet_gguf_get_str(b, strs[i], &sb) == BITNET_OK &&
                    same_str(sa, sb), "%s", strs[i]);
    }
    snprintf(key, sizeof key, "%s.rope.freq_base", arch);
    TEST_CHECK(bitnet_gguf_get_f32(a, key, &fa) == BITNET_OK && bitnet_gguf_get_f32(b, key, &fb) == BITNET_OK && fa == fb);
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    TEST_CHECK(bitnet_gguf_get_f32(a, key, &fa) == BITNET_OK && bitnet_gguf_get_f32(b, key, &fb) == BITNET_OK && fa == fb);
    for (i = 0; i < sizeof arrs / sizeof arrs[0]; i++) {
        int bad = 0;
        TEST_CHECK(bitnet_gguf_get_arr(a, arrs[i], &ta, &na) == BITNET_OK && bitnet_gguf_get_arr(b, arrs[i], &tb, &nb) == BITNET_OK);
        TEST_CHECKF(na == nb, "%s: %llu against %llu", arrs[i], (unsigned long long)na, (unsigned long long)nb);
        for (j = 0; j < na && j < nb && !bad; j++) {
            bitnet_gguf_str sa, sb;
            bitnet_gguf_arr_str(a, arrs[i], j, &sa), bitnet_gguf_arr_str(b, arrs[i], j, &sb);
            if (same_str(sa, sb)) continue;
            bad = 1;
            TEST_CHECKF(0, "%s[%llu]: \"%.*s\" against \"%.*s\"", arrs[i], (unsigned long long)j, (int)sa.len, sa.ptr, (int)sb.len, sb.ptr);
        }
    }
    bitnet_gguf_get_arr(a, "tokenizer.ggml.tokens", &ta, &na);
    TEST_CHECK(memcmp(bitnet_gguf_arr_data(a, "tokenizer.ggml.token_type"), bitnet_gguf_arr_data(b, "tokenizer.ggml.token_type"), (size_t)na * 4) == 0);
}

/* Every tensor of src in out with the same type, shape and bytes; I2_S scales to within rel_scale;
   a bf16 embedding as its fp16 rounding. */
static void check_tensors(const bitnet_gguf *src, const bitnet_gguf *out, const hf_opts *o) {
    uint64_t i;
    bitnet_tensor_info a, b;
    for (i = 0; i < bitnet_gguf_tensor_count(src); i++) {
        bitnet_gguf_tensor(src, i, &a);
        if (bitnet_gguf_find_tensor(out, a.name, &b) != BITNET_OK) { TEST_CHECKF(0, "%s missing", a.name); continue; }
        TEST_CHECKF(a.type == b.type && a.ne[0] == b.ne[0] && a.ne[1] == b.ne[1] && a.bytes == b.bytes, "%s: type or shape", a.name);
        if (a.bytes != b.bytes) continue;
        if (a.type == BITNET_TENSOR_I2_S) {
            size_t nb = (size_t)(a.ne[0] * a.ne[1] / 4);
            float sa, sb;
            memcpy(&sa, (const char *)a.data + nb, 4), memcpy(&sb, (const char *)b.data + nb, 4);
            TEST_CHECKF(memcmp(a.data, b.data, nb) == 0, "%s: codes differ", a.name);
            TEST_CHECKF(o->bitlinear ? fabsf(sa - sb) <= 2e-7f * sa : sa == sb, "%s: scale %.9g against %.9g", a.name, sa, sb);
        } else if (o->bf16_embed && strcmp(a.name, "token_embd.weight") == 0) {
            size_t e, ne = (size_t)(a.ne[0] * a.ne[1]), bad = 0;
            for (e = 0; e < ne; e++) {
                uint16_t ha = ((const uint16_t *)a.data)[e], hb = ((const uint16_t *)b.data)[e], bf = to_bf16(bitnet_fp16_to_fp32(ha));
                float want = bitnet_fp16_to_fp32(bitnet_fp32_to_fp16(bitnet_bf16_to_fp32(bf)));
                bad += bitnet_fp16_to_fp32(hb) != want;
            }
            TEST_CHECKF(bad == 0, "%s: %zu values differ from the bf16 rounding", a.name, bad);
        } else {
            TEST_CHECKF(memcmp(a.data, b.data, (size_t)a.bytes) == 0, "%s: bytes differ", a.name);
        }
    }
    TEST_CHECK(bitnet_gguf_tensor_count(out) == bitnet_gguf_tensor_count(src) + (o->untied ? 1 : 0));
    if (o->untied) {
        TEST_CHECK(bitnet_gguf_find_tensor(out, "output.weight", &b) == BITNET_OK && bitnet_gguf_find_tensor(out, "token_embd.weight", &a) == BITNET_OK &&
                   a.bytes == b.bytes && memcmp(a.data, b.data, (size_t)a.bytes) == 0);
    }
}

/* Greedy tokens of two files agree (the converted one loads and runs). */
static void check_generation(const char *pa, const char *pb) {
    bitnet_model_desc d;
    bitnet_model *ma = NULL, *mb = NULL;
    bitnet_session *sa = NULL, *sb = NULL;
    int32_t ta[16], tb[16], na = 0, nb = 0;
    int i;
    memset(&d, 0, sizeof d);
    d.backend = BITNET_BACKEND_CPU;
    d.path = pa;
    TEST_CHECKF(bitnet_model_load(&d, &ma) == BITNET_OK, "%s", bitnet_last_error());
    d.path = pb;
    TEST_CHECKF(bitnet_model_load(&d, &mb) == BITNET_OK, "%s", bitnet_last_error());
    if (ma && mb && bitnet_session_create(ma, NULL, &sa) == BITNET_OK && bitnet_session_create(mb, NULL, &sb) == BITNET_OK) {
        bitnet_generate_params gp;
        const int32_t prompt[4] = {549, 84, 104, 101};
        bitnet_generate_stats st;
        memset(&gp, 0, sizeof gp);
        gp.max_tokens = 12, gp.n_stop = 0, gp.stop_tokens = prompt; /* non-NULL, none: all 12 */
        TEST_CHECK(bitnet_generate(sa, prompt, 4, &gp, ta, 16, &st) == BITNET_OK);
        na = (int32_t)st.n_generated;
        TEST_CHECK(bitnet_generate(sb, prompt, 4, &gp, tb, 16, &st) == BITNET_OK);
        nb = (int32_t)st.n_generated;
        TEST_CHECK(na == 12 && nb == na);
        for (i = 0; i < na && i < nb; i++) TEST_CHECKF(ta[i] == tb[i], "token %d: %d against %d", i, ta[i], tb[i]);
    }
    bitnet_session_free(sa), bitnet_session_free(sb);
    bitnet_model_free(ma), bitnet_model_free(mb);
}

static void roundtrip_from(const char *label, const char *src_path, const hf_opts *o) {
    char dir[640], out[700];
    bitnet_gguf *src = NULL, *g = NULL;
    bitnet_result r;
    if (bitnet_gguf_open(src_path, &src) != BITNET_OK) { TEST_CHECKF(0, "%s: %s", src_path, bitnet_last_error()); return; }
    snprintf(dir, sizeof dir, "%s", tmp_path(label));
    snprintf(out, sizeof out, "%s.gguf", dir);
    hf_write(dir, src, o);
    r = bitnet_convert_hf(dir, out);
    TEST_CHECKF(r == BITNET_OK, "%s: %s", label, bitnet_last_error());
    if (r == BITNET_OK && bitnet_gguf_open(out, &g) == BITNET_OK) {
        check_metadata(src, g);
        check_tensors(src, g, o);
        bitnet_gguf_close(g);
        check_generation(src_path, out);
    }
    bitnet_gguf_close(src);
    rm_dir(dir);
    remove(out);
}
static void roundtrip(const char *label, const hf_opts *o) { roundtrip_from(label, "tests/data/tiny.gguf", o); }

/* A ternary LLaMA (Llama3-8B-1.58's kind): gen-model's "llama" file (q and k rows in llama.cpp's RoPE
   order, no sub-norms) written as a LlamaForCausalLM checkpoint in Hugging Face's row order, and
   converted back to the same bytes. */
static void test_roundtrip_llama(void) {
    const char *build = getenv("BUILD"), *runner = getenv("RUNNER");
    char bin[512], path[700], cmd[2048];
    hf_opts o;
    FILE *f;
    if (runner && *runner) TEST_SKIP("the CLI is not run under RUNNER=%s", runner);
    snprintf(bin, sizeof bin, "%s/bitnet", build && *build ? build : "build");
    if (!(f = fopen(bin, "rb"))) TEST_SKIP("%s not built", bin);
    fclose(f);
    snprintf(path, sizeof path, "%s", tmp_path("llama-src.gguf"));
    snprintf(cmd, sizeof cmd, "%s gen-model --preset tiny --seed 3 --arch llama -o %s 2>/dev/null", bin, path);
    TEST_CHECK(system(cmd) == 0);
    memset(&o, 0, sizeof o);
    o.untied = 1;
    roundtrip_from("llama", path, &o);
    /* Falcon 3's pre-tokenizer and Llama 3.1's RoPE scaling: tokenizer.ggml.pre "falcon3" and gen-model's
       own rope_freqs.weight, byte for byte */
    snprintf(cmd, sizeof cmd, "%s gen-model --preset tiny --seed 4 --arch llama --pre falcon3 --rope-scaling llama3 -o %s 2>/dev/null",
             bin, path);
    TEST_CHECK(system(cmd) == 0);
    roundtrip_from("falcon3_rope", path, &o);
    remove(path);
}

static void test_roundtrip_packed(void) {
    hf_opts o;
    memset(&o, 0, sizeof o);
    roundtrip("packed", &o);
}

static void test_roundtrip_forms(void) {
    hf_opts o;
    memset(&o, 0, sizeof o);
    o.merges_pairs = 1, o.shards = 1;
    roundtrip("pairs_shards", &o);
    memset(&o, 0, sizeof o);
    o.bitlinear = 1, o.bf16_embed = 1, o.untied = 1;
    roundtrip("bitlinear_bf16_untied", &o);
    memset(&o, 0, sizeof o);
    o.bitlinear = 2; /* transformers' default class */
    roundtrip("bitlinear_default", &o);
}

/* Embedding rows past the tokenizer's ids get "[PADn]" tokens of type 5 (unused), as llama.cpp's
   converter names them; the file loads and generates. */
static void test_padded_vocab(void) {
    char dir[640], out[700], want[32];
    bitnet_gguf *src = open_tiny(), *g = NULL;
    bitnet_model_desc d;
    bitnet_model *m = NULL;
    bitnet_session *s = NULL;
    bitnet_gguf_str t;
    hf_opts o;
    uint32_t nv = 0;
    int i;
    if (!src) { TEST_CHECK(0); return; }
    memset(&o, 0, sizeof o);
    o.pad = 8;
    snprintf(dir, sizeof dir, "%s", tmp_path("pad"));
    snprintf(out, sizeof out, "%s.gguf", dir);
    hf_write(dir, src, &o);
    TEST_CHECKF(bitnet_convert_hf(dir, out) == BITNET_OK, "%s", bitnet_last_error());
    TEST_CHECK(bitnet_gguf_open(out, &g) == BITNET_OK);
    TEST_CHECK(g && bitnet_gguf_get_u32(g, "bitnet-b1.58.vocab_size", &nv) == BITNET_OK && nv == 560);
    for (i = 552; g && i < 560; i++) {
        snprintf(want, sizeof want, "[PAD%d]", i);
        TEST_CHECK(bitnet_gguf_arr_str(g, "tokenizer.ggml.tokens", (uint64_t)i, &t) == BITNET_OK && t.len == strlen(want) &&
                   memcmp(t.ptr, want, t.len) == 0 && ((const int32_t *)bitnet_gguf_arr_data(g, "tokenizer.ggml.token_type"))[i] == 5);
    }
    bitnet_gguf_close(g);
    memset(&d, 0, sizeof d);
    d.path = out, d.backend = BITNET_BACKEND_CPU;
    TEST_CHECKF(bitnet_model_load(&d, &m) == BITNET_OK && bitnet_session_create(m, NULL, &s) == BITNET_OK, "%s", bitnet_last_error());
    if (s) {
        const int32_t prompt[2] = {549, 84};
        int32_t toks[4];
        bitnet_generate_params gp;
        memset(&gp, 0, sizeof gp);
        gp.max_tokens = 4;
        TEST_CHECK(bitnet_generate(s, prompt, 2, &gp, toks, 4, NULL) == BITNET_OK);
    }
    bitnet_session_free(s), bitnet_model_free(m);
    bitnet_gguf_close(src);
    rm_dir(dir);
    remove(out);
}

/* Float master weights: each matrix is bitnet_quantize_ternary of its bf16 values. */
static void test_master_weights(void) {
    char dir[640], out[700];
    bitnet_gguf *src = open_tiny(), *g = NULL;
    hf_opts o;
    int l, k;
    if (!src) { TEST_CHECK(0); return; }
    memset(&o, 0, sizeof o);
    o.master = 1;
    snprintf(dir, sizeof dir, "%s", tmp_path("master"));
    snprintf(out, sizeof out, "%s.gguf", dir);
    test_seed(77);
    hf_write(dir, src, &o);
    TEST_CHECKF(bitnet_convert_hf(dir, out) == BITNET_OK, "%s", bitnet_last_error());
    TEST_CHECK(bitnet_gguf_open(out, &g) == BITNET_OK);
    test_seed(77); /* the same draws again, in the same order */
    for (l = 0; g && l < 2; l++)
        for (k = 0; k < 11; k++) {
            char name[96];
            bitnet_tensor_info a, b;
            size_t n, kk, e, ib;
            float *w, s;
            int8_t *q;
            unsigned char *want;
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, parts[k][0]);
            bitnet_gguf_find_tensor(src, name, &a);
            if (a.type != BITNET_TENSOR_I2_S) continue;
            n = (size_t)a.ne[1], kk = (size_t)a.ne[0], ib = bitnet_i2s_bytes(n, kk);
            w = (float *)malloc(n * kk * 4), q = (int8_t *)malloc(n * kk), want = (unsigned char *)malloc(ib);
            for (e = 0; e < n * kk; e++) w[e] = bitnet_bf16_to_fp32(to_bf16(test_rand_float(-0.05f, 0.05f) * (1 + l + k)));
            bitnet_quantize_ternary(w, n * kk, q, &s);
            bitnet_i2s_pack(q, n, kk, s, want, ib);
            TEST_CHECKF(bitnet_gguf_find_tensor(g, name, &b) == BITNET_OK && b.bytes == ib && memcmp(b.data, want, ib) == 0, "%s", name);
            free(w), free(q), free(want);
        }
    bitnet_gguf_close(g);
    bitnet_gguf_close(src);
    rm_dir(dir);
    remove(out);
}

/* ---- broken folders ---- */
static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    unsigned char *b;
    long sz;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    b = (unsigned char *)malloc((size_t)sz + 1);
    *n = fread(b, 1, (size_t)sz, f);
    fclose(f);
    b[*n] = 0;
    return b;
}
static void spit(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(b, 1, n, f);
    fclose(f);
}

/* Converting dir fails with code and a message holding want, and leaves no file. */
static void expect_fail(const char *dir, const char *out, bitnet_result code, const char *want, const char *what) {
    bitnet_result r = bitnet_convert_hf(dir, out);
    FILE *f = fopen(out, "rb");
    TEST_CHECKF(r == code && strstr(bitnet_last_error(), want), "%s: %s (%d), want %s (%d) with \"%s\": %s", what, bitnet_result_string(r),
                (int)r, bitnet_result_string(code), (int)code, want, bitnet_last_error());
    TEST_CHECKF(!f, "%s: %s was left behind", what, out);
    if (f) fclose(f), remove(out);
}

/* The first from in b (n bytes) replaced by to; a safetensors file's header length follows. 0: no from. */
static int edit(unsigned char **b, size_t *n, const char *file, const char *from, const char *to) {
    size_t fl = strlen(from), tl = strlen(to), at;
    unsigned char *m;
    for (at = 0; at + fl <= *n && memcmp(*b + at, from, fl) != 0; at++) {}
    if (at + fl > *n) return 0;
    m = (unsigned char *)malloc(*n - fl + tl + 1);
    memcpy(m, *b, at);
    memcpy(m + at, to, tl);
    memcpy(m + at + tl, *b + at + fl, *n - at - fl);
    if (strstr(file, ".safetensors") && !strstr(file, ".json")) {
        uint64_t hl;
        memcpy(&hl, m, 8);
        hl += tl - fl;
        memcpy(m, &hl, 8);
    }
    free(*b);
    *b = m, *n = *n - fl + tl;
    return 1;
}

/* file with from replaced by to (and from2 by to2 when given), converted, then put back */
static void mutate2(const char *dir, const char *out, const char *file, const char *from, const char *to, const char *from2,
                    const char *to2, bitnet_result code, const char *want) {
    char p[768];
    size_t n = 0, n0;
    unsigned char *orig, *b;
    snprintf(p, sizeof p, "%s/%s", dir, file);
    if (!(orig = slurp(p, &n))) { TEST_CHECKF(0, "%s: cannot read", p); return; }
    n0 = n;
    b = (unsigned char *)malloc(n + 1);
    memcpy(b, orig, n);
    if (!edit(&b, &n, file, from, to) || (from2 && !edit(&b, &n, file, from2, to2))) TEST_CHECKF(0, "%s: no %s", file, from);
    else {
        spit(p, b, n);
        expect_fail(dir, out, code, want, from);
        spit(p, orig, n0);
    }
    free(b), free(orig);
}
static void mutate(const char *dir, const char *out, const char *file, const char *from, const char *to, bitnet_result code, const char *want) {
    mutate2(dir, out, file, from, to, NULL, NULL, code, want);
}

static void test_broken_config_and_tokenizer(void) {
    char dir[640], out[700];
    bitnet_gguf *src = open_tiny();
    hf_opts o;
    static const struct { const char *file, *from, *to; bitnet_result code; const char *want; } cases[] = {
        {"config.json", "\"model_type\": \"bitnet\"", "\"model_type\": \"gpt2\"", BITNET_ERR_UNSUPPORTED, "model_type \"gpt2\""},
        {"config.json", "\"model_type\": \"bitnet\"", "\"model_type\": \"llama\"", BITNET_ERR_UNSUPPORTED,
         "hidden_act \"relu2\"; a ternary LLaMA has \"silu\""},
        {"config.json", "\"relu2\"", "\"silu\"", BITNET_ERR_UNSUPPORTED, "hidden_act \"silu\""},
        {"config.json", "\"hidden_size\"", "\"hidden_sighs\"", BITNET_ERR_BAD_METADATA, "no \"hidden_size\""},
        {"config.json", "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3", BITNET_ERR_BAD_METADATA, "key-value heads"},
        {"config.json", "\"num_attention_heads\": 4", "\"num_attention_heads\": 4.5", BITNET_ERR_BAD_METADATA, "num_attention_heads"},
        {"config.json", "\"rope_scaling\": null", "\"rope_scaling\": {\"type\": \"linear\"}", BITNET_ERR_UNSUPPORTED, "rope_type \"linear\""},
        {"config.json", "\"rope_scaling\": null", "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0}", BITNET_ERR_BAD_METADATA,
         "llama3 RoPE scaling needs factor"},
        {"config.json", "\"rope_scaling\": null", "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 4.0, "
         "\"high_freq_factor\": 1.0, \"original_max_position_embeddings\": 8192}", BITNET_ERR_BAD_METADATA, "is not above low_freq_factor"},
        {"config.json", "\"rope_scaling\": null", "\"rope_scaling\": 3", BITNET_ERR_BAD_METADATA, "rope_scaling is not an object"},
        {"config.json", "\"rope_scaling\": null", "\"rope_parameters\": {\"rope_type\": \"yarn\", \"rope_theta\": 10000.0}", BITNET_ERR_UNSUPPORTED,
         "rope_type \"yarn\""},
        {"config.json", "\"quant_method\": \"bitnet\"", "\"quant_method\": \"gptq\"", BITNET_ERR_UNSUPPORTED, "quant_method \"gptq\""},
        {"config.json", "\"quant_method\": \"bitnet\"", "\"use_rms_norm\": true, \"quant_method\": \"bitnet\"", BITNET_ERR_UNSUPPORTED, "use_rms_norm"},
        {"config.json", "\"quant_method\": \"bitnet\"", "\"modules_to_not_convert\": [\"lm_head\", \"model.layers.0.mlp.up_proj\"], \"quant_method\": \"bitnet\"",
         BITNET_ERR_UNSUPPORTED, "modules_to_not_convert"},
        {"config.json", "\"linear_class\": \"autobitlinear\"", "\"linear_class\": \"fancylinear\"", BITNET_ERR_UNSUPPORTED, "linear_class \"fancylinear\""},
        {"config.json", ",\n \"quantization_config\"", ",\n \"quantization_confik\"", BITNET_ERR_UNSUPPORTED, "no quantization_config"},
        {"config.json", "\"intermediate_size\": 384", "\"intermediate_size\": 320", BITNET_ERR_UNSUPPORTED, "multiples of 128"},
        {"config.json", "\"intermediate_size\": 384", "\"intermediate_size\": 512", BITNET_ERR_BAD_SHAPE, "mlp.gate_proj.weight\" is not [128, 128]"},
        {"config.json", "\"bos_token_id\": ", "\"bos_token_id\": 9999, \"x\": ", BITNET_ERR_BAD_METADATA, "bos_token_id is not an id below 552"},
        {"config.json", "\"eos_token_id\": ", "\"eos_token_idd\": ", BITNET_ERR_BAD_METADATA, "no eos_token_id (nor tokenizer_config.json's eos_token"},
        {"config.json", "{", "{\"a\": 1, \"a\": 2, ", BITNET_ERR_CORRUPT, "duplicate member \"a\""},
        {"config.json", "}\n", "", BITNET_ERR_CORRUPT, "config.json: JSON: unterminated object"},
        {"tokenizer.json", "\"normalizer\": null", "\"normalizer\": {\"type\": \"NFC\"}", BITNET_ERR_UNSUPPORTED, "normalizer"},
        {"tokenizer.json", "\\\\p{N}{1,3}", "\\\\p{N}+", BITNET_ERR_UNSUPPORTED, "neither LLaMA 3's"},
        {"tokenizer.json", "\"use_regex\": false", "\"use_regex\": true", BITNET_ERR_UNSUPPORTED, "neither LLaMA 3's"},
        {"tokenizer.json", "\"use_regex\": false}", "\"use_regex\": false}, {\"type\": \"Digits\", \"individual_digits\": true}",
         BITNET_ERR_UNSUPPORTED, "neither LLaMA 3's"},
        {"tokenizer.json", "\"behavior\": \"Isolated\"", "\"behavior\": \"Removed\"", BITNET_ERR_UNSUPPORTED, "neither LLaMA 3's"},
        {"tokenizer.json", "\"type\": \"BPE\"", "\"type\": \"Unigram\"", BITNET_ERR_UNSUPPORTED, "model type \"Unigram\""},
        {"tokenizer.json", "\"byte_fallback\": false", "\"byte_fallback\": true", BITNET_ERR_UNSUPPORTED, "byte_fallback"},
        {"tokenizer.json", "\"vocab\": {", "\"vocab\": {\"zzz\": 552, ", BITNET_ERR_BAD_METADATA, "token \"zzz\" has no id below"},
        {"tokenizer.json", "\"vocab\": {", "\"vocab\": {\"zzz\": 0, ", BITNET_ERR_BAD_METADATA, "id 0 twice"},
        {"tokenizer.json", "\"vocab\": {", "\"vocab\": {\"Ā\": 1, ", BITNET_ERR_CORRUPT, "duplicate member \"Ā\""},
        {"tokenizer.json", "\"merges\": [", "\"merges\": [\"nospace\", ", BITNET_ERR_BAD_METADATA, "merge 0 \"nospace\" is not two tokens"},
        {"tokenizer.json", "\"merges\": [", "\"merges\": [[\"a\", 3], ", BITNET_ERR_BAD_METADATA, "merge 0 is neither"},
        {"tokenizer.json", "\"merges\": [", "\"merges\": [[\"a b\", \"c\"], ", BITNET_ERR_BAD_METADATA, "merge 0 has an empty token or a space"},
        {"tokenizer.json", "\"id\": 549", "\"id\": 552", BITNET_ERR_BAD_METADATA, "an added token without content or an id below 552"},
        {"tokenizer.json", "\"id\": 549", "\"id\": 550", BITNET_ERR_BAD_METADATA, "id 550 added twice"},
    };
    size_t i;
    if (!src) { TEST_CHECK(0); return; }
    memset(&o, 0, sizeof o);
    snprintf(dir, sizeof dir, "%s", tmp_path("broken"));
    snprintf(out, sizeof out, "%s.gguf", dir);
    hf_write(dir, src, &o);
    TEST_CHECKF(bitnet_convert_hf(dir, out) == BITNET_OK, "%s", bitnet_last_error()); /* the folder is good before */
    remove(out);
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) mutate(dir, out, cases[i].file, cases[i].from, cases[i].to, cases[i].code, cases[i].want);
    mutate2(dir, out, "config.json", "\"model_type\": \"bitnet\"", "\"model_type\": \"llama\"", "\"quantization_config\"",
            "\"quantization_confik\"", BITNET_ERR_UNSUPPORTED, "a LLaMA without a bitnet quantization_config is no ternary model");
    {
        char p[768];
        snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
        remove(p); /* optional */
        TEST_CHECKF(bitnet_convert_hf(dir, out) == BITNET_OK, "without tokenizer_config.json: %s", bitnet_last_error());
        remove(out);
        snprintf(p, sizeof p, "%s/config.json", dir);
        remove(p);
        expect_fail(dir, out, BITNET_ERR_IO, "config.json", "no config.json");
    }
    TEST_CHECK(bitnet_convert_hf(NULL, out) == BITNET_ERR_NULL_POINTER && bitnet_convert_hf(dir, NULL) == BITNET_ERR_NULL_POINTER);
    rm_dir(dir);
    bitnet_gguf_close(src);
}

static void test_broken_weights(void) {
    char dir[640], out[700], p[768];
    bitnet_gguf *src = open_tiny();
    hf_opts o;
    unsigned char *b;
    size_t n = 0, cut;
    int fails = 0;
    if (!src) { TEST_CHECK(0); return; }
    snprintf(dir, sizeof dir, "%s", tmp_path("weights"));
    snprintf(out, sizeof out, "%s.gguf", dir);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    memset(&o, 0, sizeof o);
    o.poison = 1;
    hf_write(dir, src, &o);
    expect_fail(dir, out, BITNET_ERR_CORRUPT, "model.layers.1.mlp.down_proj: bitnet_i2s_from_hf: weight", "code 3");
    o.poison = 2;
    hf_write(dir, src, &o);
    expect_fail(dir, out, BITNET_ERR_CORRUPT, "model.layers.0.self_attn.o_proj.weight_scale gives the scale nan", "NaN scale");
    o.poison = 3, o.bf16_embed = 1;
    hf_write(dir, src, &o);
    expect_fail(dir, out, BITNET_ERR_UNSUPPORTED, "model.embed_tokens.weight [276][0] = 999424 is beyond fp16", "embedding range");
    o.poison = 4, o.bf16_embed = 0;
    hf_write(dir, src, &o);
    expect_fail(dir, out, BITNET_ERR_UNSUPPORTED, "self_attn.k_proj.bias\": BitNet has no biases", "bias");
    o.poison = 0;
    hf_write(dir, src, &o);
    mutate(dir, out, "model.safetensors", "\"model.norm.weight\"", "\"model.norm.weighT\"", BITNET_ERR_MISSING_TENSOR, "no \"model.norm.weight\"");
    mutate(dir, out, "model.safetensors", "\"model.layers.0.self_attn.q_proj.weight_scale\"", "\"model.layers.0.self_attn.q_proj.weight_scalE\"",
           BITNET_ERR_MISSING_TENSOR, "packed weights without \"model.layers.0.self_attn.q_proj.weight_scale\"");
    mutate(dir, out, "model.safetensors", "\"dtype\":\"F32\",\"shape\":[128]", "\"dtype\":\"I32\",\"shape\":[128]", BITNET_ERR_UNSUPPORTED_TYPE,
           "is not F32, F16 or BF16");
    mutate(dir, out, "model.safetensors", "\"dtype\":\"F32\",\"shape\":[128]", "\"dtype\":\"F33\",\"shape\":[128]", BITNET_ERR_CORRUPT,
           "no known dtype");
    mutate(dir, out, "model.safetensors", "\"shape\":[128]", "\"shape\":[64,2]", BITNET_ERR_BAD_SHAPE, "is not [128]");
    mutate(dir, out, "model.safetensors", "\"shape\":[128]", "\"shape\":[129]", BITNET_ERR_BAD_SHAPE, "516 bytes for its shape and dtype, 512 stored");
    mutate(dir, out, "model.safetensors", "\"shape\":[128]", "\"shape\":[-1]", BITNET_ERR_BAD_SHAPE, "bad shape");
    mutate(dir, out, "model.safetensors", "\"shape\":[128]", "\"shape\":[1,1,1,1,128]", BITNET_ERR_BAD_SHAPE, "at most 4 sizes");
    mutate(dir, out, "model.safetensors", "\"data_offsets\":[0,", "\"data_offsets\":[1e3,", BITNET_ERR_CORRUPT, "bad data_offsets");
    mutate(dir, out, "model.safetensors", "\"data_offsets\":[0,", "\"data_offsets\":[99999999999,", BITNET_ERR_TRUNCATED, "beyond the file");
    /* the header's length says more than the file holds, then every truncation */
    b = slurp(p, &n);
    if (b) {
        unsigned char *c = (unsigned char *)malloc(n);
        memcpy(c, b, n);
        c[7] = 0x7f;
        spit(p, c, n);
        expect_fail(dir, out, BITNET_ERR_TRUNCATED, "a header of", "header length");
        for (cut = 0; cut < n; cut += cut < 2048 ? 1 : 997) {
            bitnet_result r;
            spit(p, b, cut);
            r = bitnet_convert_hf(dir, out);
            fails += r != BITNET_OK;
            if (r == BITNET_OK) TEST_CHECKF(0, "truncated at %zu of %zu: converted", cut, n);
        }
        TEST_CHECK(fails > 0);
        remove(out);
        spit(p, b, n);
        free(c), free(b);
    }
    /* shards: a file outside the folder, a tensor in two shards, a missing shard */
    rm_dir(dir);
    o.shards = 1;
    hf_write(dir, src, &o);
    mutate(dir, out, "model.safetensors.index.json", "\"model-00002-of-00002.safetensors\"", "\"../model-00002-of-00002.safetensors\"",
           BITNET_ERR_CORRUPT, "is not a file name in the folder");
    mutate(dir, out, "model.safetensors.index.json", "\"weight_map\"", "\"weight_mop\"", BITNET_ERR_CORRUPT, "no weight_map");
    mutate(dir, out, "model-00002-of-00002.safetensors", "\"model.layers.0.input_layernorm.weight\"",
           "\"model.layers.0.attn_q_proj.weightXXXXXX\"", BITNET_ERR_MISSING_TENSOR, "no \"model.layers.0.input_layernorm.weight\"");
    mutate(dir, out, "model-00002-of-00002.safetensors", "\"model.layers.0.input_layernorm.weight\"",
           "\"model.embed_tokens.weight\"", BITNET_ERR_DUPLICATE_TENSOR, "\"model.embed_tokens.weight\" in two shards");
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
    remove(p);
    expect_fail(dir, out, BITNET_ERR_IO, "model-00002-of-00002.safetensors", "a missing shard");
    rm_dir(dir);
    bitnet_gguf_close(src);
}

/* The LLaMA 3 vocabulary (128,256 tokens, 280k merges) through tokenizer.json: the same tokens,
   types and merges as bitnet_vocab_from_tiktoken gives, and the same ids for texts. */
static void test_llama3_vocabulary(void) {
    static const char *const c[] = {"../shared/data/llama3-tokenizer.tiktoken", "../../shared/data/llama3-tokenizer.tiktoken",
                                    ".dev/llama3-tokenizer.tiktoken"};
    const char *path = getenv("BITNET_TIKTOKEN");
    char dir[640], out[700], gpath[700], p[768];
    bitnet_vocab v;
    bitnet_gguf_writer *w = NULL;
    bitnet_gguf *g = NULL;
    size_t i;
    uint8_t yes = 1;
    for (i = 0; (!path || !*path) && i < sizeof c / sizeof c[0]; i++)
        if (access(c[i], R_OK) == 0) path = c[i];
    if (!path || !*path) TEST_SKIP("no llama3-tokenizer.tiktoken (set BITNET_TIKTOKEN or put it in ../shared/data)");
    memset(&v, 0, sizeof v);
    TEST_CHECK(bitnet_vocab_from_tiktoken(path, 256, &v) == BITNET_OK);
    snprintf(dir, sizeof dir, "%s", tmp_path("llama3"));
    snprintf(out, sizeof out, "%s.gguf", dir);
    snprintf(gpath, sizeof gpath, "%s.src.gguf", dir);
    /* a GGUF with the tiny model's shape and this vocabulary (embedding rows random), as the source */
    {
        bitnet_gguf *t = open_tiny();
        uint64_t k, ne[2];
        bitnet_tensor_info ti;
        size_t n_emb = 128 * (size_t)v.n_tokens;
        uint16_t *emb = (uint16_t *)malloc(n_emb * 2);
        for (i = 0; i < n_emb; i++) emb[i] = bitnet_fp32_to_fp16(test_rand_float(-0.1f, 0.1f));
        bitnet_gguf_writer_create(&w);
        for (k = 0; k < bitnet_gguf_kv_count(t); k++) {
            const char *key = bitnet_gguf_key_name(t, k);
            uint32_t u;
            float f;
            bitnet_gguf_str s;
            if (strncmp(key, "tokenizer.ggml.", 15) == 0 || strcmp(key, "bitnet-b1.58.vocab_size") == 0) continue;
            if (bitnet_gguf_key_type(t, k) == BITNET_GGUF_UINT32) bitnet_gguf_get_u32(t, key, &u), bitnet_gguf_writer_set_u32(w, key, u);
            else if (bitnet_gguf_key_type(t, k) == BITNET_GGUF_FLOAT32) bitnet_gguf_get_f32(t, key, &f), bitnet_gguf_writer_set_f32(w, key, f);
            else if (bitnet_gguf_key_type(t, k) == BITNET_GGUF_STRING) {
                char buf[512];
                bitnet_gguf_get_str(t, key, &s);
                snprintf(buf, sizeof buf, "%.*s", (int)s.len, s.ptr);
                bitnet_gguf_writer_set_str(w, key, buf);
            }
        }
        bitnet_gguf_writer_set_u32(w, "bitnet-b1.58.vocab_size", (uint32_t)v.n_tokens);
        bitnet_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
        bitnet_gguf_writer_set_str(w, "tokenizer.ggml.pre", "llama-bpe");
        bitnet_gguf_writer_set_arr(w, "tokenizer.ggml.tokens", BITNET_GGUF_STRING, v.tokens, v.n_tokens);
        bitnet_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", BITNET_GGUF_INT32, v.token_types, v.n_tokens);
        bitnet_gguf_writer_set_arr(w, "tokenizer.ggml.merges", BITNET_GGUF_STRING, v.merges, v.n_merges);
        bitnet_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 128000);
        bitnet_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 128001);
        bitnet_gguf_writer_set_u32(w, "tokenizer.ggml.eot_token_id", 128009);
        bitnet_gguf_writer_set(w, "tokenizer.ggml.add_bos_token", BITNET_GGUF_BOOL, &yes);
        for (k = 0; k < bitnet_gguf_tensor_count(t); k++) {
            bitnet_gguf_tensor(t, k, &ti);
            ne[0] = ti.ne[0], ne[1] = k == 0 ? v.n_tokens : ti.ne[1];
            bitnet_gguf_writer_add_tensor(w, ti.name, ti.type, ti.n_dims, ne);
        }
        TEST_CHECK(bitnet_gguf_writer_begin(w, gpath) == BITNET_OK);
        for (k = 0; k < bitnet_gguf_tensor_count(t); k++) {
            bitnet_gguf_tensor(t, k, &ti);
            if (k == 0) bitnet_gguf_writer_write(w, emb, n_emb * 2);
            else bitnet_gguf_writer_write(w, ti.data, (size_t)ti.bytes);
        }
        TEST_CHECKF(bitnet_gguf_writer_finish(w) == BITNET_OK, "%s", bitnet_last_error());
        bitnet_gguf_writer_free(w);
        bitnet_gguf_close(t);
        free(emb);
    }
    TEST_CHECK(bitnet_gguf_open(gpath, &g) == BITNET_OK);
    if (g) {
        hf_opts o;
        bitnet_gguf *gc = NULL;
        memset(&o, 0, sizeof o);
        o.merges_pairs = 1;
        hf_write(dir, g, &o);
        snprintf(p, sizeof p, "%s/tokenizer.json", dir);
        TEST_CHECKF(bitnet_convert_hf(dir, out) == BITNET_OK, "%s", bitnet_last_error());
        if (bitnet_gguf_open(out, &gc) == BITNET_OK) {
            check_metadata(g, gc);
            bitnet_gguf_close(gc);
        }
        bitnet_gguf_close(g);
    }
    {
        static const char *const texts[] = {"Hello, world! It's 2026-11-29.", "  spaces\n\n\ttabs and ünïcödé 你好 🙂",
                                            "def f(x):\n    return x**2  # code", "<|begin_of_text|>User: hi<|eot_id|>Assistant: "};
        bitnet_model_desc d;
        bitnet_model *ma = NULL, *mb = NULL;
        memset(&d, 0, sizeof d);
        d.backend = BITNET_BACKEND_CPU;
        d.path = gpath;
        TEST_CHECK(bitnet_model_load(&d, &ma) == BITNET_OK);
        d.path = out;
        TEST_CHECKF(bitnet_model_load(&d, &mb) == BITNET_OK, "%s", bitnet_last_error());
        for (i = 0; ma && mb && i < sizeof texts / sizeof texts[0]; i++) {
            int32_t ta[128], tb[128];
            size_t na = 0, nb = 0;
            TEST_CHECK(bitnet_tokenize(bitnet_model_tokenizer(ma), texts[i], strlen(texts[i]), 1, 1, ta, 128, &na) == BITNET_OK);
            TEST_CHECK(bitnet_tokenize(bitnet_model_tokenizer(mb), texts[i], strlen(texts[i]), 1, 1, tb, 128, &nb) == BITNET_OK);
            TEST_CHECKF(na == nb && na > 2 && memcmp(ta, tb, na * 4) == 0, "text %zu", i);
        }
        bitnet_model_free(ma), bitnet_model_free(mb);
    }
    bitnet_vocab_free(&v);
    rm_dir(dir);
    remove(out);
    remove(gpath);
}

/* Llama 3.1's RoPE scaling, in transformers 4's rope_scaling and 5's rope_parameters: rope_freqs.weight
   holds each frequency's divisor as transformers' llama3 rule gives it (inv_freq / factor for long
   wavelengths, unchanged for short, interpolated between), and the file loads with it. */
static void test_rope_scaling(void) {
    static const char *const forms[2] = {
        "\"rope_scaling\": {\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
        "\"original_max_position_embeddings\": 64, \"rope_type\": \"llama3\"}",
        "\"rope_parameters\": {\"rope_type\": \"llama3\", \"rope_theta\": 500000.0, \"factor\": 8.0, \"low_freq_factor\": 1.0, "
        "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 64}"};
    char dir[640], out[700], p[768];
    bitnet_gguf *src = open_tiny(), *g = NULL;
    hf_opts o;
    int form;
    if (!src) { TEST_CHECK(0); return; }
    memset(&o, 0, sizeof o);
    snprintf(dir, sizeof dir, "%s", tmp_path("rope"));
    snprintf(out, sizeof out, "%s.gguf", dir);
    snprintf(p, sizeof p, "%s/config.json", dir);
    hf_write(dir, src, &o);
    for (form = 0; form < 2; form++) {
        size_t n = 0, n0, i, n_mid = 0, n_long = 0;
        unsigned char *b = slurp(p, &n), *orig = (unsigned char *)malloc(n + 1);
        bitnet_tensor_info t;
        bitnet_model_desc d;
        bitnet_model *m = NULL;
        bitnet_model_info info;
        memcpy(orig, b, n0 = n);
        TEST_CHECK(edit(&b, &n, "config.json", "\"rope_scaling\": null", forms[form]));
        spit(p, b, n);
        TEST_CHECKF(bitnet_convert_hf(dir, out) == BITNET_OK, "%s", bitnet_last_error());
        TEST_CHECK(bitnet_gguf_open(out, &g) == BITNET_OK);
        if (g && bitnet_gguf_find_tensor(g, "rope_freqs.weight", &t) == BITNET_OK) {
            const uint64_t hd = t.ne[0] * 2;
            const float *f = (const float *)t.data;
            TEST_CHECK(t.type == BITNET_TENSOR_F32 && hd == gu32(src, "%s.rope.dimension_count"));
            for (i = 0; i < t.ne[0]; i++) { /* transformers: inv_freq_llama = inv_freq / factor, or smoothed, or inv_freq */
                double inv = 1.0 / pow(500000.0, 2.0 * (double)i / (double)hd), wl = 2 * 3.141592653589793 / inv, want, smooth;
                smooth = (64.0 / wl - 1.0) / (4.0 - 1.0);
                want = wl > 64.0 ? inv / 8 : wl < 16.0 ? inv : (1 - smooth) * inv / 8 + smooth * inv;
                n_long += wl > 64.0, n_mid += wl >= 16.0 && wl <= 64.0;
                TEST_CHECKF(fabs(inv / f[i] - want) <= 1e-6 * want, "rope_freqs[%zu] = %g: frequency %g, want %g", i, (double)f[i], inv / f[i], want);
            }
            TEST_CHECKF(n_long > 0 && n_mid > 0, "the test's frequencies cover each rule (%zu long, %zu between)", n_long, n_mid);
        } else {
            TEST_CHECKF(0, "form %d: no rope_freqs.weight", form);
        }
        bitnet_gguf_close(g);
        memset(&d, 0, sizeof d);
        d.path = out, d.backend = BITNET_BACKEND_CPU;
        TEST_CHECKF(bitnet_model_load(&d, &m) == BITNET_OK && bitnet_model_get_info(m, &info) == BITNET_OK && info.rope_freqs == 1, "%s",
                    bitnet_last_error());
        bitnet_model_free(m);
        spit(p, orig, n0);
        free(b), free(orig);
        remove(out);
    }
    rm_dir(dir);
    bitnet_gguf_close(src);
}

/* `bitnet convert DIR -o FILE` then `bitnet run` on the result. */
static void test_cli(void) {
    const char *build = getenv("BUILD"), *runner = getenv("RUNNER");
    char bin[512], dir[640], out[700], cmd[4096];
    bitnet_gguf *src = open_tiny();
    hf_opts o;
    FILE *f;
    if (!src) { TEST_CHECK(0); return; }
    if (runner && *runner) { bitnet_gguf_close(src); TEST_SKIP("the CLI is not run under RUNNER=%s", runner); }
    snprintf(bin, sizeof bin, "%s/bitnet", build && *build ? build : "build");
    if (!(f = fopen(bin, "rb"))) { bitnet_gguf_close(src); TEST_SKIP("%s not built", bin); }
    fclose(f);
    memset(&o, 0, sizeof o);
    snprintf(dir, sizeof dir, "%s", tmp_path("cli"));
    snprintf(out, sizeof out, "%s.gguf", dir);
    hf_write(dir, src, &o);
    snprintf(cmd, sizeof cmd, "%s convert %s -o %s 2>/dev/null && %s run -m %s -p hello -n 4 --seed 1 >/dev/null 2>&1", bin, dir, out, bin, out);
    TEST_CHECK(system(cmd) == 0);
    snprintf(cmd, sizeof cmd, "%s convert %s/nothing -o %s 2>/dev/null", bin, dir, out);
    TEST_CHECK(system(cmd) != 0);
    snprintf(cmd, sizeof cmd, "%s convert %s 2>/dev/null", bin, dir);
    TEST_CHECK(system(cmd) != 0);
    rm_dir(dir);
    remove(out);
    bitnet_gguf_close(src);
}

int main(void) {
    RUN_TEST(test_roundtrip_packed);
    RUN_TEST(test_roundtrip_forms);
    RUN_TEST(test_roundtrip_llama);
    RUN_TEST(test_padded_vocab);
    RUN_TEST(test_master_weights);
    RUN_TEST(test_broken_config_and_tokenizer);
    RUN_TEST(test_broken_weights);
    RUN_TEST(test_rope_scaling);
    RUN_TEST(test_llama3_vocabulary);
    RUN_TEST(test_cli);
    return test_summary();
}
