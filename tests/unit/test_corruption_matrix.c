/* Corruption matrix: every single-byte change and every truncation of small
 * .qem files (each codec) and packs (each profile) is refused with a
 * specific status, or reads back exactly the original data, or - only where
 * no checksum covers the byte (the uint8/bitpacked compact headers, which
 * the index does not hash) - is flagged by verification against the
 * whole-file identity (qem verify --expect-sha256). Never a crash (ASan),
 * never silently different data.
 *
 * Which bytes fall in which class:
 *  - .qem: every byte is under a checksum. Signature -> QEM_E_NOT_QEM,
 *    header length and body start -> QEM_E_HEADER_LENGTH, header digest and
 *    JSON header -> QEM_E_HEADER_CHECKSUM, body -> QEM_E_BODY_CHECKSUM (on
 *    open; and again on first read with QEM_BODY_CHECK_ON_READ). A change
 *    that is accepted, even with identical data, is a failure.
 *  - packs: prelude, manifest (CRC-32) and binary index (agreement with the
 *    manifest, ranges, shard digests) must be refused. uint16/LZ4 payload,
 *    lengths and widths are refused, or - for LZ4 bytes whose block still
 *    decodes to the same bits - read back identically. uint8/bitpacked
 *    payload is refused by its digest; its compact headers are refused by
 *    the header rules, or (e.g. two width nibbles of one byte swapped: same
 *    cumulative widths) decode differently - then, and only then, the
 *    whole-file identity must flag the file (QEM_E_FILE_DIGEST).
 *  - pack bytes no reader looks at (user-block zero padding, the gap before
 *    the index, HDF5 structures): must read back identically; the whole-file
 *    identity still flags them.
 *
 * Files: the five upstream .qem fixtures (integer uint8 and uint16, float32,
 * scaled); packs of both profiles built from the byte rules (8 KiB user
 * blocks); the upstream pack fixtures (a genuine HDF5 uint16/LZ4 file, two
 * uint8/bitpacked test-writer files); and a genuine HDF5 uint8/bitpacked
 * pack from qem's own producer.
 *
 * Coverage: every byte, with the values b^0x01, b^0x80, b^0xff and, for
 * packs, b with its nibbles swapped (skipped when equal to b or b^0xff) -
 * except in the files with 64 KiB user blocks (upstream fixtures, the
 * produced pack), whose unread bytes (zero padding, HDF5 structures) are
 * sampled every 97th byte; their prelude, manifest, index and every shard
 * range are covered byte for byte. The slower second checks (whole-file
 * identity on identical data, the deferred .qem body check) run for one
 * value per position, the values taking turns.
 *
 * Truncations: every length from 0 to size - 1 of every file. All are
 * refused, except that cutting only unread bytes at the end (the HDF5
 * metadata qem's producer writes after the last shard range) reads back
 * identically and is flagged by the whole-file identity alone.
 *
 * QEM_CORRUPTION_SAMPLE=N (1 to 1000; tests/CMakeLists.txt sets 8 in the
 * sanitizer build, where the whole matrix takes ten minutes) tries one in
 * N positions and lengths, picked by a hash of the position so that every
 * region and every file is reached; the release build runs it whole. */
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include "common/sha256.h"
#include "pack_build.h"

enum region {
    RG_QEM_SIGNATURE,
    RG_QEM_LENGTHS,
    RG_QEM_HEADER_DIGEST,
    RG_QEM_HEADER,
    RG_QEM_BODY,
    RG_PACK_MAGIC,
    RG_PACK_SIZES,
    RG_PACK_CRC,
    RG_PACK_MANIFEST,
    RG_PACK_INDEX,
    RG_PACK_PAYLOAD,
    RG_PACK_DIRECT_PAYLOAD,
    RG_PACK_LENGTHS,
    RG_PACK_WIDTHS,
    RG_PACK_HEADERS,
    RG_PACK_PREPARED,
    RG_UNREAD,
    RG_COUNT
};

#define S(x) (1ull << (x))

