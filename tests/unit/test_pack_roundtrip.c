/* Packs built from the byte rules load and read back exactly, raw and
 * mask-applied: both profiles, a partial final 128-scan tile, several
 * shards, excluded pixels retained in the payload, exclusion constants,
 * legacy uint8 files with wide excluded columns, all-zero shards, on 1-3
 * threads. Loading holds one shard in flight per thread (a whole-shard
 * thread its uint16 payload a piece at a time), and the first
 * damaged shard is the one named whatever the thread count. */
#include <unistd.h>

#include "common/sha256.h"
#include "pack/pack_internal.h"
#include "pack_build.h"

static uint64_t seed = 8;

typedef struct variant {
    const char *name;
    pack_spec spec;
    int u8_values;          /* keep admitted values within uint8 */
    uint16_t excluded_value; /* constant at excluded pixels (0 = varying) */
    qem_raw_access raw_access;
} variant;

static uint16_t *make_data(const variant *v, const uint8_t *excluded)
{
    const pack_spec *s = &v->spec;
    const uint64_t P = s->shape[2] * s->shape[3], n = s->shape[0] * s->shape[1] * P;
    uint16_t *d = malloc((size_t)n * 2);
    for (uint64_t k = 0; k < n; k++) {
        const uint64_t p = k % P, scan = k / P;
        uint64_t r = test_rand(&seed);
        uint32_t x;
        if (!strcmp(v->name, "zeros") || (scan >= 256 && !strcmp(v->name, "zero_shard")))
            x = 0;
        else if (!strncmp(v->name, "every_width", 11))
            /* Each pixel's tiles (128 or 32 scans) take the widths in turn:
             * every unpacking kernel's width, 0 .. 16 (0 .. 8 for uint8). */
            x = (uint32_t)(r % (1u << ((p + scan / v->spec.sps * 7 +
                                        scan / (v->spec.profile == QEM_PACK_UINT16_LZ4 ? 128 : 32)) %
                                       (v->u8_values ? 9 : 17))));
        else if (p % 5 == 0)
            x = (uint32_t)(r % 3); /* narrow */
        else if (p % 5 == 1)
            x = v->u8_values ? (uint32_t)(r % 256) : (uint32_t)(r % 65536); /* wide */
        else if (p % 5 == 2)
            x = 0; /* silent */
        else
            x = (uint32_t)(r % (v->u8_values ? 40 : 1000));
        if (excluded[p])
            x = v->excluded_value ? v->excluded_value : (uint32_t)(1000 + r % 60000);
        d[k] = (uint16_t)x;
    }
    return d;
}

/* What loading one shard holds at most: with the whole payload read at
 * once (one shard at a time over several threads), and read in pieces
 * (a thread that loads whole shards). */
typedef struct staging {
    uint64_t whole, pieces;
} staging;

/* The largest piece of a uint16/LZ4 shard's payload: PACK_PIECE_SEGMENTS
 * segments' blocks, their sizes from the stored lengths. */
static uint64_t largest_piece(const char *path, const pack_shard_record *r)
{
    uint8_t *lengths = malloc((size_t)r->lengths_bytes);
    FILE *f = fopen(path, "rb");
    CHECK(f && lengths && fseek(f, (long)r->lengths_offset, SEEK_SET) == 0 &&
          fread(lengths, 1, (size_t)r->lengths_bytes, f) == r->lengths_bytes);
    if (f)
        fclose(f);
    uint64_t largest = 0, piece = 0;
    for (uint64_t c = 0; lengths && c < r->chunk_count; c++) {
        piece += lengths[c] + 1u;
        if ((c + 1) % (PACK_SEGMENT_CHUNKS * PACK_PIECE_SEGMENTS) == 0 || c + 1 == r->chunk_count) {
            largest = piece > largest ? piece : largest;
            piece = 0;
        }
    }
    free(lengths);
    return largest;
}

/* Loads the pack on `threads` threads (whole shards per thread where
 * there are enough, else one shard at a time) and checks every value. */
