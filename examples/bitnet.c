/* bitnet: the command-line program. `bitnet help` lists the subcommands. */
#define BITNET_IMPLEMENTATION
#include "../bitnet.h"
#include <stdio.h>
#include <string.h>

typedef int (*cmd_fn)(int argc, char **argv);
typedef struct { const char *name; cmd_fn fn; const char *usage; } command;

static int cmd_help(int argc, char **argv);

static int cmd_version(int argc, char **argv) {
    (void)argc; (void)argv;
    printf("bitnet %s (cpu path %s)\n", BITNET_VERSION_STRING, bitnet_isa_name(bitnet_cpu_isa()));
    return 0;
}

/* >>cli-commands: one function per subcommand, listed in the table below. */

/* ---- devices, kernels (GPU runtime) ---- */
static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c == '\n') printf("\\n");
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}
static const char *yes(int v) { return v ? "yes" : "no"; }
static const char *jbool(int v) { return v ? "true" : "false"; }

static void print_device_json(const bitnet_gpu_device_info *d) {
    printf("{\"ordinal\": %d, \"name\": ", d->ordinal);
    json_str(d->name);
    printf(", \"pci_bus_id\": ");
    json_str(d->pci_bus_id);
    printf(", \"compute_capability\": \"%d.%d\", \"jit_target\": ", d->cc_major, d->cc_minor);
    json_str(d->jit_target);
    printf(", \"total_mem\": %llu, \"free_mem\": %llu, \"sm_count\": %d, \"max_threads_per_block\": %d, "
           "\"smem_per_block\": %d, \"smem_per_block_optin\": %d, \"l2_bytes\": %d, \"clock_khz\": %d, "
           "\"mem_clock_khz\": %d, \"mem_bus_bits\": %d, \"mem_bandwidth_gbs\": %.1f, \"fp16\": %s, \"bf16\": %s, "
           "\"int8_tensor_cores\": %s, \"fp8\": %s}",
           (unsigned long long)d->total_mem, (unsigned long long)d->free_mem, d->sm_count, d->max_threads_per_block,
           d->smem_per_block, d->smem_per_block_optin, d->l2_bytes, d->clock_khz, d->mem_clock_khz, d->mem_bus_bits,
           d->mem_bandwidth_gbs, jbool(d->fp16), jbool(d->bf16), jbool(d->int8_tensor_cores), jbool(d->fp8));
}

static void print_device_text(const bitnet_gpu_device_info *d) {
    printf("device %d: %s%s%s%s\n", d->ordinal, d->name, d->pci_bus_id[0] ? " (PCI " : "", d->pci_bus_id,
           d->pci_bus_id[0] ? ")" : "");
    printf("  compute capability %d.%d, JIT target %s\n", d->cc_major, d->cc_minor,
           d->jit_target[0] ? d->jit_target : "none (no NVRTC)");
    printf("  %d SMs at %d MHz, %d threads per block\n", d->sm_count, d->clock_khz / 1000, d->max_threads_per_block);
    printf("  memory %.2f GiB total, %.2f GiB free; %d-bit bus at %d MHz: %.1f GB/s theoretical\n",
           (double)d->total_mem / 1073741824.0, (double)d->free_mem / 1073741824.0, d->mem_bus_bits,
           d->mem_clock_khz / 1000, d->mem_bandwidth_gbs);
    printf("  L2 %.1f MiB; shared memory per block %d KiB (%d KiB opt-in)\n", d->l2_bytes / 1048576.0,
           d->smem_per_block / 1024, d->smem_per_block_optin / 1024);
    printf("  fp16 %s, bf16 %s, int8 tensor cores %s, fp8 %s\n", yes(d->fp16), yes(d->bf16), yes(d->int8_tensor_cores),
           yes(d->fp8));
}

static int cmd_devices(int argc, char **argv) {
    bitnet_gpu_backends b;
    int i, json = 0, n;
    const char *fake = getenv("BITNET_GPU_FAKE");
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) json = 1;
        else return fprintf(stderr, "usage: bitnet devices [--json]\n"), 2;
    }
    bitnet_gpu_backends_get(&b);
    n = b.mocked ? 0 : b.device_count;
    if (json) {
        printf("{\"mocked\": %s", jbool(b.mocked));
        if (b.mocked) printf(", \"mock\": "), json_str(fake ? fake : "");
        printf(", \"backends\": {\"cuda\": %s, \"rocm\": %s, \"metal\": %s, \"webgpu\": %s}", jbool(b.cuda), jbool(b.rocm),
               jbool(b.metal), jbool(b.webgpu));
        printf(", \"cuda_driver_version\": %d, \"nvrtc_version\": %d, \"device_count\": %d, \"reason\": ",
               b.cuda_driver_version, b.nvrtc_version, n);
        json_str(b.reason);
        printf(", \"devices\": [");
        for (i = 0; i < n; i++) {
            bitnet_gpu_device_info d;
            if (i) printf(", ");
            if (bitnet_gpu_device_info_get(i, &d) == BITNET_OK) print_device_json(&d);
            else printf("{\"ordinal\": %d, \"error\": ", i), json_str(bitnet_last_error()), printf("}");
        }
        printf("]}\n");
        return 0;
    }
    if (b.mocked) printf("detection mocked by BITNET_GPU_FAKE=\"%s\"\n", fake ? fake : "");
    printf("backends: cuda %s, rocm %s, metal %s, webgpu %s\n", yes(b.cuda), yes(b.rocm), yes(b.metal), yes(b.webgpu));
    if (b.cuda_driver_version) printf("CUDA driver %d.%d\n", b.cuda_driver_version / 1000, b.cuda_driver_version % 1000 / 10);
    if (b.nvrtc_version) printf("NVRTC %d.%d\n", b.nvrtc_version / 1000, b.nvrtc_version % 1000 / 10);
    for (i = 0; i < n; i++) {
        bitnet_gpu_device_info d;
        if (bitnet_gpu_device_info_get(i, &d) == BITNET_OK) print_device_text(&d);
        else printf("device %d: %s\n", i, bitnet_last_error());
    }
    if (n == 0) printf("no CUDA device: %s\n", b.reason);
    else if (b.reason[0]) printf("note: %s\n", b.reason);
    return 0;
}

