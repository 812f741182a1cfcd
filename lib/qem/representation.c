/* A .qem file behind the representation interface. Working values are
 * counts, float32 bits or restored scaled intensities; raw values are the
 * stored counts, bits or codes. */
#include "qem/qem_internal.h"
#include "source/representation.h"

static qem_output output_of(const qem_file *f, qem_values values)
{
    if (f->codec == QEM_CODEC_SCALED)
        return values == QEM_VALUES_RAW ? QEM_OUTPUT_CODES : QEM_OUTPUT_VALUES;
    return QEM_OUTPUT_NATIVE;
}

static qem_dtype dtype_of(const qem_file *f, qem_values values)
{
    if (f->codec == QEM_CODEC_SCALED)
        return values == QEM_VALUES_RAW ? QEM_DTYPE_UINT16 : QEM_DTYPE_FLOAT32;
    return f->dtype;
}

static void describe(const void *impl, qem_source_info *info)
{
    const qem_file *f = impl;
    info->kind = QEM_SOURCE_QEM;
    for (int i = 0; i < 4; i++)
        info->shape[i] = f->shape[i];
    info->scans = f->scans;
    info->pixels = f->pixels;
    info->working_dtype = dtype_of(f, QEM_VALUES_WORKING);
    info->raw_dtype = dtype_of(f, QEM_VALUES_RAW);
    info->raw_available = 1;
}

static qem_status read(void *impl, uint64_t first, uint64_t count, qem_values values, void *out,
                       size_t out_size, int threads, qem_error *error)
{
    qem_file *f = impl;
    return qem_read_into(f, first, count, output_of(f, values), out, out_size,
                         threads ? threads : f->threads, error);
}

/* To the end of the chunk holding `first`. */
static uint64_t window(const void *impl, uint64_t first)
{
    const qem_file *f = impl;
    const qem_chunk *c = &f->chunks[qem_chunk_index_of(f, first)];
    return c->first + c->scans - first;
}

static qem_status export_npy(void *impl, const char *dest, qem_values values, int threads,
                             qem_progress_fn progress, void *progress_user, qem_error *error)
{
    qem_export_options o;
    qem_export_options_init(&o);
    o.threads = threads;
    o.scaled_codes = values == QEM_VALUES_RAW;
    o.progress = progress;
    o.progress_user = progress_user;
    return qem_export_npy(impl, dest, &o, error);
}

static void close_file(void *impl)
{
    qem_close(impl);
}

const qem_representation_ops qem_file_representation = {QEM_SOURCE_QEM, describe, read, window,
                                                        export_npy, close_file};
