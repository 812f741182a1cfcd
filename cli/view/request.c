/* Request targets of `qem view`, parsed strictly (see request.h). Every
 * length is bounded before anything is copied, every value is checked
 * against a plain grammar before it is converted, and a key may appear
 * once: anything else is a 400 naming the offending part. */
#include "view/request.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    KEY_TOKEN = 1u << 0,
    KEY_FILE = 1u << 1,
    KEY_SCAN = 1u << 2,
    KEY_DETECTOR = 1u << 3,
    KEY_CENTER = 1u << 4,
    KEY_RADIUS = 1u << 5,
    KEY_INNER = 1u << 6,
    KEY_OUTER = 1u << 7,
    KEY_UNIT = 1u << 8,
    KEY_SEMIANGLE = 1u << 9,
    KEY_RECT = 1u << 10,
    KEY_SUBTRACT = 1u << 11,
    KEY_ROTATION = 1u << 12,
    KEY_CLIENT = 1u << 13,
    KEY_SEQ = 1u << 14
};

#define KEYS_DETECTOR                                                                              \
    (KEY_DETECTOR | KEY_CENTER | KEY_RADIUS | KEY_INNER | KEY_OUTER | KEY_UNIT | KEY_SEMIANGLE |  \
     KEY_RECT)

static const struct {
    const char *name;
    unsigned key;
} keys[] = {{"token", KEY_TOKEN},       {"file", KEY_FILE},
            {"scan", KEY_SCAN},         {"detector", KEY_DETECTOR},
            {"center", KEY_CENTER},     {"radius", KEY_RADIUS},
            {"inner", KEY_INNER},       {"outer", KEY_OUTER},
            {"unit", KEY_UNIT},         {"semiangle", KEY_SEMIANGLE},
            {"rect", KEY_RECT},         {"subtract_mean", KEY_SUBTRACT},
            {"rotation", KEY_ROTATION}, {"client", KEY_CLIENT},
            {"seq", KEY_SEQ}};

static const struct {
    const char *path;
    view_route route;
    unsigned allowed, required;
} routes[] = {
    {"/", VIEW_ROUTE_PAGE, KEY_TOKEN, 0},
    {"/api/info", VIEW_ROUTE_INFO, KEY_TOKEN, 0},
    {"/api/stats", VIEW_ROUTE_STATS, KEY_TOKEN, 0},
    {"/api/recording", VIEW_ROUTE_RECORDING, KEY_TOKEN, 0},
    {"/api/mean.npy", VIEW_ROUTE_MEAN, KEY_TOKEN | KEY_FILE, 0},
    {"/api/dp.npy", VIEW_ROUTE_DP, KEY_TOKEN | KEY_FILE | KEY_SCAN, KEY_SCAN},
    {"/api/virtual.npy", VIEW_ROUTE_VIRTUAL, KEY_TOKEN | KEY_FILE | KEYS_DETECTOR, KEY_DETECTOR},
    {"/api/mask.npy", VIEW_ROUTE_MASK, KEY_TOKEN | KEY_FILE | KEYS_DETECTOR, KEY_DETECTOR},
    {"/api/detector", VIEW_ROUTE_DETECTOR, KEY_TOKEN | KEY_FILE | KEYS_DETECTOR, KEY_DETECTOR},
    {"/api/com.npy", VIEW_ROUTE_COM, KEY_TOKEN | KEY_FILE | KEYS_DETECTOR | KEY_SUBTRACT, 0},
    {"/api/dpc.npy", VIEW_ROUTE_DPC, KEY_TOKEN | KEY_FILE | KEYS_DETECTOR | KEY_ROTATION, 0},
    {"/api/live", VIEW_ROUTE_LIVE, KEY_TOKEN | KEY_FILE | KEYS_DETECTOR | KEY_CLIENT | KEY_SEQ,
     KEY_DETECTOR | KEY_CLIENT | KEY_SEQ},
};

#define ASSET_PREFIX "/page/"

static int reject(int status, char *why, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int reject(int status, char *why, size_t size, const char *fmt, ...)
{
    if (why && size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, size, fmt, ap);
        va_end(ap);
    }
    return status;
}

