/* Thermo Fisher/FEI TIA series: a .ser file holds one signal, a series of
 * elements (here 2D images) that its dimension arrays arrange into a scan,
 * each element found through the file's data offset array. TIA writes
 * name_1.ser, name_2.ser, ... (one per signal) beside name.emi, whose
 * embedded <ObjectInfo> XML documents hold the microscope's conditions.
 * Opening a .ser reads that series and, when present, its .emi (a
 * companion); opening an .emi reads its only series, or is refused naming
 * them when it has several. All numbers are little-endian. 1D spectra
 * series and complex samples are refused. Rows stay as stored in the file
 * (HyperSpy returns each frame flipped vertically). Layout facts: C.
 * Boothroyd's "TIA file format" description (www.er-c.org/cbb/info/
 * TIAformat/) and HyperSpy's fei.py reader. */
#include <dirent.h>
#include <errno.h>
#include <expat.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
#include "input/input.h"
#include "input/xml_guard.h"
#include "input/swap.h"

#define SER_BYTE_ORDER 0x4949u
#define SER_SERIES_ID 0x0197u
#define SER_VERSION_32 0x0210u /* and earlier: 4-byte offsets */
#define SER_VERSION_64 0x0220u /* 8-byte offsets */
#define SER_SPECTRA 0x4120u
#define SER_IMAGES 0x4122u
#define SER_TAG_TIME 0x4152u
#define SER_TAG_TIME_XY 0x4142u
#define SER_DIM_FIXED 28u      /* size, offset, delta, element, description length */
#define SER_ELEMENT_HEADER 50u /* two calibrations, data type, size x, size y */
#define SER_TEXT_MAX 256u      /* dimension descriptions and units kept as facts */
#define EMI_MAX_BYTES (64u << 20)
#define EMI_MAX_OBJECT (4u << 20)
#define EMI_MAX_SERIES_LISTED 32
#define XML_MAX_DEPTH 32
#define XML_MAX_PATH 1024
#define XML_MAX_VALUE 4096
#define XML_MAX_FACTS 2048
#define XML_MAX_FACT_BYTES (1u << 20)
#define EMI_PROVENANCE "TIA .emi ExperimentalDescription"
#define SER_PROVENANCE "TIA .ser dimension arrays"

typedef struct tia_state {
    int fd;             /* the .ser */
    uint64_t *offsets;  /* each valid element's offset */
    uint64_t frames;    /* valid elements */
    uint16_t data_type; /* the element's TIA data type code */
    uint32_t size_x, size_y;
    size_t item;
    uint64_t frame_bytes;
} tia_state;

/* --- bytes ------------------------------------------------------------------- */

