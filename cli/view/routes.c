/* The viewer's routes (see server_internal.h and doc/viewer.md): each
 * API path turns a request that passed every check into a reply. Named
 * detectors resolve through qem_products_resolve_detector, the rule
 * `qem virtual` uses; each page (client id) has its own detector session,
 * updated by signed deltas. The page and /api/info are built once. */
#include "view/server_internal.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qem_experimental.h"
#include "view/assets.h"

#define TRY(call)                                                                                  \
    do {                                                                                           \
        const qem_status try_ = (call);                                                            \
        if (try_ != QEM_OK)                                                                        \
            return try_;                                                                           \
    } while (0)

/* --- the page and /api/info ------------------------------------------------------ */

static json_t *quantity_json(const qem_quantity *q)
{
    if (q->source == QEM_CALIBRATION_ABSENT)
        return json_null();
    return json_pack("{s:f, s:s, s:s}", "value", q->value, "unit", q->unit, "source",
                     q->source == QEM_CALIBRATION_OVERRIDE ? "override" : "recorded");
}

static json_t *file_json(view_file *f, size_t index)
{
    json_t *j = json_object();
    json_t *shape = json_array();
    for (int k = 0; k < 4; k++)
        json_array_append_new(shape, json_integer((json_int_t)f->info.shape[k]));
    json_object_set_new(j, "index", json_integer((json_int_t)index));
    json_object_set_new(j, "path", json_string(f->path));
    json_object_set_new(j, "name", json_string(f->name));
    json_object_set_new(j, "kind", json_string(qem_file_kind_name(f->info.kind)));
    json_object_set_new(j, "shape", shape);
    json_object_set_new(j, "dtype", json_string(qem_dtype_name(f->info.working_dtype)));
    json_object_set_new(j, "raw_dtype", json_string(qem_dtype_name(f->info.raw_dtype)));
    json_object_set_new(j, "data", json_string(f->counts ? "counts"
                                               : f->info.raw_dtype == QEM_DTYPE_UINT16
                                                   ? "scaled"
                                                   : "float"));
    uint64_t valid = 0;
    for (uint64_t p = 0; p < f->info.pixels; p++)
        valid += f->valid[p];
    json_object_set_new(j, "valid_pixels", json_integer((json_int_t)valid));
    char *text = qem_container_summary_json(f->source, NULL);
    json_t *summary = text ? json_loads(text, 0, NULL) : NULL;
    qem_free(text);
    if (!summary)
        summary = json_object();
    /* A .qem file's summary names its codec, a pack's its profile. */
    json_t *format = json_object_get(summary, "codec");
    if (!format)
        format = json_object_get(summary, "profile");
    json_object_set(j, "format", format ? format : json_null());
    json_t *bytes = json_object_get(summary, "file_bytes");
    json_object_set(j, "file_bytes", bytes ? bytes : json_null());
    json_t *ratio = json_object_get(summary, "compression_ratio");
    json_object_set(j, "compression_ratio", ratio ? ratio : json_null());
    /* A recording in progress has only its working values. */
    const qem_dtype logical = f->info.raw_dtype != QEM_DTYPE_NONE ? f->info.raw_dtype
                                                                  : f->info.working_dtype;
    json_object_set_new(j, "logical_bytes",
                        json_integer((json_int_t)(f->info.scans * f->info.pixels *
                                                  qem_dtype_size(logical))));
    json_object_set_new(j, "live", json_boolean(f->live));
    if (f->info.has_calibration) {
        qem_calibration c = {.struct_size = sizeof c};
        qem_container_get_calibration(f->source, &c, NULL);
        json_object_set_new(
            j, "calibration",
            json_pack("{s:[o,o], s:[o,o], s:o, s:o, s:o, s:o}", "scan_step",
                      quantity_json(&c.scan_step[0]), quantity_json(&c.scan_step[1]),
                      "detector_step", quantity_json(&c.detector_step[0]),
                      quantity_json(&c.detector_step[1]), "voltage", quantity_json(&c.voltage),
                      "semiangle", quantity_json(&c.semiangle), "dwell",
                      quantity_json(&c.dwell), "camera_length",
                      quantity_json(&c.camera_length)));
    } else {
        json_object_set_new(j, "calibration", json_null());
    }
    qem_detector_calibration dc = {.struct_size = sizeof dc};
    if (qem_products_file_calibration(f->products, &dc, NULL) == QEM_OK)
        json_object_set_new(j, "detector_calibration",
                            json_pack("{s:[f,f], s:f, s:s}", "center", dc.center_row,
                                      dc.center_column, "radius", dc.bright_field_radius,
                                      "method", dc.method));
    else
        json_object_set_new(j, "detector_calibration", json_null());
    double semi = 0;
    json_object_set_new(j, "semiangle_mrad",
                        qem_products_semiangle(f->products, &semi, NULL) == QEM_OK
                            ? json_real(semi)
                            : json_null());
    json_object_set_new(j, "summary", summary);
    return j;
}

