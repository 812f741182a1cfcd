/* Thermo Fisher Velox EMD files: HDF5 with a /Version dataset holding
 * the JSON {"format": "Velox", "version": ...} and a /Data group. Each
 * image is /Data/Image/<uuid>/ with Data (rows, columns, frames) and
 * Metadata (bytes, frames): per frame a NUL-padded JSON document
 * (velox_meta.c parses it, bounded). Frame k is Data[:, :, k], read one
 * frame per request; its rows and columns are the image's y and x, as
 * Velox and HyperSpy show them. The scan shape is the caller's, or the one
 * Scan.ScanSize states for camera frames (rows = height), or 1x1 for one
 * frame. EDS spectra (/Data/SpectrumStream, Spectrum, SpectrumImage) are
 * not detector frames and are refused when named; complex images (FFT,
 * DPC) are refused by their type. Nothing becomes calibration. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "input/hdf5_module.h"
#include "input/hdf5_util.h"

#define VERSION_BYTES 4096
#define MAX_IMAGES 4096

/* --- recognising ------------------------------------------------------------ */

/* The text of a one-element string dataset (fixed or variable length, at
 * most VERSION_BYTES), or NULL. */
static char *read_text(hid_t file, const char *path)
{
    src_linfo li;
    if (H5Lexists(file, path, H5P_DEFAULT) <= 0 || src_lget_info(file, path, &li) < 0 ||
        li.type != H5L_TYPE_HARD)
        return NULL;
    hid_t dset = H5Dopen2(file, path, H5P_DEFAULT);
    if (dset < 0)
        return NULL;
    hid_t type = H5Dget_type(dset), space = H5Dget_space(dset);
    const hssize_t points = space >= 0 ? H5Sget_simple_extent_npoints(space) : -1;
    char *out = NULL;
    if (points == 1 && type >= 0 && H5Tget_class(type) == H5T_STRING) {
        if (H5Tis_variable_str(type) > 0) {
            char *text = NULL;
            hid_t mem = H5Tcopy(H5T_C_S1); /* in the file's character set: no conversion */
            if (mem >= 0 && H5Tset_size(mem, H5T_VARIABLE) >= 0 &&
                H5Tset_cset(mem, H5Tget_cset(type)) >= 0 &&
                H5Dread(dset, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, &text) >= 0 && text) {
                if (strnlen(text, VERSION_BYTES + 1) <= VERSION_BYTES)
                    out = strdup(text);
                H5free_memory(text);
            }
            qem_h5_close_id(mem);
        } else {
            const size_t n = H5Tget_size(type);
            out = n > 0 && n <= VERSION_BYTES ? calloc(1, n + 1) : NULL;
            if (out && H5Dread(dset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0) {
                free(out);
                out = NULL;
            }
        }
    }
    qem_h5_close_id(space);
    qem_h5_close_id(type);
    H5Dclose(dset);
    return out;
}

/* The Velox /Version document, when the file has one and a /Data group. */
static json_t *velox_version(hid_t file)
{
    src_linfo li;
    if (H5Lexists(file, "/Data", H5P_DEFAULT) <= 0 || src_lget_info(file, "/Data", &li) < 0 ||
        li.type != H5L_TYPE_HARD)
        return NULL;
    char *text = read_text(file, "/Version");
    json_t *version = NULL;
    if (text)
        qem_input_velox_version(text, strlen(text), &version);
    free(text);
    return version;
}

static qem_status claims_file(acquisition *a, const char *path, int *claimed, qem_error *error)
{
    h5_state *im = a->impl;
    hid_t file = im && im->file >= 0 ? im->file : -1;
    const int opened = file < 0;
    if (opened && (file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT)) < 0)
        return qem_h5_fail(error, QEM_E_IO, "cannot open '%s' as HDF5", path);
    json_t *version = velox_version(file);
    *claimed = version != NULL;
    json_decref(version);
    return opened ? qem_h5_keep_master(a, file, error) : QEM_OK;
}

/* An HDF5 file is a Velox EMD when its /Version says so and it has /Data. */
static qem_status velox_claims(acquisition *a, const char *path, int *claimed, qem_error *error)
{
    *claimed = 0;
    qem_status st;
    H5E_BEGIN_TRY
    {
        st = claims_file(a, path, claimed, error);
    }
    H5E_END_TRY;
    return st;
}

/* --- images ----------------------------------------------------------------- */

typedef struct name_list {
    char **names;
    size_t count;
    int failed; /* 1 out of memory, 2 too many */
} name_list;