/* What a change in each region may lead to. */
static const struct {
    const char *name;
    uint64_t refusals;  /* statuses that count as the specific refusal */
    int identical_ok;   /* data may read back unchanged */
    int flagged_ok;     /* data may differ if the whole-file identity flags it */
} rules[RG_COUNT] = {
    [RG_QEM_SIGNATURE] = {"qem signature", S(QEM_E_NOT_QEM), 0, 0},
    [RG_QEM_LENGTHS] = {"qem lengths", S(QEM_E_HEADER_LENGTH), 0, 0},
    [RG_QEM_HEADER_DIGEST] = {"qem header digest", S(QEM_E_HEADER_CHECKSUM), 0, 0},
    [RG_QEM_HEADER] = {"qem header", S(QEM_E_HEADER_CHECKSUM), 0, 0},
    [RG_QEM_BODY] = {"qem body", S(QEM_E_BODY_CHECKSUM), 0, 0},
    [RG_PACK_MAGIC] = {"pack magic", S(QEM_E_PACK_PRELUDE), 0, 0},
    [RG_PACK_SIZES] = {"pack prelude sizes",
                       S(QEM_E_PACK_PRELUDE) | S(QEM_E_PACK_CRC) | S(QEM_E_PACK_INDEX), 0, 0},
    [RG_PACK_CRC] = {"pack manifest crc", S(QEM_E_PACK_CRC), 0, 0},
    [RG_PACK_MANIFEST] = {"pack manifest", S(QEM_E_PACK_CRC), 0, 0},
    [RG_PACK_INDEX] = {"pack index",
                       S(QEM_E_PACK_INDEX) | S(QEM_E_UNSUPPORTED) | S(QEM_E_PACK_MANIFEST) |
                           S(QEM_E_PACK_RANGE) | S(QEM_E_PACK_DIGEST) | S(QEM_E_PACK_DESCRIPTOR) |
                           S(QEM_E_PACK_PREPARED),
                       0, 0},
    [RG_PACK_PAYLOAD] = {"pack lz4 payload", S(QEM_E_PACK_LZ4) | S(QEM_E_PACK_DIGEST), 1, 0},
    [RG_PACK_DIRECT_PAYLOAD] = {"pack direct payload", S(QEM_E_PACK_DIGEST), 0, 0},
    [RG_PACK_LENGTHS] = {"pack lz4 lengths", S(QEM_E_PACK_LZ4), 0, 0},
    [RG_PACK_WIDTHS] = {"pack widths", S(QEM_E_PACK_DESCRIPTOR) | S(QEM_E_PACK_DIGEST), 0, 0},
    [RG_PACK_HEADERS] = {"pack compact headers", S(QEM_E_PACK_DESCRIPTOR), 0, 1},
    /* Authenticated while opening (their SHA-256 in the manifest). */
    [RG_PACK_PREPARED] = {"pack prepared values", S(QEM_E_PACK_PREPARED), 0, 0},
    [RG_UNREAD] = {"unread bytes", 0, 1, 0},
};

enum { MAX_STATUS = 64, MAX_REPORTS = 12 };

typedef struct decoded {
    uint8_t *part[2]; /* .qem: data (codes for scaled); values for scaled. pack: working; raw */
    size_t size[2];
} decoded;

typedef struct subject {
    char name[64];
    int is_pack;
    uint8_t *bytes;
    size_t size;
    uint8_t *region;       /* region of each byte */
    unsigned unread_stride; /* sampling of RG_UNREAD bytes */
    char work[768];        /* the mutated copy */
    char sha_hex[65];      /* whole-file identity of the original */
    decoded original;
    uint64_t tried, refused, identical, flagged, silent, wrong_status, deferred_refused;
    uint64_t by_region[RG_COUNT];
    uint64_t status_count[MAX_STATUS];
    uint64_t trunc_tried, trunc_refused, trunc_identical;
    uint64_t trunc_status[MAX_STATUS];
    int reports;
    double seconds;
} subject;

static void decoded_free(decoded *d)
{
    free(d->part[0]);
    free(d->part[1]);
    memset(d, 0, sizeof *d);
}

static int decoded_equal(const decoded *a, const decoded *b)
{
    for (int i = 0; i < 2; i++)
        if (a->size[i] != b->size[i] ||
            (a->size[i] && memcmp(a->part[i], b->part[i], a->size[i]) != 0))
            return 0;
    return 1;
}

