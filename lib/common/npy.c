/* .npy reading and writing (NumPy format versions 1.0-3.0), windowed: the
 * reader never holds more than the elements a caller asks for. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
#include "common/npy.h"
#include "common/options.h"
#include "qem.h"

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAX_HEADER (1u << 20)

struct qem_npy {
    int fd;
    char *path;
    qem_npy_info info;
};

/* --- a small parser for the header's Python dict literal ---------------- */

typedef struct {
    const char *p;
    const char *end;
} cursor;

static void skip_space(cursor *c)
{
    while (c->p < c->end && isspace((unsigned char)*c->p))
        c->p++;
}

static int take(cursor *c, char ch)
{
    skip_space(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

/* A quoted Python string without escapes (all NumPy writes). */
static int parse_string(cursor *c, char *out, size_t cap)
{
    skip_space(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return 0;
    char quote = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != quote) {
        if (*c->p == '\\' || n + 1 >= cap)
            return 0;
        out[n++] = *c->p++;
    }
    if (c->p >= c->end)
        return 0;
    c->p++;
    out[n] = '\0';
    return 1;
}

static int parse_word(cursor *c, const char *word)
{
    skip_space(c);
    size_t n = strlen(word);
    if ((size_t)(c->end - c->p) >= n && memcmp(c->p, word, n) == 0) {
        c->p += n;
        return 1;
    }
    return 0;
}

static int parse_shape(cursor *c, qem_npy_info *info)
{
    if (!take(c, '('))
        return 0;
    info->ndim = 0;
    skip_space(c);
    if (take(c, ')'))
        return 1;
    for (;;) {
        skip_space(c);
        if (c->p >= c->end || !isdigit((unsigned char)*c->p))
            return 0;
        uint64_t v = 0;
        while (c->p < c->end && isdigit((unsigned char)*c->p)) {
            if (v > (UINT64_MAX - 9) / 10)
                return 0;
            v = v * 10 + (uint64_t)(*c->p++ - '0');
        }
        if (c->p < c->end && (*c->p == 'L' || *c->p == 'l'))
            c->p++; /* Python 2 long suffix */
        if (info->ndim >= 8)
            return 0;
        info->shape[info->ndim++] = v;
        if (take(c, ')'))
            return 1;
        if (!take(c, ','))
            return 0;
        if (take(c, ')'))
            return 1;
    }
}

static qem_status parse_header(const char *text, size_t len, const char *path, qem_npy_info *info,
                               int *fortran, qem_error *error)
{
    cursor c = {text, text + len};
    int have_descr = 0, have_order = 0, have_shape = 0;
    if (!take(&c, '{'))
        goto bad;
    while (!take(&c, '}')) {
        char key[32];
        if (!parse_string(&c, key, sizeof key) || !take(&c, ':'))
            goto bad;
        if (strcmp(key, "descr") == 0) {
            if (!parse_string(&c, info->descr, sizeof info->descr)) {
                skip_space(&c);
                if (c.p < c.end && *c.p == '[')
                    return qem_fail(error, QEM_E_NPY,
                                    "'%s' holds a structured dtype; save a plain uint8/uint16 array",
                                    path);
                goto bad;
            }
            have_descr = 1;
        } else if (strcmp(key, "fortran_order") == 0) {
            if (parse_word(&c, "True"))
                *fortran = 1;
            else if (parse_word(&c, "False"))
                *fortran = 0;
            else
                goto bad;
            have_order = 1;
        } else if (strcmp(key, "shape") == 0) {
            if (!parse_shape(&c, info))
                goto bad;
            have_shape = 1;
        } else {
            goto bad;
        }
        if (!take(&c, ',')) {
            if (!take(&c, '}'))
                goto bad;
            break;
        }
    }
    if (!have_descr || !have_order || !have_shape)
        goto bad;
    return QEM_OK;
bad:
    return qem_fail(error, QEM_E_NPY, "'%s' has a malformed .npy header", path);
}

/* `acquisition`: also the types the input layer converts itself
 * (uint32, and uint16/uint32/float32 stored big-endian). */
static qem_status classify_descr(qem_npy_info *info, const char *path, int acquisition,
                                 qem_error *error)
{
    const char *d = info->descr;
    if (acquisition && (!strcmp(d, "<u4") || !strcmp(d, ">u4"))) {
        info->dtype = QEM_DTYPE_UINT32;
        return QEM_OK;
    }
    if (acquisition && !strcmp(d, ">u2")) {
        info->dtype = QEM_DTYPE_UINT16;
        return QEM_OK;
    }
    if (acquisition && !strcmp(d, ">f4")) {
        info->dtype = QEM_DTYPE_FLOAT32;
        return QEM_OK;
    }
    if (!strcmp(d, "|u1") || !strcmp(d, "<u1") || !strcmp(d, "=u1") || !strcmp(d, "u1") ||
        !strcmp(d, "|b1") || !strcmp(d, "b1")) {
        info->dtype = QEM_DTYPE_UINT8;
    } else if (!strcmp(d, "<u2")) {
        info->dtype = QEM_DTYPE_UINT16;
    } else if (!strcmp(d, "<f4")) {
        info->dtype = QEM_DTYPE_FLOAT32;
    } else if (!strcmp(d, ">u2") || !strcmp(d, ">f4")) {
        /* A type qem stores, in the other byte order. */
        return qem_fail(error, QEM_E_NPY,
                        "'%s' is big-endian (%s); convert it with "
                        "numpy.save(path, array.astype(array.dtype.newbyteorder('<')))",
                        path, d);
    } else {
        return qem_fail(error, QEM_E_NPY,
                        "'%s' has dtype %s; qem stores uint8 or uint16 counts "
                        "(convert exact integer counts with array.astype('<u2') after checking "
                        "every value fits)",
                        path, d);
    }
    return QEM_OK;
}

static qem_status open_npy(const char *path, int acquisition, qem_npy **out, qem_error *error);

qem_status qem_npy_open(const char *path, qem_npy **out, qem_error *error)
{
    qem_error_clear(error);
    return open_npy(path, 0, out, error);
}

qem_status qem_npy_open_acquisition(const char *path, qem_npy **out, qem_error *error)
{
    return open_npy(path, 1, out, error);
}

static qem_status open_npy(const char *path, int acquisition, qem_npy **out, qem_error *error)
{
    if (!path || !out)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_npy_open: NULL argument");
    *out = NULL;
    int fd = -1;
    struct stat sb;
    QEM_TRY(qem_open_input(path, &fd, &sb, error));
    qem_npy *npy = calloc(1, sizeof *npy);
    char *header = NULL;
    qem_status st = QEM_OK;
    if (!npy || !(npy->path = strdup(path))) {
        st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        goto fail;
    }
    npy->fd = fd;
    unsigned char pre[12];
    if ((uint64_t)sb.st_size < 10 ||
        qem_pread_full(fd, pre, 10, 0, QEM_E_NPY, error) != QEM_OK ||
        memcmp(pre, NPY_MAGIC, 6) != 0) {
        st = qem_fail(error, QEM_E_NPY, "'%s' is not a .npy file (no \\x93NUMPY signature)", path);
        goto fail;
    }
    unsigned major = pre[6];
    uint64_t header_len, header_start;
    if (major == 1) {
        header_len = (uint64_t)pre[8] | ((uint64_t)pre[9] << 8);
        header_start = 10;
    } else if (major == 2 || major == 3) {
        if ((uint64_t)sb.st_size < 12 ||
            qem_pread_full(fd, pre, 12, 0, QEM_E_NPY, error) != QEM_OK) {
            st = qem_fail(error, QEM_E_NPY, "'%s' is truncated inside its header", path);
            goto fail;
        }
        header_len = (uint64_t)pre[8] | ((uint64_t)pre[9] << 8) | ((uint64_t)pre[10] << 16) |
                     ((uint64_t)pre[11] << 24);
        header_start = 12;
    } else {
        st = qem_fail(error, QEM_E_NPY, "'%s' uses .npy format version %u, which qem does not know",
                      path, major);
        goto fail;
    }
    if (header_len > NPY_MAX_HEADER || header_start + header_len > (uint64_t)sb.st_size) {
        st = qem_fail(error, QEM_E_NPY, "'%s' is truncated inside its header", path);
        goto fail;
    }
    header = malloc(header_len + 1);
    if (!header) {
        st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        goto fail;
    }
    st = qem_pread_full(fd, header, header_len, header_start, QEM_E_NPY, error);
    if (st != QEM_OK)
        goto fail;
    header[header_len] = '\0';
    int fortran = 0;
    qem_npy_info *info = &npy->info;
    st = parse_header(header, header_len, path, info, &fortran, error);
    if (st != QEM_OK)
        goto fail;
    if (fortran) {
        st = qem_fail(error, QEM_E_NPY,
                      "'%s' is stored in Fortran order; save it in C order with "
                      "numpy.save(path, numpy.ascontiguousarray(array))",
                      path);
        goto fail;
    }
    st = classify_descr(info, path, acquisition, error);
    if (st != QEM_OK)
        goto fail;
    info->data_offset = header_start + header_len;
    info->version_major = major;
    info->version_minor = pre[7];
    uint64_t elements = 1, bytes;
    for (unsigned i = 0; i < info->ndim; i++) {
        if (qem_mul_overflow_u64(elements, info->shape[i], &elements)) {
            st = qem_fail(error, QEM_E_NPY, "'%s' declares an impossibly large shape", path);
            goto fail;
        }
    }
    if (qem_mul_overflow_u64(elements, qem_dtype_size(info->dtype), &bytes) ||
        qem_add_overflow_u64(bytes, info->data_offset, &bytes)) {
        st = qem_fail(error, QEM_E_NPY, "'%s' declares an impossibly large shape", path);
        goto fail;
    }
    info->elements = elements;
    if (bytes > (uint64_t)sb.st_size) {
        st = qem_fail(error, QEM_E_NPY,
                      "'%s' is truncated: its header declares %llu data bytes but only %llu are "
                      "present; recopy the file",
                      path, (unsigned long long)(bytes - info->data_offset),
                      (unsigned long long)((uint64_t)sb.st_size - info->data_offset));
        goto fail;
    }
    if (bytes < (uint64_t)sb.st_size) {
        st = qem_fail(error, QEM_E_NPY,
                      "'%s' has %llu bytes after the array its header declares; it is not a "
                      "plain .npy file",
                      path, (unsigned long long)((uint64_t)sb.st_size - bytes));
        goto fail;
    }
    free(header);
    *out = npy;
    return QEM_OK;
fail:
    free(header);
    if (npy) {
        free(npy->path);
        free(npy);
    }
    close(fd);
    return st;
}

void qem_npy_close(qem_npy *npy)
{
    if (!npy)
        return;
    close(npy->fd);
    free(npy->path);
    free(npy);
}

qem_status qem_npy_get_info(const qem_npy *npy, qem_npy_info *info, qem_error *error)
{
    qem_error_clear(error);
    if (!npy)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_npy_get_info: NULL array");
    return qem_result_deliver(info, &npy->info, sizeof npy->info, "qem_npy_info", error);
}

qem_status qem_npy_read(qem_npy *npy, uint64_t first, uint64_t count, void *out, size_t out_size,
                        qem_error *error)
{
    qem_error_clear(error);
    if (!npy || (!out && count))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_npy_read: NULL argument");
    if (first > npy->info.elements || count > npy->info.elements - first)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "qem_npy_read: elements [%llu, +%llu) outside the array",
                        (unsigned long long)first, (unsigned long long)count);
    size_t item = qem_dtype_size(npy->info.dtype);
    if (out_size / item < count)
        return qem_fail(error, QEM_E_BUFFER_TOO_SMALL,
                        "qem_npy_read: %llu elements need %llu bytes, %zu given",
                        (unsigned long long)count, (unsigned long long)(count * item), out_size);
    return qem_pread_full(npy->fd, out, (size_t)(count * item),
                          npy->info.data_offset + first * item, QEM_E_NPY, error);
}

qem_status qem_npy_read_mask(const char *path, uint64_t rows, uint64_t columns, uint8_t *mask,
                             size_t mask_size, qem_error *error)
{
    qem_error_clear(error);
    if (!path || !mask)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_npy_read_mask: NULL argument");
    if (rows && columns > mask_size / rows)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "qem_npy_read_mask: a %llux%llu mask needs more than %zu bytes",
                        (unsigned long long)rows, (unsigned long long)columns, mask_size);
    qem_npy *npy = NULL;
    QEM_TRY(qem_npy_open(path, &npy, error));
    qem_npy_info info = npy->info;
    qem_status st = QEM_OK;
    if (info.ndim != 2 || info.shape[0] != rows || info.shape[1] != columns) {
        st = qem_fail(error, QEM_E_NPY,
                      "mask '%s' must be 2D with the detector shape %llux%llu", path,
                      (unsigned long long)rows, (unsigned long long)columns);
    } else if (info.dtype != QEM_DTYPE_UINT8) {
        st = qem_fail(error, QEM_E_NPY, "mask '%s' must be bool or uint8 (0/1), not %s", path,
                      info.descr);
    } else {
        st = qem_npy_read(npy, 0, rows * columns, mask, mask_size, error);
        for (uint64_t i = 0; st == QEM_OK && i < rows * columns; i++) {
            if (mask[i] > 1)
                st = qem_fail(error, QEM_E_NPY,
                              "mask '%s' holds %u at pixel %llu; masks contain only 0 and 1",
                              path, mask[i], (unsigned long long)i);
        }
    }
    qem_npy_close(npy);
    return st;
}

