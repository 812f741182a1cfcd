/* libcbor, opened on the first DECTRIS stream V2 message instead of linked:
 * only that receiver (and its fuzzer) parses CBOR, so libqem.so never lists
 * it and no other command maps it (as libzmq, FFTW and libcrypto). */
#ifndef QEM_LIVE_CBOR_LOADER_H
#define QEM_LIVE_CBOR_LOADER_H

#include <cbor.h>
#include <stddef.h>

#include "qem.h"

#define QEM_LIBCBOR_SONAME "libcbor.so.0.8"

/* The libcbor calls the V2 parser makes, with <cbor.h>'s prototypes
 * (checked at compile time by QEM_LAZY_BIND). Items are borrowed from the
 * loaded tree, which `decref` frees; `tag_item` adds a reference. */
typedef struct qem_cbor {
    cbor_item_t *(*load)(cbor_data source, size_t size, struct cbor_load_result *result);
    void (*decref)(cbor_item_t **item);
    cbor_type (*type_of)(const cbor_item_t *item);
    uint64_t (*get_int)(const cbor_item_t *item);
    bool (*bytestring_is_definite)(const cbor_item_t *item);
    size_t (*bytestring_length)(const cbor_item_t *item);
    cbor_mutable_data (*bytestring_handle)(const cbor_item_t *item);
    bool (*string_is_definite)(const cbor_item_t *item);
    size_t (*string_length)(const cbor_item_t *item);
    cbor_mutable_data (*string_handle)(const cbor_item_t *item);
    size_t (*array_size)(const cbor_item_t *item);
    cbor_item_t **(*array_handle)(const cbor_item_t *item);
    size_t (*map_size)(const cbor_item_t *item);
    struct cbor_pair *(*map_handle)(const cbor_item_t *item);
    uint64_t (*tag_value)(const cbor_item_t *item);
    cbor_item_t *(*tag_item)(const cbor_item_t *item);
    bool (*float_ctrl_is_ctrl)(const cbor_item_t *item);
    double (*float_get_float)(const cbor_item_t *item);
    uint8_t (*ctrl_value)(const cbor_item_t *item);
} qem_cbor;

/* The table, loading libcbor on the process's first call (once, whichever
 * thread gets there first); QEM_E_IO with "cannot load libcbor
 * (libcbor.so.0.8): <why>" if it cannot be loaded. */
qem_status qem_cbor_get(const qem_cbor **table, qem_error *error);

#endif
