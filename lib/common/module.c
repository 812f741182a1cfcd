/* Loading the plug-in modules (module.h). With QEM_MODULES_DIRECT (libqem.a)
 * each table comes from the module's code linked in; otherwise (libqem.so)
 * from dlopen, once per process. The only mutable state is the loaded
 * table (or why it failed) per module, written inside pthread_once and
 * read-only afterwards; a forked child inherits the mapping and the state. */
#include "common/module.h"

#include <stdio.h>
#include <string.h>

#include "common/error.h"

#ifdef QEM_MODULES_DIRECT

const void *qem_module_hdf5_v1(void);
const void *qem_module_images_v1(void);
#ifdef QEM_HAVE_CUDA
const void *qem_module_cuda_v1(void);
#endif

static const void *direct_table(qem_module_id id)
{
#ifdef QEM_HAVE_CUDA
    if (id == QEM_MODULE_CUDA)
        return qem_module_cuda_v1();
#else
    if (id == QEM_MODULE_CUDA)
        return NULL;
#endif
    return id == QEM_MODULE_HDF5 ? qem_module_hdf5_v1() : qem_module_images_v1();
}

#else

#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

typedef struct module_spec {
    const char *title;  /* for messages: "the HDF5 module" */
    const char *file;   /* in qem-modules/ */
    const char *symbol; /* its one export */
} module_spec;

static const module_spec specs[QEM_MODULE_COUNT] = {
    {"HDF5", "libqem-hdf5.so", "qem_module_hdf5_v1"},
    {"image", "libqem-images.so", "qem_module_images_v1"},
    {"CUDA", "libqem-cuda.so", "qem_module_cuda_v1"},
};

typedef struct module_state {
    const void *table;
    char message[1024]; /* why it is not loaded */
} module_state;

static module_state states[QEM_MODULE_COUNT];
static pthread_once_t onces[QEM_MODULE_COUNT] = {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT,
                                                  PTHREAD_ONCE_INIT};

/* Tries one path; 1 when the table is found and matches. */
static int try_load(qem_module_id id, const char *path)
{
    module_state *s = &states[id];
    const module_spec *m = &specs[id];
    /* RTLD_LOCAL: the module's names never satisfy anyone else's. */
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *why = dlerror();
        snprintf(s->message, sizeof s->message, "cannot load the %s module '%.600s': %.300s; reinstall qem",
                 m->title, path, why ? why : "unknown reason");
        return 0;
    }
    void *symbol = dlsym(handle, m->symbol);
    const void *(*entry)(void) = NULL;
    if (symbol)
        memcpy(&entry, &symbol, sizeof entry); /* object to function pointer, as POSIX allows */
    const qem_module_header *h = entry ? entry() : NULL;
    if (!h || h->abi != QEM_MODULE_ABI || !h->version || strcmp(h->version, QEM_VERSION_STRING)) {
        snprintf(s->message, sizeof s->message,
                 "cannot load the %s module '%.600s': it is not the module of libqem %s (a "
                 "different build); reinstall qem",
                 m->title, path, QEM_VERSION_STRING);
        dlclose(handle);
        return 0;
    }
    /* Never closed: its code stays in use until the process ends. */
    s->table = h;
    return 1;
}

static void load(qem_module_id id)
{
    char path[4096];
    Dl_info info;
    /* The folder of the library holding this function: libqem.so. */
    if (dladdr((const void *)&qem_module_get, &info) && info.dli_fname) {
        qem_module_path_beside(info.dli_fname, specs[id].file, path, sizeof path);
        if (path[0] && try_load(id, path))
            return;
    } else {
        path[0] = '\0';
    }
#ifdef QEM_MODULE_INSTALL_DIR
    char installed[4096];
    const int n = snprintf(installed, sizeof installed, "%s/%s", QEM_MODULE_INSTALL_DIR,
                           specs[id].file);
    /* The install-time folder, for a libqem.so copied elsewhere; the first
     * failure is the one reported when that has no module either. */
    if (n > 0 && (size_t)n < sizeof installed && strcmp(installed, path) &&
        access(installed, F_OK) == 0 && try_load(id, installed))
        return;
#endif
    if (!states[id].message[0])
        snprintf(states[id].message, sizeof states[id].message,
                 "cannot load the %s module: the folder of libqem is unknown; reinstall qem",
                 specs[id].title);
}

static void load_hdf5(void)
{
    load(QEM_MODULE_HDF5);
}

static void load_images(void)
{
    load(QEM_MODULE_IMAGES);
}

static void load_cuda(void)
{
    load(QEM_MODULE_CUDA);
}

#endif

void qem_module_path_beside(const char *library, const char *file, char *out, size_t size)
{
    out[0] = '\0';
    /* A relative name would resolve against the current directory. */
    const char *slash = library ? strrchr(library, '/') : NULL;
    if (!slash || library[0] != '/')
        return;
    const int n = snprintf(out, size, "%.*s/qem-modules/%s", (int)(slash - library), library, file);
    if (n < 0 || (size_t)n >= size)
        out[0] = '\0';
}

qem_status qem_module_get(qem_module_id id, size_t min_size, const void **table,
                          qem_error *error)
{
    *table = NULL;
    if ((unsigned)id >= QEM_MODULE_COUNT)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "unknown module %d", (int)id);
#ifndef QEM_HAVE_CUDA
    if (id == QEM_MODULE_CUDA)
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "cuda: this qem was built without CUDA (no nvcc when it was built, or "
                        "-DQEM_CUDA=OFF); the products run on the CPU");
#endif
#ifdef QEM_MODULES_DIRECT
    const qem_module_header *h = direct_table(id);
#else
    pthread_once(&onces[id], id == QEM_MODULE_HDF5     ? load_hdf5
                             : id == QEM_MODULE_IMAGES ? load_images
                                                       : load_cuda);
    const qem_module_header *h = states[id].table;
    if (!h)
        return qem_fail(error, id == QEM_MODULE_CUDA ? QEM_E_UNSUPPORTED : QEM_E_IO, "%s",
                        states[id].message);
#endif
    if (h->struct_size < min_size)
        return qem_fail(error, QEM_E_IO, "the qem module %d is older than this library (%u < %zu "
                        "bytes of table); reinstall qem", (int)id, (unsigned)h->struct_size,
                        min_size);
    *table = h;
    return QEM_OK;
}
