/* Dectris Arina / Eiger acquisitions: a master whose /entry/data holds
 * external links data_000001, data_000002, ... to data files of frames
 * (uint8, uint16 or uint32, typically bitshuffle/LZ4). The links are
 * decoded, never traversed: each names a regular file inside the master's
 * own folder, which is opened directly, so what is read is what is hashed.
 * The master's pixel_mask flags detector pixels; its detector facts go to
 * source_metadata. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/error.h"
#include "input/hdf5_module.h"
#include "input/hdf5_util.h"

/* --- Dectris/Arina family ------------------------------------------------ */

typedef struct arina_link {
    unsigned number;
    char *file;    /* as the link stores it */
    char *dataset; /* object path inside the data file */
} arina_link;

static void links_free(arina_link *links, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        free(links[i].file);
        free(links[i].dataset);
    }
    free(links);
}

static int link_number(const char *name, unsigned *number)
{
    if (strncmp(name, "data_", 5) != 0 || strlen(name) != 11)
        return 0;
    unsigned v = 0;
    for (int i = 5; i < 11; i++) {
        if (name[i] < '0' || name[i] > '9')
            return 0;
        v = v * 10 + (unsigned)(name[i] - '0');
    }
    *number = v;
    return 1;
}

/* The data_NNNNNN links of /entry/data: external ones into `links`, and
 * how many other links carry such a name. Links are visited in name order,
 * which for six zero-padded digits is numeric order. */
static qem_status list_data_links(hid_t file, const char *path, arina_link **out, size_t *count,
                                  size_t *internal, qem_error *error)
{
    *out = NULL;
    *count = *internal = 0;
    int where;
    QEM_TRY(qem_h5_locate(file, path, ARINA_GROUP, &where, error));
    if (where != OBJ_HERE)
        return QEM_OK;
    src_oinfo info;
    hid_t group = H5Oopen(file, ARINA_GROUP, H5P_DEFAULT);
    if (group < 0)
        return qem_h5_fail(error, QEM_E_IO, "cannot open %s in '%s'", ARINA_GROUP, path);
    if (src_oget_info(group, &info) < 0 || info.type != H5O_TYPE_GROUP) {
        H5Oclose(group);
        return QEM_OK; /* not a group: not a master */
    }
    H5G_info_t ginfo;
    qem_status st = QEM_OK;
    arina_link *links = NULL;
    size_t n = 0;
    char *value = NULL;
    if (H5Gget_info(group, &ginfo) < 0)
        st = qem_h5_fail(error, QEM_E_IO, "cannot list %s in '%s'", ARINA_GROUP, path);
    for (hsize_t i = 0; st == QEM_OK && i < ginfo.nlinks; i++) {
        char name[32];
        ssize_t len = H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, name,
                                         sizeof name, H5P_DEFAULT);
        if (len < 0) {
            st = qem_h5_fail(error, QEM_E_IO, "cannot list %s in '%s'", ARINA_GROUP, path);
            break;
        }
        unsigned number;
        if ((size_t)len >= sizeof name || !link_number(name, &number))
            continue;
        src_linfo li;
        if (src_lget_info(group, name, &li) < 0) {
            st = qem_h5_fail(error, QEM_E_IO, "cannot inspect link %s/%s in '%s'", ARINA_GROUP,
                             name, path);
            break;
        }
        if (li.type != H5L_TYPE_EXTERNAL) {
            (*internal)++;
            continue;
        }
        free(value);
        value = malloc(li.u.val_size ? li.u.val_size : 1);
        unsigned flags = 0;
        const char *target_file = NULL, *target_object = NULL;
        if (!value) {
            st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        } else if (H5Lget_val(group, name, value, li.u.val_size, H5P_DEFAULT) < 0 ||
                   H5Lunpack_elink_val(value, li.u.val_size, &flags, &target_file,
                                       &target_object) < 0 ||
                   !target_file || !target_object || !target_file[0] || !target_object[0]) {
            st = qem_h5_fail(error, QEM_E_LAYOUT, "cannot decode the external link %s/%s in '%s'",
                             ARINA_GROUP, name, path);
        } else {
            arina_link *grown = realloc(links, (n + 1) * sizeof *grown);
            if (!grown) {
                st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
            } else {
                links = grown;
                links[n].number = number;
                links[n].file = strdup(target_file);
                links[n].dataset = strdup(target_object);
                n++;
                if (!links[n - 1].file || !links[n - 1].dataset)
                    st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
            }
        }
    }
    free(value);
    H5Oclose(group);
    if (st != QEM_OK) {
        links_free(links, n);
        return st;
    }
    *out = links;
    *count = n;
    return QEM_OK;
}

