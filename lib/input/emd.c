/* Berkeley EMD files (emdatasets.com): EMD 0.2 (root attributes
 * version_major/version_minor, data groups with emd_group_type = 1), the
 * py4DSTEM 0.x and prismatic layouts (a top group such as
 * 4DSTEM_simulation carrying emd_group_type = 2 and the version) and EMD
 * 1.0 (emdfile, py4DSTEM >= 0.14: root emd_group_type "file", data groups
 * with emd_group_type "array"). A data group holds its array (`data`, or
 * py4DSTEM 0.x's `datacube`, `counted_datacube`, `realslice`,
 * `diffractionslice`) and one dataset per axis (dim1..dimN, or
 * dim0..dimN-1 in EMD 1.0) with name and units attributes.
 *
 * A 4D array is read as stored, C order: (dim1, dim2, dim3, dim4) =
 * (scan rows, scan columns, detector rows, detector columns); py4DSTEM's
 * datacube is (Rx, Ry, Qx, Qy). A 3D array named with the dataset option
 * is a stack of frames (frames, rows, columns) with a scan shape given.
 * Several 4D arrays: the dataset option names one. Axis facts and the
 * metadata groups' attributes go to the facts; nothing is calibration. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "input/hdf5_module.h"
#include "input/hdf5_util.h"

#define MAX_DATA_GROUPS 4096
#define MAX_ATTRS 128       /* attributes kept per object */
#define ATTR_TEXT 1024      /* longest string attribute kept */
#define ATTR_ARRAY 16       /* longest numeric array attribute kept */
#define MAX_TOP_LINKS 1024  /* root links looked at for the version group */

/* --- attributes ------------------------------------------------------------ */

enum { ATTR_NONE, ATTR_INT, ATTR_REAL, ATTR_TEXT_KIND };

typedef struct attr_value {
    int kind;
    long long i;
    double d;
    char text[ATTR_TEXT];
} attr_value;

/* A string as JSON: bytes that are not UTF-8 become '?'. */
static json_t *text_json(const char *text, size_t n)
{
    json_t *s = json_stringn(text, n);
    if (s)
        return s;
    char *copy = malloc(n + 1);
    if (!copy)
        return NULL;
    for (size_t k = 0; k < n; k++)
        copy[k] = (unsigned char)text[k] < 0x80 ? text[k] : '?';
    s = json_stringn(copy, n);
    free(copy);
    return s;
}

/* A scalar (or one-element) attribute: an integer, a real or a string
 * (fixed or variable length, at most ATTR_TEXT - 1 bytes). */
static void read_attr(hid_t attr, attr_value *v)
{
    memset(v, 0, sizeof *v);
    hid_t type = H5Aget_type(attr), space = H5Aget_space(attr);
    const hssize_t points = space >= 0 ? H5Sget_simple_extent_npoints(space) : -1;
    const H5T_class_t cls = type >= 0 ? H5Tget_class(type) : H5T_NO_CLASS;
    if (points == 1 && cls == H5T_INTEGER) {
        long long i = 0;
        if (H5Aread(attr, H5T_NATIVE_LLONG, &i) >= 0) {
            v->kind = ATTR_INT;
            v->i = i;
        }
    } else if (points == 1 && cls == H5T_FLOAT) {
        double d = 0;
        if (H5Aread(attr, H5T_NATIVE_DOUBLE, &d) >= 0) {
            v->kind = ATTR_REAL;
            v->d = d;
        }
    } else if (points == 1 && cls == H5T_STRING && H5Tis_variable_str(type) > 0) {
        char *text = NULL;
        /* The file's character set: libhdf5 converts no ASCII <-> UTF-8, and
         * h5py (emdfile, py4DSTEM) writes UTF-8. */
        hid_t mem = H5Tcopy(H5T_C_S1);
        if (mem >= 0 && H5Tset_size(mem, H5T_VARIABLE) >= 0 &&
            H5Tset_cset(mem, H5Tget_cset(type)) >= 0 && H5Aread(attr, mem, &text) >= 0 &&
            text) {
            snprintf(v->text, sizeof v->text, "%s", text);
            v->kind = ATTR_TEXT_KIND;
        }
        if (text)
            H5free_memory(text);
        qem_h5_close_id(mem);
    } else if (points == 1 && cls == H5T_STRING) {
        const size_t n = H5Tget_size(type);
        if (n > 0 && n < sizeof v->text && H5Aread(attr, type, v->text) >= 0) {
            v->text[n] = '\0';
            v->kind = ATTR_TEXT_KIND;
        } else {
            v->text[0] = '\0';
        }
    }
    qem_h5_close_id(space);
    qem_h5_close_id(type);
}

