/* `qem record`: a detector's stream into a .qem while the scan runs.
 *
 * Two threads: the receiver (merlin.c or dectris_zmq.c) hands checked
 * frames to the sink below, which keeps them in a ring in memory and,
 * when the ring is full, in a spill file (never dropping one); the writer
 * thread takes them in order through the input layer's exact narrowing
 * (the live acquisition is an input family whose reads take queued
 * frames) into the writer `qem save` uses, with the same options, so the
 * body is the body a save of the same frames writes. When the stream ends
 * early, stops, or breaks the protocol, the frames received are published
 * exact, the last scan row completed with zeros, and the metadata says
 * the acquisition is incomplete. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
#include "common/large_alloc.h"
#include "common/options.h"
#include "common/threads.h"
#include "input/input.h"
#include "live/live.h"
#include "live/live_view.h"
#include "qem/qem_internal.h"

#define DEFAULT_QUEUE_BYTES (256ull << 20)
#define DEFAULT_CONNECT_MS 10000
#define PROGRESS_EVERY_S 0.1

struct live_sink {
    qem_recorder *r;
};

struct qem_recorder {
    live_address address;
    char *url, *dest, *spill_dir, *metadata_json, *calibration_json;
    qem_record_options o;
    live_sink sink;
    pthread_t receiver, writer;
    int receiver_started, writer_started;
    struct timespec t0;

    pthread_mutex_t mu;
    pthread_cond_t changed; /* header, frame, end, stop */

    /* From the header (set once, under mu, then read-only). */
    int have_header;
    acquisition *a;
    uint64_t expected;
    size_t frame_bytes; /* a received frame, in the sample type */

    /* The queue: frames [encoded, received) wait in the ring (the older)
     * then the spill file; a frame goes to the ring only while the spill
     * file is empty, so the order is kept. */
    uint8_t *ring;
    uint64_t slots; /* the ring's room (queue_bytes) */
    /* Slots in use so far, doubled only when full: memory touched for the
     * first time costs a fault and zeroing per page. */
    uint64_t ring_cap;
    uint64_t ring_head, ring_count;
    int spill_fd;
    uint64_t spill_read, spill_write; /* frame slots of the spill file */
    uint64_t spilled_total;
    uint64_t received, encoded;
    double last_frame_s;

    int stop;          /* the receiver is to stop (caller, writer failure, writer done) */
    int stop_asked;    /* by the caller (qem_recorder_stop, the progress callback) */
    int receive_done;  /* the receiver returned */
    qem_status receive_status;
    qem_error receive_error;

    /* Live view: the stored frames so far, in an anonymous journal. */
    live_journal journal;

    /* The outcome, once the writer thread ended. */
    int finished;
    qem_status status;
    qem_error error;
    qem_record_result result;
};

static double seconds_since(const struct timespec *t0)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t0->tv_sec) + 1e-9 * (double)(now.tv_nsec - t0->tv_nsec);
}

/* --- the live family: reads take queued frames ------------------------------ */

/* Pops `count` frames (the caller saw them queued) into `out`. */
static qem_status live_read(acquisition *a, uint64_t first, uint64_t count, void *out,
                            qem_error *error)
{
    qem_recorder *r = a->impl;
    uint8_t *dst = out;
    for (uint64_t k = 0; k < count; k++, dst += r->frame_bytes) {
        pthread_mutex_lock(&r->mu);
        const int from_ring = r->ring_count > 0;
        const uint64_t slot = from_ring ? r->ring_head : r->spill_read;
        const int have = from_ring || r->spill_read < r->spill_write;
        pthread_mutex_unlock(&r->mu);
        if (!have)
            return qem_fail(error, QEM_E_INVALID_ARGUMENT, "frame %llu is not queued",
                            (unsigned long long)(first + k));
        if (from_ring)
            memcpy(dst, r->ring + slot * r->frame_bytes, r->frame_bytes);
        else
            QEM_TRY(qem_pread_full(r->spill_fd, dst, r->frame_bytes, slot * r->frame_bytes,
                                   QEM_E_IO, error));
        pthread_mutex_lock(&r->mu);
        if (from_ring) {
            r->ring_head = (r->ring_head + 1) % r->ring_cap;
            r->ring_count--;
        } else {
            r->spill_read++;
        }
        pthread_mutex_unlock(&r->mu);
    }
    return QEM_OK;
}

