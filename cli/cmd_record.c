/* `qem record`: a detector's live stream into a .qem while the scan runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "terminal.h"
#include "view/view_command.h"

typedef struct record_progress {
    int active; /* stderr is a terminal and not --quiet */
    double last;
} record_progress;

/* Frames received, encoded and the lag; also how Ctrl-C stops the
 * recording (the frames received are then published). */
static int show_record_progress(void *user, const qem_record_progress *p)
{
    record_progress *rp = user;
    if (interrupted_by())
        return 1;
    if (!rp->active || p->seconds - rp->last < 0.25)
        return 0;
    rp->last = p->seconds;
    const double rate = p->seconds > 0 ? (double)p->encoded / p->seconds : 0;
    fprintf(stderr,
            "\rrecording: %llu of %llu frames received, %llu encoded, lag %llu (%llu spilled), "
            "%.0f frames/s   ",
            (unsigned long long)p->received, (unsigned long long)p->expected,
            (unsigned long long)p->encoded, (unsigned long long)(p->received - p->encoded),
            (unsigned long long)p->spilled, rate);
    fflush(stderr);
    return 0;
}

static int run_record(const args *a)
{
    const char *url = a->positional[0], *out = a->positional[1];
    int rc = need_destination("record", out, "qem", "record writes .qem files");
    if (rc)
        return rc;
    qem_record_options o;
    qem_record_options_init(&o);
    o.threads = (int)a->v[OPT_THREADS].i[0];
    o.chunk_scans = (uint32_t)a->v[OPT_CHUNK_SCANS].i[0];
    if (given(a, OPT_SCAN_SHAPE)) {
        o.scan_shape[0] = (uint64_t)a->v[OPT_SCAN_SHAPE].i[0];
        o.scan_shape[1] = (uint64_t)a->v[OPT_SCAN_SHAPE].i[1];
    }
    if (given(a, OPT_QUEUE_MB))
        o.queue_bytes = (uint64_t)a->v[OPT_QUEUE_MB].i[0] << 20;
    o.spill_dir = text_of(a, OPT_SPILL_DIR);
    if (given(a, OPT_CONNECT_TIMEOUT))
        o.connect_timeout_ms = (int)(a->v[OPT_CONNECT_TIMEOUT].r[0] * 1000.0 + 0.5);
    if (given(a, OPT_IDLE_TIMEOUT))
        o.idle_ms = (int)(a->v[OPT_IDLE_TIMEOUT].r[0] * 1000.0 + 0.5);
    const int view = given(a, OPT_VIEW);
    o.live_view = view;
    if (!view && (given(a, OPT_PORT) || given(a, OPT_BIND) || given(a, OPT_NO_OPEN)))
        return usage_fail("record", "--port, --bind and --no-open go with --view");
    if (view && (rc = record_view_check(a)) != 0)
        return rc;
    char *calibration = NULL;
    if (given(a, OPT_CALIBRATION)) {
        calibration =
            read_text_file("record", "the calibration file", text_of(a, OPT_CALIBRATION));
        if (!calibration)
            return EXIT_FAILED;
        o.calibration_json = calibration;
    }
    record_progress rp = {!given(a, OPT_QUIET) && isatty(STDERR_FILENO), -1.0};
    o.progress = show_record_progress;
    o.progress_user = &rp;
    /* Ctrl-C publishes the frames received: no exit a second later. */
    signals_no_grace_exit();
    qem_error e = {0};
    qem_recorder *recorder = NULL;
    if (qem_record_start(url, out, &o, &recorder, &e) != QEM_OK) {
        free(calibration);
        return fail("record", &e);
    }
    record_view *viewer = view ? record_view_start(a, recorder, out) : NULL;
    qem_record_result result = {.struct_size = sizeof result};
    const qem_status st = qem_recorder_wait(recorder, &result, &e);
    record_view_finished(viewer, &result);
    free(calibration);
    if (rp.active)
        fputc('\n', stderr);
    if (st != QEM_OK) {
        /* The message says whether the frames before the failure were
         * published: an interrupt must not hide that. */
        fprintf(stderr, "qem record: %s\n",
                SAFE(e.message[0] ? e.message : qem_strerror(e.status)));
        rc = EXIT_FAILED;
    } else {
        if (!given(a, OPT_QUIET))
            printf("recorded %s: %llu of %llu frames%s, %llu waited on disk; %.2f s, published "
                   "%.3f s after the last frame\n",
                   SAFE(out), (unsigned long long)result.received,
                   (unsigned long long)result.expected,
                   result.complete ? "" : " (INCOMPLETE: the last scan row completed with zeros)",
                   (unsigned long long)result.spilled, result.seconds, result.publish_seconds);
        fflush(stdout);
        rc = EXIT_OK;
        if (!result.complete) {
            fprintf(stderr,
                    "qem record: %s after %llu of %llu frames; they are published in %s, marked "
                    "incomplete\n",
                    interrupted_by() ? "interrupted" : "the stream ended",
                    (unsigned long long)result.received, (unsigned long long)result.expected,
                    SAFE(out));
            rc = interrupted_by() ? interrupt_exit_status() : EXIT_FAILED;
        }
    }
    /* A published recording stays served until Ctrl-C (then the exit
     * status is the signal's, as for every command: main.c); a failed or
     * interrupted one ends the viewer now. The journal behind the viewer's
     * container lives until the recorder is freed. */
    record_view_end(viewer, st == QEM_OK && result.published);
    qem_recorder_free(recorder);
    return rc;
}

