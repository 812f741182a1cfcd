/* Sparse electron-event acquisitions in the layout LiberTEM reads as
 * "raw_csr": a small TOML descriptor ([params] filetype = "raw_csr",
 * nav_shape, sig_shape; a table named like the filetype with indptr_file,
 * indices_file, data_file and their numpy dtypes) naming three raw files
 * beside it. Frame f's entries are [indptr[f], indptr[f + 1]) of the
 * indices (flat detector pixel, row * columns + column) and values.
 * Reads make dense frames of the window asked for only: the row pointers
 * of the window, then its indices and values a block at a time, scattered
 * into zeroed frames. Entries naming the same pixel of a frame add up, in
 * stored order, as scipy.sparse's toarray (LiberTEM's densification) does;
 * a sum outside the sample type is refused, never wrapped. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
#include "input/input.h"
#include "input/swap.h"

#define CSR_DESCRIPTOR_MAX_BYTES (1u << 20) /* LiberTEM detects descriptors below 1 MB */
#define TOML_MAX_ENTRIES 256
#define TOML_MAX_TABLES 64
#define TOML_MAX_KEY 64
#define TOML_MAX_STRING 4096
#define TOML_MAX_ITEMS 16
#define CSR_PTR_BLOCK 4096u    /* frames whose row pointers one pread reads */
#define CSR_ENTRY_BLOCK 65536u /* entries (indices and values) one pread reads */

/* --- the descriptor: a strict subset of TOML ------------------------------------ */

/* Tables ([name]), then key = "string" | 'string' | integer | [integers],
 * and comments; nothing else of TOML (floats, booleans, dates, inline
 * tables, dotted or quoted keys, multi-line strings), which a raw_csr
 * descriptor does not use. */
typedef enum toml_kind { TOML_STRING, TOML_INTEGER, TOML_ARRAY } toml_kind;

typedef struct toml_entry {
    char table[TOML_MAX_KEY + 1]; /* "" for keys before any table */
    char key[TOML_MAX_KEY + 1];
    toml_kind kind;
    char *text; /* TOML_STRING, NUL-terminated (a NUL inside is refused) */
    int64_t integer;
    int64_t items[TOML_MAX_ITEMS];
    size_t count;
    unsigned line;
} toml_entry;

typedef struct toml_doc {
    toml_entry *entries;
    size_t count;
    char tables[TOML_MAX_TABLES][TOML_MAX_KEY + 1];
    size_t table_count;
} toml_doc;

typedef struct toml_parser {
    const char *s;
    size_t n, at;
    unsigned line;
    const char *path;
    qem_error *error;
    char table[TOML_MAX_KEY + 1];
    toml_doc *doc;
} toml_parser;

static qem_status toml_fail(toml_parser *p, qem_status status, const char *fmt, ...)
{
    char what[256];
    va_list args;
    va_start(args, fmt);
    vsnprintf(what, sizeof what, fmt, args);
    va_end(args);
    return qem_fail(p->error, status,
                    "'%s' line %u: %s; a raw_csr descriptor is read as a subset of TOML (tables, "
                    "key = string, integer or array of integers, comments)",
                    p->path, p->line, what);
}

static void toml_free(toml_doc *d)
{
    for (size_t i = 0; i < d->count; i++)
        free(d->entries[i].text);
    free(d->entries);
    memset(d, 0, sizeof *d);
}

/* Control characters (but tab and CRLF/LF line ends) and bytes that are
 * not UTF-8 are refused anywhere, so that what follows handles text only
 * and every string becomes a JSON fact. */
static qem_status toml_check_text(toml_parser *p)
{
    const unsigned char *s = (const unsigned char *)p->s;
    for (size_t i = 0; i < p->n;) {
        const unsigned c = s[i];
        if (c == '\n') {
            p->line++;
            i++;
            continue;
        }
        if (c == '\r' && i + 1 < p->n && s[i + 1] == '\n') {
            i++;
            continue;
        }
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return toml_fail(p, QEM_E_LAYOUT, "control character 0x%02x", c);
        if (c < 0x80) {
            i++;
            continue;
        }
        /* A UTF-8 sequence: no overlong forms, surrogates or values past
         * U+10FFFF. */
        size_t len = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
                                              : c >= 0xf0 && c <= 0xf4 ? 4
                                                                       : 0;
        int ok = len && i + len <= p->n;
        for (size_t k = 1; ok && k < len; k++)
            ok = (s[i + k] & 0xc0) == 0x80;
        if (ok && len == 3)
            ok = !(c == 0xe0 && s[i + 1] < 0xa0) && !(c == 0xed && s[i + 1] >= 0xa0);
        if (ok && len == 4)
            ok = !(c == 0xf0 && s[i + 1] < 0x90) && !(c == 0xf4 && s[i + 1] >= 0x90);
        if (!ok)
            return toml_fail(p, QEM_E_LAYOUT, "bytes that are not UTF-8");
        i += len;
    }
    p->line = 1;
    return QEM_OK;
}

static int toml_peek(const toml_parser *p, size_t ahead)
{
    return p->at + ahead < p->n ? (unsigned char)p->s[p->at + ahead] : -1;
}

static void toml_skip_blanks(toml_parser *p)
{
    while (toml_peek(p, 0) == ' ' || toml_peek(p, 0) == '\t')
        p->at++;
}

/* Blanks, an optional comment, then the end of the line (or the text). */
static qem_status toml_end_line(toml_parser *p)
{
    toml_skip_blanks(p);
    if (toml_peek(p, 0) == '#')
        while (p->at < p->n && p->s[p->at] != '\n' && p->s[p->at] != '\r')
            p->at++;
    if (toml_peek(p, 0) == '\r')
        p->at++; /* toml_check_text let only CRLF through */
    if (toml_peek(p, 0) == '\n') {
        p->at++;
        p->line++;
        return QEM_OK;
    }
    if (p->at >= p->n)
        return QEM_OK;
    return toml_fail(p, QEM_E_LAYOUT, "unexpected '%c' where the line should end", p->s[p->at]);
}

