/* Declared sizes that a small file cannot back are refused before any
 * allocation for them: .qem shapes (checksums intact, so only the rule
 * can stop them), header lengths, .npy header lengths and shapes, pack
 * manifest and index lengths. The refusal must be the specific rule, not
 * an out-of-memory after trying. (Pack detectors larger than their file:
 * unit_pack_rules.) */
#include <jansson.h>

#include "pack_build.h"
#include "qem_build.h"
#include "test_util.h"

static void put_le(uint8_t *p, uint64_t v, int bytes)
{
    for (int k = 0; k < bytes; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}

/* A small float .qem whose header claims a 2^23 x 2^23 detector. */
static void qem_huge_shape(void)
{
    qem_error e = {0};
    const uint64_t shape[4] = {2, 2, 8, 8};
    float values[4 * 64] = {0};
    qem_writer *w = NULL;
    CHECK_OK(qem_writer_create(test_path("small.qem"), QEM_DTYPE_FLOAT32, shape, NULL, &w, &e), &e);
    CHECK_OK(qem_writer_append(w, values, 4, &e), &e);
    CHECK_OK(qem_writer_finish(w, &e), &e);
    qem_writer_free(w);
    qem_parts parts;
    CHECK(qem_parts_load(test_path("small.qem"), &parts));
    json_t *s = json_object_get(parts.header, "shape");
    json_array_set_new(s, 2, json_integer(1 << 23));
    json_array_set_new(s, 3, json_integer(1 << 23));
    /* The metadata agrees, so that only the size rule can stop it. */
    json_t *axes = json_object_get(json_object_get(parts.header, "scientific_metadata"), "axes");
    for (size_t k = 2; k < 4; k++)
        json_object_set_new(json_array_get(axes, k), "size", json_integer(1 << 23));
    CHECK(qem_parts_write(test_path("huge.qem"), parts.header, parts.body, parts.body_size, 1));
    qem_parts_free(&parts);
    qem_file *f = NULL;
    const qem_status st = qem_open(test_path("huge.qem"), NULL, &f, &e);
    /* The body rule stops it, not an allocation for 2^46 pixels. */
    CHECK_STATUS(st, QEM_E_LAYOUT, &e);
    CHECK(strstr(e.message, "more than a") != NULL);
    qem_close(f);
}

/* A .qem prefix whose header length field says 2^40 bytes. */
static void qem_huge_header(void)
{
    size_t n = 0;
    uint8_t *b = read_file(test_path("small.qem"), &n);
    CHECK(b != NULL);
    if (!b)
        return;
    put_le(b + 8, (uint64_t)1 << 40, 8);
    CHECK(write_file(test_path("long_header.qem"), b, n));
    free(b);
    qem_error e = {0};
    qem_file *f = NULL;
    const qem_status st = qem_open(test_path("long_header.qem"), NULL, &f, &e);
    CHECK(st != QEM_OK && st != QEM_E_NO_MEMORY);
    qem_close(f);
}

static void npy_limits(void)
{
    qem_error e = {0};
    qem_npy *n = NULL;
    /* Version 2 header length 0xffffffff in a 64-byte file. */
    uint8_t v2[64] = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0};
    put_le(v2 + 8, 0xffffffffu, 4);
    CHECK(write_file(test_path("long.npy"), v2, sizeof v2));
    qem_status st = qem_npy_open(test_path("long.npy"), &n, &e);
    CHECK(st != QEM_OK && st != QEM_E_NO_MEMORY);
    qem_npy_close(n);
    /* A shape of 2^40 uint16 values in a file of a few bytes. */
    const char dict[] = "{'descr': '<u2', 'fortran_order': False, 'shape': (1099511627776,), }";
    uint8_t v1[128];
    memset(v1, ' ', sizeof v1);
    memcpy(v1, "\x93NUMPY\x01\x00", 8);
    put_le(v1 + 8, 118, 2);
    memcpy(v1 + 10, dict, sizeof dict - 1);
    v1[127] = '\n';
    CHECK(write_file(test_path("big_shape.npy"), v1, sizeof v1));
    n = NULL;
    st = qem_npy_open(test_path("big_shape.npy"), &n, &e);
    CHECK(st != QEM_OK && st != QEM_E_NO_MEMORY);
    qem_npy_close(n);
}

static void pack_limits(void)
{
    static uint16_t data[4 * 32 * 16 * 16];
    for (size_t k = 0; k < sizeof data / 2; k++)
        data[k] = (uint16_t)(k % 7);
    const pack_spec spec = {QEM_PACK_UINT16_LZ4, {4, 32, 16, 16}, 64, data, NULL, 0, 0,
                            QEM_DTYPE_UINT16, 0, 0};
    CHECK(pack_build(test_path("small.h5"), &spec, NULL));
    size_t n = 0;
    uint8_t *b = read_file(test_path("small.h5"), &n);
    CHECK(b != NULL);
    if (!b)
        return;
    static const struct {
        const char *name;
        size_t at;
        uint64_t value;
    } edits[] = {{"manifest length 2^31", 8, (uint64_t)1 << 31},
                 {"index offset past the file", 16, 0xfffffff0u},
                 {"index length 2^31", 20, (uint64_t)1 << 31}};
    for (size_t k = 0; k < sizeof edits / sizeof edits[0]; k++) {
        uint8_t *c = malloc(n);
        memcpy(c, b, n);
        put_le(c + edits[k].at, edits[k].value, 4);
        char name[64];
        snprintf(name, sizeof name, "limit_%zu.h5", k);
        CHECK(write_file(test_path(name), c, n));
        free(c);
        qem_error e = {0};
        qem_pack *p = NULL;
        const qem_status st = qem_pack_open(test_path(name), NULL, &p, &e);
        if (st == QEM_OK || st == QEM_E_NO_MEMORY)
            fprintf(stderr, "%s: status %d\n", edits[k].name, (int)st);
        CHECK(st != QEM_OK && st != QEM_E_NO_MEMORY);
        qem_pack_close(p);
    }
    free(b);
}

int main(void)
{
    qem_huge_shape();
    qem_huge_header();
    npy_limits();
    pack_limits();
    return test_finish("unit_resource_limits");
}
