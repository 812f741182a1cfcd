/* Direct Electron's `<dataset>_info.txt` (see de_info.h, doc/inputs.md).
 * Facts: RosettaSciIO's MRC file specification (DE names the movie
 * `<date>_<number>[_<suffix>]_movie.mrc` and the metadata
 * `<date>_<number>[_<suffix>]_info.txt`) and `read_de_metadata_file` in
 * rsciio/mrc/_api.py (`key = value` lines, stripped; the navigation shape
 * from `Scan - Size X` and `Scan - Size Y` when `Scan - Enable` is
 * `Enable` and `Scan - Type` is `Raster`; its test file 4DSTEM_scan_info.txt
 * with Size X 8, Size Y 32 loads as (32, 8, ...) scan rows x columns). */
#include "input/de_info.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"

void qem_de_info_free(de_info *d)
{
    if (d) {
        json_decref(d->keys);
        d->keys = NULL;
    }
}

static int blank(char c)
{
    return c == ' ' || c == '\t';
}

/* `s` (n bytes, no NUL) as a JSON string; bytes that are not UTF-8 become
 * '?' (a file written on Windows may carry Latin-1 text). */
static json_t *text_json(const char *s, size_t n)
{
    char *copy = malloc(n + 1);
    if (!copy)
        return NULL;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t len = u[i] < 0x80 ? 1 : (u[i] & 0xe0) == 0xc0 ? 2 : (u[i] & 0xf0) == 0xe0 ? 3
                                        : (u[i] & 0xf8) == 0xf0 ? 4 : 0;
        int ok = len && i + len <= n;
        for (size_t k = 1; ok && k < len; k++)
            ok = (u[i + k] & 0xc0) == 0x80;
        if (ok && len > 1) {
            /* No overlong forms, surrogates or code points past U+10FFFF. */
            uint32_t c = u[i] & (0x7fu >> len);
            for (size_t k = 1; k < len; k++)
                c = c << 6 | (u[i + k] & 0x3fu);
            const uint32_t least = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
            ok = c >= least && c <= 0x10ffff && (c < 0xd800 || c > 0xdfff);
        }
        if (!ok) {
            copy[i] = '?';
            i++;
        } else {
            memcpy(copy + i, s + i, len);
            i += len;
        }
    }
    json_t *j = json_stringn(copy, n);
    free(copy);
    return j;
}

/* The scan keys whose values are counts. */
static const char *const count_keys[] = {"Scan - Size X", "Scan - Size Y", "Scan - Repeats",
                                         "Scan - Point Repeat"};
#define COUNT_KEYS (sizeof count_keys / sizeof count_keys[0])

static int parse_count(const char *v, size_t n, uint64_t *out)
{
    if (!n || n > 10)
        return 0;
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return 0;
        x = x * 10 + (uint64_t)(v[i] - '0');
    }
    if (x > INT32_MAX)
        return 0;
    *out = x;
    return 1;
}

static int value_is(const json_t *keys, const char *key, const char *want)
{
    const char *v = json_string_value(json_object_get(keys, key));
    return v && !strcmp(v, want);
}