static void check_loaded(const variant *v, const char *name, const uint16_t *data,
                         const uint8_t *excluded, int threads, staging one_shard_max,
                         uint64_t all_shards)
{
    const pack_spec *s = &v->spec;
    const uint64_t P = s->shape[2] * s->shape[3], scans = s->shape[0] * s->shape[1];
    qem_error e = {0};
    qem_pack *p = NULL;
    CHECK_OK(qem_pack_open(test_path(name), NULL, &p, &e), &e);
    if (!p)
        return;
    qem_pack_options o;
    qem_pack_options_init(&o);
    o.threads = threads;
    CHECK_OK(qem_pack_load(p, &o, &e), &e);
    qem_pack_info info = {.struct_size = sizeof info};
    qem_pack_get_info(p, &info, NULL);
    CHECK_EQ_U64(info.raw_access, v->raw_access);
    CHECK_EQ_U64(info.shard_count, scans / s->sps);
    const int u8 = info.working_dtype == QEM_DTYPE_UINT8;
    const size_t wbytes = (size_t)(scans * P) * (u8 ? 1 : 2);
    uint8_t *working = malloc(wbytes);
    CHECK_OK(qem_pack_read_scans(p, 0, scans, QEM_VALUES_WORKING, working, wbytes, &e), &e);
    int wrong = 0;
    for (uint64_t k = 0; k < scans * P; k++) {
        uint32_t want = excluded[k % P] ? 0 : data[k];
        uint32_t have = u8 ? working[k] : ((uint16_t *)working)[k];
        wrong += want != have;
    }
    if (wrong)
        fprintf(stderr, "%s: %d mask-applied values differ\n", v->name, wrong);
    CHECK_EQ_U64(wrong, 0);
    uint16_t *raw = malloc((size_t)(scans * P) * 2);
    qem_status st = qem_pack_read_scans(p, 0, scans, QEM_VALUES_RAW, raw, (size_t)(scans * P) * 2, &e);
    if (v->raw_access == QEM_RAW_MASK_APPLIED_ONLY) {
        CHECK_STATUS(st, QEM_E_NOT_RECORDED, &e);
    } else {
        CHECK_OK(st, &e);
        CHECK(memcmp(raw, data, (size_t)(scans * P) * 2) == 0);
    }
    /* Single scans (a pattern: one value of each pixel's tile), every
     * seventh and the last. */
    int single_wrong = 0;
    for (uint64_t at = 0; at <= scans / 7; at++) {
        const uint64_t scan = at < scans / 7 ? at * 7 : scans - 1;
        CHECK_OK(qem_pack_read_scans(p, scan, 1, QEM_VALUES_WORKING, working, wbytes, &e), &e);
        for (uint64_t k = 0; k < P; k++) {
            const uint32_t want = excluded[k] ? 0 : data[scan * P + k];
            single_wrong += want != (u8 ? working[k] : ((uint16_t *)working)[k]);
        }
    }
    CHECK_EQ_U64(single_wrong, 0);
    /* Windows crossing tiles and shards. */
    for (int t = 0; t < 12; t++) {
        uint64_t first = test_rand(&seed) % scans, count = 1 + test_rand(&seed) % (scans - first);
        CHECK_OK(qem_pack_read_scans(p, first, count, QEM_VALUES_WORKING, working, wbytes, &e), &e);
        int bad = 0;
        for (uint64_t k = 0; k < count * P; k++) {
            uint32_t want = excluded[k % P] ? 0 : data[first * P + k];
            bad += want != (u8 ? working[k] : ((uint16_t *)working)[k]);
        }
        CHECK_EQ_U64(bad, 0);
    }
    /* Staging never held more than one shard per loading thread. */
    qem_pack_timings t = {.struct_size = sizeof t};
    qem_pack_get_timings(p, &t, NULL);
    const uint64_t shards = info.shard_count, n = (uint64_t)threads;
    const int whole_shards = shards >= n && (shards % n == 0 || shards >= 4 * n);
    if (threads == 1)
        CHECK_EQ_U64(t.peak_transient_bytes, one_shard_max.pieces);
    else if (whole_shards)
        CHECK(t.peak_transient_bytes >= one_shard_max.pieces &&
              t.peak_transient_bytes <= n * one_shard_max.pieces);
    else
        CHECK_EQ_U64(t.peak_transient_bytes, one_shard_max.whole);
    if (info.shard_count > (uint64_t)threads)
        CHECK(t.peak_transient_bytes < all_shards);
    CHECK_EQ_U64(t.decoded_digests_checked, info.shard_count);
    free(working);
    free(raw);
    qem_pack_close(p);
}

