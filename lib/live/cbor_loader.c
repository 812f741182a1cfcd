#include "live/cbor_loader.h"

#include <pthread.h>
#include <string.h>

#include "common/error.h"
#include "common/lazy_library.h"

/* Written once under pthread_once, read-only after (as the libzmq loader). */
static struct {
    pthread_once_t once;
    int ok;
    qem_cbor table;
    char why[400];
} loader = {.once = PTHREAD_ONCE_INIT};

static void load_once(void)
{
    qem_cbor *out = &loader.table;
    char *why = loader.why;
    const size_t n = sizeof loader.why;
    void *h = qem_lazy_open(QEM_LIBCBOR_SONAME, why, n);
    loader.ok = h && !QEM_LAZY_BIND(h, out, load, cbor_load, why, n) &&
                !QEM_LAZY_BIND(h, out, decref, cbor_decref, why, n) &&
                !QEM_LAZY_BIND(h, out, type_of, cbor_typeof, why, n) &&
                !QEM_LAZY_BIND(h, out, get_int, cbor_get_int, why, n) &&
                !QEM_LAZY_BIND(h, out, bytestring_is_definite, cbor_bytestring_is_definite, why,
                               n) &&
                !QEM_LAZY_BIND(h, out, bytestring_length, cbor_bytestring_length, why, n) &&
                !QEM_LAZY_BIND(h, out, bytestring_handle, cbor_bytestring_handle, why, n) &&
                !QEM_LAZY_BIND(h, out, string_is_definite, cbor_string_is_definite, why, n) &&
                !QEM_LAZY_BIND(h, out, string_length, cbor_string_length, why, n) &&
                !QEM_LAZY_BIND(h, out, string_handle, cbor_string_handle, why, n) &&
                !QEM_LAZY_BIND(h, out, array_size, cbor_array_size, why, n) &&
                !QEM_LAZY_BIND(h, out, array_handle, cbor_array_handle, why, n) &&
                !QEM_LAZY_BIND(h, out, map_size, cbor_map_size, why, n) &&
                !QEM_LAZY_BIND(h, out, map_handle, cbor_map_handle, why, n) &&
                !QEM_LAZY_BIND(h, out, tag_value, cbor_tag_value, why, n) &&
                !QEM_LAZY_BIND(h, out, tag_item, cbor_tag_item, why, n) &&
                !QEM_LAZY_BIND(h, out, float_ctrl_is_ctrl, cbor_float_ctrl_is_ctrl, why, n) &&
                !QEM_LAZY_BIND(h, out, float_get_float, cbor_float_get_float, why, n) &&
                !QEM_LAZY_BIND(h, out, ctrl_value, cbor_ctrl_value, why, n);
    if (!loader.ok)
        memset(out, 0, sizeof *out);
}

qem_status qem_cbor_get(const qem_cbor **table, qem_error *error)
{
    pthread_once(&loader.once, load_once);
    *table = loader.ok ? &loader.table : NULL;
    return loader.ok ? QEM_OK
                     : qem_fail(error, QEM_E_IO, "cannot load libcbor (%s): %s",
                                QEM_LIBCBOR_SONAME, loader.why);
}
