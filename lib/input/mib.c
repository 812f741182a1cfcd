/* placeholder */
#include "common/error.h"
#include "input/input.h"

static qem_status mib_describe(acquisition *a, const char *path, const uint8_t *head, size_t n,
                               const input_options *o, qem_error *error)
{
    (void)a; (void)head; (void)n; (void)o;
    return qem_fail(error, QEM_E_NOT_YET, "'%s': not yet", path);
}
static int mib_recognises(const uint8_t *head, size_t n) { (void)head; (void)n; return 0; }
static qem_status mib_read(acquisition *a, uint64_t first, uint64_t count, void *out, qem_error *error)
{ (void)a; (void)first; (void)count; (void)out; return qem_fail(error, QEM_E_NOT_YET, "not yet"); }
const input_family input_family_mib = {"mib", mib_recognises, mib_describe, mib_read, NULL, 1};
