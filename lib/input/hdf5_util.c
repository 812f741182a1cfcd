/* What both HDF5 families (hdf5.c, a dense dataset; arina.c, a
 * Dectris/Arina master with its data files) share: libhdf5 error
 * reporting, object lookups that never leave the file, the checks of a
 * frame dataset, the Dectris pixel mask, and the family state: frames read
 * from ordered parts, one hyperslab request at a time, through libhdf5 (so
 * its filters, bitshuffle/LZ4 included, and byte-order conversion apply).
 * See doc/inputs.md for the rules.
 *
 * libhdf5 is not thread-safe in Debian's serial build: use one
 * acquisition from one thread at a time. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "input/hdf5_util.h"

void qem_h5_close_id(hid_t id)
{
    if (id < 0)
        return;
    switch (H5Iget_type(id)) {
    case H5I_FILE: H5Fclose(id); break;
    case H5I_GROUP: H5Gclose(id); break;
    case H5I_DATASET: H5Dclose(id); break;
    case H5I_DATASPACE: H5Sclose(id); break;
    case H5I_DATATYPE: H5Tclose(id); break;
    case H5I_ATTR: H5Aclose(id); break;
    case H5I_GENPROP_LST: H5Pclose(id); break;
    default: H5Oclose(id); break;
    }
}

static herr_t innermost_error(unsigned n, const H5E_error2_t *e, void *data)
{
    char *reason = data;
    if (n == 0 && e && e->desc)
        snprintf(reason, 200, "%s", e->desc);
    return 0;
}

/* Records a failure of a libhdf5 call, adding libhdf5's innermost reason. */
qem_status qem_h5_fail(qem_error *error, qem_status status, const char *format, ...)
    __attribute__((format(printf, 3, 4)));
qem_status qem_h5_fail(qem_error *error, qem_status status, const char *format, ...)
{
    char reason[200] = "";
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost_error, reason);
    char what[sizeof error->message];
    va_list args;
    va_start(args, format);
    vsnprintf(what, sizeof what, format, args);
    va_end(args);
    if (reason[0])
        return qem_fail(error, status, "%s (libhdf5: %s)", what, reason);
    return qem_fail(error, status, "%s", what);
}

/* --- the source's private state ----------------------------------------- */

static void impl_close_handles(h5_state *im)
{
    if (im->dset >= 0)
        H5Dclose(im->dset);
    if (im->file >= 0)
        H5Fclose(im->file);
    im->dset = im->file = -1;
}

static void impl_free(h5_state *im)
{
    if (!im)
        return;
    if (im->file >= 0 || im->dset >= 0) {
        H5E_BEGIN_TRY
        {
            impl_close_handles(im);
        }
        H5E_END_TRY;
    }
    for (size_t i = 0; i < im->part_count; i++) {
        free(im->parts[i].file);
        free(im->parts[i].dataset);
    }
    free(im->parts);
    free(im);
}

qem_status qem_h5_add_part(h5_state *im, const char *file, const char *dataset, uint64_t first,
                           uint64_t frames, qem_error *error)
{
    h5_part *grown = realloc(im->parts, (im->part_count + 1) * sizeof *grown);
    if (!grown)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    im->parts = grown;
    h5_part *p = &im->parts[im->part_count];
    p->file = strdup(file);
    p->dataset = strdup(dataset);
    p->first = first;
    p->frames = frames;
    im->part_count++;
    if (!p->file || !p->dataset)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    return QEM_OK;
}

/* --- small HDF5 helpers -------------------------------------------------- */

/* Whether `path` names an object reachable without leaving `file` through
 * an external link: OBJ_ABSENT, OBJ_HERE or OBJ_ELSEWHERE. */
qem_status qem_h5_locate(hid_t file, const char *file_path, const char *path, int *where,
                         qem_error *error)
{
    *where = OBJ_ABSENT;
    size_t len = strlen(path);
    char *prefix = malloc(len + 2);
    if (!prefix)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    /* Always absolute, without a trailing slash. */
    size_t n = 0;
    if (path[0] != '/')
        prefix[n++] = '/';
    memcpy(prefix + n, path, len + 1);
    n += len;
    while (n > 1 && prefix[n - 1] == '/')
        prefix[--n] = '\0';
    qem_status st = QEM_OK;
    if (n <= 1) {
        *where = OBJ_HERE; /* the root group */
        free(prefix);
        return st;
    }
    for (size_t i = 1; i <= n && st == QEM_OK; i++) {
        if (i < n && prefix[i] != '/')
            continue;
        char saved = prefix[i];
        prefix[i] = '\0';
        htri_t exists = H5Lexists(file, prefix, H5P_DEFAULT);
        if (exists < 0) {
            st = qem_h5_fail(error, QEM_E_IO, "cannot look up '%s' in '%s'", prefix, file_path);
        } else if (exists == 0) {
            prefix[i] = saved;
            free(prefix);
            return QEM_OK; /* absent */
        } else {
            src_linfo info;
            if (src_lget_info(file, prefix, &info) < 0)
                st = qem_h5_fail(error, QEM_E_IO, "cannot inspect link '%s' in '%s'", prefix,
                                 file_path);
            else if (info.type == H5L_TYPE_EXTERNAL || info.type >= H5L_TYPE_UD_MIN) {
                *where = OBJ_ELSEWHERE;
                free(prefix);
                return QEM_OK;
            }
        }
        prefix[i] = saved;
    }
    if (st == QEM_OK)
        *where = OBJ_HERE;
    free(prefix);
    return st;
}