static herr_t collect_name(hid_t group, const char *name, const H5L_info_t *info, void *data)
{
    (void)group;
    (void)info;
    name_list *l = data;
    if (l->count == MAX_IMAGES) {
        l->failed = 2;
        return -1;
    }
    char **grown = realloc(l->names, (l->count + 1) * sizeof *grown);
    if (grown)
        l->names = grown;
    char *copy = grown ? strdup(name) : NULL;
    if (!copy) {
        l->failed = 1;
        return -1;
    }
    l->names[l->count++] = copy;
    return 0;
}

static void names_free(name_list *l)
{
    for (size_t k = 0; k < l->count; k++)
        free(l->names[k]);
    free(l->names);
    memset(l, 0, sizeof *l);
}

/* The links of the group `path` (absent: none). */
static qem_status list_links(hid_t file, const char *file_path, const char *path, name_list *l,
                             qem_error *error)
{
    memset(l, 0, sizeof *l);
    int where = OBJ_ABSENT;
    QEM_TRY(qem_h5_locate(file, file_path, path, &where, error));
    if (where != OBJ_HERE)
        return QEM_OK;
    hid_t group = H5Gopen2(file, path, H5P_DEFAULT);
    if (group < 0)
        return QEM_OK; /* not a group */
    const herr_t r = H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, NULL, collect_name, l);
    H5Gclose(group);
    if (r >= 0)
        return QEM_OK;
    const int failed = l->failed;
    names_free(l);
    if (failed == 1)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    if (failed == 2)
        return qem_fail(error, QEM_E_LIMIT, "'%s' holds more than %d entries under %s",
                        file_path, MAX_IMAGES, path);
    return qem_h5_fail(error, QEM_E_IO, "cannot list %s in '%s'", path, file_path);
}

/* "a, b, c" clipped to fit a message. */
static void join(const name_list *l, char *out, size_t size)
{
    size_t used = 0;
    out[0] = '\0';
    for (size_t k = 0; k < l->count; k++) {
        int n = snprintf(out + used, size - used, "%s/Data/Image/%s", used ? ", " : "",
                         l->names[k]);
        if (n < 0 || (size_t)n >= size - used) {
            if (size > 5)
                snprintf(out + size - 5, 5, "...");
            return;
        }
        used += (size_t)n;
    }
}

static const char *const spectra[] = {"SpectrumStream", "SpectrumImage", "Spectrum"};

/* Which image the dataset option names ("/Data/Image/<uuid>" or its
 * "/Data"): its index, or a refusal. */
static qem_status choose_image(const name_list *images, size_t spectrum_groups, const char *path,
                               const input_options *o, size_t *chosen, qem_error *error)
{
    char list[400];
    join(images, list, sizeof list);
    if (o && o->dataset) {
        const char *w = o->dataset;
        while (*w == '/')
            w++;
        size_t n = strlen(w);
        while (n && w[n - 1] == '/')
            n--;
        for (size_t k = 0; k < sizeof spectra / sizeof spectra[0]; k++) {
            const size_t len = strlen(spectra[k]);
            if (n >= 5 + len && !memcmp(w, "Data/", 5) && !memcmp(w + 5, spectra[k], len) &&
                (n == 5 + len || w[5 + len] == '/'))
                return qem_fail(error, QEM_E_UNSUPPORTED,
                                "'%s' names /Data/%s of Velox file '%s': EDS spectra, not "
                                "4D-STEM detector frames; qem reads the images under "
                                "/Data/Image",
                                o->dataset, spectra[k], path);
        }
        for (size_t k = 0; k < images->count; k++) {
            const size_t len = strlen(images->names[k]);
            if (n >= 11 + len && !memcmp(w, "Data/Image/", 11) &&
                !memcmp(w + 11, images->names[k], len) &&
                (n == 11 + len || (n == 16 + len && !memcmp(w + 11 + len, "/Data", 5)))) {
                *chosen = k;
                return QEM_OK;
            }
        }
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "Velox file '%s' has no image '%s'%s%s",
                        path, o->dataset, images->count ? "; its images are: " : "", list);
    }
    if (images->count == 1) {
        *chosen = 0;
        return QEM_OK;
    }
    if (images->count > 1)
        return qem_fail(error, QEM_E_LAYOUT,
                        "Velox file '%s' holds %zu images (%s); choose one with the dataset "
                        "option (--dataset /Data/Image/<uuid>)",
                        path, images->count, list);
    if (spectrum_groups)
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "Velox file '%s' holds only EDS spectra (/Data/SpectrumStream, Spectrum "
                        "or SpectrumImage), not 4D-STEM detector frames",
                        path);
    return qem_fail(error, QEM_E_LAYOUT, "Velox file '%s' holds no image under /Data/Image", path);
}