/* Per-pixel sums and weighted sums over a scan range that starts and ends
 * inside tiles, from the resident (tile walks), against the data. */
static void check_sums(const char *name, const uint16_t *data, const uint8_t *excluded,
                       uint64_t P, uint64_t scans)
{
    qem_error e = {0};
    qem_container *src = NULL;
    qem_products *pr = NULL;
    CHECK_OK(qem_container_open(test_path(name), NULL, &src, &e), &e);
    if (src)
        CHECK_OK(qem_products_open(src, NULL, &pr, &e), &e);
    if (!pr) {
        qem_container_close(src);
        return;
    }
    const uint64_t first = scans > 40 ? 37 : 0, count = scans - first - (scans > 80 ? 3 : 0);
    uint64_t *sums = calloc((size_t)P, sizeof *sums);
    int32_t *weight = malloc((size_t)P * sizeof *weight);
    int32_t *big = malloc((size_t)P * sizeof *big);
    int32_t *graded = malloc((size_t)P * sizeof *graded);
    int64_t *image = calloc((size_t)count, sizeof *image);
    int64_t *graded_image = calloc((size_t)count, sizeof *graded_image);
    int64_t *both = calloc((size_t)count * 2, sizeof *both);
    for (uint64_t px = 0; px < P; px++) {
        weight[px] = (int32_t)(px % 3) - 1; /* -1, 0, 1: sums that fit int32 */
        big[px] = px % 2 ? -70000 : 3;      /* sums that need int64 */
        graded[px] = (int32_t)(px % 16) - 8; /* fit int32, not +-1 */
    }
    const int32_t *planes[2] = {weight, big};
    CHECK_OK(qem_products_pixel_sums(pr, first, count, sums, (size_t)P * sizeof *sums, &e), &e);
    CHECK_OK(qem_products_weighted_sums(pr, first, count, planes, 1, image, (size_t)count * sizeof *image, &e), &e);
    CHECK_OK(qem_products_weighted_sums(pr, first, count, planes, 2, both,
                                        (size_t)count * 2 * sizeof *both, &e), &e);
    const int32_t *graded_plane[1] = {graded};
    CHECK_OK(qem_products_weighted_sums(pr, first, count, graded_plane, 1, graded_image,
                                        (size_t)count * sizeof *graded_image, &e), &e);
    int bad = 0;
    for (uint64_t px = 0; px < P; px++) {
        uint64_t want = 0;
        for (uint64_t i = first; i < first + count; i++)
            want += excluded[px] ? 0 : data[i * P + px];
        bad += want != sums[px];
    }
    for (uint64_t i = 0; i < count; i++) {
        int64_t want = 0, want_big = 0, want_graded = 0;
        for (uint64_t px = 0; px < P; px++) {
            const int64_t v = excluded[px] ? 0 : data[(first + i) * P + px];
            want += weight[px] * v;
            want_big += big[px] * v;
            want_graded += graded[px] * v;
        }
        bad += (want != image[i]) + (want != both[i]) + (want_big != both[count + i]) +
               (want_graded != graded_image[i]);
    }
    if (bad)
        fprintf(stderr, "%s: %d sums differ\n", name, bad);
    CHECK_EQ_U64(bad, 0);
    free(sums);
    free(weight);
    free(big);
    free(graded);
    free(image);
    free(graded_image);
    free(both);
    qem_products_close(pr);
    qem_container_close(src);
}