/* A data link may only name a regular file inside the master's own folder
 * (qem_input_companion_path): an absolute target, a ".." component or a
 * symlink leading out would let a crafted master read any file on the
 * machine. `*member` gets the path to open. */
static qem_status check_link_target(const char *master, const arina_link *l, char **member,
                                    qem_error *error)
{
    char subject[600];
    snprintf(subject, sizeof subject, "master '%s' links data_%06u to", master, l->number);
    const input_companion c = {
        .owner = master,
        .subject = subject,
        .folder = "the master's folder",
        .rule = "data files must lie beside their master",
        .keep = "keep the master and every data file of the acquisition together",
    };
    return qem_input_companion_path(&c, l->file, member, error);
}

/* --- vendor facts ------------------------------------------------------------------ */

/* A scalar dataset as JSON: a number, or a string; NULL for anything else
 * (arrays are described by their shape only). */
static json_t *scalar_json(hid_t dset)
{
    hid_t space = H5Dget_space(dset), type = H5Dget_type(dset);
    json_t *out = NULL;
    const H5S_class_t shape = space >= 0 ? H5Sget_simple_extent_type(space) : H5S_NO_CLASS;
    const H5T_class_t cls = type >= 0 ? H5Tget_class(type) : H5T_NO_CLASS;
    if (shape == H5S_SCALAR && (cls == H5T_INTEGER || cls == H5T_FLOAT)) {
        double v = 0;
        if (H5Dread(dset, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v) >= 0)
            out = cls == H5T_INTEGER && v == (double)(long long)v ? json_integer((json_int_t)v)
                                                                  : json_real(v);
    } else if (shape == H5S_SCALAR && cls == H5T_STRING && !H5Tis_variable_str(type)) {
        const size_t n = H5Tget_size(type);
        char *text = n && n < 4096 ? calloc(1, n + 1) : NULL;
        if (text && H5Dread(dset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, text) >= 0)
            out = json_stringn(text, strnlen(text, n));
        free(text);
    } else if (shape == H5S_SCALAR && cls == H5T_STRING) {
        char *text = NULL;
        hid_t vtype = H5Tcopy(H5T_C_S1);
        if (vtype >= 0 && H5Tset_size(vtype, H5T_VARIABLE) >= 0 &&
            H5Dread(dset, vtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, &text) >= 0 && text) {
            out = json_string(text);
            H5free_memory(text);
        }
        qem_h5_close_id(vtype);
    } else if (shape == H5S_SIMPLE) {
        hsize_t dims[8];
        const int rank = H5Sget_simple_extent_ndims(space);
        if (rank > 0 && rank <= 8 && H5Sget_simple_extent_dims(space, dims, NULL) == rank) {
            json_t *d = json_array();
            for (int k = 0; k < rank; k++)
                json_array_append_new(d, json_integer((json_int_t)dims[k]));
            out = json_pack("{s:o}", "array_shape", d);
        }
    }
    qem_h5_close_id(type);
    qem_h5_close_id(space);
    return out;
}

/* The units attribute of a dataset, when it has one. */
static void add_units(hid_t dset, json_t **value)
{
    if (!*value || H5Aexists(dset, "units") <= 0)
        return;
    hid_t attr = H5Aopen(dset, "units", H5P_DEFAULT), type = attr >= 0 ? H5Aget_type(attr) : -1;
    char text[64] = "";
    if (type >= 0 && H5Tget_class(type) == H5T_STRING && !H5Tis_variable_str(type) &&
        H5Tget_size(type) < sizeof text && H5Aread(attr, type, text) >= 0 && text[0]) {
        json_t *wrapped = json_pack("{s:O, s:s}", "value", *value, "units", text);
        json_decref(*value);
        *value = wrapped;
    }
    qem_h5_close_id(type);
    qem_h5_close_id(attr);
}

typedef struct facts_walk {
    json_t *out;
    size_t count;
} facts_walk;

static herr_t collect_fact(hid_t group, const char *name, const H5L_info_t *info, void *data)
{
    facts_walk *w = data;
    if (info->type != H5L_TYPE_HARD || w->count >= 256)
        return 0;
    hid_t obj = H5Oopen(group, name, H5P_DEFAULT);
    if (obj < 0)
        return 0;
    if (H5Iget_type(obj) == H5I_DATASET) {
        json_t *v = scalar_json(obj);
        add_units(obj, &v);
        if (v) {
            json_object_set_new(w->out, name, v);
            w->count++;
        }
    }
    H5Oclose(obj);
    return 0;
}

