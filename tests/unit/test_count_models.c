/* Count models: every decoder rule with its specific status, and the
 * encoder's round trip and size guarantee against the reference heuristic. */
#include <math.h>

#include "rans/rans.h"
#include "test_util.h"

static qem_rans_tables *T;
static uint16_t out[600];

static qem_status dec(unsigned model, const uint8_t *span, size_t size, uint32_t n, uint32_t max)
{
    return qem_count_stream_decode(T, model, span, size, n, max, out);
}

static void test_simple_models(void)
{
    /* 253: no bytes, all zeros. */
    memset(out, 0xff, sizeof out);
    CHECK_OK(dec(QEM_MODEL_ZERO, NULL, 0, 5, 65535), NULL);
    CHECK(out[0] == 0 && out[4] == 0);
    uint8_t one = 0;
    CHECK_STATUS(dec(QEM_MODEL_ZERO, &one, 1, 5, 65535), QEM_E_MODEL, NULL);

    /* 255: one u16 constant. */
    uint8_t c[3] = {0x34, 0x12, 0};
    CHECK_OK(dec(QEM_MODEL_CONSTANT, c, 2, 4, 65535), NULL);
    CHECK(out[0] == 0x1234 && out[3] == 0x1234);
    CHECK_STATUS(dec(QEM_MODEL_CONSTANT, c, 3, 4, 65535), QEM_E_MODEL, NULL);
    CHECK_STATUS(dec(QEM_MODEL_CONSTANT, c, 1, 4, 65535), QEM_E_MODEL, NULL);
    CHECK_STATUS(dec(QEM_MODEL_CONSTANT, c, 2, 4, 255), QEM_E_VALUE_RANGE, NULL);

    /* 254: raw u16 per sample, also for uint8 files. */
    uint8_t raw[6] = {1, 0, 0xff, 0, 0x00, 0x01};
    CHECK_OK(dec(QEM_MODEL_RAW, raw, 6, 3, 65535), NULL);
    CHECK(out[0] == 1 && out[1] == 255 && out[2] == 256);
    CHECK_STATUS(dec(QEM_MODEL_RAW, raw, 6, 3, 255), QEM_E_VALUE_RANGE, NULL);
    CHECK_OK(dec(QEM_MODEL_RAW, raw, 4, 2, 255), NULL);
    CHECK_STATUS(dec(QEM_MODEL_RAW, raw, 4, 3, 65535), QEM_E_MODEL, NULL);
    CHECK_STATUS(dec(QEM_MODEL_RAW, raw, 6, 2, 65535), QEM_E_MODEL, NULL);

    /* 252: sparse events (pos << 7 | value - 1). */
    uint16_t ev[3] = {(uint16_t)(1 << 7 | 0), (uint16_t)(5 << 7 | 127), (uint16_t)(511 << 7 | 4)};
    uint8_t sp[6];
    for (int i = 0; i < 3; i++) {
        sp[2 * i] = (uint8_t)(ev[i] & 255);
        sp[2 * i + 1] = (uint8_t)(ev[i] >> 8);
    }
    CHECK_OK(dec(QEM_MODEL_SPARSE, sp, 6, 512, 255), NULL);
    CHECK(out[0] == 0 && out[1] == 1 && out[5] == 128 && out[511] == 5 && out[6] == 0);
    CHECK_STATUS(dec(QEM_MODEL_SPARSE, sp, 6, 511, 255), QEM_E_SPARSE, NULL); /* 511 >= n */
    CHECK_STATUS(dec(QEM_MODEL_SPARSE, sp, 5, 512, 255), QEM_E_MODEL, NULL);  /* odd length */
    uint8_t dup[4] = {sp[2], sp[3], sp[2], sp[3]};                            /* repeated pos */
    CHECK_STATUS(dec(QEM_MODEL_SPARSE, dup, 4, 512, 255), QEM_E_SPARSE, NULL);
    uint8_t down[4] = {sp[2], sp[3], sp[0], sp[1]}; /* decreasing */
    CHECK_STATUS(dec(QEM_MODEL_SPARSE, down, 4, 512, 255), QEM_E_SPARSE, NULL);
    CHECK_OK(dec(QEM_MODEL_SPARSE, NULL, 0, 9, 255), NULL); /* no events: zeros */

    /* Selectors other than 0..63 and 252..255 are invalid. */
    CHECK_STATUS(dec(64, raw, 6, 3, 65535), QEM_E_MODEL, NULL);
    CHECK_STATUS(dec(251, raw, 6, 3, 65535), QEM_E_MODEL, NULL);
    CHECK(!qem_model_is_valid(100) && qem_model_is_valid(63) && qem_model_is_valid(252));
}