static uint32_t le32_at(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64_at(const uint8_t *p)
{
    return le32_at(p) | (uint64_t)le32_at(p + 4) << 32;
}

/* Decoded arrays larger than this mean a corrupted size got through. */
#define DECODE_CAP (64u << 20)

/* --- .qem ------------------------------------------------------------------ */

/* Opens with `check`, verifies when asked, and reads every scan: the
 * file's dtype (integer, float bits) or codes and restored values (scaled). */
static qem_status qem_decode(const char *path, qem_body_check check, int verify, decoded *d,
                             qem_error *e)
{
    memset(d, 0, sizeof *d);
    qem_open_options o;
    qem_open_options_init(&o);
    o.body_check = check;
    o.threads = 1; /* tiny files: threads would only add overhead */
    qem_file *f = NULL;
    qem_status st = qem_open(path, &o, &f, e);
    if (st == QEM_OK && verify) {
        qem_verify_options vo;
        qem_verify_options_init(&vo);
        vo.threads = 1;
        qem_verify_report report = {.struct_size = sizeof report};
        st = qem_verify(f, &vo, &report, e);
    }
    if (st == QEM_OK) {
        qem_file_info info = {.struct_size = sizeof info};
        qem_get_info(f, &info, NULL);
        const uint64_t n = info.scans * info.pixels;
        if (info.codec == QEM_CODEC_SCALED) {
            d->size[0] = (size_t)(n * 2);
            d->size[1] = (size_t)(n * 4);
        } else {
            d->size[0] = (size_t)qem_read_scans_bound(f, info.scans);
        }
        if (d->size[0] > DECODE_CAP || d->size[1] > DECODE_CAP) {
            fprintf(stderr, "%s: implausible decoded size accepted\n", path);
            CHECK(0);
            st = QEM_E_LIMIT;
        }
        for (int i = 0; st == QEM_OK && i < 2; i++)
            if (d->size[i] && !(d->part[i] = malloc(d->size[i])))
                st = QEM_E_NO_MEMORY;
        if (st == QEM_OK && info.codec == QEM_CODEC_SCALED) {
            st = qem_read_codes(f, 0, info.scans, (uint16_t *)(void *)d->part[0], d->size[0], e);
            if (st == QEM_OK)
                st = qem_read_values(f, 0, info.scans, (float *)(void *)d->part[1], d->size[1],
                                     e);
        } else if (st == QEM_OK) {
            st = qem_read_scans(f, 0, info.scans, d->part[0], d->size[0], e);
        }
    }
    qem_close(f);
    if (st != QEM_OK)
        decoded_free(d);
    return st;
}

/* --- packs ----------------------------------------------------------------- */

/* Opens and loads as a plain reader (`expect` NULL) or as qem verify does
 * (whole-file identity and stored digests). When `d` is given and the load
 * passed, reads every scan of the mask-applied array and, where the file
 * admits it, the raw one - through qem_container, whose reads honour
 * threads = 1 (tiny files; qem_pack_read_scans would start OpenMP's
 * default team, whose idle spinning dominates such short calls). */
static qem_status pack_decode(const char *path, const char *expect, decoded *d, qem_error *e)
{
    if (d)
        memset(d, 0, sizeof *d);
    qem_pack *p = NULL;
    qem_status st = qem_pack_open(path, NULL, &p, e);
    if (st == QEM_OK) {
        qem_pack_options lo;
        qem_pack_options_init(&lo);
        lo.threads = 1;
        lo.expect_sha256 = expect;
        lo.check_stored_digests = expect != NULL;
        st = qem_pack_load(p, &lo, e);
    }
    qem_pack_close(p);
    if (st != QEM_OK || !d)
        return st;
    qem_container_options so;
    qem_container_options_init(&so);
    so.threads = 1;
    qem_container *src = NULL;
    st = qem_container_open(path, &so, &src, e);
    if (st == QEM_OK) {
        qem_container_info info = {.struct_size = sizeof info};
        qem_container_get_info(src, &info, NULL);
        for (int i = 0; i < 1 + !!info.has_raw && st == QEM_OK; i++) {
            const qem_values v = i ? QEM_VALUES_RAW : QEM_VALUES_WORKING;
            const uint64_t bytes = qem_container_read_bound(src, v, info.scans);
            if (bytes == 0 || bytes > DECODE_CAP) {
                fprintf(stderr, "%s: implausible read size %llu accepted\n", path,
                        (unsigned long long)bytes);
                CHECK(0);
                st = QEM_E_LIMIT;
                break;
            }
            d->size[i] = (size_t)bytes;
            d->part[i] = malloc(d->size[i]);
            st = d->part[i] ? qem_container_read(src, 0, info.scans, v, d->part[i], d->size[i], e)
                            : QEM_E_NO_MEMORY;
        }
    }
    qem_container_close(src);
    if (st != QEM_OK)
        decoded_free(d);
    return st;
}

/* --- regions --------------------------------------------------------------- */

static void mark(subject *s, uint64_t at, uint64_t n, enum region r)
{
    for (uint64_t i = at; i < at + n && i < s->size; i++)
        s->region[i] = (uint8_t)r;
}

static void map_qem(subject *s)
{
    const uint64_t header = le64_at(s->bytes + 8);
    mark(s, 0, s->size, RG_QEM_BODY);
    mark(s, 0, 8, RG_QEM_SIGNATURE);
    mark(s, 8, 16, RG_QEM_LENGTHS);
    mark(s, 24, 32, RG_QEM_HEADER_DIGEST);
    mark(s, 56, header, RG_QEM_HEADER);
}

/* Regions from the prelude and the binary index (file offsets). */
static void map_pack(subject *s)
{
    const uint8_t *b = s->bytes;
    const uint64_t json = le32_at(b + 8), at = le32_at(b + 16), n = le32_at(b + 20);
    mark(s, 0, s->size, RG_UNREAD);
    mark(s, 0, 8, RG_PACK_MAGIC);
    mark(s, 8, 4, RG_PACK_SIZES);
    mark(s, 12, 4, RG_PACK_CRC);
    mark(s, 16, 8, RG_PACK_SIZES);
    mark(s, 24, json, RG_PACK_MANIFEST);
    mark(s, at, n, RG_PACK_INDEX);
    CHECK(at + n <= s->size && n >= 48);
    if (at + n > s->size || n < 48)
        return;
    const uint8_t *ix = b + at;
    const int v3 = ix[7] == 3;
    const uint64_t head = v3 ? 44 : 36;
    const uint64_t shards = le32_at(ix + 8), excluded = le32_at(ix + head);
    const uint8_t *rec = ix + head + 4 + 4 * excluded + 32;
    CHECK_EQ_U64(head + 4 + 4 * excluded + 32 + 96 * shards, n);
    if (head + 4 + 4 * excluded + 32 + 96 * shards != n)
        return;
    for (uint64_t k = 0; k < shards; k++, rec += 96) {
        mark(s, le64_at(rec), le64_at(rec + 8), v3 ? RG_PACK_DIRECT_PAYLOAD : RG_PACK_PAYLOAD);
        mark(s, le64_at(rec + 16), le64_at(rec + 24), RG_PACK_LENGTHS);
        mark(s, le64_at(rec + 32), le64_at(rec + 40), v3 ? RG_PACK_HEADERS : RG_PACK_WIDTHS);
    }
    /* The prepared extensions' ranges, named by the manifest. */
    json_t *m = json_loadb((const char *)b + 24, json, 0, NULL);
    const json_t *dpc = json_object_get(m, "prepared_dpc_moments");
    if (dpc)
        mark(s, (uint64_t)json_integer_value(json_object_get(dpc, "file_offset")),
             (uint64_t)json_integer_value(json_object_get(dpc, "file_bytes")), RG_PACK_PREPARED);
    const json_t *list = json_object_get(json_object_get(m, "prepared_detector_products"), "products");
    for (size_t k = 0; k < json_array_size(list); k++) {
        const json_t *r = json_array_get(list, k);
        mark(s, (uint64_t)json_integer_value(json_object_get(r, "mask_file_offset")),
             (uint64_t)json_integer_value(json_object_get(r, "mask_file_bytes")), RG_PACK_PREPARED);
        mark(s, (uint64_t)json_integer_value(json_object_get(r, "values_file_offset")),
             (uint64_t)json_integer_value(json_object_get(r, "values_file_bytes")),
             RG_PACK_PREPARED);
    }
    json_decref(m);
}

/* --- the matrix ------------------------------------------------------------ */

static void count_status(uint64_t *hist, qem_status st)
{
    hist[(unsigned)st < MAX_STATUS ? (unsigned)st : MAX_STATUS - 1]++;
}

static void report(subject *s, const char *what, uint64_t pos, unsigned value,
                   const char *detail)
{
    CHECK(0);
    if (s->reports++ < MAX_REPORTS)
        fprintf(stderr, "%s: %s at byte %llu (%s, 0x%02x -> 0x%02x): %s\n", s->name, what,
                (unsigned long long)pos, rules[s->region[pos]].name, s->bytes[pos], value,
                detail);
}

/* One changed byte. `sampled`: one of the values at each position (they
 * take turns) also runs the slower second checks - the whole-file identity
 * on data that read back identically, and the deferred body check. */
static void try_mutation(subject *s, uint64_t pos, unsigned value, int sampled)
{
    const enum region rg = (enum region)s->region[pos];
    qem_error e = {0};
    decoded d;
    s->tried++;
    s->by_region[rg]++;
    const qem_status st = s->is_pack ? pack_decode(s->work, NULL, &d, &e)
                                     : qem_decode(s->work, QEM_BODY_CHECK_ON_OPEN, 1, &d, &e);
    if (st != QEM_OK) {
        s->refused++;
        count_status(s->status_count, st);
        if ((unsigned)st >= MAX_STATUS || !(rules[rg].refusals & S(st))) {
            s->wrong_status++;
            char detail[600];
            snprintf(detail, sizeof detail, "refused with %d (%s): %s", (int)st, qem_strerror(st),
                     e.message);
            report(s, "unexpected status", pos, value, detail);
        }
    } else {
        const int same = decoded_equal(&d, &s->original);
        qem_status vs = QEM_E_FILE_DIGEST;
        qem_error ve = {0};
        /* qem verify with the whole-file identity sees every change. */
        if (s->is_pack && (!same || sampled))
            vs = pack_decode(s->work, s->sha_hex, NULL, &ve);
        if (vs != QEM_E_FILE_DIGEST)
            report(s, "whole-file identity missed a change", pos, value, ve.message);
        if (same) {
            s->identical++;
            if (!rules[rg].identical_ok)
                report(s, "ACCEPTED a change every reader must see", pos, value,
                       "data identical");
        } else if (rules[rg].flagged_ok && vs == QEM_E_FILE_DIGEST) {
            /* Only the whole-file identity can see it, and only where the
             * format leaves the byte unhashed. */
            s->flagged++;
        } else {
            s->silent++;
            report(s, "SILENT DIFFERENCE", pos, value, "decoded data differ from the original");
        }
    }
    decoded_free(&d);
    if (rg == RG_QEM_BODY && sampled) {
        /* The deferred body check refuses the same change on first read. */
        qem_error e2 = {0};
        const qem_status st2 = qem_decode(s->work, QEM_BODY_CHECK_ON_READ, 0, &d, &e2);
        if (st2 == QEM_E_BODY_CHECKSUM)
            s->deferred_refused++;
        else
            report(s, "deferred body check did not refuse", pos, value, e2.message);
        decoded_free(&d);
    }
}

static int pwrite_byte(int fd, uint8_t v, uint64_t pos)
{
    return pwrite(fd, &v, 1, (off_t)pos) == 1;
}

static unsigned sample_one_in = 1;

/* Whether a position or length is left out of a sampled run. */
static int sampled_out(uint64_t at)
{
    if (sample_one_in <= 1)
        return 0;
    uint64_t h = at * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
    return h % sample_one_in != 0;
}

/* Values b^0x01, b^0x80, b^0xff (always distinct from b and each other)
 * and, for packs, b with its nibbles swapped: two uint8/bitpacked tile
 * widths exchanged keep every cumulative width, the one change of a
 * compact header that its rules cannot see. */
static void run_mutations(subject *s)
{
    int fd = open(s->work, O_RDWR);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    for (uint64_t pos = 0; pos < s->size; pos++) {
        if (s->region[pos] == RG_UNREAD && pos % s->unread_stride != 0)
            continue;
        if (sampled_out(pos))
            continue;
        const uint8_t b = s->bytes[pos];
        const uint8_t values[4] = {(uint8_t)(b ^ 0x01), (uint8_t)(b ^ 0x80), (uint8_t)(b ^ 0xff),
                                   (uint8_t)(b << 4 | b >> 4)};
        const int count = s->is_pack ? 4 : 3;
        for (int k = 0; k < count; k++) {
            if (k == 3 && (values[3] == b || values[3] == values[2]))
                continue;
            CHECK(pwrite_byte(fd, values[k], pos));
            try_mutation(s, pos, values[k], (uint64_t)k == pos % 3);
            CHECK(pwrite_byte(fd, b, pos));
        }
    }
    close(fd);
}

/* Every shorter length, longest first, shrinking the one copy in place.
 * Each must be refused - except where only bytes no reader looks at were
 * cut (HDF5 structures the producer writes after the last shard range):
 * qem never parses HDF5, so those read back identically and only the
 * whole-file identity can flag them. */
static void run_truncations(subject *s)
{
    uint64_t unread_tail = s->size;
    while (unread_tail > 0 && s->region[unread_tail - 1] == RG_UNREAD)
        unread_tail--;
    for (uint64_t len = s->size; len-- > 0;) {
        if (sampled_out(len) && len != 0)
            continue;
        CHECK(truncate(s->work, (off_t)len) == 0);
        qem_error e = {0};
        decoded d;
        const qem_status st = s->is_pack ? pack_decode(s->work, NULL, &d, &e)
                                         : qem_decode(s->work, QEM_BODY_CHECK_ON_OPEN, 1, &d, &e);
        s->trunc_tried++;
        if (st != QEM_OK) {
            s->trunc_refused++;
            count_status(s->trunc_status, st);
            /* A specific refusal: never a generic I/O or argument error. */
            if (st == QEM_E_IO || st == QEM_E_NO_MEMORY || st == QEM_E_INVALID_ARGUMENT) {
                CHECK(0);
                fprintf(stderr, "%s truncated to %llu: generic status %d (%s): %s\n", s->name,
                        (unsigned long long)len, (int)st, qem_strerror(st), e.message);
            }
        } else {
            qem_error ve = {0};
            const int same = decoded_equal(&d, &s->original);
            const qem_status vs =
                s->is_pack ? pack_decode(s->work, s->sha_hex, NULL, &ve) : QEM_OK;
            if (same && len >= unread_tail && vs == QEM_E_FILE_DIGEST) {
                s->trunc_identical++;
            } else {
                CHECK(0);
                fprintf(stderr, "%s truncated to %llu bytes was ACCEPTED (%s data; whole-file "
                                "identity: %s)\n",
                        s->name, (unsigned long long)len, same ? "identical" : "DIFFERENT",
                        qem_strerror(vs));
            }
        }
        decoded_free(&d);
    }
    CHECK(write_file(s->work, s->bytes, s->size));
}

static void print_statuses(const char *label, const uint64_t *hist)
{
    fprintf(stderr, "    %s:", label);
    for (int i = 0; i < MAX_STATUS; i++)
        if (hist[i])
            fprintf(stderr, " %s=%llu", qem_strerror((qem_status)i), (unsigned long long)hist[i]);
    fprintf(stderr, "\n");
}

static subject totals;

static void run_subject(const char *name, const char *path, int is_pack, unsigned unread_stride)
{
    /* QEM_CORRUPTION_ONLY=text runs only the files whose name contains it. */
    const char *only = getenv("QEM_CORRUPTION_ONLY");
    if (only && *only && !strstr(name, only))
        return;
    subject *s = calloc(1, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->is_pack = is_pack;
    s->unread_stride = unread_stride;
    s->bytes = read_file(path, &s->size);
    CHECK(s->bytes != NULL && s->size > 64);
    if (!s->bytes || s->size <= 64) {
        free(s);
        return;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint8_t digest[32];
    qem_sha256_oneshot(s->bytes, s->size, digest);
    qem_sha256_hex(digest, s->sha_hex);
    s->region = calloc(s->size, 1);
    if (is_pack)
        map_pack(s);
    else
        map_qem(s);
    snprintf(s->work, sizeof s->work, "%s", test_path(is_pack ? "mutated.h5" : "mutated.qem"));
    unlink(s->work);
    CHECK(write_file(s->work, s->bytes, s->size));
    qem_error e = {0};
    const qem_status st = is_pack ? pack_decode(s->work, NULL, &s->original, &e)
                                  : qem_decode(s->work, QEM_BODY_CHECK_ON_OPEN, 1, &s->original,
                                               &e);
    CHECK_OK(st, &e);
    if (st == QEM_OK) {
        if (is_pack) /* the untouched file also passes as qem verify checks it */
            CHECK_OK(pack_decode(s->work, s->sha_hex, NULL, &e), &e);
        run_mutations(s);
        run_truncations(s);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    s->seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);

    fprintf(stderr,
            "file %s (%zu bytes%s): tried %llu, refused %llu, identical %llu, flagged-by-verify "
            "%llu, silent %llu; truncations %llu, refused %llu, identical %llu (only unread "
            "bytes cut); %.2f s\n",
            s->name, s->size, unread_stride > 1 ? ", unread bytes sampled" : "",
            (unsigned long long)s->tried, (unsigned long long)s->refused,
            (unsigned long long)s->identical, (unsigned long long)s->flagged,
            (unsigned long long)s->silent, (unsigned long long)s->trunc_tried,
            (unsigned long long)s->trunc_refused, (unsigned long long)s->trunc_identical,
            s->seconds);
    fprintf(stderr, "    changes per region:");
    for (int r = 0; r < RG_COUNT; r++)
        if (s->by_region[r])
            fprintf(stderr, " %s=%llu", rules[r].name, (unsigned long long)s->by_region[r]);
    fprintf(stderr, "\n");
    print_statuses("refusals", s->status_count);
    print_statuses("truncation refusals", s->trunc_status);
    if (!is_pack)
        fprintf(stderr, "    body changes (one value per byte) refused on first read with the "
                        "deferred check: %llu\n",
                (unsigned long long)s->deferred_refused);

    CHECK_EQ_U64(s->silent, 0);
    CHECK_EQ_U64(s->wrong_status, 0);
    CHECK_EQ_U64(s->refused + s->identical + s->flagged, s->tried);
    CHECK_EQ_U64(s->trunc_refused + s->trunc_identical, s->trunc_tried);
    CHECK(s->tried > 0);

    totals.tried += s->tried;
    totals.refused += s->refused;
    totals.identical += s->identical;
    totals.flagged += s->flagged;
    totals.silent += s->silent;
    totals.trunc_tried += s->trunc_tried;
    totals.trunc_refused += s->trunc_refused;
    totals.trunc_identical += s->trunc_identical;
    totals.seconds += s->seconds;
    unlink(s->work);
    decoded_free(&s->original);
    free(s->region);
    free(s->bytes);
    free(s);
}

/* --- small packs built from the byte rules (8 KiB user blocks) ------------ */

/* uint16/LZ4: 2 shards of 128 scans, 4x5 detector, every width 0..16,
 * 4 excluded pixels retained in the payload, a detector calibration. */
static int build_v1(const char *path)
{
    static const uint32_t ex[] = {0, 7, 13, 19};
    static uint16_t d[2 * 128 * 20];
    uint64_t seed = 11;
    for (size_t k = 0; k < sizeof d / 2; k++) {
        const unsigned bits = (unsigned)(k % 20) % 17;
        d[k] = (uint16_t)(test_rand(&seed) & ((1u << bits) - 1));
    }
    pack_spec spec = {QEM_PACK_UINT16_LZ4, {2, 128, 4, 5}, 128, d, ex, 4, 1,
                      QEM_DTYPE_UINT16, 0, 1};
    return pack_build(path, &spec, NULL);
}

/* uint8/bitpacked: 2 shards of 1056 scans (33 tiles: two checkpoint words
 * per pixel), 2x3 detector, widths varying per pixel and tile so that
 * neighbouring width nibbles differ, pixel 4 excluded with the constant
 * 65535, a detector calibration. */
static int build_v3(const char *path)
{
    static const uint32_t ex[] = {4};
    static uint16_t d[2 * 1056 * 6];
    uint64_t seed = 12;
    for (size_t k = 0; k < sizeof d / 2; k++) {
        const unsigned p = (unsigned)(k % 6), tile = (unsigned)(k / 6 % 1056 / 32);
        const unsigned bits = (p * 5 + tile * 3) % 9;
        d[k] = p == 4 ? 65535 : (uint16_t)(test_rand(&seed) & ((1u << bits) - 1));
    }
    pack_spec spec = {QEM_PACK_UINT8_BITPACKED, {1, 2112, 2, 3}, 1056, d, ex, 1, 0,
                      QEM_DTYPE_UINT8, 1, 1};
    return pack_build(path, &spec, NULL);
}

/* A genuine HDF5 pack from qem's own producer (uint8/bitpacked, 64 KiB
 * user block): 64 scans of a 4x4 detector (two tiles, wide then narrow or
 * the other way round), pixel 5 hot (constant 65535) and excluded. */
static int produce_v3(const char *dest)
{
    static uint16_t d[64 * 16];
    uint64_t seed = 13;
    for (size_t k = 0; k < sizeof d / 2; k++)
        d[k] = k % 16 == 5 ? 65535
                           : (uint16_t)(test_rand(&seed) % ((k / 16 < 32) == (k % 2) ? 200 : 3));
    const uint64_t shape[4] = {2, 32, 4, 4};
    const char *npy = test_path("produced_source.npy");
    qem_error e = {0};
    qem_pack_inspection *in = NULL;
    int ok = write_npy4(npy, QEM_DTYPE_UINT16, shape, d) == 1;
    CHECK(ok);
    if (ok)
        CHECK_OK(qem_pack_inspect(npy, NULL, &in, &e), &e);
    uint8_t exclude[16] = {0};
    exclude[5] = 1;
    qem_pack_plan_options po;
    qem_pack_plan_options_init(&po);
    po.profile = QEM_PACK_UINT8_BITPACKED;
    po.destination = dest;
    po.exclude = exclude;
    qem_pack_plan plan = {.struct_size = sizeof plan};
    ok = in && qem_pack_plan_make(in, &po, &plan, &e) == QEM_OK &&
         qem_pack_produce(in, &po, dest, NULL, &e) == QEM_OK;
    if (!ok)
        fprintf(stderr, "producing a pack failed: %s\n", e.message);
    qem_pack_inspection_free(in);
    return ok;
}

int main(void)
{
    const char *sample = getenv("QEM_CORRUPTION_SAMPLE");
    if (sample && *sample) {
        char *end = NULL;
        unsigned long n = strtoul(sample, &end, 10);
        if (*end || n < 1 || n > 1000) {
            fprintf(stderr, "QEM_CORRUPTION_SAMPLE must be 1 to 1000, not '%s'\n", sample);
            return 2;
        }
        sample_one_in = (unsigned)n;
    }
    if (sample_one_in > 1)
        fprintf(stderr, "sampled: one in %u positions and truncation lengths "
                        "(QEM_CORRUPTION_SAMPLE)\n", sample_one_in);
    static const char *qem_fixtures[] = {"u8_sparse_lowdose", "u16_dense_highdose",
                                         "u16_nonsquare_masked", "f32_special_bits",
                                         "scaled_u16_regions"};
    char rel[256];
    for (size_t i = 0; i < sizeof qem_fixtures / sizeof *qem_fixtures; i++) {
        snprintf(rel, sizeof rel, "qem/%s.qem", qem_fixtures[i]);
        run_subject(qem_fixtures[i], fixture_path(rel), 0, 1);
    }

    char path[768];
    snprintf(path, sizeof path, "%s", test_path("built_v1.h5"));
    CHECK(build_v1(path));
    run_subject("built uint16/LZ4 pack", path, 1, 1);
    snprintf(path, sizeof path, "%s", test_path("built_v3.h5"));
    CHECK(build_v3(path));
    run_subject("built uint8/bitpacked pack", path, 1, 1);

    /* Upstream packs: 64 KiB user blocks, mostly zero padding (sampled). */
    static const char *pack_fixtures[] = {"v1_u16_4x32_16x16", "v3_upstream_test_writer_notes_v3",
                                          "v3_upstream_test_writer_legacy_nonportable"};
    for (size_t i = 0; i < sizeof pack_fixtures / sizeof *pack_fixtures; i++) {
        snprintf(rel, sizeof rel, "pack/%s.h5", pack_fixtures[i]);
        run_subject(pack_fixtures[i], fixture_path(rel), 1, 97);
    }

    snprintf(path, sizeof path, "%s", test_path("produced_v3.h5"));
    CHECK(produce_v3(path));
    run_subject("produced uint8/bitpacked HDF5 pack", path, 1, 97);

    fprintf(stderr,
            "total: tried %llu, refused %llu, identical %llu, flagged-by-verify %llu, silent "
            "%llu; truncations %llu, refused %llu, identical %llu; %.1f s\n",
            (unsigned long long)totals.tried, (unsigned long long)totals.refused,
            (unsigned long long)totals.identical, (unsigned long long)totals.flagged,
            (unsigned long long)totals.silent, (unsigned long long)totals.trunc_tried,
            (unsigned long long)totals.trunc_refused,
            (unsigned long long)totals.trunc_identical, totals.seconds);
    CHECK_EQ_U64(totals.silent, 0);
    /* The nibble swaps must reach the unhashed-header class (decoded
     * differently, caught by the whole-file identity alone) at least once,
     * or this test no longer exercises it. */
    CHECK(totals.flagged > 0 || sample_one_in > 1 ||
          (getenv("QEM_CORRUPTION_ONLY") && *getenv("QEM_CORRUPTION_ONLY")));
    return test_finish("unit_corruption_matrix");
}
