/* DPC rotation search, alignment, integration gradients and iDPC
 * (notes-products.md §2.3-2.4).
 *
 * Precision: inputs and outputs are float32. The search angles and the iDPC
 * frequencies are float32 values (as upstream); everything computed from
 * them (differences, means, cos/sin, rotation, FFTs) is float64, and each
 * float32 output is rounded once, except the iDPC phase which is rounded to
 * float32 before its mean is removed, as §2.4 orders the steps. */
#include "products/dpc.h"

#include "products/fftw_loader.h"
#include <limits.h>
#include <math.h>
#include <stdlib.h>

#include "common/error.h"

#define DPC_PI 3.14159265358979323846

static int finite4(float a, float b, float c, float d)
{
    return isfinite(a) && isfinite(b) && isfinite(c) && isfinite(d);
}

/* Score of one angle from the three means of the unrotated field: the curl
 * of the field rotated by a is cos a * curl0 + sin a * div0. */
static double rotation_score(double angle, const double mean[3])
{
    double c = cos(angle), s = sin(angle);
    return c * c * mean[0] + s * s * mean[1] + 2.0 * s * c * mean[2];
}

qem_status qem_product_dpc_rotation(const float *mu_row, const float *mu_col, uint64_t rows,
                                    uint64_t cols, unsigned steps, double *angle_deg,
                                    int *exchanged, qem_error *error)
{
    if (!mu_row || !mu_col || !angle_deg || !exchanged)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "the DPC rotation search needs both CoM fields and both outputs");
    uint64_t n;
    if (rows == 0 || cols == 0 || qem_mul_overflow_u64(rows, cols, &n) || n > SIZE_MAX)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "the DPC rotation search needs a non-empty scan shape, not %llux%llu",
                        (unsigned long long)rows, (unsigned long long)cols);
    if (steps < 2)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "the DPC rotation search needs at least 2 angles, not %u", steps);
    *angle_deg = 0.0;
    *exchanged = 0;
    if (rows < 3 || cols < 3)
        return QEM_OK; /* no interior point: nothing to score */

    /* Central differences of both components (float64 from float32 inputs):
     * a = d_r mu_r, b = d_c mu_r, p = d_r mu_c, q = d_c mu_c. Normal order:
     * curl0 = p - b, div0 = a + q. Exchanged: curl0 = a - q, div0 = p + b. */
    double sum[2][3] = {{0.0, 0.0, 0.0}, {0.0, 0.0, 0.0}};
    uint64_t used = 0;
    size_t nc = (size_t)cols;
    for (size_t r = 1; r + 1 < (size_t)rows; r++) {
        for (size_t c = 1; c + 1 < nc; c++) {
            size_t up = (r - 1) * nc + c, down = (r + 1) * nc + c;
            size_t left = r * nc + c - 1, right = r * nc + c + 1;
            if (!finite4(mu_row[up], mu_row[down], mu_row[left], mu_row[right]) ||
                !finite4(mu_col[up], mu_col[down], mu_col[left], mu_col[right]))
                continue;
            double a = 0.5 * ((double)mu_row[down] - (double)mu_row[up]);
            double b = 0.5 * ((double)mu_row[right] - (double)mu_row[left]);
            double p = 0.5 * ((double)mu_col[down] - (double)mu_col[up]);
            double q = 0.5 * ((double)mu_col[right] - (double)mu_col[left]);
            double curl[2] = {p - b, a - q}, div[2] = {a + q, p + b};
            for (int x = 0; x < 2; x++) {
                sum[x][0] += curl[x] * curl[x];
                sum[x][1] += div[x] * div[x];
                sum[x][2] += curl[x] * div[x];
            }
            used++;
        }
    }
    if (used == 0)
        return QEM_OK; /* every interior stencil touches an invalid frame */
    for (int x = 0; x < 2; x++)
        for (int m = 0; m < 3; m++)
            sum[x][m] /= (double)used;

    /* Angles as numpy.linspace(0, pi, steps, dtype=float32): k * step in
     * float64, the last exactly pi, then rounded to float32. A strict `<`
     * over [normal..., exchanged...] keeps the first minimum; a non-finite
     * score (overflowing data) never wins. */
    double step = DPC_PI / (double)(steps - 1);
    double best = INFINITY;
    float best_angle = 0.0f;
    int best_exchanged = 0;
    for (int x = 0; x < 2; x++) {
        for (unsigned k = 0; k < steps; k++) {
            float angle = (float)(k + 1 == steps ? DPC_PI : (double)k * step);
            double score = rotation_score((double)angle, sum[x]);
            if (score < best) {
                best = score;
                best_angle = angle;
                best_exchanged = x;
            }
        }
    }
    *angle_deg = (double)best_angle * 180.0 / DPC_PI;
    *exchanged = best_exchanged;
    return QEM_OK;
}

