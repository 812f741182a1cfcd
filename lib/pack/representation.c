/* A loaded pack behind the representation interface. */
#include "pack/pack_internal.h"
#include "source/representation.h"

static void describe(const void *impl, qem_source_info *info)
{
    const qem_pack *p = impl;
    info->kind = QEM_SOURCE_PACK;
    for (int i = 0; i < 4; i++)
        info->shape[i] = p->shape[i];
    info->scans = p->scans;
    info->pixels = p->pixels;
    info->working_dtype = p->working_dtype;
    info->raw_dtype = QEM_DTYPE_UINT16;
    info->raw_available = p->raw_access != QEM_RAW_MASK_APPLIED_ONLY;
}

static qem_status read(void *impl, uint64_t first, uint64_t count, qem_values values, void *out,
                       size_t out_size, int threads, qem_error *error)
{
    (void)threads;
    return qem_pack_read_scans(impl, first, count,
                               values == QEM_VALUES_RAW ? QEM_PACK_RAW : QEM_PACK_MASK_APPLIED,
                               out, out_size, error);
}

/* One shard's scans at a time. */
static uint64_t window(const void *impl, uint64_t first)
{
    const qem_pack *p = impl;
    return p->sps - first % p->sps;
}

static void close_pack(void *impl)
{
    qem_pack_close(impl);
}

const qem_representation_ops qem_pack_representation = {QEM_SOURCE_PACK, describe, read, window,
                                                         NULL, close_pack};