/* --- writer ------------------------------------------------------------ */

struct qem_npy_writer {
    qem_publish publish;
    char *dest_for_errors; /* kept past the publication */
    size_t item;
    uint64_t expected;
    uint64_t written;
};

qem_status qem_npy_header(qem_dtype dtype, unsigned ndim, const uint64_t *shape, void *header,
                          size_t header_size, size_t *length, qem_error *error)
{
    qem_error_clear(error);
    if (!header || !length || (ndim && !shape) || ndim > 8)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_npy_header: bad argument");
    const char *descr = dtype == QEM_DTYPE_UINT8     ? "|u1"
                        : dtype == QEM_DTYPE_UINT16  ? "<u2"
                        : dtype == QEM_DTYPE_FLOAT32 ? "<f4"
                        : dtype == QEM_DTYPE_UINT32  ? "<u4"
                        : dtype == QEM_DTYPE_UINT64  ? "<u8"
                        : dtype == QEM_DTYPE_FLOAT64 ? "<f8"
                                                     : NULL;
    if (!descr)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_npy_header: bad dtype");
    char dict[512];
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    uint64_t elements = 1;
    for (unsigned i = 0; i < ndim; i++) {
        if (qem_mul_overflow_u64(elements, shape[i], &elements))
            return qem_fail(error, QEM_E_INVALID_ARGUMENT, "shape too large");
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%llu%s", (unsigned long long)shape[i],
                      (ndim == 1 || i + 1 < ndim) ? ", " : "");
    }
    n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
    /* Pad with spaces so the data starts on a 64-byte boundary. */
    const size_t padded = (10 + (size_t)n + 1 + 63) / 64 * 64;
    const size_t header_len = padded - 10;
    if (header_size < padded)
        return qem_fail(error, QEM_E_BUFFER_TOO_SMALL,
                        "qem_npy_header: %zu bytes given, the header needs %zu", header_size,
                        padded);
    unsigned char *pre = header;
    memcpy(pre, NPY_MAGIC, 6);
    pre[6] = 1;
    pre[7] = 0;
    pre[8] = (unsigned char)(header_len & 255);
    pre[9] = (unsigned char)(header_len >> 8);
    memcpy(pre + 10, dict, (size_t)n);
    memset(pre + 10 + n, ' ', header_len - (size_t)n - 1);
    pre[padded - 1] = '\n';
    *length = padded;
    return QEM_OK;
}

