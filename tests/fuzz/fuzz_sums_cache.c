/* An entry of the products' cache_dir (lib/products/sums_cache.c), as
 * whatever bytes the folder holds: input starting "QEMIMG" stands for the
 * default detector's image entry, anything else for the pixel sums entry.
 * The mean and the default image of a fixed file read through them never
 * crash, and are the computed ones unless the entry passed every check. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "qem.h"

static qem_container *source;
static char sums_entry[1024], image_entry[1024];
static uint8_t *default_mask;

static void entry_named(const char *dir, const char *kind, char *path, size_t size)
{
    DIR *d = opendir(dir);
    struct dirent *x;
    while (d && (x = readdir(d)))
        if (!strncmp(x->d_name, kind, strlen(kind)))
            snprintf(path, size, "%s/%s", dir, x->d_name);
    if (d)
        closedir(d);
    if (!path[0])
        abort();
}

static void setup(void)
{
    const char *fixture = getenv("QEM_FUZZ_SUMS_FIXTURE");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", fuzz_path("cache"));
    if (!fixture || qem_container_open(fixture, NULL, &source, NULL) != QEM_OK)
        abort(); /* run.sh names the fixture */
    /* The entries' names: the first open keeps both; the fuzzer's bytes
     * replace one. */
    qem_products_options o;
    qem_products_options_init(&o);
    o.cache_dir = dir;
    qem_products *p = NULL;
    qem_image im = {0};
    qem_container_info info = {.struct_size = sizeof info};
    qem_detector_request rq;
    qem_detector_request_init(&rq);
    if (qem_products_open(source, &o, &p, NULL) != QEM_OK ||
        qem_container_get_info(source, &info, NULL) != QEM_OK ||
        !(default_mask = malloc((size_t)info.pixels)) ||
        qem_products_resolve_detector(p, &rq, default_mask, (size_t)info.pixels, NULL, NULL) !=
            QEM_OK ||
        qem_products_virtual(p, default_mask, &im, NULL) != QEM_OK)
        abort();
    qem_image_free(&im);
    qem_products_close(p);
    entry_named(dir, "pixel-sums-", sums_entry, sizeof sums_entry);
    entry_named(dir, "detector-image-", image_entry, sizeof image_entry);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!source)
        setup();
    const int image = size >= 6 && !memcmp(data, "QEMIMG", 6);
    if (!fuzz_write(image ? image_entry : sums_entry, data, size))
        return 0;
    qem_products_options o;
    qem_products_options_init(&o);
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", fuzz_path("cache"));
    o.cache_dir = dir;
    qem_products *p = NULL;
    qem_image im = {0};
    if (qem_products_open(source, &o, &p, NULL) == QEM_OK) {
        if (image)
            qem_products_virtual(p, default_mask, &im, NULL);
        else
            qem_products_mean(p, &im, NULL);
        qem_image_free(&im);
        qem_products_close(p);
    }
    return 0;
}