/* Attribute `name` of `obj`, when it exists. */
static void get_attr(hid_t obj, const char *name, attr_value *v)
{
    memset(v, 0, sizeof *v);
    if (H5Aexists(obj, name) <= 0)
        return;
    hid_t attr = H5Aopen(obj, name, H5P_DEFAULT);
    if (attr < 0)
        return;
    read_attr(attr, v);
    H5Aclose(attr);
}

static json_t *attr_json(hid_t attr)
{
    attr_value v;
    read_attr(attr, &v);
    if (v.kind == ATTR_INT)
        return json_integer((json_int_t)v.i);
    if (v.kind == ATTR_REAL)
        return json_real(v.d);
    if (v.kind == ATTR_TEXT_KIND)
        return text_json(v.text, strlen(v.text));
    /* Short numeric arrays (a cell's dimensions): their values. */
    hid_t type = H5Aget_type(attr), space = H5Aget_space(attr);
    const hssize_t points = space >= 0 ? H5Sget_simple_extent_npoints(space) : -1;
    const H5T_class_t cls = type >= 0 ? H5Tget_class(type) : H5T_NO_CLASS;
    json_t *out = NULL;
    double values[ATTR_ARRAY];
    if (points > 1 && points <= ATTR_ARRAY && (cls == H5T_INTEGER || cls == H5T_FLOAT) &&
        H5Aread(attr, H5T_NATIVE_DOUBLE, values) >= 0) {
        out = json_array();
        for (hssize_t k = 0; k < points; k++)
            json_array_append_new(out, json_real(values[k]));
    }
    qem_h5_close_id(space);
    qem_h5_close_id(type);
    return out;
}

typedef struct attrs_walk {
    hid_t obj;
    json_t *out;
} attrs_walk;

static herr_t collect_attr(hid_t obj, const char *name, const H5A_info_t *info, void *data)
{
    (void)info;
    attrs_walk *w = data;
    if (json_object_size(w->out) >= MAX_ATTRS)
        return 1;
    hid_t attr = H5Aopen(obj, name, H5P_DEFAULT);
    if (attr < 0)
        return 0;
    json_t *v = attr_json(attr);
    H5Aclose(attr);
    if (v && json_object_set_new(w->out, name, v) != 0)
        return 0; /* a name that is not UTF-8: left out */
    return 0;
}

/* The attributes of the object at `path` (inside the file only), or NULL. */
static json_t *attrs_of(hid_t file, const char *file_path, const char *path)
{
    int where = OBJ_ABSENT;
    qem_error ignored;
    if (qem_h5_locate(file, file_path, path, &where, &ignored) != QEM_OK || where != OBJ_HERE)
        return NULL;
    hid_t obj = H5Oopen(file, path, H5P_DEFAULT);
    if (obj < 0)
        return NULL;
    attrs_walk w = {obj, json_object()};
    hsize_t at = 0;
    H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, &at, collect_attr, &w);
    H5Oclose(obj);
    if (!json_object_size(w.out)) {
        json_decref(w.out);
        return NULL;
    }
    return w.out;
}

/* --- recognising ------------------------------------------------------------ */

/* An object carrying the EMD version (root of EMD 0.2/1.0, or a py4DSTEM
 * 0.x / prismatic top group with emd_group_type = 2). */
static int has_version(hid_t obj)
{
    return H5Aexists(obj, "version_major") > 0;
}

typedef struct top_search {
    char name[256];
    size_t seen;
} top_search;