/* Blanks, comments and line ends (inside an array). */
static void toml_skip_space(toml_parser *p)
{
    for (;;) {
        toml_skip_blanks(p);
        const int c = toml_peek(p, 0);
        if (c == '#') {
            while (p->at < p->n && p->s[p->at] != '\n' && p->s[p->at] != '\r')
                p->at++;
        } else if (c == '\r') {
            p->at++;
        } else if (c == '\n') {
            p->at++;
            p->line++;
        } else {
            return;
        }
    }
}

static int toml_bare_char(int c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-';
}

static qem_status toml_key(toml_parser *p, char out[TOML_MAX_KEY + 1], const char *what)
{
    const int c = toml_peek(p, 0);
    if (c == '"' || c == '\'')
        return toml_fail(p, QEM_E_UNSUPPORTED, "a quoted %s", what);
    size_t n = 0;
    while (toml_bare_char(toml_peek(p, 0))) {
        if (n == TOML_MAX_KEY)
            return toml_fail(p, QEM_E_LAYOUT, "a %s longer than %d characters", what,
                             TOML_MAX_KEY);
        out[n++] = p->s[p->at++];
    }
    out[n] = '\0';
    if (!n)
        return toml_fail(p, QEM_E_LAYOUT, "no %s", what);
    toml_skip_blanks(p);
    if (toml_peek(p, 0) == '.')
        return toml_fail(p, QEM_E_UNSUPPORTED, "a dotted %s", what);
    return QEM_OK;
}

