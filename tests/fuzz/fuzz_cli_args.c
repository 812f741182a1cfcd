/* The command line as outside input: the first line names a command, each
 * further line is one argument, parsed against the command's options
 * table (never run). Whatever the text, escaping it for the terminal must
 * leave no control byte, which is asserted here. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "terminal.h"

static const command_spec *find(const char *name)
{
    static const command_spec *const families[] = {file_commands, product_commands,
                                                   view_commands, pack_commands};
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
        for (const command_spec *c = families[f]; c->name; c++)
            if (!strcmp(c->name, name))
                return c;
    return NULL;
}

static void assert_terminal_safe(const char *text)
{
    char out[SAFE_MAX];
    term_safe(text, out, sizeof out);
    for (const unsigned char *p = (const unsigned char *)out; *p; p++)
        if (*p < 0x20 || *p == 0x7f || (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f))
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    assert_terminal_safe(text);
    char *words[64];
    int n = 0;
    for (char *p = text; n < 64;) {
        words[n++] = p;
        char *nl = strchr(p, '\n');
        if (!nl)
            break;
        *nl = '\0';
        p = nl + 1;
    }
    const command_spec *c = find(words[0]);
    if (c) {
        args a;
        args_parse(c, n - 1, words + 1, &a);
    }
    free(text);
    return 0;
}
