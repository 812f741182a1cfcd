/* The pack producer end to end: each profile from each source kind (.npy,
 * HDF5 4D, HDF5 3D with a scan shape, a Dectris/Arina family) produces a
 * pack that our reader loads exactly, raw and mask-applied; its digests and
 * identity match an independent computation; h5py opens it; and every
 * refusal publishes nothing. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <math.h>

#include "common/sha256.h"
#include "h5_build.h"
#include "test_util.h"

#define SR 4u
#define SC 16u
#define DR 8u
#define DC 8u
#define SCANS (SR * SC)
#define PIXELS (DR * DC)

static uint16_t data[SCANS * PIXELS];
static uint32_t pixel_mask[PIXELS];
static const uint32_t bad[] = {9, 30};

/* Admitted values fit uint8 (both profiles can take them); the two bad
 * pixels hold a constant that only uint16 can. */
static void make_data(void)
{
    uint64_t seed = 12;
    for (uint64_t k = 0; k < SCANS * PIXELS; k++)
        data[k] = (uint16_t)(test_rand(&seed) % (k % 3 ? 40 : 256));
    /* A bright-field disk around (3, 4), for the calibration estimate. */
    for (uint64_t k = 0; k < SCANS * PIXELS; k++) {
        const int r = (int)(k % PIXELS / DC) - 3, c = (int)(k % DC) - 4;
        if (r * r + c * c <= 4)
            data[k] = (uint16_t)(200 + test_rand(&seed) % 50);
    }
    for (uint64_t s = 0; s < SCANS; s++)
        for (size_t i = 0; i < 2; i++)
            data[s * PIXELS + bad[i]] = 65535;
    for (size_t i = 0; i < 2; i++)
        pixel_mask[bad[i]] = 1u << i;
}

static void hex(const uint8_t d[32], char out[65])
{
    qem_sha256_hex(d, out);
}

/* The manifest's `key` is the SHA-256 of `bytes`, computed here. */
static int manifest_digest_is(const json_t *m, const char *key, const void *bytes, size_t n)
{
    uint8_t d[32];
    char h[65];
    qem_sha256_oneshot(bytes, n, d);
    hex(d, h);
    const char *got = json_string_value(json_object_get(m, key));
    return got && !strcmp(got, h);
}

static void file_sha(const char *path, char out[65])
{
    size_t n = 0;
    uint8_t *bytes = read_file(path, &n), d[32];
    qem_sha256_oneshot(bytes, n, d);
    free(bytes);
    hex(d, out);
}

/* The identity, computed here from the members' bytes. */
static void identity(const char *master, char (*members)[512], size_t count, char out[65])
{
    qem_sha256 *ctx = qem_sha256_new();
    qem_sha256_update(ctx, "live4dstem.dataset/v0.1", 24); /* with its NUL */
    char h[65];
    file_sha(master, h);
    qem_sha256_update(ctx, h, 64);
    for (size_t i = 0; i < count; i++) {
        file_sha(members[i], h);
        qem_sha256_update(ctx, "", 1);
        qem_sha256_update(ctx, h, 64);
    }
    uint8_t d[32];
    qem_sha256_final(ctx, d);
    qem_sha256_free(ctx);
    hex(d, out);
}

static int python_check(const char *pack)
{
    char cmd[1536];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/check_pack_h5.py '%s' >&2", QEM_TOOLS, pack);
    return system(cmd) == 0;
}

static json_t *manifest_of(const char *pack)
{
    size_t n = 0;
    uint8_t *bytes = read_file(pack, &n);
    uint32_t len = 0;
    if (bytes && n > 24)
        memcpy(&len, bytes + 8, 4);
    json_t *m = bytes ? json_loadb((const char *)bytes + 24, len, 0, NULL) : NULL;
    free(bytes);
    return m;
}

typedef struct source_case {
    const char *name;
    char path[512];
    char data_files[4][512];
    size_t data_count;
    int has_mask;
    qem_acquisition_options options;
} source_case;

