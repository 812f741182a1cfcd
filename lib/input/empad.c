/* EMPAD acquisitions: an XML document (parsed with expat) naming, in
 * <raw_file filename="..."/>, the raw file beside it. The raw file holds
 * float32 little-endian frames of 130 rows x 128 columns: the detector's
 * 128 rows, then 2 rows of frame metadata, which are dropped. The scan
 * shape is <pix_y> x <pix_x> when the XML states it; the microscope
 * quantities whose meaning is certain become calibration, everything else
 * in the XML a flattened fact. */
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

#define EMPAD_COLUMNS 128u
#define EMPAD_ROWS_STORED 130u
#define EMPAD_ROWS 128u
#define EMPAD_FRAME_BYTES ((uint64_t)EMPAD_ROWS_STORED * EMPAD_COLUMNS * 4)
#define EMPAD_KEPT_BYTES ((size_t)EMPAD_ROWS * EMPAD_COLUMNS * 4)
#define XML_MAX_BYTES (16u << 20)
#define XML_MAX_DEPTH 64
#define XML_MAX_FACTS 4096
#define XML_MAX_VALUE 4096
#define XML_MAX_FACT_BYTES (1u << 20)
#define XML_MAX_KEY 4096
#define XML_PROVENANCE "EMPAD acquisition XML"

typedef struct empad_state {
    int fd; /* the raw file */
} empad_state;

/* --- the XML ------------------------------------------------------------------ */

/* The values the reader itself uses (raw file, scan shape, calibration):
 * kept whatever the caps on recorded facts, so that an XML with many
 * values before them is read as it says. */
static const char *const used_keys[] = {
    "raw_file@filename",
    "raw_file[1]@filename",
    "pix_x",
    "pix_y",
    "iom_measurements/source.get_voltage",
    "iom_measurements/optics.get_cameralength",
    "iom_measurements/calibrated_pixelsize",
    "iom_measurements/calibrated_diffraction_angle",
};

/* What the parse collects: the flattened facts ("a/b[1]/c", "a/b@attr";
 * the root's own name left out), and the values the reader uses. The
 * open elements' path lives in one buffer (element d's is its first
 * path_end[d] bytes): a child appends only its own name and an attribute
 * key is built only when it is recorded, so parsing does work linear in
 * the document, however long its names or many its attributes. */
typedef struct xml_walk {
    xml_guard guard; /* first: the parser's user data */
    json_t *facts;
    json_t *used;      /* used_keys found: key -> value */
    int truncated;     /* a fact left out: XML_MAX_FACTS, XML_MAX_FACT_BYTES or XML_MAX_KEY */
    size_t fact_bytes;
    int too_deep;
    int depth;         /* open elements, the root being 1 */
    char *path;        /* the innermost open element's path, NUL-terminated */
    size_t path_cap;
    size_t path_end[XML_MAX_DEPTH + 1];  /* path length of each open element (root: 0) */
    json_t *children[XML_MAX_DEPTH + 1]; /* child name -> how many so far */
    int has_children[XML_MAX_DEPTH + 1];
    char *text;        /* character data of the innermost element */
    size_t text_len, text_cap;
    char *root;
    int oom;
    uint64_t work;     /* bytes copied into paths and facts */
} xml_walk;

/* Whether the key `a` + `sep` + `b` is one of used_keys, compared in
 * place (no copy). */
static const char *used_key(const char *a, size_t na, char sep, const char *b, size_t nb)
{
    for (size_t k = 0; k < sizeof used_keys / sizeof used_keys[0]; k++) {
        const char *u = used_keys[k];
        const size_t nu = strlen(u);
        if (nu == na + (sep != 0) + nb && !memcmp(u, a, na) && (!sep || u[na] == sep) &&
            (!nb || !memcmp(u + na + 1, b, nb)))
            return u;
    }
    return NULL;
}

/* json string of at most XML_MAX_VALUE bytes of `value`, cut before a
 * character rather than inside one. */
