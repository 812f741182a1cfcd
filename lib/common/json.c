#include "common/json.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"

const char *qem_json_error_reason(const json_error_t *e)
{
    switch (json_error_code(e)) {
    case json_error_out_of_memory: return "out of memory";
    case json_error_stack_overflow: return "nested too deeply";
    case json_error_invalid_utf8: return "the text is not valid UTF-8";
    case json_error_premature_end_of_input: return "the text ends inside the JSON value";
    case json_error_end_of_input_expected: return "there is text after the JSON value";
    case json_error_invalid_syntax: return "invalid JSON syntax";
    case json_error_null_character: return "a NUL character (\\u0000), which qem refuses";
    case json_error_null_byte_in_key: return "a NUL character (\\u0000) in a key";
    case json_error_duplicate_key: return "a duplicate key (one appears twice in an object)";
    case json_error_numeric_overflow: return "a number too large to represent";
    default: return "not valid JSON";
    }
}

qem_status qem_json_parse_object(const char *data, size_t size, qem_status status, json_t **out,
                                 qem_error *error)
{
    json_error_t jerr;
    json_t *root = json_loadb(data, size, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return qem_fail(error, status, "invalid JSON at line %d column %d: %s", jerr.line,
                        jerr.column, qem_json_error_reason(&jerr));
    if (!json_is_object(root)) {
        json_decref(root);
        return qem_fail(error, status, "JSON document is not an object");
    }
    *out = root;
    return QEM_OK;
}

int qem_json_as_u64(const json_t *value, uint64_t *out)
{
    if (!json_is_integer(value))
        return 0;
    json_int_t v = json_integer_value(value);
    if (v < 0)
        return 0;
    *out = (uint64_t)v;
    return 1;
}

int qem_json_is_lower_hex64(const json_t *value)
{
    if (!json_is_string(value) || json_string_length(value) != 64)
        return 0;
    const char *s = json_string_value(value);
    for (int i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

int qem_json_string_is(const json_t *value, const char *want)
{
    return json_is_string(value) && strcmp(json_string_value(value), want) == 0;
}

int qem_json_u64_is(const json_t *value, uint64_t want)
{
    uint64_t got;
    return qem_json_as_u64(value, &got) && got == want;
}

char *qem_json_dump_canonical(const json_t *value, size_t *size)
{
    char *text = json_dumps(value, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII |
                                       JSON_REAL_PRECISION(17));
    if (text && size)
        *size = strlen(text);
    return text;
}

char *qem_json_take_text(json_t *value, qem_error *error)
{
    char *text = value ? json_dumps(value, JSON_COMPACT) : NULL;
    json_decref(value);
    if (!text)
        qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    return text;
}