void qem_product_dpc_align(const float *mu_row, const float *mu_col, uint64_t n, double angle_deg,
                           int exchanged, float *aligned_row, float *aligned_col)
{
    double angle = angle_deg * DPC_PI / 180.0;
    double c = cos(angle), s = sin(angle);
    for (size_t i = 0; i < (size_t)n; i++) {
        /* Both inputs are read before either output is written (in place). */
        double sr = exchanged ? mu_col[i] : mu_row[i];
        double sc = exchanged ? mu_row[i] : mu_col[i];
        aligned_row[i] = (float)(c * sr - s * sc);
        aligned_col[i] = (float)(s * sr + c * sc);
    }
}

void qem_product_dpc_gradients(const float *aligned_row, const float *aligned_col, uint64_t n,
                               int exchanged, float *grad_row, float *grad_col)
{
    for (size_t i = 0; i < (size_t)n; i++) {
        float ar = aligned_row[i], ac = aligned_col[i];
        grad_row[i] = exchanged ? ac : ar;
        grad_col[i] = exchanged ? ar : ac;
    }
}

/* numpy.fft.fftfreq(n)[k] rounded to float32: the integer frequency times
 * the float64 1/n, as numpy forms it. */
static float fftfreq32(size_t k, size_t n)
{
    double kk = k < (n - 1) / 2 + 1 ? (double)k : (double)k - (double)n;
    return (float)(kk * (1.0 / (double)n));
}

static float finite_or_zero(float v)
{
    return isfinite(v) ? v : 0.0f;
}

qem_status qem_product_idpc(const float *grad_row, const float *grad_col, uint64_t rows,
                            uint64_t cols, float *phase, uint64_t *ffts, qem_error *error)
{
    if (!grad_row || !grad_col || !phase)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "iDPC needs both gradient fields and an output buffer");
    uint64_t n;
    if (rows == 0 || cols == 0 || qem_mul_overflow_u64(rows, cols, &n))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "iDPC needs a non-empty scan shape, not %llux%llu",
                        (unsigned long long)rows, (unsigned long long)cols);
    uint64_t bytes;
    if (rows > INT_MAX || cols > INT_MAX ||
        qem_mul_overflow_u64(n, sizeof(fftw_complex), &bytes) || bytes > SIZE_MAX)
        return qem_fail(error, QEM_E_LIMIT, "a %llux%llu scan is too large for the iDPC FFT",
                        (unsigned long long)rows, (unsigned long long)cols);
    size_t nr = (size_t)rows, nc = (size_t)cols, count = (size_t)n;
    const qem_fftw *fft = NULL;
    QEM_TRY(qem_fftw_get(&fft, error));

    /* Plain malloc: FFTW plans for whatever alignment the arrays have. */
    fftw_complex *z = malloc((size_t)bytes);
    fftw_complex *w = malloc((size_t)bytes);
    float *nu_r = malloc(nr * sizeof *nu_r);
    float *nu_c = malloc(nc * sizeof *nu_c);
    if (!z || !w || !nu_r || !nu_c) {
        free(z);
        free(w);
        free(nu_r);
        free(nu_c);
        return qem_fail(error, QEM_E_NO_MEMORY, "no memory for the iDPC of a %llux%llu scan",
                        (unsigned long long)rows, (unsigned long long)cols);
    }

    /* FFTW's planner is not thread-safe; execution of distinct plans is.
     * A named critical section serialises qem's planning without a global
     * variable of our own. FFTW_ESTIMATE leaves the arrays untouched. */
    fftw_plan forward = NULL, inverse = NULL;