static void produce_and_check(source_case *sc, qem_pack_profile profile)
{
    qem_error e = {0};
    char dest[600];
    snprintf(dest, sizeof dest, "%s/%s_%s.h5", test_dir(), sc->name,
             profile == QEM_PACK_UINT16_LZ4 ? "u16" : "u8");
    qem_pack_inspection *in = NULL;
    CHECK_OK(qem_pack_inspect(sc->path, &sc->options, &in, &e), &e);
    if (!in)
        return;
    qem_pack_plan_options po;
    qem_pack_plan_options_init(&po);
    po.profile = profile;
    po.destination = dest;
    /* Without a source mask the uint8 profile needs the hot pixels named. */
    uint8_t exclude[PIXELS] = {0};
    const int excluded_by_option = !sc->has_mask && profile == QEM_PACK_UINT8_BITPACKED;
    if (excluded_by_option) {
        exclude[bad[0]] = exclude[bad[1]] = 1;
        po.exclude = exclude;
    }
    qem_pack_plan plan = {.struct_size = sizeof plan};
    CHECK_OK(qem_pack_plan_make(in, &po, &plan, &e), &e);
    CHECK_EQ_U64(plan.scans_per_shard * plan.shard_count, SCANS);
    CHECK_OK(qem_pack_produce(in, &po, dest, NULL, &e), &e);
    qem_pack_inspection_free(in);

    /* Our reader loads it exactly. */
    const uint64_t excluded = sc->has_mask || excluded_by_option ? 2 : 0;
    qem_pack *p = NULL;
    CHECK_OK(qem_pack_open(dest, NULL, &p, &e), &e);
    if (!p)
        return;
    CHECK_OK(qem_pack_load(p, NULL, &e), &e);
    qem_pack_info info = {.struct_size = sizeof info};
    qem_pack_get_info(p, &info, NULL);
    CHECK_EQ_U64(info.profile, profile);
    CHECK_EQ_U64(info.excluded_count, excluded);
    CHECK_EQ_U64(info.raw_access, !excluded                        ? QEM_RAW_EXACT_NO_EXCLUSIONS
                                  : profile == QEM_PACK_UINT16_LZ4 ? QEM_RAW_RETAINED_PAYLOAD
                                                                   : QEM_RAW_EXCLUSION_CONSTANTS);
    uint16_t raw[SCANS * PIXELS];
    CHECK_OK(qem_pack_read_scans(p, 0, SCANS, QEM_VALUES_RAW, raw, sizeof raw, &e), &e);
    CHECK(memcmp(raw, data, sizeof raw) == 0);
    uint8_t work[SCANS * PIXELS * 2];
    CHECK_OK(qem_pack_read_scans(p, 0, SCANS, QEM_VALUES_WORKING, work, sizeof work, &e), &e);
    int wrong = 0;
    uint16_t working16[SCANS * PIXELS];
    uint8_t working8[SCANS * PIXELS];
    for (uint64_t k = 0; k < SCANS * PIXELS; k++) {
        const int ex = excluded && (k % PIXELS == bad[0] || k % PIXELS == bad[1]);
        const uint16_t want = ex ? 0 : data[k];
        working16[k] = want;
        working8[k] = (uint8_t)want;
        wrong += (profile == QEM_PACK_UINT8_BITPACKED ? work[k] : ((uint16_t *)work)[k]) != want;
    }
    CHECK_EQ_U64(wrong, 0);
    qem_pack_close(p);

    /* The producer recorded the detector calibration estimate: exactly the
     * one products compute from the pack's own mean pattern. */
    {
        qem_container *c = NULL;
        CHECK_OK(qem_container_open(dest, NULL, &c, &e), &e);
        qem_products *pp = NULL;
        if (c)
            CHECK_OK(qem_products_open(c, NULL, &pp, &e), &e);
        qem_detector_calibration est = {.struct_size = sizeof est};
        qem_detector_calibration rec = {.struct_size = sizeof rec};
        if (pp) {
            CHECK_OK(qem_products_file_calibration(pp, &rec, &e), &e);
            CHECK_OK(qem_products_estimate_calibration(pp, &est, &e), &e);
            CHECK(est.center_row == rec.center_row && est.center_column == rec.center_column &&
                  est.bright_field_radius == rec.bright_field_radius);
            CHECK(fabs(rec.center_row - 3) < 0.5 && fabs(rec.center_column - 4) < 0.5);
            CHECK(!strcmp(rec.method, "mean-diffraction-half-maximum") && !rec.has_dpc);
        }
        qem_products_close(pp);
        qem_container_close(c);
    }

    /* The prepared extensions: the moments and the BF/ABF/ADF images
     * about the recorded calibration (qem's own member for uint16) read
     * straight from the
     * ranges the manifest names equal a dense computation over the
     * working values; products take them without decoding and agree with
     * the reference path. */
    {
        json_t *pm = manifest_of(dest);
        const json_t *dpc = json_object_get(pm, "prepared_dpc_moments");
        CHECK(json_is_object(dpc));
        size_t fn = 0;
        uint8_t *file = read_file(dest, &fn);
        const uint64_t at = (uint64_t)json_integer_value(json_object_get(dpc, "file_offset"));
        CHECK(file && at % 4 == 0 && at + 32 * SCANS <= fn);
        for (uint64_t s = 0; file && at + 32 * SCANS <= fn && s < SCANS; s++) {
            uint64_t t = 0, rm = 0, cm = 0, got[4];
            for (uint64_t px = 0; px < PIXELS; px++) {
                const uint64_t v = profile == QEM_PACK_UINT16_LZ4 ? working16[s * PIXELS + px]
                                                                  : working8[s * PIXELS + px];
                t += v;
                rm += v * (px / DC);
                cm += v * (px % DC);
            }
            memcpy(got, file + at + 32 * s, 32);
            CHECK(got[0] == t && got[1] == rm && got[2] == cm && got[3] == 0);
        }
        const int u8 = profile == QEM_PACK_UINT8_BITPACKED;
        const json_t *prod = json_object_get(
            pm, u8 ? "prepared_detector_products" : "qem_prepared_detector_products");
        CHECK(json_is_object(prod));
        CHECK(!json_object_get(pm, u8 ? "qem_prepared_detector_products"
                                      : "prepared_detector_products"));
        for (size_t k = 0; file && json_is_object(prod) && k < 3; k++) {
            const json_t *r = json_array_get(json_object_get(prod, "products"), k);
            const uint64_t mat = (uint64_t)json_integer_value(json_object_get(r, "mask_file_offset"));
            const uint64_t vat =
                (uint64_t)json_integer_value(json_object_get(r, "values_file_offset"));
            CHECK(mat + PIXELS <= fn && vat + 4 * SCANS <= fn);
            if (mat + PIXELS > fn || vat + 4 * SCANS > fn)
                break;
            for (uint64_t s = 0; s < SCANS; s++) {
                uint32_t sum = 0, got;
                for (uint64_t px = 0; px < PIXELS; px++)
                    sum += file[mat + px] ? (u8 ? working8[s * PIXELS + px]
                                                : working16[s * PIXELS + px])
                                          : 0;
                memcpy(&got, file + vat + 4 * s, 4);
                CHECK(got == sum);
            }
        }
        free(file);
        json_decref(pm);
        qem_container *c = NULL;
        CHECK_OK(qem_container_open(dest, NULL, &c, &e), &e);
        qem_products *fast = NULL, *ref = NULL;
        if (c) {
            CHECK_OK(qem_products_open(c, NULL, &fast, &e), &e);
            CHECK_OK(qem_products_open_path(c, NULL, QEM_PATH_REFERENCE, &ref, &e), &e);
        }
        qem_image a = {0}, b = {0};
        if (fast && ref) {
            CHECK_OK(qem_products_com(fast, NULL, 0, &a, &e), &e);
            CHECK(qem_products_last_origin(fast) == QEM_ORIGIN_RECORDED);
            CHECK_OK(qem_products_com(ref, NULL, 0, &b, &e), &e);
            CHECK(qem_products_last_origin(ref) == QEM_ORIGIN_COMPUTED);
            CHECK(a.data && b.data && memcmp(a.data, b.data, SCANS * 2 * sizeof(float)) == 0);
        }
        qem_image_free(&a);
        qem_image_free(&b);
        qem_products_close(fast);
        qem_products_close(ref);
        qem_container_close(c);
    }

    /* Digests and identity, computed independently. */
    json_t *m = manifest_of(dest);
    char h[65];
    CHECK(manifest_digest_is(m, "source_raw_logical_sha256", data, sizeof data));
    if (profile == QEM_PACK_UINT16_LZ4) {
        CHECK(manifest_digest_is(m, "working_logical_sha256", working16, sizeof working16));
        CHECK(!strcmp(json_string_value(json_object_get(m, "masked_detector_payload_policy")),
                      "retained_exactly_in_payload"));
        json_t *shard = json_array_get(json_object_get(m, "shards"), 0);
        CHECK(json_is_string(json_object_get(shard, "encoded_envelope_sha256")));
        CHECK(json_is_string(json_object_get(shard, "payload_compressed_sha256")));
    } else {
        CHECK(manifest_digest_is(m, "prepared_uint8_sha256", working8, sizeof working8));
        if (excluded) {
            json_t *v = json_object_get(m, "masked_detector_raw_values");
            CHECK(json_integer_value(json_array_get(v, 0)) == 65535);
        }
    }
    char id[65];
    identity(sc->path, sc->data_files, sc->data_count, id);
    CHECK(!strcmp(json_string_value(json_object_get(m, "source_identity_sha256")), id));
    json_decref(m);

    /* The receipt stands beside its pack and describes it. */
    char receipt_path[640];
    snprintf(receipt_path, sizeof receipt_path, "%s.receipt.json", dest);
    json_error_t jerr;
    json_t *r = json_load_file(receipt_path, 0, &jerr);
    CHECK(r != NULL);
    file_sha(dest, h);
    CHECK(r && !strcmp(json_string_value(json_object_get(r, "outputSHA256")), h));
    CHECK(r && !strcmp(json_string_value(json_object_get(r, "sourceIdentitySHA256")), id));
    CHECK(r && !strcmp(json_string_value(json_object_get(r, "schema")),
                       "quantem.gpu.lossless-pack-production/v1"));
    CHECK(r && json_is_false(json_object_get(r, "gpuAccelerated")));
    CHECK(r && !strcmp(json_string_value(json_object_get(r, "executionBackend")), "cpu-reference"));
    CHECK(r && json_array_size(json_object_get(r, "sourceMembers")) == 1 + sc->data_count);
    CHECK(r && json_integer_value(json_object_get(r, "observedPackedResidentBytes")) <=
                   json_integer_value(json_object_get(r, "predictedPackedResidentMaximumBytes")));
    CHECK(r && json_integer_value(json_object_get(r, "accountedPeakTransientBytes")) <=
                   json_integer_value(json_object_get(r, "predictedPeakTransientBytes")));
    json_decref(r);
    /* h5py, as a user would open it. */
    CHECK(python_check(dest));
}

