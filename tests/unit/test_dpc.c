/* DPC products: the rotation search finds known rotations and exchanges
 * and agrees with a brute-force search; alignment and gradients follow
 * §2.3; iDPC equals a naive DFT of the §2.4 formula and integrates exact
 * gradients; FFT counts and argument refusals. */
#include <math.h>

#include "products/dpc.h"
#include "test_util.h"

#define PI 3.14159265358979323846

/* The k-th of `steps` search angles in degrees: the float32 value of
 * k*pi/(steps-1) (pi exactly for the last), times 180/pi. */
static double grid_deg(unsigned k, unsigned steps)
{
    double rad = k + 1 == steps ? PI : (double)k * (PI / (double)(steps - 1));
    return (double)(float)rad * 180.0 / PI;
}

/* A smooth periodic phase with mixed derivatives, and its exact gradient. */
static void phase_gradient(uint64_t rows, uint64_t cols, float *g_r, float *g_c)
{
    double wr = 2.0 * PI / (double)rows, wc = 2.0 * PI / (double)cols;
    for (uint64_t r = 0; r < rows; r++) {
        for (uint64_t c = 0; c < cols; c++) {
            double x = wr * (double)r, y = wc * (double)c;
            /* p = sin(x) cos(2y) + 0.5 sin(x + y) */
            g_r[r * cols + c] = (float)(wr * (cos(x) * cos(2 * y) + 0.5 * cos(x + y)));
            g_c[r * cols + c] = (float)(wc * (-2.0 * sin(x) * sin(2 * y) + 0.5 * cos(x + y)));
        }
    }
}

/* CoM fields that the rotation `deg` (after an optional exchange) maps onto
 * (g_r, g_c): v = R(-deg) g, and mu = (v_c, v_r) when exchanged. */
static void measured(const float *g_r, const float *g_c, uint64_t n, double deg, int exchanged,
                     float *mu_r, float *mu_c)
{
    double a = deg * PI / 180.0, c = cos(a), s = sin(a);
    for (uint64_t i = 0; i < n; i++) {
        float v_r = (float)(c * g_r[i] + s * g_c[i]);
        float v_c = (float)(-s * g_r[i] + c * g_c[i]);
        mu_r[i] = exchanged ? v_c : v_r;
        mu_c[i] = exchanged ? v_r : v_c;
    }
}

/* Brute force (notes §2.3 as written): rotate at every angle, mean curl^2
 * over interior points whose stencil is finite, first minimum wins. */
static void brute_rotation(const float *mu_r, const float *mu_c, uint64_t rows, uint64_t cols,
                           unsigned steps, double *deg, int *exchanged)
{
    double best = INFINITY;
    *deg = 0.0;
    *exchanged = 0;
    for (int x = 0; x < 2; x++) {
        for (unsigned k = 0; k < steps; k++) {
            float af = (float)(k + 1 == steps ? PI : (double)k * (PI / (double)(steps - 1)));
            double c = cos(af), s = sin(af), sum = 0.0;
            uint64_t used = 0;
            for (uint64_t r = 1; r + 1 < rows; r++) {
                for (uint64_t col = 1; col + 1 < cols; col++) {
                    uint64_t idx[4] = {(r - 1) * cols + col, (r + 1) * cols + col,
                                       r * cols + col - 1, r * cols + col + 1};
                    double gr[4], gc[4];
                    int ok = 1;
                    for (int j = 0; j < 4; j++) {
                        double sr = x ? mu_c[idx[j]] : mu_r[idx[j]];
                        double sc = x ? mu_r[idx[j]] : mu_c[idx[j]];
                        gr[j] = c * sr - s * sc;
                        gc[j] = s * sr + c * sc;
                        ok = ok && isfinite(gr[j]) && isfinite(gc[j]);
                    }
                    if (!ok)
                        continue;
                    double curl = 0.5 * (gc[1] - gc[0]) - 0.5 * (gr[3] - gr[2]);
                    sum += curl * curl;
                    used++;
                }
            }
            if (used && sum / (double)used < best) {
                best = sum / (double)used;
                *deg = (double)af * 180.0 / PI;
                *exchanged = x;
            }
        }
    }
}

