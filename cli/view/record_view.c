/* `qem record --view`: the viewer served on a recording while it runs.
 * The server gets the recorder's container (received frames, zeros
 * elsewhere) and asks where the recording stands through live_state;
 * until it is finished, the server keeps nothing computed from the data
 * (server.h). After publication it serves the finished recording until
 * Ctrl-C / SIGTERM; an interrupted or failed recording ends it at once
 * (the interrupt that stopped the recording stays noted, so there is no
 * second one to wait for). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "terminal.h"
#include "view/view_command.h"

struct record_view {
    view_running running;
    qem_recorder *recorder;
    atomic_int finished; /* qem_recorder_wait has returned */
    int complete;        /* written before `finished` */
};

/* Frames readable through the container (the recorder counts a frame
 * encoded once its journal holds it), and whether the journal is final. */
static void live_state(void *user, view_live_state *state)
{
    record_view *v = user;
    qem_record_progress p = {.struct_size = sizeof p};
    qem_recorder_progress(v->recorder, &p);
    state->received = p.encoded;
    state->expected = p.expected;
    state->finished = atomic_load(&v->finished);
    state->complete = state->finished && v->complete;
}

int record_view_check(const args *a)
{
    view_config config;
    char cache_dir[4096];
    return view_config_from_args(a, "record", &config, cache_dir);
}

record_view *record_view_start(const args *a, qem_recorder *recorder, const char *dest)
{
    record_view *v = calloc(1, sizeof *v);
    if (!v) {
        fprintf(stderr, "qem record: out of memory for the viewer; recording without it\n");
        return NULL;
    }
    v->recorder = recorder;
    qem_error e = {0};
    qem_container *live = NULL;
    if (qem_recorder_container(recorder, &live, &e) != QEM_OK) {
        fprintf(stderr, "qem record: no viewer: %s\n",
                SAFE(e.message[0] ? e.message : qem_strerror(e.status)));
        free(v);
        return NULL;
    }
    view_config config;
    char cache_dir[4096];
    view_config_from_args(a, "record", &config, cache_dir); /* checked before the start */
    const char *const paths[1] = {dest};
    config.paths = paths; /* copied by the server */
    config.files = 1;
    config.cache_dir = NULL; /* a recording has no content identity to key sums by */
    config.live = live;
    config.live_state = live_state;
    config.live_user = v;
    if (view_start(a, "record", &config, "the recording", &v->running) != 0) {
        fprintf(stderr, "qem record: recording without the viewer\n");
        free(v);
        return NULL;
    }
    return v;
}

void record_view_finished(record_view *v, const qem_record_result *result)
{
    if (!v)
        return;
    v->complete = result && result->complete;
    atomic_store(&v->finished, 1);
}

void record_view_end(record_view *v, int serve)
{
    if (!v)
        return;
    if (serve && !interrupted_by()) {
        printf("recording published; the viewer stays open until Ctrl-C\n");
        fflush(stdout);
        view_wait_signal(&v->running);
    }
    view_stop(&v->running);
    free(v);
}
