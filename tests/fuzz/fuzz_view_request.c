/* The viewer's request parsing (cli/view/request.c): an input is one
 * request target, optionally followed by '\n' and the X-Qem-Token header
 * value. Whatever the parser accepts must also pass the checks the server
 * relies on before calling the library: indices and rectangles inside the
 * files, finite numbers within bounds, a well-formed client id. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "view/request.h"

static const char expected_token[] = "0123456789abcdef0123456789abcdef";

static void require(int condition)
{
    if (!condition)
        abort();
}

static int finite_bounded(double v)
{
    return isfinite(v) && fabs(v) <= VIEW_MAX_NUMBER;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    const char *newline = memchr(text, '\n', size);
    const size_t target_len = newline ? (size_t)(newline - text) : size;
    /* The target as libmicrohttpd hands it over: NUL-terminated. */
    char *target = malloc(target_len + 1);
    if (!target)
        return 0;
    memcpy(target, text, target_len);
    target[target_len] = '\0';
    char header[VIEW_MAX_VALUE];
    const size_t header_len = newline ? size - target_len - 1 : 0;
    if (newline && header_len < sizeof header) {
        memcpy(header, newline + 1, header_len);
        header[header_len] = '\0';
        (void)view_token_equal(expected_token, header);
    }
    const size_t length = strlen(target); /* an embedded NUL ends it, as in C */
    char token[VIEW_TOKEN_HEX + 1];
    if (view_query_token(target, length, token))
        require(strlen(token) == VIEW_TOKEN_HEX);
    view_request r;
    char why[256];
    const int status = view_parse_target(target, length, &r, why, sizeof why);
    require(status == 0 || status == 400 || status == 404);
    require(strlen(why) < sizeof why);
    if (status == 0) {
        static const uint64_t shapes[2][4] = {{3, 4, 16, 16}, {4, 32, 16, 16}};
        const view_limits limits = {2, shapes};
        require(r.route != VIEW_ROUTE_NONE);
        const view_detector_params *d = &r.det;
        require(!d->have_center || (finite_bounded(d->center[0]) && finite_bounded(d->center[1])));
        require(!d->have_radius || (finite_bounded(d->radius) && d->radius >= 0));
        require(!d->have_semiangle || (finite_bounded(d->semiangle) && d->semiangle > 0));
        require(!r.have_rotation || finite_bounded(r.rotation));
        require(!r.have_client || (strlen(r.client) >= 8 && strlen(r.client) <= VIEW_CLIENT_MAX));
        if (view_check_request(&r, &limits, why, sizeof why) == 0) {
            const uint64_t *shape = shapes[r.file];
            require(r.file < 2);
            require(!r.have_scan || (r.scan[0] < shape[0] && r.scan[1] < shape[1]));
            if (d->kind == VIEW_DETECTOR_RECT)
                require(d->rect[0] < d->rect[1] && d->rect[1] <= shape[2] &&
                        d->rect[2] < d->rect[3] && d->rect[3] <= shape[3]);
            require(r.route != VIEW_ROUTE_LIVE || (r.have_client && r.have_seq && d->kind));
        }
    }
    free(target);
    return 0;
}
