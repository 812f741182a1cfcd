/* Samples no codec stores as they are: signed, 64-bit or float64 (a DM
 * int16 stack, a TIA int32 series, a float64 MRC). One pass over every
 * frame at open proves where they go: integers to uint16 when every value
 * fits, else (integers and float64) to float32 when every value survives
 * float32 bit for bit, else a refusal naming the range. Reads convert
 * with the same test, so a file that changed since is QEM_E_CHANGED, never
 * a rounded value. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "input/input.h"

#define VALUES_SCRATCH_BYTES (8u << 20)

size_t qem_input_values_size(input_values v)
{
    switch (v) {
    case INPUT_VALUES_INT8:
        return 1;
    case INPUT_VALUES_INT16:
        return 2;
    case INPUT_VALUES_INT32:
    case INPUT_VALUES_UINT32:
        return 4;
    case INPUT_VALUES_INT64:
    case INPUT_VALUES_UINT64:
    case INPUT_VALUES_FLOAT64:
        return 8;
    default:
        return 0;
    }
}

const char *qem_input_values_name(input_values v)
{
    static const char *const names[] = {"as stored", "int8",   "int16",  "int32",
                                        "int64",     "uint32", "uint64", "float64"};
    return (unsigned)v < sizeof names / sizeof names[0] ? names[v] : "unknown";
}

/* Value k of a buffer of `v` samples as a signed or unsigned integer
 * (is_unsigned) or a double. */
typedef struct value_of {
    int64_t i;
    uint64_t u;
    double d;
    int kind; /* 0 signed, 1 unsigned, 2 float */
} value_of;

static value_of value_at(input_values v, const void *data, uint64_t k)
{
    value_of x = {0, 0, 0, 0};
    switch (v) {
    case INPUT_VALUES_INT8:
        x.i = ((const int8_t *)data)[k];
        break;
    case INPUT_VALUES_INT16:
        x.i = ((const int16_t *)data)[k];
        break;
    case INPUT_VALUES_INT32:
        x.i = ((const int32_t *)data)[k];
        break;
    case INPUT_VALUES_INT64:
        x.i = ((const int64_t *)data)[k];
        break;
    case INPUT_VALUES_UINT32:
        x.u = ((const uint32_t *)data)[k], x.kind = 1;
        break;
    case INPUT_VALUES_UINT64:
        x.u = ((const uint64_t *)data)[k], x.kind = 1;
        break;
    default:
        x.d = ((const double *)data)[k], x.kind = 2;
        break;
    }
    return x;
}

/* 1 if `x` is exactly a uint16 (integers only: float64 never becomes
 * uint16, the rule keeps it a float). */
static int fits_u16(value_of x)
{
    return x.kind == 0 ? x.i >= 0 && x.i <= 65535 : x.kind == 1 ? x.u <= 65535 : 0;
}

/* 1 if `x` survives float32 bit for bit; `*f` the float32. */
static int fits_f32(value_of x, float *f)
{
    if (x.kind == 0) {
        *f = (float)x.i;
        return *f >= -9223372036854775808.0f && *f < 9223372036854775808.0f &&
               (int64_t)*f == x.i;
    }
    if (x.kind == 1) {
        *f = (float)x.u;
        return *f < 18446744073709551616.0f && (uint64_t)*f == x.u;
    }
    *f = (float)x.d;
    const double back = (double)*f;
    return memcmp(&back, &x.d, sizeof back) == 0; /* -0.0, NaN payloads: bits, not == */
}

typedef struct values_seen {
    int any, all_u16, all_f32;
    int64_t imin, imax;
    uint64_t umax;
    double dmin, dmax; /* NaN ignored */
} values_seen;

/* Smallest and largest of `n` signed integers of one type, in a loop the
 * compiler vectorises: the settling pass of a signed file costs what a
 * read does. */
#define SIGNED_RANGE(type)                                                                         \
    do {                                                                                           \
        const type *x = data;                                                                      \
        type lo = x[0], hi = x[0];                                                                 \
        for (uint64_t k = 1; k < n; k++) {                                                         \
            lo = x[k] < lo ? x[k] : lo;                                                            \
            hi = x[k] > hi ? x[k] : hi;                                                            \
        }                                                                                          \
        *min = lo, *max = hi;                                                                      \
    } while (0)

static void signed_range(input_values v, const void *data, uint64_t n, int64_t *min,
                         int64_t *max)
{
    if (v == INPUT_VALUES_INT8)
        SIGNED_RANGE(int8_t);
    else if (v == INPUT_VALUES_INT16)
        SIGNED_RANGE(int16_t);
    else
        SIGNED_RANGE(int32_t);
}