/* The Metadata of the image `group`: (bytes, frames) uint8, frame 0's
 * column parsed. */
static qem_status read_metadata(hid_t file, const char *path, const char *group, uint64_t frames,
                                input_velox_meta *meta, qem_error *error)
{
    char name[600], where[800];
    snprintf(name, sizeof name, "%s/Metadata", group);
    snprintf(where, sizeof where, "'%s' of Velox file '%s'", name, path);
    int located = OBJ_ABSENT;
    QEM_TRY(qem_h5_locate(file, path, name, &located, error));
    if (located == OBJ_ABSENT)
        return qem_fail(error, QEM_E_LAYOUT,
                        "Velox file '%s' has no %s beside the image's Data; Velox writes one "
                        "metadata document per frame there",
                        path, name);
    if (located == OBJ_ELSEWHERE)
        return qem_fail(error, QEM_E_UNSUPPORTED, "%s is a link to another file", where);
    hid_t dset = -1;
    QEM_TRY(qem_h5_open_here(file, path, name, H5O_TYPE_DATASET, &dset, error));
    hid_t space = H5Dget_space(dset), type = H5Dget_type(dset);
    hsize_t dims[2] = {0, 0};
    qem_status st = QEM_OK;
    if (space < 0 || type < 0 || H5Sget_simple_extent_ndims(space) != 2 ||
        H5Sget_simple_extent_dims(space, dims, NULL) != 2 || H5Tget_class(type) != H5T_INTEGER ||
        H5Tget_size(type) != 1)
        st = qem_fail(error, QEM_E_LAYOUT,
                      "%s is not the (bytes, frames) uint8 array Velox writes", where);
    else if (dims[1] != frames)
        st = qem_fail(error, QEM_E_LAYOUT,
                      "%s holds metadata for %llu frames but the image has %llu; the file is "
                      "inconsistent",
                      where, (unsigned long long)dims[1], (unsigned long long)frames);
    else if (dims[0] > VELOX_MAX_METADATA_BYTES)
        st = qem_fail(error, QEM_E_LIMIT,
                      "%s holds %llu bytes of metadata per frame; qem reads at most %u", where,
                      (unsigned long long)dims[0], (unsigned)VELOX_MAX_METADATA_BYTES);
    char *text = NULL;
    hid_t mem = -1;
    if (st == QEM_OK && dims[0] > 0) {
        const hsize_t start[2] = {0, 0}, count[2] = {dims[0], 1};
        text = malloc((size_t)dims[0]);
        mem = H5Screate_simple(2, count, NULL);
        if (!text)
            st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        else if (mem < 0 ||
                 H5Sselect_hyperslab(space, H5S_SELECT_SET, start, NULL, count, NULL) < 0 ||
                 H5Dread(dset, H5T_NATIVE_UCHAR, mem, space, H5P_DEFAULT, text) < 0)
            st = qem_h5_fail(error, QEM_E_IO, "cannot read %s", where);
    }
    if (st == QEM_OK)
        st = qem_input_velox_parse_metadata(text ? text : "", text ? (size_t)dims[0] : 0, frames,
                                            where, meta, error);
    free(text);
    qem_h5_close_id(mem);
    qem_h5_close_id(type);
    qem_h5_close_id(space);
    H5Dclose(dset);
    return st;
}

/* --- describing ------------------------------------------------------------------ */