static void random_field(float *v, uint64_t n, uint64_t *state)
{
    for (uint64_t i = 0; i < n; i++)
        v[i] = (float)((double)(test_rand(state) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* Naive O(N^2) evaluation of §2.4: separate DFTs of both gradients, the
 * Poisson formula, a direct inverse DFT, real part, float32, mean removed. */
static void naive_idpc(const float *g_r, const float *g_c, uint64_t rows, uint64_t cols,
                       double *out)
{
    uint64_t n = rows * cols;
    double *phi_re = calloc(n, sizeof *phi_re), *phi_im = calloc(n, sizeof *phi_im);
    for (uint64_t kr = 0; kr < rows; kr++) {
        for (uint64_t kc = 0; kc < cols; kc++) {
            double grr = 0, gri = 0, gcr = 0, gci = 0;
            for (uint64_t r = 0; r < rows; r++) {
                for (uint64_t c = 0; c < cols; c++) {
                    double t = -2.0 * PI *
                               ((double)((kr * r) % rows) / (double)rows +
                                (double)((kc * c) % cols) / (double)cols);
                    double vr = isnan(g_r[r * cols + c]) ? 0.0 : g_r[r * cols + c];
                    double vc = isnan(g_c[r * cols + c]) ? 0.0 : g_c[r * cols + c];
                    grr += vr * cos(t);
                    gri += vr * sin(t);
                    gcr += vc * cos(t);
                    gci += vc * sin(t);
                }
            }
            /* fftfreq as numpy: integer frequency times 1/n, then float32. */
            long fr = kr <= (rows - 1) / 2 ? (long)kr : (long)kr - (long)rows;
            long fc = kc <= (cols - 1) / 2 ? (long)kc : (long)kc - (long)cols;
            float nr = (float)((double)fr * (1.0 / (double)rows));
            float nc = (float)((double)fc * (1.0 / (double)cols));
            float k2 = (kr == 0 && kc == 0) ? 1.0f : nr * nr + nc * nc;
            double sr = nr * grr + nc * gcr, si = nr * gri + nc * gci;
            /* multiply by -0.25 i and divide by K2 */
            phi_re[kr * cols + kc] = 0.25 * si / k2;
            phi_im[kr * cols + kc] = -0.25 * sr / k2;
        }
    }
    phi_re[0] = phi_im[0] = 0.0;
    double mean = 0.0;
    for (uint64_t r = 0; r < rows; r++) {
        for (uint64_t c = 0; c < cols; c++) {
            double acc = 0.0;
            for (uint64_t kr = 0; kr < rows; kr++) {
                for (uint64_t kc = 0; kc < cols; kc++) {
                    double t = 2.0 * PI *
                               ((double)((kr * r) % rows) / (double)rows +
                                (double)((kc * c) % cols) / (double)cols);
                    acc += phi_re[kr * cols + kc] * cos(t) - phi_im[kr * cols + kc] * sin(t);
                }
            }
            out[r * cols + c] = (float)(acc / (double)n);
            mean += out[r * cols + c];
        }
    }
    mean /= (double)n;
    for (uint64_t i = 0; i < n; i++)
        out[i] = -(out[i] - mean);
    free(phi_re);
    free(phi_im);
}

static int close_to(double got, double want, double tol)
{
    return fabs(got - want) <= tol + tol * fabs(want);
}

static void test_rotation_recovery(void)
{
    enum { R = 24, C = 32, N = R * C };
    static float g_r[N], g_c[N], mu_r[N], mu_c[N], a_r[N], a_c[N], gr2[N], gc2[N];
    phase_gradient(R, C, g_r, g_c);
    qem_error e = {0};
    struct {
        unsigned steps, k;
        int exchanged;
    } cases[] = {{180, 37, 0}, {180, 120, 1}, {180, 1, 0}, {180, 178, 1}, {7, 2, 0}, {7, 5, 1}};
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        double want = grid_deg(cases[t].k, cases[t].steps);
        /* The grid angle is the familiar k * 180/(steps-1) to float32 precision. */
        CHECK(fabs(want - cases[t].k * 180.0 / (cases[t].steps - 1)) < 1e-4);
        measured(g_r, g_c, N, want, cases[t].exchanged, mu_r, mu_c);
        double deg = -1.0;
        int ex = -1;
        CHECK_OK(qem_product_dpc_rotation(mu_r, mu_c, R, C, cases[t].steps, &deg, &ex, &e), &e);
        CHECK(deg == want);
        CHECK_EQ_U64(ex, cases[t].exchanged);
        if (deg != want || ex != cases[t].exchanged)
            fprintf(stderr, "case %zu: got %.9f deg exchanged %d, want %.9f exchanged %d\n", t,
                    deg, ex, want, cases[t].exchanged);
        /* Aligning and swapping back recovers the original gradient. */
        qem_product_dpc_align(mu_r, mu_c, N, deg, ex, a_r, a_c);
        qem_product_dpc_gradients(a_r, a_c, N, ex, gr2, gc2);
        double worst = 0.0;
        for (int i = 0; i < N; i++) {
            double d1 = ex ? fabs(gr2[i] - g_c[i]) : fabs(gr2[i] - g_r[i]);
            double d2 = ex ? fabs(gc2[i] - g_r[i]) : fabs(gc2[i] - g_c[i]);
            worst = fmax(worst, fmax(d1, d2));
        }
        /* When exchanged, the swap back gives the gradient with its components exchanged. */
        CHECK(worst < 1e-6);
    }
    /* The default step count names the documented default. */
    CHECK_EQ_U64(PRODUCT_DPC_ROTATION_STEPS, 180);
}

static void test_rotation_brute_force(void)
{
    enum { R = 9, C = 11, N = R * C };
    static float mu_r[N], mu_c[N];
    uint64_t state = 12345;
    qem_error e = {0};
    int exchanged_seen = 0, normal_seen = 0;
    for (int trial = 0; trial < 24; trial++) {
        random_field(mu_r, N, &state);
        random_field(mu_c, N, &state);
        if (trial % 3 == 2) { /* a few invalid frames, some on the border */
            for (int j = 0; j < 4; j++) {
                uint64_t i = test_rand(&state) % N;
                mu_r[i] = mu_c[i] = NAN;
            }
        }
        unsigned steps = trial % 2 ? 180 : 2 + (unsigned)trial;
        double deg = -1, want = -2;
        int ex = -1, want_ex = -2;
        CHECK_OK(qem_product_dpc_rotation(mu_r, mu_c, R, C, steps, &deg, &ex, &e), &e);
        brute_rotation(mu_r, mu_c, R, C, steps, &want, &want_ex);
        CHECK(deg == want);
        CHECK_EQ_U64(ex, want_ex);
        exchanged_seen += ex == 1;
        normal_seen += ex == 0;
    }
    /* Random fields exercise both orders. */
    CHECK(exchanged_seen > 0 && normal_seen > 0);
}

static void test_rotation_small_and_invalid(void)
{
    enum { R = 24, C = 32, N = R * C };
    static float g_r[N], g_c[N], mu_r[N], mu_c[N];
    phase_gradient(R, C, g_r, g_c);
    double want = grid_deg(37, 180);
    measured(g_r, g_c, N, want, 1, mu_r, mu_c);
    qem_error e = {0};
    double deg;
    int ex;
    /* min(rows, cols) < 3: angle 0, no exchange, whatever the data. */
    uint64_t shapes[][2] = {{2, 384}, {384, 2}, {1, 768}, {768, 1}};
    for (size_t t = 0; t < 4; t++) {
        deg = 99.0;
        ex = 7;
        CHECK_OK(
            qem_product_dpc_rotation(mu_r, mu_c, shapes[t][0], shapes[t][1], 180, &deg, &ex, &e),
            &e);
        CHECK(deg == 0.0 && ex == 0);
    }
    /* The same data as 3 x 256 does have interior points and a non-zero answer. */
    deg = 0.0;
    ex = 0;
    CHECK_OK(qem_product_dpc_rotation(mu_r, mu_c, 3, 256, 180, &deg, &ex, &e), &e);
    CHECK(deg != 0.0 || ex != 0);

    /* Invalid (NaN) frames inside, on the border and at a corner leave the answer. */
    uint64_t bad[] = {0, 5, 31, 2 * C + 7, 10 * C + 10, 10 * C + 11, 11 * C + 10, N - 1, N - 40};
    for (size_t t = 0; t < sizeof bad / sizeof bad[0]; t++)
        mu_r[bad[t]] = mu_c[bad[t]] = NAN;
    deg = -1.0;
    ex = -1;
    CHECK_OK(qem_product_dpc_rotation(mu_r, mu_c, R, C, 180, &deg, &ex, &e), &e);
    CHECK(deg == want);
    CHECK_EQ_U64(ex, 1);
    /* A NaN in one component only also removes its stencils. */
    mu_c[12 * C + 12] = NAN;
    CHECK_OK(qem_product_dpc_rotation(mu_r, mu_c, R, C, 180, &deg, &ex, &e), &e);
    CHECK(deg == want && ex == 1);

    /* Every stencil touches an invalid frame: angle 0, no exchange. With
     * every odd row invalid, an even row's point has invalid row neighbours
     * and an odd row's point invalid column neighbours. */
    for (int r = 1; r < R; r += 2)
        for (int c = 0; c < C; c++)
            mu_r[r * C + c] = mu_c[r * C + c] = NAN;
    deg = 99.0;
    ex = 7;
    CHECK_OK(qem_product_dpc_rotation(mu_r, mu_c, R, C, 180, &deg, &ex, &e), &e);
    CHECK(deg == 0.0 && ex == 0);
}

static void test_align_and_gradients(void)
{
    float mu_r[5] = {1.0f, -2.5f, 0.125f, NAN, 3.0f};
    float mu_c[5] = {0.5f, 4.0f, -1.0f, NAN, NAN};
    float a_r[5], a_c[5], g_r[5], g_c[5];
    double deg = 176.98, a = deg * PI / 180.0;
    for (int ex = 0; ex < 2; ex++) {
        qem_product_dpc_align(mu_r, mu_c, 5, deg, ex, a_r, a_c);
        for (int i = 0; i < 3; i++) {
            double sr = ex ? mu_c[i] : mu_r[i], sc = ex ? mu_r[i] : mu_c[i];
            CHECK(a_r[i] == (float)(cos(a) * sr - sin(a) * sc));
            CHECK(a_c[i] == (float)(sin(a) * sr + cos(a) * sc));
        }
        /* Invalid frames stay invalid. */
        CHECK(isnan(a_r[3]) && isnan(a_c[3]) && isnan(a_r[4]) && isnan(a_c[4]));
        qem_product_dpc_gradients(a_r, a_c, 5, ex, g_r, g_c);
        for (int i = 0; i < 3; i++) {
            CHECK(g_r[i] == (ex ? a_c[i] : a_r[i]));
            CHECK(g_c[i] == (ex ? a_r[i] : a_c[i]));
        }
        if (ex) { /* the Metal form of the exchanged gradients */
            for (int i = 0; i < 3; i++) {
                CHECK(g_r[i] == (float)(sin(a) * mu_c[i] + cos(a) * mu_r[i]));
                CHECK(g_c[i] == (float)(cos(a) * mu_c[i] - sin(a) * mu_r[i]));
            }
        }
        /* In place gives the same numbers. */
        float ir[5], ic[5];
        memcpy(ir, mu_r, sizeof ir);
        memcpy(ic, mu_c, sizeof ic);
        qem_product_dpc_align(ir, ic, 5, deg, ex, ir, ic);
        CHECK(memcmp(ir, a_r, sizeof ir) == 0 && memcmp(ic, a_c, sizeof ic) == 0);
        qem_product_dpc_gradients(ir, ic, 5, ex, ir, ic);
        CHECK(memcmp(ir, g_r, sizeof ir) == 0 && memcmp(ic, g_c, sizeof ic) == 0);
    }
    /* 90 degrees: row <- -col, col <- row. */
    qem_product_dpc_align(mu_r, mu_c, 3, 90.0, 0, a_r, a_c);
    CHECK(fabsf(a_r[1] + 4.0f) < 1e-6f && fabsf(a_c[1] + 2.5f) < 1e-6f);
}

static void test_idpc_naive(void)
{
    uint64_t shapes[][2] = {{6, 10}, {7, 5}, {4, 4}, {1, 8}, {5, 1}, {1, 1}, {9, 3}};
    uint64_t state = 777;
    qem_error e = {0};
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        uint64_t rows = shapes[t][0], cols = shapes[t][1], n = rows * cols;
        float *g_r = malloc(n * sizeof *g_r), *g_c = malloc(n * sizeof *g_c);
        float *phase = malloc(n * sizeof *phase), *zeroed = malloc(n * sizeof *zeroed);
        double *want = malloc(n * sizeof *want);
        random_field(g_r, n, &state);
        random_field(g_c, n, &state);
        uint64_t ffts = 0;
        CHECK_OK(qem_product_idpc(g_r, g_c, rows, cols, phase, &ffts, &e), &e);
        naive_idpc(g_r, g_c, rows, cols, want);
        int ok = 1;
        double signal = 0.0;
        for (uint64_t i = 0; i < n; i++) {
            ok = ok && close_to(phase[i], want[i], 1e-5);
            signal = fmax(signal, fabs(want[i]));
        }
        CHECK(ok);
        if (!ok)
            fprintf(stderr, "iDPC %llux%llu differs from the naive DFT\n",
                    (unsigned long long)rows, (unsigned long long)cols);
        /* The comparison has something to compare (except 1x1, which is 0). */
        CHECK(n == 1 ? signal == 0.0 : signal > 1e-2);

        /* NaN gradient entries are the same as zeros. */
        if (n >= 4) {
            g_r[1] = NAN;
            g_c[1] = NAN;
            g_c[n - 1] = NAN;
            CHECK_OK(qem_product_idpc(g_r, g_c, rows, cols, phase, &ffts, &e), &e);
            g_r[1] = g_c[1] = g_c[n - 1] = 0.0f;
            CHECK_OK(qem_product_idpc(g_r, g_c, rows, cols, zeroed, &ffts, &e), &e);
            int same = 1;
            for (uint64_t i = 0; i < n; i++)
                same = same && !isnan(phase[i]) && phase[i] == zeroed[i];
            CHECK(same);
        }
        free(g_r);
        free(g_c);
        free(phase);
        free(zeroed);
        free(want);
    }
}

static void test_idpc_integrates(void)
{
    /* A band-limited periodic phase (every frequency below Nyquist) and its
     * exact gradient: the formula gives -(pi/2)(p - mean p), because
     * G = 2 pi i nu P and (-0.25 i)(2 pi i) = pi/2. */
    enum { R = 12, C = 10, N = R * C };
    static float g_r[N], g_c[N], phase[N];
    static double p[N];
    double wr = 2.0 * PI / R, wc = 2.0 * PI / C, mean = 0.0;
    for (int r = 0; r < R; r++) {
        for (int c = 0; c < C; c++) {
            double u = wr * r, v = wc * c;
            int i = r * C + c;
            p[i] = cos(u + 2 * v) + 0.5 * sin(3 * u) + 0.3 * cos(-2 * u + v) + 0.7;
            g_r[i] = (float)(-wr * sin(u + 2 * v) + 1.5 * wr * cos(3 * u) + 0.6 * wr * sin(-2 * u + v));
            g_c[i] = (float)(-2 * wc * sin(u + 2 * v) - 0.3 * wc * sin(-2 * u + v));
            mean += p[i];
        }
    }
    mean /= N;
    qem_error e = {0};
    CHECK_OK(qem_product_idpc(g_r, g_c, R, C, phase, NULL, &e), &e);
    double worst = 0.0, out_mean = 0.0;
    for (int i = 0; i < N; i++) {
        worst = fmax(worst, fabs(phase[i] - (-(PI / 2) * (p[i] - mean))));
        out_mean += phase[i];
    }
    CHECK(worst < 1e-5);
    if (worst >= 1e-5)
        fprintf(stderr, "iDPC integration error %.3g\n", worst);
    CHECK(fabs(out_mean / N) < 1e-6); /* zero mean */
}

static void test_ffts_and_refusals(void)
{
    float a[12] = {0}, b[12] = {0}, out[12];
    double deg;
    int ex;
    qem_error e = {0};
    uint64_t ffts = 5;
    CHECK_OK(qem_product_idpc(a, b, 3, 4, out, &ffts, &e), &e);
    CHECK_EQ_U64(ffts, 7); /* one forward (both gradients packed) + one inverse */
    CHECK_OK(qem_product_idpc(a, b, 1, 1, out, &ffts, &e), &e);
    CHECK_EQ_U64(ffts, 9);
    CHECK_OK(qem_product_idpc(a, b, 3, 4, out, NULL, &e), &e);

#define REFUSED(expr, expected)                                                                    \
    do {                                                                                           \
        e = (qem_error){0};                                                                        \
        CHECK_STATUS(expr, expected, &e);                                                          \
        CHECK(e.status == (expected) && e.message[0] != '\0');                                     \
    } while (0)
    REFUSED(qem_product_idpc(NULL, b, 3, 4, out, &ffts, &e), QEM_E_INVALID_ARGUMENT);
    REFUSED(qem_product_idpc(a, NULL, 3, 4, out, &ffts, &e), QEM_E_INVALID_ARGUMENT);
    REFUSED(qem_product_idpc(a, b, 3, 4, NULL, &ffts, &e), QEM_E_INVALID_ARGUMENT);
    REFUSED(qem_product_idpc(a, b, 0, 4, out, &ffts, &e), QEM_E_INVALID_ARGUMENT);
    REFUSED(qem_product_idpc(a, b, 3, 0, out, &ffts, &e), QEM_E_INVALID_ARGUMENT);
    REFUSED(qem_product_idpc(a, b, UINT64_MAX, 2, out, &ffts, &e), QEM_E_INVALID_ARGUMENT);
    REFUSED(qem_product_idpc(a, b, 1ull << 31, 1, out, &ffts, &e), QEM_E_LIMIT);
    CHECK_EQ_U64(ffts, 9); /* refusals perform no FFT */

    REFUSED(qem_product_dpc_rotation(NULL, b, 3, 4, 180, &deg, &ex, &e), QEM_E_INVALID_ARGUMENT);
    REFUSED(qem_product_dpc_rotation(a, NULL, 3, 4, 180, &deg, &ex, &e), QEM_E_INVALID_ARGUMENT);
    REFUSED(qem_product_dpc_rotation(a, b, 3, 4, 180, NULL, &ex, &e), QEM_E_INVALID_ARGUMENT);
    REFUSED(qem_product_dpc_rotation(a, b, 3, 4, 180, &deg, NULL, &e), QEM_E_INVALID_ARGUMENT);
    REFUSED(qem_product_dpc_rotation(a, b, 0, 4, 180, &deg, &ex, &e), QEM_E_INVALID_ARGUMENT);
    REFUSED(qem_product_dpc_rotation(a, b, 3, 0, 180, &deg, &ex, &e), QEM_E_INVALID_ARGUMENT);
    REFUSED(qem_product_dpc_rotation(a, b, 1ull << 33, 1ull << 31, 180, &deg, &ex, &e),
            QEM_E_INVALID_ARGUMENT);
    REFUSED(qem_product_dpc_rotation(a, b, 3, 4, 1, &deg, &ex, &e), QEM_E_INVALID_ARGUMENT);
    REFUSED(qem_product_dpc_rotation(a, b, 3, 4, 0, &deg, &ex, &e), QEM_E_INVALID_ARGUMENT);
#undef REFUSED
    /* Two steps is the smallest search: 0 and pi. */
    CHECK_OK(qem_product_dpc_rotation(a, b, 3, 4, 2, &deg, &ex, &e), &e);
    CHECK(deg == 0.0 && ex == 0); /* all-zero field: every score ties, the first wins */
    /* NULL error records are accepted. */
    CHECK_STATUS(qem_product_idpc(NULL, b, 3, 4, out, NULL, NULL), QEM_E_INVALID_ARGUMENT, NULL);
}

/* qem serialises its FFTW planning, so concurrent calls give the serial answer. */
static void test_idpc_concurrent(void)
{
    enum { R = 15, C = 14, N = R * C, CALLS = 16 };
    static float g_r[N], g_c[N], serial[N], out[CALLS][N];
    uint64_t state = 99;
    random_field(g_r, N, &state);
    random_field(g_c, N, &state);
    qem_error e = {0};
    CHECK_OK(qem_product_idpc(g_r, g_c, R, C, serial, NULL, &e), &e);
    int failures = 0;
#pragma omp parallel for num_threads(4) reduction(+ : failures)
    for (int i = 0; i < CALLS; i++) {
        qem_error local = {0};
        uint64_t ffts = 0;
        failures += qem_product_idpc(g_r, g_c, R, C, out[i], &ffts, &local) != QEM_OK || ffts != 2;
        failures += memcmp(out[i], serial, sizeof serial) != 0;
    }
    CHECK_EQ_U64(failures, 0);
}

int main(void)
{
    test_rotation_recovery();
    test_rotation_brute_force();
    test_rotation_small_and_invalid();
    test_align_and_gradients();
    test_idpc_naive();
    test_idpc_integrates();
    test_idpc_concurrent();
    test_ffts_and_refusals();
    return test_finish("unit_dpc");
}
