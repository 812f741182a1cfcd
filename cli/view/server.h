/* The viewer's HTTP server: open files, the token, per-page detector
 * sessions, and the libmicrohttpd daemon that answers the page and the
 * API (doc/viewer.md). */
#ifndef QEM_VIEW_SERVER_H
#define QEM_VIEW_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "qem.h"

typedef struct view_server view_server;

/* Where a recording being viewed stands (qem record --view). */
typedef struct view_live_state {
    uint64_t received; /* frames readable through the container */
    uint64_t expected; /* frames of the scan (0 until the header arrived) */
    int finished;      /* the recording is over: the data no longer change */
    int complete;      /* finished with every frame of the scan */
} view_live_state;

typedef struct view_config {
    const char *const *paths; /* the files, in order; a recording: its destination */
    size_t files;
    const char *bind;         /* IPv4 address, dotted */
    unsigned port;            /* 0 = any free port */
    int threads;              /* library threads per call; 0 = all cores */
    int verbose;              /* one line per request on stderr */
    int quiet;                /* no progress while packs load */
    int resident; /* .qem files: a qem_resident (QEM_RESIDENT_NONE: read per use) */
    /* MiB of recent detectors' images each page's session keeps. */
    uint64_t keep_masks_mib;
    /* MiB of decoded pixel columns, shared among the .qem files. */
    uint64_t column_cache_mib;
    /* MiB for bit-packed copies of .qem files, built after the start. */
    uint64_t packed_copy_mib;
    const char *cache_dir; /* products' cache_dir, or NULL */
    /* A recording in progress instead of files (files = 1): the recorder's
     * container, which the server owns from view_server_create on (closed
     * by it, even when the create fails), and the call that says where the
     * recording stands. While it is not finished nothing derived from the
     * data is kept between requests. NULL: the files of `paths`. */
    qem_container *live;
    void (*live_state)(void *user, view_live_state *state);
    void *live_user;
} view_config;

/* Opens every file (a pack is loaded, with progress and Ctrl-C as in every
 * command), checks that one detector can serve them all, and prepares the
 * page. */
qem_status view_server_create(const view_config *config, view_server **out, qem_error *error);
/* Starts listening; *port receives the port bound. */
qem_status view_server_start(view_server *server, unsigned *port, qem_error *error);
/* The access token (32 hex digits). */
const char *view_server_token(const view_server *server);
/* Asks running work to stop, stops the daemon (waiting for its threads)
 * and frees everything. Accepts NULL. */
void view_server_free(view_server *server);

/* The server is a module of the command (qem-view.so, the only user of
 * libmicrohttpd), loaded by `qem view` and `qem record --view` alone: the
 * calls above, as its one export qem_module_view_v1 gives them. The module
 * calls back only term_safe, interrupted_by and progress_setup, which the
 * command exports (view/exports.list). */
#define VIEW_MODULE_ABI 2u /* 2: view_config.live */
typedef struct view_module {
    uint32_t struct_size;
    uint32_t abi;        /* VIEW_MODULE_ABI */
    const char *version; /* QEM_VERSION_STRING of the build */
    qem_status (*create)(const view_config *config, view_server **out, qem_error *error);
    qem_status (*start)(view_server *server, unsigned *port, qem_error *error);
    const char *(*token)(const view_server *server);
    void (*free)(view_server *server);
} view_module;
__attribute__((visibility("default"))) const void *qem_module_view_v1(void);

#endif