static void check_variant(const variant *v)
{
    const pack_spec *s = &v->spec;
    const uint64_t P = s->shape[2] * s->shape[3];
    uint8_t *excluded = calloc((size_t)P, 1);
    for (uint64_t i = 0; i < s->excluded_count; i++)
        excluded[s->excluded[i]] = 1;
    uint16_t *data = make_data(v, excluded);
    pack_spec spec = *s;
    spec.data = data;
    char name[96];
    snprintf(name, sizeof name, "%s.h5", v->name);
    pack_built built = {0};
    CHECK(pack_build(test_path(name), &spec, &built));
    /* What one shard in flight costs: its stored ranges (the payload
     * whole or its largest piece), segment table, decoded payload and
     * pixel starts (uint16) or payload and headers. */
    staging one_shard_max = {0, 0};
    uint64_t all_shards = 0;
    for (uint64_t k = 0; k < built.shard_count; k++) {
        const pack_shard_record *r = &built.records[k];
        staging b = {r->payload_bytes + r->widths_bytes, 0};
        if (s->profile == QEM_PACK_UINT16_LZ4) {
            const uint64_t rest = r->lengths_bytes + r->widths_bytes +
                                  8ull * ((r->chunk_count + PACK_SEGMENT_CHUNKS - 1) /
                                              PACK_SEGMENT_CHUNKS + 1) +
                                  r->decoded_bytes + 4ull * P;
            b.whole = r->payload_bytes + rest;
            b.pieces = largest_piece(test_path(name), r) + rest;
        }
        b.pieces = b.pieces ? b.pieces : b.whole;
        one_shard_max.whole = b.whole > one_shard_max.whole ? b.whole : one_shard_max.whole;
        one_shard_max.pieces = b.pieces > one_shard_max.pieces ? b.pieces : one_shard_max.pieces;
        all_shards += b.whole;
    }
    pack_built_free(&built);
    for (int threads = 1; threads <= 3; threads++)
        check_loaded(v, name, data, excluded, threads, one_shard_max, all_shards);
    check_sums(name, data, excluded, P, s->shape[0] * s->shape[1]);
    free(data);
    free(excluded);
}

/* Two damaged shards: every thread count names the earlier one, with the
 * same status, and nothing is kept. */
static void check_first_failure(qem_pack_profile profile, const char *name)
{
    enum { SHARDS = 4, SPS = 128, P = 20 };
    uint16_t *data = malloc(SHARDS * SPS * P * 2);
    for (int k = 0; k < SHARDS * SPS * P; k++)
        data[k] = (uint16_t)(test_rand(&seed) % 200);
    pack_spec spec = {profile, {4, SHARDS * SPS / 4, 4, 5}, SPS, data, NULL, 0, 0,
                      profile == QEM_PACK_UINT16_LZ4 ? QEM_DTYPE_UINT16 : QEM_DTYPE_UINT8, 1, 0};
    pack_built built = {0};
    CHECK(pack_build(test_path(name), &spec, &built));
    CHECK_EQ_U64(built.shard_count, SHARDS);
    FILE *f = fopen(test_path(name), "r+b");
    CHECK(f != NULL);
    for (int s = 1; f && s < SHARDS; s += 2) {
        const pack_shard_record *r = &built.records[s];
        const long at = (long)(r->payload_offset + r->payload_bytes / 2);
        fseek(f, at, SEEK_SET);
        const int c = fgetc(f);
        fseek(f, at, SEEK_SET);
        fputc(c ^ 0x5A, f);
    }
    if (f)
        fclose(f);
    pack_built_free(&built);
    qem_status first = QEM_OK;
    for (int threads = 1; threads <= 3; threads++) {
        qem_error e = {0};
        qem_pack *p = NULL;
        CHECK_OK(qem_pack_open(test_path(name), NULL, &p, &e), &e);
        if (!p)
            break;
        qem_pack_options o;
        qem_pack_options_init(&o);
        o.threads = threads;
        const qem_status st = qem_pack_load(p, &o, &e);
        CHECK(st == QEM_E_PACK_DIGEST || st == QEM_E_PACK_LZ4);
        if (threads == 1)
            first = st;
        CHECK_EQ_U64(st, first);
        CHECK(strstr(e.message, "pack shard 1 ") != NULL);
        CHECK(qem_pack_read_scans(p, 0, 1, QEM_VALUES_WORKING, data, P * 2, &e) != QEM_OK);
        qem_pack_close(p);
    }
    free(data);
}

/* A pack cut short after it was opened, inside the second piece of its
 * last shard's payload (stored after that shard's lengths and widths, so
 * those still read): every thread count refuses it as ending early and
 * keeps nothing. */
