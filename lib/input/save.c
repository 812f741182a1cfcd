/* The two ways a .qem is written from outside a .qem file: from an
 * acquisition (qem_save_acquisition; flagged pixels to validity, facts to
 * source_metadata, the source's calibration beneath the caller's, the
 * reads pumped into the writer) and qem_save_file, which opens the
 * acquisition itself or re-saves a .qem. The handle is acquisition_api.c's. */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/options.h"
#include "input/acquisition_handle.h"
#include "input/input.h"
#include "qem/qem_internal.h"

typedef struct acq_save {
    acquisition *a;
    qem_dtype stored;
    uint64_t pixels;
    qem_progress_fn progress;
    void *progress_user;
} acq_save;

static qem_status fill_from_acquisition(void *source, uint64_t first, uint64_t count,
                                        void *window, qem_error *error)
{
    acq_save *s = source;
    const size_t bytes = (size_t)(count * s->pixels * qem_dtype_size(s->stored));
    return qem_input_read(s->a, first, count, s->stored, window, bytes, error);
}

/* After the last read: every member unchanged (and, when hashed while
 * read, its digest complete); then what the reads proved is recorded. */
static qem_status settle_acquisition(void *source, qem_writer *w, qem_error *error)
{
    acq_save *s = source;
    if (s->a->authenticated)
        QEM_TRY(qem_input_check_unchanged(s->a, error));
    else
        QEM_TRY(qem_input_stream_finish(s->a, s->progress, s->progress_user, error));
    return qem_save_note_facts(s->a, w, error);
}

qem_status qem_save_note_facts(const acquisition *a, qem_writer *w, qem_error *error)
{
    json_t *facts = qem_input_source_metadata(a);
    if (!facts)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    const char *key;
    json_t *value;
    qem_status st = QEM_OK;
    json_object_foreach(facts, key, value)
    {
        if (st == QEM_OK)
            st = qem_writer_note_source(w, key, json_incref(value), error);
    }
    json_decref(facts);
    return st;
}

/* The source's certain calibration facts beneath the caller's file: the
 * caller's quantities replace the source's, its overrides are its own. */
static char *merged_calibration(const acquisition *a, const char *user_text, qem_error *error)
{
    json_t *user = NULL;
    if (user_text) {
        json_error_t jerr;
        user = json_loads(user_text, JSON_REJECT_DUPLICATES, &jerr);
        if (!user || !json_is_object(user)) {
            json_decref(user);
            qem_fail(error, QEM_E_METADATA, "the calibration file is not a JSON object");
            return NULL;
        }
    }
    json_t *merged = json_deep_copy(a->calibration);
    if (!merged)
        merged = json_object();
    json_t *quantities = json_object_get(merged, "quantities");
    if (!quantities) {
        quantities = json_object();
        json_object_set_new(merged, "quantities", quantities);
    }
    const char *key;
    json_t *value;
    json_object_foreach(json_object_get(user, "quantities"), key, value)
        json_object_set(quantities, key, value);
    json_object_foreach(user, key, value)
        if (strcmp(key, "quantities") != 0)
            json_object_set(merged, key, value);
    json_decref(user);
    char *text = json_dumps(merged, JSON_COMPACT | JSON_REAL_PRECISION(17));
    json_decref(merged);
    if (!text)
        qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    return text;
}

void qem_save_setup_free(save_setup *setup)
{
    free(setup->valid);
    free(setup->calibration);
    free(setup->source_metadata);
    memset(setup, 0, sizeof *setup);
}

