/* The viewer's request parsing (cli/view/request.c): an input is one
 * request target, optionally followed by '\n' and the X-Qem-Token header
 * value. Whatever the parser accepts must also pass the checks the server
 * relies on before calling the library: indices and rectangles inside the
 * files, finite numbers within bounds, a well-formed client id. The
 * target, as --verbose would log it, must show the token nowhere after
 * masking: not literally, not in capitals, not percent-decoded. */
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

static int hex(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                          : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* 1 when `text` holds the token, read as it stands or percent-decoded
 * once from its start, ignoring case: an independent reader of the log. */
static int shows_token(const char *text, size_t n)
{
    char *plain = malloc(n + 1), *decoded = malloc(n + 1);
    require(plain && decoded);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)text[i];
        if (c == '%' && i + 2 < n && hex(text[i + 1]) >= 0 && hex(text[i + 2]) >= 0) {
            c = hex(text[i + 1]) * 16 + hex(text[i + 2]);
            i += 2;
        }
        decoded[m++] = (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    }
    for (size_t i = 0; i < n; i++)
        plain[i] = (char)(text[i] >= 'A' && text[i] <= 'Z' ? text[i] - 'A' + 'a' : text[i]);
    const size_t t = VIEW_TOKEN_HEX;
    int found = 0;
    for (size_t i = 0; !found && i + t <= n; i++)
        found = !memcmp(plain + i, expected_token, t);
    for (size_t i = 0; !found && i + t <= m; i++)
        found = !memcmp(decoded + i, expected_token, t);
    free(plain);
    free(decoded);
    return found;
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
    char *masked = malloc(target_len + 1);
    require(masked != NULL);
    view_mask_token(text, target_len, expected_token, masked);
    for (size_t i = 0; i < target_len; i++)
        require(masked[i] == text[i] || masked[i] == 'x');
    require(!shows_token(masked, target_len));
    free(masked);
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