static void check_cut_inside_piece(void)
{
    enum { SHARDS = 2, SPS = 4096, P = 100 };
    uint16_t *data = malloc(SHARDS * SPS * P * 2);
    for (int k = 0; k < SHARDS * SPS * P; k++)
        data[k] = (uint16_t)(test_rand(&seed) % 1000);
    pack_spec spec = {QEM_PACK_UINT16_LZ4, {2, SHARDS * SPS / 2, 10, 10}, SPS, data, NULL, 0, 0,
                      QEM_DTYPE_UINT16, 0, 0};
    const char *path = test_path("u16_cut_in_piece.h5");
    for (int threads = 1; threads <= 2; threads++) {
        pack_built b = {0};
        CHECK(pack_build(path, &spec, &b));
        /* The last shard's payload moved behind its lengths and widths. */
        pack_shard_record *r = &b.records[SHARDS - 1];
        CHECK(r->chunk_count > PACK_SEGMENT_CHUNKS * PACK_PIECE_SEGMENTS);
        CHECK(r->lengths_offset == r->payload_offset + r->payload_bytes &&
              r->widths_offset == r->lengths_offset + r->lengths_bytes);
        const uint64_t at = r->payload_offset - PACK_TEST_BLOCK;
        uint8_t *payload = malloc((size_t)r->payload_bytes);
        memcpy(payload, b.ranges + at, (size_t)r->payload_bytes);
        memmove(b.ranges + at, b.ranges + at + r->payload_bytes,
                (size_t)(r->lengths_bytes + r->widths_bytes));
        memcpy(b.ranges + at + r->lengths_bytes + r->widths_bytes, payload,
               (size_t)r->payload_bytes);
        free(payload);
        r->lengths_offset = PACK_TEST_BLOCK + at;
        r->widths_offset = r->lengths_offset + r->lengths_bytes;
        r->payload_offset = r->widths_offset + r->widths_bytes;
        uint8_t identity[32];
        qem_sha256_oneshot(path, strlen(path), identity); /* as pack_build binds it */
        uint64_t index_bytes = 0;
        uint8_t *index = qem_pack_index_build(spec.profile, spec.shape, spec.sps, NULL, 0,
                                              identity, b.records, SHARDS, &index_bytes);
        json_t *m = json_array_get(json_object_get(b.manifest, "shards"), SHARDS - 1);
        json_object_set_new(m, "payload_file_offset", json_integer((json_int_t)r->payload_offset));
        json_object_set_new(m, "lengths_file_offset", json_integer((json_int_t)r->lengths_offset));
        json_object_set_new(m, "descriptor_widths_file_offset",
                            json_integer((json_int_t)r->widths_offset));
        CHECK(pack_rewrite(path, &b, b.manifest, index, index_bytes));
        free(index);
        qem_error e = {0};
        qem_pack *p = NULL;
        CHECK_OK(qem_pack_open(path, NULL, &p, &e), &e);
        CHECK(truncate(path, (off_t)(r->payload_offset + r->payload_bytes - 10)) == 0);
        qem_pack_options o;
        qem_pack_options_init(&o);
        o.threads = threads;
        CHECK_STATUS(qem_pack_load(p, &o, &e), QEM_E_PACK_RANGE, &e);
        CHECK(strstr(e.message, "ends early") != NULL);
        CHECK(qem_pack_read_scans(p, 0, 1, QEM_VALUES_WORKING, data, P * 2, &e) != QEM_OK);
        qem_pack_close(p);
        pack_built_free(&b);
    }
    free(data);
}

/* Tile starts and the widest tile, 16 widths per SSE2 step and the rest
 * one by one, against plain loops (the widest placed at every position). */
static void check_width_sums(void)
{
    uint8_t w[48];
    for (uint64_t n = 0; n <= sizeof w; n++) {
        for (uint64_t hot = 0; hot < (n ? n : 1); hot++) {
            uint64_t want = 0;
            uint8_t want_max = 0;
            for (uint64_t k = 0; k < n; k++) {
                w[k] = (uint8_t)(k == hot ? 17 : test_rand(&seed) % 17);
                want += w[k];
                want_max = w[k] > want_max ? w[k] : want_max;
            }
            uint8_t widest = 99;
            CHECK_EQ_U64(pack_width_sum(w, n, &widest), want);
            CHECK_EQ_U64(widest, want_max);
            CHECK_EQ_U64(pack_width_sum(w, n, NULL), want);
        }
    }
}