/* Opens `path` (already located OBJ_HERE) and checks that it lives in
 * `file` itself and is of `type`. */
qem_status qem_h5_open_here(hid_t file, const char *file_path, const char *path, H5O_type_t type,
                            hid_t *out, qem_error *error)
{
    *out = -1;
    hid_t obj = H5Oopen(file, path, H5P_DEFAULT);
    if (obj < 0)
        return qem_h5_fail(error, QEM_E_IO, "cannot open '%s' in '%s'", path, file_path);
    src_oinfo fi, oi;
    if (src_oget_info(file, &fi) < 0 || src_oget_info(obj, &oi) < 0) {
        qem_status st =
            qem_h5_fail(error, QEM_E_IO, "cannot inspect '%s' in '%s'", path, file_path);
        H5Oclose(obj);
        return st;
    }
    if (oi.fileno != fi.fileno) {
        H5Oclose(obj);
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "'%s' in '%s' lives in another file (reached through a link); qem "
                        "authenticates only the files it reads, so give that file itself",
                        path, file_path);
    }
    if (oi.type != type) {
        H5Oclose(obj);
        return qem_fail(error, QEM_E_LAYOUT, "'%s' in '%s' is not a %s", path, file_path,
                        type == H5O_TYPE_DATASET ? "dataset" : "group");
    }
    *out = obj;
    return QEM_OK;
}

/* What an HDF5 type holds, in words, for a refusal. */
static const char *type_words(H5T_class_t cls)
{
    switch (cls) {
    case H5T_COMPOUND: return "compound records (complex numbers or fields)";
    case H5T_STRING: return "strings";
    case H5T_ENUM: return "enumerated (boolean) values";
    case H5T_ARRAY: return "arrays per element";
    case H5T_VLEN: return "variable-length sequences";
    case H5T_OPAQUE: return "opaque bytes";
    case H5T_BITFIELD: return "bit fields";
    case H5T_REFERENCE: return "object references";
    default: return "values of an unknown kind";
    }
}

/* The stored sample type: unsigned 8, 16 or 32-bit integers or 32-bit
 * IEEE floats, either byte order (libhdf5 converts). With `values` (not
 * NULL), signed and 64-bit integers and float64 too, as *values (the
 * open settles them; sample_type stays NONE); else they are refused. */
static qem_status classify_type(hid_t dset, const char *where, qem_dtype *dtype,
                                input_values *values, qem_error *error)
{
    hid_t type = H5Dget_type(dset);
    if (type < 0)
        return qem_h5_fail(error, QEM_E_IO, "cannot read the type of %s", where);
    H5T_class_t cls = H5Tget_class(type);
    size_t size = H5Tget_size(type);
    H5T_sign_t sign = H5Tget_sign(type);
    H5Tclose(type);
    *dtype = QEM_DTYPE_NONE;
    if (values)
        *values = INPUT_VALUES_AS_STORED;
    if (cls == H5T_INTEGER && sign == H5T_SGN_NONE && (size == 1 || size == 2 || size == 4)) {
        *dtype = size == 1 ? QEM_DTYPE_UINT8 : size == 2 ? QEM_DTYPE_UINT16 : QEM_DTYPE_UINT32;
        return QEM_OK;
    }
    if (cls == H5T_FLOAT && size == 4) {
        *dtype = QEM_DTYPE_FLOAT32;
        return QEM_OK;
    }
    if (values && cls == H5T_INTEGER && sign == H5T_SGN_NONE && size == 8) {
        *values = INPUT_VALUES_UINT64;
        return QEM_OK;
    }
    if (values && cls == H5T_INTEGER && sign != H5T_SGN_NONE &&
        (size == 1 || size == 2 || size == 4 || size == 8)) {
        *values = size == 1   ? INPUT_VALUES_INT8
                  : size == 2 ? INPUT_VALUES_INT16
                  : size == 4 ? INPUT_VALUES_INT32
                              : INPUT_VALUES_INT64;
        return QEM_OK;
    }
    if (values && cls == H5T_FLOAT && size == 8) {
        *values = INPUT_VALUES_FLOAT64;
        return QEM_OK;
    }
    if (cls == H5T_INTEGER)
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "%s holds %s %zu-bit integers; qem reads unsigned 8, 16 or 32-bit "
                        "counts (convert with array.astype('<u2') after checking every value "
                        "is 0..65535)",
                        where, sign == H5T_SGN_NONE ? "unsigned" : "signed", 8 * size);
    if (cls == H5T_FLOAT)
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "%s holds %zu-bit floating-point values; qem stores float32 exactly "
                        "(convert to float32 if no bit is lost) or integer counts",
                        where, 8 * size);
    if (values)
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "%s holds %s, not real numbers; qem reads integer counts or float "
                        "values",
                        where, type_words(cls));
    return qem_fail(error, QEM_E_UNSUPPORTED,
                    "%s does not hold numbers; an acquisition holds detector counts or float32 "
                    "values",
                    where);
}