static char *dump(json_t *j, size_t *length)
{
    char *text = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(17));
    json_decref(j);
    if (text && length)
        *length = strlen(text);
    return text;
}

static int build_info(view_server *s)
{
    json_t *files = json_array();
    for (size_t k = 0; k < s->nfiles; k++)
        json_array_append_new(files, file_json(&s->files[k], k));
    json_t *j = json_pack(
        "{s:s, s:o, s:[I,I], s:b, s:b, s:{s:i, s:i, s:i, s:i, s:i}}", "qem_version", qem_version(),
        "files", files, "detector_shape", (json_int_t)s->files[0].info.shape[2],
        (json_int_t)s->files[0].info.shape[3], "series", s->nfiles > 1, "live",
        s->config.live != NULL, "limits", "target_bytes",
        VIEW_MAX_TARGET, "query_bytes", VIEW_MAX_QUERY, "value_bytes", VIEW_MAX_VALUE - 1,
        "parameters", VIEW_MAX_PARAMS, "sessions", VIEW_MAX_SESSIONS);
    s->info_json = j ? dump(j, &s->info_length) : NULL;
    return s->info_json != NULL;
}

static const view_asset *find_asset(const char *name)
{
    for (size_t k = 0; k < view_asset_count; k++)
        if (!strcmp(view_assets[k].name, name))
            return &view_assets[k];
    return NULL;
}

/* Appends `n` bytes to a growing buffer; 0 when out of memory. */
static int append(char **buf, size_t *used, size_t *cap, const char *text, size_t n)
{
    if (*used + n + 1 > *cap) {
        size_t grown = (*cap ? *cap : 4096);
        while (grown < *used + n + 1)
            grown *= 2;
        char *b = realloc(*buf, grown);
        if (!b)
            return 0;
        *buf = b;
        *cap = grown;
    }
    memcpy(*buf + *used, text, n);
    *used += n;
    (*buf)[*used] = '\0';
    return 1;
}

/* index.html with the token, the script nonce and an import map that adds
 * the token to every module the page imports. */
static int build_page(view_server *s)
{
    const view_asset *index = find_asset("index.html");
    if (!index)
        return 0;
    char *map = NULL;
    size_t map_used = 0, map_cap = 0;
    int ok = append(&map, &map_used, &map_cap, "{\"imports\": {", 13);
    int first = 1;
    for (size_t k = 0; ok && k < view_asset_count; k++) {
        const char *name = view_assets[k].name;
        const size_t n = strlen(name);
        if (n < 3 || strcmp(name + n - 3, ".js"))
            continue;
        char entry[256];
        int len = snprintf(entry, sizeof entry, "%s\"/page/%s\": \"/page/%s?token=%s\"",
                           first ? "" : ", ", name, name, s->token);
        ok = len > 0 && (size_t)len < sizeof entry &&
             append(&map, &map_used, &map_cap, entry, (size_t)len);
        first = 0;
    }
    ok = ok && append(&map, &map_used, &map_cap, "}}", 2);
    const char *text = (const char *)index->data, *end = text + index->size;
    size_t used = 0, cap = 0;
    while (ok && text < end) {
        const char *open = memmem(text, (size_t)(end - text), "{{", 2);
        if (!open) {
            ok = append(&s->page, &used, &cap, text, (size_t)(end - text));
            break;
        }
        ok = append(&s->page, &used, &cap, text, (size_t)(open - text));
        const char *close = memmem(open, (size_t)(end - open), "}}", 2);
        if (!ok || !close)
            break;
        const size_t name_len = (size_t)(close - open - 2);
        if (name_len == 5 && !memcmp(open + 2, "TOKEN", 5))
            ok = append(&s->page, &used, &cap, s->token, strlen(s->token));
        else if (name_len == 5 && !memcmp(open + 2, "NONCE", 5))
            ok = append(&s->page, &used, &cap, s->nonce, strlen(s->nonce));
        else if (name_len == 9 && !memcmp(open + 2, "IMPORTMAP", 9))
            ok = append(&s->page, &used, &cap, map, map_used);
        else
            ok = 0; /* a placeholder the server does not know: a build defect */
        text = close + 2;
    }
    free(map);
    s->page_length = used;
    return ok && s->page;
}