static herr_t find_version_group(hid_t root, const char *name, const H5L_info_t *info, void *data)
{
    top_search *t = data;
    if (++t->seen > MAX_TOP_LINKS)
        return 1;
    if (info->type != H5L_TYPE_HARD || strlen(name) >= sizeof t->name)
        return 0;
    hid_t obj = H5Oopen(root, name, H5P_DEFAULT);
    if (obj < 0)
        return 0;
    const int found = H5Iget_type(obj) == H5I_GROUP && has_version(obj) &&
                      H5Aexists(obj, "emd_group_type") > 0;
    H5Oclose(obj);
    if (found)
        snprintf(t->name, sizeof t->name, "/%s", name);
    return found;
}

/* Where the file states its EMD version: "/" or a top group; "" if it
 * does not (not EMD). */
static void version_home(hid_t file, char *home, size_t size)
{
    home[0] = '\0';
    if (has_version(file)) {
        snprintf(home, size, "/");
        return;
    }
    top_search t;
    memset(&t, 0, sizeof t);
    H5Literate(file, H5_INDEX_NAME, H5_ITER_INC, NULL, find_version_group, &t);
    if (t.name[0])
        snprintf(home, size, "%s", t.name);
}

static qem_status claims_file(acquisition *a, const char *path, int *claimed, qem_error *error)
{
    h5_state *im = a->impl;
    hid_t file = im && im->file >= 0 ? im->file : -1;
    const int opened = file < 0;
    if (opened && (file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT)) < 0)
        return qem_h5_fail(error, QEM_E_IO, "cannot open '%s' as HDF5", path);
    char home[256];
    version_home(file, home, sizeof home);
    *claimed = home[0] != '\0';
    /* Kept for the describe that follows, whichever family's it is. */
    return opened ? qem_h5_keep_master(a, file, error) : QEM_OK;
}

/* An HDF5 file is Berkeley EMD when its root, or one of its top groups,
 * carries version_major. */
static qem_status emd_claims(acquisition *a, const char *path, int *claimed, qem_error *error)
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

/* --- data groups ------------------------------------------------------------- */

typedef struct data_group {
    char *group;         /* "/4DSTEM_simulation/data/datacubes/CBED_array_depth0000" */
    const char *dataset; /* the array's name in it */
    int rank;
} data_group;

typedef struct group_list {
    data_group *items;
    size_t count;
    int failed; /* out of memory, or too many */
} group_list;

/* The array names of a data group, in the order they are looked for. */
static const char *const array_names[] = {"data", "datacube", "counted_datacube", "realslice",
                                          "diffractionslice"};

/* 1 if emd_group_type marks a data group: 1 (EMD 0.2, py4DSTEM 0.x) or
 * "array" (EMD 1.0). */
static int is_data_group(hid_t group)
{
    attr_value v;
    get_attr(group, "emd_group_type", &v);
    return (v.kind == ATTR_INT && v.i == 1) ||
           (v.kind == ATTR_TEXT_KIND && strcmp(v.text, "array") == 0);
}

/* The rank of the array `name` in `group`; -1 when it is not stored here
 * (a link is never followed: describing refuses it by name). */
static int dataset_rank(hid_t group, const char *name)
{
    src_linfo li;
    if (src_lget_info(group, name, &li) < 0 || li.type != H5L_TYPE_HARD)
        return -1;
    hid_t dset = H5Dopen2(group, name, H5P_DEFAULT);
    if (dset < 0)
        return -1;
    hid_t space = H5Dget_space(dset);
    const int rank = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1;
    qem_h5_close_id(space);
    H5Dclose(dset);
    return rank;
}

static herr_t visit_group(hid_t obj, const char *name, const src_oinfo *info, void *data)
{
    group_list *l = data;
    if (info->type != H5O_TYPE_GROUP || strcmp(name, ".") == 0)
        return 0;
    hid_t group = H5Gopen2(obj, name, H5P_DEFAULT);
    if (group < 0)
        return 0;
    const char *array = NULL;
    if (is_data_group(group))
        for (size_t k = 0; !array && k < sizeof array_names / sizeof array_names[0]; k++)
            if (H5Lexists(group, array_names[k], H5P_DEFAULT) > 0)
                array = array_names[k];
    const int rank = array ? dataset_rank(group, array) : -1;
    H5Gclose(group);
    if (!array)
        return 0;
    if (l->count == MAX_DATA_GROUPS) {
        l->failed = 2;
        return -1;
    }
    data_group *grown = realloc(l->items, (l->count + 1) * sizeof *grown);
    const size_t len = strlen(name);
    char *copy = grown ? malloc(len + 2) : NULL;
    if (!copy) {
        if (grown)
            l->items = grown;
        l->failed = 1;
        return -1;
    }
    copy[0] = '/';
    memcpy(copy + 1, name, len + 1);
    l->items = grown;
    l->items[l->count++] = (data_group){copy, array, rank};
    return 0;
}