static qem_status read_scan_shape_attr(hid_t obj, const char *where, int *found,
                                       uint64_t shape[2], qem_error *error)
{
    *found = 0;
    htri_t exists = H5Aexists(obj, "scan_shape");
    if (exists < 0)
        return qem_h5_fail(error, QEM_E_IO, "cannot look for a scan_shape attribute on %s", where);
    if (exists == 0)
        return QEM_OK;
    hid_t attr = H5Aopen(obj, "scan_shape", H5P_DEFAULT);
    if (attr < 0)
        return qem_h5_fail(error, QEM_E_IO, "cannot open the scan_shape attribute of %s", where);
    hid_t space = H5Aget_space(attr), type = H5Aget_type(attr);
    qem_status st = QEM_OK;
    hssize_t points = space >= 0 ? H5Sget_simple_extent_npoints(space) : -1;
    if (space < 0 || type < 0) {
        st = qem_h5_fail(error, QEM_E_IO, "cannot inspect the scan_shape attribute of %s", where);
    } else if (H5Tget_class(type) != H5T_INTEGER || points != 2) {
        st = qem_fail(error, QEM_E_METADATA,
                      "the scan_shape attribute of %s must hold two integers (rows, columns)",
                      where);
    } else if (H5Tget_sign(type) == H5T_SGN_NONE) {
        unsigned long long v[2] = {0, 0};
        if (H5Aread(attr, H5T_NATIVE_ULLONG, v) < 0)
            st = qem_h5_fail(error, QEM_E_IO, "cannot read the scan_shape attribute of %s", where);
        shape[0] = v[0];
        shape[1] = v[1];
    } else {
        long long v[2] = {0, 0};
        if (H5Aread(attr, H5T_NATIVE_LLONG, v) < 0)
            st = qem_h5_fail(error, QEM_E_IO, "cannot read the scan_shape attribute of %s", where);
        shape[0] = v[0] > 0 ? (uint64_t)v[0] : 0;
        shape[1] = v[1] > 0 ? (uint64_t)v[1] : 0;
    }
    if (st == QEM_OK && (shape[0] == 0 || shape[1] == 0))
        st = qem_fail(error, QEM_E_METADATA,
                      "the scan_shape attribute of %s must hold two positive integers", where);
    if (st == QEM_OK)
        *found = 1;
    qem_h5_close_id(type);
    qem_h5_close_id(space);
    H5Aclose(attr);
    return st;
}

/* The scan_shape attribute of the first of `paths` (inside `file`) that
 * carries one; two that disagree are refused. */
qem_status qem_h5_scan_shape_from_file(hid_t file, const char *file_path, const char *const *paths,
                                       size_t path_count, int *found, uint64_t shape[2],
                                       char *found_on, size_t found_on_size, qem_error *error)
{
    *found = 0;
    for (size_t i = 0; i < path_count; i++) {
        int where;
        QEM_TRY(qem_h5_locate(file, file_path, paths[i], &where, error));
        if (where != OBJ_HERE)
            continue;
        hid_t obj = H5Oopen(file, paths[i], H5P_DEFAULT);
        if (obj < 0)
            return qem_h5_fail(error, QEM_E_IO, "cannot open '%s' in '%s'", paths[i], file_path);
        char where_text[512];
        snprintf(where_text, sizeof where_text, "'%s' in '%s'", paths[i], file_path);
        int here = 0;
        uint64_t v[2] = {0, 0};
        qem_status st = read_scan_shape_attr(obj, where_text, &here, v, error);
        H5Oclose(obj);
        QEM_TRY(st);
        if (!here)
            continue;
        if (*found && (v[0] != shape[0] || v[1] != shape[1]))
            return qem_fail(error, QEM_E_METADATA,
                            "'%s' carries two scan_shape attributes that disagree (%llux%llu on "
                            "%s, %llux%llu on %s); fix the file or give the scan shape "
                            "(--scan-shape ROWS,COLUMNS)",
                            file_path, (unsigned long long)shape[0],
                            (unsigned long long)shape[1], found_on, (unsigned long long)v[0],
                            (unsigned long long)v[1], paths[i]);
        if (!*found)
            snprintf(found_on, found_on_size, "%s", paths[i]);
        shape[0] = v[0];
        shape[1] = v[1];
        *found = 1;
    }
    return QEM_OK;
}