static const input_family live_merlin_family = {"merlin-stream", NULL, NULL, live_read,
                                                NULL, 0, NULL};
static const input_family live_dectris_family = {"dectris-stream", NULL, NULL, live_read,
                                                 NULL, 0, NULL};

/* --- the sink the receivers call ---------------------------------------------- */

int qem_live_sink_stopping(const live_sink *sink)
{
    qem_recorder *r = sink->r;
    pthread_mutex_lock(&r->mu);
    const int stop = r->stop || (r->have_header && r->received >= r->expected);
    pthread_mutex_unlock(&r->mu);
    return stop;
}

/* The scan shape: the caller's, else the header's, else one frame. */
static qem_status scan_shape_of(const qem_recorder *r, const live_header *h, uint64_t out[2],
                                qem_error *error)
{
    const uint64_t *given = r->o.scan_shape;
    const int stated = h->scan_shape[0] && h->scan_shape[1];
    if (given[0] && stated && (given[0] != h->scan_shape[0] || given[1] != h->scan_shape[1]))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "the scan shape given (%llux%llu) contradicts the scan shape %llux%llu "
                        "that the stream from %s states; omit the scan shape",
                        (unsigned long long)given[0], (unsigned long long)given[1],
                        (unsigned long long)h->scan_shape[0], (unsigned long long)h->scan_shape[1],
                        r->url);
    if (given[0] && given[1]) {
        out[0] = given[0];
        out[1] = given[1];
    } else if (h->scan_shape[0] && h->scan_shape[1]) {
        out[0] = h->scan_shape[0];
        out[1] = h->scan_shape[1];
    } else if (h->frames == 1) {
        out[0] = out[1] = 1;
    } else {
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "the stream from %s does not state its scan shape (%llu frames "
                        "announced); give it (--scan-shape ROWS,COLUMNS)",
                        r->url, (unsigned long long)h->frames);
    }
    uint64_t scans;
    if (qem_mul_overflow_u64(out[0], out[1], &scans) || scans >= QEM_AXIS_LIMIT)
        return qem_fail(error, QEM_E_LIMIT, "the scan shape %llux%llu is too large",
                        (unsigned long long)out[0], (unsigned long long)out[1]);
    if (h->frames && scans != h->frames)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "the scan shape %llux%llu does not match the %llu frames the stream "
                        "from %s announces; give rows and columns whose product is %llu",
                        (unsigned long long)out[0], (unsigned long long)out[1],
                        (unsigned long long)h->frames, r->url, (unsigned long long)h->frames);
    return QEM_OK;
}

qem_status qem_live_sink_header(live_sink *sink, live_header *h, qem_error *error)
{
    qem_recorder *r = sink->r;
    json_t *facts = h->facts;
    h->facts = NULL;
    if (r->have_header) {
        json_decref(facts);
        return qem_fail(error, QEM_E_STREAM, "the stream from %s sent a second acquisition "
                        "header after %llu frames", r->url, (unsigned long long)r->received);
    }
    acquisition *a = calloc(1, sizeof *a);
    if (!a) {
        json_decref(facts);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    a->family = !strcmp(h->protocol, "merlin-stream") ? &live_merlin_family
                                                       : &live_dectris_family;
    a->facts = facts;
    a->impl = r;
    a->sample_type = h->sample_type;
    a->shape[2] = h->detector[0];
    a->shape[3] = h->detector[1];
    qem_status st = scan_shape_of(r, h, a->shape, error);
    if (st == QEM_OK && h->sample_type != QEM_DTYPE_UINT8 && h->sample_type != QEM_DTYPE_UINT16 &&
        h->sample_type != QEM_DTYPE_UINT32)
        st = qem_fail(error, QEM_E_STREAM, "the stream from %s sends %s frames; qem records "
                      "uint8, uint16 and uint32 counts", r->url, qem_dtype_name(h->sample_type));
    if (st == QEM_OK)
        st = qem_input_check_shape(a, r->url, error);
    const uint64_t pixels = a->shape[2] * a->shape[3];
    if (st == QEM_OK && h->flagged_count) {
        a->flagged = malloc((size_t)h->flagged_count * sizeof *a->flagged);
        if (!a->flagged)
            st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        for (uint64_t k = 0; st == QEM_OK && k < h->flagged_count; k++) {
            if (h->flagged[k] >= pixels || (k && h->flagged[k] <= h->flagged[k - 1]))
                st = qem_fail(error, QEM_E_STREAM, "the pixel mask from %s is not a list of "
                              "ascending pixels inside the detector", r->url);
            else
                a->flagged[k] = h->flagged[k];
        }
        a->flagged_count = h->flagged_count;
    }
    if (st == QEM_OK)
        st = qem_input_implicit_mask(a, error);
    const size_t frame_bytes = (size_t)(pixels * qem_dtype_size(h->sample_type));
    uint64_t slots = frame_bytes ? r->o.queue_bytes / frame_bytes : 0;
    if (slots < 2)
        slots = 2;
    uint8_t *ring = st == QEM_OK ? (uint8_t *)qem_large_alloc((size_t)slots * frame_bytes) : NULL;
    if (st == QEM_OK && !ring)
        st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory for %llu queued frames",
                      (unsigned long long)slots);
    if (st != QEM_OK) {
        a->impl = NULL;
        qem_input_close(a);
        return st;
    }
    pthread_mutex_lock(&r->mu);
    r->a = a;
    r->frame_bytes = frame_bytes;
    r->expected = a->shape[0] * a->shape[1];
    r->ring = ring;
    r->slots = slots;
    r->ring_cap = slots < 16 ? slots : 16;
    r->have_header = 1;
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->mu);
    return QEM_OK;
}

