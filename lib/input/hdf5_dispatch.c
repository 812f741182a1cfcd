/* libqem's side of the HDF5 module (hdf5_module.h): the HDF5 families and
 * the pack writer as calls into the module's table, which is loaded by the
 * first of them. Recognising an HDF5 file by its signature
 * (acquisition.c) needs none of this, so only a file that carries it loads
 * libhdf5. */
#include "common/error.h"
#include "input/hdf5_module.h"

static qem_status module(const qem_hdf5_module **m, qem_error *error)
{
    const void *table = NULL;
    QEM_TRY(qem_module_get(QEM_MODULE_HDF5, sizeof **m, &table, error));
    *m = table;
    return QEM_OK;
}

/* Each family's entry points run the module's family of the same name. */
#define FAMILY_CALLS(fam)                                                                          \
    static qem_status fam##_describe(acquisition *a, const char *path, const uint8_t *head,       \
                                     size_t n, const input_options *o, qem_error *error)          \
    {                                                                                              \
        const qem_hdf5_module *m;                                                                  \
        QEM_TRY(module(&m, error));                                                                \
        return m->fam->describe(a, path, head, n, o, error);                                       \
    }                                                                                              \
    static qem_status fam##_read(acquisition *a, uint64_t first, uint64_t count, void *out,       \
                                 qem_error *error)                                                 \
    {                                                                                              \
        const qem_hdf5_module *m;                                                                  \
        QEM_TRY(module(&m, error));                                                                \
        return m->fam->read(a, first, count, out, error);                                          \
    }                                                                                              \
    /* State exists only once the module ran. */                                                  \
    static void fam##_release(acquisition *a)                                                      \
    {                                                                                              \
        const qem_hdf5_module *m;                                                                  \
        if (a->impl && module(&m, NULL) == QEM_OK)                                                 \
            m->fam->release(a);                                                                    \
    }

#define FAMILY_CLAIMS(fam)                                                                         \
    static qem_status fam##_claims(acquisition *a, const char *path, int *claimed,               \
                                   qem_error *error)                                               \
    {                                                                                              \
        *claimed = 0;                                                                              \
        const qem_hdf5_module *m;                                                                  \
        QEM_TRY(module(&m, error));                                                                \
        return m->fam->claims_hdf5(a, path, claimed, error);                                       \
    }

FAMILY_CALLS(arina)
FAMILY_CALLS(emd)
FAMILY_CALLS(velox)
FAMILY_CALLS(dataset)
FAMILY_CLAIMS(arina)
FAMILY_CLAIMS(emd)
FAMILY_CLAIMS(velox)

const input_family qem_input_family_arina = {"arina",       NULL, arina_describe, arina_read,
                                             arina_release, 0,    arina_claims};
const input_family qem_input_family_emd = {"emd",       NULL, emd_describe, emd_read,
                                           emd_release, 0,    emd_claims};
const input_family qem_input_family_velox = {"velox",       NULL, velox_describe, velox_read,
                                             velox_release, 0,    velox_claims};
const input_family qem_input_family_hdf5 = {"hdf5",          NULL, dataset_describe, dataset_read,
                                            dataset_release, 0,    NULL};

qem_status qem_pack_h5_create(int fd, uint64_t user_block, const char *schema,
                              const char *identity_hex, const uint64_t shape[4],
                              const char *working_dtype, pack_h5_writer **out, qem_error *error)
{
    const qem_hdf5_module *m;
    QEM_TRY(module(&m, error));
    return m->pack_create(fd, user_block, schema, identity_hex, shape, working_dtype, out, error);
}

qem_status qem_pack_h5_append(pack_h5_writer *w, uint64_t shard, const char *name, const void *data,
                              uint64_t count, unsigned item_bytes, uint64_t *offset,
                              uint64_t *bytes, qem_error *error)
{
    const qem_hdf5_module *m;
    QEM_TRY(module(&m, error));
    return m->pack_append(w, shard, name, data, count, item_bytes, offset, bytes, error);
}

qem_status qem_pack_h5_prepared(int fd, pack_h5_dataset *items, size_t count, qem_error *error)
{
    const qem_hdf5_module *m;
    QEM_TRY(module(&m, error));
    return m->pack_prepared(fd, items, count, error);
}

qem_status qem_pack_h5_close(pack_h5_writer *w, qem_error *error)
{
    const qem_hdf5_module *m;
    if (!w)
        return QEM_OK;
    QEM_TRY(module(&m, error));
    return m->pack_close(w, error);
}