static int toml_hex(int c)
{
    return c >= '0' && c <= '9' ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* A basic ("...", escapes) or literal ('...') string on one line. */
static qem_status toml_string(toml_parser *p, toml_entry *e)
{
    const char quote = p->s[p->at];
    if (toml_peek(p, 1) == quote && toml_peek(p, 2) == quote)
        return toml_fail(p, QEM_E_UNSUPPORTED, "a multi-line string");
    p->at++;
    char *out = malloc(TOML_MAX_STRING + 1);
    if (!out)
        return qem_fail(p->error, QEM_E_NO_MEMORY, "out of memory");
    e->text = out;
    size_t n = 0;
    for (;;) {
        const int c = toml_peek(p, 0);
        if (c < 0 || c == '\n' || c == '\r')
            return toml_fail(p, QEM_E_LAYOUT, "a string that does not end on its line");
        p->at++;
        if (c == quote)
            break;
        unsigned char bytes[4];
        size_t len = 1;
        bytes[0] = (unsigned char)c;
        if (c == '\\' && quote == '"') {
            const int x = toml_peek(p, 0);
            p->at++;
            static const char from[] = "btnfr\"\\", to[] = "\b\t\n\f\r\"\\";
            const char *hit = x > 0 ? strchr(from, x) : NULL;
            if (hit) {
                bytes[0] = (unsigned char)to[hit - from];
            } else if (x == 'u' || x == 'U') {
                const size_t digits = x == 'u' ? 4 : 8;
                uint32_t cp = 0;
                for (size_t k = 0; k < digits; k++) {
                    const int h = toml_hex(toml_peek(p, 0));
                    if (h < 0)
                        return toml_fail(p, QEM_E_LAYOUT, "a \\%c escape without %zu hex digits",
                                         x, digits);
                    cp = cp << 4 | (uint32_t)h;
                    p->at++;
                }
                if (cp == 0 || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
                    return toml_fail(p, QEM_E_LAYOUT, "a \\%c escape of U+%04X, which a file "
                                     "name or value cannot hold", x, (unsigned)cp);
                if (cp < 0x80) {
                    bytes[0] = (unsigned char)cp;
                } else if (cp < 0x800) {
                    bytes[0] = (unsigned char)(0xc0 | cp >> 6);
                    bytes[1] = (unsigned char)(0x80 | (cp & 0x3f));
                    len = 2;
                } else if (cp < 0x10000) {
                    bytes[0] = (unsigned char)(0xe0 | cp >> 12);
                    bytes[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
                    bytes[2] = (unsigned char)(0x80 | (cp & 0x3f));
                    len = 3;
                } else {
                    bytes[0] = (unsigned char)(0xf0 | cp >> 18);
                    bytes[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3f));
                    bytes[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
                    bytes[3] = (unsigned char)(0x80 | (cp & 0x3f));
                    len = 4;
                }
            } else {
                return toml_fail(p, QEM_E_LAYOUT, "an unknown escape in a string");
            }
        }
        if (n + len > TOML_MAX_STRING)
            return toml_fail(p, QEM_E_LIMIT, "a string longer than %d bytes", TOML_MAX_STRING);
        memcpy(out + n, bytes, len);
        n += len;
    }
    out[n] = '\0';
    e->kind = TOML_STRING;
    return QEM_OK;
}

/* [+-]?(0|[1-9](_?[0-9])*), within 64 bits signed. */
static qem_status toml_integer(toml_parser *p, int64_t *out)
{
    int negative = 0;
    if (toml_peek(p, 0) == '+' || toml_peek(p, 0) == '-')
        negative = p->s[p->at++] == '-';
    const int first = toml_peek(p, 0);
    if (first < '0' || first > '9') {
        if (p->n - p->at >= 3 && (!memcmp(p->s + p->at, "inf", 3) ||
                                  !memcmp(p->s + p->at, "nan", 3)))
            return toml_fail(p, QEM_E_UNSUPPORTED, "a float (inf or nan)");
        return toml_fail(p, QEM_E_LAYOUT, "not an integer");
    }
    uint64_t v = 0;
    const uint64_t limit = negative ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    size_t digits = 0;
    for (;;) {
        const int c = toml_peek(p, 0);
        if (c == '_' && digits && toml_peek(p, 1) >= '0' && toml_peek(p, 1) <= '9') {
            p->at++;
            continue;
        }
        if (c < '0' || c > '9')
            break;
        if (digits == 1 && v == 0)
            return toml_fail(p, QEM_E_LAYOUT, "an integer with a leading zero");
        if (v > (limit - (uint64_t)(c - '0')) / 10)
            return toml_fail(p, QEM_E_LAYOUT, "an integer that does not fit 64 bits");
        v = v * 10 + (uint64_t)(c - '0');
        digits++;
        p->at++;
    }
    const int next = toml_peek(p, 0);
    if (next == '.' || next == 'e' || next == 'E')
        return toml_fail(p, QEM_E_UNSUPPORTED, "a float");
    if (next == 'x' || next == 'o' || next == 'b')
        return toml_fail(p, QEM_E_UNSUPPORTED, "a hexadecimal, octal or binary integer");
    if (next == '-' || next == ':')
        return toml_fail(p, QEM_E_UNSUPPORTED, "a date or time");
    if (toml_bare_char(next) || next == '_')
        return toml_fail(p, QEM_E_LAYOUT, "not an integer");
    *out = negative ? (int64_t)(0 - v) : (int64_t)v;
    return QEM_OK;
}

static qem_status toml_array(toml_parser *p, toml_entry *e)
{
    p->at++; /* '[' */
    e->kind = TOML_ARRAY;
    for (;;) {
        toml_skip_space(p);
        const int c = toml_peek(p, 0);
        if (c == ']') {
            p->at++;
            return QEM_OK;
        }
        if (c < 0)
            return toml_fail(p, QEM_E_LAYOUT, "an array that does not end");
        if (!(c == '+' || c == '-' || (c >= '0' && c <= '9') || c == 'i' || c == 'n'))
            return toml_fail(p, QEM_E_UNSUPPORTED, "an array of something else than integers");
        if (e->count == TOML_MAX_ITEMS)
            return toml_fail(p, QEM_E_LIMIT, "an array of more than %d items", TOML_MAX_ITEMS);
        QEM_TRY(toml_integer(p, &e->items[e->count]));
        e->count++;
        toml_skip_space(p);
        if (toml_peek(p, 0) == ',')
            p->at++;
        else if (toml_peek(p, 0) < 0)
            return toml_fail(p, QEM_E_LAYOUT, "an array that does not end");
        else if (toml_peek(p, 0) != ']')
            return toml_fail(p, QEM_E_LAYOUT, "an array whose items are not separated by ','");
    }
}

static qem_status toml_value(toml_parser *p, toml_entry *e)
{
    const int c = toml_peek(p, 0);
    if (c == '"' || c == '\'')
        return toml_string(p, e);
    if (c == '[')
        return toml_array(p, e);
    if (c == '+' || c == '-' || (c >= '0' && c <= '9') || c == 'i' || c == 'n') {
        e->kind = TOML_INTEGER;
        return toml_integer(p, &e->integer);
    }
    if (c == 't' || c == 'f')
        return toml_fail(p, QEM_E_UNSUPPORTED, "a boolean");
    if (c == '{')
        return toml_fail(p, QEM_E_UNSUPPORTED, "an inline table");
    return toml_fail(p, QEM_E_LAYOUT, "no value after '='");
}

static qem_status toml_table(toml_parser *p)
{
    p->at++; /* '[' */
    if (toml_peek(p, 0) == '[')
        return toml_fail(p, QEM_E_UNSUPPORTED, "an array of tables");
    toml_skip_blanks(p);
    char name[TOML_MAX_KEY + 1];
    QEM_TRY(toml_key(p, name, "table name"));
    if (toml_peek(p, 0) != ']')
        return toml_fail(p, QEM_E_LAYOUT, "a table header without its ']'");
    p->at++;
    toml_doc *d = p->doc;
    for (size_t i = 0; i < d->table_count; i++)
        if (!strcmp(d->tables[i], name))
            return toml_fail(p, QEM_E_LAYOUT, "the table [%s] defined twice", name);
    if (d->table_count == TOML_MAX_TABLES)
        return toml_fail(p, QEM_E_LIMIT, "more than %d tables", TOML_MAX_TABLES);
    memcpy(d->tables[d->table_count++], name, sizeof name);
    memcpy(p->table, name, sizeof name);
    return toml_end_line(p);
}

static qem_status toml_pair(toml_parser *p)
{
    toml_doc *d = p->doc;
    if (d->count == TOML_MAX_ENTRIES)
        return toml_fail(p, QEM_E_LIMIT, "more than %d keys", TOML_MAX_ENTRIES);
    toml_entry *e = &d->entries[d->count];
    memset(e, 0, sizeof *e);
    e->line = p->line;
    memcpy(e->table, p->table, sizeof e->table);
    QEM_TRY(toml_key(p, e->key, "key"));
    for (size_t i = 0; i < d->count; i++)
        if (!strcmp(d->entries[i].table, e->table) && !strcmp(d->entries[i].key, e->key))
            return toml_fail(p, QEM_E_LAYOUT, "the key '%s' given twice", e->key);
    if (toml_peek(p, 0) != '=')
        return toml_fail(p, QEM_E_LAYOUT, "a key without '='");
    p->at++;
    toml_skip_blanks(p);
    d->count++; /* from here its string is freed with the document */
    QEM_TRY(toml_value(p, e));
    return toml_end_line(p);
}

static qem_status toml_parse(const char *text, size_t n, const char *path, toml_doc *out,
                             qem_error *error)
{
    memset(out, 0, sizeof *out);
    toml_parser p = {text, n, 0, 1, path, error, "", out};
    QEM_TRY(toml_check_text(&p));
    if (n >= 3 && !memcmp(text, "\xef\xbb\xbf", 3))
        p.at = 3;
    if (!(out->entries = calloc(TOML_MAX_ENTRIES, sizeof *out->entries)))
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    qem_status st = QEM_OK;
    while (st == QEM_OK && p.at < p.n) {
        toml_skip_blanks(&p);
        const int c = toml_peek(&p, 0);
        if (c == '[')
            st = toml_table(&p);
        else if (c == '#' || c == '\n' || c == '\r' || c < 0)
            st = toml_end_line(&p);
        else
            st = toml_pair(&p);
    }
    if (st != QEM_OK)
        toml_free(out);
    return st;
}

static const toml_entry *toml_get(const toml_doc *d, const char *table, const char *key)
{
    for (size_t i = 0; i < d->count; i++)
        if (!strcmp(d->entries[i].table, table) && !strcmp(d->entries[i].key, key))
            return &d->entries[i];
    return NULL;
}

static int toml_has_table(const toml_doc *d, const char *table)
{
    for (size_t i = 0; i < d->table_count; i++)
        if (!strcmp(d->tables[i], table))
            return 1;
    return 0;
}

static json_t *toml_json(const toml_doc *d)
{
    json_t *out = json_object();
    for (size_t i = 0; out && i < d->count; i++) {
        const toml_entry *e = &d->entries[i];
        json_t *table = json_object_get(out, e->table);
        if (!table) {
            table = json_object();
            json_object_set_new(out, e->table, table);
        }
        json_t *v = NULL;
        if (e->kind == TOML_STRING) {
            v = json_string(e->text);
        } else if (e->kind == TOML_INTEGER) {
            v = json_integer((json_int_t)e->integer);
        } else {
            v = json_array();
            for (size_t k = 0; k < e->count; k++)
                json_array_append_new(v, json_integer((json_int_t)e->items[k]));
        }
        json_object_set_new(table, e->key, v);
    }
    return out;
}

/* --- numpy dtype strings --------------------------------------------------------- */

typedef struct csr_dtype {
    char kind; /* 'u', 'i' or 'f' */
    size_t size;
    int swap; /* stored in the other byte order than the host's */
    char name[16];
} csr_dtype;

static int host_big_endian(void)
{
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 0;
}

/* A numpy dtype string as LiberTEM passes it to numpy: an optional byte
 * order ('<' little, '>' big, '=' or '|' or none: the reading machine's,
 * as numpy takes it) and a kind + size ("u2", "f4") or a name ("uint16",
 * "float32"). Integers of 1 to 8 bytes and float32/float64 are read; other
 * numpy types are refused naming them. */
static qem_status parse_dtype(const char *text, const char *path, const char *key,
                              csr_dtype *out, qem_error *error)
{
    static const struct {
        const char *name;
        char kind;
        size_t size;
    } names[] = {{"uint8", 'u', 1},   {"uint16", 'u', 2},   {"uint32", 'u', 4},
                 {"uint64", 'u', 8},  {"int8", 'i', 1},     {"int16", 'i', 2},
                 {"int32", 'i', 4},   {"int64", 'i', 8},    {"float16", 'f', 2},
                 {"float32", 'f', 4}, {"float64", 'f', 8},  {"complex64", 'c', 8},
                 {"complex128", 'c', 16}, {"bool", 'b', 1}};
    memset(out, 0, sizeof *out);
    const char *s = text;
    int big = host_big_endian();
    if (*s == '<' || *s == '>' || *s == '=' || *s == '|') {
        big = *s == '<' ? 0 : *s == '>' ? 1 : big;
        s++;
    }
    char kind = 0;
    size_t size = 0;
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (!strcmp(s, names[k].name)) {
            kind = names[k].kind;
            size = names[k].size;
        }
    if (!kind && s[0] && strchr("uifcb?", s[0])) {
        char *end = NULL;
        const unsigned long n = s[1] >= '1' && s[1] <= '9' ? strtoul(s + 1, &end, 10) : 0;
        if (s[0] == '?' && !s[1])
            kind = 'b', size = 1;
        else if (end && !*end && n <= 16)
            kind = s[0], size = n;
    }
    const int known_size = kind == 'u' || kind == 'i' ? size == 1 || size == 2 || size == 4 ||
                                                            size == 8
                           : kind == 'f'              ? size == 2 || size == 4 || size == 8 ||
                                                            size == 16
                           : kind == 'c'              ? size == 8 || size == 16 || size == 32
                           : kind == 'b'              ? size == 1
                                                      : 0;
    if (!known_size)
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "'%s' gives %s = \"%.64s\", which is not a numpy dtype qem reads (an "
                        "integer or float type such as \"<u2\", \"int32\" or \"float32\")",
                        path, key, text);
    const char *kind_name = kind == 'u' ? "uint" : kind == 'i' ? "int" : kind == 'f' ? "float"
                                                : kind == 'c' ? "complex" : "bool";
    if (kind == 'b')
        snprintf(out->name, sizeof out->name, "bool");
    else
        snprintf(out->name, sizeof out->name, "%s%zu", kind_name,
                 kind == 'c' ? size * 8 : size * 8);
    if (kind == 'c' || kind == 'b' || (kind == 'f' && size != 4 && size != 8))
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "'%s' gives %s = \"%.64s\" (%s); qem reads integer, float32 and float64 "
                        "samples",
                        path, key, text, out->name);
    out->kind = kind;
    out->size = size;
    out->swap = size > 1 && big != host_big_endian();
    return QEM_OK;
}

/* --- the family ------------------------------------------------------------------- */

typedef struct csr_array {
    int fd;
    size_t member; /* its index in a->members */
    csr_dtype type;
    uint64_t count; /* items the file holds */
} csr_array;

typedef struct csr_state {
    csr_array indptr, indices, data;
    uint64_t frames, entries;
} csr_state;

/* A line "filetype = "raw_csr"" (either quote, any case, as LiberTEM
 * compares it) among the first bytes of a text file. */
static int csr_recognises(const uint8_t *head, size_t n)
{
    if (memchr(head, 0, n))
        return 0;
    for (size_t i = 0; i < n;) {
        while (i < n && (head[i] == ' ' || head[i] == '\t'))
            i++;
        static const char key[] = "filetype";
        size_t j = i;
        if (n - i > sizeof key && !memcmp(head + i, key, sizeof key - 1)) {
            j = i + sizeof key - 1;
            while (j < n && (head[j] == ' ' || head[j] == '\t'))
                j++;
            if (j < n && head[j] == '=') {
                j++;
                while (j < n && (head[j] == ' ' || head[j] == '\t'))
                    j++;
                static const char value[] = "raw_csr";
                if (j + sizeof value < n && (head[j] == '"' || head[j] == '\'') &&
                    head[j + sizeof value] == head[j]) {
                    size_t k = 0;
                    while (k < sizeof value - 1 &&
                           tolower(head[j + 1 + k]) == (unsigned char)value[k])
                        k++;
                    if (k == sizeof value - 1)
                        return 1;
                }
            }
        }
        while (i < n && head[i] != '\n')
            i++;
        i++;
    }
    return 0;
}

static qem_status read_descriptor(const char *path, int fd, uint64_t size, char **out,
                                  qem_error *error)
{
    if (size > CSR_DESCRIPTOR_MAX_BYTES)
        return qem_fail(error, QEM_E_LIMIT,
                        "'%s' is %llu bytes; a raw_csr descriptor is a few lines (at most %u "
                        "bytes read)",
                        path, (unsigned long long)size, CSR_DESCRIPTOR_MAX_BYTES);
    char *text = malloc((size_t)size + 1);
    if (!text)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    const qem_status st = qem_pread_full(fd, text, (size_t)size, 0, QEM_E_CHANGED, error);
    if (st != QEM_OK) {
        free(text);
        return st;
    }
    text[size] = '\0';
    *out = text;
    return QEM_OK;
}

/* [params] nav_shape (`sig` 0: one or two axes) or sig_shape (two axes):
 * positive integers. */
static qem_status shape_of(const toml_doc *d, const char *path, const char *key, int sig,
                           uint64_t out[2], size_t *count, qem_error *error)
{
    const toml_entry *e = toml_get(d, "params", key);
    if (!e)
        return qem_fail(error, QEM_E_LAYOUT, "'%s' gives no %s in [params]", path, key);
    int ok = e->kind == TOML_ARRAY && e->count >= 1;
    for (size_t k = 0; ok && k < e->count; k++)
        ok = e->items[k] > 0;
    if (!ok)
        return qem_fail(error, QEM_E_LAYOUT,
                        "'%s' line %u: %s must be an array of positive integers", path, e->line,
                        key);
    if (e->count > 2 || (sig && e->count != 2))
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "'%s' line %u: %s has %zu axes; qem reads %s of rows x columns", path,
                        e->line, key, e->count, sig ? "detectors" : "scans (or a frame count)");
    for (size_t k = 0; k < e->count; k++)
        out[k] = (uint64_t)e->items[k];
    *count = e->count;
    return QEM_OK;
}

