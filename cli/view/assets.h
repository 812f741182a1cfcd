/* The page's files, embedded at build time (cli/view/embed.cmake writes
 * view_assets.c from cli/view/page/). Nothing is ever read from disk. */
#ifndef QEM_VIEW_ASSETS_H
#define QEM_VIEW_ASSETS_H

#include <stddef.h>

typedef struct view_asset {
    const char *name;         /* file name under cli/view/page/ */
    const char *content_type;
    const unsigned char *data;
    size_t size;
} view_asset;

extern const view_asset view_assets[];
extern const size_t view_asset_count;

#endif
