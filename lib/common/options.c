#include "common/options.h"

#include <string.h>

#include "common/error.h"

qem_status qem_options_overlay(void *local, size_t local_size, const void *user,
                               const char *what, qem_error *error)
{
    if (!user)
        return QEM_OK;
    size_t declared;
    memcpy(&declared, user, sizeof declared);
    if (declared < sizeof(size_t) || declared > (1u << 16))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "%s: struct_size is %zu; initialise the options with %s_init() first",
                        what, declared, what);
    /* A caller built against a newer, larger struct: its extra fields are
     * ones this library cannot honour, so they must be unset (zero). */
    for (size_t k = local_size; k < declared; k++)
        if (((const unsigned char *)user)[k] != 0)
            return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                            "%s: the caller's struct is %zu bytes, this library's %zu, and "
                            "byte %zu beyond it is set: a field this qem does not know was "
                            "asked for; update qem",
                            what, declared, local_size, k);
    memcpy(local, user, declared < local_size ? declared : local_size);
    memcpy(local, &local_size, sizeof local_size);
    return QEM_OK;
}

qem_status qem_result_check(const void *out, const char *what, qem_error *error)
{
    if (!out)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "%s: NULL result struct", what);
    size_t declared;
    memcpy(&declared, out, sizeof declared);
    if (declared < sizeof(size_t) || declared > (1u << 16))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "%s: struct_size is %zu; set it to sizeof(%s) before the call", what,
                        declared, what);
    return QEM_OK;
}

qem_status qem_result_deliver(void *out, const void *value, size_t value_size, const char *what,
                              qem_error *error)
{
    QEM_TRY(qem_result_check(out, what, error));
    size_t declared;
    memcpy(&declared, out, sizeof declared);
    const size_t n = declared < value_size ? declared : value_size;
    /* Everything after struct_size, then struct_size itself: the bytes written. */
    memcpy((unsigned char *)out + sizeof(size_t), (const unsigned char *)value + sizeof(size_t),
           n - sizeof(size_t));
    memcpy(out, &n, sizeof n);
    return QEM_OK;
}