/* --- one dataset of frames ------------------------------------------------ */

static qem_status check_filters(hid_t dcpl, const char *where, qem_error *error)
{
    int nfilters = H5Pget_nfilters(dcpl);
    if (nfilters < 0)
        return qem_h5_fail(error, QEM_E_IO, "cannot list the filters of %s", where);
    for (int i = 0; i < nfilters; i++) {
        unsigned flags = 0, config = 0, cd[16];
        size_t ncd = 16;
        char name[128] = "";
        H5Z_filter_t id = H5Pget_filter2(dcpl, (unsigned)i, &flags, &ncd, cd, sizeof name, name,
                                         &config);
        if (id < 0)
            return qem_h5_fail(error, QEM_E_IO, "cannot read filter %d of %s", i, where);
        htri_t avail = H5Zfilter_avail(id);
        unsigned info = 0;
        if (avail > 0 && H5Zget_filter_info(id, &info) < 0)
            info = 0;
        if (avail <= 0 || !(info & H5Z_FILTER_CONFIG_DECODE_ENABLED)) {
            if (id == BITSHUFFLE_FILTER)
                return qem_fail(error, QEM_E_UNSUPPORTED,
                                "%s is compressed with the bitshuffle/LZ4 HDF5 filter (id 32008), "
                                "which libhdf5 cannot load here; install the bitshuffle HDF5 "
                                "plugin (Debian package 'bitshuffle') or point HDF5_PLUGIN_PATH "
                                "at it",
                                where);
            return qem_fail(error, QEM_E_UNSUPPORTED,
                            "%s needs HDF5 filter %d (%s), which libhdf5 cannot decode here; "
                            "install its plugin (HDF5_PLUGIN_PATH) or repack the file without it "
                            "(h5repack)",
                            where, (int)id, name[0] ? name : "unnamed");
        }
    }
    return QEM_OK;
}

/* Refuses chunked datasets with unstored chunks and finds the largest
 * stored chunk. */
static qem_status chunk_stats(hid_t dset, hid_t dcpl, const ds_info *d, const char *where,
                              uint64_t *largest, qem_error *error)
{
    *largest = 0;
    hsize_t cdims[4] = {0, 0, 0, 0}, grid[4] = {1, 1, 1, 1};
    if (H5Pget_chunk(dcpl, d->rank, cdims) != d->rank)
        return qem_h5_fail(error, QEM_E_IO, "cannot read the chunk shape of %s", where);
    uint64_t cells = 1;
    for (int i = 0; i < d->rank; i++) {
        if (cdims[i] == 0)
            return qem_fail(error, QEM_E_LAYOUT, "%s declares an empty chunk shape", where);
        grid[i] = (d->dims[i] + cdims[i] - 1) / cdims[i];
        if (qem_mul_overflow_u64(cells, grid[i], &cells))
            cells = UINT64_MAX;
    }
    if (cells > MAX_CHUNK_CELLS)
        return QEM_OK; /* too many to walk: the largest stays unknown */
    hid_t space = H5Dget_space(dset);
    hsize_t stored = 0;
    herr_t r = space >= 0 ? H5Dget_num_chunks(dset, space, &stored) : -1;
    qem_h5_close_id(space);
    if (r < 0)
        return qem_h5_fail(error, QEM_E_IO, "cannot count the stored chunks of %s", where);
    if (stored < cells)
        return qem_fail(error, QEM_E_LAYOUT,
                        "%s stores only %llu of its %llu chunks; the others would read as fill "
                        "values, which means the acquisition was not written completely; "
                        "recopy the complete file",
                        where, (unsigned long long)stored, (unsigned long long)cells);
    hsize_t index[4] = {0, 0, 0, 0}, offset[4];
    for (uint64_t c = 0; c < cells; c++) {
        for (int i = 0; i < d->rank; i++)
            offset[i] = index[i] * cdims[i];
        hsize_t bytes = 0;
        if (H5Dget_chunk_storage_size(dset, offset, &bytes) < 0)
            return qem_h5_fail(error, QEM_E_IO, "cannot read the stored size of a chunk of %s",
                               where);
        if (bytes > *largest)
            *largest = bytes;
        for (int i = d->rank - 1; i >= 0; i--) {
            if (++index[i] < grid[i])
                break;
            index[i] = 0;
        }
    }
    return QEM_OK;
}

/* Refuses contiguous storage that does not hold every sample: a dataset
 * declared but never written (or cut short) reads as fill values, so a
 * small file could declare any shape and a save would read it all. */