/* Doubles the ring's slots in use (under the lock, the ring full): the
 * frames that wrapped to its start move after the old end, so that the
 * queue stays in order; the slot the writer may be copying out of (the
 * head, in the part that stays) does not move. */
static void grow_ring(qem_recorder *r)
{
    const uint64_t cap = r->ring_cap, grown = 2 * cap < r->slots ? 2 * cap : r->slots;
    const uint64_t wrapped = r->ring_head + r->ring_count > cap ? r->ring_head + r->ring_count - cap
                                                                : 0;
    if (wrapped > grown - cap)
        return; /* cannot move them all: the ring stays as it is, frames spill */
    memcpy(r->ring + cap * r->frame_bytes, r->ring, (size_t)(wrapped * r->frame_bytes));
    r->ring_cap = grown;
}

qem_status qem_live_sink_frame(live_sink *sink, uint64_t index, const void *pixels, size_t bytes,
                               qem_error *error)
{
    qem_recorder *r = sink->r;
    if (!r->have_header)
        return qem_fail(error, QEM_E_STREAM,
                        "frame %llu from %s arrived before the acquisition header",
                        (unsigned long long)index + 1, r->url);
    if (bytes != r->frame_bytes)
        return qem_fail(error, QEM_E_STREAM,
                        "frame %llu from %s holds %zu bytes of samples; the header's %llu x %llu "
                        "%s frames hold %zu",
                        (unsigned long long)index + 1, r->url, bytes,
                        (unsigned long long)r->a->shape[2], (unsigned long long)r->a->shape[3],
                        qem_dtype_name(r->a->sample_type), r->frame_bytes);
    pthread_mutex_lock(&r->mu);
    const uint64_t next = r->received;
    const int full = r->received >= r->expected;
    const int spill_empty = r->spill_read == r->spill_write;
    if (spill_empty && r->ring_count == r->ring_cap && r->ring_cap < r->slots)
        grow_ring(r);
    const int to_ring = spill_empty && r->ring_count < r->ring_cap;
    if (spill_empty)
        r->spill_read = r->spill_write = 0; /* the spill file drained: start it again */
    const uint64_t slot = to_ring ? (r->ring_head + r->ring_count) % r->ring_cap : r->spill_write;
    pthread_mutex_unlock(&r->mu);
    if (index != next)
        return qem_fail(error, QEM_E_STREAM,
                        "frame %llu from %s arrived where frame %llu was due (%s)",
                        (unsigned long long)index + 1, r->url, (unsigned long long)next + 1,
                        index < next ? "repeated" : "out of order or missing");
    if (full)
        return qem_fail(error, QEM_E_STREAM,
                        "frame %llu from %s is beyond the %llu frames of the scan",
                        (unsigned long long)index + 1, r->url, (unsigned long long)r->expected);
    if (to_ring) {
        memcpy(r->ring + slot * r->frame_bytes, pixels, bytes);
    } else {
        if (r->spill_fd < 0) {
            const char *dir = r->spill_dir;
            char *owned = dir ? NULL : qem_path_dirname(r->dest);
            const qem_status st = qem_scratch_open(dir ? dir : owned, &r->spill_fd, error);
            free(owned);
            QEM_TRY(st);
        }
        QEM_TRY(qem_pwrite_full(r->spill_fd, pixels, bytes, slot * r->frame_bytes, error));
    }
    pthread_mutex_lock(&r->mu);
    if (to_ring) {
        r->ring_count++;
    } else {
        r->spill_write++;
        r->spilled_total++;
    }
    r->received++;
    r->last_frame_s = seconds_since(&r->t0);
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->mu);
    return QEM_OK;
}