int view_routes_prepare(view_server *s)
{
    return build_info(s) && build_page(s);
}

/* --- detectors ------------------------------------------------------------ */

typedef struct resolved_detector {
    qem_detector_resolution named; /* named detectors: what the library used */
    double radius_px;              /* the bright-field radius in pixels (mrad: the scale) */
    uint64_t pixels;               /* selected pixels of the file's mask */
} resolved_detector;

static void library_request(const view_detector_params *p, qem_detector_request *q)
{
    qem_detector_request_init(q);
    q->detector = (qem_detector)p->kind;
    if (p->have_center) {
        q->center_row = p->center[0];
        q->center_column = p->center[1];
    }
    if (p->have_radius)
        q->radius = p->radius;
    if (p->have_inner)
        q->inner = p->inner;
    if (p->have_outer)
        q->outer = p->outer;
    q->unit_mrad = p->unit_mrad;
    if (p->have_semiangle)
        q->semiangle_mrad = p->semiangle;
}

/* A named detector of file f, resolved by the library as for `qem virtual`.
 * In pixels, a centre or radius the request leaves to the file comes from
 * the kept defaults (the same values the library would find, without its
 * pass over the data), and the origin is theirs; radii in mrad are asked
 * as they are (the library converts them by the file's own scale). */
static qem_status resolve_named(view_file *f, const view_detector_params *p, uint8_t *mask,
                                resolved_detector *out, qem_error *e)
{
    qem_detector_request q;
    library_request(p, &q);
    const int bounds = p->have_inner && p->have_outer;
    const int center_left = !p->have_center;
    const int radius_left = !p->have_radius && !(p->have_center && bounds);
    view_default_detector d;
    int filled = 0;
    qem_error ignored = {0};
    if (!p->unit_mrad && (center_left || radius_left) &&
        view_file_defaults(f, &d, &ignored) == QEM_OK) {
        if (center_left) {
            q.center_row = d.center_row;
            q.center_column = d.center_column;
        }
        if (radius_left)
            q.radius = d.radius;
        filled = 1;
    }
    out->named.struct_size = sizeof out->named;
    TRY(qem_products_resolve_detector(f->products, &q, mask, (size_t)f->info.pixels, &out->named,
                                      e));
    if (filled)
        memcpy(out->named.origin, d.origin, sizeof out->named.origin);
    out->radius_px = out->named.radius;
    if (p->unit_mrad) {
        TRY(view_file_defaults(f, &d, e));
        out->radius_px = d.radius;
    }
    return QEM_OK;
}

/* The mask of file f for the request's detector, as `qem virtual FILE
 * --detector ...` (or `--mask` of the same rectangle) would select. */
static qem_status request_mask(view_file *f, const view_detector_params *p, uint8_t *mask,
                               resolved_detector *out, qem_error *e)
{
    memset(out, 0, sizeof *out);
    const uint64_t cols = f->info.shape[3];
    if (p->kind == VIEW_DETECTOR_RECT) {
        for (uint64_t px = 0; px < f->info.pixels; px++) {
            const uint64_t r = px / cols, c = px % cols;
            mask[px] = f->valid[px] && r >= p->rect[0] && r < p->rect[1] && c >= p->rect[2] &&
                       c < p->rect[3];
        }
        snprintf(out->named.origin, sizeof out->named.origin, "given");
    } else {
        TRY(resolve_named(f, p, mask, out, e));
    }
    for (uint64_t px = 0; px < f->info.pixels; px++)
        out->pixels += mask[px];
    return QEM_OK;
}

