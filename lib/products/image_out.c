/* Product image writers: .npy (exact) here; .tif/.tiff (float32 pages) and
 * .png (8-bit view) in the image module (image_codecs.c), loaded only when
 * one is written. Each is published atomically through qem_publish so that
 * a failure leaves nothing behind. */
#include "products/image_out.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
#include "products/image_codecs.h"

#define ACCEPTED_EXTENSIONS                                                                        \
    ".npy (exact values), .tif or .tiff (32-bit float) or .png (8-bit view)"

const char *qem_product_image_format(const char *path)
{
    if (!path)
        return NULL;
    /* Only the last path component can carry the extension. */
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    const char *dot = strrchr(base, '.');
    if (!dot)
        return NULL;
    const char *ext = dot + 1;
    if (strcasecmp(ext, "npy") == 0)
        return "npy";
    if (strcasecmp(ext, "tif") == 0 || strcasecmp(ext, "tiff") == 0)
        return "tiff";
    if (strcasecmp(ext, "png") == 0)
        return "png";
    return NULL;
}

/* Checks the array's shape and dtype; `elements` receives rows*cols*K. */
static qem_status check_array(const char *path, const product_array *a, uint64_t *elements,
                              qem_error *error)
{
    if (a->ndim != 2 && a->ndim != 3)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "'%s': a product image has 2 dimensions (rows, columns) or 3 (rows, "
                        "columns, components), not %u",
                        path, a->ndim);
    size_t item = qem_dtype_size(a->dtype);
    if (item == 0)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "'%s': unsupported product dtype %d; use uint8, uint16, uint32, uint64, "
                        "float32 or float64",
                        path, (int)a->dtype);
    uint64_t n = 1;
    for (unsigned i = 0; i < a->ndim; i++) {
        if (a->shape[i] == 0)
            return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                            "'%s': dimension %u of the product image is empty", path, i);
        if (qem_mul_overflow_u64(n, a->shape[i], &n))
            return qem_fail(error, QEM_E_LIMIT, "'%s': the product image shape is too large",
                            path);
    }
    uint64_t bytes;
    if (qem_mul_overflow_u64(n, item, &bytes) || bytes > SIZE_MAX)
        return qem_fail(error, QEM_E_LIMIT, "'%s': the product image is too large for memory",
                        path);
    *elements = n;
    return QEM_OK;
}

/* --- .npy ---------------------------------------------------------------- */

static qem_status write_npy(const char *path, const product_array *a, uint64_t n,
                            qem_error *error)
{
    qem_npy_writer *w = NULL;
    qem_status st = qem_npy_writer_create(path, a->dtype, a->ndim, a->shape, &w, error);
    if (st == QEM_OK)
        st = qem_npy_writer_append(w, a->data, n, error);
    if (st == QEM_OK)
        st = qem_npy_writer_finish(w, error);
    qem_npy_writer_free(w); /* discards the unpublished file after any failure */
    return st;
}

/* --- dispatch -------------------------------------------------------------- */

qem_status qem_product_write_image(const char *path, const product_array *a, qem_error *error)
{
    qem_error_clear(error);
    if (!path || !a || !a->data)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_product_write_image: NULL argument");
    const char *format = qem_product_image_format(path);
    if (!format)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "'%s': unknown image extension; use " ACCEPTED_EXTENSIONS, path);
    uint64_t n = 0;
    QEM_TRY(check_array(path, a, &n, error));
    if (strcmp(format, "npy") == 0)
        return write_npy(path, a, n, error);
    /* libtiff and libpng load with the module, for these formats only. */
    const void *table = NULL;
    QEM_TRY(qem_module_get(QEM_MODULE_IMAGES, sizeof(qem_images_module), &table, error));
    const qem_images_module *m = table;
    if (strcmp(format, "tiff") == 0)
        return m->write_tiff(path, a, n, error);
    return m->write_png(path, a, n, error);
}