/* --- threads ---------------------------------------------------------------------- */

static void *receiver_run(void *arg)
{
    qem_recorder *r = arg;
    const live_receive_options ro = {
        r->o.connect_timeout_ms ? r->o.connect_timeout_ms : DEFAULT_CONNECT_MS, r->o.idle_ms};
    qem_error e = {0};
    qem_status st;
    switch (r->address.protocol) {
    case LIVE_MERLIN: st = qem_live_receive_merlin(&r->address, &ro, &r->sink, &e); break;
    case LIVE_DECTRIS: st = qem_live_receive_dectris(&r->address, &ro, &r->sink, &e); break;
    default: st = qem_live_receive_dectris2(&r->address, &ro, &r->sink, &e); break;
    }
    pthread_mutex_lock(&r->mu);
    r->receive_done = 1;
    r->receive_status = st;
    r->receive_error = e;
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

void qem_recorder_progress(qem_recorder *r, qem_record_progress *p)
{
    pthread_mutex_lock(&r->mu);
    p->struct_size = sizeof *p;
    p->expected = r->expected;
    p->received = r->received;
    p->encoded = r->encoded;
    p->queued = r->ring_count;
    p->spilled = r->spill_write - r->spill_read;
    p->finished = r->finished;
    pthread_mutex_unlock(&r->mu);
    p->seconds = seconds_since(&r->t0);
}

static void report(qem_recorder *r, double *last, int force)
{
    if (!r->o.progress)
        return;
    const double now = seconds_since(&r->t0);
    if (!force && now - *last < PROGRESS_EVERY_S)
        return;
    *last = now;
    qem_record_progress p;
    qem_recorder_progress(r, &p);
    if (r->o.progress(r->o.progress_user, &p))
        qem_recorder_stop(r);
}

/* Test hook: milliseconds the writer sleeps after each batch, so that the
 * queue fills and frames spill (QEM_FAULT_RECORD_SLOW_MS). */
static void fault_slow_writer(void)
{
    const char *env = getenv("QEM_FAULT_RECORD_SLOW_MS");
    const long ms = env ? strtol(env, NULL, 10) : 0;
    if (ms > 0) {
        struct timespec pause = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&pause, NULL);
    }
}

/* Waits until a frame is queued or nothing more will come: the frames
 * queued (0 at the end). */
static uint64_t wait_for_frames(qem_recorder *r, double *last)
{
    pthread_mutex_lock(&r->mu);
    for (;;) {
        const uint64_t queued = r->received - r->encoded;
        if (queued || r->receive_done)
            break;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 100 * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&r->changed, &r->mu, &until);
        pthread_mutex_unlock(&r->mu);
        report(r, last, 0);
        pthread_mutex_lock(&r->mu);
    }
    const uint64_t queued = r->received - r->encoded;
    pthread_mutex_unlock(&r->mu);
    return queued;
}

/* Records what the recording was in source_metadata (beside the family's
 * facts, which reads may have amended: the narrowing proof). */
static qem_status note_acquisition(qem_recorder *r, qem_writer *w, const char *ended,
                                   uint64_t zero_filled, qem_error *error)
{
    QEM_TRY(qem_save_note_facts(r->a, w, error));
    const uint64_t received = r->encoded;
    json_t *live = json_pack(
        "{s:s, s:s, s:b, s:I, s:I, s:I, s:I, s:s, s:I}", "url", r->url, "recorded_by",
        "qem record", "complete", received == r->expected, "frames_expected",
        (json_int_t)r->expected, "frames_received", (json_int_t)received, "scan_rows_expected",
        (json_int_t)(r->expected / r->a->shape[1]), "zero_filled_scans", (json_int_t)zero_filled,
        "ended", ended, "frames_spilled", (json_int_t)r->spilled_total);
    return qem_writer_note_source(w, "live_acquisition", live, error);
}