static qem_status string_of(const toml_doc *d, const char *table, const char *key,
                            const char *path, const char **out, qem_error *error)
{
    const toml_entry *e = toml_get(d, table, key);
    if (!e)
        return qem_fail(error, QEM_E_LAYOUT, "'%s' gives no %s in [%s]", path, key, table);
    if (e->kind != TOML_STRING || !e->text[0])
        return qem_fail(error, QEM_E_LAYOUT, "'%s' line %u: %s must be a non-empty string",
                        path, e->line, key);
    *out = e->text;
    return QEM_OK;
}

/* Reads items [first, first + n) of `arr` into `buf` (file bytes hashed
 * when a save streams), then in the host's byte order. */
static qem_status read_items(acquisition *a, const csr_array *arr, uint64_t first, uint64_t n,
                             void *buf, qem_error *error)
{
    const uint64_t at = first * arr->type.size;
    const size_t bytes = (size_t)(n * arr->type.size);
    if (!bytes)
        return QEM_OK;
    QEM_TRY(qem_pread_full(arr->fd, buf, bytes, at, QEM_E_CHANGED, error));
    qem_input_member_read(&a->members[arr->member], arr->fd, at, buf, bytes);
    if (arr->type.swap)
        input_swap(buf, (size_t)n, arr->type.size);
    return QEM_OK;
}