static void groups_free(group_list *l)
{
    for (size_t k = 0; k < l->count; k++)
        free(l->items[k].group);
    free(l->items);
}

/* "a (4D), b (3D)" clipped to fit a message; only those of `rank` when it
 * is nonzero. */
static void list_groups(const group_list *l, int rank, char *out, size_t size)
{
    size_t used = 0;
    out[0] = '\0';
    for (size_t k = 0; k < l->count; k++) {
        if (rank && l->items[k].rank != rank)
            continue;
        char kind[32];
        if (l->items[k].rank < 0)
            snprintf(kind, sizeof kind, "a link");
        else
            snprintf(kind, sizeof kind, "%dD", l->items[k].rank);
        int n = snprintf(out + used, size - used, "%s%s (%s)", used ? ", " : "",
                         l->items[k].group, kind);
        if (n < 0 || (size_t)n >= size - used) {
            if (size > 5)
                snprintf(out + size - 5, 5, "...");
            return;
        }
        used += (size_t)n;
    }
}

/* Without leading and trailing '/'. */
static size_t trimmed(const char *s, const char **start)
{
    while (*s == '/')
        s++;
    size_t n = strlen(s);
    while (n && s[n - 1] == '/')
        n--;
    *start = s;
    return n;
}

/* The dataset option names a data group or its array. */
static int names_group(const char *want, const data_group *g)
{
    const char *w, *h;
    const size_t nw = trimmed(want, &w), nh = trimmed(g->group, &h);
    if (nw == nh && memcmp(w, h, nw) == 0)
        return 1;
    const size_t na = strlen(g->dataset);
    return nw == nh + 1 + na && memcmp(w, h, nh) == 0 && w[nh] == '/' &&
           memcmp(w + nh + 1, g->dataset, na) == 0;
}

static qem_status choose_group(const group_list *l, const char *path, const input_options *o,
                               const data_group **chosen, qem_error *error)
{
    *chosen = NULL;
    char list[400];
    if (o && o->dataset) {
        for (size_t k = 0; k < l->count; k++)
            if (names_group(o->dataset, &l->items[k])) {
                *chosen = &l->items[k];
                return QEM_OK;
            }
        list_groups(l, 0, list, sizeof list);
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "EMD file '%s' has no data group '%s'%s%s", path, o->dataset,
                        l->count ? "; its data groups are: " : " (it has no data group)", list);
    }
    size_t four = 0;
    for (size_t k = 0; k < l->count; k++)
        if (l->items[k].rank == 4 && four++ == 0)
            *chosen = &l->items[k];
    if (four == 1)
        return QEM_OK;
    *chosen = NULL;
    if (four > 1) {
        list_groups(l, 4, list, sizeof list);
        return qem_fail(error, QEM_E_LAYOUT,
                        "EMD file '%s' holds %zu 4D data groups (%s); choose one with the "
                        "dataset option (--dataset GROUP)",
                        path, four, list);
    }
    list_groups(l, 0, list, sizeof list);
    return qem_fail(error, QEM_E_LAYOUT,
                    "EMD file '%s' holds no 4D data group (scan rows, scan columns, detector "
                    "rows, detector columns)%s%s; a 3D stack of frames is read when the dataset "
                    "option names it and a scan shape is given",
                    path, l->count ? "; its data groups are: " : "", list);
}

/* --- facts -------------------------------------------------------------------- */

/* One axis: its dataset's name and units attributes, its length and, for
 * numbers, its first value and step (EMD 1.0 stores only two values for
 * a linear axis). */