/* A +-1 move over more than a group of pixels whose tiles sit at the
 * widest values each width holds (127 at width 7, 255 at 8, ...): the
 * moves that add narrow tiles in 16-bit lanes must take them no wider than
 * a group's sum fits (256 x 127), and every sign must come out exact. */
static void check_full_groups(void)
{
    enum { SCANS = 1024, SPS = 256, ROWS = 17, COLS = 17, P = ROWS * COLS };
    uint16_t *data = malloc((size_t)SCANS * P * sizeof *data);
    for (uint64_t i = 0; i < SCANS; i++)
        for (uint64_t px = 0; px < P; px++) {
            /* Tile by tile the width runs 2 .. 9, the same for a group's
             * 256 pixels (the rest a step on). */
            const unsigned width = 2 + (unsigned)((i / PACK_V1_TILE + px / 256) % 8);
            data[i * P + px] = (uint16_t)((1u << width) - 1u - (test_rand(&seed) % 2));
        }
    pack_spec spec = {QEM_PACK_UINT16_LZ4, {1, SCANS, ROWS, COLS}, SPS, data, NULL, 0, 0,
                      QEM_DTYPE_UINT16, 0, 0};
    pack_built built = {0};
    CHECK(pack_build(test_path("full_groups.h5"), &spec, &built));
    pack_built_free(&built);
    qem_error e = {0};
    qem_container *src = NULL;
    qem_products *pr = NULL;
    CHECK_OK(qem_container_open(test_path("full_groups.h5"), NULL, &src, &e), &e);
    if (src)
        CHECK_OK(qem_products_open(src, NULL, &pr, &e), &e);
    int32_t *weight = malloc(P * sizeof *weight);
    int64_t *got = malloc(SCANS * sizeof *got);
    for (int sign = -1; pr && sign <= 1; sign += 2) {
        for (int mixed = 0; mixed < 2; mixed++) {
            /* One sign throughout, or the first half of the pixels the
             * other (a group's sums then cancel, its partial sums not). */
            for (uint64_t px = 0; px < P; px++)
                weight[px] = mixed && px < P / 2 ? -sign : sign;
            const int32_t *planes[1] = {weight};
            CHECK_OK(qem_products_weighted_sums(pr, 0, SCANS, planes, 1, got,
                                                SCANS * sizeof *got, &e), &e);
            int bad = 0;
            for (uint64_t i = 0; i < SCANS; i++) {
                int64_t want = 0;
                for (uint64_t px = 0; px < P; px++)
                    want += (int64_t)weight[px] * data[i * P + px];
                bad += want != got[i];
            }
            if (bad)
                fprintf(stderr, "full groups, sign %d, mixed %d: %d sums differ\n", sign, mixed,
                        bad);
            CHECK_EQ_U64(bad, 0);
        }
    }
    free(weight);
    free(got);
    qem_products_close(pr);
    qem_container_close(src);
    free(data);
}