/* Integers of `t` in `buf` as uint64; a negative one becomes UINT64_MAX
 * (above every valid pointer and pixel). */
static void integers_of(const csr_dtype *t, const void *buf, size_t n, uint64_t *out)
{
    for (size_t k = 0; k < n; k++) {
        int64_t s = 0;
        uint64_t u = 0;
        int is_signed = t->kind == 'i';
        switch (t->size) {
        case 1:
            s = ((const int8_t *)buf)[k], u = ((const uint8_t *)buf)[k];
            break;
        case 2:
            s = ((const int16_t *)buf)[k], u = ((const uint16_t *)buf)[k];
            break;
        case 4:
            s = ((const int32_t *)buf)[k], u = ((const uint32_t *)buf)[k];
            break;
        default:
            s = ((const int64_t *)buf)[k], u = ((const uint64_t *)buf)[k];
            break;
        }
        out[k] = is_signed ? (s < 0 ? UINT64_MAX : (uint64_t)s) : u;
    }
}

/* The signed or unsigned integer k of `buf`, as text (for messages). */
static void integer_text(const csr_dtype *t, const void *buf, size_t k, char *out, size_t size)
{
    int64_t s = 0;
    uint64_t u = 0;
    switch (t->size) {
    case 1:
        s = ((const int8_t *)buf)[k], u = ((const uint8_t *)buf)[k];
        break;
    case 2:
        s = ((const int16_t *)buf)[k], u = ((const uint16_t *)buf)[k];
        break;
    case 4:
        s = ((const int32_t *)buf)[k], u = ((const uint32_t *)buf)[k];
        break;
    default:
        s = ((const int64_t *)buf)[k], u = ((const uint64_t *)buf)[k];
        break;
    }
    if (t->kind == 'i')
        snprintf(out, size, "%lld", (long long)s);
    else
        snprintf(out, size, "%llu", (unsigned long long)u);
}

/* Every row pointer: the first 0, none below the one before, the last the
 * number of entries (LiberTEM's own check: max(indptr) == len(indices)).
 * Read a block at a time; `changed` words a violation found by a read. */