static json_t *value_json(const char *value, size_t n)
{
    if (n > XML_MAX_VALUE) {
        n = XML_MAX_VALUE;
        while (n && ((unsigned char)value[n] & 0xC0) == 0x80)
            n--;
    }
    /* A value cut short may end inside a character: drop its bytes. */
    json_t *v = NULL;
    for (size_t cut = 0; !v && cut < 4 && cut <= n; cut++)
        v = json_stringn(value, n - cut);
    return v ? v : json_string("");
}

/* Records the fact `a` + `sep` + `b` (sep 0: the key is `a` alone) =
 * `value`, unless a cap is reached; a used key is kept either way. */
static void add_fact(xml_walk *w, const char *a, size_t na, char sep, const char *b,
                     const char *value, size_t n)
{
    const size_t nb = sep ? strlen(b) : 0, key_len = na + (sep != 0) + nb;
    const size_t kept = n < XML_MAX_VALUE ? n : XML_MAX_VALUE;
    const char *used = used_key(a, na, sep, b, nb);
    if (used && json_object_set_new(w->used, used, value_json(value, n)) != 0)
        w->oom = 1;
    if (json_object_size(w->facts) >= XML_MAX_FACTS || key_len > XML_MAX_KEY ||
        w->fact_bytes + key_len + kept > XML_MAX_FACT_BYTES) {
        w->truncated = 1;
        return;
    }
    w->fact_bytes += key_len + kept;
    w->work += key_len + kept;
    char key[XML_MAX_KEY + 1];
    memcpy(key, a, na);
    if (sep) {
        key[na] = sep;
        memcpy(key + na + 1, b, nb);
    }
    key[key_len] = '\0';
    if (json_object_set_new(w->facts, key, value_json(value, n)) != 0)
        w->oom = 1;
}

/* Appends `/name[n]` (or `name[n]` below the root) to the path. */
static int push_path(xml_walk *w, const char *name, json_int_t n)
{
    const size_t at = w->path_end[w->depth];
    char segment[32] = "";
    if (n)
        snprintf(segment, sizeof segment, "[%lld]", (long long)n);
    const size_t nn = strlen(name), ns = strlen(segment), sep = at ? 1 : 0;
    if (at + sep + nn + ns + 1 > w->path_cap) {
        size_t cap = w->path_cap ? w->path_cap : 256;
        while (cap < at + sep + nn + ns + 1)
            cap *= 2;
        char *grown = realloc(w->path, cap);
        if (!grown)
            return 0;
        w->path = grown;
        w->path_cap = cap;
    }
    if (sep)
        w->path[at] = '/';
    memcpy(w->path + at + sep, name, nn);
    memcpy(w->path + at + sep + nn, segment, ns + 1);
    w->path_end[w->depth + 1] = at + sep + nn + ns;
    w->work += sep + nn + ns;
    return 1;
}

static void XMLCALL on_start(void *user, const XML_Char *name, const XML_Char **attrs)
{
    xml_walk *w = user;
    if (w->depth >= XML_MAX_DEPTH) {
        w->too_deep = 1;
        XML_StopParser(w->guard.parser, XML_FALSE);
        return;
    }
    int ok = 1;
    if (w->depth == 0) {
        free(w->root);
        ok = (w->root = strdup(name)) != NULL && push_path(w, "", 0);
    } else {
        /* The n-th sibling of this name (from 0) is name[n]. */
        const int parent = w->depth;
        w->has_children[parent] = 1;
        if (!w->children[parent])
            w->children[parent] = json_object();
        json_t *count = json_object_get(w->children[parent], name);
        const json_int_t n = count ? json_integer_value(count) : 0;
        ok = w->children[parent] &&
             json_object_set_new(w->children[parent], name, json_integer(n + 1)) == 0 &&
             push_path(w, name, n);
    }
    if (!ok) {
        w->oom = 1;
        XML_StopParser(w->guard.parser, XML_FALSE);
        return;
    }
    w->depth++;
    w->children[w->depth] = NULL;
    w->has_children[w->depth] = 0;
    w->text_len = 0;
    const size_t at = w->path_end[w->depth];
    for (size_t i = 0; attrs[i] && attrs[i + 1]; i += 2)
        add_fact(w, w->path, at, '@', attrs[i], attrs[i + 1], strlen(attrs[i + 1]));
}