static qem_status describe_image(acquisition *a, h5_state *im, hid_t file, const char *path,
                                 const input_options *o, const char *group, json_t *other,
                                 qem_error *error)
{
    char name[600], where[800];
    snprintf(name, sizeof name, "%s/Data", group);
    snprintf(where, sizeof where, "image '%s' of Velox file '%s'", name, path);
    int located = OBJ_ABSENT;
    QEM_TRY(qem_h5_locate(file, path, name, &located, error));
    if (located == OBJ_ABSENT)
        return qem_fail(error, QEM_E_LAYOUT, "Velox file '%s' has no %s", path, name);
    if (located == OBJ_ELSEWHERE)
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "%s is a link to another file; qem authenticates only the files it "
                        "reads, so give the linked file itself",
                        where);
    hid_t dset = -1;
    QEM_TRY(qem_h5_open_here(file, path, name, H5O_TYPE_DATASET, &dset, error));
    ds_info d;
    qem_status st = qem_h5_inspect_values_dataset(dset, where, 0, &d, error);
    H5Dclose(dset);
    QEM_TRY(st);
    if (d.rank != 3)
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "%s has %d dimensions; qem reads Velox images stored (rows, columns, "
                        "frames)",
                        where, d.rank);
    const uint64_t frames = d.dims[2];
    /* An absurd detector or frame count is refused before any metadata
     * is read. */
    const uint64_t provisional[4] = {1, frames, d.dims[0], d.dims[1]};
    memcpy(a->shape, provisional, sizeof a->shape);
    QEM_TRY(qem_input_check_shape(a, path, error));
    input_velox_meta meta;
    QEM_TRY(read_metadata(file, path, group, frames, &meta, error));
    const int stated = meta.scan[0] != 0;
    uint64_t scan[2];
    st = qem_input_scan_shape(o, stated, meta.scan, "the metadata's Scan.ScanSize", frames, path,
                              scan, error);
    if (st == QEM_OK) {
        a->sample_type = d.dtype;
        a->read_values = d.values;
        a->largest_compressed_chunk = d.largest_chunk;
        a->shape[0] = scan[0];
        a->shape[1] = scan[1];
        a->shape[2] = d.dims[0];
        a->shape[3] = d.dims[1];
        im->rank = 3;
        im->frames_last = 1;
        st = qem_input_check_shape(a, path, error);
    }
    if (st == QEM_OK)
        st = qem_h5_add_part(im, path, name, 0, frames, error);
    if (st == QEM_OK)
        st = qem_input_implicit_mask(a, error);
    if (st == QEM_OK) {
        qem_input_fact(a, "image", json_string(group));
        qem_input_fact(a, "frames", json_integer((json_int_t)frames));
        qem_input_fact(a, "scan_shape_from",
                       json_string(o && (o->scan_shape[0] || o->scan_shape[1])
                                       ? "the caller"
                                   : stated ? "Scan.ScanSize (camera frames)"
                                            : "one frame"));
        qem_input_fact(a, "metadata", meta.facts);
        meta.facts = NULL;
        if (json_object_size(other))
            qem_input_fact(a, "not_read", json_incref(other));
        qem_input_fact(a, "calibration_taken", json_string("none: the metadata is recorded only"));
    }
    qem_input_velox_meta_free(&meta);
    return st;
}

static qem_status velox_describe_file(acquisition *a, h5_state *im, hid_t file, const char *path,
                                      const input_options *o, qem_error *error)
{
    json_t *version = velox_version(file);
    if (!version)
        return qem_fail(error, QEM_E_CHANGED,
                        "'%s' lost its Velox /Version while it was being opened; open it again "
                        "once it is complete",
                        path);
    qem_input_fact(a, "version", version);
    name_list images;
    QEM_TRY(list_links(file, path, "/Data/Image", &images, error));
    /* What else /Data holds, counted: qem reads images only. */
    json_t *other = json_object();
    size_t spectrum_groups = 0;
    name_list data;
    qem_status st = list_links(file, path, "/Data", &data, error);
    for (size_t k = 0; st == QEM_OK && k < data.count; k++) {
        if (strcmp(data.names[k], "Image") == 0)
            continue;
        char group[300];
        if (snprintf(group, sizeof group, "/Data/%s", data.names[k]) >= (int)sizeof group)
            continue;
        name_list inside;
        st = list_links(file, path, group, &inside, error);
        for (size_t s = 0; s < sizeof spectra / sizeof spectra[0]; s++)
            if (strcmp(data.names[k], spectra[s]) == 0)
                spectrum_groups += inside.count;
        /* A name that is not UTF-8 is left out (jansson refuses it). */
        json_object_set_new(other, data.names[k], json_integer((json_int_t)inside.count));
        names_free(&inside);
    }
    names_free(&data);
    size_t chosen = 0;
    if (st == QEM_OK)
        st = choose_image(&images, spectrum_groups, path, o, &chosen, error);
    if (st == QEM_OK) {
        char group[300];
        if (snprintf(group, sizeof group, "/Data/Image/%s", images.names[chosen]) >=
            (int)sizeof group)
            st = qem_fail(error, QEM_E_LIMIT, "Velox file '%s' names an image of more than %zu "
                          "bytes", path, sizeof group - 13);
        else
            st = describe_image(a, im, file, path, o, group, other, error);
    }
    json_decref(other);
    names_free(&images);
    return st;
}

static qem_status velox_describe(acquisition *a, const char *path, const uint8_t *head, size_t n,
                                 const input_options *o, qem_error *error)
{
    (void)head;
    (void)n;
    return qem_h5_describe(a, path, o, velox_describe_file, error);
}

/* libqem reaches it as qem_input_family_velox (hdf5_dispatch.c). */
const input_family qem_h5_family_velox = {"velox",        NULL, velox_describe, qem_h5_read,
                                          qem_h5_release, 0,    velox_claims};
