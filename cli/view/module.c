/* The viewer module's one export (view/server.h): its server calls. */
#include "view/server.h"

static const view_module table = {sizeof(view_module), VIEW_MODULE_ABI, QEM_VERSION_STRING,
                                  view_server_create, view_server_start, view_server_token,
                                  view_server_free};

const void *qem_module_view_v1(void)
{
    return &table;
}
