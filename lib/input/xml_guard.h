/* Expat parsers of outside XML (an EMPAD acquisition XML, TIA's ObjectInfo
 * documents) refuse DOCTYPE and entity declarations: neither document
 * needs them, and entities are how a small document expands without bound.
 * A walker's struct starts with an xml_guard, so its callbacks and the
 * guard's share the parser's user data. */
#ifndef QEM_INPUT_XML_GUARD_H
#define QEM_INPUT_XML_GUARD_H

#include <expat.h>

typedef struct xml_guard {
    XML_Parser parser;
    int refused; /* a DOCTYPE or entity declaration was met */
} xml_guard;

/* Makes `guard` (the walker it starts) the parser's user data and installs
 * the refusal: the parser stops at the first declaration. */
void qem_xml_guard_install(xml_guard *guard);

#endif