static uint16_t le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p)
{
    return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

static double lef64(const uint8_t *p)
{
    const uint64_t bits = le64(p);
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

/* JSON has no infinity or NaN: those as text. */
static json_t *real_json(double d)
{
    return isfinite(d) ? json_real(d) : json_string(isnan(d) ? "nan" : d > 0 ? "inf" : "-inf");
}

/* Text from a file as printable ASCII (anything else '?'), at most `max`
 * bytes, so a fact is always valid JSON and never moves a terminal. */
static json_t *text_json(const char *s, size_t n, size_t max)
{
    n = n < max ? n : max;
    char *copy = malloc(n + 1);
    if (!copy)
        return NULL;
    for (size_t i = 0; i < n; i++)
        copy[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    copy[n] = '\0';
    json_t *out = json_string(copy);
    free(copy);
    return out;
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* Bytes [at, at + n) of the .ser, refused as truncated when they lie past
 * its end (`what` says what they are). */
static qem_status ser_bytes(int fd, uint64_t size, uint64_t at, void *out, size_t n,
                            const char *path, const char *what, qem_error *error)
{
    uint64_t end;
    if (qem_add_overflow_u64(at, n, &end) || end > size)
        return qem_fail(error, QEM_E_FILE_LENGTH,
                        "'%s' is %llu bytes, but its %s lies at bytes %llu to %llu: the file is "
                        "truncated or its header is corrupt",
                        path, (unsigned long long)size, what, (unsigned long long)at,
                        (unsigned long long)at + n);
    return qem_pread_full(fd, out, n, at, QEM_E_CHANGED, error);
}

/* --- element data types ---------------------------------------------------------- */

/* A TIA data type code (element header): how qem reads it, or why not. */
static qem_status element_type(acquisition *a, tia_state *s, const char *path, qem_error *error)
{
    static const char *const names[] = {"",        "uint8",     "uint16",    "uint32",
                                        "int8",    "int16",     "int32",     "float32",
                                        "float64", "complex64", "complex128"};
    a->sample_type = QEM_DTYPE_NONE;
    a->read_values = INPUT_VALUES_AS_STORED;
    switch (s->data_type) {
    case 1:
        a->sample_type = QEM_DTYPE_UINT8, s->item = 1;
        break;
    case 2:
        a->sample_type = QEM_DTYPE_UINT16, s->item = 2;
        break;
    case 3:
        a->sample_type = QEM_DTYPE_UINT32, s->item = 4;
        break;
    case 4:
        a->read_values = INPUT_VALUES_INT8, s->item = 1;
        break;
    case 5:
        a->read_values = INPUT_VALUES_INT16, s->item = 2;
        break;
    case 6:
        a->read_values = INPUT_VALUES_INT32, s->item = 4;
        break;
    case 7:
        a->sample_type = QEM_DTYPE_FLOAT32, s->item = 4;
        break;
    case 8:
        a->read_values = INPUT_VALUES_FLOAT64, s->item = 8;
        break;
    case 9:
    case 10:
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "'%s' holds %s samples (TIA data type %u); qem reads real counts only "
                        "(take their magnitude or real part with HyperSpy first)",
                        path, names[s->data_type], (unsigned)s->data_type);
    default:
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "'%s' holds samples of TIA data type %u, which qem does not read (it "
                        "reads 1 to 8: uint8, uint16, uint32, int8, int16, int32, float32, "
                        "float64)",
                        path, (unsigned)s->data_type);
    }
    qem_input_fact(a, "data_type", json_string(names[s->data_type]));
    return QEM_OK;
}

/* --- the .emi's ObjectInfo XML ------------------------------------------------------ */

/* What the walk over one <ObjectInfo> keeps: leaf texts by path below the
 * root ("AcquireInfo/CameraNamePath"), and the ExperimentalDescription's
 * <Data><Label/><Value/><Unit/></Data> entries as "Label (Unit)" -> Value. */
typedef struct emi_walk {
    xml_guard guard; /* first: the parser's user data */
    json_t *leaves;
    json_t *described;
    int depth;
    char path[XML_MAX_PATH + 1];
    size_t path_end[XML_MAX_DEPTH + 1];
    int has_children[XML_MAX_DEPTH + 1];
    int skip_depth; /* inside <TrueImageHeaderInfo> (escaped XML, not kept): its depth */
    char text[XML_MAX_VALUE + 1];
    size_t text_len;
    char label[XML_MAX_VALUE + 1], value[XML_MAX_VALUE + 1], unit[XML_MAX_VALUE + 1];
    size_t facts, fact_bytes;
    int truncated, too_deep, oom;
} emi_walk;

static void trim_text(const char *t, size_t n, size_t *a, size_t *b)
{
    *a = 0, *b = n;
    while (*a < *b && (t[*a] == ' ' || t[*a] == '\t' || t[*a] == '\r' || t[*a] == '\n'))
        (*a)++;
    while (*b > *a &&
           (t[*b - 1] == ' ' || t[*b - 1] == '\t' || t[*b - 1] == '\r' || t[*b - 1] == '\n'))
        (*b)--;
}

/* A fact's value: UTF-8 as it is when valid, else printable ASCII. */
static json_t *xml_value(const char *s, size_t n)
{
    json_t *v = json_stringn(s, n);
    return v ? v : text_json(s, n, XML_MAX_VALUE);
}

static void walk_add(emi_walk *w, json_t *to, const char *key, const char *value, size_t n)
{
    const size_t kn = strlen(key);
    if (w->facts >= XML_MAX_FACTS || w->fact_bytes + kn + n > XML_MAX_FACT_BYTES) {
        w->truncated = 1;
        return;
    }
    if (json_object_get(to, key))
        return; /* a repeated path: the first is kept */
    json_t *k = xml_value(key, kn);
    const char *kt = json_string_value(k);
    if (!kt || json_object_set_new(to, kt, xml_value(value, n)) != 0)
        w->oom = !kt ? w->oom : 1;
    json_decref(k);
    w->facts++;
    w->fact_bytes += kn + n;
}

static void XMLCALL emi_start(void *user, const XML_Char *name, const XML_Char **attrs)
{
    (void)attrs;
    emi_walk *w = user;
    if (w->depth >= XML_MAX_DEPTH) {
        w->too_deep = 1;
        XML_StopParser(w->guard.parser, XML_FALSE);
        return;
    }
    w->has_children[w->depth] = 1;
    const size_t at = w->path_end[w->depth], n = strlen(name);
    size_t end = at;
    if (w->depth >= 1) { /* the root (ObjectInfo) is left out of paths */
        const size_t sep = at ? 1 : 0;
        if (at + sep + n <= XML_MAX_PATH) {
            if (sep)
                w->path[at] = '/';
            memcpy(w->path + at + sep, name, n);
            end = at + sep + n;
        } else {
            w->truncated = 1;
        }
    }
    w->path[end] = '\0';
    w->depth++;
    w->path_end[w->depth] = end;
    w->has_children[w->depth] = 0;
    w->text_len = 0;
    if (!w->skip_depth && !strcmp(name, "TrueImageHeaderInfo"))
        w->skip_depth = w->depth;
    if (!strcmp(name, "Data"))
        w->label[0] = w->value[0] = w->unit[0] = '\0';
}

static void XMLCALL emi_end(void *user, const XML_Char *name)
{
    emi_walk *w = user;
    if (w->depth <= 0)
        return;
    const int d = w->depth;
    size_t a, b;
    trim_text(w->text, w->text_len, &a, &b);
    const int described = strstr(w->path, "ExperimentalDescription/") == w->path;
    if (described && !w->has_children[d]) {
        char *slot = !strcmp(name, "Label")   ? w->label
                     : !strcmp(name, "Value") ? w->value
                     : !strcmp(name, "Unit")  ? w->unit
                                              : NULL;
        if (slot) {
            memcpy(slot, w->text + a, b - a);
            slot[b - a] = '\0';
        }
    } else if (described && !strcmp(name, "Data") && w->label[0]) {
        char key[2 * XML_MAX_VALUE + 8];
        snprintf(key, sizeof key, w->unit[0] ? "%s (%s)" : "%s", w->label, w->unit);
        walk_add(w, w->described, key, w->value, strlen(w->value));
    } else if (!w->has_children[d] && d > 1 && !w->skip_depth) {
        walk_add(w, w->leaves, w->path, w->text + a, b - a);
    }
    if (w->skip_depth == d)
        w->skip_depth = 0;
    w->depth--;
    w->path[w->path_end[w->depth]] = '\0';
    w->text_len = 0;
}

static void XMLCALL emi_text(void *user, const XML_Char *s, int len)
{
    emi_walk *w = user;
    if (len <= 0 || w->skip_depth)
        return;
    size_t n = (size_t)len;
    if (n > XML_MAX_VALUE - w->text_len)
        n = XML_MAX_VALUE - w->text_len;
    memcpy(w->text + w->text_len, s, n);
    w->text_len += n;
}

/* What the documents of one .emi may record in all. */
typedef struct emi_budget {
    size_t facts, fact_bytes;
    int truncated;
} emi_budget;

/* Parses one <ObjectInfo>...</ObjectInfo> into `*leaves` and `*described`,
 * within what is left of `budget`. */
static qem_status parse_object_info(const char *xml, size_t size, const char *emi, json_t **leaves,
                                    json_t **described, emi_budget *budget, qem_error *error)
{
    emi_walk *w = calloc(1, sizeof *w);
    if (!w)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    w->facts = budget->facts;
    w->fact_bytes = budget->fact_bytes;
    w->leaves = json_object();
    w->described = json_object();
    w->guard.parser = XML_ParserCreate("UTF-8");
    qem_status st = QEM_OK;
    if (!w->leaves || !w->described || !w->guard.parser) {
        st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    } else {
        qem_xml_guard_install(&w->guard);
        XML_SetElementHandler(w->guard.parser, emi_start, emi_end);
        XML_SetCharacterDataHandler(w->guard.parser, emi_text);
        const enum XML_Status parsed = XML_Parse(w->guard.parser, xml, (int)size, XML_TRUE);
        if (w->oom)
            st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory parsing '%s'", emi);
        else if (w->guard.refused)
            st = qem_fail(error, QEM_E_LAYOUT,
                          "the <ObjectInfo> XML of '%s' declares a DOCTYPE or an entity; TIA "
                          "writes neither, and qem does not expand them",
                          emi);
        else if (w->too_deep)
            st = qem_fail(error, QEM_E_LIMIT,
                          "the <ObjectInfo> XML of '%s' nests elements more than %d deep", emi,
                          XML_MAX_DEPTH);
        else if (parsed != XML_STATUS_OK)
            st = qem_fail(error, QEM_E_LAYOUT,
                          "the <ObjectInfo> XML of '%s' is not well-formed (line %lu: %s)", emi,
                          (unsigned long)XML_GetCurrentLineNumber(w->guard.parser),
                          XML_ErrorString(XML_GetErrorCode(w->guard.parser)));
    }
    if (w->guard.parser)
        XML_ParserFree(w->guard.parser);
    if (st == QEM_OK) {
        *leaves = w->leaves;
        *described = w->described;
        budget->facts = w->facts;
        budget->fact_bytes = w->fact_bytes;
        budget->truncated |= w->truncated;
    } else {
        json_decref(w->leaves);
        json_decref(w->described);
    }
    free(w);
    return st;
}

/* A positive finite number, the whole text. */
static int parse_positive(const char *s, double *out)
{
    if (!s || !*s)
        return 0;
    char *end = NULL;
    errno = 0;
    const double v = strtod(s, &end);
    while (end && *end == ' ')
        end++;
    if (!end || end == s || *end || errno || !isfinite(v) || !(v > 0))
        return 0;
    *out = v;
    return 1;
}

static void add_quantity(json_t *quantities, const char *name, double value, const char *unit,
                         const char *provenance, const char *evidence)
{
    json_object_set_new(quantities, name,
                        json_pack("{s:f, s:s, s:s, s:s}", "value", value, "unit", unit,
                                  "provenance", provenance, "evidence", evidence));
}

/* --- the .emi beside a .ser --------------------------------------------------------- */

/* "dir/name_N.ser" -> "dir/name" and N (1 .. 99999); 0 when the name has
 * another form. */
static int series_stem(const char *ser, char **stem, unsigned *number)
{
    *stem = NULL;
    const size_t n = strlen(ser);
    const char *base = base_name(ser);
    if (n < 4 || (strcmp(ser + n - 4, ".ser") && strcmp(ser + n - 4, ".SER")))
        return 0;
    size_t digits = 0;
    while (n - 4 > digits && ser[n - 5 - digits] >= '0' && ser[n - 5 - digits] <= '9')
        digits++;
    const size_t underscore = n - 5 - digits;
    if (!digits || digits > 5 || n < 5 + digits || ser + underscore < base ||
        ser[underscore] != '_' || ser + underscore == base)
        return 0;
    unsigned v = 0;
    for (size_t i = underscore + 1; i < n - 4; i++)
        v = v * 10 + (unsigned)(ser[i] - '0');
    if (v == 0 || !(*stem = strndup(ser, underscore)))
        return 0;
    *number = v;
    return 1;
}

static qem_status check_companion(const char *owner, const char *name, const char *subject_fmt,
                                  const char *folder, const char *rule, const char *keep,
                                  char **member, qem_error *error)
{
    char subject[700];
    snprintf(subject, sizeof subject, subject_fmt, owner);
    const input_companion c = {
        .owner = owner, .subject = subject, .folder = folder, .rule = rule, .keep = keep};
    return qem_input_companion_path(&c, name, member, error);
}

static qem_status read_emi(const char *emi, uint8_t **out, size_t *size, qem_error *error)
{
    int fd = -1;
    struct stat sb;
    QEM_TRY(qem_open_input(emi, &fd, &sb, error));
    qem_status st = QEM_OK;
    uint8_t *bytes = NULL;
    if ((uint64_t)sb.st_size > EMI_MAX_BYTES)
        st = qem_fail(error, QEM_E_LIMIT,
                      "'%s' is %lld bytes; a TIA .emi holds its series' metadata in a few "
                      "hundred kilobytes (at most %u read)",
                      emi, (long long)sb.st_size, EMI_MAX_BYTES);
    else if (!(bytes = malloc((size_t)sb.st_size + 1)))
        st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    else
        st = qem_pread_full(fd, bytes, (size_t)sb.st_size, 0, QEM_E_CHANGED, error);
    close(fd);
    if (st == QEM_OK && (sb.st_size < 4 || memcmp(bytes, "JK\0\2", 4) != 0))
        st = qem_fail(error, QEM_E_LAYOUT,
                      "'%s', beside its series, is not a TIA .emi (it does not start with "
                      "the bytes 4A 4B 00 02)",
                      emi);
    if (st != QEM_OK) {
        free(bytes);
        return st;
    }
    *out = bytes;
    *size = (size_t)sb.st_size;
    return QEM_OK;
}

/* The next <ObjectInfo>...</ObjectInfo> at or after `*at` in the .emi's
 * bytes (`*length` bytes), `*at` moved past it; NULL when none is left. */
static const uint8_t *next_object_info(const uint8_t *bytes, size_t size, size_t *at,
                                       size_t *length)
{
    static const char open[] = "<ObjectInfo>", close_tag[] = "</ObjectInfo>";
    if (*at >= size)
        return NULL;
    const uint8_t *start = memmem(bytes + *at, size - *at, open, sizeof open - 1);
    if (!start)
        return NULL;
    const size_t from = (size_t)(start - bytes);
    const uint8_t *end = memmem(start, size - from, close_tag, sizeof close_tag - 1);
    if (!end)
        return NULL;
    *at = (size_t)(end - bytes) + sizeof close_tag - 1;
    *length = *at - from;
    return start;
}

/* The ExperimentalDescription values qem reports (and, with a meaning and
 * unit TIA states, takes as calibration): TIA does not say which
 * <ObjectInfo> document belongs to which series, so a value is kept only
 * when every document stating it agrees (the microscope's conditions are
 * the same for every signal of one acquisition). */
static const struct {
    const char *key, *fact, *quantity, *unit;
} emi_picks[] = {
    {"Microscope", "microscope", NULL, NULL},
    {"Mode", "mode", NULL, NULL},
    {"High tension (kV)", "high_tension_kV", "electron_source/accelerating_voltage", "kV"},
    {"Camera length (m)", "camera_length_m", "imaging_system/camera_length", "m"},
    {"Magnification (x)", "magnification", NULL, NULL},
};

static void emi_agreed(json_t *facts, json_t *documents, json_t *quantities)
{
    for (size_t k = 0; k < sizeof emi_picks / sizeof emi_picks[0]; k++) {
        json_t *agreed = NULL, *doc;
        int differs = 0;
        size_t i;
        json_array_foreach(documents, i, doc)
        {
            json_t *v =
                json_object_get(json_object_get(doc, "experimental_description"), emi_picks[k].key);
            if (!v)
                continue;
            if (agreed && !json_equal(agreed, v))
                differs = 1;
            agreed = agreed ? agreed : v;
        }
        if (!agreed)
            continue;
        if (differs) {
            json_object_set_new(facts, emi_picks[k].fact,
                                json_string("differs between the .emi's documents"));
            continue;
        }
        json_object_set(facts, emi_picks[k].fact, agreed);
        double v;
        if (emi_picks[k].quantity && parse_positive(json_string_value(agreed), &v))
            add_quantity(quantities, emi_picks[k].quantity, v, emi_picks[k].unit, EMI_PROVENANCE,
                         emi_picks[k].key);
    }
}

/* Reads the .emi `emi` (already placed) of series `number`: every
 * <ObjectInfo> document as facts, and the values they agree on. */
static qem_status describe_emi_facts(acquisition *a, const char *emi, unsigned number,
                                     json_t *quantities, qem_error *error)
{
    uint8_t *bytes = NULL;
    size_t size = 0;
    QEM_TRY(read_emi(emi, &bytes, &size, error));
    qem_status st = QEM_OK;
    json_t *facts = json_object(), *documents = json_array();
    emi_budget budget = {0, 0, 0};
    size_t at = 0, length = 0;
    for (const uint8_t *xml; st == QEM_OK && (xml = next_object_info(bytes, size, &at, &length));) {
        if (length > EMI_MAX_OBJECT) {
            st = qem_fail(error, QEM_E_LIMIT,
                          "an <ObjectInfo> XML document of '%s' is %zu bytes; TIA writes a few "
                          "kilobytes (at most %u read)",
                          emi, length, EMI_MAX_OBJECT);
            break;
        }
        json_t *leaves = NULL, *described = NULL;
        st = parse_object_info((const char *)xml, length, emi, &leaves, &described, &budget, error);
        if (st == QEM_OK)
            json_array_append_new(documents, json_pack("{s:o, s:o}", "experimental_description",
                                                       described, "values", leaves));
    }
    free(bytes);
    if (st != QEM_OK) {
        json_decref(facts);
        json_decref(documents);
        return st;
    }
    emi_agreed(facts, documents, quantities);
    json_t *date = NULL, *doc;
    size_t i;
    json_array_foreach(documents, i, doc)
    {
        if (!date)
            date = json_object_get(json_object_get(doc, "values"), "AcquireDate");
    }
    if (date)
        json_object_set(facts, "first_acquire_date", date);
    json_object_set_new(facts, "series", json_integer(number));
    json_object_set_new(facts, "documents", json_integer((json_int_t)json_array_size(documents)));
    json_object_set_new(facts, "document_of_the_series",
                        json_string("not stated: TIA does not link an <ObjectInfo> document to "
                                    "its .ser (HyperSpy takes document N for name_N.ser), so "
                                    "all are recorded and only values they agree on are "
                                    "reported above"));
    json_object_set_new(facts, "object_info", documents);
    if (budget.truncated)
        json_object_set_new(facts, "_truncated",
                            json_sprintf("only the first values of the documents are recorded "
                                         "(at most %d, %u bytes)",
                                         XML_MAX_FACTS, XML_MAX_FACT_BYTES));
    qem_input_fact(a, "emi", facts);
    return QEM_OK;
}

/* The .emi beside `ser` ("name_N.ser" -> "name.emi", or ".EMI"), when
 * there is one: a companion (a symlink leading out of the folder is
 * refused, never read), the acquisition's second member. */
static qem_status describe_emi_of(acquisition *a, const char *ser, json_t *quantities,
                                  qem_error *error)
{
    char *stem = NULL;
    unsigned number = 0;
    if (!series_stem(ser, &stem, &number)) {
        qem_input_fact(a, "emi_file",
                       json_string("none: the .ser is not named <name>_<N>.ser, so it has no "
                                   ".emi qem can find (the .ser's header was read alone)"));
        return QEM_OK;
    }
    const size_t n = strlen(stem);
    char *emi = malloc(n + 5);
    if (!emi) {
        free(stem);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    struct stat ls;
    memcpy(emi, stem, n);
    memcpy(emi + n, ".emi", 5);
    int have = lstat(emi, &ls) == 0;
    if (!have) {
        memcpy(emi + n, ".EMI", 5);
        have = lstat(emi, &ls) == 0;
    }
    free(stem);
    qem_status st = QEM_OK;
    if (!have) {
        memcpy(emi + n, ".emi", 5);
        json_t *why = json_sprintf("none: '%s' is not beside the .ser (the .ser's header was "
                                   "read alone)",
                                   base_name(emi));
        qem_input_fact(a, "emi_file", why);
        free(emi);
        return QEM_OK;
    }
    char *member = NULL;
    st = check_companion(ser, base_name(emi), "'%s' has the .emi", "the .ser's folder",
                         "an .emi is read only when it lies beside its .ser (remove the link, "
                         "or copy the .emi there)",
                         "remove the broken link, or keep the .ser and its .emi together", &member,
                         error);
    if (st == QEM_OK)
        st = qem_input_add_member(a, member, 0, error);
    if (st == QEM_OK)
        st = describe_emi_facts(a, member, number, quantities, error);
    if (st == QEM_OK)
        qem_input_fact(a, "emi_file", json_string(base_name(emi)));
    free(member);
    free(emi);
    return st;
}

/* --- the .ser ------------------------------------------------------------------------ */

typedef struct ser_dimension {
    uint32_t size;
    double offset, delta;
    uint32_t element;
    char description[SER_TEXT_MAX + 1], units[SER_TEXT_MAX + 1];
} ser_dimension;

/* A text of `length` bytes at `*at` (length word before it already read):
 * its first SER_TEXT_MAX bytes into `out`, `*at` moved past it. */
static qem_status ser_text(int fd, uint64_t size, uint64_t *at, uint32_t length, char *out,
                           const char *path, const char *what, qem_error *error)
{
    if (*at > size || (uint64_t)length > size - *at)
        return qem_fail(error, QEM_E_FILE_LENGTH,
                        "'%s' is %llu bytes, but the %u-byte text of its %s at byte %llu runs "
                        "past its end: the file is truncated or its header is corrupt",
                        path, (unsigned long long)size, (unsigned)length, what,
                        (unsigned long long)*at);
    const size_t keep = length < SER_TEXT_MAX ? length : SER_TEXT_MAX;
    QEM_TRY(ser_bytes(fd, size, *at, out, keep, path, what, error));
    out[keep] = '\0';
    *at += length;
    return QEM_OK;
}

static qem_status read_dimensions(int fd, uint64_t size, uint64_t at, uint32_t count,
                                  ser_dimension *dims, uint64_t *end, const char *path,
                                  qem_error *error)
{
    for (uint32_t d = 0; d < count; d++) {
        uint8_t fixed[SER_DIM_FIXED], word[4];
        char what[64];
        snprintf(what, sizeof what, "dimension array %u", (unsigned)d + 1);
        QEM_TRY(ser_bytes(fd, size, at, fixed, sizeof fixed, path, what, error));
        at += sizeof fixed;
        dims[d].size = le32(fixed);
        dims[d].offset = lef64(fixed + 4);
        dims[d].delta = lef64(fixed + 12);
        dims[d].element = le32(fixed + 20);
        QEM_TRY(ser_text(fd, size, &at, le32(fixed + 24), dims[d].description, path, what, error));
        QEM_TRY(ser_bytes(fd, size, at, word, 4, path, what, error));
        at += 4;
        QEM_TRY(ser_text(fd, size, &at, le32(word), dims[d].units, path, what, error));
        if (dims[d].size == 0)
            return qem_fail(error, QEM_E_LAYOUT, "dimension %u of '%s' has size 0", (unsigned)d + 1,
                            path);
    }
    *end = at;
    return QEM_OK;
}

static json_t *dimension_json(const ser_dimension *d)
{
    return json_pack("{s:I, s:o, s:o, s:I, s:o, s:o}", "size", (json_int_t)d->size,
                     "calibration_offset", real_json(d->offset), "calibration_delta",
                     real_json(d->delta), "calibration_element", (json_int_t)d->element,
                     "description", text_json(d->description, strlen(d->description), SER_TEXT_MAX),
                     "units", text_json(d->units, strlen(d->units), SER_TEXT_MAX));
}

/* An element's header: its detector calibration, data type and size. */
typedef struct element_header {
    double offset_x, delta_x, offset_y, delta_y;
    uint32_t element_x, element_y;
    uint16_t data_type;
    uint32_t size_x, size_y;
} element_header;

static void parse_element(const uint8_t *h, element_header *e)
{
    e->offset_x = lef64(h);
    e->delta_x = lef64(h + 8);
    e->element_x = le32(h + 16);
    e->offset_y = lef64(h + 20);
    e->delta_y = lef64(h + 28);
    e->element_y = le32(h + 36);
    e->data_type = le16(h + 40);
    e->size_x = le32(h + 42);
    e->size_y = le32(h + 46);
}

static qem_status element_disagrees(const tia_state *s, const element_header *e, uint64_t k,
                                    const char *path, qem_status status, qem_error *error)
{
    return qem_fail(error, status,
                    "element %llu of '%s' holds %u x %u samples of TIA data type %u, but the "
                    "first element %u x %u of type %u; every element of a series must have "
                    "the same shape and type%s",
                    (unsigned long long)k + 1, path, (unsigned)e->size_x, (unsigned)e->size_y,
                    (unsigned)e->data_type, (unsigned)s->size_x, (unsigned)s->size_y,
                    (unsigned)s->data_type,
                    status == QEM_E_CHANGED ? " (the file changed since it was described)" : "");
}

/* Where the scan order is known from the first two elements' stage
 * positions (tags of time and position): 1 when X moves first (the
 * dimension arrays' first dimension is the fastest, the columns), -1 when
 * Y moves first, 0 when the tags do not say. Tags are not needed for the
 * frames, so a tag outside the file or of another type than the header's
 * (ncempy reports files with bad tag offsets) only leaves the order
 * unknown; `*first` is the first tag's facts, or why the tags were not
 * used. */
static qem_status position_order(int fd, uint64_t size, const tia_state *s, uint64_t tags,
                                 unsigned osize, uint32_t tag_type, int *order, json_t **first,
                                 qem_error *error)
{
    *order = 0;
    *first = NULL;
    if (tag_type != SER_TAG_TIME && tag_type != SER_TAG_TIME_XY) {
        *first = json_string("not read: the header states an unknown tag type");
        return QEM_OK;
    }
    double x[2] = {0, 0}, y[2] = {0, 0};
    const uint64_t want = s->frames < 2 ? 1 : 2;
    const size_t n = tag_type == SER_TAG_TIME_XY ? 24 : 8;
    for (uint64_t k = 0; k < want; k++) {
        uint8_t word[8], tag[24];
        const uint64_t slot = tags + k * osize;
        if (slot > size || size - slot < osize) {
            *first = json_string("not read: the tag offset array lies past the end of the file");
            return QEM_OK;
        }
        QEM_TRY(qem_pread_full(fd, word, osize, slot, QEM_E_CHANGED, error));
        const uint64_t at = osize == 4 ? le32(word) : le64(word);
        if (at > size || size - at < n) {
            json_decref(*first);
            *first = json_sprintf("not read: the tag of element %llu lies past the end of the "
                                  "file",
                                  (unsigned long long)k + 1);
            return QEM_OK;
        }
        QEM_TRY(qem_pread_full(fd, tag, n, at, QEM_E_CHANGED, error));
        if (le16(tag) != tag_type) {
            json_decref(*first);
            *first = json_sprintf("not read: the tag of element %llu has the type 0x%04x, the "
                                  "header 0x%04x",
                                  (unsigned long long)k + 1, (unsigned)le16(tag),
                                  (unsigned)tag_type);
            return QEM_OK;
        }
        if (k == 0)
            *first = json_pack("{s:I}", "time", (json_int_t)le32(tag + 4));
        if (tag_type == SER_TAG_TIME_XY) {
            x[k] = lef64(tag + 8);
            y[k] = lef64(tag + 16);
            if (k == 0 && *first) {
                json_object_set_new(*first, "position_x_m", real_json(x[0]));
                json_object_set_new(*first, "position_y_m", real_json(y[0]));
            }
        }
    }
    if (tag_type == SER_TAG_TIME_XY && want == 2) {
        if (y[0] == y[1] && x[0] != x[1])
            *order = 1;
        else if (x[0] == x[1] && y[0] != y[1])
            *order = -1;
    }
    return QEM_OK;
}

static qem_status describe_ser(acquisition *a, tia_state *s, const char *path,
                               const input_options *o, qem_error *error)
{
    uint64_t size = 0;
    QEM_TRY(qem_input_open_master(a, path, "a TIA file", o, &s->fd, &size, error));

    /* The header: 30 bytes (version 0x0210) or 34 (0x0220). */
    uint8_t h[34];
    QEM_TRY(ser_bytes(s->fd, size, 0, h, 30, path, "header", error));
    const unsigned version = le16(h + 4);
    if (le16(h) != SER_BYTE_ORDER || le16(h + 2) != SER_SERIES_ID)
        return qem_fail(error, QEM_E_LAYOUT, "'%s' is not a TIA series (.ser) file", path);
    if (version > SER_VERSION_32 && version != SER_VERSION_64)
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "'%s' is a TIA series of version 0x%04x; qem reads versions 0x0210 "
                        "and earlier (32-bit offsets) and 0x0220 (64-bit offsets)",
                        path, version);
    const unsigned osize = version == SER_VERSION_64 ? 8 : 4;
    if (osize == 8)
        QEM_TRY(ser_bytes(s->fd, size, 0, h, 34, path, "header", error));
    const uint32_t data_type_id = le32(h + 6), tag_type = le32(h + 10);
    const uint32_t total = le32(h + 14), valid = le32(h + 18);
    const uint64_t offsets_at = osize == 8 ? le64(h + 22) : le32(h + 22);
    const uint32_t ndim = le32(h + 22 + osize);
    if (data_type_id == SER_SPECTRA)
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "'%s' is a TIA series of 1D spectra (data type 0x4120); qem reads "
                        "series of 2D images (diffraction patterns, 0x4122)",
                        path);
    if (data_type_id != SER_IMAGES)
        return qem_fail(error, QEM_E_LAYOUT,
                        "'%s' states the element data type 0x%04x; a TIA series holds 1D "
                        "spectra (0x4120) or 2D images (0x4122)",
                        path, (unsigned)data_type_id);
    if (valid == 0)
        return qem_fail(error, QEM_E_LAYOUT,
                        "'%s' holds no valid element (the acquisition recorded nothing)", path);
    if (valid > total)
        return qem_fail(error, QEM_E_LAYOUT,
                        "'%s' states %u valid elements of %u in all; the valid ones cannot "
                        "outnumber them",
                        path, (unsigned)valid, (unsigned)total);

    /* The dimension arrays: each at least 36 bytes, so their count is
     * bounded by the file before any is read. */
    const uint64_t dims_at = 26 + osize;
    if ((uint64_t)ndim > (size - (size < dims_at ? size : dims_at)) / (SER_DIM_FIXED + 8))
        return qem_fail(error, QEM_E_FILE_LENGTH,
                        "'%s' states %u dimension arrays, more than its %llu bytes hold", path,
                        (unsigned)ndim, (unsigned long long)size);
    ser_dimension *dims = calloc(ndim ? ndim : 1, sizeof *dims);
    if (!dims)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    uint64_t header_end = dims_at;
    qem_status st = read_dimensions(s->fd, size, dims_at, ndim, dims, &header_end, path, error);
    uint64_t product = 1;
    for (uint32_t d = 0; st == QEM_OK && d < ndim; d++)
        if (qem_mul_overflow_u64(product, dims[d].size, &product))
            product = UINT64_MAX;
    if (st == QEM_OK && ndim && product != total)
        st = qem_fail(error, QEM_E_LAYOUT,
                      "the dimension arrays of '%s' hold %llu elements, but its header states "
                      "%u",
                      path, (unsigned long long)product, (unsigned)total);
    json_t *dim_facts = json_array();
    for (uint32_t d = 0; st == QEM_OK && d < ndim; d++)
        json_array_append_new(dim_facts, dimension_json(&dims[d]));
    qem_input_fact(a, "dimensions", dim_facts);

    /* The data offset array: one offset per element, the valid ones first;
     * bounded by the file, so never larger than it. */
    uint64_t array_bytes = (uint64_t)valid * osize, array_end;
    if (st == QEM_OK &&
        (qem_add_overflow_u64(offsets_at, array_bytes, &array_end) || array_end > size))
        st = qem_fail(error, QEM_E_FILE_LENGTH,
                      "'%s' is %llu bytes, but its offset array of %u elements lies at byte "
                      "%llu: the file is truncated or its header is corrupt",
                      path, (unsigned long long)size, (unsigned)valid,
                      (unsigned long long)offsets_at);
    uint8_t *raw = NULL;
    if (st == QEM_OK && (!(raw = malloc((size_t)array_bytes)) ||
                         !(s->offsets = malloc((size_t)valid * sizeof *s->offsets))))
        st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    if (st == QEM_OK)
        st = qem_pread_full(s->fd, raw, (size_t)array_bytes, offsets_at, QEM_E_CHANGED, error);
    for (uint32_t k = 0; st == QEM_OK && k < valid; k++)
        s->offsets[k] = osize == 8 ? le64(raw + 8 * (size_t)k) : le32(raw + 4 * (size_t)k);
    free(raw);
    s->frames = valid;

    /* The first element states the shape and type every element must have. */
    uint8_t eh[SER_ELEMENT_HEADER];
    element_header first;
    if (st == QEM_OK && s->offsets[0] < header_end)
        st = qem_fail(error, QEM_E_LAYOUT,
                      "the first element of '%s' starts at byte %llu, inside the header "
                      "(which ends at %llu)",
                      path, (unsigned long long)s->offsets[0], (unsigned long long)header_end);
    if (st == QEM_OK)
        st = ser_bytes(s->fd, size, s->offsets[0], eh, sizeof eh, path, "first element", error);
    if (st == QEM_OK) {
        parse_element(eh, &first);
        s->data_type = first.data_type;
        s->size_x = first.size_x;
        s->size_y = first.size_y;
        st = element_type(a, s, path, error);
    }
    uint64_t pixels = 0, element_bytes = 0;
    if (st == QEM_OK && (first.size_x == 0 || first.size_y == 0))
        st = qem_fail(error, QEM_E_LAYOUT, "the elements of '%s' are %u x %u images", path,
                      (unsigned)first.size_x, (unsigned)first.size_y);
    if (st == QEM_OK && (qem_mul_overflow_u64(first.size_x, first.size_y, &pixels) ||
                         qem_mul_overflow_u64(pixels, s->item, &s->frame_bytes) ||
                         qem_add_overflow_u64(s->frame_bytes, SER_ELEMENT_HEADER, &element_bytes)))
        st = qem_fail(error, QEM_E_LIMIT, "the elements of '%s' are too large", path);
    /* Every valid element: inside the file, after the one before (no two
     * overlap, so the reads never exceed the file), and of the first's
     * shape and type. */
    for (uint64_t k = 0; st == QEM_OK && k < valid; k++) {
        uint64_t end;
        const uint64_t at = s->offsets[k];
        if (k && (at < s->offsets[k - 1] || at - s->offsets[k - 1] < element_bytes))
            st = qem_fail(error, QEM_E_LAYOUT,
                          "element %llu of '%s' starts at byte %llu, inside element %llu (at "
                          "%llu, %llu bytes); elements follow one another",
                          (unsigned long long)k + 1, path, (unsigned long long)at,
                          (unsigned long long)k, (unsigned long long)s->offsets[k - 1],
                          (unsigned long long)element_bytes);
        else if (qem_add_overflow_u64(at, element_bytes, &end) || end > size)
            st = qem_fail(error, QEM_E_FILE_LENGTH,
                          "'%s' is %llu bytes, but its element %llu (%u x %u samples) lies at "
                          "bytes %llu to %llu: the file is truncated",
                          path, (unsigned long long)size, (unsigned long long)k + 1,
                          (unsigned)first.size_x, (unsigned)first.size_y, (unsigned long long)at,
                          (unsigned long long)(at > UINT64_MAX - element_bytes
                                                   ? UINT64_MAX
                                                   : at + element_bytes));
        element_header e;
        if (st == QEM_OK && k) {
            st = qem_pread_full(s->fd, eh, sizeof eh, at, QEM_E_CHANGED, error);
            parse_element(eh, &e);
            if (st == QEM_OK && (e.data_type != first.data_type || e.size_x != first.size_x ||
                                 e.size_y != first.size_y))
                st = element_disagrees(s, &e, k, path, QEM_E_LAYOUT, error);
        }
    }

    /* The scan: two dimensions state it when the order of the elements is
     * known (X first by the stage positions, or a square scan); the
     * interrupted series, a line or a series of one dimension need the
     * caller's. */
    int order = 0;
    json_t *first_tag = NULL;
    const uint64_t tags_at = offsets_at + (uint64_t)total * osize;
    if (st == QEM_OK)
        st = position_order(s->fd, size, s, tags_at, osize, tag_type, &order, &first_tag, error);
    uint64_t file_shape[2] = {0, 0}, scan[2];
    int have_file = 0;
    const char *scan_from = "not stated: give --scan-shape";
    if (st == QEM_OK && valid < total)
        scan_from = "not stated: the acquisition was interrupted (fewer valid elements than "
                    "the dimension arrays hold); give --scan-shape for the valid ones";
    else if (st == QEM_OK && ndim == 2 &&
             (order == 1 || (order == 0 && dims[0].size == dims[1].size))) {
        file_shape[0] = dims[1].size;
        file_shape[1] = dims[0].size;
        have_file = 1;
        scan_from = "the dimension arrays: dimension 2 the rows, dimension 1 the columns "
                    "(the fastest)";
    } else if (st == QEM_OK && ndim == 2) {
        scan_from = order == -1 ? "not stated: the stage positions show the scan moving down "
                                  "columns first; give --scan-shape"
                                : "not stated: the tags do not show which dimension is the "
                                  "fastest; give --scan-shape";
    } else if (st == QEM_OK && ndim == 1) {
        scan_from = "not stated: one dimension (a stack or a line); give --scan-shape";
    }
    if (st == QEM_OK)
        st = qem_input_scan_shape(o, have_file, file_shape, "the dimension arrays", valid, path,
                                  scan, error);
    json_t *quantities = json_object();
    /* The scan step when the dimension arrays give it in meters and which
     * is the row is known. */
    if (st == QEM_OK && have_file && order == 1 && !strcmp(dims[0].units, "meters") &&
        !strcmp(dims[1].units, "meters") && isfinite(dims[0].delta) && isfinite(dims[1].delta) &&
        dims[0].delta != 0 && dims[1].delta != 0 && !o->scan_shape[0]) {
        add_quantity(quantities, "scan_sampling_column", fabs(dims[0].delta), "m", SER_PROVENANCE,
                     "dimension 1 calibration delta (meters)");
        add_quantity(quantities, "scan_sampling_row", fabs(dims[1].delta), "m", SER_PROVENANCE,
                     "dimension 2 calibration delta (meters)");
    }
    free(dims);
    if (st == QEM_OK) {
        qem_input_fact(a, "series_version", json_sprintf("0x%04x", version));
        qem_input_fact(a, "offsets", json_string(osize == 8 ? "64-bit" : "32-bit"));
        qem_input_fact(a, "tag_type",
                       json_string(tag_type == SER_TAG_TIME_XY ? "time and position"
                                   : tag_type == SER_TAG_TIME  ? "time"
                                                               : "unknown"));
        qem_input_fact(a, "total_elements", json_integer((json_int_t)total));
        qem_input_fact(a, "valid_elements", json_integer((json_int_t)valid));
        qem_input_fact(a, "scan_shape_from", json_string(scan_from));
        if (first_tag)
            qem_input_fact(a, "first_tag", json_incref(first_tag));
        qem_input_fact(
            a, "detector_calibration",
            json_pack("{s:o, s:o, s:I, s:o, s:o, s:I, s:s}", "offset_x", real_json(first.offset_x),
                      "delta_x", real_json(first.delta_x), "element_x", (json_int_t)first.element_x,
                      "offset_y", real_json(first.offset_y), "delta_y", real_json(first.delta_y),
                      "element_y", (json_int_t)first.element_y, "units",
                      "not stated by the file (meters in real space, 1/meters in diffraction)"));
        qem_input_fact(a, "row_order",
                       json_string("as stored in the file (HyperSpy returns each frame "
                                   "flipped vertically)"));
    }
    json_decref(first_tag);
    if (st == QEM_OK)
        st = describe_emi_of(a, path, quantities, error);
    if (st == QEM_OK && json_object_size(quantities))
        a->calibration = json_pack("{s:O}", "quantities", quantities);
    json_decref(quantities);
    QEM_TRY(st);
    a->shape[0] = scan[0];
    a->shape[1] = scan[1];
    a->shape[2] = s->size_y;
    a->shape[3] = s->size_x;
    return qem_input_implicit_mask(a, error);
}

/* --- opening an .emi ------------------------------------------------------------------ */

static int by_name(const void *x, const void *y)
{
    return strcmp(*(char *const *)x, *(char *const *)y);
}

/* The series beside the .emi "dir/name.emi": "name_N.ser" (or .SER). One
 * is read; several are refused, named, for the caller to choose. */
static qem_status describe_emi(acquisition *a, tia_state *s, const char *path,
                               const input_options *o, qem_error *error)
{
    const char *base = base_name(path);
    const char *dot = strrchr(base, '.');
    const size_t stem_len = dot ? (size_t)(dot - base) : strlen(base);
    char *dir_path = qem_path_dirname(path);
    DIR *dir = dir_path ? opendir(dir_path) : NULL;
    if (!dir) {
        const int e = errno;
        free(dir_path);
        return qem_fail(error, QEM_E_IO, "cannot list the folder of '%s': %s", path, strerror(e));
    }
    char *names[EMI_MAX_SERIES_LISTED];
    size_t count = 0, more = 0;
    for (struct dirent *d; (d = readdir(dir));) {
        const char *n = d->d_name;
        const size_t len = strlen(n);
        if (len < stem_len + 6 || memcmp(n, base, stem_len) || n[stem_len] != '_' ||
            (strcmp(n + len - 4, ".ser") && strcmp(n + len - 4, ".SER")))
            continue;
        size_t digits = 0;
        while (stem_len + 1 + digits < len - 4 && n[stem_len + 1 + digits] >= '0' &&
               n[stem_len + 1 + digits] <= '9')
            digits++;
        if (!digits || digits > 5 || stem_len + 1 + digits != len - 4)
            continue;
        if (count < EMI_MAX_SERIES_LISTED && (names[count] = strdup(n)))
            count++;
        else
            more++;
    }
    closedir(dir);
    qsort(names, count, sizeof names[0], by_name);
    qem_status st = QEM_OK;
    if (count == 0 && !more) {
        st = qem_fail(error, QEM_E_IO,
                      "'%s' is a TIA .emi, which holds metadata only; its series (%.*s_1.ser, "
                      "...) are not beside it",
                      path, (int)stem_len, base);
    } else if (count + more > 1) {
        char list[2048] = "";
        size_t used = 0;
        for (size_t k = 0; k < count && used < sizeof list; k++)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s'%s'", k ? ", " : "",
                                     names[k]);
        if (more && used < sizeof list)
            snprintf(list + used, sizeof list - used, " and %zu more", more);
        st = qem_fail(error, QEM_E_UNSUPPORTED,
                      "'%s' is a TIA .emi with %zu series beside it (%s); each .ser is a "
                      "signal of its own: open the .ser to read",
                      path, count + more, list);
    } else {
        char *ser = NULL;
        st = check_companion(path, names[0], "'%s' has the series", "the .emi's folder",
                             "a series is read only when it lies beside its .emi",
                             "keep the .emi and its series together", &ser, error);
        if (st == QEM_OK)
            st = describe_ser(a, s, ser, o, error);
        if (st == QEM_OK)
            qem_input_fact(a, "opened", json_string("the .emi, whose only series this is"));
        free(ser);
    }
    for (size_t k = 0; k < count; k++)
        free(names[k]);
    free(dir_path);
    return st;
}