static json_t *dim_fact(hid_t group, const char *name)
{
    src_linfo li;
    if (H5Lexists(group, name, H5P_DEFAULT) <= 0 || src_lget_info(group, name, &li) < 0 ||
        li.type != H5L_TYPE_HARD)
        return NULL;
    hid_t dset = H5Dopen2(group, name, H5P_DEFAULT);
    if (dset < 0)
        return NULL;
    json_t *out = json_pack("{s:s}", "dataset", name);
    attr_value v;
    get_attr(dset, "name", &v);
    if (v.kind == ATTR_TEXT_KIND)
        json_object_set_new(out, "name", text_json(v.text, strlen(v.text)));
    get_attr(dset, "units", &v);
    if (v.kind == ATTR_TEXT_KIND)
        json_object_set_new(out, "units", text_json(v.text, strlen(v.text)));
    hid_t space = H5Dget_space(dset), type = H5Dget_type(dset);
    const hssize_t points = space >= 0 ? H5Sget_simple_extent_npoints(space) : -1;
    const int rank = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1;
    const H5T_class_t cls = type >= 0 ? H5Tget_class(type) : H5T_NO_CLASS;
    if (points >= 0)
        json_object_set_new(out, "values", json_integer((json_int_t)points));
    if (rank == 1 && points >= 1 && (cls == H5T_INTEGER || cls == H5T_FLOAT)) {
        const hsize_t start = 0, count = points >= 2 ? 2 : 1;
        double head[2] = {0, 0};
        hid_t mem = H5Screate_simple(1, &count, NULL);
        if (mem >= 0 &&
            H5Sselect_hyperslab(space, H5S_SELECT_SET, &start, NULL, &count, NULL) >= 0 &&
            H5Dread(dset, H5T_NATIVE_DOUBLE, mem, space, H5P_DEFAULT, head) >= 0) {
            json_object_set_new(out, "first", json_real(head[0]));
            if (count == 2)
                json_object_set_new(out, "step", json_real(head[1] - head[0]));
        }
        qem_h5_close_id(mem);
    }
    qem_h5_close_id(type);
    qem_h5_close_id(space);
    H5Dclose(dset);
    return out;
}

static void add_facts(acquisition *a, hid_t file, const char *path, const char *home,
                      const data_group *g, int rank)
{
    attr_value major, minor;
    hid_t at = H5Oopen(file, home, H5P_DEFAULT);
    get_attr(at, "version_major", &major);
    get_attr(at, "version_minor", &minor);
    qem_h5_close_id(at);
    char version[2 * ATTR_TEXT + 2] = "";
    if (major.kind == ATTR_INT && minor.kind == ATTR_INT)
        snprintf(version, sizeof version, "%lld.%lld", major.i, minor.i);
    else if (major.kind == ATTR_TEXT_KIND && minor.kind == ATTR_TEXT_KIND)
        snprintf(version, sizeof version, "%s.%s", major.text, minor.text);
    if (version[0])
        qem_input_fact(a, "emd_version", text_json(version, strlen(version)));
    qem_input_fact(a, "version_group", json_string(home));
    qem_input_fact(a, "data_group", text_json(g->group, strlen(g->group)));
    qem_input_fact(a, "array", json_string(g->dataset));
    hid_t group = H5Gopen2(file, g->group, H5P_DEFAULT);
    if (group >= 0) {
        /* EMD 1.0 numbers its axes from dim0, earlier versions from dim1. */
        const int base = H5Lexists(group, "dim0", H5P_DEFAULT) > 0 ? 0 : 1;
        json_t *dims = json_array();
        for (int k = 0; k < rank; k++) {
            char name[16];
            snprintf(name, sizeof name, "dim%d", base + k);
            json_t *d = dim_fact(group, name);
            json_array_append_new(dims, d ? d : json_null());
        }
        qem_input_fact(a, "dims", dims);
        H5Gclose(group);
    }
    json_t *attrs = attrs_of(file, path, g->group);
    if (attrs)
        qem_input_fact(a, "group_attributes", attrs);
    /* EMD 0.2's recommended metadata groups and prismatic's parameters. */
    static const char *const meta[] = {"microscope", "sample", "user", "comments"};
    for (size_t k = 0; k < sizeof meta / sizeof meta[0]; k++) {
        char where[64];
        snprintf(where, sizeof where, "/%s", meta[k]);
        json_t *m = attrs_of(file, path, where);
        if (m)
            qem_input_fact(a, meta[k], m);
    }
    if (strcmp(home, "/") != 0) {
        char where[400];
        snprintf(where, sizeof where, "%s/metadata/metadata_0/original/simulation_parameters",
                 home);
        json_t *m = attrs_of(file, path, where);
        if (m)
            qem_input_fact(a, "simulation_parameters", m);
    }
    qem_input_fact(a, "calibration_taken", json_string("none: axis facts are recorded only"));
}