qem_status qem_de_info_parse(const char *text, size_t size, const char *path, de_info *out,
                             qem_error *error)
{
    memset(out, 0, sizeof *out);
    if (size > DE_INFO_MAX_BYTES)
        return qem_fail(error, QEM_E_LIMIT,
                        "the Direct Electron info file '%s' is %zu bytes; such a file is tens of "
                        "kilobytes (at most %u read)",
                        path, size, DE_INFO_MAX_BYTES);
    out->keys = json_object();
    if (!out->keys)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    uint64_t counts[COUNT_KEYS];
    int have[COUNT_KEYS] = {0};
    size_t line_no = 0, keys = 0;
    for (size_t at = 0; at < size;) {
        const char *line = text + at;
        const char *nl = memchr(line, '\n', size - at);
        size_t len = nl ? (size_t)(nl - line) : size - at;
        at += len + (nl ? 1 : 0);
        line_no++;
        if (len > DE_INFO_MAX_LINE)
            return qem_fail(error, QEM_E_LIMIT,
                            "line %zu of the Direct Electron info file '%s' is %zu bytes "
                            "(at most %u)",
                            line_no, path, len, DE_INFO_MAX_LINE);
        if (len && line[len - 1] == '\r')
            len--; /* written on Windows */
        for (size_t i = 0; i < len; i++) {
            const unsigned char c = (unsigned char)line[i];
            if ((c < 0x20 && c != '\t') || c == 0x7f)
                return qem_fail(error, QEM_E_LAYOUT,
                                "line %zu of the Direct Electron info file '%s' holds the control "
                                "byte 0x%02x; it is text of `Key = Value` lines",
                                line_no, path, c);
        }
        size_t b = 0;
        while (b < len && blank(line[b]))
            b++;
        if (b == len)
            continue; /* an empty line */
        const char *eq = memchr(line, '=', len);
        if (!eq)
            return qem_fail(error, QEM_E_LAYOUT,
                            "line %zu of the Direct Electron info file '%s' has no '=' ('%.*s'); "
                            "each line is `Key = Value`",
                            line_no, path, (int)(len - b < 60 ? len - b : 60), line + b);
        size_t kend = (size_t)(eq - line);
        while (kend > b && blank(line[kend - 1]))
            kend--;
        if (kend == b)
            return qem_fail(error, QEM_E_LAYOUT,
                            "line %zu of the Direct Electron info file '%s' has no key before "
                            "its '='",
                            line_no, path);
        size_t vb = (size_t)(eq - line) + 1, ve = len;
        while (vb < ve && blank(line[vb]))
            vb++;
        while (ve > vb && blank(line[ve - 1]))
            ve--;
        if (++keys > DE_INFO_MAX_KEYS)
            return qem_fail(error, QEM_E_LIMIT,
                            "the Direct Electron info file '%s' has more than %u keys", path,
                            DE_INFO_MAX_KEYS);
        json_t *key = text_json(line + b, kend - b);
        json_t *value = text_json(line + vb, ve - vb);
        if (!key || !value) {
            json_decref(key);
            json_decref(value);
            return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        }
        const char *k = json_string_value(key);
        if (json_object_get(out->keys, k)) {
            json_decref(value);
            qem_status st = qem_fail(error, QEM_E_LAYOUT,
                                     "line %zu of the Direct Electron info file '%s' gives the "
                                     "key '%.80s' a second time",
                                     line_no, path, k);
            json_decref(key);
            return st;
        }
        for (size_t c = 0; c < COUNT_KEYS; c++) {
            if (strcmp(k, count_keys[c]))
                continue;
            if (!parse_count(line + vb, ve - vb, &counts[c])) {
                qem_status st = qem_fail(error, QEM_E_LAYOUT,
                                         "line %zu of the Direct Electron info file '%s' gives "
                                         "'%s' the value '%.40s'; it is a count (decimal digits, "
                                         "at most %d)",
                                         line_no, path, k, json_string_value(value), INT32_MAX);
                json_decref(key);
                json_decref(value);
                return st;
            }
            have[c] = 1;
        }
        if (json_object_set_new(out->keys, k, value)) {
            json_decref(key);
            return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        }
        json_decref(key);
    }
    /* The scan: RosettaSciIO's reading (Scan - Enable = Enable, Scan - Type
     * Raster or absent); qem also wants one pass of the whole raster. */
    if (!value_is(out->keys, "Scan - Enable", "Enable"))
        return QEM_OK;
    const char *type = json_string_value(json_object_get(out->keys, "Scan - Type"));
    if (!have[0] || !have[1] || !counts[0] || !counts[1])
        snprintf(out->why_not, sizeof out->why_not,
                 "it states a scan without positive 'Scan - Size X' and 'Scan - Size Y'");
    else if (type && strcmp(type, "Raster"))
        snprintf(out->why_not, sizeof out->why_not,
                 "its 'Scan - Type' is '%.40s', not 'Raster': the frames follow that scan's "
                 "order",
                 type);
    else if (value_is(out->keys, "Scan - ROI Enable", "Enable"))
        snprintf(out->why_not, sizeof out->why_not,
                 "its scan has a region of interest ('Scan - ROI Enable' = Enable)");
    else if ((have[2] && counts[2] != 1) || (have[3] && counts[3] != 1))
        snprintf(out->why_not, sizeof out->why_not,
                 "it states %llu x %llu positions scanned %llu times with %llu frames per point "
                 "('Scan - Repeats', 'Scan - Point Repeat')",
                 (unsigned long long)counts[1], (unsigned long long)counts[0],
                 (unsigned long long)(have[2] ? counts[2] : 1),
                 (unsigned long long)(have[3] ? counts[3] : 1));
    else {
        out->scan_stated = 1;
        out->scan[0] = counts[1]; /* rows: Scan - Size Y */
        out->scan[1] = counts[0]; /* columns: Scan - Size X */
    }
    return QEM_OK;
}

static const char *base_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