/* The mask every file of the series shares: file `base`'s detector,
 * resolved there, over the detector geometry alone; the session leaves
 * out each file's own invalid pixels, so each image equals `qem virtual`
 * of that file with the same centre and radius. */
static qem_status series_mask(view_server *s, size_t base, const view_detector_params *p,
                              uint8_t *mask, resolved_detector *out, qem_error *e)
{
    view_file *f = &s->files[base];
    TRY(request_mask(f, p, mask, out, e));
    if (s->nfiles == 1)
        return QEM_OK;
    const uint64_t pixels = f->info.pixels, cols = f->info.shape[3];
    if (p->kind == VIEW_DETECTOR_RECT) {
        for (uint64_t px = 0; px < pixels; px++) {
            const uint64_t r = px / cols, c = px % cols;
            mask[px] = r >= p->rect[0] && r < p->rect[1] && c >= p->rect[2] && c < p->rect[3];
        }
        return QEM_OK;
    }
    /* The geometry the base file's resolution used, in its own scale. */
    qem_detector_request g;
    qem_detector_request_init(&g);
    g.detector = (qem_detector)p->kind;
    g.center_row = out->named.center_row;
    g.center_column = out->named.center_column;
    g.radius = out->named.radius; /* NaN: unused */
    g.inner = p->have_inner ? p->inner : NAN;
    g.outer = p->have_outer ? p->outer : NAN;
    g.unit_mrad = p->unit_mrad;
    g.semiangle_mrad = p->have_semiangle ? p->semiangle : 0;
    if (g.unit_mrad && !(g.semiangle_mrad > 0))
        qem_products_semiangle(f->products, &g.semiangle_mrad, NULL);
    uint8_t *other = malloc((size_t)pixels);
    if (!other)
        return view_fail(e, QEM_E_NO_MEMORY, "out of memory for a detector mask");
    qem_status st = QEM_OK;
    for (size_t k = 0; st == QEM_OK && k < s->nfiles; k++) {
        if (k == base)
            continue;
        st = qem_products_detector_mask(s->files[k].products, &g, out->radius_px, other,
                                        (size_t)pixels, e);
        for (uint64_t px = 0; st == QEM_OK && px < pixels; px++)
            mask[px] |= other[px];
    }
    free(other);
    return st;
}

/* --- replies --------------------------------------------------------------- */

static void reply_header(view_reply *r, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void reply_header(view_reply *r, const char *name, const char *fmt, ...)
{
    if (r->nheaders >= VIEW_REPLY_HEADERS)
        return;
    snprintf(r->headers[r->nheaders][0], sizeof r->headers[0][0], "%s", name);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->headers[r->nheaders][1], sizeof r->headers[0][1], fmt, ap);
    va_end(ap);
    r->nheaders++;
}

void view_reply_text(view_reply *r, unsigned status, const char *message)
{
    static const char no_memory[] = "out of memory\n";
    view_reply_drop_body(r);
    r->status = status;
    r->type = "text/plain; charset=utf-8";
    const size_t n = strlen(message);
    r->owned = malloc(n + 2);
    if (r->owned) {
        memcpy(r->owned, message, n);
        r->owned[n] = '\n';
        r->owned[n + 1] = '\0';
        r->data = r->owned;
        r->length = n + 1;
    } else {
        r->data = no_memory;
        r->length = sizeof no_memory - 1;
    }
}

/* A library failure: the caller's geometry or parameters (400), memory or
 * a stop (503), else the data or the machine (500). */
