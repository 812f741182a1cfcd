#include "live_test.h"

#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/error.h"
#include "test_util.h"

extern char **environ;

qem_status qem_live_sink_header(live_sink *sink, live_header *h, qem_error *error)
{
    (void)error;
    sink->header_calls++;
    sink->rows = h->detector[0];
    sink->columns = h->detector[1];
    sink->type = h->sample_type;
    sink->frames_announced = h->frames;
    sink->flagged_count = h->flagged_count;
    for (uint64_t k = 0; k < h->flagged_count && k < 4; k++)
        sink->flagged[k] = h->flagged[k];
    json_decref(sink->facts);
    sink->facts = h->facts; /* the sink takes it */
    CHECK(!sink->protocol || !strcmp(h->protocol, sink->protocol));
    sink->frame_bytes = (size_t)(sink->rows * sink->columns * qem_dtype_size(sink->type));
    return QEM_OK;
}

qem_status qem_live_sink_frame(live_sink *sink, uint64_t index, const void *pixels, size_t bytes,
                               qem_error *error)
{
    if (sink->header_calls != 1 || index != sink->count || bytes != sink->frame_bytes)
        return qem_fail(error, QEM_E_STREAM, "test sink: frame %llu of %zu bytes unexpected",
                        (unsigned long long)index, bytes);
    uint8_t *grown = realloc(sink->data, (size_t)(sink->count + 1) * bytes);
    if (!grown)
        return QEM_E_NO_MEMORY;
    sink->data = grown;
    memcpy(sink->data + sink->count * bytes, pixels, bytes);
    sink->count++;
    return QEM_OK;
}

int qem_live_sink_stopping(const live_sink *sink)
{
    return sink->stop_after && sink->count >= sink->stop_after;
}

void live_test_sink_free(live_sink *sink)
{
    json_decref(sink->facts);
    free(sink->data);
    const char *protocol = sink->protocol;
    memset(sink, 0, sizeof *sink);
    sink->protocol = protocol;
}

int live_test_names(const qem_error *e, const char *want)
{
    if (strstr(e->message, want))
        return 1;
    fprintf(stderr, "message '%s' does not name '%s'\n", e->message, want);
    return 0;
}

/* Starts `script` with `args` and reads the port it prints; its pid in *pid. */
static int sim_start(const char *script, const char *const *args, pid_t *pid, unsigned *port)
{
    const char *argv[32] = {"/usr/bin/python3", script};
    int n = 2;
    for (int k = 0; args[k] && n < 30; k++)
        argv[n++] = args[k];
    argv[n] = NULL;
    int out[2];
    if (pipe(out))
        return 0;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    const int rc = posix_spawn(pid, argv[0], &actions, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    if (rc) {
        close(out[0]);
        *pid = 0;
        return 0;
    }
    char line[64] = {0};
    size_t got = 0;
    while (got < sizeof line - 1 && read(out[0], line + got, 1) == 1 && line[got] != '\n')
        got++;
    close(out[0]);
    return sscanf(line, "PORT %u", port) == 1;
}

static void sim_stop(pid_t pid)
{
    if (pid > 0) {
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
    }
}

qem_status live_test_receive(const char *script, live_protocol protocol,
                             live_test_receiver receive, const char *const *args,
                             live_sink *sink, int idle_ms, qem_error *e)
{
    pid_t pid = 0;
    unsigned port = 0;
    if (!sim_start(script, args, &pid, &port)) {
        sim_stop(pid);
        CHECK(!"the simulator started");
        return QEM_E_IO;
    }
    live_address address = {.protocol = protocol, .port = port};
    snprintf(address.host, sizeof address.host, "127.0.0.1");
    live_receive_options options = {.connect_timeout_ms = 20000, .idle_ms = idle_ms};
    const qem_status st = receive(&address, &options, sink, e);
    sim_stop(pid);
    return st;
}

void live_test_frames_equal(const live_sink *sink, const char *npy, uint64_t frames)
{
    size_t size = 0;
    uint8_t *want = read_file(npy, &size);
    CHECK(want != NULL && size > 10);
    if (!want || size <= 10) {
        free(want);
        return;
    }
    const size_t offset = 10 + (size_t)(want[8] | want[9] << 8); /* .npy version 1 */
    CHECK_EQ_U64(sink->count, frames);
    CHECK_EQ_U64(size - offset, frames * sink->frame_bytes);
    if (sink->count == frames && size - offset == frames * sink->frame_bytes)
        CHECK(!memcmp(sink->data, want + offset, size - offset));
    free(want);
}

void live_test_cut_and_stop(live_test_run receive)
{
    {
        const char *args[] = {"--stop-after", "5", NULL};
        live_sink sink = {0};
        qem_error e = {0};
        CHECK_OK(receive(args, &sink, 700, &e), &e);
        CHECK_EQ_U64(sink.count, 5);
        live_test_sink_free(&sink);
    }
    {
        const char *args[] = {"--fps", "20", NULL};
        live_sink sink = {.stop_after = 3};
        qem_error e = {0};
        CHECK_OK(receive(args, &sink, 0, &e), &e);
        CHECK(sink.count >= 3 && sink.count < 16);
        live_test_sink_free(&sink);
    }
}
