/* qem_products_options.device: a device that cannot be used is refused
 * with the reason, never replaced by the CPU; the CPU is always there.
 * Runs everywhere: on a machine with a usable GPU the pack opens on it
 * (gpu_products checks its results), elsewhere it is refused. */
#include <string.h>

#include "pack_build.h"
#include "test_util.h"

static qem_status open_on(qem_container *c, qem_device device, qem_products_path path,
                          qem_error *e)
{
    qem_products_options o;
    qem_products_options_init(&o);
    o.device = device;
    qem_products *p = NULL;
    const qem_status st = qem_products_open_path(c, &o, path, &p, e);
    qem_products_close(p);
    return st;
}

int main(void)
{
    qem_error e = {0};
    char name[256];
    CHECK_OK(qem_device_probe(QEM_DEVICE_CPU, name, sizeof name, &e), &e);
    CHECK(!strcmp(qem_device_name(QEM_DEVICE_CPU), "cpu"));
    CHECK(!strcmp(qem_device_name(QEM_DEVICE_CUDA), "cuda"));
    CHECK_STATUS(qem_device_probe((qem_device)7, name, sizeof name, &e), QEM_E_INVALID_ARGUMENT,
                 &e);
    const qem_status cuda = qem_device_probe(QEM_DEVICE_CUDA, name, sizeof name, &e);
    CHECK(cuda == QEM_OK || cuda == QEM_E_UNSUPPORTED);
    const int have_gpu = cuda == QEM_OK;
    char why[sizeof e.message];
    snprintf(why, sizeof why, "%s", e.message);
    if (!have_gpu)
        CHECK(strstr(why, "cuda") != NULL);
    printf("device_choice: cuda %s: %s\n", have_gpu ? "usable" : "not usable",
           have_gpu ? name : why);

    const uint64_t shape[4] = {4, 8, 5, 6};
    CHECK(write_count_sources(shape, 3, 700, 0, test_path("d.npy"), test_path("d.qem"),
                              test_path("d.h5")));
    qem_container *pack = test_open_source(test_path("d.h5"), 0, 0);
    qem_container *file = test_open_source(test_path("d.qem"), 0, 0);
    CHECK(pack && file);
    if (pack && file) {
        CHECK_OK(open_on(pack, QEM_DEVICE_CPU, QEM_PATH_FAST, &e), &e);
        /* A pack: on the GPU where there is one, else refused with the
         * probe's own reason. */
        const qem_status st = open_on(pack, QEM_DEVICE_CUDA, QEM_PATH_FAST, &e);
        CHECK(st == (have_gpu ? QEM_OK : QEM_E_UNSUPPORTED));
        if (!have_gpu)
            CHECK(!strcmp(e.message, why));
        /* .qem files do not run on the GPU yet, whatever the machine. */
        CHECK_STATUS(open_on(file, QEM_DEVICE_CUDA, QEM_PATH_FAST, &e), QEM_E_UNSUPPORTED, &e);
        CHECK(strstr(e.message, ".qem") && strstr(e.message, "device cpu"));
        /* The dense reference path is the CPU's. */
        CHECK_STATUS(open_on(pack, QEM_DEVICE_CUDA, QEM_PATH_REFERENCE, &e),
                     QEM_E_INVALID_ARGUMENT, &e);
        CHECK_STATUS(open_on(pack, (qem_device)7, QEM_PATH_FAST, &e), QEM_E_INVALID_ARGUMENT,
                     &e);
    }
    qem_container_close(pack);
    qem_container_close(file);
    return test_finish("device_choice");
}