/* int8, int16 and int32 values all within 2^24 of zero: every one is a
 * float32, so their range alone settles them. */
static int see_signed(values_seen *s, input_values v, const void *data, uint64_t n)
{
    if ((v != INPUT_VALUES_INT8 && v != INPUT_VALUES_INT16 && v != INPUT_VALUES_INT32) || !n)
        return 0;
    int64_t lo, hi;
    signed_range(v, data, n, &lo, &hi);
    if (lo < -16777216 || hi > 16777216)
        return 0;
    s->all_u16 &= lo >= 0 && hi <= 65535;
    s->imin = !s->any || lo < s->imin ? lo : s->imin;
    s->imax = !s->any || hi > s->imax ? hi : s->imax;
    s->any = 1;
    return 1;
}

static void see(values_seen *s, input_values v, const void *data, uint64_t n)
{
    if (see_signed(s, v, data, n))
        return;
    for (uint64_t k = 0; k < n; k++) {
        const value_of x = value_at(v, data, k);
        float f;
        s->all_u16 &= fits_u16(x);
        s->all_f32 &= fits_f32(x, &f);
        if (x.kind == 0) {
            s->imin = !s->any || x.i < s->imin ? x.i : s->imin;
            s->imax = !s->any || x.i > s->imax ? x.i : s->imax;
        } else if (x.kind == 1) {
            s->umax = x.u > s->umax ? x.u : s->umax;
            s->imin = 0;
        } else if (!isnan(x.d)) {
            s->dmin = !s->any || x.d < s->dmin ? x.d : s->dmin;
            s->dmax = !s->any || x.d > s->dmax ? x.d : s->dmax;
        }
        s->any = 1;
    }
}

/* JSON has no infinity: "inf" and "-inf" as text. */
static json_t *real_json(double d)
{
    return isfinite(d) ? json_real(d) : json_string(d > 0 ? "inf" : "-inf");
}

static json_t *range_json(const values_seen *s, input_values v, const char *key)
{
    const int low = !strcmp(key, "minimum");
    if (v == INPUT_VALUES_FLOAT64)
        return s->any ? real_json(low ? s->dmin : s->dmax) : json_null();
    if (v == INPUT_VALUES_UINT32 || v == INPUT_VALUES_UINT64) {
        if (low)
            return json_integer(0);
        /* JSON integers are signed 64-bit: the largest uint64 as text. */
        if (s->umax > (uint64_t)INT64_MAX) {
            char text[32];
            snprintf(text, sizeof text, "%llu", (unsigned long long)s->umax);
            return json_string(text);
        }
        return json_integer((json_int_t)s->umax);
    }
    return json_integer((json_int_t)(low ? s->imin : s->imax));
}

static void range_text(const values_seen *s, input_values v, char *out, size_t size)
{
    if (v == INPUT_VALUES_FLOAT64)
        snprintf(out, size, "%.17g to %.17g", s->dmin, s->dmax);
    else if (v == INPUT_VALUES_UINT32 || v == INPUT_VALUES_UINT64)
        snprintf(out, size, "0 to %llu", (unsigned long long)s->umax);
    else
        snprintf(out, size, "%lld to %lld", (long long)s->imin, (long long)s->imax);
}

qem_status qem_input_settle_values(acquisition *a, const char *path, qem_error *error)
{
    const input_values v = a->read_values;
    const size_t item = qem_input_values_size(v);
    if (!item)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "unknown value type %d", (int)v);
    const uint64_t frames = a->shape[0] * a->shape[1], pixels = a->shape[2] * a->shape[3];
    uint64_t per = VALUES_SCRATCH_BYTES / (pixels * item);
    per = per ? per : 1;
    per = per < frames ? per : frames;
    void *scratch = malloc((size_t)(per * pixels * item));
    if (!scratch)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    values_seen s = {0, 1, 1, 0, 0, 0, 0, 0};
    qem_status st = QEM_OK;
    for (uint64_t done = 0; st == QEM_OK && done < frames; done += per) {
        const uint64_t n = frames - done < per ? frames - done : per;
        st = a->family->read(a, done, n, scratch, error);
        if (st == QEM_OK)
            see(&s, v, scratch, n * pixels);
    }
    free(scratch);
    QEM_TRY(st);
    char range[96];
    range_text(&s, v, range, sizeof range);
    const char *rule;
    if (s.all_u16 && v != INPUT_VALUES_FLOAT64) {
        a->sample_type = QEM_DTYPE_UINT16;
        rule = "integers stored as uint16: every value lies in 0..65535";
    } else if (s.all_f32) {
        a->sample_type = QEM_DTYPE_FLOAT32;
        rule = v == INPUT_VALUES_FLOAT64
                   ? "float64 stored as float32: every value is a float32 bit for bit"
                   : "integers stored as float32: every value is exactly a float32 "
                     "(some lie outside 0..65535)";
    } else {
        return qem_fail(error, QEM_E_VALUE_RANGE,
                        "'%s' holds %s values from %s, which neither uint16 nor float32 "
                        "stores exactly (%s); nothing was written (values are never "
                        "clipped or rounded)",
                        path, qem_input_values_name(v), range,
                        v == INPUT_VALUES_FLOAT64
                            ? "a value would round in float32"
                            : "some lie outside 0..65535 and some need more than float32's "
                              "24-bit significand");
    }
    json_t *values = json_pack("{s:s, s:o, s:o, s:s, s:s, s:s}", "read_as",
                               qem_input_values_name(v), "minimum", range_json(&s, v, "minimum"),
                               "maximum", range_json(&s, v, "maximum"), "stored_as",
                               qem_dtype_name(a->sample_type), "rule", rule, "checked",
                               "over every value when the file was opened, again while reading");
    a->values = values;
    return values ? QEM_OK : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
}

