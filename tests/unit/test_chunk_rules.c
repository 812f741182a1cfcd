/* Rules checked when a chunk's arrays are read: payload offsets, model
 * selectors, spans, values against the dtype, and the spatial index. The
 * files carry valid checksums, so only these rules can catch the damage. */
#include "common/sha256.h"
#include "qem_build.h"

static qem_parts base;
static uint64_t o_offsets, o_models, o_words, o_soffsets, o_widths;
static uint64_t payload_count;
static const uint64_t P = 64, F = 2, N = 6;
static int case_no;

typedef enum { AT_OPEN, AT_READ, AT_VERIFY } stage;

/* Applies `edit` to a copy of the body, rehashes, and checks where and
 * how the file is refused. */
static void expect(const char *what, void (*edit)(uint8_t *body, json_t *h), stage where,
                   qem_status expected)
{
    char name[32];
    snprintf(name, sizeof name, "chunk%d.qem", case_no++);
    const char *path = test_path(name);
    uint8_t *body = malloc(base.body_size);
    memcpy(body, base.body, base.body_size);
    json_t *h = json_deep_copy(base.header);
    edit(body, h);
    qem_parts_write(path, h, body, base.body_size, 1);
    json_decref(h);
    free(body);

    qem_error e = {0};
    qem_file *f = NULL;
    qem_status st = qem_open(path, NULL, &f, &e);
    if (where == AT_OPEN) {
        if (st != expected)
            fprintf(stderr, "case '%s'\n", what);
        CHECK_STATUS(st, expected, &e);
        qem_close(f);
        return;
    }
    CHECK_OK(st, &e);
    if (!f)
        return;
    uint16_t frames[6 * 64];
    st = qem_read_scans(f, 0, N, frames, sizeof frames, &e);
    if (st != (where == AT_READ ? expected : QEM_OK))
        fprintf(stderr, "case '%s' (read)\n", what);
    CHECK_STATUS(st, where == AT_READ ? expected : QEM_OK, &e);
    st = qem_verify(f, NULL, NULL, &e);
    if (st != expected)
        fprintf(stderr, "case '%s' (verify)\n", what);
    CHECK_STATUS(st, expected, &e);
    qem_close(f);
}

static uint32_t get_u32(const uint8_t *b, uint64_t off)
{
    uint32_t v;
    memcpy(&v, b + off, 4);
    return v;
}
static void put_u32(uint8_t *b, uint64_t off, uint32_t v)
{
    memcpy(b + off, &v, 4);
}

/* The stream of pixel `p` (block 0): its model and payload span. */
static uint8_t model_of(const uint8_t *b, uint64_t p)
{
    return b[o_models + p];
}

static uint64_t find_model(const uint8_t *b, int want_rans, unsigned model)
{
    for (uint64_t p = 0; p < P; p++) {
        uint8_t m = model_of(b, p);
        if (want_rans ? m < 64 : m == model)
            return p;
    }
    return UINT64_MAX;
}

static void e_offset_first(uint8_t *b, json_t *h) { (void)h; put_u32(b, o_offsets, 1); }
static void e_offset_decrease(uint8_t *b, json_t *h)
{
    (void)h;
    put_u32(b, o_offsets + 4 * 10, 0xffffffffu);
}
static void e_offset_end(uint8_t *b, json_t *h)
{
    (void)h;
    put_u32(b, o_offsets + 4 * P, (uint32_t)payload_count - 1);
}
static void e_model_invalid(uint8_t *b, json_t *h) { (void)h; b[o_models + 3] = 100; }
static void e_model_span(uint8_t *b, json_t *h)
{
    (void)h;
    b[o_models + find_model(b, 1, 0)] = 255; /* a rANS span read as a constant */
}
static void e_rans_byte(uint8_t *b, json_t *h)
{
    (void)h;
    uint64_t p = find_model(b, 1, 0);
    uint32_t lo = get_u32(b, o_offsets + 4 * p), hi = get_u32(b, o_offsets + 4 * (p + 1));
    b[hi - 1] ^= 0x5a; /* payload starts at body offset 0 */
    (void)lo;
}
static void e_rans_state(uint8_t *b, json_t *h)
{
    (void)h;
    uint64_t p = find_model(b, 1, 0);
    uint32_t lo = get_u32(b, o_offsets + 4 * p);
    b[lo + 3] = 0x80; /* state >= 2^31 */
}
static void e_sparse_position(uint8_t *b, json_t *h)
{
    (void)h;
    uint64_t p = find_model(b, 0, 252);
    uint32_t lo = get_u32(b, o_offsets + 4 * p);
    uint16_t ev = (uint16_t)(N << 7); /* position 6 in a 6-sample stream */
    memcpy(b + lo, &ev, 2);
}
static void e_value_range(uint8_t *b, json_t *h)
{
    (void)b;
    json_object_set_new(h, "dtype", json_string("uint8")); /* pixel 9 holds 1000 */
}
static void e_width_33(uint8_t *b, json_t *h) { (void)h; b[o_widths] = 33; }
static void e_width_span(uint8_t *b, json_t *h) { (void)h; b[o_widths] = 0; }
static void e_spatial_first(uint8_t *b, json_t *h)
{
    (void)h;
    uint64_t one = 1;
    memcpy(b + o_soffsets, &one, 8);
}
static void e_spatial_value(uint8_t *b, json_t *h)
{
    (void)h;
    b[o_words] ^= 1; /* a wrong sum with a perfectly valid layout */
}
static void e_valid_mask(uint8_t *b, json_t *h)
{
    (void)b;
    /* Declaring pixel 0 invalid changes what the sums should be. */
    json_object_set_new(h, "valid", json_string("7fffffffffffffff"));
}

