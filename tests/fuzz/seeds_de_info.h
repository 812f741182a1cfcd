/* Seeds of fuzz_de_info (tests/fuzz/seeds_de_info.c). */
#ifndef QEM_FUZZ_SEEDS_DE_INFO_H
#define QEM_FUZZ_SEEDS_DE_INFO_H

/* Writes OUT/de_info/: Direct Electron info files in the layout of
 * RosettaSciIO's test files (`Key = Value` lines, CRLF, the scan keys), a
 * repeated and a non-raster scan, each behind the three bytes fuzz_de_info
 * reads (scan rows, columns, sections). */
void seeds_de_info(const char *shared, const char *hyperspy_io, const char *out);

#endif