/* The same test as fits_u16 / fits_f32 for a run of int8, int16 or int32
 * values whose range allows it, converted in one pass: 1 if every value
 * converted, 0 to take the value-by-value path (which names the first value
 * that does not fit). */
static int convert_signed(input_values v, int to_u16, const void *data, uint64_t n, void *out)
{
    if ((v != INPUT_VALUES_INT8 && v != INPUT_VALUES_INT16 && v != INPUT_VALUES_INT32) || !n)
        return 0;
    int64_t lo, hi;
    signed_range(v, data, n, &lo, &hi);
    if (to_u16 ? lo < 0 || hi > 65535 : lo < -16777216 || hi > 16777216)
        return 0;
    for (uint64_t k = 0; k < n; k++) {
        const int32_t x = v == INPUT_VALUES_INT8    ? ((const int8_t *)data)[k]
                          : v == INPUT_VALUES_INT16 ? ((const int16_t *)data)[k]
                                                    : ((const int32_t *)data)[k];
        if (to_u16)
            ((uint16_t *)out)[k] = (uint16_t)x;
        else
            ((float *)out)[k] = (float)x;
    }
    return 1;
}

qem_status qem_input_read_values(acquisition *a, uint64_t first, uint64_t count, void *out,
                                 qem_error *error)
{
    const input_values v = a->read_values;
    const size_t item = qem_input_values_size(v);
    const uint64_t pixels = a->shape[2] * a->shape[3];
    uint64_t per = VALUES_SCRATCH_BYTES / (pixels * item);
    per = per ? per : 1;
    per = per < count ? per : count;
    void *scratch = malloc((size_t)(per * pixels * item));
    if (!scratch)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    const int to_u16 = a->sample_type == QEM_DTYPE_UINT16;
    qem_status st = QEM_OK;
    for (uint64_t done = 0; st == QEM_OK && done < count; done += per) {
        const uint64_t n = count - done < per ? count - done : per;
        st = a->family->read(a, first + done, n, scratch, error);
        if (st == QEM_OK && convert_signed(v, to_u16, scratch, n * pixels,
                                           (uint8_t *)out + done * pixels * (to_u16 ? 2 : 4)))
            continue;
        for (uint64_t k = 0; st == QEM_OK && k < n * pixels; k++) {
            const value_of x = value_at(v, scratch, k);
            const uint64_t at = done * pixels + k;
            float f = 0;
            if (to_u16 ? fits_u16(x) : fits_f32(x, &f)) {
                if (to_u16)
                    ((uint16_t *)out)[at] = (uint16_t)(x.kind == 0 ? (uint64_t)x.i : x.u);
                else
                    ((float *)out)[at] = f;
                continue;
            }
            const uint64_t scan = first + done + k / pixels;
            st = qem_fail(error, QEM_E_CHANGED,
                          "scan position (%llu, %llu), detector pixel (%llu, %llu) no longer "
                          "fits the %s the file's %s values were proved to fit when it was "
                          "opened: the file changed",
                          (unsigned long long)(scan / a->shape[1]),
                          (unsigned long long)(scan % a->shape[1]),
                          (unsigned long long)(k % pixels / a->shape[3]),
                          (unsigned long long)(k % pixels % a->shape[3]),
                          qem_dtype_name(a->sample_type), qem_input_values_name(v));
        }
    }
    free(scratch);
    return st;
}
