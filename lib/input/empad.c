/* placeholder */
#include "common/error.h"
#include "input/input.h"

static qem_status empad_describe(acquisition *a, const char *path, const uint8_t *head, size_t n,
                               const input_options *o, qem_error *error)
{
    (void)a; (void)head; (void)n; (void)o;
    return qem_fail(error, QEM_E_NOT_YET, "'%s': not yet", path);
}
static int empad_recognises(const uint8_t *head, size_t n) { (void)head; (void)n; return 0; }
static qem_status empad_read(acquisition *a, uint64_t first, uint64_t count, void *out, qem_error *error)
{ (void)a; (void)first; (void)count; (void)out; return qem_fail(error, QEM_E_NOT_YET, "not yet"); }
const input_family input_family_empad = {"empad", empad_recognises, empad_describe, empad_read, NULL, 1};