static void reply_failure(view_reply *r, const qem_error *e)
{
    const unsigned status = e->status == QEM_E_INVALID_ARGUMENT ? 400
                            : e->status == QEM_E_NO_MEMORY || e->status == QEM_E_LIMIT ||
                                    e->status == QEM_E_INSUFFICIENT_MEMORY ||
                                    e->status == QEM_E_CANCELLED
                                ? 503
                                : 500;
    view_reply_text(r, status, e->message[0] ? e->message : qem_strerror(e->status));
}

static void reply_owned(view_reply *r, const char *type, unsigned char *body, size_t length)
{
    if (!body) {
        view_reply_text(r, 503, "out of memory for the reply");
        return;
    }
    r->status = 200;
    r->type = type;
    r->owned = body;
    r->data = body;
    r->length = length;
}

static void reply_image(view_reply *r, qem_image *im)
{
    size_t n = 0;
    unsigned char *body = view_image_npy(im, &n);
    qem_image_free(im);
    reply_owned(r, "application/octet-stream", body, n);
}

static void reply_json(view_reply *r, json_t *j)
{
    size_t n = 0;
    char *text = j ? dump(j, &n) : NULL;
    reply_owned(r, "application/json", (unsigned char *)text, n);
}

/* --- routes ---------------------------------------------------------------- */

static void route_dp(view_server *s, const view_request *q, view_reply *r)
{
    view_file *f = &s->files[q->file];
    const uint64_t scan = q->scan[0] * f->info.shape[1] + q->scan[1];
    /* A .qem file decodes the 512-scan block holding the scan and keeps
     * it (the library's pattern cache): hovering nearby is a copy. */
    qem_error e = {0};
    qem_image im;
    if (qem_products_frame(f->products, scan, &im, &e) != QEM_OK)
        reply_failure(r, &e);
    else
        reply_image(r, &im);
}

/* The request's mask (NULL when it names no detector: the CoM then takes
 * every valid pixel, as `qem com` without --mask/--detector). */
static int optional_mask(view_server *s, const view_request *q, uint8_t **mask,
                         resolved_detector *res, view_reply *r)
{
    *mask = NULL;
    if (!q->det.kind)
        return 1;
    view_file *f = &s->files[q->file];
    qem_error e = {0};
    *mask = malloc((size_t)f->info.pixels);
    if (!*mask) {
        view_reply_text(r, 503, "out of memory for a detector mask");
        return 0;
    }
    if (request_mask(f, &q->det, *mask, res, &e) != QEM_OK) {
        free(*mask);
        *mask = NULL;
        reply_failure(r, &e);
        return 0;
    }
    return 1;
}

/* A virtual image or the centre of mass, over the request's mask. */
static void route_image(view_server *s, const view_request *q, view_reply *r)
{
    uint8_t *mask;
    resolved_detector res;
    if (!optional_mask(s, q, &mask, &res, r))
        return;
    qem_error e = {0};
    qem_image im;
    qem_products *p = s->files[q->file].products;
    const qem_status st = q->route == VIEW_ROUTE_COM
                              ? qem_products_com(p, mask, q->subtract_mean, &im, &e)
                              : qem_products_virtual(p, mask, &im, &e);
    if (st != QEM_OK) {
        reply_failure(r, &e);
    } else {
        reply_image(r, &im);
        reply_header(r, "X-Qem-Origin", "%s", qem_origin_name(qem_products_last_origin(p)));
    }
    free(mask);
}

static void route_mask(view_server *s, const view_request *q, view_reply *r)
{
    uint8_t *mask;
    resolved_detector res;
    if (!optional_mask(s, q, &mask, &res, r))
        return;
    const view_file *f = &s->files[q->file];
    size_t n = 0;
    unsigned char *body = view_npy_body(QEM_DTYPE_UINT8, 2, f->info.shape + 2, mask, &n);
    free(mask);
    reply_owned(r, "application/octet-stream", body, n);
}

