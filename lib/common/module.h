/* Plug-in modules: the parts of libqem that need a heavy library (libhdf5,
 * libtiff + libpng) are built as private shared objects that libqem.so
 * loads on first use, so a program that never touches an HDF5 file or
 * writes a TIFF/PNG never maps those libraries. libqem.a (built with
 * QEM_MODULES_DIRECT) links the same code directly and loads nothing.
 *
 * A module exports one symbol, qem_module_<name>_v1, a function returning
 * its const table; every table starts with a qem_module_header. Modules
 * lie in <folder of libqem.so>/qem-modules/ (the same relative layout in
 * the build and the install tree), else in the install-time
 * QEM_MODULE_INSTALL_DIR. */
#ifndef QEM_COMMON_MODULE_H
#define QEM_COMMON_MODULE_H

#include <stddef.h>
#include <stdint.h>

#include "qem.h"

/* Bumped whenever any module table changes shape or meaning. */
#define QEM_MODULE_ABI 2u

typedef struct qem_module_header {
    uint32_t struct_size; /* of the whole table */
    uint32_t abi;         /* QEM_MODULE_ABI */
    const char *version;  /* QEM_VERSION_STRING of the build */
} qem_module_header;

#define QEM_MODULE_HEADER(type) {(uint32_t)sizeof(type), QEM_MODULE_ABI, QEM_VERSION_STRING}

typedef enum qem_module_id {
    QEM_MODULE_HDF5 = 0, /* libqem-hdf5.so: lib/input/hdf5_module.h */
    QEM_MODULE_IMAGES,   /* libqem-images.so: lib/products/image_codecs.h */
    QEM_MODULE_CUDA,     /* libqem-cuda.so: lib/gpu/cuda_module.h (QEM_CUDA builds) */
    QEM_MODULE_COUNT
} qem_module_id;

/* The module's table, at least `min_size` bytes of it: loaded once per
 * process (thread-safe), then kept. QEM_E_IO naming the module's path and
 * the loader's reason when it is missing, fails to load or does not match
 * this library. */
qem_status qem_module_get(qem_module_id id, size_t min_size, const void **table,
                          qem_error *error);

/* Where a module lies: <folder of `library`>/qem-modules/<file> ("" when
 * `library` is not an absolute path, or the result does not fit). */
void qem_module_path_beside(const char *library, const char *file, char *out, size_t size);

#endif
