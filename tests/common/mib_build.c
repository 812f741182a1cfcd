#include "mib_build.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what, const char *file)
{
    fprintf(stderr, "mib_build: %s failed for '%s'\n", what, file);
    return -1;
}

/* --- Merlin .mib ------------------------------------------------------------ */

size_t mibb_item(int depth)
{
    return depth == 1 || depth == 6 ? 1 : depth == 12 ? 2 : depth == 24 ? 4 : 0;
}

uint64_t mibb_header_bytes(const mibb_options *o)
{
    return o->quad ? 768 : 384;
}

uint64_t mibb_width(const mibb_options *o)
{
    return o->width ? o->width : o->quad ? 512 : 256;
}

uint64_t mibb_height(const mibb_options *o)
{
    return o->height ? o->height : o->quad ? 512 : 256;
}

static size_t item_of(const mibb_options *o)
{
    size_t item = mibb_item(o->depth);
    return item ? item : 1;
}

uint64_t mibb_record_bytes(const mibb_options *o)
{
    return mibb_header_bytes(o) + mibb_width(o) * mibb_height(o) * item_of(o);
}

uint32_t mibb_pattern(uint64_t frame, uint64_t pixel, uint32_t max)
{
    uint64_t x = frame * 0x9E3779B97F4A7C15ull + pixel * 0xBF58476D1CE4E5B9ull + 0x94D049BB1331;
    x ^= x >> 31;
    x *= 0xD6E8FEB86659FD93ull;
    x ^= x >> 29;
    return (uint32_t)(x % ((uint64_t)max + 1));
}

int mibb_frame_header(const mibb_options *o, uint64_t frame, char *out)
{
    const uint64_t hb = mibb_header_bytes(o), number = (o->first_number ? o->first_number : 1) +
                                                        frame;
    const char *type = o->data_type ? o->data_type
                       : mibb_item(o->depth) == 1 ? "U08"
                       : mibb_item(o->depth) == 2 ? "U16"
                                                  : "U32";
    const int chips = o->quad ? 4 : 1;
    char text[2048];
    /* 2021-04-15 14:43:02.<microseconds>, one millisecond per frame. */
    const uint64_t us = 396481 + frame * 1000;
    int n = snprintf(text, sizeof text,
                     "MQ1,%06llu,%05llu,%02d,%04llu,%04llu,%s,%6s,%s,2021-04-15 14:%02llu:%02llu."
                     "%06llu,0.001000,0,0,0,2.000000E+0,5.110000E+2,0.000000E+0,0.000000E+0,"
                     "0.000000E+0,0.000000E+0,0.000000E+0,0.000000E+0,3RX",
                     (unsigned long long)number, (unsigned long long)hb, chips,
                     (unsigned long long)mibb_width(o), (unsigned long long)mibb_height(o), type,
                     o->quad ? "2x2" : "1x1", o->quad ? "0F" : "01",
                     (unsigned long long)(43 + us / 60000000 % 16),
                     (unsigned long long)(us / 1000000 % 60), (unsigned long long)(us % 1000000));
    for (int c = 0; c < chips; c++)
        n += snprintf(text + n, sizeof text - (size_t)n,
                      ",011,511,000,000,000,000,000,000,175,010,200,125,100,100,093,100,099,030,"
                      "128,004,255,140,128,191,179,511,511");
    if (!o->omit_extended)
        n += snprintf(text + n, sizeof text - (size_t)n,
                      ",MQ1A,2021-04-15T13:43:02.%06lluZ,1000000ns,%d,",
                      (unsigned long long)(us % 1000000),
                      o->stated_depth ? o->stated_depth : o->depth);
    if (n < 0 || (uint64_t)n > hb)
        return -1;
    memset(out, 0, (size_t)hb);
    memcpy(out, text, (size_t)n);
    return 0;
}

void mibb_hdr_path(const char *path, char *out, size_t size)
{
    const size_t n = strlen(path);
    if (n > 4 && !strcmp(path + n - 4, ".mib"))
        snprintf(out, size, "%.*s.hdr", (int)(n - 4), path);
    else
        snprintf(out, size, "%s.hdr", path);
}