static qem_status check_contiguous(hid_t dset, const ds_info *d, const char *where,
                                   qem_error *error)
{
    uint64_t expected = d->values != INPUT_VALUES_AS_STORED ? qem_input_values_size(d->values)
                                                            : qem_dtype_size(d->dtype);
    for (int i = 0; i < d->rank; i++)
        if (qem_mul_overflow_u64(expected, d->dims[i], &expected))
            return qem_fail(error, QEM_E_LIMIT, "%s is too large: its size overflows 64 bits",
                            where);
    const uint64_t stored = (uint64_t)H5Dget_storage_size(dset);
    if (stored < expected)
        return qem_fail(error, QEM_E_LAYOUT,
                        "%s stores only %llu of its %llu bytes; the rest would read as fill "
                        "values, which means the acquisition was not written completely; "
                        "recopy the complete file",
                        where, (unsigned long long)stored, (unsigned long long)expected);
    return QEM_OK;
}

/* Shape, type and storage of a frame dataset; refuses what cannot be read
 * faithfully. `want_rank` 0 accepts 3 or 4. */
static qem_status inspect_dataset(hid_t dset, const char *where, int want_rank, int any_values,
                                  ds_info *d, qem_error *error)
{
    memset(d, 0, sizeof *d);
    hid_t space = H5Dget_space(dset);
    if (space < 0)
        return qem_h5_fail(error, QEM_E_IO, "cannot read the shape of %s", where);
    int simple = H5Sget_simple_extent_type(space) == H5S_SIMPLE;
    int rank = simple ? H5Sget_simple_extent_ndims(space) : -1;
    if (rank >= 3 && rank <= 4)
        H5Sget_simple_extent_dims(space, d->dims, NULL);
    H5Sclose(space);
    if (rank < 3 || rank > 4 || (want_rank && rank != want_rank))
        return qem_fail(error, QEM_E_LAYOUT,
                        "%s has %d dimensions; a source must be a 3D stack (frames, rows, "
                        "columns)%s",
                        where, rank, want_rank == 3 ? "" : " or a 4D array (scan rows, scan "
                                                            "columns, rows, columns)");
    d->rank = rank;
    for (int i = 0; i < rank; i++)
        if (d->dims[i] == 0)
            return qem_fail(error, QEM_E_LAYOUT, "%s has an empty dimension", where);
    QEM_TRY(classify_type(dset, where, &d->dtype, any_values ? &d->values : NULL, error));
    hid_t dcpl = H5Dget_create_plist(dset);
    if (dcpl < 0)
        return qem_h5_fail(error, QEM_E_IO, "cannot read the storage properties of %s", where);
    qem_status st = QEM_OK;
    H5D_layout_t layout = H5Pget_layout(dcpl);
    int externals = H5Pget_external_count(dcpl);
    if (layout == H5D_VIRTUAL || externals > 0)
        st = qem_fail(error, QEM_E_UNSUPPORTED,
                      "%s keeps its samples in other files (%s); qem authenticates only the "
                      "files it reads, so materialize it first (h5repack)",
                      where, layout == H5D_VIRTUAL ? "a virtual dataset" : "external storage");
    else if (layout < 0 || externals < 0)
        st = qem_h5_fail(error, QEM_E_IO, "cannot read the storage layout of %s", where);
    if (st == QEM_OK)
        st = check_filters(dcpl, where, error);
    if (st == QEM_OK && layout == H5D_CHUNKED)
        st = chunk_stats(dset, dcpl, d, where, &d->largest_chunk, error);
    if (st == QEM_OK && layout == H5D_CONTIGUOUS)
        st = check_contiguous(dset, d, where, error);
    H5Pclose(dcpl);
    return st;
}

qem_status qem_h5_inspect_dataset(hid_t dset, const char *where, int want_rank, ds_info *d,
                                  qem_error *error)
{
    return inspect_dataset(dset, where, want_rank, 0, d, error);
}

qem_status qem_h5_inspect_values_dataset(hid_t dset, const char *where, int want_rank, ds_info *d,
                                         qem_error *error)
{
    return inspect_dataset(dset, where, want_rank, 1, d, error);
}

/* --- detector mask ------------------------------------------------------- */

/* Bad pixels and the mask digest from the Dectris pixel_mask in `file`,
 * or the implicit all-admitted mask when it has none. */