/* Why the recording ended, for the metadata. */
static const char *ending_of(const qem_recorder *r, qem_status writer_status)
{
    if (writer_status != QEM_OK)
        return "refused: a frame could not be stored (see the error)";
    if (r->encoded == r->expected)
        return "every frame of the scan arrived";
    if (r->receive_status == QEM_E_STREAM)
        return "refused: a message broke the protocol (see the error)";
    if (r->receive_status != QEM_OK)
        return "the connection failed";
    return r->stop_asked ? "stopped before the scan ended" : "the stream ended before the scan";
}

/* The writer thread: header, frames, publication. */
static qem_status record_frames(qem_recorder *r, qem_error *error)
{
    double last = -1.0;
    pthread_mutex_lock(&r->mu);
    while (!r->have_header && !r->receive_done)
        pthread_cond_wait(&r->changed, &r->mu);
    const int have_header = r->have_header;
    pthread_mutex_unlock(&r->mu);
    if (!have_header) {
        if (r->receive_status != QEM_OK) {
            *error = r->receive_error;
            return r->receive_status;
        }
        return qem_fail(error, QEM_E_STREAM,
                        "the stream from %s ended before its acquisition header; nothing was "
                        "written", r->url);
    }
    acquisition *a = r->a;
    qem_save_options so;
    qem_save_options_init(&so);
    so.threads = r->o.threads;
    so.chunk_scans = r->o.chunk_scans;
    so.metadata_json = r->metadata_json;
    so.calibration_json = r->calibration_json;
    save_setup setup;
    QEM_TRY(qem_save_setup_make(a, &so, &setup, error));
    const qem_dtype stored = qem_input_stored_dtype(a);
    const size_t stored_bytes = (size_t)(a->shape[2] * a->shape[3] * qem_dtype_size(stored));
    qem_writer *w = NULL;
    qem_status st = qem_writer_create(r->dest, stored, a->shape, &setup.options, &w, error);
    if (st == QEM_OK && r->o.live_view)
        st = qem_live_journal_open(&r->journal, r->spill_dir, r->dest, a->shape, stored, error);
    if (r->o.live_view) { /* a caller may wait for the journal (qem_recorder_container) */
        pthread_mutex_lock(&r->mu);
        pthread_cond_broadcast(&r->changed);
        pthread_mutex_unlock(&r->mu);
    }
    /* uint32 frames one at a time, so that a value that does not fit
     * loses no frame before it. */
    const uint64_t batch_limit = a->sample_type == QEM_DTYPE_UINT32 ? 1 : UINT64_MAX;
    qem_status frame_status = QEM_OK;
    qem_error frame_error = {0};
    while (st == QEM_OK && r->encoded < r->expected) {
        const uint64_t queued = wait_for_frames(r, &last);
        if (!queued)
            break;
        uint64_t room;
        uint8_t *dst = qem_writer_window(w, &room);
        uint64_t n = queued < room ? queued : room;
        n = n < batch_limit ? n : batch_limit;
        frame_status = qem_input_read(a, r->encoded, n, stored, dst, (size_t)n * stored_bytes,
                                      &frame_error);
        if (frame_status != QEM_OK)
            break;
        if (r->o.live_view)
            st = qem_live_journal_append(&r->journal, r->encoded, dst, n, error);
        if (st == QEM_OK)
            st = qem_writer_commit(w, n, error);
        /* The journal first: a frame counted encoded is readable (the
         * viewer shows `encoded` as the frames it has). */
        if (r->o.live_view)
            qem_live_journal_published(&r->journal, r->encoded + n);
        pthread_mutex_lock(&r->mu);
        r->encoded += n;
        pthread_mutex_unlock(&r->mu);
        report(r, &last, 0);
        fault_slow_writer();
    }
    /* Nothing more is taken: the receiver stops at its next poll. */
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    while (!r->receive_done)
        pthread_cond_wait(&r->changed, &r->mu);
    pthread_mutex_unlock(&r->mu);
    uint64_t zero_filled = 0;
    if (st == QEM_OK && r->encoded == 0)
        st = frame_status != QEM_OK ? (*error = frame_error, frame_status)
             : r->receive_status != QEM_OK
                 ? (*error = r->receive_error, r->receive_status)
                 : qem_fail(error, QEM_E_STREAM,
                            "no frame arrived from %s; nothing was written", r->url);
    else if (st == QEM_OK && r->encoded < r->expected) {
        /* The received frames, exact, in whole scan rows: the rest of the
         * last row reads zero and the metadata says how many came. */
        const uint64_t columns = a->shape[1], rows = (r->encoded + columns - 1) / columns;
        zero_filled = rows * columns - r->encoded;
        st = qem_writer_shorten(w, rows, error);
        for (uint64_t left = zero_filled; st == QEM_OK && left;) {
            uint64_t room;
            uint8_t *dst = qem_writer_window(w, &room);
            const uint64_t n = left < room ? left : room;
            memset(dst, 0, (size_t)n * stored_bytes);
            st = qem_writer_commit(w, n, error);
            left -= n;
        }
    }
    if (st == QEM_OK)
        st = note_acquisition(r, w, ending_of(r, frame_status), zero_filled, error);
    const double before_publish = r->last_frame_s;
    if (st == QEM_OK)
        st = qem_writer_finish(w, error);
    qem_writer_free(w);
    qem_save_setup_free(&setup);
    report(r, &last, 1);
    r->result.publish_seconds = seconds_since(&r->t0) - before_publish;
    r->result.published = st == QEM_OK;
    if (st == QEM_OK) {
        r->result.shape[0] = (r->encoded + a->shape[1] - 1) / a->shape[1];
        r->result.shape[1] = a->shape[1];
        r->result.shape[2] = a->shape[2];
        r->result.shape[3] = a->shape[3];
    }
    if (st != QEM_OK)
        return st;
    /* Published: now the reason the recording ended early, if an error. */
    const qem_status why = frame_status != QEM_OK ? frame_status : r->receive_status;
    if (why != QEM_OK) {
        const qem_error *e = frame_status != QEM_OK ? &frame_error : &r->receive_error;
        return qem_fail(error, why, "%s; the %llu frames before it are published in '%s', "
                        "marked incomplete", e->message, (unsigned long long)r->encoded,
                        r->dest);
    }
    return QEM_OK;
}