static int write_hdr(const char *path, const mibb_options *o)
{
    char hdr[1024];
    mibb_hdr_path(path, hdr, sizeof hdr);
    FILE *f = fopen(hdr, "wb");
    if (!f)
        return fail("fopen", hdr);
    const int depth = o->depth;
    fprintf(f,
            "HDR,\t\r\n"
            "Time and Date Stamp (day, mnth, yr, hr, min, s):\t15/04/2021 14:43:00\r\n"
            "Chip ID:\tW000_T1%s\r\n"
            "Chip Type (Medipix 3.0, Medipix 3.1, Medipix 3RX):\tMedipix 3RX\r\n"
            "Assembly Size (NX1, 2X2):\t   %s\r\n"
            "Chip Mode  (SPM, CSM, CM, CSCM):\tSPM\r\n"
            "Counter Depth (number):\t%d\r\n"
            "Gain:\tSLGM\r\n"
            "Active Counters:\tCounter 0\r\n"
            "Thresholds (keV):\t2.000000E+0,5.110000E+2,0.000000E+0,0.000000E+0,0.000000E+0,"
            "0.000000E+0,0.000000E+0,0.000000E+0\r\n"
            "Acquisition Type (Normal, Th_scan, Config):\tNormal\r\n"
            "Frames in Acquisition (Number):\t%llu\r\n"
            "Frames per Trigger (Number):\t%llu\r\n"
            "Trigger Start (Positive, Negative, Internal):\tRising Edge\r\n"
            "Sensor Bias (V):\t120 V\r\n"
            "Software Version:\t0.76.1.101\r\n"
            "End\t",
            o->quad ? ", W000_T2, W000_T3, W000_T4" : ", - , - , - ", o->quad ? "2x2" : "1x1",
            depth,
            (unsigned long long)(o->frames_in_acquisition ? o->frames_in_acquisition
                                                          : o->frames),
            (unsigned long long)(o->frames_per_trigger ? o->frames_per_trigger : 1));
    /* Space padding to 2048 bytes, as the Merlin writes it. */
    long at = ftell(f);
    for (; at >= 0 && at < 2048; at++)
        fputc(' ', f);
    return fclose(f) == 0 ? 0 : fail("fclose", hdr);
}

int mibb_write(const char *path, const mibb_options *o)
{
    const size_t item = mibb_item(o->depth);
    if (!item && !o->data_type)
        return fail("an unknown counter depth", path);
    const size_t it = item ? item : 1;
    const uint64_t hb = mibb_header_bytes(o), pixels = mibb_width(o) * mibb_height(o);
    const uint32_t max = o->max_value ? o->max_value
                         : o->depth == 1 ? 1u
                         : o->depth == 6 ? 63u
                         : o->depth == 12 ? 4095u
                                         : 16777215u;
    FILE *f = fopen(path, "wb");
    char *header = malloc((size_t)hb);
    void *values = malloc((size_t)(pixels * it));
    uint8_t *bytes = malloc((size_t)(pixels * it));
    int rc = f && header && values && bytes ? 0 : fail("fopen/malloc", path);
    for (uint64_t k = 0; rc == 0 && k < o->frames; k++) {
        if (mibb_frame_header(o, k, header) != 0 || fwrite(header, 1, (size_t)hb, f) != hb) {
            rc = fail("header", path);
            break;
        }
        if (o->data)
            memcpy(values, (const uint8_t *)o->data + k * pixels * it, (size_t)(pixels * it));
        else if (o->fill)
            o->fill(o->user, k, values);
        else
            for (uint64_t p = 0; p < pixels; p++) {
                const uint32_t v = mibb_pattern(k, p, max);
                if (it == 1)
                    ((uint8_t *)values)[p] = (uint8_t)v;
                else if (it == 2)
                    ((uint16_t *)values)[p] = (uint16_t)v;
                else
                    ((uint32_t *)values)[p] = v;
            }
        /* Big-endian samples. */
        for (uint64_t p = 0; p < pixels; p++) {
            const uint32_t v = it == 1   ? ((const uint8_t *)values)[p]
                               : it == 2 ? ((const uint16_t *)values)[p]
                                         : ((const uint32_t *)values)[p];
            for (size_t b = 0; b < it; b++)
                bytes[p * it + b] = (uint8_t)(v >> (8 * (it - 1 - b)));
        }
        if (fwrite(bytes, 1, (size_t)(pixels * it), f) != pixels * it)
            rc = fail("fwrite", path);
    }
    if (f && fclose(f) != 0 && rc == 0)
        rc = fail("fclose", path);
    free(header);
    free(values);
    free(bytes);
    if (rc == 0 && o->write_hdr)
        rc = write_hdr(path, o);
    return rc;
}

/* --- EMPAD ------------------------------------------------------------------- */

float empadb_value(uint64_t frame, uint64_t row, uint64_t column)
{
    return (float)(frame * EMPADB_ROWS_STORED * EMPADB_COLUMNS + row * EMPADB_COLUMNS + column);
}