static void route_detector(view_server *s, const view_request *q, view_reply *r)
{
    uint8_t *mask;
    resolved_detector res;
    if (!optional_mask(s, q, &mask, &res, r))
        return;
    free(mask);
    json_t *j = json_object();
    json_object_set_new(j, "file", json_integer((json_int_t)q->file));
    json_object_set_new(j, "mask_pixels", json_integer((json_int_t)res.pixels));
    json_object_set_new(j, "center_radius_from", json_string(res.named.origin));
    /* Where the mean pattern behind an estimate came from. */
    json_object_set_new(
        j, "mean_from",
        json_string(qem_origin_name(qem_products_sums_origin(s->files[q->file].products))));
    if (q->det.kind == VIEW_DETECTOR_RECT) {
        json_object_set_new(j, "detector", json_string("rect"));
        json_object_set_new(j, "rect",
                            json_pack("[I,I,I,I]", (json_int_t)q->det.rect[0],
                                      (json_int_t)q->det.rect[1], (json_int_t)q->det.rect[2],
                                      (json_int_t)q->det.rect[3]));
    } else {
        const qem_detector_resolution *u = &res.named;
        json_object_set_new(j, "detector", json_string(view_detector_name(q->det.kind)));
        json_object_set_new(j, "center", json_pack("[f,f]", u->center_row, u->center_column));
        json_object_set_new(j, "radius", isnan(u->radius) ? json_null() : json_real(u->radius));
        json_object_set_new(j, "inner", q->det.have_inner ? json_real(q->det.inner) : json_null());
        json_object_set_new(j, "outer", q->det.have_outer ? json_real(q->det.outer) : json_null());
        json_object_set_new(j, "unit", json_string(u->unit_mrad ? "mrad" : "px"));
        json_object_set_new(j, "radius_px",
                            isnan(res.radius_px) ? json_null() : json_real(res.radius_px));
    }
    reply_json(r, j);
}

static void route_dpc(view_server *s, const view_request *q, view_reply *r)
{
    uint8_t *mask;
    resolved_detector res;
    if (!optional_mask(s, q, &mask, &res, r))
        return;
    qem_error e = {0};
    qem_dpc_result d = {.struct_size = sizeof d};
    if (qem_products_dpc(s->files[q->file].products, mask, q->have_rotation ? q->rotation : NAN,
                         &d, &e) != QEM_OK) {
        reply_failure(r, &e);
    } else {
        reply_header(r, "X-Qem-Rotation-Degrees", "%.17g", d.rotation_degrees);
        reply_header(r, "X-Qem-Components-Exchanged", "%d", d.components_exchanged);
        reply_header(r, "X-Qem-Origin", "%s",
                     qem_origin_name(qem_products_last_origin(s->files[q->file].products)));
        reply_image(r, &d.phase);
        qem_dpc_result_free(&d);
    }
    free(mask);
}

static void route_mean(view_server *s, const view_request *q, view_reply *r)
{
    qem_error e = {0};
    unsigned char *body = NULL;
    size_t n = 0;
    if (view_mean_npy(&s->files[q->file], &body, &n, &e) != QEM_OK)
        reply_failure(r, &e);
    else
        reply_owned(r, "application/octet-stream", body, n);
}

/* The page's detector moved: the new images of every file, all or none,
 * from its session (signed deltas of the pixels that changed). */
