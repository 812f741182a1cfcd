/* DOCTYPE and entity declarations refused in outside XML (xml_guard.h). */
#include "input/xml_guard.h"

static void XMLCALL refuse_doctype(void *user, const XML_Char *name, const XML_Char *sysid,
                                   const XML_Char *pubid, int has_internal_subset)
{
    (void)name, (void)sysid, (void)pubid, (void)has_internal_subset;
    xml_guard *g = user;
    g->refused = 1;
    XML_StopParser(g->parser, XML_FALSE);
}

static void XMLCALL refuse_entity(void *user, const XML_Char *name, int is_parameter_entity,
                                  const XML_Char *value, int value_length, const XML_Char *base,
                                  const XML_Char *system_id, const XML_Char *public_id,
                                  const XML_Char *notation)
{
    (void)name, (void)is_parameter_entity, (void)value, (void)value_length, (void)base;
    (void)system_id, (void)public_id, (void)notation;
    xml_guard *g = user;
    g->refused = 1;
    XML_StopParser(g->parser, XML_FALSE);
}

void qem_xml_guard_install(xml_guard *guard)
{
    XML_SetUserData(guard->parser, guard);
    XML_SetStartDoctypeDeclHandler(guard->parser, refuse_doctype);
    XML_SetEntityDeclHandler(guard->parser, refuse_entity);
}