#pragma omp critical(qem_fftw_planner)
    {
        forward = fft->plan_dft_2d((int)rows, (int)cols, z, z, FFTW_FORWARD, FFTW_ESTIMATE);
        inverse = fft->plan_dft_2d((int)rows, (int)cols, w, w, FFTW_BACKWARD, FFTW_ESTIMATE);
    }
    qem_status st = QEM_OK;
    if (!forward || !inverse) {
        st = qem_fail(error, QEM_E_NO_MEMORY, "FFTW could not plan the iDPC of a %llux%llu scan",
                      (unsigned long long)rows, (unsigned long long)cols);
        goto done;
    }

    /* Both real gradients share one complex transform: z = g_r + i g_c, so
     * G_r(k) = (Z(k) + conj Z(-k)) / 2 and G_c(k) = (Z(k) - conj Z(-k)) / 2i. */
    for (size_t i = 0; i < count; i++) {
        z[i][0] = finite_or_zero(grad_row[i]);
        z[i][1] = finite_or_zero(grad_col[i]);
    }
    fft->execute(forward);

    for (size_t k = 0; k < nr; k++)
        nu_r[k] = fftfreq32(k, nr);
    for (size_t k = 0; k < nc; k++)
        nu_c[k] = fftfreq32(k, nc);
    for (size_t kr = 0; kr < nr; kr++) {
        size_t mr = kr == 0 ? 0 : nr - kr;
        for (size_t kc = 0; kc < nc; kc++) {
            size_t mc = kc == 0 ? 0 : nc - kc;
            size_t i = kr * nc + kc, m = mr * nc + mc;
            double a = z[i][0], b = z[i][1], c = z[m][0], d = z[m][1];
            double gr_re = 0.5 * (a + c), gr_im = 0.5 * (b - d);
            double gc_re = 0.5 * (b + d), gc_im = 0.5 * (c - a);
            /* K2 in float32 like the frequencies; K2[0,0] = 1 guards the DC. */
            float k2 = nu_r[kr] * nu_r[kr] + nu_c[kc] * nu_c[kc];
            if (i == 0)
                k2 = 1.0f;
            double s_re = (double)nu_r[kr] * gr_re + (double)nu_c[kc] * gc_re;
            double s_im = (double)nu_r[kr] * gr_im + (double)nu_c[kc] * gc_im;
            /* (-0.25 i)(s_re + i s_im) = 0.25 s_im - 0.25 i s_re. */
            w[i][0] = 0.25 * s_im / (double)k2;
            w[i][1] = -0.25 * s_re / (double)k2;
        }
    }
    w[0][0] = 0.0; /* Phi[0,0] = 0: the DC is undetermined */
    w[0][1] = 0.0;
    fft->execute(inverse);

    /* phi = Re(IFFT2) with the 1/N of the inverse, rounded to float32; the
     * mean of those float32 values is taken in float64. */
    double total = 0.0;
    for (size_t i = 0; i < count; i++) {
        phase[i] = (float)(w[i][0] / (double)count);
        total += phase[i];
    }
    double mean = total / (double)count;
    for (size_t i = 0; i < count; i++)
        phase[i] = (float)(-((double)phase[i] - mean)); /* negated: atoms appear dark */
    if (ffts)
        *ffts += 2;

done:
#pragma omp critical(qem_fftw_planner)
    {
        if (forward)
            fft->destroy_plan(forward);
        if (inverse)
            fft->destroy_plan(inverse);
    }
    free(z);
    free(w);
    free(nu_r);
    free(nu_c);
    return st;
}