static int cmd_kernels(int argc, char **argv) {
    const char *arch = NULL;
    char arch_buf[32];
    int i, json = 0, use_cache = 0, cc = 0, ok = 0, failed = 0, n = bitnet_gpu_builtin_count();
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) json = 1;
        else if (strcmp(argv[i], "--cache") == 0) use_cache = 1;
        else if (strcmp(argv[i], "--arch") == 0 && i + 1 < argc) arch = argv[++i];
        else return fprintf(stderr, "usage: bitnet kernels [--arch sm_XX] [--json] [--cache]\n"), 2;
    }
    if (!arch) { /* the first device's own arch */
        bitnet_gpu_device_info d;
        if (!bitnet_gpu_available() || bitnet_gpu_device_info_get(0, &d) != BITNET_OK)
            return fprintf(stderr, "bitnet kernels: no GPU to take the arch from (%s); give --arch sm_XX\n",
                           bitnet_last_error()), 2;
        snprintf(arch_buf, sizeof arch_buf, "sm_%d%d", d.cc_major, d.cc_minor);
        arch = arch_buf;
    }
    if (sscanf(arch, "sm_%d", &cc) != 1 && sscanf(arch, "compute_%d", &cc) != 1) cc = 0;
    if (json) printf("{\"arch\": "), json_str(arch), printf(", \"modules\": [");
    for (i = 0; i < n; i++) {
        bitnet_gpu_jit_info info;
        const char *name = bitnet_gpu_builtin_name(i);
        int min_sm = bitnet_gpu_builtin_min_sm(i);
        bitnet_result r;
        if (json && i) printf(", ");
        if (cc && cc < min_sm) {
            if (json) printf("{\"name\": \"%s\", \"status\": \"skipped\", \"min_sm\": %d}", name, min_sm);
            else printf("  %-16s skipped (needs sm_%d)\n", name, min_sm);
            continue;
        }
        r = bitnet_gpu_jit_builtin(i, arch, use_cache, &info);
        if (r == BITNET_OK) ok++;
        else failed++;
        if (json) {
            printf("{\"name\": \"%s\", \"status\": \"%s\"", name, r == BITNET_OK ? "ok" : "failed");
            if (r == BITNET_OK)
                printf(", \"target\": \"%s\", \"format\": \"%s\", \"bytes\": %zu, \"ms\": %.1f, \"from_cache\": %s", info.target,
                       info.cubin ? "cubin" : "ptx", info.bytes, info.ms, jbool(info.from_cache));
            else printf(", \"error\": "), json_str(bitnet_last_error());
            printf("}");
        } else if (r == BITNET_OK) {
            printf("  %-16s %s %s, %zu bytes, %.1f ms%s\n", name, info.target, info.cubin ? "cubin" : "PTX", info.bytes,
                   info.ms, info.from_cache ? " (cache)" : "");
        } else {
            printf("  %-16s FAILED: %s\n", name, bitnet_last_error());
        }
    }
    if (json) printf("], \"compiled\": %d, \"failed\": %d, \"summary\": \"compiled %d modules for %s, %d failed\"}\n", ok,
                     failed, ok, arch, failed);
    else printf("compiled %d modules for %s, %d failed\n", ok, arch, failed);
    return failed ? 1 : 0;
}

static const command commands[] = {
    {"version", cmd_version, "version                      print the version"},
    {"devices", cmd_devices, "devices [--json]             GPU backends and every CUDA device"},
    {"kernels", cmd_kernels, "kernels [--arch sm_XX] [--json] [--cache]  compile every built-in CUDA module (no GPU needed)"},
    {"help", cmd_help, "help                         this list"},
};

static int cmd_help(int argc, char **argv) {
    size_t i;
    (void)argc; (void)argv;
    printf("usage: bitnet <command> [options]\n");
    for (i = 0; i < sizeof commands / sizeof commands[0]; i++) printf("  %s\n", commands[i].usage);
    return 0;
}

int main(int argc, char **argv) {
    size_t i;
    if (argc < 2) return cmd_help(argc, argv), 2;
    for (i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "bitnet: unknown command '%s' (try: bitnet help)\n", argv[1]);
    return 2;
}
