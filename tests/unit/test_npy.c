/* .npy reading and writing: accepted layouts round-trip; everything else
 * is refused with guidance rather than misread. */
#include "test_util.h"

/* Writes a .npy with a hand-made header dict and `data_bytes` zero bytes. */
static const char *raw_npy(const char *name, int major, const char *dict, size_t data_bytes)
{
    const char *path = test_path(name);
    size_t dict_len = strlen(dict);
    size_t pre = major == 1 ? 10 : 12;
    size_t total = (pre + dict_len + 1 + 63) / 64 * 64;
    size_t hlen = total - pre;
    uint8_t *buf = calloc(1, total + data_bytes);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (uint8_t)major;
    buf[8] = (uint8_t)(hlen & 255);
    buf[9] = (uint8_t)(hlen >> 8);
    memcpy(buf + pre, dict, dict_len);
    memset(buf + pre + dict_len, ' ', hlen - dict_len - 1);
    buf[total - 1] = '\n';
    write_file(path, buf, total + data_bytes);
    free(buf);
    return path;
}

static qem_status open_status(const char *path, qem_error *e)
{
    qem_npy *n = NULL;
    qem_status st = qem_npy_open(path, &n, e);
    qem_npy_close(n);
    return st;
}

int main(void)
{
    qem_error e = {0};
    /* Writer then reader: header fields and data survive. */
    uint64_t shape[4] = {2, 3, 4, 5};
    uint16_t data[120];
    for (int i = 0; i < 120; i++)
        data[i] = (uint16_t)(i * 541);
    CHECK(write_npy4(test_path("a.npy"), QEM_DTYPE_UINT16, shape, data));
    qem_npy *n = NULL;
    CHECK_OK(qem_npy_open(test_path("a.npy"), &n, &e), &e);
    if (n) {
        qem_npy_info info = {.struct_size = sizeof info};
        qem_npy_get_info(n, &info, NULL);
        CHECK_EQ_U64(info.dtype, QEM_DTYPE_UINT16);
        CHECK_EQ_U64(info.ndim, 4);
        CHECK(info.shape[0] == 2 && info.shape[1] == 3 && info.shape[2] == 4 && info.shape[3] == 5);
        CHECK_EQ_U64(info.data_offset % 64, 0);
        uint16_t back[30];
        CHECK_OK(qem_npy_read(n, 60, 30, back, sizeof back, &e), &e);
        CHECK(memcmp(back, data + 60, sizeof back) == 0);
        CHECK_STATUS(qem_npy_read(n, 100, 30, back, sizeof back, &e), QEM_E_INVALID_ARGUMENT, &e);
        /* A buffer one element short is refused, not overrun. */
        CHECK_STATUS(qem_npy_read(n, 60, 30, back, sizeof back - 2, &e), QEM_E_BUFFER_TOO_SMALL, &e);
        qem_npy_close(n);
    }
    /* The header for in-memory bodies is the writer's, byte for byte; a
     * buffer too small for it is refused. */
    {
        size_t file_size = 0, length = 0;
        uint8_t *file = read_file(test_path("a.npy"), &file_size);
        uint8_t header[QEM_NPY_HEADER_MAX];
        CHECK_OK(qem_npy_header(QEM_DTYPE_UINT16, 4, shape, header, sizeof header, &length, &e),
                 &e);
        CHECK(file && length == file_size - sizeof data && length % 64 == 0);
        CHECK(file && memcmp(file, header, length) == 0);
        free(file);
        CHECK_STATUS(qem_npy_header(QEM_DTYPE_UINT16, 4, shape, header, length - 1, &length, &e),
                     QEM_E_BUFFER_TOO_SMALL, &e);
        CHECK_STATUS(qem_npy_header((qem_dtype)99, 2, shape, header, sizeof header, &length, &e),
                     QEM_E_INVALID_ARGUMENT, &e);
    }
    /* Existing destinations are never overwritten. */
    qem_npy_writer *w = NULL;
    CHECK_STATUS(qem_npy_writer_create(test_path("a.npy"), QEM_DTYPE_UINT8, 4, shape, &w, &e),
                 QEM_E_EXISTS, &e);

    /* Version 2 headers, bool and uint8 descr, Python 2 long suffixes. */
    CHECK_OK(open_status(raw_npy("v2.npy", 2, "{'descr': '<u2', 'fortran_order': False, 'shape': (2, 2, 2, 2), }", 32), &e), &e);
    CHECK_OK(open_status(raw_npy("b1.npy", 1, "{'descr': '|b1', 'fortran_order': False, 'shape': (4L, 4L), }", 16), &e), &e);
    CHECK_OK(open_status(raw_npy("f4.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 2, 2), }", 16), &e), &e);

    /* Refusals, each with its own guidance. */
    CHECK_STATUS(open_status(raw_npy("fortran.npy", 1, "{'descr': '<u2', 'fortran_order': True, 'shape': (2, 2, 2, 2), }", 32), &e), QEM_E_NPY, &e);
    CHECK(strstr(e.message, "Fortran") != NULL);
    CHECK_STATUS(open_status(raw_npy("big.npy", 1, "{'descr': '>u2', 'fortran_order': False, 'shape': (2, 2, 2, 2), }", 32), &e), QEM_E_NPY, &e);
    CHECK(strstr(e.message, "big-endian") != NULL);
    CHECK_STATUS(open_status(raw_npy("i4.npy", 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 2, 2, 2), }", 64), &e), QEM_E_NPY, &e);
    CHECK(strstr(e.message, "<i4") != NULL);
    CHECK_STATUS(open_status(raw_npy("struct.npy", 1, "{'descr': [('a', '<u2')], 'fortran_order': False, 'shape': (2,), }", 4), &e), QEM_E_NPY, &e);
    CHECK_STATUS(open_status(raw_npy("short.npy", 1, "{'descr': '<u2', 'fortran_order': False, 'shape': (2, 2, 2, 2), }", 31), &e), QEM_E_NPY, &e);
    CHECK(strstr(e.message, "truncated") != NULL);
    CHECK_STATUS(open_status(raw_npy("long.npy", 1, "{'descr': '<u2', 'fortran_order': False, 'shape': (2, 2, 2, 2), }", 33), &e), QEM_E_NPY, &e);
    CHECK_STATUS(open_status(raw_npy("garbled.npy", 1, "{'descr': '<u2', 'fortran_order': Maybe, 'shape': (2,), }", 4), &e), QEM_E_NPY, &e);
    CHECK_STATUS(open_status(raw_npy("v9.npy", 9, "{}", 0), &e), QEM_E_NPY, &e);
    CHECK(write_file(test_path("magic.npy"), "NUMPY not really", 16));
    CHECK_STATUS(open_status(test_path("magic.npy"), &e), QEM_E_NPY, &e);
    CHECK(write_file(test_path("tiny.npy"), "\x93NUM", 4));
    CHECK_STATUS(open_status(test_path("tiny.npy"), &e), QEM_E_NPY, &e);
    CHECK_STATUS(open_status(test_path("missing.npy"), &e), QEM_E_IO, &e);

    /* Saving: float32 takes the float codec; non-4D arrays are refused. */
    CHECK_OK(qem_save_file(test_path("f4.npy"), test_path("f4.qem"), NULL, &e), &e);
    CHECK_STATUS(qem_save_file(test_path("b1.npy"), test_path("b1.qem"), NULL, &e), QEM_E_NPY, &e);
    CHECK(strstr(e.message, "booleans") != NULL);
    CHECK(file_exists(test_path("f4.qem")) && !file_exists(test_path("b1.qem")));

    /* Masks: 2D of the detector shape, values 0/1 only. */
    uint8_t mask[20]; /* room for the 4x5 request refused below */
    CHECK_OK(qem_npy_read_mask(test_path("b1.npy"), 4, 4, mask, sizeof mask, &e), &e);
    CHECK_STATUS(qem_npy_read_mask(test_path("b1.npy"), 4, 5, mask, sizeof mask, &e), QEM_E_NPY, &e);
    uint8_t twos[16];
    memset(twos, 2, sizeof twos);
    qem_npy_writer *mw = NULL;
    uint64_t mshape[2] = {4, 4};
    CHECK_OK(qem_npy_writer_create(test_path("m2.npy"), QEM_DTYPE_UINT8, 2, mshape, &mw, &e), &e);
    CHECK_OK(qem_npy_writer_append(mw, twos, 16, &e), &e);
    CHECK_OK(qem_npy_writer_finish(mw, &e), &e);
    qem_npy_writer_free(mw);
    CHECK_STATUS(qem_npy_read_mask(test_path("m2.npy"), 4, 4, mask, sizeof mask, &e), QEM_E_NPY, &e);
    CHECK(strstr(e.message, "only 0 and 1") != NULL);

    /* An unfinished writer leaves nothing behind. */
    CHECK_OK(qem_npy_writer_create(test_path("partial.npy"), QEM_DTYPE_UINT8, 2, mshape, &mw, &e), &e);
    CHECK_OK(qem_npy_writer_append(mw, twos, 8, &e), &e);
    CHECK_STATUS(qem_npy_writer_finish(mw, &e), QEM_E_INVALID_ARGUMENT, &e);
    qem_npy_writer_free(mw);
    CHECK(!file_exists(test_path("partial.npy")));
    CHECK_EQ_U64(count_entries(test_dir(), ".qem-"), 0);
    return test_finish("unit_npy");
}
