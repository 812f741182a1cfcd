/* An entry of the products' cache_dir (lib/products/sums_cache.c), as
 * whatever bytes the folder holds: the mean of a fixed file read through
 * it never crashes, and is the computed mean unless the entry passed every
 * check. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "qem.h"

static qem_container *source;
static char entry[1024];

static void setup(void)
{
    const char *fixture = getenv("QEM_FUZZ_SUMS_FIXTURE");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", fuzz_path("cache"));
    if (!fixture || qem_container_open(fixture, NULL, &source, NULL) != QEM_OK)
        abort(); /* run.sh names the fixture */
    /* The entry's name: the first open keeps one; the fuzzer's bytes
     * replace it. */
    qem_products_options o;
    qem_products_options_init(&o);
    o.cache_dir = dir;
    qem_products *p = NULL;
    qem_image im = {0};
    if (qem_products_open(source, &o, &p, NULL) != QEM_OK || qem_products_mean(p, &im, NULL) != QEM_OK)
        abort();
    qem_image_free(&im);
    qem_products_close(p);
    DIR *d = opendir(dir);
    struct dirent *x;
    while (d && (x = readdir(d)))
        if (!strncmp(x->d_name, "pixel-sums-", 11))
            snprintf(entry, sizeof entry, "%s/%s", dir, x->d_name);
    if (d)
        closedir(d);
    if (!entry[0])
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!source)
        setup();
    if (!fuzz_write(entry, data, size))
        return 0;
    qem_products_options o;
    qem_products_options_init(&o);
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", fuzz_path("cache"));
    o.cache_dir = dir;
    qem_products *p = NULL;
    qem_image im = {0};
    if (qem_products_open(source, &o, &p, NULL) == QEM_OK) {
        qem_products_mean(p, &im, NULL);
        qem_image_free(&im);
        qem_products_close(p);
    }
    return 0;
}