static int count_dir(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d)
        closedir(d);
    return n;
}

static void refusals(source_case *npy)
{
    qem_error e = {0};
    qem_pack_inspection *in = NULL;
    qem_pack_plan_options po;
    qem_pack_plan_options_init(&po);
    char dest[600], receipt[640]; /* test_path's buffers are reused */
    snprintf(dest, sizeof dest, "%s", test_path("refused.h5"));
    snprintf(receipt, sizeof receipt, "%s.receipt.json", dest);

    /* An existing destination, or an existing receipt, is left untouched. */
    CHECK(write_file(dest, "mine", 4));
    CHECK_OK(qem_pack_inspect(npy->path, NULL, &in, &e), &e);
    CHECK_STATUS(qem_pack_produce(in, &po, dest, NULL, &e), QEM_E_EXISTS, &e);
    size_t n = 0;
    uint8_t *kept = read_file(dest, &n);
    CHECK(kept && n == 4 && !memcmp(kept, "mine", 4));
    free(kept);
    CHECK(!file_exists(receipt));
    remove(dest);
    CHECK(write_file(receipt, "{}", 2));
    CHECK_STATUS(qem_pack_produce(in, &po, dest, NULL, &e), QEM_E_EXISTS, &e);
    CHECK(!file_exists(dest));
    remove(receipt);

    /* Short disk or memory: the plan says so with both figures. */
    qem_pack_plan plan = {.struct_size = sizeof plan};
    po.available_disk = 1000;
    CHECK_STATUS(qem_pack_plan_make(in, &po, &plan, &e), QEM_E_INSUFFICIENT_DISK, &e);
    CHECK(strstr(e.message, "1000 are available") != NULL);
    CHECK_STATUS(qem_pack_produce(in, &po, dest, NULL, &e), QEM_E_INSUFFICIENT_DISK, &e);
    po.available_disk = 0;
    po.available_memory = 1000;
    CHECK_STATUS(qem_pack_plan_make(in, &po, &plan, &e), QEM_E_INSUFFICIENT_MEMORY, &e);
    po.available_memory = 0;
    CHECK(!file_exists(dest) && !file_exists(receipt));

    /* A nonconstant excluded pixel cannot be recorded by the uint8 profile. */
    uint8_t extra[PIXELS] = {0};
    extra[17] = 1;
    po.profile = QEM_PACK_UINT8_BITPACKED;
    po.exclude = extra;
    CHECK_STATUS(qem_pack_produce(in, &po, dest, NULL, &e), QEM_E_NONCONSTANT_EXCLUDED, &e);
    CHECK(strstr(e.message, "excluded detector pixel 17") != NULL);
    po.exclude = NULL;
    CHECK(!file_exists(dest) && !file_exists(receipt));
    qem_pack_inspection_free(in);

    /* A value above 255 at an admitted pixel stops the uint8 profile (the
     * constant bad pixels are excluded, so that is the only one). */
    const uint64_t shape[4] = {SR, SC, DR, DC};
    const uint16_t kept_value = data[40 * PIXELS + 3];
    data[40 * PIXELS + 3] = 300;
    CHECK(write_npy4(test_path("hot.npy"), QEM_DTYPE_UINT16, shape, data));
    data[40 * PIXELS + 3] = kept_value;
    memset(extra, 0, sizeof extra);
    extra[bad[0]] = extra[bad[1]] = 1;
    po.exclude = extra;
    CHECK_OK(qem_pack_inspect(test_path("hot.npy"), NULL, &in, &e), &e);
    CHECK_STATUS(qem_pack_produce(in, &po, dest, NULL, &e), QEM_E_VALUE_RANGE, &e);
    CHECK(strstr(e.message, "scan 40, detector pixel 3 holds 300") != NULL);
    po.exclude = NULL;
    qem_pack_inspection_free(in);
    CHECK(!file_exists(dest) && !file_exists(receipt));

    /* The source changes between inspect and produce. */
    CHECK(write_npy4(test_path("moving.npy"), QEM_DTYPE_UINT16, shape, data));
    CHECK_OK(qem_pack_inspect(test_path("moving.npy"), NULL, &in, &e), &e);
    FILE *f = fopen(test_path("moving.npy"), "r+b");
    fseek(f, -1, SEEK_END);
    fputc(7, f);
    fclose(f);
    po.profile = QEM_PACK_UINT16_LZ4;
    CHECK_STATUS(qem_pack_produce(in, &po, dest, NULL, &e), QEM_E_CHANGED, &e);
    qem_pack_inspection_free(in);
    CHECK(!file_exists(dest) && !file_exists(receipt));

    /* uint8 counts: both profiles pack them widened, raw digest of the
     * uint16 LE array the pack describes (the uint16 profile also takes
     * scan counts that are no multiple of 32, as 1- and 6-bit Merlin
     * files can have). */
    uint8_t small[SCANS * PIXELS];
    uint16_t widened[SCANS * PIXELS];
    for (uint64_t k = 0; k < SCANS * PIXELS; k++)
        widened[k] = small[k] = (uint8_t)(k * 7 % 251);
    CHECK(write_npy4(test_path("u8.npy"), QEM_DTYPE_UINT8, shape, small));
    for (int k = 0; k < 2; k++) {
        CHECK_OK(qem_pack_inspect(test_path("u8.npy"), NULL, &in, &e), &e);
        po.profile = k ? QEM_PACK_UINT8_BITPACKED : QEM_PACK_UINT16_LZ4;
        CHECK_OK(qem_pack_produce(in, &po, dest, NULL, &e), &e);
        qem_pack_inspection_free(in);
        qem_pack *p = NULL;
        CHECK_OK(qem_pack_open(dest, NULL, &p, &e), &e);
        CHECK_OK(qem_pack_load(p, NULL, &e), &e);
        uint16_t back[SCANS * PIXELS];
        CHECK_OK(qem_pack_read_scans(p, 0, SCANS, QEM_VALUES_RAW, back, sizeof back, &e), &e);
        CHECK(memcmp(back, widened, sizeof back) == 0);
        qem_pack_close(p);
        json_t *m = manifest_of(dest);
        CHECK(manifest_digest_is(m, "source_raw_logical_sha256", widened, sizeof widened));
        CHECK(!strcmp(json_string_value(json_object_get(m, "source_dtype")), "uint16"));
        if (k)
            CHECK(manifest_digest_is(m, "prepared_uint8_sha256", small, sizeof small));
        json_decref(m);
        CHECK(python_check(dest));
        unlink(dest);
        unlink(receipt);
    }

    /* A uint8 source of 3 x 5 scans: the uint8 profile refuses the count,
     * the uint16 one packs it exactly. */
    const uint64_t odd_shape[4] = {3, 5, shape[2], shape[3]};
    CHECK(write_npy4(test_path("u8odd.npy"), QEM_DTYPE_UINT8, odd_shape, small));
    CHECK_OK(qem_pack_inspect(test_path("u8odd.npy"), NULL, &in, &e), &e);
    po.profile = QEM_PACK_UINT8_BITPACKED;
    CHECK_STATUS(qem_pack_plan_make(in, &po, &plan, &e), QEM_E_INVALID_ARGUMENT, &e);
    CHECK(strstr(e.message, "multiple of 32") != NULL);
    po.profile = QEM_PACK_UINT16_LZ4;
    CHECK_OK(qem_pack_produce(in, &po, dest, NULL, &e), &e);
    qem_pack_inspection_free(in);
    qem_pack *p = NULL;
    CHECK_OK(qem_pack_open(dest, NULL, &p, &e), &e);
    CHECK_OK(qem_pack_load(p, NULL, &e), &e);
    uint16_t back[15 * PIXELS];
    CHECK_OK(qem_pack_read_scans(p, 0, 15, QEM_VALUES_RAW, back, sizeof back, &e), &e);
    CHECK(memcmp(back, widened, sizeof back) == 0);
    qem_pack_close(p);
    CHECK(python_check(dest));
}