static void route_live(view_server *s, const view_request *q, view_reply *r)
{
    qem_error e = {0};
    /* While a recording fills in, a session's images are of the frames
     * that had arrived: a fresh session computes each update whole. */
    qem_detector_session *fresh = NULL;
    view_client *c = NULL;
    if (view_data_changing(s)) {
        if (qem_detector_session_create(s->products, s->nfiles, &fresh, &e) != QEM_OK) {
            reply_failure(r, &e);
            return;
        }
    } else if (!(c = view_client_acquire(s, q->client, &e))) {
        reply_failure(r, &e);
        return;
    }
    qem_detector_session *session = c ? c->session : fresh;
    const uint64_t pixels = s->files[0].info.pixels;
    uint8_t *mask = malloc((size_t)pixels);
    qem_image *images = calloc(s->nfiles, sizeof *images);
    resolved_detector res;
    if (c)
        pthread_mutex_lock(&c->lock);
    const double t0 = view_now_ms();
    qem_status st = mask && images ? QEM_OK
                                   : view_fail(&e, QEM_E_NO_MEMORY, "out of memory for an update");
    if (st == QEM_OK)
        st = series_mask(s, (size_t)q->file, &q->det, mask, &res, &e);
    if (st == QEM_OK)
        st = qem_detector_session_set_mask(session, mask, &e);
    /* The session's own images, written into the reply while the lock
     * keeps the next move from replacing them: not first copied into
     * zeroed images (a series of three 512 images: 3 MiB less to zero and
     * 3 MiB less to copy a move). */
    for (size_t k = 0; st == QEM_OK && k < s->nfiles; k++) {
        const qem_image *held = NULL;
        st = qem_detector_session_image_view(session, k, &held, &e);
        if (st == QEM_OK)
            images[k] = *held;
    }
    qem_session_stats stats = {.struct_size = sizeof stats};
    qem_detector_session_stats(session, &stats, NULL);
    const double computed = view_now_ms() - t0;
    unsigned char *body = NULL;
    size_t used = st == QEM_OK ? view_images_npy_size(images, s->nfiles) : 0;
    if (st == QEM_OK && (!used || !(body = view_body_take(s, used))))
        st = view_fail(&e, QEM_E_NO_MEMORY, "out of memory for the images");
    if (st == QEM_OK)
        view_images_npy_write(images, s->nfiles, body);
    if (c) {
        pthread_mutex_unlock(&c->lock);
        view_client_release(s, c);
    }
    qem_detector_session_free(fresh);
    free(images); /* borrowed: the session's */
    free(mask);
    if (st != QEM_OK) {
        view_body_give(body);
        reply_failure(r, &e);
        return;
    }
    atomic_fetch_add(&s->live_updates, 1);
    reply_owned(r, "application/octet-stream", body, used);
    r->pooled = 1;
    reply_header(r, "X-Qem-Seq", "%llu", (unsigned long long)q->seq);
    reply_header(r, "X-Qem-Compute-Ms", "%.3f", computed);
    reply_header(r, "X-Qem-Images", "%zu", s->nfiles);
    reply_header(r, "X-Qem-Pixels-Changed", "%llu", (unsigned long long)stats.pixels_changed);
    reply_header(r, "X-Qem-Full-Recomputation", "%d", stats.full_recomputation);
    reply_header(r, "X-Qem-From-Kept", "%d", stats.from_kept);
    reply_header(r, "X-Qem-From-Recorded", "%d", stats.from_recorded);
    reply_header(r, "X-Qem-From-Cached", "%d", stats.from_cached);
    reply_header(r, "X-Qem-Mask-Pixels", "%llu", (unsigned long long)res.pixels);
}

static void route_stats(view_server *s, view_reply *r)
{
    uint64_t hits = 0, misses = 0;
    qem_column_cache_stats columns = {sizeof columns, 0, 0, 0, 0, 0};
    uint64_t packed_copies = 0, packed_bytes = 0;
    for (size_t k = 0; k < s->nfiles; k++) {
        if (s->files[k].live)
            continue; /* a recording's container keeps no pattern blocks */
        uint64_t h, m;
        qem_container_pattern_cache_stats(s->files[k].source, &h, &m);
        hits += h;
        misses += m;
        qem_column_cache_stats one = {sizeof one, 0, 0, 0, 0, 0};
        if (qem_container_column_cache_stats(s->files[k].source, &one, NULL) == QEM_OK) {
            columns.hits += one.hits;
            columns.misses += one.misses;
            columns.columns += one.columns;
            columns.bytes += one.bytes;
        }
        qem_packed_copy_stats packed = {sizeof packed, 0, 0, 0};
        if (qem_container_packed_copy_stats(s->files[k].source, &packed, NULL) == QEM_OK &&
            packed.ready) {
            packed_copies++;
            packed_bytes += packed.bytes;
        }
    }
    reply_json(r, json_pack("{s:b, s:b, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:i, s:I, s:I, s:I, "
                            "s:I, s:I, s:I, s:I, s:I, s:I, s:b, s:I, s:I}",
                            "bodies_checked", atomic_load(&s->bodies_checked),
                            "body_damaged", view_body_failure(s) != NULL, "requests",
                            (json_int_t)atomic_load(&s->requests), "live_updates",
                            (json_int_t)atomic_load(&s->live_updates), "refused",
                            (json_int_t)atomic_load(&s->refused), "failed",
                            (json_int_t)atomic_load(&s->failed), "sessions",
                            (json_int_t)view_sessions_open(s), "sessions_created",
                            (json_int_t)atomic_load(&s->sessions_created), "sessions_evicted",
                            (json_int_t)atomic_load(&s->sessions_evicted), "max_sessions",
                            VIEW_MAX_SESSIONS, "connections",
                            (json_int_t)view_connections_open(s), "pattern_block_hits",
                            (json_int_t)hits, "pattern_block_misses", (json_int_t)misses,
                            "unauthenticated_evicted",
                            (json_int_t)atomic_load(&s->unauth_evicted),
                            "unauthenticated_timed_out",
                            (json_int_t)atomic_load(&s->unauth_timed_out), "column_hits",
                            (json_int_t)columns.hits, "column_misses",
                            (json_int_t)columns.misses, "columns_kept",
                            (json_int_t)columns.columns, "column_bytes",
                            (json_int_t)columns.bytes, "packed_done",
                            atomic_load(&s->packed_done), "packed_copies",
                            (json_int_t)packed_copies, "packed_bytes",
                            (json_int_t)packed_bytes));
}

