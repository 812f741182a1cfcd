/* "merlin://HOST[:PORT]", "dectris://HOST[:PORT]" and "dectris2://HOST[:PORT]"
 * (live.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "live/live.h"

qem_status qem_live_parse_url(const char *url, live_address *out, qem_error *error)
{
    memset(out, 0, sizeof *out);
    const char *rest;
    if (!strncmp(url, "merlin://", 9)) {
        out->protocol = LIVE_MERLIN;
        out->port = LIVE_MERLIN_PORT;
        rest = url + 9;
    } else if (!strncmp(url, "dectris://", 10)) {
        out->protocol = LIVE_DECTRIS;
        out->port = LIVE_DECTRIS_PORT;
        rest = url + 10;
    } else if (!strncmp(url, "dectris2://", 11)) {
        out->protocol = LIVE_DECTRIS2;
        out->port = LIVE_DECTRIS2_PORT;
        rest = url + 11;
    } else {
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "'%.200s' is not a stream qem records: give merlin://HOST[:PORT] (a "
                        "Merlin data port, default %u), dectris://HOST[:PORT] (a DECTRIS "
                        "stream V1 interface, default %u) or dectris2://HOST[:PORT] (stream "
                        "V2, default %u)",
                        url, LIVE_MERLIN_PORT, LIVE_DECTRIS_PORT, LIVE_DECTRIS2_PORT);
    }
    /* HOST, [IPv6]:PORT or HOST:PORT; nothing after. */
    const char *host = rest, *colon;
    size_t host_len;
    if (*rest == '[') {
        const char *close = strchr(rest, ']');
        if (!close)
            goto bad;
        host = rest + 1;
        host_len = (size_t)(close - host);
        colon = close[1] == ':' ? close + 1 : NULL;
        if (close[1] && !colon)
            goto bad;
    } else {
        colon = strchr(rest, ':');
        host_len = colon ? (size_t)(colon - rest) : strlen(rest);
    }
    if (host_len == 0 || host_len >= sizeof out->host || memchr(host, '/', host_len))
        goto bad;
    memcpy(out->host, host, host_len);
    if (colon) {
        char *end = NULL;
        const unsigned long port = strtoul(colon + 1, &end, 10);
        if (end == colon + 1 || *end || port == 0 || port > 65535 || colon[1] == '-' ||
            colon[1] == '+')
            goto bad;
        out->port = (unsigned)port;
    }
    return QEM_OK;
bad:;
    const char *scheme = out->protocol == LIVE_MERLIN    ? "merlin"
                         : out->protocol == LIVE_DECTRIS ? "dectris"
                                                         : "dectris2";
    return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                    "'%.200s' is not a stream address: give %s://HOST or %s://HOST:PORT (port "
                    "1 to 65535)",
                    url, scheme, scheme);
}
