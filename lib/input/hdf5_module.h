/* The HDF5 module (libqem-hdf5.so; common/module.h): everything that calls
 * libhdf5 — the HDF5 acquisition families (hdf5.c, arina.c, emd.c, velox.c
 * over hdf5_util.c) and the pack file writer (pack/h5write.c). libqem reaches
 * it only through this table (hdf5_dispatch.c), so nothing maps libhdf5
 * until an HDF5 file is recognised or a pack is produced. */
#ifndef QEM_INPUT_HDF5_MODULE_H
#define QEM_INPUT_HDF5_MODULE_H

#include "common/module.h"
#include "input/input.h"
#include "pack/h5write.h"

typedef struct qem_hdf5_module {
    qem_module_header header;
    const input_family *arina;   /* claims its masters first */
    const input_family *emd;     /* Berkeley EMD (emd.c) */
    const input_family *velox;   /* Thermo Fisher Velox EMD (velox.c) */
    const input_family *dataset; /* every other HDF5 file */
    qem_status (*pack_create)(int fd, uint64_t user_block, const char *schema,
                              const char *identity_hex, const uint64_t shape[4],
                              const char *working_dtype, pack_h5_writer **out, qem_error *error);
    qem_status (*pack_append)(pack_h5_writer *w, uint64_t shard, const char *name,
                              const void *data, uint64_t count, unsigned item_bytes,
                              uint64_t *offset, uint64_t *bytes, qem_error *error);
    qem_status (*pack_close)(pack_h5_writer *w, qem_error *error);
    qem_status (*pack_prepared)(int fd, pack_h5_dataset *items, size_t count, qem_error *error);
} qem_hdf5_module;

/* Inside the module: the real families and writer (qem_pack_h5_* and
 * qem_input_family_{hdf5,arina} are libqem's calls into the table). */
extern const input_family qem_h5_family_arina, qem_h5_family_emd, qem_h5_family_velox,
    qem_h5_family_dataset;
qem_status qem_h5_pack_create(int fd, uint64_t user_block, const char *schema,
                              const char *identity_hex, const uint64_t shape[4],
                              const char *working_dtype, pack_h5_writer **out, qem_error *error);
qem_status qem_h5_pack_append(pack_h5_writer *w, uint64_t shard, const char *name, const void *data,
                              uint64_t count, unsigned item_bytes, uint64_t *offset,
                              uint64_t *bytes, qem_error *error);
qem_status qem_h5_pack_close(pack_h5_writer *w, qem_error *error);
qem_status qem_h5_pack_prepared(int fd, pack_h5_dataset *items, size_t count, qem_error *error);

/* The module's one export. */
__attribute__((visibility("default"))) const void *qem_module_hdf5_v1(void);

#endif