/* --- the family -------------------------------------------------------------------------- */

static int is_ser(const uint8_t *head, size_t n)
{
    return n >= 4 && head[0] == 0x49 && head[1] == 0x49 && head[2] == 0x97 && head[3] == 0x01;
}

static int tia_recognises(const uint8_t *head, size_t n)
{
    return is_ser(head, n) || (n >= 4 && memcmp(head, "JK\0\2", 4) == 0);
}

static qem_status tia_describe(acquisition *a, const char *path, const uint8_t *head, size_t n,
                               const input_options *o, qem_error *error)
{
    if (o->dataset) /* before an .emi looks for its series */
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "'%s' is a TIA file; --dataset only applies to HDF5 files", path);
    tia_state *s = calloc(1, sizeof *s);
    if (!s)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    s->fd = -1;
    a->impl = s;
    return is_ser(head, n) ? describe_ser(a, s, path, o, error)
                           : describe_emi(a, s, path, o, error);
}

static qem_status tia_read(acquisition *a, uint64_t first, uint64_t count, void *out,
                           qem_error *error)
{
    tia_state *s = a->impl;
    input_member *m = &a->members[0];
    uint8_t eh[SER_ELEMENT_HEADER];
    for (uint64_t k = 0; k < count; k++) {
        const uint64_t at = s->offsets[first + k];
        uint8_t *dst = (uint8_t *)out + k * s->frame_bytes;
        QEM_TRY(qem_pread_full(s->fd, eh, sizeof eh, at, QEM_E_CHANGED, error));
        qem_input_member_read(m, s->fd, at, eh, sizeof eh);
        element_header e;
        parse_element(eh, &e);
        if (e.data_type != s->data_type || e.size_x != s->size_x || e.size_y != s->size_y)
            return element_disagrees(s, &e, first + k, m->path, QEM_E_CHANGED, error);
        QEM_TRY(qem_pread_full(s->fd, dst, (size_t)s->frame_bytes, at + SER_ELEMENT_HEADER,
                               QEM_E_CHANGED, error));
        qem_input_member_read(m, s->fd, at + SER_ELEMENT_HEADER, dst, (size_t)s->frame_bytes);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        input_swap(dst, (size_t)(s->frame_bytes / s->item), s->item);
#endif
    }
    return QEM_OK;
}

static void tia_release(acquisition *a)
{
    tia_state *s = a->impl;
    if (s) {
        if (s->fd >= 0)
            close(s->fd);
        free(s->offsets);
    }
    free(s);
    a->impl = NULL;
}

const input_family qem_input_family_tia = {
    "tia", tia_recognises, tia_describe, tia_read, tia_release, 1, NULL};
