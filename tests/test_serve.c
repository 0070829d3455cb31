/* bitnet serve: the server started on tests/data/tiny.gguf (an OS-chosen port), asked over a socket
   as a client would: llama.cpp's /completion, /tokenize, /detokenize, /health and OpenAI's
   /v1/completions and /v1/chat/completions against what `bitnet run` and the library give for the
   same requests; the session's text reused by a longer prompt; stop strings; streamed replies
   against whole ones; a JSON schema; and bad requests answered with their errors. */
#define _GNU_SOURCE /* (kill, fdopen under -std=c11) */
#include "../bitnet.h"
#include "harness.h"
#include <signal.h>
#include <unistd.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <pthread.h>

static int port;
static char reply[1 << 18];

/* One request; the reply's body in out (NUL-terminated), its status returned (-1: no reply). */
static int http_to(char *reply, size_t cap, const char *method, const char *path, const char *body) {
    struct sockaddr_in a;
    char head[512];
    size_t n = 0;
    ssize_t k;
    int fd = socket(AF_INET, SOCK_STREAM, 0), status = -1;
    char *b;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET, a.sin_port = htons((uint16_t)port), a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    reply[0] = 0;
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) { if (fd >= 0) close(fd); return -1; }
    snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n", method,
             path, body ? strlen(body) : (size_t)0);
    if (write(fd, head, strlen(head)) < 0 || (body && write(fd, body, strlen(body)) < 0)) { close(fd); return -1; }
    while (n + 1 < cap && (k = read(fd, reply + n, cap - 1 - n)) > 0) n += (size_t)k;
    reply[n] = 0;
    close(fd);
    if (sscanf(reply, "HTTP/1.1 %d", &status) != 1) return -1;
    b = strstr(reply, "\r\n\r\n");
    if (b) memmove(reply, b + 4, strlen(b + 4) + 1);
    return status;
}
static int http(const char *method, const char *path, const char *body) { return http_to(reply, sizeof reply, method, path, body); }

/* A long generation on another thread, while the others go on in the other slot. */
static char long_reply[1 << 16];
static int long_status;
static void *long_request(void *arg) {
    (void)arg;
    long_status = http_to(long_reply, sizeof long_reply, "POST", "/v1/completions",
                          "{\"prompt\": \"Once upon a time\", \"max_tokens\": 160, \"temperature\": 0, \"ignore_eos\": true, \"stream\": true}");
    return NULL;
}

/* The JSON string after the n-th (0: first) "key": in s, unescaped into out (ASCII escapes and \u00XX). */
static int json_string(const char *s, const char *key, int nth, char *out, size_t cap) {
    char pat[64];
    const char *p = s;
    size_t n = 0;
    snprintf(pat, sizeof pat, "\"%s\":", key);
    for (; (p = strstr(p, pat)) != NULL && nth > 0; nth--) p += strlen(pat);
    if (!p) return 0;
    for (p += strlen(pat); *p == ' '; p++) {}
    if (*p++ != '"') return 0;
    while (*p && *p != '"' && n + 1 < cap) {
        char c = *p++;
        if (c == '\\') {
            c = *p++;
            if (c == 'n') c = '\n';
            else if (c == 't') c = '\t';
            else if (c == 'u') { unsigned v = 0; sscanf(p, "%4x", &v); p += 4; c = (char)v; }
        }
        out[n++] = c;
    }
    out[n] = 0;
    return *p == '"';
}

/* `bitnet run`'s greedy text for prompt (its trailing newline dropped). */
static int run_text(const char *bin, const char *prompt, int n, char *out, size_t cap) {
    char cmd[1024], path[256];
    FILE *f;
    size_t len;
    snprintf(path, sizeof path, "/tmp/bitnet_test_serve_%d.txt", (int)getpid());
    snprintf(cmd, sizeof cmd, "%s run -m tests/data/tiny.gguf --backend cpu -t 1 --temp 0 --ignore-eos -n %d -p '%s' > %s 2>/dev/null", bin,
             n, prompt, path);
    if (system(cmd) != 0 || !(f = fopen(path, "rb"))) return 0;
    len = fread(out, 1, cap - 1, f);
    fclose(f), remove(path);
    while (len && out[len - 1] == '\n') len--;
    out[len] = 0;
    return 1;
}

