#include "server/documents/office/xml_tree.h"

#include <libxml/parser.h>
#include <libxml/xmlerror.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace nmt::server {
namespace {

[[noreturn]] void refuse(const std::string& message) { throw DocumentError(400, message); }

// Set on the parser (its _private) when a document type declaration starts: the parse stops
// there, before any entity is declared, let alone expanded.
void refuse_doctype(void* context, const xmlChar*, const xmlChar*, const xmlChar*) {
  auto* ctxt = static_cast<xmlParserCtxt*>(context);
  ctxt->_private = ctxt;  // any non-null mark
  xmlStopParser(ctxt);
}

void quiet(void*, const char*, ...) {}  // errors come back through xmlCtxtGetLastError

struct CtxtFree {
  void operator()(xmlParserCtxt* c) const { xmlFreeParserCtxt(c); }
};

// The deepest element nesting, walked without recursion.
int depth_of(xmlNode* root) {
  int deepest = 0;
  std::vector<std::pair<xmlNode*, int>> stack = {{root, 1}};
  while (!stack.empty()) {
    auto [node, depth] = stack.back();
    stack.pop_back();
    deepest = std::max(deepest, depth);
    for (xmlNode* c = node->children; c; c = c->next) {
      if (c->type == XML_ELEMENT_NODE) stack.push_back({c, depth + 1});
    }
  }
  return deepest;
}

}  // namespace

XmlDoc parse_xml(const std::string& text, const std::string& part, const DocumentLimits& limits) {
  // libxml2's global state, set up once before threads use it (its lazy set-up is not safe
  // from two threads at once).
  static const bool initialized = (xmlInitParser(), true);
  (void)initialized;
  xmlSetGenericErrorFunc(nullptr, quiet);  // per thread: nothing printed to stderr
  std::unique_ptr<xmlParserCtxt, CtxtFree> ctxt(xmlNewParserCtxt());
  if (!ctxt) throw std::bad_alloc();
  ctxt->sax->internalSubset = refuse_doctype;
  ctxt->_private = nullptr;
  // No XML_PARSE_NOENT (entities stay references), no DTDLOAD/DTDATTR/DTDVALID, no HUGE.
  const int options = XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING;
  XmlDoc doc(xmlCtxtReadMemory(ctxt.get(), text.data(), static_cast<int>(text.size()), part.c_str(),
                               nullptr, options));
  if (ctxt->_private != nullptr) {
    refuse("XML part " + part + " has a document type declaration: DTDs and entity declarations "
           "are refused (no entity is expanded in a document)");
  }
  if (!doc || !ctxt->wellFormed) {
    const xmlError* e = xmlCtxtGetLastError(ctxt.get());
    std::string why = e && e->message ? e->message : "not well-formed";
    while (!why.empty() && why.back() == '\n') why.pop_back();
    if (e && e->code == XML_ERR_INTERNAL_ERROR && why.find("depth") != std::string::npos) {
      refuse("XML part " + part + " nests elements deeper than documents.max_xml_depth (" +
             std::to_string(limits.max_xml_depth) + ")");
    }
    refuse("XML part " + part + " is not well-formed (line " + std::to_string(e ? e->line : 0) + ": " + why + ")");
  }
  xmlNode* root = xmlDocGetRootElement(doc.get());
  if (!root) refuse("XML part " + part + " has no root element");
  const int depth = depth_of(root);
  if (depth > limits.max_xml_depth) {
    refuse("XML part " + part + " nests elements " + std::to_string(depth) +
           " deep, over documents.max_xml_depth (" + std::to_string(limits.max_xml_depth) + ")");
  }
  return doc;
}

std::string write_xml(xmlDoc* doc) {
  xmlChar* memory = nullptr;
  int size = 0;
  xmlDocDumpMemoryEnc(doc, &memory, &size, "UTF-8");
  if (!memory) throw std::bad_alloc();
  std::string out(reinterpret_cast<const char*>(memory), static_cast<size_t>(size));
  xmlFree(memory);
  return out;
}

bool is_element(const xmlNode* node, const char* ns, const char* local) {
  return node && node->type == XML_ELEMENT_NODE && node->ns && node->ns->href &&
         std::strcmp(reinterpret_cast<const char*>(node->name), local) == 0 &&
         std::strcmp(reinterpret_cast<const char*>(node->ns->href), ns) == 0;
}

xmlNode* child_element(xmlNode* node, const char* ns, const char* local) {
  for (xmlNode* c = node ? node->children : nullptr; c; c = c->next) {
    if (is_element(c, ns, local)) return c;
  }
  return nullptr;
}

}  // namespace nmt::server
