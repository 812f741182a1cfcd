/* Writes the fuzz targets' seed corpora from the upstream fixtures:
 *   seeds SHARED_DIR OUT_DIR
 * OUT_DIR/<target>/ gets the fixtures in the layout each target reads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mib_build.h"
#include "qem.h"
#include "rans/rans.h"
#include "seeds_blo.h"
#include "seeds_csr.h"
#include "seeds_dectris.h"
#include "seeds_dectris2.h"
#include "seeds_de_info.h"
#include "seeds_dm.h"
#include "seeds_frms6.h"
#include "seeds_k2is.h"
#include "seeds_mrc.h"
#include "seeds_seq.h"
#include "seeds_tia.h"
#include "seeds_tvips.h"
#include "seeds_velox.h"

/* Where Debian's python3-hyperspy keeps HyperSpy's test files. */
#define HYPERSPY_IO "/usr/lib/python3/dist-packages/hyperspy/tests/io"

static uint8_t *slurp(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    *size = b ? fread(b, 1, (size_t)n, f) : 0;
    fclose(f);
    return b;
}

static void put(const char *dir, const char *target, const char *name, const void *a, size_t na,
                const void *b, size_t nb)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, target);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s", dir, target, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return;
    fwrite(a, 1, na, f);
    if (b)
        fwrite(b, 1, nb, f);
    fclose(f);
}

static void u32le(uint8_t out[4], uint32_t v)
{
    for (int k = 0; k < 4; k++)
        out[k] = (uint8_t)(v >> (8 * k));
}

/* fuzz_merlin_stream: the real .mib files' first frames as a Merlin data
 * port sends them ("MPX," + ten digits + "," + payload: the .hdr, then
 * each frame record), and a stream cut inside its second frame. */
static void merlin_stream_seeds(const char *shared, const char *out)
{
    static const struct {
        const char *stem;
        size_t record; /* header + samples */
    } mibs[] = {{"001_4x2_6bit", 384 + 65536},
                {"Single_9_Frame_CounterDepth_12_Rows_256", 384 + 131072},
                {"Single_1_Frame_CounterDepth_24_Rows_256", 384 + 262144},
                {"Single_1_Frame_CounterDepth_1_Rows_256", 384 + 65536}};
    for (size_t i = 0; i < sizeof mibs / sizeof mibs[0]; i++) {
        char path[1024], name[256];
        size_t nm = 0, nh = 0;
        snprintf(path, sizeof path, "%s/fixtures/detectors/mib/%s.mib", shared, mibs[i].stem);
        uint8_t *m = slurp(path, &nm);
        snprintf(path, sizeof path, "%s/fixtures/detectors/mib/%s.hdr", shared, mibs[i].stem);
        uint8_t *h = slurp(path, &nh);
        const size_t frames = m && nm >= mibs[i].record ? (nm / mibs[i].record < 2 ? 1 : 2) : 0;
        uint8_t *stream = h && frames ? malloc(15 + nh + frames * (15 + mibs[i].record)) : NULL;
        if (stream) {
            size_t at = 0;
            at += (size_t)sprintf((char *)stream, "MPX,%010zu,", nh + 1);
            memcpy(stream + at, h, nh);
            at += nh;
            for (size_t f = 0; f < frames; f++) {
                char prefix[16];
                snprintf(prefix, sizeof prefix, "MPX,%010zu,", mibs[i].record + 1);
                memcpy(stream + at, prefix, 15);
                memcpy(stream + at + 15, m + f * mibs[i].record, mibs[i].record);
                at += 15 + mibs[i].record;
            }
            snprintf(name, sizeof name, "%s", mibs[i].stem);
            put(out, "merlin_stream", name, stream, at, NULL, 0);
            if (frames == 2) {
                snprintf(name, sizeof name, "%s_cut", mibs[i].stem);
                put(out, "merlin_stream", name, stream, at - mibs[i].record / 2, NULL, 0);
            }
        }
        free(stream);
        free(m);
        free(h);
    }
}

/* The whole pack, and its manifest, index and body after a 64 KiB user
 * block as pack_parts takes them. */