static void *writer_run(void *arg)
{
    qem_recorder *r = arg;
    qem_error e = {0};
    const qem_status st = record_frames(r, &e);
    pthread_mutex_lock(&r->mu);
    r->status = st;
    r->error = e;
    r->finished = 1;
    r->result.complete = st == QEM_OK && r->have_header && r->encoded == r->expected;
    r->result.expected = r->expected;
    r->result.received = r->encoded;
    r->result.spilled = r->spilled_total;
    r->result.seconds = seconds_since(&r->t0);
    /* Nothing further can come: a waiting receiver (it never waits on
     * the writer) or a live view sees the end. */
    r->stop = 1;
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* --- the public calls ---------------------------------------------------------- */

void qem_record_options_init(qem_record_options *o)
{
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
}

void qem_recorder_stop(qem_recorder *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->stop = r->stop_asked = 1;
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->mu);
}

static char *copy_text(const char *s, int *failed)
{
    char *out = s ? strdup(s) : NULL;
    *failed |= s && !out;
    return out;
}

static void recorder_free(qem_recorder *r)
{
    if (!r)
        return;
    if (r->a)
        r->a->impl = NULL;
    qem_input_close(r->a);
    free(r->ring);
    if (r->spill_fd >= 0)
        close(r->spill_fd);
    qem_live_journal_close(&r->journal);
    pthread_cond_destroy(&r->changed);
    pthread_mutex_destroy(&r->mu);
    free(r->url);
    free(r->dest);
    free(r->spill_dir);
    free(r->metadata_json);
    free(r->calibration_json);
    free(r);
}

