/* What `qem view` accepts from a browser: the request target (path and
 * query) parsed into a request, strictly (bounded sizes, known keys only,
 * no repeats, plain numbers), then checked against the open files. Pure
 * functions: no I/O, no libmicrohttpd, no library calls; the fuzz target
 * tests/fuzz/fuzz_view_request.c drives exactly these. */
#ifndef QEM_VIEW_REQUEST_H
#define QEM_VIEW_REQUEST_H

#include <stddef.h>
#include <stdint.h>

/* Bounds on what a request may carry; beyond them: 400. */
#define VIEW_MAX_TARGET 4096 /* whole request target */
#define VIEW_MAX_PATH 128
#define VIEW_MAX_QUERY 2048
#define VIEW_MAX_VALUE 128
#define VIEW_MAX_PARAMS 24
#define VIEW_MAX_FILES 64
#define VIEW_TOKEN_HEX 32  /* 128 bits */
#define VIEW_CLIENT_MAX 32 /* client id: 8 to 32 lowercase hex digits */
#define VIEW_MAX_NUMBER 1e6 /* |coordinates|, radii, angles */

typedef enum view_route {
    VIEW_ROUTE_NONE = 0,
    VIEW_ROUTE_PAGE,     /* / */
    VIEW_ROUTE_ASSET,    /* /page/NAME */
    VIEW_ROUTE_INFO,     /* /api/info */
    VIEW_ROUTE_STATS,    /* /api/stats */
    VIEW_ROUTE_MEAN,     /* /api/mean.npy */
    VIEW_ROUTE_DP,       /* /api/dp.npy */
    VIEW_ROUTE_VIRTUAL,  /* /api/virtual.npy */
    VIEW_ROUTE_MASK,     /* /api/mask.npy */
    VIEW_ROUTE_DETECTOR, /* /api/detector (JSON) */
    VIEW_ROUTE_COM,      /* /api/com.npy */
    VIEW_ROUTE_DPC,      /* /api/dpc.npy */
    VIEW_ROUTE_LIVE,     /* /api/live */
    VIEW_ROUTE_RECORDING /* /api/recording (JSON) */
} view_route;

/* The detector a request names; 0 = none. Named ones are qem_detector
 * values (1..6); a rectangle is VIEW_DETECTOR_RECT. */
#define VIEW_DETECTOR_RECT 100

typedef struct view_detector_params {
    int kind;
    int have_center, have_radius, have_inner, have_outer, have_semiangle, have_unit, have_rect;
    double center[2], radius, inner, outer, semiangle;
    int unit_mrad;
    uint64_t rect[4]; /* row0, row1, col0, col1: rows [row0, row1) x cols [col0, col1) */
} view_detector_params;

typedef struct view_request {
    view_route route;
    char asset[VIEW_MAX_PATH];  /* ROUTE_ASSET: the name after /page/ */
    char token[VIEW_TOKEN_HEX + 1];
    int have_token;
    uint64_t file; /* default 0 */
    int have_scan;
    uint64_t scan[2];
    view_detector_params det;
    int subtract_mean;
    int have_rotation;
    double rotation;
    char client[VIEW_CLIENT_MAX + 1];
    int have_client;
    uint64_t seq;
    int have_seq;
} view_request;

/* The open files, as far as requests need them. */
typedef struct view_limits {
    size_t files;
    const uint64_t (*shapes)[4]; /* per file: scan rows, scan columns, detector rows, columns */
} view_limits;

/* Parses a request target ("/api/dp.npy?file=0&scan=1,2"). Returns 0, or
 * the HTTP status to answer (400 malformed or too large, 404 no such
 * path) with a sentence in `why`. */
int view_parse_target(const char *target, size_t length, view_request *request, char *why,
                      size_t why_size);

/* The `token` query value, when the query has exactly one well-formed
 * one: 1 and `token` filled, else 0. Used before the full parse so that a
 * request without the token is refused (403) whatever else is wrong. */
int view_query_token(const char *target, size_t length, char token[VIEW_TOKEN_HEX + 1]);

/* 1 when `given` equals `expected` (both VIEW_TOKEN_HEX hex digits), in
 * time independent of where they differ. */
int view_token_equal(const char *expected, const char *given);

/* Copies [text, text + length) to `out` (length bytes) with every
 * occurrence of `token` (VIEW_TOKEN_HEX lowercase hex digits) replaced by
 * 'x's: literal or percent-encoded (%XX, decoded once), in either case,
 * wherever it stands. What --verbose logs passes through here, so a log
 * shows no usable token whatever key, path or method it came in. */
void view_mask_token(const char *text, size_t length, const char *token, char *out);

/* Checks a parsed request against the open files: file index, scan
 * position, rectangle bounds, which parameters go together. 0 or 400. */
int view_check_request(const view_request *request, const view_limits *limits, char *why,
                       size_t why_size);

/* "bf", ..., "annulus", "rect" for a detector kind; "none" for 0. */
const char *view_detector_name(int kind);

/* Path of a route, for messages and documentation. */
const char *view_route_path(view_route route);

#endif