/* The end of the prelude, manifest and index a pack's prelude names. */
static uint64_t metadata_end(const char *pack)
{
    uint8_t pre[24] = {0};
    FILE *f = fopen(pack, "rb");
    const int ok = f && fread(pre, 1, sizeof pre, f) == sizeof pre;
    if (f)
        fclose(f);
    uint32_t index_at = 0, index_bytes = 0;
    memcpy(&index_at, pre + 16, 4);
    memcpy(&index_bytes, pre + 20, 4);
    return ok ? (uint64_t)index_at + index_bytes : 0;
}

/* Several shards: 8192 scans give two 4096-scan shards in each profile;
 * 5000 scans have no multiple-of-128 divisor, so uint16/LZ4 shards of 2500
 * end in a partial tile, and uint8 (no multiple of 32 divides) is refused. */
static void multi_shard(uint64_t sr, uint64_t sc, qem_pack_profile profile, uint64_t want_shards)
{
    const uint64_t scans = sr * sc, n = scans * PIXELS;
    uint16_t *v = malloc(n * 2), *back = malloc(n * 2);
    uint64_t seed = sr * 7 + profile;
    for (uint64_t k = 0; k < n; k++) /* some all-zero scans, some wide values */
        v[k] = (k / PIXELS) % 97 == 5 ? 0 : (uint16_t)(test_rand(&seed) % (k % 5 ? 200 : 256));
    char src[600], dest[700];
    snprintf(src, sizeof src, "%s/multi_%llu_%d.npy", test_dir(), (unsigned long long)scans,
             (int)profile);
    snprintf(dest, sizeof dest, "%s.h5", src);
    const uint64_t shape[4] = {sr, sc, DR, DC};
    CHECK(write_npy4(src, QEM_DTYPE_UINT16, shape, v));
    qem_error e = {0};
    qem_pack_inspection *in = NULL;
    CHECK_OK(qem_pack_inspect(src, NULL, &in, &e), &e);
    qem_pack_plan_options po;
    qem_pack_plan_options_init(&po);
    po.profile = profile;
    qem_pack_plan plan = {.struct_size = sizeof plan};
    if (!want_shards) {
        CHECK_STATUS(qem_pack_plan_make(in, &po, &plan, &e), QEM_E_INVALID_ARGUMENT, &e);
        CHECK(strstr(e.message, "multiple of 32") != NULL);
        qem_pack_inspection_free(in);
        free(v);
        free(back);
        return;
    }
    CHECK_OK(qem_pack_plan_make(in, &po, &plan, &e), &e);
    CHECK_EQ_U64(plan.shard_count, want_shards);
    CHECK_EQ_U64(plan.user_block_bytes, 65536);
    CHECK_OK(qem_pack_produce(in, &po, dest, NULL, &e), &e);
    qem_pack_inspection_free(in);
    const uint64_t end = metadata_end(dest);
    CHECK(end > 0 && end <= plan.metadata_max_bytes);
    qem_pack *p = NULL;
    CHECK_OK(qem_pack_open(dest, NULL, &p, &e), &e);
    CHECK_OK(qem_pack_load(p, NULL, &e), &e);
    /* Read across the shard boundary in odd-sized pieces. */
    for (uint64_t at = 0; at < scans;) {
        const uint64_t count = at + 999 < scans ? 999 : scans - at;
        CHECK_OK(qem_pack_read_scans(p, at, count, QEM_VALUES_RAW, back + at * PIXELS,
                                     count * PIXELS * 2, &e),
                 &e);
        at += count;
    }
    CHECK(memcmp(back, v, n * 2) == 0);
    qem_pack_close(p);
    CHECK(python_check(dest));
    free(v);
    free(back);
}