static json_t *group_facts(hid_t file, const char *group_path)
{
    if (H5Lexists(file, group_path, H5P_DEFAULT) <= 0)
        return NULL;
    hid_t group = H5Gopen2(file, group_path, H5P_DEFAULT);
    if (group < 0)
        return NULL;
    facts_walk w = {json_object(), 0};
    H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, NULL, collect_fact, &w);
    H5Gclose(group);
    return w.out;
}

/* What the master says of the detector and its corrections, recorded in
 * source_metadata and never applied to the counts: Dectris writes the
 * count-rate correction, flatfield, bit depths, thresholds and exposure
 * here. None of its quantities is certain enough in a microscope (its
 * detector_distance and photon_energy describe the detector's own
 * configuration) to become calibration. */
static qem_status vendor_facts(acquisition *a, hid_t master, const char *path, qem_error *error)
{
    (void)path;
    (void)error;
    json_t *detector = group_facts(master, DECTRIS_DETECTOR);
    json_t *specific = group_facts(master, DECTRIS_DETECTOR "/detectorSpecific");
    json_t *beam = group_facts(master, "/entry/instrument/beam");
    if (detector)
        qem_input_fact(a, "detector", detector);
    if (specific)
        qem_input_fact(a, "detectorSpecific", specific);
    if (beam && json_object_size(beam))
        qem_input_fact(a, "beam", beam);
    else
        json_decref(beam);
    qem_input_fact(a, "corrections_applied_by_qem", json_string("none: counts are stored as read"));
    qem_input_fact(a, "data_files", json_integer((json_int_t)(a->member_count - 1)));
    return QEM_OK;
}

static qem_status describe_links(acquisition *a, h5_state *im, hid_t master, const char *path,
                                 const input_options *o, const arina_link *links, size_t count,
                                 qem_error *error)
{
    for (size_t i = 0; i < count; i++) {
        if (links[i].number != i + 1)
            return qem_fail(error, QEM_E_LAYOUT,
                            "master '%s' links data_%06u but not data_%06zu; its data links must "
                            "run data_000001, data_000002, ... without a gap (a data file of "
                            "the acquisition is missing)",
                            path, links[i].number, i + 1);
        if (o && o->dataset) {
            const char *want = o->dataset[0] == '/' ? o->dataset + 1 : o->dataset;
            const char *have =
                links[i].dataset[0] == '/' ? links[i].dataset + 1 : links[i].dataset;
            if (strcmp(want, have) != 0)
                return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                                "'%s' is a Dectris/Arina master whose frames come from its "
                                "data_NNNNNN links (to '%s'); omit the dataset option",
                                path, links[i].dataset);
        }
    }
    qem_status st = QEM_OK;
    uint64_t frames = 0;
    char *member = NULL;
    for (size_t i = 0; st == QEM_OK && i < count; i++) {
        const arina_link *l = &links[i];
        free(member);
        member = NULL;
        st = check_link_target(path, l, &member, error);
        if (st != QEM_OK)
            break;
        st = qem_input_add_member(a, member, 0, error);
        if (st != QEM_OK)
            break;
        hid_t file = H5Fopen(member, H5F_ACC_RDONLY, H5P_DEFAULT);
        if (file < 0) {
            st = qem_h5_fail(error, QEM_E_IO, "cannot open data file '%s' (data_%06u of '%s')",
                             member, l->number, path);
            break;
        }
        int where;
        hid_t dset = -1;
        char what[600];
        snprintf(what, sizeof what, "'%s' in data file '%s'", l->dataset, member);
        st = qem_h5_locate(file, member, l->dataset, &where, error);
        if (st == QEM_OK && where == OBJ_ABSENT)
            st = qem_fail(error, QEM_E_LAYOUT,
                          "data file '%s' has no dataset '%s', which master '%s' links as "
                          "data_%06u",
                          member, l->dataset, path, l->number);
        else if (st == QEM_OK && where == OBJ_ELSEWHERE)
            st = qem_fail(error, QEM_E_UNSUPPORTED,
                          "%s is itself a link to another file; data files must hold their "
                          "frames",
                          what);
        if (st == QEM_OK)
            st = qem_h5_open_here(file, member, l->dataset, H5O_TYPE_DATASET, &dset, error);
        ds_info d;
        if (st == QEM_OK)
            st = qem_h5_inspect_dataset(dset, what, 3, &d, error);
        qem_h5_close_id(dset);
        H5Fclose(file);
        if (st != QEM_OK)
            break;
        if (i == 0) {
            a->sample_type = d.dtype;
            a->shape[2] = d.dims[1];
            a->shape[3] = d.dims[2];
        } else if (d.dtype != a->sample_type || d.dims[1] != a->shape[2] || d.dims[2] != a->shape[3]) {
            st = qem_fail(error, QEM_E_LAYOUT,
                          "data file '%s' holds %llux%llu %s frames but data_000001 holds "
                          "%llux%llu %s frames; every data file must describe the same detector",
                          member, (unsigned long long)d.dims[1], (unsigned long long)d.dims[2],
                          qem_dtype_name(d.dtype), (unsigned long long)a->shape[2],
                          (unsigned long long)a->shape[3], qem_dtype_name(a->sample_type));
            break;
        }
        if (d.largest_chunk > a->largest_compressed_chunk)
            a->largest_compressed_chunk = d.largest_chunk;
        st = qem_h5_add_part(im, member, l->dataset, frames, d.dims[0], error);
        if (st == QEM_OK && qem_add_overflow_u64(frames, d.dims[0], &frames))
            st = qem_fail(error, QEM_E_LIMIT, "the data files of '%s' hold too many frames",
                          path);
    }
    free(member);
    QEM_TRY(st);
    im->rank = 3;
    /* The scan shape: the caller's, else the master's scan_shape attribute
     * (on /entry/data/data when the master has such a dataset, or on the
     * /entry/data group). */
    static const char *const paths[2] = {ARINA_GROUP "/data", ARINA_GROUP};
    int found = 0;
    uint64_t attr[2] = {0, 0}, scan[2];
    char on[300] = "";
    QEM_TRY(
        qem_h5_scan_shape_from_file(master, path, paths, 2, &found, attr, on, sizeof on, error));
    QEM_TRY(qem_input_scan_shape(o, found, attr, on, frames, path, scan, error));
    a->shape[0] = scan[0];
    a->shape[1] = scan[1];
    QEM_TRY(qem_input_check_shape(a, path, error));
    QEM_TRY(qem_h5_read_mask(a, master, path, error));
    return vendor_facts(a, master, path, error);
}