static qem_status check_pointers(acquisition *a, csr_state *s, const char *path,
                                 uint64_t first, uint64_t count, const uint64_t *ptr,
                                 const void *raw, int changed, qem_error *error)
{
    const char *file = a->members[s->indptr.member].path;
    for (uint64_t k = 0; k <= count; k++) {
        const uint64_t at = first + k;
        char text[32];
        const char *wrong = NULL;
        if (ptr[k] == UINT64_MAX && s->indptr.type.kind == 'i')
            wrong = "is negative";
        else if (at == 0 && ptr[k] != 0)
            wrong = "must be 0 (the first frame starts at the first entry)";
        else if (k > 0 && ptr[k] < ptr[k - 1])
            wrong = "is below the one before it (a frame cannot have a negative length)";
        else if (ptr[k] > s->entries)
            wrong = "points past the entries the indices and data files hold";
        else if (at == s->frames && ptr[k] != s->entries)
            wrong = "is the last but leaves entries of the indices and data files unused";
        if (!wrong)
            continue;
        integer_text(&s->indptr.type, raw, (size_t)k, text, sizeof text);
        if (changed)
            return qem_fail(error, QEM_E_CHANGED,
                            "row pointer %llu of '%s' (%s) %s; it did not when '%s' was opened: "
                            "the file changed",
                            (unsigned long long)at, file, text, wrong, path);
        return qem_fail(error, QEM_E_LAYOUT,
                        "row pointer %llu of '%s' (%s) %s; %llu entries, %llu frames (indptr "
                        "holds one pointer per frame and one more)",
                        (unsigned long long)at, file, text, wrong,
                        (unsigned long long)s->entries, (unsigned long long)s->frames);
    }
    return QEM_OK;
}

static qem_status check_all_pointers(acquisition *a, csr_state *s, const char *path,
                                     qem_error *error)
{
    void *raw = malloc((CSR_PTR_BLOCK + 1) * 8);
    uint64_t *ptr = malloc((CSR_PTR_BLOCK + 1) * sizeof *ptr);
    qem_status st = raw && ptr ? QEM_OK : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    for (uint64_t f = 0; st == QEM_OK && f < s->frames; f += CSR_PTR_BLOCK) {
        const uint64_t n = s->frames - f < CSR_PTR_BLOCK ? s->frames - f : CSR_PTR_BLOCK;
        st = read_items(a, &s->indptr, f, n + 1, raw, error);
        if (st == QEM_OK) {
            integers_of(&s->indptr.type, raw, (size_t)(n + 1), ptr);
            st = check_pointers(a, s, path, f, n, ptr, raw, 0, error);
        }
    }
    free(raw);
    free(ptr);
    return st;
}

/* One of the three files: inside the descriptor's folder, a member, open,
 * a whole number of items. */
static qem_status open_array(acquisition *a, const char *path, const toml_doc *d,
                             const char *table, const char *role, const char *dtype_key,
                             csr_array *arr, qem_error *error)
{
    const char *name = NULL, *dtype = NULL;
    QEM_TRY(string_of(d, table, role, path, &name, error));
    QEM_TRY(string_of(d, table, dtype_key, path, &dtype, error));
    QEM_TRY(parse_dtype(dtype, path, dtype_key, &arr->type, error));
    if (arr->type.kind == 'f' && strcmp(role, "data_file") != 0)
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "'%s' gives %s as %s; row pointers and pixel indices are integers", path,
                        role, arr->type.name);
    char subject[600];
    snprintf(subject, sizeof subject, "'%s' names as %s", path, role);
    const input_companion c = {
        .owner = path,
        .subject = subject,
        .folder = "the descriptor's folder",
        .rule = "the indptr, indices and data files must lie beside their descriptor",
        .keep = "keep the descriptor and its three files together",
    };
    char *member = NULL;
    QEM_TRY(qem_input_companion_path(&c, name, &member, error));
    qem_status st = qem_input_add_member(a, member, 0, error);
    struct stat sb;
    arr->member = a->member_count - 1;
    if (st == QEM_OK)
        st = qem_open_input(member, &arr->fd, &sb, error);
    if (st == QEM_OK)
        st = qem_file_stamp_check(arr->fd, &a->members[arr->member].stamp, member, "described",
                                  error);
    if (st == QEM_OK && (uint64_t)sb.st_size % arr->type.size != 0)
        st = qem_fail(error, QEM_E_FILE_LENGTH,
                      "'%s' (%s of '%s') holds %llu bytes, not a whole number of %s items (%zu "
                      "bytes each)",
                      member, role, path, (unsigned long long)sb.st_size, arr->type.name,
                      arr->type.size);
    if (st == QEM_OK)
        arr->count = (uint64_t)sb.st_size / arr->type.size;
    free(member);
    return st;
}

static json_t *array_fact(const csr_array *arr, const char *file, const char *dtype)
{
    return json_pack("{s:s, s:s, s:s, s:s, s:I}", "file", file, "dtype", dtype, "type",
                     arr->type.name, "byte_order",
                     arr->type.size == 1 ? "not applicable"
                     : arr->type.swap != host_big_endian() ? "big-endian"
                                                           : "little-endian",
                     "items", (json_int_t)arr->count);
}

