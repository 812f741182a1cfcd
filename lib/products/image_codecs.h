/* The image module (libqem-images.so; common/module.h): the TIFF and PNG
 * writers, the only users of libtiff and libpng. image_out.c reaches them
 * through this table, so writing .npy never maps either library. */
#ifndef QEM_PRODUCTS_IMAGE_CODECS_H
#define QEM_PRODUCTS_IMAGE_CODECS_H

#include "common/module.h"
#include "products/image_out.h"

/* `a` was checked by image_out.c (check_array); `n` is its element count. */
typedef qem_status (*qem_image_writer_fn)(const char *path, const product_array *a, uint64_t n,
                                          qem_error *error);

typedef struct qem_images_module {
    qem_module_header header;
    qem_image_writer_fn write_tiff; /* float32 pages */
    qem_image_writer_fn write_png;  /* 8-bit percentile-contrast view, 2-D only */
} qem_images_module;

qem_status qem_prod_write_tiff(const char *path, const product_array *a, uint64_t n,
                               qem_error *error);
qem_status qem_prod_write_png(const char *path, const product_array *a, uint64_t n,
                              qem_error *error);

/* The module's one export. */
__attribute__((visibility("default"))) const void *qem_module_images_v1(void);

#endif