qem_status qem_npy_writer_create(const char *dest, qem_dtype dtype, unsigned ndim,
                                 const uint64_t *shape, qem_npy_writer **out, qem_error *error)
{
    qem_error_clear(error);
    if (!dest || !out || (ndim && !shape) || ndim > 8)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_npy_writer_create: bad argument");
    unsigned char pre[QEM_NPY_HEADER_MAX];
    size_t padded = 0;
    QEM_TRY(qem_npy_header(dtype, ndim, shape, pre, sizeof pre, &padded, error));
    uint64_t elements = 1;
    for (unsigned i = 0; i < ndim; i++)
        elements *= shape[i]; /* checked by qem_npy_header */

    qem_npy_writer *w = calloc(1, sizeof *w);
    if (!w)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    qem_status st = qem_publish_begin(&w->publish, dest, error);
    if (st == QEM_OK && !(w->dest_for_errors = strdup(dest)))
        st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    if (st == QEM_OK)
        st = qem_write_full(w->publish.fd, pre, padded, error);
    if (st != QEM_OK) {
        qem_error_name_destination(error, dest);
        qem_npy_writer_free(w);
        return st;
    }
    w->item = qem_dtype_size(dtype);
    w->expected = elements;
    *out = w;
    return QEM_OK;
}

static qem_status qem_npy_writer_append_body(qem_npy_writer *w, const void *data, uint64_t count,
                                 qem_error *error)
{
    qem_error_clear(error);
    if (!w || (!data && count))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_npy_writer_append: NULL argument");
    if (count > w->expected - w->written)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "more elements appended than the declared shape holds");
    QEM_TRY(qem_write_full(w->publish.fd, data, (size_t)(count * w->item), error));
    w->written += count;
    return QEM_OK;
}