static const command_option record_options[] = {
    {OPT_SCAN_SHAPE, "the scan shape (default: the stream's header, e.g. a Merlin's frames\n"
                     "per trigger)"},
    {OPT_THREADS, NULL},
    {OPT_CHUNK_SCANS, NULL},
    {OPT_CALIBRATION, NULL},
    {OPT_QUEUE_MB, NULL},
    {OPT_SPILL_DIR, NULL},
    {OPT_CONNECT_TIMEOUT, NULL},
    {OPT_IDLE_TIMEOUT, NULL},
    {OPT_VIEW, NULL},
    {OPT_PORT, NULL},
    {OPT_BIND, NULL},
    {OPT_NO_OPEN, NULL},
    {OPT_QUIET, NULL},
    {OPT_NONE, NULL}};

const command_spec record_commands[] = {
    {"record", "URL OUT.qem [options]",
     "record a detector's live stream into a .qem while the scan runs",
     "Connects to a detector's data stream and stores every frame losslessly in\n"
     "OUT.qem as it arrives, through the same writer as `qem save`: the body is\n"
     "the one `qem save` writes from the same frames in a file. URL is\n"
     "  - merlin://HOST[:PORT]: a Quantum Detectors Merlin data port (default\n"
     "    6342); the scan shape comes from the acquisition header's frames per\n"
     "    trigger, else --scan-shape;\n"
     "  - dectris://HOST[:PORT]: a DECTRIS SIMPLON stream interface, V1 over\n"
     "    ZeroMQ (default 9999); give --scan-shape. Frames raw, lz4 or\n"
     "    bitshuffle/LZ4; the pixel mask of the series header (header_detail\n"
     "    \"all\") marks flagged pixels invalid;\n"
     "  - dectris2://HOST[:PORT]: DECTRIS stream V2, one CBOR message a ZeroMQ\n"
     "    message (default 31001); give --scan-shape. Frames raw, lz4 or bslz4;\n"
     "    the first channel (of the start message's channels) is recorded, and\n"
     "    its pixel mask marks flagged pixels invalid.\n"
     "uint32 counts are stored as uint16 when every admitted value fits (else\n"
     "refused, naming the frame). No frame is ever dropped: when encoding falls\n"
     "behind, frames wait in memory (--queue-mb), then in a spill file. The\n"
     "file is published atomically when the acquisition ends. A stream that\n"
     "ends early (or --idle-timeout), or Ctrl-C, publishes every frame received,\n"
     "exact, with the last scan row completed with zeros and the metadata\n"
     "(source_metadata.live_acquisition) saying the acquisition is incomplete\n"
     "and how many frames arrived; the exit status is then nonzero. A message\n"
     "that breaks the protocol (lengths, headers, frame numbers out of order or\n"
     "repeated, frame sizes, JSON, CBOR) is refused naming the frame, after the\n"
     "frames before it are published the same way.\n"
     "--view serves `qem view`'s page on the recording while it runs (the address\n"
     "printed on stdout, as `qem view` prints it): the scan image of the detector\n"
     "fills in as frames arrive, the pattern at the cursor shows any received\n"
     "position, and the page says live, then complete. After publication it\n"
     "serves the finished recording until Ctrl-C or SIGTERM; a Ctrl-C during the\n"
     "recording stops it (publishing the frames received) and ends the viewer;\n"
     "a recording that fails ends it too. Stopped by a signal, qem record exits\n"
     "with 128 + the signal, as every qem command does.\n",
     2, 2, "URL and OUT.qem", record_options, run_record},
    {NULL, NULL, NULL, NULL, 0, 0, NULL, NULL, NULL}};