static void pack_seeds(const char *out, const char *name, const char *path)
{
    size_t n = 0;
    uint8_t *b = slurp(path, &n);
    if (!b || n < 65536) {
        free(b);
        return;
    }
    put(out, "pack_file", name, b, n, NULL, 0);
    /* prelude: magic, u32 manifest length, u32 CRC, u32 index offset,
     * u32 index length (lib/pack/encode.c) */
    uint32_t m = 0, il = 0;
    uint64_t io = 0;
    for (int k = 3; k >= 0; k--) {
        m = (m << 8) | b[8 + k];
        io = (io << 8) | b[16 + k];
        il = (il << 8) | b[20 + k];
    }
    if (24 + (uint64_t)m <= 65536 && io + il <= 65536) {
        uint8_t *seed = malloc(8 + m + il + (n - 65536));
        u32le(seed, m);
        memcpy(seed + 4, b + 24, m);
        u32le(seed + 4 + m, il);
        memcpy(seed + 8 + m, b + io, il);
        memcpy(seed + 8 + m + il, b + 65536, n - 65536);
        put(out, "pack_parts", name, seed, 8 + m + il + (n - 65536), NULL, 0);
        free(seed);
    }
    free(b);
}

/* The fixture's array as the one encoded chunk of a distributed save. */
static void encoded_chunk_seed(const char *out, const char *npy_path, const char *stem)
{
    qem_npy *npy = NULL;
    qem_npy_info info = {.struct_size = sizeof info};
    if (qem_npy_open(npy_path, &npy, NULL) != QEM_OK ||
        qem_npy_get_info(npy, &info, NULL) != QEM_OK || info.ndim != 4) {
        qem_npy_close(npy);
        return;
    }
    const size_t bytes = (size_t)info.elements * qem_dtype_size(info.dtype);
    void *data = malloc(bytes ? bytes : 1), *blob = NULL;
    size_t size = 0;
    const uint64_t scans = info.shape[0] * info.shape[1];
    if (data && qem_npy_read(npy, 0, info.elements, data, bytes, NULL) == QEM_OK &&
        qem_encode_scans(info.dtype, info.shape, NULL, 0, data, scans, &blob, &size, NULL) ==
            QEM_OK) {
        char name[256];
        snprintf(name, sizeof name, "%s.chunk", stem);
        put(out, "encoded_chunk", name, blob, size, NULL, 0);
    }
    qem_free(blob);
    free(data);
    qem_npy_close(npy);
}

/* prefix + a + b as one seed. */
static void put_parts(const char *dir, const char *target, const char *name, const uint8_t *prefix,
                      size_t np, const void *a, size_t na, const void *b, size_t nb)
{
    uint8_t *all = malloc(np + na + nb + 1);
    if (!all)
        return;
    memcpy(all, prefix, np);
    if (na)
        memcpy(all + np, a, na);
    if (nb)
        memcpy(all + np + na, b, nb);
    put(dir, target, name, all, np + na + nb, NULL, 0);
    free(all);
}

/* Seeds of the input families: the real Merlin and EMPAD files (cut to a
 * few frames where they are large), small files built like them, and raw
 * binary views of the same bytes. */
