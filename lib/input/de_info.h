/* Direct Electron's `<dataset>_info.txt`: the text DE-Server writes beside
 * the movie it autosaves as `<dataset>_movie.<ext>` (RosettaSciIO's MRC
 * file specification; its test files 20241021_00405_info.txt and
 * 4DSTEM_scan_info.txt). One `Key = Value` line per server property.
 * Shared by the mrc and seq families; see doc/inputs.md. */
#ifndef QEM_INPUT_DE_INFO_H
#define QEM_INPUT_DE_INFO_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "input/input.h"

/* Real files are about 40 KB with about 400 keys and lines under 400 bytes. */
#define DE_INFO_MAX_BYTES (256u << 10)
#define DE_INFO_MAX_LINE 4096u
#define DE_INFO_MAX_KEYS 2048u

typedef struct de_info {
    json_t *keys;     /* every key and its value (strings), as written */
    int scan_stated;  /* one raster pass: scan = rows (Scan - Size Y), columns (Size X) */
    uint64_t scan[2];
    char why_not[256]; /* scanning, but no single raster pass: why (for the message) */
} de_info;

/* Parses `size` bytes of an info file (`path` names it in messages):
 * QEM_E_LIMIT beyond the caps above, QEM_E_LAYOUT naming the line for a
 * line with no `=`, an empty key, a key given twice, a control byte, or a
 * scan size that is no positive integer. `out` is the caller's
 * (qem_de_info_free), also on failure. */
qem_status qem_de_info_parse(const char *text, size_t size, const char *path, de_info *out,
                             qem_error *error);
void qem_de_info_free(de_info *d);

/* For a master named `<P>_movie.<ext>`: reads `<P>_info.txt` beside it
 * when present (a member, under the containment rule; `family` names the
 * master's kind in messages), records it as facts["de_info"], and sets
 * `*found`. Nothing happens for other names or when the file is absent. */
qem_status qem_de_info_companion(acquisition *a, const char *master, const char *family,
                                 de_info *out, int *found, qem_error *error);

/* The scan shape of `frames` frames with the info file's (if found)
 * taken when --scan-shape is absent; qem_input_scan_shape's rules. */
qem_status qem_de_info_scan_shape(const de_info *d, int found, const input_options *o,
                                  uint64_t frames, const char *path, uint64_t out[2],
                                  qem_error *error);

#endif
