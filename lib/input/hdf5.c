/* The HDF5 dataset family: a dense dataset in any HDF5 file, a 4D array or
 * a 3D frame stack with a scan shape, chosen by the dataset option or as
 * the file's only candidate. A Dectris/Arina master is its own family
 * (arina.c), recognised before this one; what both share is in
 * hdf5_util.c. See doc/inputs.md for the rules. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "input/hdf5_module.h"
#include "input/hdf5_util.h"

/* --- plain HDF5 ---------------------------------------------------------- */

typedef struct candidates {
    char **names; /* 3D/4D numeric datasets */
    size_t count;
    char **others; /* 3D/4D datasets of other types */
    size_t other_count;
    int failed;
} candidates;

static int push_name(char ***list, size_t *count, const char *name)
{
    char **grown = realloc(*list, (*count + 1) * sizeof *grown);
    if (!grown)
        return -1;
    *list = grown;
    size_t len = strlen(name);
    char *copy = malloc(len + 2);
    if (!copy)
        return -1;
    copy[0] = '/';
    memcpy(copy + 1, name, len + 1);
    grown[(*count)++] = copy;
    return 0;
}

static herr_t visit_candidate(hid_t obj, const char *name, const src_oinfo *info, void *data)
{
    candidates *c = data;
    if (info->type != H5O_TYPE_DATASET)
        return 0;
    hid_t dset = H5Dopen2(obj, name, H5P_DEFAULT);
    if (dset < 0)
        return 0;
    hid_t space = H5Dget_space(dset), type = H5Dget_type(dset);
    int rank = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1;
    H5T_class_t cls = type >= 0 ? H5Tget_class(type) : H5T_NO_CLASS;
    qem_h5_close_id(type);
    qem_h5_close_id(space);
    H5Dclose(dset);
    if (rank != 3 && rank != 4)
        return 0;
    int r = cls == H5T_INTEGER || cls == H5T_FLOAT ? push_name(&c->names, &c->count, name)
                                                   : push_name(&c->others, &c->other_count, name);
    if (r != 0) {
        c->failed = 1;
        return -1;
    }
    return 0;
}

static void candidates_free(candidates *c)
{
    for (size_t i = 0; i < c->count; i++)
        free(c->names[i]);
    for (size_t i = 0; i < c->other_count; i++)
        free(c->others[i]);
    free(c->names);
    free(c->others);
}

/* "a, b, c" clipped to fit a message. */
static void join_names(char *const *names, size_t count, char *out, size_t size)
{
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < count; i++) {
        int n = snprintf(out + used, size - used, "%s%s", i ? ", " : "", names[i]);
        if (n < 0 || (size_t)n >= size - used) {
            if (size > 4)
                snprintf(out + (size > 5 ? size - 5 : 0), 5, "...");
            return;
        }
        used += (size_t)n;
    }
}

static qem_status choose_dataset(hid_t file, const char *path, const input_options *o,
                                 char **chosen, qem_error *error)
{
    *chosen = NULL;
    candidates c;
    memset(&c, 0, sizeof c);
    qem_status st = QEM_OK;
    if (SRC_OVISIT(file, visit_candidate, &c) < 0)
        st = c.failed ? qem_fail(error, QEM_E_NO_MEMORY, "out of memory")
                      : qem_h5_fail(error, QEM_E_IO, "cannot list the datasets of '%s'", path);
    char list[200];
    if (st == QEM_OK && o && o->dataset) {
        int where;
        st = qem_h5_locate(file, path, o->dataset, &where, error);
        if (st == QEM_OK && where == OBJ_ABSENT) {
            join_names(c.names, c.count, list, sizeof list);
            st = qem_fail(error, QEM_E_INVALID_ARGUMENT,
                          "'%s' has no dataset '%s'%s%s", path, o->dataset,
                          c.count ? "; its 3D/4D numeric datasets are: " : "", list);
        } else if (st == QEM_OK && where == OBJ_ELSEWHERE) {
            st = qem_fail(error, QEM_E_UNSUPPORTED,
                          "'%s' reaches '%s' through an external link; qem authenticates only "
                          "the files it reads, so give the linked file itself",
                          path, o->dataset);
        } else if (st == QEM_OK) {
            size_t len = strlen(o->dataset);
            *chosen = malloc(len + 2);
            if (!*chosen)
                st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
            else
                snprintf(*chosen, len + 2, "%s%s", o->dataset[0] == '/' ? "" : "/", o->dataset);
        }
    } else if (st == QEM_OK && c.count == 1) {
        *chosen = strdup(c.names[0]);
        if (!*chosen)
            st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    } else if (st == QEM_OK && c.count > 1) {
        join_names(c.names, c.count, list, sizeof list);
        st = qem_fail(error, QEM_E_LAYOUT,
                      "'%s' holds several 3D/4D numeric datasets (%s); choose one with the "
                      "dataset option",
                      path, list);
    } else if (st == QEM_OK) {
        join_names(c.others, c.other_count, list, sizeof list);
        st = qem_fail(error, QEM_E_LAYOUT,
                      "'%s' holds no 3D (frames, rows, columns) or 4D numeric dataset%s%s%s",
                      path, c.other_count ? " (found " : "", list,
                      c.other_count ? ", which do not hold numbers)" : "");
    }
    candidates_free(&c);
    return st;
}