static int blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
            return 0;
    return 1;
}

static void XMLCALL on_end(void *user, const XML_Char *name)
{
    (void)name;
    xml_walk *w = user;
    if (w->depth <= 0)
        return;
    const int d = w->depth;
    /* A leaf's text is its value (trimmed); mixed content is not kept. */
    if (!w->has_children[d] && d > 1) {
        const char *t = w->text ? w->text : "";
        size_t a = 0, b = w->text_len;
        while (a < b && blank(t + a, 1))
            a++;
        while (b > a && blank(t + b - 1, 1))
            b--;
        add_fact(w, w->path, w->path_end[d], 0, NULL, t + a, b - a);
    }
    json_decref(w->children[d]);
    w->children[d] = NULL;
    w->depth--;
    w->path[w->path_end[w->depth]] = '\0';
    w->text_len = 0;
}

static void XMLCALL on_text(void *user, const XML_Char *s, int len)
{
    xml_walk *w = user;
    if (len <= 0 || w->text_len >= XML_MAX_VALUE)
        return;
    size_t n = (size_t)len;
    if (n > XML_MAX_VALUE - w->text_len)
        n = XML_MAX_VALUE - w->text_len;
    if (w->text_len + n + 1 > w->text_cap) {
        char *grown = realloc(w->text, XML_MAX_VALUE + 1);
        if (!grown) {
            w->oom = 1;
            XML_StopParser(w->guard.parser, XML_FALSE);
            return;
        }
        w->text = grown;
        w->text_cap = XML_MAX_VALUE + 1;
    }
    memcpy(w->text + w->text_len, s, n);
    w->text_len += n;
}

static void walk_free(xml_walk *w)
{
    for (int d = 0; d <= XML_MAX_DEPTH; d++)
        json_decref(w->children[d]);
    free(w->path);
    free(w->text);
    free(w->root);
    json_decref(w->facts);
    json_decref(w->used);
}