qem_status qem_h5_read_mask(acquisition *a, hid_t file, const char *file_path, qem_error *error)
{
    const uint64_t rows = a->shape[2], cols = a->shape[3], pixels = rows * cols;
    int where = OBJ_ABSENT;
    if (file >= 0)
        QEM_TRY(qem_h5_locate(file, file_path, ARINA_MASK, &where, error));
    if (where == OBJ_ELSEWHERE)
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "%s in '%s' is an external link; the detector mask must be stored in "
                        "the file itself",
                        ARINA_MASK, file_path);
    if (where == OBJ_ABSENT)
        return qem_input_implicit_mask(a, error);
    hid_t dset = -1, space = -1, type = -1, fspace = -1, mspace = -1;
    QEM_TRY(qem_h5_open_here(file, file_path, ARINA_MASK, H5O_TYPE_DATASET, &dset, error));
    void *block = NULL;
    uint8_t *le = NULL;
    qem_sha256 *ctx = NULL;
    uint32_t *bad = NULL;
    uint64_t bad_count = 0, bad_cap = 0;
    qem_status st = QEM_OK;
    hsize_t dims[2] = {0, 0};
    space = H5Dget_space(dset);
    type = H5Dget_type(dset);
    if (space < 0 || type < 0) {
        st = qem_h5_fail(error, QEM_E_IO, "cannot inspect %s in '%s'", ARINA_MASK, file_path);
    } else if (H5Sget_simple_extent_ndims(space) != 2 ||
               H5Sget_simple_extent_dims(space, dims, NULL) != 2 || dims[0] != rows ||
               dims[1] != cols) {
        st = qem_fail(error, QEM_E_METADATA,
                      "%s in '%s' is not a %llux%llu plane like the detector frames; the mask "
                      "and the frames must describe the same detector",
                      ARINA_MASK, file_path, (unsigned long long)rows, (unsigned long long)cols);
    } else if (H5Tget_class(type) != H5T_INTEGER) {
        st = qem_fail(error, QEM_E_METADATA,
                      "%s in '%s' does not hold integers; Dectris masks are uint32", ARINA_MASK,
                      file_path);
    }
    const int is_signed = st == QEM_OK && H5Tget_sign(type) != H5T_SGN_NONE;
    const uint64_t block_rows = cols >= MASK_BLOCK_ELEMENTS ? 1 : MASK_BLOCK_ELEMENTS / cols;
    if (st == QEM_OK) {
        block = malloc((size_t)(block_rows * cols) * 8);
        le = malloc((size_t)(block_rows * cols) * 4);
        ctx = qem_sha256_new();
        fspace = H5Dget_space(dset);
        if (!block || !le || !ctx)
            st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory for the detector mask");
        else if (fspace < 0)
            st = qem_h5_fail(error, QEM_E_IO, "cannot inspect %s in '%s'", ARINA_MASK, file_path);
    }
    for (uint64_t r0 = 0; st == QEM_OK && r0 < rows; r0 += block_rows) {
        const uint64_t nr = rows - r0 < block_rows ? rows - r0 : block_rows;
        const hsize_t start[2] = {r0, 0}, count[2] = {nr, cols}, elems = nr * cols;
        mspace = H5Screate_simple(1, &elems, NULL);
        if (mspace < 0 ||
            H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL) < 0 ||
            H5Dread(dset, is_signed ? H5T_NATIVE_LLONG : H5T_NATIVE_ULLONG, mspace, fspace,
                    H5P_DEFAULT, block) < 0) {
            st = qem_h5_fail(error, QEM_E_IO, "cannot read %s in '%s'", ARINA_MASK, file_path);
            break;
        }
        H5Sclose(mspace);
        mspace = -1;
        for (uint64_t i = 0; st == QEM_OK && i < elems; i++) {
            uint64_t v;
            if (is_signed) {
                long long sv = ((const long long *)block)[i];
                v = sv < 0 ? UINT64_MAX : (uint64_t)sv;
            } else {
                v = ((const unsigned long long *)block)[i];
            }
            const uint64_t pixel = r0 * cols + i;
            if (v > UINT32_MAX) {
                st = qem_fail(error, QEM_E_METADATA,
                              "%s in '%s' holds a value outside 0..4294967295 at pixel %llu; "
                              "a detector mask is a little-endian u32 plane",
                              ARINA_MASK, file_path, (unsigned long long)pixel);
                break;
            }
            le[4 * i] = (uint8_t)v;
            le[4 * i + 1] = (uint8_t)(v >> 8);
            le[4 * i + 2] = (uint8_t)(v >> 16);
            le[4 * i + 3] = (uint8_t)(v >> 24);
            if (v == 0)
                continue;
            if (bad_count == bad_cap) {
                uint64_t cap = bad_cap ? 2 * bad_cap : 64;
                uint32_t *grown = realloc(bad, (size_t)cap * sizeof *grown);
                if (!grown) {
                    st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory for bad pixels");
                    break;
                }
                bad = grown;
                bad_cap = cap;
            }
            bad[bad_count++] = (uint32_t)pixel;
        }
        if (st == QEM_OK && qem_sha256_update(ctx, le, (size_t)elems * 4) != 0)
            st = qem_fail(error, QEM_E_NO_MEMORY, "SHA-256 of the detector mask failed");
    }
    if (st == QEM_OK && bad_count >= pixels)
        st = qem_fail(error, QEM_E_METADATA,
                      "%s in '%s' marks every one of the %llu detector pixels bad; nothing "
                      "would remain to pack, so check the mask",
                      ARINA_MASK, file_path, (unsigned long long)pixels);
    if (st == QEM_OK && qem_sha256_final(ctx, a->detector_mask_sha256) != 0)
        st = qem_fail(error, QEM_E_NO_MEMORY, "SHA-256 of the detector mask failed");
    if (st == QEM_OK) {
        a->flagged = bad;
        a->flagged_count = bad_count;
        a->mask_origin = INPUT_ORIGIN_SOURCE_MASK;
        bad = NULL;
    }
    free(bad);
    qem_sha256_free(ctx);
    free(le);
    free(block);
    qem_h5_close_id(mspace);
    qem_h5_close_id(fspace);
    qem_h5_close_id(type);
    qem_h5_close_id(space);
    H5Dclose(dset);
    return st;
}

