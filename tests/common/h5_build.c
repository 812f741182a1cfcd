#include "h5_build.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fail(const char *what, const char *file)
{
    fprintf(stderr, "h5_build: %s failed for '%s'\n", what, file);
    return -1;
}

int h5b_create(const char *file, uint64_t userblock)
{
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
    if (fcpl < 0 || (userblock && H5Pset_userblock(fcpl, userblock) < 0)) {
        if (fcpl >= 0)
            H5Pclose(fcpl);
        return fail("H5Pset_userblock", file);
    }
    hid_t f = H5Fcreate(file, H5F_ACC_EXCL, fcpl, H5P_DEFAULT);
    H5Pclose(fcpl);
    if (f < 0)
        return fail("H5Fcreate", file);
    return H5Fclose(f) < 0 ? fail("H5Fclose", file) : 0;
}

static hid_t open_rw(const char *file)
{
    if (access(file, F_OK) != 0 && h5b_create(file, 0) != 0)
        return -1;
    return H5Fopen(file, H5F_ACC_RDWR, H5P_DEFAULT);
}

static hid_t intermediate_lcpl(void)
{
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    if (lcpl >= 0 && H5Pset_create_intermediate_group(lcpl, 1) < 0) {
        H5Pclose(lcpl);
        return -1;
    }
    return lcpl;
}

