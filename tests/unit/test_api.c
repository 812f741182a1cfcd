/* Public API conventions: every status has its own description, NULL
 * arguments are refused, options structs must be initialised and may come
 * from an older, smaller definition. */
#include <stddef.h>

#include "test_util.h"
#include "qem/qem_internal.h" /* qem_file_export_npy */

int main(void)
{
    CHECK(!strcmp(qem_version(), QEM_VERSION_STRING));
    /* Distinct, non-empty descriptions for every status. */
    for (int a = QEM_OK; a <= QEM_E_STREAM; a++) {
        const char *s = qem_strerror((qem_status)a);
        CHECK(s && *s && strcmp(s, "unknown status") != 0);
        for (int b = QEM_OK; b < a; b++)
            CHECK(strcmp(s, qem_strerror((qem_status)b)) != 0);
    }
    CHECK(!strcmp(qem_strerror((qem_status)999), "unknown status"));
    CHECK_EQ_U64(qem_dtype_size(QEM_DTYPE_UINT16), 2);
    CHECK(!strcmp(qem_codec_name(QEM_CODEC_SCALED), "scaled-uint16-column-rans-v1"));

    qem_error e = {0};
    qem_file *f = NULL;
    CHECK_STATUS(qem_open(NULL, NULL, &f, &e), QEM_E_INVALID_ARGUMENT, &e);
    CHECK_STATUS(qem_open("x.qem", NULL, NULL, &e), QEM_E_INVALID_ARGUMENT, &e);
    CHECK_STATUS(qem_read_scans(NULL, 0, 1, NULL, 0, &e), QEM_E_INVALID_ARGUMENT, &e);
    CHECK_STATUS(qem_verify(NULL, NULL, NULL, &e), QEM_E_INVALID_ARGUMENT, &e);
    qem_close(NULL);
    qem_writer_free(NULL);
    qem_npy_close(NULL);
    qem_npy_writer_free(NULL);

    /* Build a small file to open with various options structs. */
    const uint64_t shape[4] = {1, 2, 3, 3};
    uint8_t data[18] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 0, 0, 0, 255, 0, 0, 0, 0};
    qem_writer *w = NULL;
    qem_save_options so;
    memset(&so, 0, sizeof so); /* struct_size 0: never initialised */
    CHECK_STATUS(qem_writer_create(test_path("a.qem"), QEM_DTYPE_UINT8, shape, &so, &w, &e),
                 QEM_E_INVALID_ARGUMENT, &e);
    CHECK(strstr(e.message, "qem_save_options_init") != NULL);
    qem_save_options_init(&so);
    CHECK_OK(qem_writer_create(test_path("a.qem"), QEM_DTYPE_UINT8, shape, &so, &w, &e), &e);
    CHECK_OK(qem_writer_append(w, data, 2, &e), &e);
    CHECK_OK(qem_writer_finish(w, &e), &e);
    qem_writer_free(w);

    qem_open_options oo;
    qem_open_options_init(&oo);
    oo.struct_size = 3; /* implausible */
    CHECK_STATUS(qem_open(test_path("a.qem"), &oo, &f, &e), QEM_E_INVALID_ARGUMENT, &e);
    /* An older caller whose struct ends before `threads`: defaults apply. */
    qem_open_options_init(&oo);
    oo.struct_size = offsetof(qem_open_options, threads);
    oo.threads = -77;
    CHECK_OK(qem_open(test_path("a.qem"), &oo, &f, &e), &e);
    uint8_t back[18];
    CHECK_OK(qem_read_scans(f, 0, 2, back, sizeof back, &e), &e);
    CHECK(memcmp(back, data, sizeof data) == 0);
    qem_verify_options vo;
    memset(&vo, 0, sizeof vo);
    CHECK_STATUS(qem_verify(f, &vo, NULL, &e), QEM_E_INVALID_ARGUMENT, &e);
    qem_export_options xo;
    memset(&xo, 0, sizeof xo);
    CHECK_STATUS(qem_file_export_npy(f, test_path("a.npy"), &xo, &e), QEM_E_INVALID_ARGUMENT, &e);
    CHECK(!file_exists(test_path("a.npy")));

    /* The summary is JSON with the facts a person asks for first. */
    char *summary = qem_summary_json(f, NULL);
    CHECK(summary && strstr(summary, "\"compression_ratio\"") && strstr(summary, "\"uint8\""));
    qem_free(summary);
    size_t hlen = 0;
    const char *h = qem_header_json(f, &hlen);
    CHECK(h && hlen > 0 && h[0] == '{');
    qem_close(f);
    return test_finish("unit_api");
}
