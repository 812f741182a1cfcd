/* See seeds_de_info.h. */
#include "seeds_de_info.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static void put_seed(const char *out, const char *name, unsigned rows, unsigned columns,
                     unsigned sections, const char *text)
{
    char seed[1024];
    snprintf(seed, sizeof seed, "%s/de_info", out);
    mkdir(seed, 0755);
    snprintf(seed, sizeof seed, "%s/de_info/%s", out, name);
    FILE *f = fopen(seed, "wb");
    if (!f)
        return;
    fputc((int)rows, f);
    fputc((int)columns, f);
    fputc((int)(sections - 1), f);
    fwrite(text, 1, strlen(text), f);
    fclose(f);
}

void seeds_de_info(const char *shared, const char *hyperspy_io, const char *out)
{
    (void)shared;
    (void)hyperspy_io; /* no Direct Electron file ships with HyperSpy 1.7.3 */
    static const char head[] =
        "Server Software Version                                         = 2.7.2.9048\r\n"
        "Autosave Filename Suffix                                        = \r\n"
        "Camera Model                                                    = CeleritasXS\r\n"
        "Image Size X (pixels)                                           = 2\r\n"
        "Image Size Y (pixels)                                           = 2\r\n"
        "Scan - Enable                                                   = Enable\r\n"
        "Scan - Type                                                     = Raster\r\n";
    char text[2048];
    snprintf(text, sizeof text, "%sScan - Size X = 3\r\nScan - Size Y = 2\r\n", head);
    put_seed(out, "raster", 0, 0, 6, text);
    put_seed(out, "raster_given", 2, 3, 6, text);
    snprintf(text, sizeof text, "%sScan - Size X = 2\r\nScan - Size Y = 2\r\n"
             "Scan - Repeats = 2\r\n", head);
    put_seed(out, "repeats", 4, 2, 8, text);
    put_seed(out, "custom", 0, 0, 4,
             "Scan - Enable = Enable\nScan - Type = Custom\n"
             "Scan - Size X = 2\nScan - Size Y = 2\n");
    put_seed(out, "tem", 1, 3, 3, "Scan - Enable = Disable\nFrames Per Second = 700\n");
}