qem_status qem_record_start(const char *url, const char *dest, const qem_record_options *options,
                            qem_recorder **out, qem_error *error)
{
    qem_error_clear(error);
    if (!url || !dest || !out)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_record_start: NULL argument");
    *out = NULL;
    qem_record_options o;
    qem_record_options_init(&o);
    QEM_TRY(qem_options_overlay(&o, sizeof o, options, "qem_record_options", error));
    QEM_TRY(qem_threads_check(o.threads, "qem_record_options.threads", error));
    if (o.connect_timeout_ms < 0 || o.idle_ms < 0)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "qem_record_options: timeouts must not be negative");
    if ((o.scan_shape[0] == 0) != (o.scan_shape[1] == 0))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "the scan shape %llux%llu must have two positive values (rows, columns)",
                        (unsigned long long)o.scan_shape[0], (unsigned long long)o.scan_shape[1]);
    const size_t n = strlen(dest);
    if (n < 5 || strcmp(dest + n - 4, ".qem") != 0)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "'%s': a recording is written as .qem (name it NAME.qem)", dest);
    if (access(dest, F_OK) == 0 || errno != ENOENT)
        return qem_fail(error, QEM_E_EXISTS, "'%s' already exists; qem never overwrites", dest);
    if (!o.queue_bytes)
        o.queue_bytes = DEFAULT_QUEUE_BYTES;
    live_address address;
    QEM_TRY(qem_live_parse_url(url, &address, error));
    qem_recorder *r = calloc(1, sizeof *r);
    if (!r)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    r->address = address;
    r->o = o;
    r->spill_fd = -1;
    r->journal.fd = -1;
    r->sink.r = r;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->changed, NULL);
    int failed = 0;
    r->url = copy_text(url, &failed);
    r->dest = copy_text(dest, &failed);
    r->spill_dir = copy_text(o.spill_dir, &failed);
    r->metadata_json = copy_text(o.metadata_json, &failed);
    r->calibration_json = copy_text(o.calibration_json, &failed);
    r->o.spill_dir = r->o.metadata_json = r->o.calibration_json = NULL;
    if (failed) {
        recorder_free(r);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    clock_gettime(CLOCK_MONOTONIC, &r->t0);
    r->receiver_started = pthread_create(&r->receiver, NULL, receiver_run, r) == 0;
    r->writer_started = r->receiver_started && pthread_create(&r->writer, NULL, writer_run, r) == 0;
    if (!r->writer_started) {
        if (r->receiver_started) {
            qem_recorder_stop(r);
            pthread_join(r->receiver, NULL);
        }
        recorder_free(r);
        return qem_fail(error, QEM_E_NO_MEMORY, "cannot start the recording's threads");
    }
    *out = r;
    return QEM_OK;
}

static void join_threads(qem_recorder *r)
{
    if (r->writer_started) {
        pthread_join(r->writer, NULL);
        r->writer_started = 0;
    }
    if (r->receiver_started) {
        pthread_join(r->receiver, NULL);
        r->receiver_started = 0;
    }
}

qem_status qem_recorder_wait(qem_recorder *r, qem_record_result *result, qem_error *error)
{
    qem_error_clear(error);
    if (!r)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_recorder_wait: NULL recorder");
    join_threads(r);
    if (result)
        QEM_TRY(qem_result_deliver(result, &r->result, sizeof r->result, "qem_record_result",
                                   error));
    if (r->status != QEM_OK && error)
        *error = r->error;
    return r->status;
}

qem_status qem_recorder_container(qem_recorder *r, qem_container **out, qem_error *error)
{
    qem_error_clear(error);
    if (!r || !out)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_recorder_container: NULL argument");
    if (!r->o.live_view)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "the recording keeps no frames to view: start it with live_view");
    /* The journal opens when the writer starts, after the header. */
    pthread_mutex_lock(&r->mu);
    while (!qem_live_journal_ready(&r->journal) && !r->finished)
        pthread_cond_wait(&r->changed, &r->mu);
    pthread_mutex_unlock(&r->mu);
    if (!qem_live_journal_ready(&r->journal))
        return qem_fail(error, QEM_E_STREAM,
                        "the recording from %s ended before any frame could be viewed", r->url);
    return qem_live_journal_container(&r->journal, r->a, out, error);
}

void qem_recorder_free(qem_recorder *r)
{
    if (!r)
        return;
    qem_recorder_stop(r);
    join_threads(r);
    recorder_free(r);
}

qem_status qem_record(const char *url, const char *dest, const qem_record_options *options,
                      qem_record_result *result, qem_error *error)
{
    qem_recorder *r = NULL;
    QEM_TRY(qem_record_start(url, dest, options, &r, error));
    const qem_status st = qem_recorder_wait(r, result, error);
    qem_recorder_free(r);
    return st;
}