int main(void)
{
    qem_error e = {0};
    uint64_t shape[4] = {2, 3, 8, 8};
    uint16_t data[6 * 64];
    uint64_t seed = 11;
    for (uint64_t s = 0; s < N; s++) {
        for (uint64_t p = 0; p < P; p++) {
            uint16_t v = (uint16_t)(test_rand(&seed) % 9);
            if (p == 5)
                v = s == 2 ? 3 : 0; /* one event: the sparse model */
            if (p == 9)
                v = s == 1 ? 1000 : 0; /* above uint8 */
            data[s * P + p] = v;
        }
    }
    qem_writer *w = NULL;
    CHECK_OK(qem_writer_create(test_path("base.qem"), QEM_DTYPE_UINT16, shape, NULL, &w, &e), &e);
    CHECK_OK(qem_writer_append(w, data, N, &e), &e);
    CHECK_OK(qem_writer_finish(w, &e), &e);
    qem_writer_free(w);
    CHECK(qem_parts_load(test_path("base.qem"), &base));
    if (!base.header)
        return test_finish("unit_chunk_rules");
    o_offsets = array_offset(base.header, 0, 1);
    o_models = array_offset(base.header, 0, 2);
    o_words = array_offset(base.header, 0, 3);
    o_soffsets = array_offset(base.header, 0, 4);
    o_widths = array_offset(base.header, 0, 5);
    payload_count = get_u32(base.body, o_offsets + 4 * P);
    CHECK(find_model(base.body, 1, 0) != UINT64_MAX);
    CHECK(find_model(base.body, 0, 252) != UINT64_MAX);
    CHECK(base.body[o_widths] > 0);
    (void)F;

    expect("payload offsets start above zero", e_offset_first, AT_READ, QEM_E_LAYOUT);
    expect("payload offsets decrease", e_offset_decrease, AT_READ, QEM_E_LAYOUT);
    expect("payload offsets end early", e_offset_end, AT_READ, QEM_E_LAYOUT);
    expect("invalid model selector", e_model_invalid, AT_READ, QEM_E_MODEL);
    expect("span does not fit the model", e_model_span, AT_READ, QEM_E_MODEL);
    expect("rANS payload byte changed", e_rans_byte, AT_READ, QEM_E_RANS_FINAL);
    expect("rANS state out of range", e_rans_state, AT_READ, QEM_E_RANS_STATE);
    expect("sparse position out of range", e_sparse_position, AT_READ, QEM_E_SPARSE);
    expect("value above uint8", e_value_range, AT_READ, QEM_E_VALUE_RANGE);
    expect("spatial width 33", e_width_33, AT_VERIFY, QEM_E_SPATIAL);
    expect("spatial span wrong for width", e_width_span, AT_VERIFY, QEM_E_SPATIAL);
    expect("spatial offsets start above zero", e_spatial_first, AT_VERIFY, QEM_E_SPATIAL);
    expect("spatial sum wrong", e_spatial_value, AT_VERIFY, QEM_E_SPATIAL);
    expect("validity mask disagrees with the sums", e_valid_mask, AT_VERIFY, QEM_E_SPATIAL);
    qem_parts_free(&base);
    return test_finish("unit_chunk_rules");
}