/* --- describing ------------------------------------------------------------------ */

static qem_status describe_group(acquisition *a, h5_state *im, hid_t file, const char *path,
                                 const input_options *o, const char *home, const data_group *g,
                                 qem_error *error)
{
    const size_t size = strlen(g->group) + strlen(g->dataset) + 2;
    char *name = malloc(size);
    if (!name)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    snprintf(name, size, "%s/%s", g->group, g->dataset);
    char where[700];
    snprintf(where, sizeof where, "EMD array '%s' of '%s'", name, path);
    int located = OBJ_ABSENT;
    qem_status st = qem_h5_locate(file, path, name, &located, error);
    if (st == QEM_OK && located == OBJ_ELSEWHERE)
        st = qem_fail(error, QEM_E_UNSUPPORTED,
                      "%s is a link to another file; qem authenticates only the files it "
                      "reads, so give the linked file itself",
                      where);
    hid_t dset = -1;
    if (st == QEM_OK)
        st = qem_h5_open_here(file, path, name, H5O_TYPE_DATASET, &dset, error);
    ds_info d;
    if (st == QEM_OK)
        st = qem_h5_inspect_values_dataset(dset, where, 0, &d, error);
    qem_h5_close_id(dset);
    if (st == QEM_OK) {
        a->sample_type = d.dtype;
        a->read_values = d.values;
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
        uint64_t scan[2];
        const uint64_t none[2] = {0, 0};
        st = qem_input_scan_shape(o, 0, none, "", d.dims[0], path, scan, error);
        a->shape[0] = scan[0];
        a->shape[1] = scan[1];
        a->shape[2] = d.dims[1];
        a->shape[3] = d.dims[2];
    }
    if (st == QEM_OK)
        st = qem_input_check_shape(a, path, error);
    if (st == QEM_OK)
        st = qem_h5_add_part(im, path, name, 0, a->shape[0] * a->shape[1], error);
    if (st == QEM_OK)
        st = qem_input_implicit_mask(a, error);
    if (st == QEM_OK)
        add_facts(a, file, path, home, g, d.rank);
    free(name);
    return st;
}

static qem_status emd_describe_file(acquisition *a, h5_state *im, hid_t file, const char *path,
                                    const input_options *o, qem_error *error)
{
    char home[256];
    version_home(file, home, sizeof home);
    if (!home[0])
        return qem_fail(error, QEM_E_CHANGED,
                        "'%s' lost its EMD version attributes while it was being opened; open it "
                        "again once it is complete",
                        path);
    group_list l;
    memset(&l, 0, sizeof l);
    qem_status st = QEM_OK;
    if (SRC_OVISIT(file, visit_group, &l) < 0)
        st = l.failed == 1   ? qem_fail(error, QEM_E_NO_MEMORY, "out of memory")
             : l.failed == 2 ? qem_fail(error, QEM_E_LIMIT,
                                        "EMD file '%s' holds more than %d data groups", path,
                                        MAX_DATA_GROUPS)
                             : qem_h5_fail(error, QEM_E_IO, "cannot list the groups of '%s'",
                                           path);
    const data_group *g = NULL;
    if (st == QEM_OK)
        st = choose_group(&l, path, o, &g, error);
    if (st == QEM_OK)
        st = describe_group(a, im, file, path, o, home, g, error);
    groups_free(&l);
    return st;
}

static qem_status emd_describe(acquisition *a, const char *path, const uint8_t *head, size_t n,
                               const input_options *o, qem_error *error)
{
    (void)head;
    (void)n;
    return qem_h5_describe(a, path, o, emd_describe_file, error);
}

/* libqem reaches it as qem_input_family_emd (hdf5_dispatch.c). */
const input_family qem_h5_family_emd = {"emd",          NULL, emd_describe, qem_h5_read,
                                        qem_h5_release, 0,    emd_claims};