const char *view_route_path(view_route route)
{
    if (route == VIEW_ROUTE_ASSET)
        return ASSET_PREFIX;
    for (size_t k = 0; k < sizeof routes / sizeof routes[0]; k++)
        if (routes[k].route == route)
            return routes[k].path;
    return "?";
}

static int hex_digit(int c)
{
    return c >= '0' && c <= '9' ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* The character at text[i] as one percent-decoding reads it, in lower
 * case; *width receives the bytes it takes (3 for %XX, else 1). */
static int decoded_lower(const char *text, size_t length, size_t i, size_t *width)
{
    int c = (unsigned char)text[i];
    *width = 1;
    if (c == '%' && i + 2 < length && hex_digit(text[i + 1]) >= 0 && hex_digit(text[i + 2]) >= 0) {
        c = hex_digit(text[i + 1]) * 16 + hex_digit(text[i + 2]);
        *width = 3;
    }
    return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c;
}

void view_mask_token(const char *text, size_t length, const char *token, char *out)
{
    memcpy(out, text, length);
    /* Matches are found in `text` and masked in `out`, so that masking
     * one occurrence cannot hide an overlapping one. */
    for (size_t i = 0; i < length; i++) {
        size_t at = i, matched = 0, width = 1;
        while (matched < VIEW_TOKEN_HEX && at < length &&
               decoded_lower(text, length, at, &width) == (unsigned char)token[matched]) {
            at += width;
            matched++;
        }
        if (matched == VIEW_TOKEN_HEX)
            memset(out + i, 'x', at - i);
    }
}

/* Percent-decodes [s, s + n) into out (NUL-terminated, at most cap - 1
 * bytes); only printable ASCII may result. 0 on any violation. */
static int decode_component(const char *s, size_t n, char *out, size_t cap)
{
    size_t used = 0;
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)s[i];
        if (c == '%') {
            if (i + 2 >= n)
                return 0;
            const int hi = hex_digit((unsigned char)s[i + 1]), lo = hex_digit((unsigned char)s[i + 2]);
            if (hi < 0 || lo < 0)
                return 0;
            c = hi * 16 + lo;
            i += 2;
        }
        if (c < 0x20 || c > 0x7e || used + 1 >= cap)
            return 0;
        out[used++] = (char)c;
    }
    out[used] = '\0';
    return 1;
}

/* -?D+(.D+)?([eE][+-]?D+)? with at most 32 characters, finite, within
 * +-VIEW_MAX_NUMBER. */
