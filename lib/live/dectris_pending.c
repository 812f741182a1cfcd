#include "common/error.h"
#include "live/live.h"
qem_status live_receive_dectris(const live_address *address, const live_receive_options *options,
                                live_sink *sink, qem_error *error)
{
    (void)address, (void)options, (void)sink;
    return qem_fail(error, QEM_E_NOT_YET, "pending");
}
