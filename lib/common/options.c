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
    memcpy(local, user, declared < local_size ? declared : local_size);
    memcpy(local, &local_size, sizeof local_size);
    return QEM_OK;
}