static int parse_number(const char *s, double *out)
{
    const char *p = s;
    if (strlen(s) > 32)
        return 0;
    if (*p == '-')
        p++;
    if (*p < '0' || *p > '9')
        return 0;
    while (*p >= '0' && *p <= '9')
        p++;
    if (*p == '.') {
        p++;
        if (*p < '0' || *p > '9')
            return 0;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (*p < '0' || *p > '9')
            return 0;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    if (*p)
        return 0;
    const double v = strtod(s, NULL);
    if (!isfinite(v) || fabs(v) > VIEW_MAX_NUMBER)
        return 0;
    *out = v;
    return 1;
}

/* Decimal digits only, at most 16 of them (below 2^53). */
static int parse_count(const char *s, size_t n, uint64_t *out)
{
    if (n == 0 || n > 16)
        return 0;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    *out = v;
    return 1;
}

/* `count` comma-separated decimal counts. */
static int parse_counts(const char *s, uint64_t *out, int count)
{
    for (int k = 0; k < count; k++) {
        const char *end = strchr(s, ',');
        if ((k + 1 < count) != (end != NULL))
            return 0;
        const size_t n = end ? (size_t)(end - s) : strlen(s);
        if (!parse_count(s, n, &out[k]))
            return 0;
        s = end ? end + 1 : s + n;
    }
    return 1;
}

/* Two comma-separated numbers. */
static int parse_pair(const char *s, double out[2])
{
    const char *comma = strchr(s, ',');
    char first[40];
    if (!comma || (size_t)(comma - s) >= sizeof first)
        return 0;
    memcpy(first, s, (size_t)(comma - s));
    first[comma - s] = '\0';
    return parse_number(first, &out[0]) && parse_number(comma + 1, &out[1]);
}

static int parse_hex(const char *s, size_t min, size_t max, char *out)
{
    const size_t n = strlen(s);
    if (n < min || n > max)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    memcpy(out, s, n + 1);
    return 1;
}

static const struct {
    const char *name;
    int kind;
} detector_kinds[] = {{"bf", 1}, {"abf", 2}, {"adf", 3}, {"haadf", 4}, {"df", 5}, {"annulus", 6},
                      {"rect", VIEW_DETECTOR_RECT}};

static int parse_detector_kind(const char *s, int *kind)
{
    for (size_t k = 0; k < sizeof detector_kinds / sizeof detector_kinds[0]; k++)
        if (!strcmp(s, detector_kinds[k].name)) {
            *kind = detector_kinds[k].kind;
            return 1;
        }
    return 0;
}

const char *view_detector_name(int kind)
{
    for (size_t k = 0; k < sizeof detector_kinds / sizeof detector_kinds[0]; k++)
        if (detector_kinds[k].kind == kind)
            return detector_kinds[k].name;
    return "none";
}

/* One key=value into the request. 0 or 400. */
static int take_value(unsigned key, const char *name, const char *v, view_request *r, char *why,
                      size_t size)
{
    view_detector_params *d = &r->det;
    int ok = 1;
    switch (key) {
    case KEY_TOKEN:
        ok = parse_hex(v, VIEW_TOKEN_HEX, VIEW_TOKEN_HEX, r->token);
        r->have_token = ok;
        break;
    case KEY_FILE: ok = parse_count(v, strlen(v), &r->file); break;
    case KEY_SCAN:
        ok = parse_counts(v, r->scan, 2);
        r->have_scan = ok;
        break;
    case KEY_DETECTOR: ok = parse_detector_kind(v, &d->kind); break;
    case KEY_CENTER:
        ok = parse_pair(v, d->center);
        d->have_center = ok;
        break;
    case KEY_RADIUS:
        ok = parse_number(v, &d->radius) && d->radius >= 0;
        d->have_radius = ok;
        break;
    case KEY_INNER:
        ok = parse_number(v, &d->inner) && d->inner >= 0;
        d->have_inner = ok;
        break;
    case KEY_OUTER:
        ok = parse_number(v, &d->outer) && d->outer >= 0;
        d->have_outer = ok;
        break;
    case KEY_SEMIANGLE:
        ok = parse_number(v, &d->semiangle) && d->semiangle > 0;
        d->have_semiangle = ok;
        break;
    case KEY_UNIT:
        ok = !strcmp(v, "px") || !strcmp(v, "mrad");
        d->unit_mrad = ok && !strcmp(v, "mrad");
        d->have_unit = ok;
        break;
    case KEY_RECT:
        ok = parse_counts(v, d->rect, 4);
        d->have_rect = ok;
        break;
    case KEY_SUBTRACT:
        ok = !strcmp(v, "0") || !strcmp(v, "1");
        r->subtract_mean = ok && v[0] == '1';
        break;
    case KEY_ROTATION:
        ok = parse_number(v, &r->rotation);
        r->have_rotation = ok;
        break;
    case KEY_CLIENT:
        ok = parse_hex(v, 8, VIEW_CLIENT_MAX, r->client);
        r->have_client = ok;
        break;
    case KEY_SEQ:
        ok = parse_count(v, strlen(v), &r->seq);
        r->have_seq = ok;
        break;
    default: ok = 0;
    }
    return ok ? 0 : reject(400, why, size, "parameter '%s' has a malformed or out-of-range value", name);
}

/* Splits "path?query" (no fragment; a browser never sends one). */
static void split_target(const char *t, size_t n, size_t *path_len, const char **query,
                         size_t *query_len)
{
    const char *q = memchr(t, '?', n);
    *path_len = q ? (size_t)(q - t) : n;
    *query = q ? q + 1 : t + n;
    *query_len = q ? n - *path_len - 1 : 0;
}

int view_query_token(const char *target, size_t length, char token[VIEW_TOKEN_HEX + 1])
{
    if (!target || length > VIEW_MAX_TARGET)
        return 0;
    size_t path_len, n;
    const char *q;
    split_target(target, length, &path_len, &q, &n);
    if (n > VIEW_MAX_QUERY)
        return 0;
    int found = 0;
    const char *end = q + n;
    while (q < end) {
        const char *amp = memchr(q, '&', (size_t)(end - q));
        const char *stop = amp ? amp : end;
        const size_t len = (size_t)(stop - q);
        if (len > 6 && !memcmp(q, "token=", 6)) {
            char value[VIEW_MAX_VALUE];
            if (found || !decode_component(q + 6, len - 6, value, sizeof value) ||
                !parse_hex(value, VIEW_TOKEN_HEX, VIEW_TOKEN_HEX, token))
                return 0;
            found = 1;
        } else if (len == 5 && !memcmp(q, "token", 5)) {
            return 0;
        }
        q = amp ? amp + 1 : end;
    }
    return found;
}

int view_token_equal(const char *expected, const char *given)
{
    if (!expected || !given)
        return 0;
    unsigned diff = 0;
    size_t n = 0;
    /* Read exactly VIEW_TOKEN_HEX + 1 bytes of each, stopping at NUL. */
    for (; n < VIEW_TOKEN_HEX; n++) {
        if (!given[n] || !expected[n])
            return 0;
        diff |= (unsigned)(unsigned char)(expected[n] ^ given[n]);
    }
    return diff == 0 && given[n] == '\0' && expected[n] == '\0';
}

int view_parse_target(const char *target, size_t length, view_request *r, char *why, size_t size)
{
    memset(r, 0, sizeof *r);
    if (why && size)
        why[0] = '\0';
    if (!target || length == 0 || target[0] != '/')
        return reject(400, why, size, "the request target must be a path starting with '/'");
    if (length > VIEW_MAX_TARGET)
        return reject(400, why, size, "the request target is longer than %d bytes", VIEW_MAX_TARGET);
    size_t path_len, query_len;
    const char *query;
    split_target(target, length, &path_len, &query, &query_len);
    if (path_len > VIEW_MAX_PATH)
        return reject(404, why, size, "no such path");
    if (query_len > VIEW_MAX_QUERY)
        return reject(400, why, size, "the query is longer than %d bytes", VIEW_MAX_QUERY);
    /* Paths are plain: letters, digits, '.', '_', '-', '/'; no escapes. */
    for (size_t i = 0; i < path_len; i++) {
        const char c = target[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-' || c == '/'))
            return reject(404, why, size, "no such path");
    }
    char path[VIEW_MAX_PATH + 1];
    memcpy(path, target, path_len);
    path[path_len] = '\0';
    unsigned allowed = 0, required = 0;
    const size_t prefix = sizeof ASSET_PREFIX - 1;
    if (path_len > prefix && !memcmp(path, ASSET_PREFIX, prefix)) {
        const char *name = path + prefix;
        if (strchr(name, '/') || name[0] == '.')
            return reject(404, why, size, "no such path");
        r->route = VIEW_ROUTE_ASSET;
        memcpy(r->asset, name, strlen(name) + 1);
        allowed = KEY_TOKEN;
    } else {
        for (size_t k = 0; k < sizeof routes / sizeof routes[0]; k++)
            if (!strcmp(path, routes[k].path)) {
                r->route = routes[k].route;
                allowed = routes[k].allowed;
                required = routes[k].required;
            }
        if (r->route == VIEW_ROUTE_NONE)
            return reject(404, why, size, "no such path");
    }
    unsigned seen = 0;
    int params = 0;
    const char *q = query, *end = query + query_len;
    while (q < end) {
        const char *amp = memchr(q, '&', (size_t)(end - q));
        const char *stop = amp ? amp : end;
        const char *eq = memchr(q, '=', (size_t)(stop - q));
        if (!eq || eq == q)
            return reject(400, why, size, "each query parameter must be key=value");
        if (++params > VIEW_MAX_PARAMS)
            return reject(400, why, size, "more than %d query parameters", VIEW_MAX_PARAMS);
        char name[24], value[VIEW_MAX_VALUE];
        if ((size_t)(eq - q) >= sizeof name ||
            !decode_component(q, (size_t)(eq - q), name, sizeof name))
            return reject(400, why, size, "unknown query parameter");
        if (!decode_component(eq + 1, (size_t)(stop - eq - 1), value, sizeof value))
            return reject(400, why, size,
                          "parameter '%s' is longer than %d bytes or holds a control character",
                          name, VIEW_MAX_VALUE - 1);
        unsigned key = 0;
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
            if (!strcmp(name, keys[k].name))
                key = keys[k].key;
        if (!(key & allowed))
            return reject(400, why, size, "parameter '%s' is not accepted by %s", name,
                          r->route == VIEW_ROUTE_ASSET ? ASSET_PREFIX : path);
        if (seen & key)
            return reject(400, why, size, "parameter '%s' is given twice", name);
        seen |= key;
        int st = take_value(key, name, value, r, why, size);
        if (st)
            return st;
        q = amp ? amp + 1 : end;
        if (amp && q == end)
            return reject(400, why, size, "the query ends with '&'");
    }
    const unsigned missing = required & ~seen;
    for (size_t k = 0; missing && k < sizeof keys / sizeof keys[0]; k++)
        if (missing & keys[k].key)
            return reject(400, why, size, "%s needs the parameter '%s'", path, keys[k].name);
    return 0;
}

int view_check_request(const view_request *r, const view_limits *lim, char *why, size_t size)
{
    if (why && size)
        why[0] = '\0';
    if (lim->files == 0 || r->file >= lim->files)
        return reject(400, why, size, "file=%llu: there are %zu files (0 to %zu)",
                      (unsigned long long)r->file, lim->files, lim->files ? lim->files - 1 : 0);
    const uint64_t *shape = lim->shapes[r->file];
    if (r->have_scan && (r->scan[0] >= shape[0] || r->scan[1] >= shape[1]))
        return reject(400, why, size, "scan=%llu,%llu is outside the %llu x %llu scan",
                      (unsigned long long)r->scan[0], (unsigned long long)r->scan[1],
                      (unsigned long long)shape[0], (unsigned long long)shape[1]);
    const view_detector_params *d = &r->det;
    const int any = d->have_center || d->have_radius || d->have_inner || d->have_outer ||
                    d->have_semiangle || d->have_unit || d->have_rect;
    if (!d->kind) {
        if (any)
            return reject(400, why, size, "detector parameters need detector=NAME");
        return 0;
    }
    if (d->kind == VIEW_DETECTOR_RECT) {
        if (!d->have_rect)
            return reject(400, why, size, "detector=rect needs rect=ROW0,ROW1,COL0,COL1");
        if (d->have_center || d->have_radius || d->have_inner || d->have_outer ||
            d->have_semiangle || d->have_unit)
            return reject(400, why, size, "detector=rect takes only rect=ROW0,ROW1,COL0,COL1");
        if (!(d->rect[0] < d->rect[1] && d->rect[1] <= shape[2] && d->rect[2] < d->rect[3] &&
              d->rect[3] <= shape[3]))
            return reject(400, why, size,
                          "rect=%llu,%llu,%llu,%llu must give 0 <= ROW0 < ROW1 <= %llu and "
                          "0 <= COL0 < COL1 <= %llu (half-open detector ranges)",
                          (unsigned long long)d->rect[0], (unsigned long long)d->rect[1],
                          (unsigned long long)d->rect[2], (unsigned long long)d->rect[3],
                          (unsigned long long)shape[2], (unsigned long long)shape[3]);
        return 0;
    }
    if (d->have_rect)
        return reject(400, why, size, "rect= goes with detector=rect only");
    /* How centre, radius and bounds combine is the library's to judge,
     * as for `qem virtual`; its refusals become 400 too. */
    return 0;
}