int main(void)
{
    static const uint32_t four[] = {0, 7, 13, 19};
    static const uint32_t one[] = {5};
    static const uint32_t wide[] = {1, 6};
    const variant variants[] = {
        {"u16_partial_tile", {QEM_PACK_UINT16_LZ4, {5, 40, 4, 5}, 200, NULL, NULL, 0, 0,
                              QEM_DTYPE_UINT16, 0, 0}, 0, 0, QEM_RAW_EXACT_NO_EXCLUSIONS},
        {"u16_shards_retained", {QEM_PACK_UINT16_LZ4, {8, 64, 4, 5}, 128, NULL, four, 4, 1,
                                 QEM_DTYPE_UINT16, 0, 1}, 0, 0, QEM_RAW_RETAINED_PAYLOAD},
        {"u16_excluded_no_policy", {QEM_PACK_UINT16_LZ4, {2, 128, 4, 5}, 128, NULL, four, 4, 0,
                                    QEM_DTYPE_UINT16, 0, 0}, 0, 0, QEM_RAW_MASK_APPLIED_ONLY},
        {"u8_legacy_wide_excluded", {QEM_PACK_UINT16_LZ4, {4, 96, 3, 4}, 128, NULL, wide, 2, 0,
                                     QEM_DTYPE_UINT8, 0, 0}, 1, 65535, QEM_RAW_MASK_APPLIED_ONLY},
        {"u8_constants", {QEM_PACK_UINT8_BITPACKED, {4, 96, 3, 4}, 128, NULL, one, 1, 0,
                          QEM_DTYPE_UINT8, 1, 0}, 1, 65535, QEM_RAW_EXCLUSION_CONSTANTS},
        {"u8_legacy_no_constants", {QEM_PACK_UINT8_BITPACKED, {2, 64, 3, 4}, 64, NULL, one, 1, 0,
                                    QEM_DTYPE_UINT8, 0, 0}, 1, 4000, QEM_RAW_MASK_APPLIED_ONLY},
        {"u8_33_tiles", {QEM_PACK_UINT8_BITPACKED, {2, 1056, 2, 3}, 1056, NULL, NULL, 0, 0,
                         QEM_DTYPE_UINT8, 1, 0}, 1, 0, QEM_RAW_EXACT_NO_EXCLUSIONS},
        /* 41 tiles a pixel (the last partial): tile starts summed 16
         * widths at a time and walked tile to tile. */
        {"u16_many_tiles", {QEM_PACK_UINT16_LZ4, {2, 5200, 2, 3}, 5200, NULL, NULL, 0, 0,
                            QEM_DTYPE_UINT16, 0, 0}, 0, 0, QEM_RAW_EXACT_NO_EXCLUSIONS},
        /* Shards of 12 segments: their payloads are read in two pieces. */
        {"u16_pieces", {QEM_PACK_UINT16_LZ4, {4, 4096, 10, 10}, 4096, NULL, NULL, 0, 0,
                        QEM_DTYPE_UINT16, 0, 0}, 0, 0, QEM_RAW_EXACT_NO_EXCLUSIONS},
        {"zero_shard", {QEM_PACK_UINT16_LZ4, {2, 256, 3, 3}, 256, NULL, NULL, 0, 0,
                        QEM_DTYPE_UINT16, 0, 0}, 0, 0, QEM_RAW_EXACT_NO_EXCLUSIONS},
        {"zeros", {QEM_PACK_UINT8_BITPACKED, {1, 64, 2, 2}, 32, NULL, NULL, 0, 0,
                   QEM_DTYPE_UINT8, 1, 0}, 1, 0, QEM_RAW_EXACT_NO_EXCLUSIONS},
        /* Tiles of every width, five shards (whole shards per thread),
         * tiles ending inside a shard's last tile. */
        {"every_width_u16", {QEM_PACK_UINT16_LZ4, {2, 640, 4, 5}, 256, NULL, NULL, 0, 0,
                             QEM_DTYPE_UINT16, 0, 0}, 0, 0, QEM_RAW_EXACT_NO_EXCLUSIONS},
        {"every_width_u8", {QEM_PACK_UINT8_BITPACKED, {2, 640, 4, 5}, 256, NULL, NULL, 0, 0,
                            QEM_DTYPE_UINT8, 1, 0}, 1, 0, QEM_RAW_EXACT_NO_EXCLUSIONS},
    };
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++)
        check_variant(&variants[i]);
    check_width_sums();
    check_full_groups();
    check_first_failure(QEM_PACK_UINT16_LZ4, "u16_two_bad_shards.h5");
    check_first_failure(QEM_PACK_UINT8_BITPACKED, "u8_two_bad_shards.h5");
    check_cut_inside_piece();

    /* Values the uint8 profile cannot hold are refused, naming them. */
    uint16_t bad[2 * 32 * 4] = {0};
    bad[33 * 4 + 2] = 300;
    pack_spec s = {QEM_PACK_UINT8_BITPACKED, {1, 64, 2, 2}, 64, bad, NULL, 0, 0, QEM_DTYPE_UINT8, 0, 0};
    pack_encoded_shard enc;
    uint8_t none[4] = {0};
    qem_error e = {0};
    CHECK_STATUS(qem_pack_encode_v3_shard(bad, 64, 4, none, 0, &enc, &e), QEM_E_VALUE_RANGE, &e);
    CHECK(strstr(e.message, "scan 33, detector pixel 2 holds 300") != NULL);
    (void)s;
    return test_finish("unit_pack_roundtrip");
}