static size_t enc_rans(unsigned model, const uint16_t *v, uint32_t n, uint8_t *dst)
{
    static uint8_t scratch[4 * 600 + 8];
    const uint8_t *s = NULL;
    size_t len = qem_rans_encode(T, model, v, n, scratch, sizeof scratch, &s);
    memcpy(dst, s, len);
    return len;
}

static void test_rans_rules(void)
{
    uint16_t v[8] = {0, 1, 0, 40, 0, 2, 31, 1000};
    uint8_t s[64];
    size_t len = enc_rans(20, v, 8, s);
    CHECK_OK(dec(20, s, len, 8, 65535), NULL);
    CHECK(memcmp(out, v, sizeof v) == 0);
    /* Escapes above the dtype are refused, never truncated. */
    CHECK_STATUS(dec(20, s, len, 8, 255), QEM_E_VALUE_RANGE, NULL);
    /* Initial state must lie in [2^23, 2^31). */
    uint8_t low[4] = {0xff, 0xff, 0x7f, 0x00}; /* 2^23 - 1 */
    CHECK_STATUS(dec(0, low, 4, 1, 65535), QEM_E_RANS_STATE, NULL);
    uint8_t high[4] = {0, 0, 0, 0x80}; /* 2^31 */
    CHECK_STATUS(dec(0, high, 4, 1, 65535), QEM_E_RANS_STATE, NULL);
    /* Fewer than 4 bytes cannot hold a state. */
    CHECK_STATUS(dec(0, s, 3, 1, 65535), QEM_E_MODEL, NULL);
    /* A trailing byte, a missing byte, and a wrong final state. */
    uint8_t longer[65];
    memcpy(longer, s, len);
    longer[len] = 0;
    CHECK_STATUS(dec(20, longer, len + 1, 8, 65535), QEM_E_RANS_FINAL, NULL);
    CHECK_STATUS(dec(20, s, len - 1, 8, 65535), QEM_E_RANS_TRUNCATED, NULL);
    CHECK_STATUS(dec(20, s, len, 7, 65535), QEM_E_RANS_FINAL, NULL);
    /* All bytes consumed but the final state is not 2^23. */
    uint16_t zeros[3] = {0, 0, 0};
    len = enc_rans(0, zeros, 3, s);
    CHECK_EQ_U64(len, 4); /* three likely symbols need no renormalisation */
    CHECK_OK(dec(0, s, len, 3, 65535), NULL);
    s[0] ^= 1;
    CHECK_STATUS(dec(0, s, len, 3, 65535), QEM_E_RANS_FINAL, NULL);
    /* The state alone, 2^23, with no samples left to decode is exact. */
    uint8_t exact[4] = {0, 0, 0x80, 0};
    CHECK_OK(dec(5, exact, 4, 0, 65535), NULL);
    /* A stream that decodes an escape but lacks its two bytes. */
    uint16_t e1[1] = {300};
    len = enc_rans(63, e1, 1, s);
    CHECK_STATUS(dec(63, s, len - 1, 1, 65535), QEM_E_RANS_TRUNCATED, NULL);
    CHECK_OK(dec(63, s, len, 1, 65535), NULL);
    CHECK(out[0] == 300);
}