qem_status qem_input_empad_parse_xml(const char *xml, size_t size, const char *path,
                                     input_empad_xml *out, qem_error *error)
{
    memset(out, 0, sizeof *out);
    xml_walk w;
    memset(&w, 0, sizeof w);
    w.facts = json_object();
    w.used = json_object();
    w.guard.parser = XML_ParserCreate(NULL);
    if (!w.facts || !w.used || !w.guard.parser) {
        if (w.guard.parser)
            XML_ParserFree(w.guard.parser);
        walk_free(&w);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    qem_xml_guard_install(&w.guard);
    XML_SetElementHandler(w.guard.parser, on_start, on_end);
    XML_SetCharacterDataHandler(w.guard.parser, on_text);
    const enum XML_Status parsed = XML_Parse(w.guard.parser, xml, (int)size, XML_TRUE);
    qem_status st = QEM_OK;
    if (w.oom)
        st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory parsing '%s'", path);
    else if (w.guard.refused)
        st = qem_fail(error, QEM_E_LAYOUT,
                      "'%s' declares a DOCTYPE or an entity; an EMPAD acquisition XML has "
                      "neither, and qem does not expand them",
                      path);
    else if (w.too_deep)
        st = qem_fail(error, QEM_E_LIMIT,
                      "'%s' nests elements more than %d deep; an EMPAD acquisition XML is "
                      "shallow",
                      path, XML_MAX_DEPTH);
    else if (parsed != XML_STATUS_OK)
        st = qem_fail(error, QEM_E_LAYOUT, "'%s' is not well-formed XML (line %lu: %s)", path,
                      (unsigned long)XML_GetCurrentLineNumber(w.guard.parser),
                      XML_ErrorString(XML_GetErrorCode(w.guard.parser)));
    XML_ParserFree(w.guard.parser);
    if (st == QEM_OK && w.truncated)
        json_object_set_new(w.facts, "_truncated",
                            json_sprintf("only the first values of the XML are recorded (at "
                                         "most %d, %u bytes, keys of at most %d bytes)",
                                         XML_MAX_FACTS, XML_MAX_FACT_BYTES, XML_MAX_KEY));
    out->work = w.work;
    if (st == QEM_OK) {
        out->facts = w.facts;
        out->used = w.used;
        out->root = w.root;
        w.facts = w.used = NULL;
        w.root = NULL;
    }
    walk_free(&w);
    return st;
}

void qem_input_empad_xml_free(input_empad_xml *x)
{
    json_decref(x->facts);
    json_decref(x->used);
    free(x->root);
    memset(x, 0, sizeof *x);
}

/* --- values ------------------------------------------------------------------- */

static const char *fact_text(json_t *facts, const char *key)
{
    return json_string_value(json_object_get(facts, key));
}

/* A positive integer, the whole text (spaces around allowed). */
static int parse_count(const char *s, uint64_t *out)
{
    while (*s == ' ')
        s++;
    uint64_t v = 0;
    size_t digits = 0;
    for (; *s >= '0' && *s <= '9'; s++, digits++) {
        if (digits >= 10)
            return 0;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    while (*s == ' ')
        s++;
    if (!digits || *s || v == 0 || v > UINT32_MAX)
        return 0;
    *out = v;
    return 1;
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

/* The calibration file document of the quantities the XML states with a
 * meaning and unit that are certain. */
static json_t *calibration_of(json_t *facts)
{
    static const struct {
        const char *key, *unit;
        const char *quantities[2];
    } known[] = {
        {"iom_measurements/source.get_voltage", "V", {"electron_source/accelerating_voltage"}},
        {"iom_measurements/optics.get_cameralength", "m", {"imaging_system/camera_length"}},
        {"iom_measurements/calibrated_pixelsize", "m",
         {"scan_sampling_row", "scan_sampling_column"}},
        {"iom_measurements/calibrated_diffraction_angle", "rad",
         {"detector_sampling_row", "detector_sampling_column"}},
    };
    json_t *quantities = json_object();
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++) {
        double v;
        if (!parse_positive(fact_text(facts, known[k].key), &v))
            continue;
        for (size_t q = 0; q < 2 && known[k].quantities[q]; q++)
            json_object_set_new(quantities, known[k].quantities[q],
                                json_pack("{s:f, s:s, s:s, s:s}", "value", v, "unit",
                                          known[k].unit, "provenance", XML_PROVENANCE,
                                          "evidence", known[k].key));
    }
    if (!json_object_size(quantities)) {
        json_decref(quantities);
        return NULL;
    }
    return json_pack("{s:o}", "quantities", quantities);
}

/* --- the raw file ------------------------------------------------------------- */

/* The raw file an XML names may only be a regular file inside the XML's
 * own folder, symlinks resolved (qem_input_companion_path): a crafted XML
 * must not read any other file of the machine. */
static qem_status check_raw_name(const char *xml, const char *name, char **member,
                                 qem_error *error)
{
    char subject[600];
    snprintf(subject, sizeof subject, "'%s' names the raw file", xml);
    const input_companion c = {
        .owner = xml,
        .subject = subject,
        .folder = "the XML's folder",
        .rule = "the raw file must lie beside its XML",
        .keep = "keep the XML and its raw file together",
    };
    return qem_input_companion_path(&c, name, member, error);
}

/* --- the family ------------------------------------------------------------------ */

static int empad_recognises(const uint8_t *head, size_t n)
{
    size_t i = 0;
    if (n >= 3 && head[0] == 0xEF && head[1] == 0xBB && head[2] == 0xBF)
        i = 3; /* a UTF-8 byte order mark */
    while (i < n && (head[i] == ' ' || head[i] == '\t' || head[i] == '\r' || head[i] == '\n'))
        i++;
    return i < n && head[i] == '<';
}

static qem_status read_xml(const char *path, int fd, uint64_t size, char **out, qem_error *error)
{
    if (size > XML_MAX_BYTES)
        return qem_fail(error, QEM_E_LIMIT,
                        "'%s' is %llu bytes; an EMPAD acquisition XML is a few kilobytes (at "
                        "most %u read)",
                        path, (unsigned long long)size, XML_MAX_BYTES);
    char *xml = malloc((size_t)size + 1);
    if (!xml)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    const qem_status st = qem_pread_full(fd, xml, (size_t)size, 0, QEM_E_CHANGED, error);
    if (st != QEM_OK) {
        free(xml);
        return st;
    }
    xml[size] = '\0';
    *out = xml;
    return QEM_OK;
}

/* The raw file, the scan shape and the calibration from the values of the
 * XML the reader uses. */
static qem_status describe_raw(acquisition *a, empad_state *s, const char *path, json_t *used,
                               const input_options *o, qem_error *error)
{
    qem_status st = QEM_OK;
    /* The raw file: exactly one <raw_file filename="..."/> under the root. */
    const char *name = fact_text(used, "raw_file@filename");
    if (!name)
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "'%s' is an XML document but not an EMPAD acquisition: it names no raw "
                        "file (<raw_file filename=\"...\"/>)",
                        path);
    if (json_object_get(used, "raw_file[1]@filename"))
        return qem_fail(error, QEM_E_LAYOUT,
                        "'%s' names more than one raw file; an EMPAD acquisition has one", path);
    if (!name[0])
        return qem_fail(error, QEM_E_LAYOUT, "'%s' names an empty raw file name", path);
    char *member = NULL;
    st = check_raw_name(path, name, &member, error);
    if (st == QEM_OK)
        st = qem_input_add_member(a, member, 0, error);
    struct stat rs;
    if (st == QEM_OK)
        st = qem_open_input(member, &s->fd, &rs, error);
    if (st == QEM_OK)
        st = qem_file_stamp_check(s->fd, &a->members[1].stamp, member, "described", error);
    if (st != QEM_OK) {
        free(member);
        return st;
    }
    const uint64_t size = (uint64_t)rs.st_size;
    qem_input_fact(a, "raw_file", json_string(name));

    /* The scan shape: <pix_y> rows of <pix_x> positions, when stated. */
    const char *px = fact_text(used, "pix_x"), *py = fact_text(used, "pix_y");
    uint64_t x = 0, y = 0, frames = 0, scan[2];
    int have_file = 0;
    if (px || py) {
        if (!px || !py || !parse_count(px, &x) || !parse_count(py, &y)) {
            st = qem_fail(error, QEM_E_LAYOUT,
                          "'%s' states the scan as <pix_x>%.32s</pix_x> <pix_y>%.32s</pix_y>; "
                          "both must be positive integers",
                          path, px ? px : "(missing)", py ? py : "(missing)");
            free(member);
            return st;
        }
        uint64_t expected;
        frames = x * y;
        if (qem_mul_overflow_u64(frames, EMPAD_FRAME_BYTES, &expected) || size != expected)
            st = qem_fail(error, QEM_E_FILE_LENGTH,
                          "'%s' holds %llu bytes, but the %llu x %llu scan of '%s' needs exactly "
                          "%llu (%llu frames of 130 x 128 float32)",
                          member, (unsigned long long)size, (unsigned long long)y,
                          (unsigned long long)x, path,
                          (unsigned long long)(frames * EMPAD_FRAME_BYTES),
                          (unsigned long long)frames);
        have_file = 1;
    } else if (size % EMPAD_FRAME_BYTES != 0 || size == 0) {
        st = qem_fail(error, QEM_E_FILE_LENGTH,
                      "'%s' holds %llu bytes, which is not a whole number of EMPAD frames "
                      "(%llu bytes each: 130 x 128 float32)",
                      member, (unsigned long long)size, (unsigned long long)EMPAD_FRAME_BYTES);
    } else {
        frames = size / EMPAD_FRAME_BYTES;
    }
    const uint64_t file_shape[2] = {y, x};
    if (st == QEM_OK)
        st = qem_input_scan_shape(o, have_file, file_shape, "<pix_y>/<pix_x>", frames, path, scan,
                                  error);
    free(member);
    QEM_TRY(st);
    a->shape[0] = scan[0];
    a->shape[1] = scan[1];
    a->shape[2] = EMPAD_ROWS;
    a->shape[3] = EMPAD_COLUMNS;
    a->sample_type = QEM_DTYPE_FLOAT32;
    qem_input_fact(a, "frames", json_integer((json_int_t)frames));
    qem_input_fact(a, "frame_rows_stored", json_integer(EMPAD_ROWS_STORED));
    qem_input_fact(a, "dropped_rows", json_integer(EMPAD_ROWS_STORED - EMPAD_ROWS));
    qem_input_fact(a, "dropped_rows_are",
                   json_string("the 2 rows of frame metadata after the detector's 128 rows of "
                               "each frame"));
    a->calibration = calibration_of(used);
    return qem_input_implicit_mask(a, error);
}

static qem_status empad_describe(acquisition *a, const char *path, const uint8_t *head, size_t n,
                                 const input_options *o, qem_error *error)
{
    (void)head;
    (void)n;
    if (o->dataset)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "'%s' is an XML document; --dataset only applies to HDF5 files", path);
    empad_state *s = calloc(1, sizeof *s);
    if (!s)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    s->fd = -1;
    a->impl = s;
    QEM_TRY(qem_input_add_member(a, path, 1, error));
    int fd = -1;
    struct stat sb;
    QEM_TRY(qem_open_input(path, &fd, &sb, error));
    char *xml = NULL;
    qem_status st = qem_file_stamp_check(fd, &a->members[0].stamp, path, "described", error);
    if (st == QEM_OK)
        st = read_xml(path, fd, (uint64_t)sb.st_size, &xml, error);
    close(fd);
    QEM_TRY(st);
    input_empad_xml parsed;
    st = qem_input_empad_parse_xml(xml, (size_t)sb.st_size, path, &parsed, error);
    free(xml);
    QEM_TRY(st);
    /* Keep the facts with the acquisition from here on (freed with it). */
    json_t *used = parsed.used;
    parsed.used = NULL;
    qem_input_fact(a, "xml", parsed.facts);
    qem_input_fact(a, "xml_root", json_string(parsed.root ? parsed.root : ""));
    parsed.facts = NULL;
    qem_input_empad_xml_free(&parsed);
    st = describe_raw(a, s, path, used, o, error);
    json_decref(used);
    return st;
}

static qem_status empad_read(acquisition *a, uint64_t first, uint64_t count, void *out,
                             qem_error *error)
{
    empad_state *s = a->impl;
    input_member *m = &a->members[1];
    for (uint64_t k = 0; k < count; k++) {
        const uint64_t at = (first + k) * EMPAD_FRAME_BYTES;
        uint8_t *dst = (uint8_t *)out + k * EMPAD_KEPT_BYTES;
        QEM_TRY(qem_pread_full(s->fd, dst, EMPAD_KEPT_BYTES, at, QEM_E_CHANGED, error));
        qem_input_member_read(m, s->fd, at, dst, EMPAD_KEPT_BYTES);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        input_swap(dst, EMPAD_KEPT_BYTES / 4, 4);
#endif
    }
    return QEM_OK;
}

static void empad_release(acquisition *a)
{
    empad_state *s = a->impl;
    if (s && s->fd >= 0)
        close(s->fd);
    free(s);
    a->impl = NULL;
}

const input_family qem_input_family_empad = {
    "empad", empad_recognises, empad_describe, empad_read, empad_release, 1, NULL};
