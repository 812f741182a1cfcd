/* `qem view FILE [FILE...]`: the browser viewer, served from inside the
 * qem binary (libmicrohttpd). Self-contained: its own help and option
 * parsing; qem.c only dispatches to cmd_view. */
#ifndef QEM_VIEW_VIEW_H
#define QEM_VIEW_VIEW_H

extern const char *const view_help;
int cmd_view(int argc, char **argv);

#endif