int empadb_write(const char *xml_path, const empadb_options *o)
{
    char raw_name[256], raw_path[1024];
    if (o->raw_name)
        snprintf(raw_name, sizeof raw_name, "%s", o->raw_name);
    else
        snprintf(raw_name, sizeof raw_name, "scan_x%llu_y%llu.raw",
                 (unsigned long long)o->scan_columns, (unsigned long long)o->scan_rows);
    if (o->raw_path) {
        snprintf(raw_path, sizeof raw_path, "%s", o->raw_path);
    } else {
        const char *slash = strrchr(xml_path, '/');
        snprintf(raw_path, sizeof raw_path, "%.*s%s", slash ? (int)(slash - xml_path + 1) : 0,
                 xml_path, raw_name);
    }
    FILE *f = fopen(xml_path, "wb");
    if (!f)
        return fail("fopen", xml_path);
    fprintf(f,
            "<root name=\"acquisition_1\"><timestamp timestamp=\"1559820600.164675\" "
            "isoformat=\"2019-06-06T13:30:00.164675\"/><software_version>0.51 211118"
            "</software_version><type>scan</type>");
    if (o->state_scan)
        fprintf(f, "<pix_x>%llu</pix_x><pix_y>%llu</pix_y>", (unsigned long long)o->scan_columns,
                (unsigned long long)o->scan_rows);
    fprintf(f, "<raw_file filename=\"%s\"/><exposure_time>1</exposure_time>", raw_name);
    fprintf(f,
            "<scan_parameters mode=\"search\"><scan_resolution_x>64</scan_resolution_x>"
            "</scan_parameters><scan_parameters mode=\"acquire\"><scan_resolution_x>128"
            "</scan_resolution_x></scan_parameters>");
    if (o->calibration)
        fprintf(f,
                "<iom_measurements><optics.get_cameralength>%.17g</optics.get_cameralength>"
                "<source.get_voltage>%.17g</source.get_voltage><optics.get_magnicication>None"
                "</optics.get_magnicication><calibrated_diffraction_angle>%.17g"
                "</calibrated_diffraction_angle><calibrated_pixelsize>%.17g"
                "</calibrated_pixelsize></iom_measurements>",
                o->camera_length_m, o->voltage_v, o->diffraction_angle_rad, o->pixel_size_m);
    fprintf(f, "</root>\n");
    if (fclose(f) != 0)
        return fail("fclose", xml_path);
    if (o->raw_path && !o->raw_path[0])
        return 0;
    f = fopen(raw_path, "wb");
    if (!f)
        return fail("fopen", raw_path);
    const uint64_t frames = o->scan_rows * o->scan_columns;
    static float row[EMPADB_COLUMNS];
    uint8_t le[EMPADB_COLUMNS * 4];
    int rc = 0;
    for (uint64_t k = 0; rc == 0 && k < frames; k++)
        for (uint64_t r = 0; rc == 0 && r < EMPADB_ROWS_STORED; r++) {
            for (uint64_t c = 0; c < EMPADB_COLUMNS; c++)
                row[c] = o->frames && r < EMPADB_ROWS
                             ? o->frames[(k * EMPADB_ROWS + r) * EMPADB_COLUMNS + c]
                             : empadb_value(k, r, c);
            for (uint64_t c = 0; c < EMPADB_COLUMNS; c++) {
                uint32_t bits;
                memcpy(&bits, &row[c], 4);
                for (int b = 0; b < 4; b++)
                    le[c * 4 + (size_t)b] = (uint8_t)(bits >> (8 * b));
            }
            if (fwrite(le, 1, sizeof le, f) != sizeof le)
                rc = fail("fwrite", raw_path);
        }
    if (fclose(f) != 0 && rc == 0)
        rc = fail("fclose", raw_path);
    return rc;
}

/* --- raw binary --------------------------------------------------------------- */

int rawb_write(const char *path, const rawb_options *o)
{
    const size_t item = qem_dtype_size(o->dtype);
    if (!item)
        return fail("an unknown dtype", path);
    const uint64_t frames = o->shape[0] * o->shape[1], values = o->shape[2] * o->shape[3];
    FILE *f = fopen(path, "wb");
    if (!f)
        return fail("fopen", path);
    int rc = 0;
    for (uint64_t i = 0; i < o->offset && rc == 0; i++)
        if (fputc(0xD5, f) == EOF)
            rc = fail("fputc", path);
    const uint8_t *data = o->data;
    uint8_t sample[4];
    for (uint64_t k = 0; k < frames && rc == 0; k++) {
        for (uint64_t i = 0; i < o->frame_header && rc == 0; i++)
            if (fputc(0xE7, f) == EOF)
                rc = fail("fputc", path);
        for (uint64_t v = 0; v < values && rc == 0; v++) {
            uint32_t x = 0;
            const uint8_t *p = data + (k * values + v) * item;
            if (item == 1)
                x = p[0];
            else if (item == 2) {
                uint16_t y;
                memcpy(&y, p, 2);
                x = y;
            } else {
                memcpy(&x, p, 4);
            }
            for (size_t b = 0; b < item; b++)
                sample[b] = (uint8_t)(x >> (8 * (o->big_endian ? item - 1 - b : b)));
            if (fwrite(sample, 1, item, f) != item)
                rc = fail("fwrite", path);
        }
    }
    if (fclose(f) != 0 && rc == 0)
        rc = fail("fclose", path);
    return rc;
}
