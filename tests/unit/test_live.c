/* Live recording's pieces below the receivers: stream addresses, and a
 * writer ended early (qem_writer_shorten), whose file must be byte for
 * byte the file a writer of the shorter shape writes from the same scans. */
#include <string.h>

#include "live/live.h"
#include "qem/qem_internal.h"
#include "test_util.h"

static void addresses(void)
{
    qem_error e = {0};
    live_address a;
    CHECK_OK(qem_live_parse_url("merlin://detector", &a, &e), &e);
    CHECK(a.protocol == LIVE_MERLIN && a.port == LIVE_MERLIN_PORT && !strcmp(a.host, "detector"));
    CHECK_OK(qem_live_parse_url("dectris://10.0.0.2:31001", &a, &e), &e);
    CHECK(a.protocol == LIVE_DECTRIS && a.port == 31001 && !strcmp(a.host, "10.0.0.2"));
    CHECK_OK(qem_live_parse_url("merlin://[::1]:7000", &a, &e), &e);
    CHECK(a.port == 7000 && !strcmp(a.host, "::1"));
    CHECK_OK(qem_live_parse_url("dectris://[fe80::1]", &a, &e), &e);
    CHECK(a.port == LIVE_DECTRIS_PORT && !strcmp(a.host, "fe80::1"));
    static const char *const bad[] = {"http://host",       "merlin://",         "merlin://:6342",
                                      "merlin://host:",    "merlin://host:0",   "merlin://h:65536",
                                      "merlin://h:-1",     "merlin://h:+5",     "merlin://h:12x",
                                      "merlin://h/path",   "dectris://[::1",    "dectris://[::1]x",
                                      "MERLIN://host",     "merlin:/host"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        qem_error local = {0};
        CHECK_STATUS(qem_live_parse_url(bad[i], &a, &local), QEM_E_INVALID_ARGUMENT, &local);
        CHECK(strstr(local.message, "://HOST") != NULL);
    }
}

/* A writer of `shape` given `appended` scans of `data`, shortened to
 * `rows` (when fewer than the shape's) and completed with zeros. */
static uint8_t *write_shortened(const char *name, const uint64_t shape[4], uint64_t appended,
                                uint64_t rows, const uint16_t *data, size_t *size)
{
    qem_error e = {0};
    qem_save_options o;
    qem_save_options_init(&o);
    o.chunk_scans = 4;
    qem_writer *w = NULL;
    const char *path = test_path(name);
    CHECK_OK(qem_writer_create(path, QEM_DTYPE_UINT16, shape, &o, &w, &e), &e);
    CHECK_OK(qem_writer_append(w, data, appended, &e), &e);
    if (rows != shape[0]) {
        CHECK_OK(qem_writer_shorten(w, rows, &e), &e);
        uint16_t zeros[64 * 16] = {0};
        CHECK_OK(qem_writer_append(w, zeros, rows * shape[1] - appended, &e), &e);
    }
    CHECK_OK(qem_writer_finish(w, &e), &e);
    qem_writer_free(w);
    return read_file(path, size);
}

static void shortened_writer(void)
{
    uint16_t data[64 * 16];
    uint64_t state = 7;
    for (size_t i = 0; i < sizeof data / sizeof data[0]; i++)
        data[i] = (uint16_t)(test_rand(&state) % 9);
    /* 7 scans of a 5 x 3 scan, ended after 3 rows: 2 zero scans; the
     * second case ends exactly at a row (the window then holds a whole
     * chunk that only the shortening completes). */
    const uint64_t tall[4] = {5, 3, 4, 4}, short_shape[4] = {3, 3, 4, 4};
    uint16_t padded[9 * 16] = {0};
    memcpy(padded, data, 7 * 16 * sizeof *data);
    size_t na = 0, nb = 0;
    uint8_t *a = write_shortened("short_a.qem", tall, 7, 3, data, &na);
    uint8_t *b = write_shortened("short_b.qem", short_shape, 9, 3, padded, &nb);
    CHECK(a && b && na == nb && memcmp(a, b, na) == 0);
    free(a);
    free(b);
    const uint64_t row_end[4] = {4, 2, 4, 4}, row_short[4] = {2, 2, 4, 4};
    a = write_shortened("short_c.qem", row_end, 4, 2, data, &na);
    b = write_shortened("short_d.qem", row_short, 4, 2, data, &nb);
    CHECK(a && b && na == nb && memcmp(a, b, na) == 0);
    free(a);
    free(b);

    /* Refusals: fewer rows than the scans appended, none, more than the
     * shape; the writer stays usable after each. */
    qem_error e = {0};
    qem_writer *w = NULL;
    CHECK_OK(qem_writer_create(test_path("short_e.qem"), QEM_DTYPE_UINT16, tall, NULL, &w, &e),
             &e);
    CHECK_OK(qem_writer_append(w, data, 7, &e), &e);
    CHECK_STATUS(qem_writer_shorten(w, 2, &e), QEM_E_INVALID_ARGUMENT, &e);
    CHECK_STATUS(qem_writer_shorten(w, 0, &e), QEM_E_INVALID_ARGUMENT, &e);
    CHECK_STATUS(qem_writer_shorten(w, 6, &e), QEM_E_INVALID_ARGUMENT, &e);
    CHECK_OK(qem_writer_shorten(w, 3, &e), &e);
    CHECK_STATUS(qem_writer_finish(w, &e), QEM_E_INVALID_ARGUMENT, &e); /* 2 scans missing */
    qem_writer_free(w);
    CHECK(!file_exists(test_path("short_e.qem")));
}

int main(void)
{
    addresses();
    shortened_writer();
    return test_finish("unit_live");
}