/* --- reading frames ------------------------------------------------------- */

static qem_status open_part(acquisition *a, h5_state *im, size_t index, qem_error *error)
{
    if (im->open_part == index && im->dset >= 0)
        return QEM_OK;
    impl_close_handles(im);
    im->open_part = (size_t)-1;
    const h5_part *p = &im->parts[index];
    im->file = H5Fopen(p->file, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (im->file < 0)
        return qem_h5_fail(error, QEM_E_IO, "cannot open '%s'", p->file);
    im->dset = H5Dopen2(im->file, p->dataset, H5P_DEFAULT);
    if (im->dset < 0) {
        qem_status st =
            qem_h5_fail(error, QEM_E_IO, "cannot open dataset '%s' of '%s'", p->dataset, p->file);
        impl_close_handles(im);
        return st;
    }
    /* The dataset must still have the shape inspection found. */
    hsize_t dims[4] = {0, 0, 0, 0};
    hid_t space = H5Dget_space(im->dset);
    int rank = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1;
    if (rank == im->rank)
        H5Sget_simple_extent_dims(space, dims, NULL);
    qem_h5_close_id(space);
    const int same = rank == im->rank &&
                     (rank == 4         ? dims[0] == a->shape[0] && dims[1] == a->shape[1] &&
                                              dims[2] == a->shape[2] && dims[3] == a->shape[3]
                      : im->frames_last ? dims[0] == a->shape[2] && dims[1] == a->shape[3] &&
                                              dims[2] == p->frames
                                        : dims[0] == p->frames && dims[1] == a->shape[2] &&
                                              dims[2] == a->shape[3]);
    if (!same) {
        impl_close_handles(im);
        return qem_fail(error, QEM_E_CHANGED,
                        "dataset '%s' of '%s' no longer has the shape it had when the source "
                        "was inspected; inspect it again",
                        p->dataset, p->file);
    }
    im->open_part = index;
    return QEM_OK;
}

/* What reads give: the samples settled from read_values (values.c), else
 * the sample type. */
static hid_t memory_type(const acquisition *a)
{
    switch (a->read_values) {
    case INPUT_VALUES_INT8: return H5T_NATIVE_INT8;
    case INPUT_VALUES_INT16: return H5T_NATIVE_INT16;
    case INPUT_VALUES_INT32: return H5T_NATIVE_INT32;
    case INPUT_VALUES_INT64: return H5T_NATIVE_INT64;
    case INPUT_VALUES_UINT32: return H5T_NATIVE_UINT32;
    case INPUT_VALUES_UINT64: return H5T_NATIVE_UINT64;
    case INPUT_VALUES_FLOAT64: return H5T_NATIVE_DOUBLE;
    default: break;
    }
    const qem_dtype t = a->sample_type;
    return t == QEM_DTYPE_UINT8    ? H5T_NATIVE_UINT8
           : t == QEM_DTYPE_UINT16 ? H5T_NATIVE_UINT16
           : t == QEM_DTYPE_UINT32 ? H5T_NATIVE_UINT32
                                   : H5T_NATIVE_FLOAT;
}

/* The memory space has the selection's own shape: against a flat one,
 * libhdf5 maps the chunks element by element (most of a save's time). */
static qem_status read_slab(const acquisition *a, h5_state *im, const h5_part *p,
                            const hsize_t *start, const hsize_t *count, void *out,
                            qem_error *error)
{
    hid_t fspace = H5Dget_space(im->dset);
    hid_t mspace = H5Screate_simple(im->rank, count, NULL);
    qem_status st = QEM_OK;
    if (fspace < 0 || mspace < 0 ||
        H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL) < 0 ||
        H5Dread(im->dset, memory_type(a), mspace, fspace, H5P_DEFAULT, out) < 0)
        st = qem_h5_fail(error, QEM_E_IO, "cannot read frames of dataset '%s' in '%s'", p->dataset,
                         p->file);
    qem_h5_close_id(mspace);
    qem_h5_close_id(fspace);
    return st;
}