static qem_status describe_arrays(acquisition *a, csr_state *s, const char *path,
                                  const toml_doc *d, const input_options *o, qem_error *error)
{
    const char *filetype = NULL;
    QEM_TRY(string_of(d, "params", "filetype", path, &filetype, error));
    if (strlen(filetype) != 7 || strncasecmp(filetype, "raw_csr", 7) != 0)
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "'%s' gives filetype = \"%.64s\" in [params]; qem reads \"raw_csr\" "
                        "descriptors",
                        path, filetype);
    /* The arrays' table is named like the filetype, as LiberTEM looks it up. */
    if (!toml_has_table(d, filetype))
        return qem_fail(error, QEM_E_LAYOUT, "'%s' has no [%s] table naming the three files",
                        path, filetype);
    uint64_t nav[2] = {0, 0}, sig[2] = {0, 0};
    size_t nav_axes = 0, sig_axes = 0;
    QEM_TRY(shape_of(d, path, "nav_shape", 0, nav, &nav_axes, error));
    QEM_TRY(shape_of(d, path, "sig_shape", 1, sig, &sig_axes, error));
    QEM_TRY(open_array(a, path, d, filetype, "indptr_file", "indptr_dtype", &s->indptr, error));
    QEM_TRY(open_array(a, path, d, filetype, "indices_file", "indices_dtype", &s->indices,
                       error));
    QEM_TRY(open_array(a, path, d, filetype, "data_file", "data_dtype", &s->data, error));
    const char *indptr_file = a->members[s->indptr.member].path;
    if (s->indptr.count < 2)
        return qem_fail(error, QEM_E_LAYOUT,
                        "'%s' (indptr_file) holds %llu row pointers; a set of N frames has N + 1 "
                        "(at least 2)",
                        indptr_file, (unsigned long long)s->indptr.count);
    if (s->indices.count != s->data.count)
        return qem_fail(error, QEM_E_LAYOUT,
                        "'%s' holds %llu pixel indices but '%s' holds %llu values; CSR has one "
                        "value per index",
                        a->members[s->indices.member].path, (unsigned long long)s->indices.count,
                        a->members[s->data.member].path, (unsigned long long)s->data.count);
    s->frames = s->indptr.count - 1;
    s->entries = s->indices.count;

    /* The scan: nav_shape's rows x columns; one axis states only the count. */
    uint64_t stated = nav[0];
    if (nav_axes == 2 && qem_mul_overflow_u64(nav[0], nav[1], &stated))
        return qem_fail(error, QEM_E_LAYOUT, "'%s' gives a nav_shape whose product overflows",
                        path);
    if (stated != s->frames)
        return qem_fail(error, QEM_E_LAYOUT,
                        "'%s' gives nav_shape %llu x %llu (%llu frames), but '%s' holds %llu row "
                        "pointers (%llu frames)",
                        path, (unsigned long long)nav[0],
                        (unsigned long long)(nav_axes == 2 ? nav[1] : 1),
                        (unsigned long long)stated, indptr_file,
                        (unsigned long long)s->indptr.count, (unsigned long long)s->frames);
    uint64_t scan[2];
    QEM_TRY(qem_input_scan_shape(o, nav_axes == 2, nav, "nav_shape", s->frames, path, scan,
                                 error));
    a->shape[0] = scan[0];
    a->shape[1] = scan[1];
    a->shape[2] = sig[0];
    a->shape[3] = sig[1];
    QEM_TRY(qem_input_check_shape(a, path, error));

    /* Value types: uint8/uint16/uint32/float32 as stored, the rest settled. */
    const csr_dtype *v = &s->data.type;
    if (v->kind == 'u' && v->size <= 4)
        a->sample_type = v->size == 1 ? QEM_DTYPE_UINT8
                         : v->size == 2 ? QEM_DTYPE_UINT16
                                        : QEM_DTYPE_UINT32;
    else if (v->kind == 'f' && v->size == 4)
        a->sample_type = QEM_DTYPE_FLOAT32;
    else if (v->kind == 'u')
        a->read_values = INPUT_VALUES_UINT64;
    else if (v->kind == 'f')
        a->read_values = INPUT_VALUES_FLOAT64;
    else
        a->read_values = v->size == 1   ? INPUT_VALUES_INT8
                         : v->size == 2 ? INPUT_VALUES_INT16
                         : v->size == 4 ? INPUT_VALUES_INT32
                                        : INPUT_VALUES_INT64;
    QEM_TRY(check_all_pointers(a, s, path, error));

    const char *table = filetype;
    qem_input_fact(a, "filetype", json_string(filetype));
    qem_input_fact(a, "frames", json_integer((json_int_t)s->frames));
    qem_input_fact(a, "entries", json_integer((json_int_t)s->entries));
    qem_input_fact(a, "indptr", array_fact(&s->indptr, toml_get(d, table, "indptr_file")->text,
                                           toml_get(d, table, "indptr_dtype")->text));
    qem_input_fact(a, "indices",
                   array_fact(&s->indices, toml_get(d, table, "indices_file")->text,
                              toml_get(d, table, "indices_dtype")->text));
    qem_input_fact(a, "data", array_fact(&s->data, toml_get(d, table, "data_file")->text,
                                         toml_get(d, table, "data_dtype")->text));
    qem_input_fact(a, "duplicates",
                   json_string("entries naming the same pixel of a frame add up in stored "
                               "order, as scipy.sparse toarray (LiberTEM) does; a sum outside "
                               "the sample type is refused"));
    qem_input_fact(a, "descriptor", toml_json(d));
    return qem_input_implicit_mask(a, error);
}

static qem_status csr_describe(acquisition *a, const char *path, const uint8_t *head, size_t n,
                               const input_options *o, qem_error *error)
{
    (void)head;
    (void)n;
    if (o->dataset)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "'%s' is a raw_csr descriptor; --dataset only applies to HDF5 files",
                        path);
    csr_state *s = calloc(1, sizeof *s);
    if (!s)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    s->indptr.fd = s->indices.fd = s->data.fd = -1;
    a->impl = s;
    QEM_TRY(qem_input_add_member(a, path, 1, error));
    int fd = -1;
    struct stat sb;
    QEM_TRY(qem_open_input(path, &fd, &sb, error));
    char *text = NULL;
    qem_status st = qem_file_stamp_check(fd, &a->members[0].stamp, path, "described", error);
    if (st == QEM_OK)
        st = read_descriptor(path, fd, (uint64_t)sb.st_size, &text, error);
    close(fd);
    QEM_TRY(st);
    toml_doc d;
    st = toml_parse(text, (size_t)sb.st_size, path, &d, error);
    free(text);
    QEM_TRY(st);
    st = describe_arrays(a, s, path, &d, o, error);
    toml_free(&d);
    return st;
}

/* dst[target[k]] += values[k] for the entries of one block, in stored
 * order; an integer sum that leaves its type is refused (its position
 * returned in *bad). */
