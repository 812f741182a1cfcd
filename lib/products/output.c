/* The public entry point that hands product images to files, by the
 * path's extension. (Calibrated copies of files are format work:
 * lib/container/dispatch.c.) */
#include "common/error.h"
#include "products/image_out.h"

static qem_status qem_image_write_body(const qem_image *image, const char *path, qem_error *error)
{
    qem_error_clear(error);
    if (!image || !path)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_image_write: NULL argument");
    const product_array a = {image->dtype, image->ndim,
                             {image->shape[0], image->shape[1], image->shape[2]}, image->data};
    return qem_product_write_image(path, &a, error);
}

qem_status qem_image_write(const qem_image *image, const char *path, qem_error *error)
{
    const qem_status st = qem_image_write_body(image, path, error);
    qem_error_name_destination(error, path);
    return st;
}

const char *qem_image_format(const char *path)
{
    return qem_product_image_format(path);
}