static void input_seeds(const char *shared, const char *out)
{
    char path[1024], name[256];
    uint8_t prefix[16];
    /* fuzz_mib: rows, columns, u32 .hdr length, .hdr, .mib */
    static const struct {
        const char *stem;
        uint8_t rows, columns;
        size_t frames; /* at most this many frames */
    } mibs[] = {{"001_4x2_6bit", 1, 2, 2},
                {"Single_9_Frame_CounterDepth_12_Rows_256", 0, 0, 3},
                {"Single_9_Frame_CounterDepth_12_Rows_256", 1, 3, 3},
                {"Single_1_Frame_CounterDepth_24_Rows_256", 0, 0, 1},
                {"Single_1_Frame_CounterDepth_1_Rows_256", 0, 0, 1},
                {"Single_1_Frame_CounterDepth_1_Rows_256RAW", 0, 0, 1}};
    for (size_t i = 0; i < sizeof mibs / sizeof mibs[0]; i++) {
        size_t nm = 0, nh = 0;
        snprintf(path, sizeof path, "%s/fixtures/detectors/mib/%s.mib", shared, mibs[i].stem);
        uint8_t *m = slurp(path, &nm);
        snprintf(path, sizeof path, "%s/fixtures/detectors/mib/%s.hdr", shared, mibs[i].stem);
        uint8_t *h = slurp(path, &nh);
        if (m && h && nm > 400) {
            const size_t record = strncmp((const char *)m + 30, "U16", 3) == 0   ? 384 + 131072
                                  : strncmp((const char *)m + 30, "U32", 3) == 0 ? 384 + 262144
                                  : strncmp((const char *)m + 30, "U08", 3) == 0 ? 384 + 65536
                                                                                 : nm;
            const size_t keep = record * mibs[i].frames < nm ? record * mibs[i].frames : nm;
            prefix[0] = mibs[i].rows;
            prefix[1] = mibs[i].columns;
            u32le(prefix + 2, (uint32_t)nh);
            snprintf(name, sizeof name, "%s_%zu", mibs[i].stem, i);
            put_parts(out, "mib", name, prefix, 6, h, nh, m, keep);
        }
        free(m);
        free(h);
    }
    /* Small files built as the Merlin writes them: every depth, a quad
     * header, an older header without the extension. */
    static const mibb_options small[] = {
        {.depth = 1, .frames = 2, .width = 16, .height = 8, .write_hdr = 1, .frames_per_trigger = 2},
        {.depth = 6, .frames = 4, .width = 8, .height = 8, .write_hdr = 1, .frames_per_trigger = 2},
        {.depth = 12, .frames = 3, .width = 8, .height = 4, .write_hdr = 1},
        {.depth = 24, .frames = 2, .width = 4, .height = 4, .max_value = 70000},
        {.depth = 12, .quad = 1, .frames = 2, .width = 8, .height = 8},
        {.depth = 6, .frames = 2, .width = 8, .height = 2, .omit_extended = 1, .write_hdr = 1}};
    for (size_t i = 0; i < sizeof small / sizeof small[0]; i++) {
        char mib[1024], hdr[1024];
        snprintf(mib, sizeof mib, "%s/small.mib", out);
        mibb_hdr_path(mib, hdr, sizeof hdr);
        remove(hdr);
        if (mibb_write(mib, &small[i]) != 0)
            continue;
        size_t nm = 0, nh = 0;
        uint8_t *m = slurp(mib, &nm), *h = slurp(hdr, &nh);
        const int hdr_shape = small[i].write_hdr && small[i].frames_per_trigger > 1;
        prefix[0] = (uint8_t)(hdr_shape ? 0 : 1);
        prefix[1] = (uint8_t)(hdr_shape ? 0 : small[i].frames);
        u32le(prefix + 2, h ? (uint32_t)nh : 0);
        snprintf(name, sizeof name, "small_%zu", i);
        if (m)
            put_parts(out, "mib", name, prefix, 6, h, h ? nh : 0, m, nm);
        /* The same bytes as raw binary: frames behind their headers. */
        const size_t item = mibb_item(small[i].depth);
        /* fuzz_raw's type index: uint8, >u2, >u4 */
        static const uint8_t types[5] = {0, 0, 5, 0, 8};
        uint8_t opts[15];
        opts[0] = 1;
        opts[1] = (uint8_t)small[i].frames;
        const uint64_t w = mibb_width(&small[i]), ht = mibb_height(&small[i]);
        opts[2] = (uint8_t)ht, opts[3] = (uint8_t)(ht >> 8);
        opts[4] = (uint8_t)w, opts[5] = (uint8_t)(w >> 8);
        opts[6] = types[item];
        u32le(opts + 7, 0);
        u32le(opts + 11, (uint32_t)mibb_header_bytes(&small[i]));
        if (m)
            put_parts(out, "raw", name, opts, sizeof opts, m, nm, NULL, 0);
        free(m);
        free(h);
        remove(mib);
        remove(hdr);
    }
    /* fuzz_empad: rows, columns, u32 XML length, XML (naming scan.raw),
     * raw. The real XML with a 1 x 1 scan and one frame; without its
     * pix_x/pix_y and two frames, the caller's 1 x 2. */
    size_t nx = 0, nr = 0;
    snprintf(path, sizeof path, "%s/fixtures/detectors/empad/map4x4.xml", shared);
    uint8_t *x = slurp(path, &nx);
    snprintf(path, sizeof path, "%s/fixtures/detectors/empad/scan_x4_y4.raw", shared);
    uint8_t *r = slurp(path, &nr);
    if (x && r && nr >= 2 * 66560) {
        x[nx] = 0;
        static const struct {
            const char *pix;
            uint8_t rows, columns;
            size_t frames;
        } views[] = {{"<pix_x>1</pix_x><pix_y>1</pix_y>", 0, 0, 1}, {"", 1, 2, 2}};
        for (size_t v = 0; v < 2; v++) {
            char *doc = malloc(nx + 64), *d = doc;
            const char *s = (const char *)x;
            const char *pix = strstr(s, "<pix_x>4</pix_x><pix_y>4</pix_y>");
            const char *raw = strstr(s, "scan_x4_y4.raw");
            if (!doc || !pix || !raw || raw < pix) {
                free(doc);
                continue;
            }
            d += sprintf(d, "%.*s%s", (int)(pix - s), s, views[v].pix);
            s = pix + strlen("<pix_x>4</pix_x><pix_y>4</pix_y>");
            d += sprintf(d, "%.*sscan.raw", (int)(raw - s), s);
            d += sprintf(d, "%s", raw + strlen("scan_x4_y4.raw"));
            prefix[0] = views[v].rows;
            prefix[1] = views[v].columns;
            u32le(prefix + 2, (uint32_t)(d - doc));
            snprintf(name, sizeof name, "map_%zu", v);
            put_parts(out, "empad", name, prefix, 6, doc, (size_t)(d - doc), r,
                      views[v].frames * 66560);
            free(doc);
        }
        /* The raw file alone as raw binary: one frame of 130 x 128 <f4. */
        uint8_t opts[15] = {1, 1, 130, 0, 128, 0, 10};
        u32le(opts + 7, 0);
        u32le(opts + 11, 0);
        put_parts(out, "raw", "empad_frame", opts, sizeof opts, r, 66560, NULL, 0);
    }
    free(x);
    free(r);
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    const char *shared = argv[1], *out = argv[2];
    mkdir(out, 0755);
    static const char *const qem[] = {"u8_sparse_lowdose", "u16_dense_highdose",
                                      "u16_nonsquare_masked", "f32_special_bits",
                                      "scaled_u16_regions"};
    char path[1024], name[256];
    for (size_t i = 0; i < sizeof qem / sizeof qem[0]; i++) {
        size_t n = 0;
        snprintf(path, sizeof path, "%s/fixtures/qem/%s.qem", shared, qem[i]);
        uint8_t *b = slurp(path, &n);
        if (!b || n < 56)
            continue;
        snprintf(name, sizeof name, "%s.qem", qem[i]);
        put(out, "qem_file", name, b, n, NULL, 0);
        /* header length: u64 LE at offset 8 */
        uint64_t h = 0;
        for (int k = 7; k >= 0; k--)
            h = (h << 8) | b[8 + k];
        if (56 + h <= n) {
            uint8_t *seed = malloc(4 + n - 56);
            u32le(seed, (uint32_t)h);
            memcpy(seed + 4, b + 56, n - 56);
            put(out, "qem_decode", name, seed, 4 + n - 56, NULL, 0);
            free(seed);
        }
        snprintf(path, sizeof path, "%s/fixtures/qem/%s.npy", shared, qem[i]);
        free(b);
        b = slurp(path, &n);
        snprintf(name, sizeof name, "%s.npy", qem[i]);
        if (b)
            put(out, "npy", name, b, n, NULL, 0);
        free(b);
        encoded_chunk_seed(out, path, qem[i]);
    }
    /* A file qem wrote, large enough to record its pixel sums and its
     * default detector's image (the half maximum of uniform counts takes
     * most pixels as the disk). */
    {
        const uint64_t shape[4] = {32, 32, 16, 16};
        const size_t count = 32 * 32 * 256;
        uint8_t *counts = malloc(count);
        uint64_t state = 7;
        for (size_t k = 0; counts && k < count; k++) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            counts[k] = (uint8_t)(state >> 56);
        }
        snprintf(path, sizeof path, "%s/recorded-sums.qem", out);
        qem_writer *w = NULL;
        size_t n = 0;
        uint8_t *b = NULL;
        if (counts && qem_writer_create(path, QEM_DTYPE_UINT8, shape, NULL, &w, NULL) == QEM_OK &&
            qem_writer_append(w, counts, 32 * 32, NULL) == QEM_OK &&
            qem_writer_finish(w, NULL) == QEM_OK && (b = slurp(path, &n)))
            put(out, "qem_file", "recorded-sums.qem", b, n, NULL, 0);
        qem_writer_free(w);
        remove(path);
        free(b);
        free(counts);
    }
    /* The products cache entries (lib/products/sums_cache.c) for the
     * fixture the sums_cache target reads: its pixel sums and default
     * detector's image. */
    {
        snprintf(path, sizeof path, "%s/fixtures/qem/u16_nonsquare_masked.qem", shared);
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/sums_cache", out);
        qem_container *c = NULL;
        qem_products_options o;
        qem_products_options_init(&o);
        o.cache_dir = dir;
        qem_products *p = NULL;
        qem_image im = {0};
        uint8_t mask[4096];
        qem_detector_request rq;
        qem_detector_request_init(&rq);
        if (qem_container_open(path, NULL, &c, NULL) == QEM_OK &&
            qem_products_open(c, &o, &p, NULL) == QEM_OK &&
            qem_products_mean(p, &im, NULL) == QEM_OK && /* dir/pixel-sums-<id>.bin */
            qem_products_resolve_detector(p, &rq, mask, sizeof mask, NULL, NULL) == QEM_OK) {
            qem_image_free(&im);
            qem_products_virtual(p, mask, &im, NULL); /* dir/detector-image-<id>.bin */
        }
        qem_image_free(&im);
        qem_products_close(p);
        qem_container_close(c);
    }
    static const char *const packs[] = {"v1_u16_4x32_16x16", "v1_u16_excluded_retained",
                                        "v3_upstream_test_writer_legacy_nonportable",
                                        "v3_upstream_test_writer_notes_v3"};
    for (size_t i = 0; i < sizeof packs / sizeof packs[0]; i++) {
        snprintf(path, sizeof path, "%s/fixtures/pack/%s.h5", shared, packs[i]);
        snprintf(name, sizeof name, "%s.h5", packs[i]);
        pack_seeds(out, name, path);
        /* A calibrated copy carries the prepared extensions (DPC moments
         * and BF/ABF/ADF: the upstream's member for uint8 packs, qem's for
         * uint16), whose rules the open applies. */
        char copy[1024];
        snprintf(copy, sizeof copy, "%s/prepared-%s.h5", out, packs[i]);
        remove(copy);
        qem_detector_calibration cal = {.struct_size = sizeof cal};
        qem_file_kind kind;
        qem_container *c = NULL;
        qem_container_info ci = {.struct_size = sizeof ci};
        if (qem_identify(path, &kind, NULL) == QEM_OK &&
            qem_container_open(path, NULL, &c, NULL) == QEM_OK &&
            qem_container_get_info(c, &ci, NULL) == QEM_OK) {
            cal.center_row = (double)ci.shape[2] / 2;
            cal.center_column = (double)ci.shape[3] / 2;
            cal.bright_field_radius = (double)(ci.shape[2] < ci.shape[3] ? ci.shape[2] : ci.shape[3]) / 3;
            snprintf(cal.method, sizeof cal.method, "fuzz seed");
            if (qem_write_calibrated_copy(path, copy, &cal, NULL) == QEM_OK) {
                snprintf(name, sizeof name, "prepared-%s.h5", packs[i]);
                pack_seeds(out, name, copy);
            }
            remove(copy);
        }
        qem_container_close(c);
    }
    /* rANS: one encoded stream per model, with escapes. */
    static qem_rans_tables t;
    qem_rans_tables_init(&t);
    uint16_t values[200];
    uint8_t scratch[4 * 200 + 8];
    for (unsigned model = 0; model < QEM_RANS_MODELS; model += 7) {
        for (unsigned i = 0; i < 200; i++)
            values[i] = (uint16_t)(i % 17 == 3 ? 40 + i * 97 : (i * 7 + model) % 5);
        const uint8_t *code = NULL;
        const size_t len = qem_rans_encode(&t, model, values, 200, scratch, sizeof scratch, &code);
        uint8_t head[4] = {(uint8_t)model, 199, 0, 0}; /* n - 1 = 199 -> 200 samples */
        snprintf(name, sizeof name, "model_%u", model);
        put(out, "rans", name, head, 4, code, len);
    }
    /* Encoder: the upstream fixtures' arrays as raw samples, one band of
     * lanes per seed in each element kind. */
    static const struct {
        const char *name;
        uint8_t kind; /* fuzz_encode: 0 uint8, 1 uint16, 2 float32 halves */
    } arrays[] = {{"u8_sparse_lowdose", 0},
                  {"u16_dense_highdose", 1},
                  {"u16_nonsquare_masked", 1},
                  {"f32_special_bits", 2},
                  {"scaled_u16_regions.codes", 1}};
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) {
        snprintf(path, sizeof path, "%s/fixtures/qem/%s.npy", shared, arrays[i].name);
        size_t n = 0;
        uint8_t *b = slurp(path, &n);
        if (b && n > 10) {
            /* .npy: magic, version, then the header length (v1: u16). */
            const size_t data = 10 + (size_t)(b[8] | b[9] << 8);
            const size_t take = n > data ? (n - data < 65536 ? n - data : 65536) : 0;
            /* 512 samples of 200 lanes from lane 3, raw values. */
            const uint8_t head[6] = {arrays[i].kind, 0xff, 0x01, 199, 3, 0};
            snprintf(name, sizeof name, "%s", arrays[i].name);
            if (take)
                put(out, "encode", name, head, sizeof head, b + data, take);
        }
        free(b);
    }
    /* Viewer requests: the targets a real page sent (captured from the
     * browser test's request log, token replaced by a fixed one), each
     * alone and with the token header after a newline. */
    FILE *requests = fopen(QEM_VIEW_REQUESTS, "r");
    char line[4096];
    for (int k = 0; requests && fgets(line, sizeof line, requests); k++) {
        size_t n = strcspn(line, "\n");
        line[n] = '\0';
        static const char header[] = "\n0123456789abcdef0123456789abcdef";
        snprintf(name, sizeof name, "request_%03d", k);
        put(out, "view_request", name, line, n, NULL, 0);
        snprintf(name, sizeof name, "request_%03d_header", k);
        put(out, "view_request", name, line, n, header, sizeof header - 1);
    }
    if (requests)
        fclose(requests);
    /* Round trip: a few byte strings. */
    for (int k = 0; k < 3; k++) {
        uint8_t r[64];
        for (int i = 0; i < 64; i++)
            r[i] = (uint8_t)(i * 37 + k * 11);
        snprintf(name, sizeof name, "arrays_%d", k);
        put(out, "roundtrip", name, r, sizeof r, NULL, 0);
    }
    /* Command lines from the CLI tests, one argument per line. */
    static const char *const command_lines[] = {
        "virtual\nF.qem\n--detector\nannulus\n--center\n24,24\n--radius\n6\n--inner\n3\n"
        "--outer\n9\n-o\nann.tif\n--json",
        "virtual\nF.h5\n--detector\nbf\n--unit\nmrad\n--semiangle\n20\n-o\nv3.npy",
        "dp\nF.qem\n--region\n0:2,0:3\n--reduce\nmax\n-o\nrmax.npy\n--json",
        "dp\nF.h5\n--scan\n0,63\n--raw\n-o\ndp.npy",
        "save\na.npy\na.qem\n--chunk-scans\n20\n--valid\nmask.npy\n--calibration\ncal.json",
        "pack produce\nhot.npy\nh8.h5\n--profile\nu8-bitpacked\n--exclude\nhotmask.npy",
        "pack plan\npk.npy\n--available-disk\n100\n--dest\nout/x.h5",
        "pack inspect\nstack.h5\n--dataset\n/entry/data/data\n--scan-shape\n3,4\n--json",
        "info\n--json\n--expect-sha256\n"
        "7b26c476522683ac9e7ba2f04d5f1b8205cc9a59a3d6900ff331cb3269e1ce56\nF.h5",
        "dpc\nF.h5\n--rotation\n-12.5\n-o\nphase.npy",
        "verify\n--\n-dash.qem",
        "com\nF.qem\n--subtract-mean\n--mask\nm48.npy\n-o\ncom.tif\n--threads=2",
        "calibrate\nF.h5\n-o\nprc.h5\n--quiet",
        "export\nF.qem\nOUT.npy\n--raw",
        "info\nx\x1b[2Jy\r\xc2\x9b\x7f.qem",
    };
    for (size_t i = 0; i < sizeof command_lines / sizeof command_lines[0]; i++) {
        snprintf(name, sizeof name, "line%zu", i);
        put(out, "cli_args", name, command_lines[i], strlen(command_lines[i]), NULL, 0);
    }
    input_seeds(shared, out);
    /* The families of issue 30, each from its own file. */
    seeds_k2is(shared, HYPERSPY_IO, out);
    seeds_frms6(shared, HYPERSPY_IO, out);
    seeds_tvips(shared, HYPERSPY_IO, out);
    seeds_seq(shared, HYPERSPY_IO, out);
    seeds_blo(shared, HYPERSPY_IO, out);
    seeds_mrc(shared, HYPERSPY_IO, out);
    seeds_de_info(shared, HYPERSPY_IO, out);
    seeds_csr(shared, HYPERSPY_IO, out);
    seeds_dm(shared, HYPERSPY_IO, out);
    seeds_tia(shared, HYPERSPY_IO, out);
    seeds_velox(shared, HYPERSPY_IO, out);
    /* Issue 32: DECTRIS stream messages, Merlin data port streams. */
    seeds_dectris(shared, out);
    seeds_dectris2(out);
    merlin_stream_seeds(shared, out);
    return 0;
}