/* Where a recording stands; for files, always finished and complete. */
static void route_recording(view_server *s, view_reply *r)
{
    view_live_state now;
    view_live_poll(s, &now);
    reply_json(r, json_pack("{s:b, s:I, s:I, s:b, s:b}", "live", s->config.live != NULL,
                            "received", (json_int_t)now.received, "expected",
                            (json_int_t)now.expected, "finished", now.finished, "complete",
                            now.complete));
}

void view_dispatch(view_server *s, const view_request *q, view_reply *r)
{
    switch (q->route) {
    case VIEW_ROUTE_PAGE:
        r->status = 200;
        r->type = "text/html; charset=utf-8";
        r->data = s->page;
        r->length = s->page_length;
        return;
    case VIEW_ROUTE_ASSET: {
        const view_asset *a = strcmp(q->asset, "index.html") ? find_asset(q->asset) : NULL;
        if (!a) {
            view_reply_text(r, 404, "no such page file");
            return;
        }
        r->status = 200;
        r->type = a->content_type;
        r->data = a->data;
        r->length = a->size;
        return;
    }
    case VIEW_ROUTE_INFO:
        r->status = 200;
        r->type = "application/json";
        r->data = s->info_json;
        r->length = s->info_length;
        return;
    case VIEW_ROUTE_STATS: route_stats(s, r); return;
    case VIEW_ROUTE_RECORDING: route_recording(s, r); return;
    default: break;
    }
    /* Data from a file whose body check failed: refused, whatever was kept. */
    const view_file *damaged = view_body_failure(s);
    if (damaged) {
        qem_error e = damaged->body_error;
        snprintf(e.message, sizeof e.message, "'%.100s' %s: %.360s", damaged->name,
                 view_body_failure_words(damaged->body_error.status), damaged->body_error.message);
        reply_failure(r, &e);
        return;
    }
    switch (q->route) {
    case VIEW_ROUTE_PAGE:
    case VIEW_ROUTE_ASSET:
    case VIEW_ROUTE_INFO:
    case VIEW_ROUTE_STATS:
    case VIEW_ROUTE_RECORDING: break;
    case VIEW_ROUTE_MEAN: route_mean(s, q, r); return;
    case VIEW_ROUTE_DP: route_dp(s, q, r); return;
    case VIEW_ROUTE_VIRTUAL: route_image(s, q, r); return;
    case VIEW_ROUTE_MASK: route_mask(s, q, r); return;
    case VIEW_ROUTE_DETECTOR: route_detector(s, q, r); return;
    case VIEW_ROUTE_COM: route_image(s, q, r); return;
    case VIEW_ROUTE_DPC: route_dpc(s, q, r); return;
    case VIEW_ROUTE_LIVE: route_live(s, q, r); return;
    case VIEW_ROUTE_NONE: break;
    }
    view_reply_text(r, 404, "no such path");
}