qem_status qem_de_info_companion(acquisition *a, const char *master, const char *family,
                                 de_info *out, int *found, qem_error *error)
{
    memset(out, 0, sizeof *out);
    *found = 0;
    const char *base = base_of(master);
    const char *dot = strrchr(base, '.');
    static const char movie[] = "_movie";
    const size_t ml = sizeof movie - 1;
    if (!dot || (size_t)(dot - base) <= ml || memcmp(dot - ml, movie, ml))
        return QEM_OK; /* not named as DE-Server names a movie */
    const size_t stem = (size_t)(dot - base) - ml;
    if (stem > 4000)
        return QEM_OK;
    char name[4096];
    snprintf(name, sizeof name, "%.*s_info.txt", (int)stem, base);
    char *dir = qem_path_dirname(master);
    int present = 0;
    const qem_status exists = dir ? qem_input_entry_present(dir, name, &present, error)
                                  : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    free(dir);
    if (exists != QEM_OK || !present)
        return exists;
    char subject[4400];
    snprintf(subject, sizeof subject, "%s '%s' has the Direct Electron info file", family, master);
    const input_companion c = {
        .owner = master,
        .subject = subject,
        .folder = "the movie's folder",
        .rule = "a Direct Electron info file is read only beside its movie",
        .keep = "remove the broken link, or keep the movie and its _info.txt together",
    };
    char *member = NULL;
    QEM_TRY(qem_input_companion_path(&c, name, &member, error));
    qem_status st = qem_input_add_member(a, member, 0, error);
    free(member);
    QEM_TRY(st);
    const input_member *m = &a->members[a->member_count - 1];
    int fd = -1;
    struct stat sb;
    QEM_TRY(qem_open_input(m->path, &fd, &sb, error));
    st = qem_file_stamp_check(fd, &m->stamp, m->path, "described", error);
    char *text = NULL;
    if (st == QEM_OK && (uint64_t)sb.st_size > DE_INFO_MAX_BYTES)
        st = qem_fail(error, QEM_E_LIMIT,
                      "the Direct Electron info file '%s' is %lld bytes; such a file is tens of "
                      "kilobytes (at most %u read)",
                      m->path, (long long)sb.st_size, DE_INFO_MAX_BYTES);
    if (st == QEM_OK) {
        text = malloc((size_t)sb.st_size + 1);
        st = text ? qem_pread_full(fd, text, (size_t)sb.st_size, 0, QEM_E_CHANGED, error)
                  : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    close(fd);
    if (st == QEM_OK)
        st = qem_de_info_parse(text, (size_t)sb.st_size, m->path, out, error);
    free(text);
    if (st != QEM_OK) {
        qem_de_info_free(out);
        return st;
    }
    json_t *facts = json_object();
    json_object_set_new(facts, "file", json_string(name));
    json_object_set(facts, "properties", out->keys);
    if (out->scan_stated)
        json_object_set_new(facts, "scan_shape",
                            json_pack("[II]", (json_int_t)out->scan[0], (json_int_t)out->scan[1]));
    else if (out->why_not[0])
        json_object_set_new(facts, "scan_shape_not_taken", json_string(out->why_not));
    qem_input_fact(a, "de_info", facts);
    *found = 1;
    return QEM_OK;
}

qem_status qem_de_info_scan_shape(const de_info *d, int found, const input_options *o,
                                  uint64_t frames, const char *path, uint64_t out[2],
                                  qem_error *error)
{
    const int given = o && (o->scan_shape[0] || o->scan_shape[1]);
    const uint64_t none[2] = {0, 0};
    if (!found || !d->scan_stated) {
        if (found && d->why_not[0] && !given && frames != 1)
            return qem_fail(error, QEM_E_LAYOUT,
                            "'%s' holds %llu frames and its Direct Electron info file does not "
                            "state one raster pass: %s; give the scan shape (--scan-shape "
                            "ROWS,COLUMNS) with a product of %llu",
                            path, (unsigned long long)frames, d->why_not,
                            (unsigned long long)frames);
        return qem_input_scan_shape(o, 0, none, NULL, frames, path, out, error);
    }
    const int agrees = !given || (o->scan_shape[0] == d->scan[0] && o->scan_shape[1] == d->scan[1]);
    uint64_t product;
    if (agrees && (qem_mul_overflow_u64(d->scan[0], d->scan[1], &product) || product != frames))
        return qem_fail(error, QEM_E_LAYOUT,
                        "the Direct Electron info file beside '%s' states a scan of %llu x %llu "
                        "positions ('Scan - Size Y' x 'Scan - Size X'), but the movie holds %llu "
                        "frames; the info file belongs to another acquisition, or the movie is "
                        "incomplete",
                        path, (unsigned long long)d->scan[0], (unsigned long long)d->scan[1],
                        (unsigned long long)frames);
    return qem_input_scan_shape(o, 1, d->scan,
                                "its Direct Electron info file ('Scan - Size Y' x 'Scan - Size X')",
                                frames, path, out, error);
}