/* The reference heuristic of notes §3.4, written out independently. */
static size_t reference_size(const uint16_t *v, uint32_t n)
{
    int equal = 1;
    uint32_t nonzero = 0, vmax = 0;
    double capped = 0;
    for (uint32_t i = 0; i < n; i++) {
        equal &= v[i] == v[0];
        nonzero += v[i] != 0;
        vmax = v[i] > vmax ? v[i] : vmax;
        capped += v[i] < 32 ? v[i] : 32;
    }
    if (equal)
        return v[0] ? 2 : 0;
    double mean = capped / n;
    if (mean < 0.002)
        mean = 0.002;
    double m = rint(log(mean / 0.002) * 63.0 / log(16000.0));
    m = m < 0 ? 0 : m > 63 ? 63 : m;
    uint8_t s[4 * 600 + 8];
    size_t len = enc_rans((unsigned)m, v, n, s);
    if (len >= 2 * (size_t)n)
        len = 2 * (size_t)n;
    if (vmax <= 128 && 2 * (size_t)nonzero < len)
        len = 2 * (size_t)nonzero;
    return len;
}

static void test_encoder(void)
{
    uint64_t seed = 42;
    uint16_t v[512];
    uint8_t dst[1024], scratch[4 * 512 + 8];
    int worse = 0, roundtrip_bad = 0, over = 0, better = 0;
    unsigned models_seen[256] = {0};
    for (int trial = 0; trial < 6000; trial++) {
        uint32_t n = 1 + (uint32_t)(test_rand(&seed) % 512);
        int kind = trial % 8;
        double p = (double)(test_rand(&seed) % 1000) / 1000.0;
        for (uint32_t i = 0; i < n; i++) {
            uint64_t r = test_rand(&seed);
            switch (kind) {
            case 0: v[i] = 0; break;                                    /* all zero */
            case 1: v[i] = 77; break;                                   /* constant */
            case 2: v[i] = (r % 1000) < p * 20 ? (uint16_t)(1 + r % 128) : 0; break; /* sparse */
            case 3: v[i] = (uint16_t)(r % (1 + (uint64_t)(p * 40))); break;          /* counts */
            case 4: v[i] = (uint16_t)r; break;                          /* uniform u16 */
            case 5: v[i] = (uint16_t)(60000 + r % 5536); break;         /* high dose */
            case 6: v[i] = (r % 100) < 3 ? (uint16_t)(200 + r % 60000) : (uint16_t)(r % 3); break;
            default: v[i] = (uint16_t)((r >> 8) % 2 ? 0 : r % 33); break;
            }
        }
        uint8_t model = 0;
        size_t len = qem_count_stream_encode(T, v, n, dst, &model, scratch);
        models_seen[model]++;
        if (len > 2 * (size_t)n)
            over++;
        size_t ref = reference_size(v, n);
        if (len > ref)
            worse++;
        if (len < ref)
            better++;
        if (dec(model, dst, len, n, 65535) != QEM_OK || memcmp(out, v, n * sizeof *v) != 0)
            roundtrip_bad++;
    }
    CHECK_EQ_U64(roundtrip_bad, 0);
    CHECK_EQ_U64(worse, 0);
    CHECK_EQ_U64(over, 0);
    CHECK(better > 0); /* choosing among all models does find smaller streams */
    /* Every kind of model was exercised. */
    CHECK(models_seen[QEM_MODEL_ZERO] > 0);
    CHECK(models_seen[QEM_MODEL_CONSTANT] > 0);
    CHECK(models_seen[QEM_MODEL_RAW] > 0);
    CHECK(models_seen[QEM_MODEL_SPARSE] > 0);
    unsigned rans = 0;
    for (int m = 0; m < QEM_RANS_MODELS; m++)
        rans += models_seen[m];
    CHECK(rans > 0);
}

int main(void)
{
    T = malloc(sizeof *T);
    qem_rans_tables_init(T);
    test_simple_models();
    test_rans_rules();
    test_encoder();
    free(T);
    return test_finish("unit_count_models");
}
