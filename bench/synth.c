#include "synth.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct synth {
    synth_params p;
    uint64_t pixels;
    uint16_t *frame16;
    uint8_t *hot; /* 0 normal, 1 hot, 2 dead */
};

typedef struct rng {
    uint64_t s[4];
} rng;

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void rng_seed(rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

/* xoshiro256** */
static uint64_t rng_next(rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

static double rng_uniform(rng *r)
{
    return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

/* Poisson: multiplication method for small means, a rounded normal
 * approximation above 30 (plenty for benchmark data). */
static uint32_t poisson(rng *r, double lambda)
{
    if (lambda <= 0)
        return 0;
    if (lambda < 30) {
        double limit = exp(-lambda), prod = rng_uniform(r);
        uint32_t k = 0;
        while (prod > limit) {
            prod *= rng_uniform(r);
            k++;
        }
        return k;
    }
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    double z = sqrt(-2.0 * log(u1 > 0 ? u1 : 1e-300)) * cos(2 * M_PI * u2);
    double v = floor(lambda + sqrt(lambda) * z + 0.5);
    return v < 0 ? 0 : (uint32_t)v;
}

synth *synth_new(const synth_params *params)
{
    synth *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->p = *params;
    s->pixels = params->shape[2] * params->shape[3];
    s->frame16 = malloc((size_t)s->pixels * sizeof *s->frame16);
    s->hot = calloc((size_t)s->pixels, 1);
    if (!s->frame16 || !s->hot) {
        synth_free(s);
        return NULL;
    }
    /* About one pixel in 4096 is hot and as many are dead. */
    rng r;
    rng_seed(&r, params->seed ^ 0x5eedull);
    uint64_t n = s->pixels / 4096 + 1;
    for (uint64_t i = 0; i < 2 * n; i++)
        s->hot[rng_next(&r) % s->pixels] = (uint8_t)(i < n ? 1 : 2);
    return s;
}

void synth_free(synth *s)
{
    if (!s)
        return;
    free(s->frame16);
    free(s->hot);
    free(s);
}

void synth_frame(synth *s, uint64_t scan, void *out)
{
    const uint64_t H = s->p.shape[2], W = s->p.shape[3];
    const uint64_t scan_cols = s->p.shape[1];
    const double sr = (double)(scan / scan_cols), sc = (double)(scan % scan_cols);
    rng r;
    rng_seed(&r, s->p.seed * 0x100000001b3ull + scan);
    /* The disk drifts by up to 2 pixels across the scan (descan, DPC). */
    const double radius = (double)(H < W ? H : W) / 6.0;
    const double cr = (double)H / 2.0 + 2.0 * sin(sr * 0.05) + 0.5 * sin(sc * 0.3);
    const double cc = (double)W / 2.0 + 2.0 * cos(sc * 0.05) + 0.5 * cos(sr * 0.3);
    const double dose = s->p.dose;
    const double spot_r = radius * 2.5, spot_size2 = 2.0;
    const uint32_t cap = s->p.dtype == QEM_DTYPE_UINT8 ? 255u : 65535u;
    for (uint64_t y = 0; y < H; y++) {
        for (uint64_t x = 0; x < W; x++) {
            double dy = (double)y - cr, dx = (double)x - cc;
            double d2 = dy * dy + dx * dx;
            double lambda = dose * 0.01; /* faint diffuse background */
            if (d2 <= radius * radius) {
                lambda = dose;
            } else {
                /* Six weak Bragg spots on a hexagon around the disk. */
                for (int k = 0; k < 6; k++) {
                    double a = k * M_PI / 3.0;
                    double sy = dy - spot_r * sin(a), sx = dx - spot_r * cos(a);
                    if (sy * sy + sx * sx <= spot_size2)
                        lambda = dose * 0.2;
                }
            }
            uint64_t p = y * W + x;
            uint32_t v = poisson(&r, lambda);
            if (s->hot[p] == 1)
                v = 1000 + poisson(&r, 50.0);
            else if (s->hot[p] == 2)
                v = 0;
            s->frame16[p] = (uint16_t)(v > cap ? cap : v);
        }
    }
    if (s->p.dtype == QEM_DTYPE_UINT8) {
        uint8_t *o = out;
        for (uint64_t p = 0; p < s->pixels; p++)
            o[p] = (uint8_t)s->frame16[p];
    } else if (s->p.dtype == QEM_DTYPE_FLOAT32) {
        /* An integrating detector: counts plus Gaussian read noise. */
        float *o = out;
        for (uint64_t p = 0; p < s->pixels; p++) {
            double u1 = rng_uniform(&r), u2 = rng_uniform(&r);
            double z = sqrt(-2.0 * log(u1 > 0 ? u1 : 1e-300)) * cos(2 * M_PI * u2);
            o[p] = (float)((double)s->frame16[p] + s->p.read_noise * z);
        }
    } else {
        memcpy(out, s->frame16, (size_t)s->pixels * sizeof *s->frame16);
    }
}

qem_status synth_write_npy(const synth_params *params, const char *path, qem_error *error)
{
    synth *s = synth_new(params);
    if (!s)
        return QEM_E_NO_MEMORY;
    const uint64_t scans = params->shape[0] * params->shape[1];
    void *frame = malloc((size_t)(s->pixels * qem_dtype_size(params->dtype)));
    qem_npy_writer *w = NULL;
    qem_status st = frame ? qem_npy_writer_create(path, params->dtype, 4, params->shape, &w, error)
                          : QEM_E_NO_MEMORY;
    for (uint64_t i = 0; i < scans && st == QEM_OK; i++) {
        synth_frame(s, i, frame);
        st = qem_npy_writer_append(w, frame, s->pixels, error);
    }
    if (st == QEM_OK)
        st = qem_npy_writer_finish(w, error);
    qem_npy_writer_free(w);
    free(frame);
    synth_free(s);
    return st;
}

const uint8_t *synth_defects(const synth *s)
{
    return s->hot;
}