static qem_status describe_dataset(acquisition *a, h5_state *im, hid_t file, const char *path,
                               const input_options *o, qem_error *error)
{
    char *name = NULL;
    QEM_TRY(choose_dataset(file, path, o, &name, error));
    hid_t dset = -1;
    char where[600];
    snprintf(where, sizeof where, "dataset '%s' of '%s'", name, path);
    qem_status st = qem_h5_open_here(file, path, name, H5O_TYPE_DATASET, &dset, error);
    ds_info d;
    if (st == QEM_OK)
        st = qem_h5_inspect_dataset(dset, where, 0, &d, error);
    qem_h5_close_id(dset);
    if (st == QEM_OK) {
        a->sample_type = d.dtype;
        a->largest_compressed_chunk = d.largest_chunk;
        im->rank = d.rank;
    }
    if (st == QEM_OK && d.rank == 4) {
        const int given = o && (o->scan_shape[0] || o->scan_shape[1]);
        if (given && (o->scan_shape[0] != d.dims[0] || o->scan_shape[1] != d.dims[1]))
            st = qem_fail(error, QEM_E_INVALID_ARGUMENT,
                          "%s is 4D with scan shape %llux%llu; the scan shape given (%llux%llu) "
                          "contradicts it, so omit it",
                          where, (unsigned long long)d.dims[0], (unsigned long long)d.dims[1],
                          (unsigned long long)o->scan_shape[0],
                          (unsigned long long)o->scan_shape[1]);
        for (int i = 0; i < 4; i++)
            a->shape[i] = d.dims[i];
    } else if (st == QEM_OK) {
        /* The dataset's own attribute, then its parent group's. */
        char *parent = strdup(name);
        if (!parent) {
            st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        } else {
            char *slash = strrchr(parent, '/');
            if (slash == parent)
                parent[1] = '\0';
            else if (slash)
                *slash = '\0';
            const char *paths[2] = {name, parent};
            int found = 0;
            uint64_t attr[2] = {0, 0}, scan[2];
            char on[300] = "";
            st = qem_h5_scan_shape_from_file(file, path, paths, 2, &found, attr, on, sizeof on,
                                             error);
            if (st == QEM_OK)
                st = qem_input_scan_shape(o, found, attr, on, d.dims[0], path, scan, error);
            if (st == QEM_OK) {
                a->shape[0] = scan[0];
                a->shape[1] = scan[1];
                a->shape[2] = d.dims[1];
                a->shape[3] = d.dims[2];
            }
            free(parent);
        }
    }
    if (st == QEM_OK)
        st = qem_input_check_shape(a, path, error);
    if (st == QEM_OK)
        st = qem_h5_add_part(im, path, name, 0, a->shape[0] * a->shape[1], error);
    if (st == QEM_OK)
        st = qem_h5_read_mask(a, file, path, error);
    free(name);
    return st;
}

/* --- the family ------------------------------------------------------------------ */

/* Berkeley and Velox EMD files are families of their own (emd.c,
 * velox.c), which claim them first. */
static qem_status dataset_describe_file(acquisition *a, h5_state *im, hid_t file,
                                        const char *path, const input_options *o,
                                        qem_error *error)
{
    return describe_dataset(a, im, file, path, o, error);
}

static qem_status hdf5_describe(acquisition *a, const char *path, const uint8_t *head, size_t n,
                                const input_options *o, qem_error *error)
{
    (void)head;
    (void)n;
    return qem_h5_describe(a, path, o, dataset_describe_file, error);
}

/* Every HDF5 file that no other HDF5 family claims (acquisition.c); libqem
 * reaches it as qem_input_family_hdf5 (hdf5_dispatch.c). */
const input_family qem_h5_family_dataset = {"hdf5",         NULL, hdf5_describe, qem_h5_read,
                                            qem_h5_release, 0,    NULL};