#define CSR_ADD_INTEGERS(T)                                                                        \
    do {                                                                                           \
        T *dst = out;                                                                              \
        const T *val = values;                                                                     \
        for (size_t k = 0; k < n; k++)                                                             \
            if (__builtin_add_overflow(dst[target[k]], val[k], &dst[target[k]])) {                 \
                *bad = k;                                                                          \
                return 0;                                                                          \
            }                                                                                      \
    } while (0)
#define CSR_ADD_FLOATS(T)                                                                          \
    do {                                                                                           \
        T *dst = out;                                                                              \
        const T *val = values;                                                                     \
        for (size_t k = 0; k < n; k++)                                                             \
            dst[target[k]] += val[k];                                                              \
    } while (0)

static int scatter_add(const csr_dtype *t, void *out, const uint64_t *target, const void *values,
                       size_t n, size_t *bad)
{
    if (t->kind == 'f') {
        if (t->size == 4)
            CSR_ADD_FLOATS(float);
        else
            CSR_ADD_FLOATS(double);
        return 1;
    }
    if (t->kind == 'u') {
        switch (t->size) {
        case 1:
            CSR_ADD_INTEGERS(uint8_t);
            break;
        case 2:
            CSR_ADD_INTEGERS(uint16_t);
            break;
        case 4:
            CSR_ADD_INTEGERS(uint32_t);
            break;
        default:
            CSR_ADD_INTEGERS(uint64_t);
            break;
        }
        return 1;
    }
    switch (t->size) {
    case 1:
        CSR_ADD_INTEGERS(int8_t);
        break;
    case 2:
        CSR_ADD_INTEGERS(int16_t);
        break;
    case 4:
        CSR_ADD_INTEGERS(int32_t);
        break;
    default:
        CSR_ADD_INTEGERS(int64_t);
        break;
    }
    return 1;
}

/* Frames [first, first + count): the row pointers of CSR_PTR_BLOCK frames
 * at a time, their entries CSR_ENTRY_BLOCK at a time. */
static qem_status csr_read(acquisition *a, uint64_t first, uint64_t count, void *out,
                           qem_error *error)
{
    csr_state *s = a->impl;
    const uint64_t pixels = a->shape[2] * a->shape[3];
    const size_t item = s->data.type.size;
    memset(out, 0, (size_t)(count * pixels) * item);
    void *ptr_raw = malloc((CSR_PTR_BLOCK + 1) * 8);
    uint64_t *ptr = malloc((CSR_PTR_BLOCK + 1) * sizeof *ptr);
    void *index_raw = malloc(CSR_ENTRY_BLOCK * 8);
    void *values = malloc(CSR_ENTRY_BLOCK * 8);
    uint64_t *target = malloc(CSR_ENTRY_BLOCK * sizeof *target);
    qem_status st = ptr_raw && ptr && index_raw && values && target
                        ? QEM_OK
                        : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    const char *path = a->members[0].path;
    for (uint64_t b = 0; st == QEM_OK && b < count; b += CSR_PTR_BLOCK) {
        const uint64_t n = count - b < CSR_PTR_BLOCK ? count - b : CSR_PTR_BLOCK;
        st = read_items(a, &s->indptr, first + b, n + 1, ptr_raw, error);
        if (st != QEM_OK)
            break;
        integers_of(&s->indptr.type, ptr_raw, (size_t)(n + 1), ptr);
        /* Checked when opened: a violation now is a file that changed. */
        st = check_pointers(a, s, path, first + b, n, ptr, ptr_raw, 1, error);
        uint64_t frame = 0; /* within this block */
        for (uint64_t e = ptr[0]; st == QEM_OK && e < ptr[n];) {
            const size_t m = (size_t)(ptr[n] - e < CSR_ENTRY_BLOCK ? ptr[n] - e : CSR_ENTRY_BLOCK);
            st = read_items(a, &s->indices, e, m, index_raw, error);
            if (st == QEM_OK)
                st = read_items(a, &s->data, e, m, values, error);
            if (st != QEM_OK)
                break;
            integers_of(&s->indices.type, index_raw, m, target);
            for (size_t k = 0; k < m; k++) {
                while (e + k >= ptr[frame + 1])
                    frame++;
                if (target[k] < pixels) {
                    target[k] += (b + frame) * pixels;
                    continue;
                }
                char text[32];
                integer_text(&s->indices.type, index_raw, k, text, sizeof text);
                st = qem_fail(error, QEM_E_LAYOUT,
                              "entry %llu of '%s' (frame %llu) names pixel %s; the %llu x %llu "
                              "detector (sig_shape of '%s') has pixels 0 to %llu",
                              (unsigned long long)(e + k), a->members[s->indices.member].path,
                              (unsigned long long)(first + b + frame), text,
                              (unsigned long long)a->shape[2], (unsigned long long)a->shape[3],
                              path, (unsigned long long)(pixels - 1));
                break;
            }
            size_t bad = 0;
            if (st == QEM_OK && !scatter_add(&s->data.type, out, target, values, m, &bad)) {
                const uint64_t at = target[bad];
                const uint64_t scan = first + at / pixels, pixel = at % pixels;
                st = qem_fail(error, QEM_E_VALUE_RANGE,
                              "frame %llu of '%s' names detector pixel (%llu, %llu) more than "
                              "once, and its values (entry %llu the last) add up beyond %s; "
                              "nothing was written (counts are never wrapped)",
                              (unsigned long long)scan, path,
                              (unsigned long long)(pixel / a->shape[3]),
                              (unsigned long long)(pixel % a->shape[3]),
                              (unsigned long long)(e + bad), s->data.type.name);
            }
            e += m;
        }
    }
    free(ptr_raw);
    free(ptr);
    free(index_raw);
    free(values);
    free(target);
    return st;
}

static void csr_release(acquisition *a)
{
    csr_state *s = a->impl;
    if (s) {
        const int fds[3] = {s->indptr.fd, s->indices.fd, s->data.fd};
        for (int k = 0; k < 3; k++)
            if (fds[k] >= 0)
                close(fds[k]);
    }
    free(s);
    a->impl = NULL;
}

const input_family qem_input_family_csr = {
    "csr", csr_recognises, csr_describe, csr_read, csr_release, 1, NULL};