qem_status qem_save_setup_make(const acquisition *a, const qem_save_options *o,
                               save_setup *setup, qem_error *error)
{
    memset(setup, 0, sizeof *setup);
    const uint64_t pixels = a->shape[2] * a->shape[3];
    const qem_dtype stored = qem_input_stored_dtype(a);
    setup->options = *o;
    qem_save_options *local = &setup->options;
    /* Flagged pixels are invalid, beside the caller's own mask. The float
     * codec keeps no validity: its flagged pixels are recorded only. */
    if (a->flagged_count && stored != QEM_DTYPE_FLOAT32) {
        if (!(setup->valid = malloc((size_t)pixels)))
            return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        for (uint64_t p = 0; p < pixels; p++)
            setup->valid[p] = o->valid ? (o->valid[p] != 0) : 1;
        for (uint64_t k = 0; k < a->flagged_count; k++)
            setup->valid[a->flagged[k]] = 0;
        local->valid = setup->valid;
    }
    if (!local->source_format)
        local->source_format = a->family->name;
    if (!local->source_metadata_json && !local->scientific_metadata_json) {
        json_t *facts = qem_input_source_metadata(a);
        setup->source_metadata =
            facts ? json_dumps(facts, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
        json_decref(facts);
        if (!setup->source_metadata) {
            qem_save_setup_free(setup);
            return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        }
        local->source_metadata_json = setup->source_metadata;
    }
    if (a->calibration && !local->scientific_metadata_json) {
        setup->calibration = merged_calibration(a, o->calibration_json, error);
        if (!setup->calibration) {
            qem_save_setup_free(setup);
            return error && error->status ? error->status : QEM_E_NO_MEMORY;
        }
        local->calibration_json = setup->calibration;
    }
    return QEM_OK;
}

static qem_status save_acquisition(acquisition *a, const char *dest, const qem_save_options *o,
                                   qem_progress_fn hash_progress, void *hash_user,
                                   qem_error *error)
{
    acq_save src = {a, qem_input_stored_dtype(a), a->shape[2] * a->shape[3], hash_progress,
                    hash_user};
    save_setup setup;
    qem_status st = qem_save_setup_make(a, o, &setup, error);
    if (st != QEM_OK)
        return st;
    /* Authenticate as it reads (byte families), or before (HDF5). */
    if (!a->authenticated)
        st = a->family->reads_bytes ? qem_input_stream_begin(a, error)
                                    : qem_input_authenticate(a, hash_progress, hash_user, error);
    qem_writer *w = NULL;
    if (st == QEM_OK)
        st = qem_writer_create(dest, src.stored, a->shape, &setup.options, &w, error);
    /* Reading (decompressing, narrowing, hashing) overlaps encoding. */
    if (st == QEM_OK)
        st = qem_writer_pump(w, &src, fill_from_acquisition, settle_acquisition, 1, error);
    qem_writer_free(w);
    qem_save_setup_free(&setup);
    return st;
}

static qem_status check_save_options(const qem_save_options *user, qem_save_options *local,
                                     qem_error *error)
{
    qem_save_options_init(local);
    return qem_options_overlay(local, sizeof *local, user, "qem_save_options", error);
}

qem_status qem_save_acquisition(qem_acquisition *q, const char *dest,
                                const qem_save_options *options, qem_error *error)
{
    qem_error_clear(error);
    if (!q || !dest)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_save_acquisition: NULL argument");
    qem_save_options local;
    QEM_TRY(check_save_options(options, &local, error));
    const qem_status st =
        save_acquisition(q->input, dest, &local, q->progress, q->progress_user, error);
    qem_error_name_destination(error, dest);
    return st;
}

qem_status qem_save_file(const char *source, const char *dest, const qem_save_options *options,
                         qem_error *error)
{
    qem_error_clear(error);
    if (!source || !dest)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_save_file: NULL argument");
    qem_save_options local;
    QEM_TRY(check_save_options(options, &local, error));
    qem_file_kind kind;
    QEM_TRY(qem_identify(source, &kind, error));
    qem_status st;
    if (kind == QEM_KIND_QEM) {
        st = qem_resave_file(source, dest, &local, error);
    } else {
        qem_acquisition *q = NULL;
        st = qem_acquisition_open(source, local.input, &q, error);
        if (st == QEM_OK)
            st = save_acquisition(q->input, dest, &local, q->progress, q->progress_user, error);
        qem_acquisition_close(q);
    }
    qem_error_name_destination(error, dest);
    return st;
}