/* A small .npy of `rows` x `cols` scans of 2 x 2 counts below 256. */
static uint16_t *small_detector_npy(const char *path, uint64_t rows, uint64_t cols)
{
    const uint64_t n = rows * cols * 4, shape[4] = {rows, cols, 2, 2};
    uint16_t *v = malloc(n * 2);
    uint64_t seed = rows + cols;
    for (uint64_t k = 0; k < n; k++)
        v[k] = (uint16_t)(test_rand(&seed) % 256);
    CHECK(write_npy4(path, QEM_DTYPE_UINT16, shape, v));
    return v;
}

/* Metadata beyond 64 KiB: 32 x 1021 scans (1021 is prime) leave the uint8
 * profile 32-scan shards, 1021 of them, whose index alone (96 bytes a
 * shard) passes the usual 65536-byte user block. The plan gives the pack
 * the power-of-two user block its largest metadata needs, so production
 * succeeds (it used to write every shard, then refuse) and the pack reads
 * back exactly; h5py sees that user block. A set whose metadata would pass
 * the largest user block (2 x 20011 scans: uint16 shards of 2 scans,
 * 20011 manifest entries) is refused at planning with both sizes, and
 * production writes nothing. */
static void metadata_beyond_64k(void)
{
    enum { ROWS = 32, COLS = 1021 };
    const uint64_t n = (uint64_t)ROWS * COLS * 4;
    char src[600], dest[700];
    snprintf(src, sizeof src, "%s/many_shards.npy", test_dir());
    snprintf(dest, sizeof dest, "%s.h5", src);
    uint16_t *v = small_detector_npy(src, ROWS, COLS), *back = malloc(n * 2);
    qem_error e = {0};
    qem_pack_inspection *in = NULL;
    CHECK_OK(qem_pack_inspect(src, NULL, &in, &e), &e);
    qem_pack_plan_options po;
    qem_pack_plan_options_init(&po);
    po.profile = QEM_PACK_UINT8_BITPACKED;
    qem_pack_plan plan = {.struct_size = sizeof plan};
    CHECK_OK(qem_pack_plan_make(in, &po, &plan, &e), &e);
    CHECK_EQ_U64(plan.shard_count, COLS);
    CHECK(plan.metadata_max_bytes > 65536 && plan.metadata_max_bytes <= plan.user_block_bytes);
    CHECK_EQ_U64(plan.user_block_bytes, 131072);
    CHECK(plan.output_max_bytes > plan.user_block_bytes);
    CHECK_OK(qem_pack_produce(in, &po, dest, NULL, &e), &e);
    qem_pack_inspection_free(in);
    const uint64_t end = metadata_end(dest);
    CHECK(end > 65536 && end <= plan.metadata_max_bytes);
    qem_pack *p = NULL;
    CHECK_OK(qem_pack_open(dest, NULL, &p, &e), &e);
    CHECK_OK(qem_pack_load(p, NULL, &e), &e);
    CHECK_OK(qem_pack_read_scans(p, 0, ROWS * COLS, QEM_VALUES_RAW, back, n * 2, &e), &e);
    CHECK(memcmp(back, v, n * 2) == 0);
    qem_pack_close(p);
    char cmd[1600];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/check_pack_h5.py '%s' 131072 >&2", QEM_TOOLS,
             dest);
    CHECK(system(cmd) == 0);
    free(v);
    free(back);

    snprintf(src, sizeof src, "%s/too_many_shards.npy", test_dir());
    snprintf(dest, sizeof dest, "%s.h5", src);
    free(small_detector_npy(src, 2, 20011));
    CHECK_OK(qem_pack_inspect(src, NULL, &in, &e), &e);
    po.profile = QEM_PACK_UINT16_LZ4;
    CHECK_STATUS(qem_pack_plan_make(in, &po, &plan, &e), QEM_E_LIMIT, &e);
    CHECK(strstr(e.message, "20011 shards") && strstr(e.message, "16777216 bytes"));
    CHECK_STATUS(qem_pack_produce(in, &po, dest, NULL, &e), QEM_E_LIMIT, &e);
    qem_pack_inspection_free(in);
    struct stat sb;
    CHECK(stat(dest, &sb) != 0 && errno == ENOENT);
}