/* --- the family ------------------------------------------------------------------ */

/* The external data_NNNNNN links of a master's /entry/data (none: not a
 * master); stored links of such names beside external ones are refused. */
static qem_status master_links(hid_t file, const char *path, arina_link **links, size_t *count,
                               qem_error *error)
{
    size_t internal = 0;
    QEM_TRY(list_data_links(file, path, links, count, &internal, error));
    if (*count && internal) {
        links_free(*links, *count);
        *links = NULL;
        *count = 0;
        return qem_fail(error, QEM_E_LAYOUT,
                        "'%s' mixes external data_NNNNNN links with %zu stored ones under %s; a "
                        "Dectris/Arina master links every data file externally",
                        path, internal, ARINA_GROUP);
    }
    return QEM_OK;
}

static qem_status claims_file(acquisition *a, const char *path, int *claimed, qem_error *error)
{
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file < 0)
        return qem_h5_fail(error, QEM_E_IO, "cannot open '%s' as HDF5", path);
    arina_link *links = NULL;
    size_t count = 0;
    qem_status st = master_links(file, path, &links, &count, error);
    *claimed = st == QEM_OK && count > 0;
    links_free(links, count);
    /* Kept for the describe, claimed or not (the dataset family's then). */
    if (st == QEM_OK)
        st = qem_h5_keep_master(a, file, error);
    else
        H5Fclose(file);
    return st;
}

/* An HDF5 file is a Dectris/Arina master when its /entry/data holds
 * external data_NNNNNN links. */
static qem_status arina_claims(acquisition *a, const char *path, int *claimed, qem_error *error)
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

static qem_status arina_describe_file(acquisition *a, h5_state *im, hid_t master,
                                      const char *path, const input_options *o, qem_error *error)
{
    arina_link *links = NULL;
    size_t count = 0;
    QEM_TRY(master_links(master, path, &links, &count, error));
    qem_status st = QEM_OK;
    if (count == 0)
        st = qem_fail(error, QEM_E_CHANGED,
                      "master '%s' lost its data_NNNNNN links while it was being opened; it "
                      "is being rewritten, so open it again once it is complete",
                      path);
    else
        st = describe_links(a, im, master, path, o, links, count, error);
    links_free(links, count);
    return st;
}

static qem_status arina_describe(acquisition *a, const char *path, const uint8_t *head, size_t n,
                                 const input_options *o, qem_error *error)
{
    (void)head;
    (void)n;
    return qem_h5_describe(a, path, o, arina_describe_file, error);
}

/* libqem reaches it as qem_input_family_arina (hdf5_dispatch.c). */
const input_family qem_h5_family_arina = {"arina",        NULL, arina_describe, qem_h5_read,
                                          qem_h5_release, 0,    arina_claims};