qem_status qem_npy_writer_append(qem_npy_writer *w, const void *data, uint64_t count,
                                 qem_error *error)
{
    const qem_status st = qem_npy_writer_append_body(w, data, count, error);
    qem_error_name_destination(error, w->dest_for_errors);
    return st;
}

static qem_status qem_npy_writer_finish_body(qem_npy_writer *w, qem_error *error)
{
    qem_error_clear(error);
    if (!w)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_npy_writer_finish: NULL argument");
    if (w->written != w->expected)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "only %llu of %llu elements were written",
                        (unsigned long long)w->written, (unsigned long long)w->expected);
    return qem_publish_commit(&w->publish, error);
}

qem_status qem_npy_writer_finish(qem_npy_writer *w, qem_error *error)
{
    const qem_status st = qem_npy_writer_finish_body(w, error);
    qem_error_name_destination(error, w->dest_for_errors);
    return st;
}

void qem_npy_writer_free(qem_npy_writer *w)
{
    if (!w)
        return;
    qem_publish_abort(&w->publish);
    free(w->dest_for_errors);
    free(w);
}

int qem_npy_descriptor(const qem_npy *npy)
{
    return npy->fd;
}

const qem_npy_info *qem_npy_info_of(const qem_npy *npy)
{
    return &npy->info;
}