static qem_status read_h5(acquisition *a, h5_state *im, uint64_t first, uint64_t count,
                          uint8_t *out, qem_error *error)
{
    const uint64_t pixels = a->shape[2] * a->shape[3];
    const size_t item = a->read_values != INPUT_VALUES_AS_STORED
                            ? qem_input_values_size(a->read_values)
                            : qem_dtype_size(a->sample_type);
    size_t part = 0;
    while (count) {
        while (part < im->part_count &&
               first >= im->parts[part].first + im->parts[part].frames)
            part++;
        if (part == im->part_count)
            return qem_fail(error, QEM_E_INVALID_ARGUMENT, "frame %llu is outside the source",
                            (unsigned long long)first);
        const h5_part *p = &im->parts[part];
        QEM_TRY(open_part(a, im, part, error));
        uint64_t local = first - p->first;
        uint64_t n = p->first + p->frames - first;
        if (n > count)
            n = count;
        if (im->rank == 3 && im->frames_last) {
            /* (rows, columns, frames): one frame per request, whose
             * selection in row-major order is the frame itself. */
            for (uint64_t k = 0; k < n; k++) {
                const hsize_t start[3] = {0, 0, local + k}, cnt[3] = {a->shape[2], a->shape[3], 1};
                QEM_TRY(read_slab(a, im, p, start, cnt, out + k * pixels * item, error));
            }
        } else if (im->rank == 3) {
            const hsize_t start[3] = {local, 0, 0}, cnt[3] = {n, a->shape[2], a->shape[3]};
            QEM_TRY(read_slab(a, im, p, start, cnt, out, error));
        } else {
            /* Flat scans -> a partial first row, whole rows, a partial last row. */
            const uint64_t columns = a->shape[1];
            for (uint64_t done = 0; done < n;) {
                const uint64_t f = local + done, r = f / columns, c = f % columns;
                uint64_t rows = 1, cols = columns - c;
                if (c == 0 && n - done >= columns) {
                    rows = (n - done) / columns;
                    cols = columns;
                } else if (cols > n - done) {
                    cols = n - done;
                }
                const hsize_t start[4] = {r, c, 0, 0},
                              cnt[4] = {rows, cols, a->shape[2], a->shape[3]};
                QEM_TRY(read_slab(a, im, p, start, cnt, out + done * pixels * item, error));
                done += rows * cols;
            }
        }
        out += n * pixels * item;
        first += n;
        count -= n;
    }
    return QEM_OK;
}

/* --- the family entry points --------------------------------------------- */

static h5_state *state_new(void)
{
    h5_state *im = calloc(1, sizeof *im);
    if (im) {
        im->file = im->dset = -1;
        im->open_part = (size_t)-1;
    }
    return im;
}

qem_status qem_h5_keep_master(acquisition *a, hid_t file, qem_error *error)
{
    h5_state *im = a->impl ? a->impl : state_new();
    if (!im) {
        H5Fclose(file);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    a->impl = im;
    if (im->file >= 0)
        H5Fclose(im->file);
    im->file = file;
    return QEM_OK;
}

static qem_status describe_master(acquisition *a, h5_state *im, const char *path,
                                  const input_options *o, h5_describe_file_fn describe_file,
                                  qem_error *error)
{
    /* The master a claim opened, if any: reads open their parts afresh. */
    hid_t file = im->file;
    im->file = -1;
    qem_status st = qem_input_add_member(a, path, 1, error);
    if (st == QEM_OK && file < 0 && (file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT)) < 0)
        return qem_h5_fail(error, QEM_E_IO, "cannot open '%s' as HDF5", path);
    if (st == QEM_OK)
        st = describe_file(a, im, file, path, o, error);
    if (file >= 0)
        H5Fclose(file);
    return st;
}

qem_status qem_h5_describe(acquisition *a, const char *path, const input_options *o,
                           h5_describe_file_fn describe_file, qem_error *error)
{
    h5_state *im = a->impl ? a->impl : state_new();
    if (!im)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    a->impl = im;
    qem_status st;
    H5E_BEGIN_TRY
    {
        st = describe_master(a, im, path, o, describe_file, error);
    }
    H5E_END_TRY;
    return st;
}

qem_status qem_h5_read(acquisition *a, uint64_t first, uint64_t count, void *out, qem_error *error)
{
    qem_status st;
    H5E_BEGIN_TRY
    {
        st = read_h5(a, a->impl, first, count, out, error);
    }
    H5E_END_TRY;
    return st;
}

void qem_h5_release(acquisition *a)
{
    impl_free(a->impl);
    a->impl = NULL;
}