/* SIGKILL or SIGINT at random points of `qem pack produce`: afterwards there is no
 * destination, no receipt and no temporary file, or a complete pack with
 * its receipt that verifies. A kill between the two final links does not
 * split them: a child the kill does not reach makes both, so each run is
 * judged once its linking child is gone too (this process adopts it as
 * the subreaper and waits for the run's process group). A receipt alone,
 * as a power loss leaves, is unit_crash_safety's case. */
static void killed_mid_produce(void)
{
    CHECK(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
    char dir[600];
    snprintf(dir, sizeof dir, "%s/kill", test_dir());
    mkdir(dir, 0755);
    char src[700];
    snprintf(src, sizeof src, "%s/big.npy", test_dir());
    const uint64_t shape[4] = {32, 64, 64, 64}; /* 16 MiB */
    uint16_t *big = malloc(32 * 64 * 64 * 64 * 2);
    uint64_t seed = 99;
    for (uint64_t k = 0; k < 32ull * 64 * 64 * 64; k++)
        big[k] = (uint16_t)(test_rand(&seed) % 3000);
    CHECK(write_npy4(src, QEM_DTYPE_UINT16, shape, big));
    free(big);
    /* One uninterrupted run sets the span the kills are spread over. */
    char first[800];
    snprintf(first, sizeof first, "%s/timed.h5", test_dir());
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid_t pid = fork();
    if (pid == 0) {
        execl(QEM_CLI, QEM_CLI, "pack", "produce", src, first, "--quiet", (char *)NULL);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    const long span_ns = (t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec);
    int complete = 0, empty = 0, orphaned = 0, cancelled = 0;
    srand(7);
    for (int run = 0; run < 12; run++) {
        char dest[800];
        snprintf(dest, sizeof dest, "%s/out%d.h5", dir, run);
        pid = fork();
        if (pid == 0) {
            setpgid(0, 0);
            execl(QEM_CLI, QEM_CLI, "pack", "produce", src, dest, "--quiet", (char *)NULL);
            _exit(127);
        }
        setpgid(pid, pid);
        /* Most kills land inside the run; a few after it. */
        const long at = (long)((double)rand() / RAND_MAX * 1.1 * (double)span_ns);
        struct timespec ts = {at / 1000000000L, at % 1000000000L};
        nanosleep(&ts, NULL);
        /* Odd runs are a Ctrl-C, which the CLI turns into a clean cancel. */
        kill(pid, run % 2 ? SIGINT : SIGKILL);
        waitpid(pid, &status, 0);
        while (waitpid(-pid, NULL, 0) > 0 || errno == EINTR) {
        }
        if (run % 2 && WIFEXITED(status) && WEXITSTATUS(status) != 0)
            cancelled++;
        char receipt[900];
        snprintf(receipt, sizeof receipt, "%s.receipt.json", dest);
        if (file_exists(dest)) {
            /* It finished first: then both stand, and the pack verifies. */
            CHECK(file_exists(receipt));
            int loaded = 0;
            qem_pack *p = NULL;
            qem_error e = {0};
            CHECK_OK(qem_pack_open(dest, NULL, &p, &e), &e);
            if (p)
                CHECK_OK(qem_pack_load(p, NULL, &e), &e);
            if (p) {
                qem_pack_info info = {.struct_size = sizeof info};
                qem_pack_get_info(p, &info, NULL);
                loaded = info.loaded;
            }
            qem_pack_close(p);
            CHECK(loaded);
            complete++;
        } else if (file_exists(receipt)) {
            orphaned++; /* a receipt without its pack: never from a kill */
        } else {
            empty++;
        }
    }
    /* Only what the runs published, never a temporary. */
    CHECK_EQ_U64(orphaned, 0);
    CHECK_EQ_U64(count_dir(dir), 2 * complete + orphaned);
    CHECK(empty > 0);
    CHECK(prctl(PR_SET_CHILD_SUBREAPER, 0) == 0);
    fprintf(stderr,
            "killed produce: %d runs left nothing (%d by a clean Ctrl-C cancel), %d had "
            "finished\n",
            empty, cancelled, complete);
}

int main(void)
{
    make_data();
    qem_error e = {0};
    const uint64_t shape4[4] = {SR, SC, DR, DC};
    source_case cases[4] = {{0}};
    /* .npy */
    cases[0].name = "npy";
    snprintf(cases[0].path, sizeof cases[0].path, "%s", test_path("src.npy"));
    CHECK(write_npy4(cases[0].path, QEM_DTYPE_UINT16, shape4, data));
    /* HDF5 4D, contiguous */
    cases[1].name = "h5_4d";
    snprintf(cases[1].path, sizeof cases[1].path, "%s", test_path("src4.h5"));
    h5b_dataset d4 = {"/data", H5T_STD_U16LE, H5T_NATIVE_UINT16, 4, {SR, SC, DR, DC}, {0},
                      0, 0, 0, data};
    CHECK(h5b_write_dataset(cases[1].path, &d4) == 0);
    /* HDF5 3D, bitshuffle/LZ4 frames, scan shape given */
    cases[2].name = "h5_3d";
    snprintf(cases[2].path, sizeof cases[2].path, "%s", test_path("src3.h5"));
    h5b_dataset d3 = {"/entry/frames", H5T_STD_U16LE, H5T_NATIVE_UINT16, 3, {SCANS, DR, DC},
                      {1, DR, DC}, 1, 0, 0, data};
    CHECK(h5b_write_dataset(cases[2].path, &d3) == 0);
    qem_acquisition_options_init(&cases[2].options);
    cases[2].options.dataset = "/entry/frames";
    cases[2].options.scan_shape[0] = SR;
    cases[2].options.scan_shape[1] = SC;
    /* A Dectris/Arina family of two data files with a pixel mask */
    cases[3].name = "arina";
    cases[3].has_mask = 1;
    cases[3].data_count = 2;
    static const uint64_t frames[2] = {40, 24};
    char fam[600];
    snprintf(fam, sizeof fam, "%s/family", test_dir());
    mkdir(fam, 0755);
    const h5b_arina a = {.dir = fam, .stem = "scan", .files = 2, .frames = frames, .rows = DR,
                         .columns = DC, .data = data, .scan_rows = SR, .scan_columns = SC,
                         .pixel_mask = pixel_mask};
    CHECK(h5b_write_arina(&a, cases[3].path, sizeof cases[3].path, cases[3].data_files) == 0);

    for (int k = 0; k < 4; k++) {
        if (!cases[k].options.struct_size)
            qem_acquisition_options_init(&cases[k].options);
        produce_and_check(&cases[k], QEM_PACK_UINT16_LZ4);
        produce_and_check(&cases[k], QEM_PACK_UINT8_BITPACKED);
    }
    (void)e;
    refusals(&cases[0]);
    multi_shard(64, 128, QEM_PACK_UINT16_LZ4, 2);
    multi_shard(64, 128, QEM_PACK_UINT8_BITPACKED, 2);
    multi_shard(100, 50, QEM_PACK_UINT16_LZ4, 2);
    multi_shard(100, 50, QEM_PACK_UINT8_BITPACKED, 0);
    metadata_beyond_64k();
    killed_mid_produce();
    return test_finish("unit_pack_produce");
}