static void test_serve(void) {
    const char *build = getenv("BUILD"), *runner = getenv("RUNNER");
    char bin[512], line[512], want[4096], got[4096], got2[4096], body[8192];
    int pipefd[2], i, st;
    pid_t pid;
    pthread_t long_th;
    FILE *err;
    if (runner && *runner) TEST_SKIP("the CLI is not run under RUNNER=%s", runner);
    snprintf(bin, sizeof bin, "%s/bitnet", build && *build ? build : "build");
    if (access(bin, X_OK) != 0) TEST_SKIP("%s not built", bin);
    if (pipe(pipefd) != 0) { TEST_CHECK(0); return; }
    if ((pid = fork()) == 0) {
        dup2(pipefd[1], 2), close(pipefd[0]), close(pipefd[1]);
        execl(bin, bin, "serve", "-m", "tests/data/tiny.gguf", "--port", "0", "-c", "256", "--backend", "cpu", "-t", "1", "--parallel", "2",
              (char *)NULL);
        _exit(127);
    }
    close(pipefd[1]);
    err = fdopen(pipefd[0], "r");
    port = 0;
    while (err && !port && fgets(line, sizeof line, err)) { /* "bitnet serve: listening on http://127.0.0.1:PORT" */
        const char *at = strstr(line, "127.0.0.1:");
        if (at) port = atoi(at + 10);
    }
    TEST_CHECKF(port > 0, "the server did not say where it listens");
    if (port <= 0) goto stop;
    TEST_CHECK(http("GET", "/health", NULL) == 200 && strstr(reply, "ok"));
    long_status = -2;
    TEST_CHECK(pthread_create(&long_th, NULL, long_request, NULL) == 0);
    TEST_CHECK(http("GET", "/v1/models", NULL) == 200 && strstr(reply, "\"tiny.gguf\""));
    TEST_CHECK(http("POST", "/tokenize", "{\"content\": \"Hello\"}") == 200);
    { /* the library's tokens for the same text */
        bitnet_gguf *g = NULL;
        bitnet_tokenizer *t = NULL;
        int32_t ids[16];
        size_t n = 0, k;
        char *p = reply;
        TEST_CHECK(bitnet_gguf_open("tests/data/tiny.gguf", &g) == BITNET_OK && bitnet_tokenizer_from_gguf(g, &t) == BITNET_OK);
        TEST_CHECK(t && bitnet_tokenize(t, "Hello", 5, 0, 1, ids, 16, &n) == BITNET_OK && n > 1);
        for (k = 0; k < n && (p = strpbrk(p, "0123456789")) != NULL; k++) TEST_CHECK(strtol(p, &p, 10) == ids[k]);
        bitnet_tokenizer_free(t), bitnet_gguf_close(g);
    }
    TEST_CHECK(http("POST", "/detokenize", "{\"tokens\": [72, 101, 399, 111]}") == 200 && json_string(reply, "content", 0, got, sizeof got) &&
               strcmp(got, "Hello") == 0);
    /* greedy completions: run's text; the same again (the session's text reused whole), then a longer prompt */
    TEST_CHECK(run_text(bin, "Once upon a time", 16, want, sizeof want));
    for (i = 0; i < 2; i++) {
        st = http("POST", "/v1/completions", "{\"prompt\": \"Once upon a time\", \"max_tokens\": 16, \"temperature\": 0, \"ignore_eos\": true}");
        TEST_CHECKF(st == 200 && json_string(reply, "text", 0, got, sizeof got) && strcmp(got, want) == 0 &&
                    strstr(reply, "\"finish_reason\": \"length\"") && strstr(reply, "\"completion_tokens\": 16"), "%d: %s", st, reply);
    }
    TEST_CHECK(run_text(bin, "Once upon a time, there", 8, want, sizeof want));
    st = http("POST", "/completion", "{\"prompt\": \"Once upon a time, there\", \"n_predict\": 8, \"temperature\": 0, \"ignore_eos\": true}");
    TEST_CHECKF(st == 200 && json_string(reply, "content", 0, got, sizeof got) && strcmp(got, want) == 0, "%s against %s", reply, want);
    TEST_CHECKF(strstr(reply, "\"tokens_cached\": ") && atoi(strstr(reply, "\"tokens_cached\": ") + 17) >= 4, "%s", reply); /* "Once upon a time" */
    /* a stop string: the text before it, as llama.cpp reports it */
    TEST_CHECK(run_text(bin, "Once upon a time", 16, want, sizeof want) && strstr(want, "fil"));
    *strstr(want, "fil") = 0;
    st = http("POST", "/completion", "{\"prompt\": \"Once upon a time\", \"n_predict\": 16, \"temperature\": 0, \"stop\": [\"zz\", \"fil\"]}");
    TEST_CHECKF(st == 200 && json_string(reply, "content", 0, got, sizeof got) && strcmp(got, want) == 0 && strstr(reply, "\"word\""),
                "%s against %s", reply, want);
    /* a chat reply streamed: its deltas joined are the whole reply's content */
    {
        const char *chat = "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": [{\"type\": "
                           "\"text\", \"text\": \"Count\"}]}], \"max_tokens\": 12, \"temperature\": 0%s}";
        size_t n = 0;
        snprintf(body, sizeof body, chat, "");
        TEST_CHECK(http("POST", "/v1/chat/completions", body) == 200 && strstr(reply, "\"chat.completion\"") &&
                   json_string(reply, "content", 0, got, sizeof got));
        snprintf(body, sizeof body, chat, ", \"stream\": true");
        TEST_CHECK(http("POST", "/v1/chat/completions", body) == 200 && strstr(reply, "chat.completion.chunk") && strstr(reply, "data: [DONE]"));
        for (i = 0, got2[0] = 0; json_string(reply, "content", i, got2 + n, sizeof got2 - n); i++) n += strlen(got2 + n);
        TEST_CHECKF(i > 1 && strcmp(got, got2) == 0, "%d deltas: '%s' against '%s'", i, got2, got);
    }
    { /* a JSON schema: the reply is the JSON it accepts */
        static const char schema[] = "{\"type\": \"object\", \"properties\": {\"k\": {\"type\": \"boolean\"}, \"n\": {\"type\": \"integer\", "
                                     "\"minimum\": 3, \"maximum\": 7}}, \"required\": [\"k\", \"n\"]}";
        char gb[8192];
        size_t gl = 0;
        bitnet_grammar *g = NULL;
        int m = -9;
        snprintf(body, sizeof body, "{\"prompt\": \"JSON:\", \"max_tokens\": 200, \"temperature\": 0, \"response_format\": {\"type\": "
                 "\"json_schema\", \"json_schema\": {\"schema\": %s}}}", schema);
        st = http("POST", "/v1/completions", body);
        TEST_CHECK(bitnet_json_schema_to_grammar(schema, strlen(schema), gb, sizeof gb, &gl) == BITNET_OK && bitnet_grammar_parse(gb, gl, &g) == BITNET_OK);
        TEST_CHECK(st == 200 && json_string(reply, "text", 0, got, sizeof got) && g && bitnet_grammar_match(g, got, strlen(got), &m) == BITNET_OK);
        TEST_CHECKF(m == 1 && strstr(reply, "\"finish_reason\": \"stop\""), "%d: %s", m, reply);
        bitnet_grammar_free(g);
    }
    /* bad requests */
    TEST_CHECK(http("POST", "/v1/completions", "{\"prompt\": ") == 400 && strstr(reply, "not a JSON object"));
    TEST_CHECK(http("POST", "/v1/nothing", "{}") == 404);
    TEST_CHECK(http("GET", "/v1/completions", NULL) == 405);
    TEST_CHECK(http("POST", "/v1/completions", "{\"prompt\": 7}") == 400 && strstr(reply, "prompt is not a string"));
    TEST_CHECK(http("POST", "/v1/chat/completions", "{\"messages\": [{\"content\": \"x\"}]}") == 400 && strstr(reply, "messages"));
    TEST_CHECK(http("POST", "/v1/completions", "{\"prompt\": \"a\", \"stream\": true, \"logit_bias\": {\"9999\": 1}}") == 400 &&
               strstr(reply, "logit_bias[0] is token 9999"));
    TEST_CHECK(http("POST", "/v1/completions", "{\"prompt\": \"a\", \"temperature\": -1}") == 400);
    TEST_CHECK(http("POST", "/v1/completions", "{\"prompt\": \"a\", \"response_format\": {\"type\": \"json_schema\", \"json_schema\": "
                                               "{\"schema\": {\"type\": \"string\", \"pattern\": \"(?=x)\"}}}}") == 400 && strstr(reply, "lookaround"));
    {
        size_t n = strlen(strcpy(body, "{\"prompt\": \""));
        for (i = 0; i < 400; i++) n += (size_t)sprintf(body + n, "word ");
        strcpy(body + n, "\"}");
        TEST_CHECK(http("POST", "/v1/completions", body) == 400 && strstr(reply, "the context holds 256"));
    }
    TEST_CHECK(http("GET", "/health", NULL) == 200); /* still serving */
    { /* the long generation, streamed beside all of the above: run's text */
        char joined[4096];
        size_t n = 0;
        pthread_join(long_th, NULL);
        TEST_CHECK(run_text(bin, "Once upon a time", 160, want, sizeof want)); /* (valid UTF-8, no quotes) */
        for (i = 0, joined[0] = 0; json_string(long_reply, "text", i, joined + n, sizeof joined - n); i++) n += strlen(joined + n);
        TEST_CHECKF(long_status == 200 && strcmp(joined, want) == 0 && strstr(long_reply, "data: [DONE]"), "%d: '%s' against '%s'", long_status,
                    joined, want);
    }
stop:
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    while (err && fgets(line, sizeof line, err)) printf("  server: %s", line); /* (it says nothing more unless something went wrong) */
    if (err) fclose(err);
}

int main(void) {
    RUN_TEST(test_serve);
    return test_summary();
}