int h5b_write_dataset(const char *file, const h5b_dataset *d)
{
    hid_t f = open_rw(file);
    if (f < 0)
        return fail("open", file);
    hsize_t dims[4], chunk[4];
    int chunked = 0;
    for (int i = 0; i < d->rank; i++) {
        dims[i] = d->dims[i];
        chunk[i] = d->chunk[i];
        chunked |= d->chunk[i] != 0;
    }
    int rc = 0;
    hid_t space = H5Screate_simple(d->rank, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hid_t lcpl = intermediate_lcpl();
    hid_t dset = -1;
    if (space < 0 || dcpl < 0 || lcpl < 0)
        rc = fail("property setup", file);
    if (rc == 0 && chunked && H5Pset_chunk(dcpl, d->rank, chunk) < 0)
        rc = fail("H5Pset_chunk", file);
    if (rc == 0 && chunked && d->bitshuffle_lz4 &&
        H5Pset_filter(dcpl, H5B_BITSHUFFLE, H5Z_FLAG_MANDATORY, 2, (const unsigned[]){0, 2}) < 0)
        rc = fail("H5Pset_filter(bitshuffle)", file);
    if (rc == 0 && chunked && d->deflate && H5Pset_deflate(dcpl, (unsigned)d->deflate) < 0)
        rc = fail("H5Pset_deflate", file);
    if (rc == 0 && chunked && d->optional_filter &&
        H5Pset_filter(dcpl, (H5Z_filter_t)d->optional_filter, H5Z_FLAG_OPTIONAL, 0, NULL) < 0)
        rc = fail("H5Pset_filter(optional)", file);
    if (rc == 0) {
        dset = H5Dcreate2(f, d->path, d->file_type, space, lcpl, dcpl, H5P_DEFAULT);
        if (dset < 0)
            rc = fail("H5Dcreate2", file);
    }
    if (rc == 0 && d->data &&
        H5Dwrite(dset, d->mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, d->data) < 0)
        rc = fail("H5Dwrite", file);
    if (dset >= 0)
        H5Dclose(dset);
    if (lcpl >= 0)
        H5Pclose(lcpl);
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (space >= 0)
        H5Sclose(space);
    if (H5Fclose(f) < 0)
        rc = fail("H5Fclose", file);
    return rc;
}

int h5b_set_scan_shape(const char *file, const char *object, uint64_t rows, uint64_t columns)
{
    hid_t f = H5Fopen(file, H5F_ACC_RDWR, H5P_DEFAULT);
    if (f < 0)
        return fail("H5Fopen", file);
    int rc = 0;
    hid_t obj = H5Oopen(f, object, H5P_DEFAULT);
    const hsize_t two = 2;
    hid_t space = H5Screate_simple(1, &two, NULL);
    hid_t attr = -1;
    const int64_t v[2] = {(int64_t)rows, (int64_t)columns};
    if (obj < 0 || space < 0)
        rc = fail("open object for scan_shape", file);
    if (rc == 0) {
        attr = H5Acreate2(obj, "scan_shape", H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
        if (attr < 0 || H5Awrite(attr, H5T_NATIVE_INT64, v) < 0)
            rc = fail("write scan_shape", file);
    }
    if (attr >= 0)
        H5Aclose(attr);
    if (space >= 0)
        H5Sclose(space);
    if (obj >= 0)
        H5Oclose(obj);
    H5Fclose(f);
    return rc;
}

int h5b_external_link(const char *file, const char *link, const char *target_file,
                      const char *target_object)
{
    hid_t f = open_rw(file);
    if (f < 0)
        return fail("open", file);
    hid_t lcpl = intermediate_lcpl();
    int rc = 0;
    if (lcpl < 0 || H5Lcreate_external(target_file, target_object, f, link, lcpl, H5P_DEFAULT) < 0)
        rc = fail("H5Lcreate_external", file);
    if (lcpl >= 0)
        H5Pclose(lcpl);
    H5Fclose(f);
    return rc;
}

int h5b_soft_link(const char *file, const char *link, const char *target)
{
    hid_t f = open_rw(file);
    if (f < 0)
        return fail("open", file);
    int rc = H5Lcreate_soft(target, f, link, H5P_DEFAULT, H5P_DEFAULT) < 0
                 ? fail("H5Lcreate_soft", file)
                 : 0;
    H5Fclose(f);
    return rc;
}

int h5b_virtual(const char *file, const char *path, const uint64_t dims[3],
                const char *source_file, const char *source_dataset)
{
    hid_t f = open_rw(file);
    if (f < 0)
        return fail("open", file);
    const hsize_t d[3] = {dims[0], dims[1], dims[2]};
    hid_t space = H5Screate_simple(3, d, NULL);
    hid_t src_space = H5Screate_simple(3, d, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    int rc = 0;
    if (space < 0 || src_space < 0 || dcpl < 0 ||
        H5Pset_virtual(dcpl, space, source_file, source_dataset, src_space) < 0)
        rc = fail("H5Pset_virtual", file);
    hid_t dset = rc == 0 ? H5Dcreate2(f, path, H5T_STD_U16LE, space, H5P_DEFAULT, dcpl,
                                      H5P_DEFAULT)
                         : -1;
    if (rc == 0 && dset < 0)
        rc = fail("H5Dcreate2(virtual)", file);
    if (dset >= 0)
        H5Dclose(dset);
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (src_space >= 0)
        H5Sclose(src_space);
    if (space >= 0)
        H5Sclose(space);
    H5Fclose(f);
    return rc;
}

int h5b_first_filter(const char *file, const char *dataset, unsigned *id, unsigned cd[8],
                     size_t *ncd)
{
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0)
        return fail("H5Fopen", file);
    int rc = 0;
    hid_t d = H5Dopen2(f, dataset, H5P_DEFAULT);
    hid_t dcpl = d >= 0 ? H5Dget_create_plist(d) : -1;
    if (dcpl < 0 || H5Pget_nfilters(dcpl) < 1) {
        rc = fail("H5Pget_nfilters", file);
    } else {
        unsigned flags = 0, config = 0;
        char name[128];
        *ncd = 8;
        memset(cd, 0, 8 * sizeof *cd);
        H5Z_filter_t f_id = H5Pget_filter2(dcpl, 0, &flags, ncd, cd, sizeof name, name, &config);
        if (f_id < 0)
            rc = fail("H5Pget_filter2", file);
        *id = (unsigned)f_id;
    }
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (d >= 0)
        H5Dclose(d);
    H5Fclose(f);
    return rc;
}

int h5b_chunk_sizes(const char *file, const char *dataset, uint64_t *count, uint64_t *largest)
{
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0)
        return fail("H5Fopen", file);
    int rc = 0;
    hid_t d = H5Dopen2(f, dataset, H5P_DEFAULT);
    hid_t space = d >= 0 ? H5Dget_space(d) : -1;
    hsize_t n = 0;
    *largest = 0;
    if (space < 0 || H5Dget_num_chunks(d, space, &n) < 0)
        rc = fail("H5Dget_num_chunks", file);
    for (hsize_t i = 0; rc == 0 && i < n; i++) {
        hsize_t offset[4];
        unsigned mask = 0;
        haddr_t addr = 0;
        hsize_t size = 0;
        if (H5Dget_chunk_info(d, space, i, offset, &mask, &addr, &size) < 0)
            rc = fail("H5Dget_chunk_info", file);
        else if (size > *largest)
            *largest = size;
    }
    *count = n;
    if (space >= 0)
        H5Sclose(space);
    if (d >= 0)
        H5Dclose(d);
    H5Fclose(f);
    return rc;
}

int h5b_write_arina(const h5b_arina *a, char *master, size_t size, char (*data_paths)[512])
{
    snprintf(master, size, "%s/%s_master.h5", a->dir, a->stem);
    if (h5b_create(master, 0) != 0)
        return -1;
    const uint64_t pixels = a->rows * a->columns;
    uint64_t first = 0;
    for (size_t k = 0; k < a->files; k++) {
        char name[256], path[512];
        snprintf(name, sizeof name, "%s_data_%06zu.h5", a->stem, k + 1);
        snprintf(path, sizeof path, "%s/%s", a->dir, name);
        if (data_paths)
            snprintf(data_paths[k], sizeof data_paths[k], "%s", path);
        const h5b_dataset d = {.path = "/entry/data/data",
                               .file_type = a->data32 ? H5T_STD_U32LE : H5T_STD_U16LE,
                               .mem_type = a->data32 ? H5T_NATIVE_UINT32 : H5T_NATIVE_UINT16,
                               .rank = 3,
                               .dims = {a->frames[k], a->rows, a->columns},
                               .chunk = {1, a->rows, a->columns},
                               .bitshuffle_lz4 = 1,
                               .data = a->data32 ? (const void *)(a->data32 + first * pixels)
                                                 : (const void *)(a->data + first * pixels)};
        if (h5b_create(path, 0) != 0 || h5b_write_dataset(path, &d) != 0)
            return -1;
        char link[64];
        snprintf(link, sizeof link, "/entry/data/data_%06zu", k + 1);
        if (h5b_external_link(master, link, name, "/entry/data/data") != 0)
            return -1;
        first += a->frames[k];
    }
    /* Metadata a real master carries besides the links: scalars and a 2D
     * float plane, neither of which may be mistaken for frames. */
    const uint64_t triggers = first;
    const h5b_dataset ntrigger = {.path = "/entry/instrument/detector/detectorSpecific/ntrigger",
                                  .file_type = H5T_STD_U64LE,
                                  .mem_type = H5T_NATIVE_UINT64,
                                  .rank = 1,
                                  .dims = {1},
                                  .data = &triggers};
    if (h5b_write_dataset(master, &ntrigger) != 0)
        return -1;
    float *flat = malloc((size_t)pixels * sizeof *flat);
    if (!flat)
        return -1;
    for (uint64_t p = 0; p < pixels; p++)
        flat[p] = 1.0f;
    const h5b_dataset flatfield = {.path = "/entry/instrument/detector/detectorSpecific/flatfield",
                                   .file_type = H5T_IEEE_F32LE,
                                   .mem_type = H5T_NATIVE_FLOAT,
                                   .rank = 2,
                                   .dims = {a->rows, a->columns},
                                   .data = flat};
    int rc = h5b_write_dataset(master, &flatfield);
    free(flat);
    if (rc != 0)
        return -1;
    if (a->scan_rows && h5b_set_scan_shape(master, "/entry/data", a->scan_rows,
                                           a->scan_columns) != 0)
        return -1;
    if (a->pixel_mask) {
        const h5b_dataset mask = {
            .path = "/entry/instrument/detector/detectorSpecific/pixel_mask",
            .file_type = H5T_STD_U32LE,
            .mem_type = H5T_NATIVE_UINT32,
            .rank = 2,
            .dims = {a->rows, a->columns},
            .chunk = {a->rows, a->columns},
            .deflate = 4,
            .data = a->pixel_mask};
        if (h5b_write_dataset(master, &mask) != 0)
            return -1;
    }
    return 0;
}

int h5b_group(const char *file, const char *group)
{
    hid_t f = open_rw(file);
    if (f < 0)
        return fail("open", file);
    hid_t lcpl = intermediate_lcpl();
    hid_t g = lcpl >= 0 ? H5Gcreate2(f, group, lcpl, H5P_DEFAULT, H5P_DEFAULT) : -1;
    const int rc = g < 0 ? fail("H5Gcreate2", file) : 0;
    if (g >= 0)
        H5Gclose(g);
    if (lcpl >= 0)
        H5Pclose(lcpl);
    H5Fclose(f);
    return rc;
}

/* Writes one attribute of `type` (its space: scalar) from `value`. */
static int set_attr(const char *file, const char *object, const char *name, hid_t file_type,
                    hid_t mem_type, const void *value)
{
    hid_t f = open_rw(file);
    if (f < 0)
        return fail("open", file);
    int rc = 0;
    hid_t obj = H5Oopen(f, object, H5P_DEFAULT);
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t attr = -1;
    if (obj < 0 || space < 0)
        rc = fail("open object for an attribute", file);
    if (rc == 0) {
        if (H5Aexists(obj, name) > 0)
            H5Adelete(obj, name);
        attr = H5Acreate2(obj, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT);
        if (attr < 0 || H5Awrite(attr, mem_type, value) < 0)
            rc = fail("write an attribute", file);
    }
    if (attr >= 0)
        H5Aclose(attr);
    if (space >= 0)
        H5Sclose(space);
    if (obj >= 0)
        H5Oclose(obj);
    H5Fclose(f);
    return rc;
}

int h5b_attr_int(const char *file, const char *object, const char *name, int64_t value)
{
    return set_attr(file, object, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

int h5b_attr_string(const char *file, const char *object, const char *name, const char *value,
                    int variable)
{
    hid_t type = H5Tcopy(H5T_C_S1);
    if (type < 0 || H5Tset_size(type, variable ? H5T_VARIABLE : strlen(value) + 1) < 0)
        return fail("string type", file);
    const int rc =
        set_attr(file, object, name, type, type, variable ? (const void *)&value : value);
    H5Tclose(type);
    return rc;
}

int h5b_string_dataset(const char *file, const char *path, const char *value)
{
    hid_t f = open_rw(file);
    if (f < 0)
        return fail("open", file);
    hid_t lcpl = intermediate_lcpl();
    hid_t type = H5Tcopy(H5T_C_S1);
    const hsize_t one = 1;
    hid_t space = H5Screate_simple(1, &one, NULL);
    int rc = 0;
    if (lcpl < 0 || type < 0 || space < 0 || H5Tset_size(type, H5T_VARIABLE) < 0)
        rc = fail("string dataset", file);
    hid_t d = rc == 0 ? H5Dcreate2(f, path, type, space, lcpl, H5P_DEFAULT, H5P_DEFAULT) : -1;
    if (rc == 0 && (d < 0 || H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, &value) < 0))
        rc = fail("write a string dataset", file);
    if (d >= 0)
        H5Dclose(d);
    if (space >= 0)
        H5Sclose(space);
    if (type >= 0)
        H5Tclose(type);
    if (lcpl >= 0)
        H5Pclose(lcpl);
    H5Fclose(f);
    return rc;
}
