#include "server/documents/office/office_package.h"

#include <algorithm>
#include <cctype>
#include <utility>

#include "server/documents/office/xml_tree.h"

namespace nmt::server {
namespace {

bool blank(const std::string& text) {
  return std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isspace(c); });
}

class OfficeDocument : public Document {
 public:
  OfficeDocument(const std::string& bytes, const OfficeFormat& format, const DocumentLimits& limits)
      : format_(format), archive_(read_zip(bytes, limits)) {
    if (!archive_.find(format.required_part)) {
      throw DocumentError(400, std::string("the file is not a ") + format.what + " (it has no " +
                                   format.required_part + ")");
    }
    for (const std::string& name : format.parts(archive_)) {
      XmlDoc doc = parse_xml(archive_.find(name)->data, name, limits);
      // Every paragraph, outer before inner (preorder), found before any is rewritten.
      std::vector<xmlNode*> stack = {xmlDocGetRootElement(doc.get())};
      while (!stack.empty()) {
        xmlNode* node = stack.back();
        stack.pop_back();
        if (format.is_paragraph(node)) {
          InlineParagraph p = format.collect(node);
          if (!blank(p.text)) {
            texts_.push_back(p.text);
            paragraphs_.push_back(std::move(p));
          }
        }
        std::vector<xmlNode*> children;
        for (xmlNode* c = node->children; c; c = c->next) {
          if (c->type == XML_ELEMENT_NODE) children.push_back(c);
        }
        stack.insert(stack.end(), children.rbegin(), children.rend());
      }
      parts_.emplace_back(name, std::move(doc));
    }
  }

  std::string write(const std::vector<TranslatedText>& translations) override {
    if (written_) throw std::logic_error("a document is written once: its paragraphs were rewritten");
    written_ = true;
    if (translations.size() != paragraphs_.size()) throw std::logic_error("one translation per paragraph expected");
    for (size_t i = 0; i < paragraphs_.size(); ++i) {
      const std::vector<InlineSpan> placed = place_spans(paragraphs_[i], translations[i]);
      rebuild_paragraph(paragraphs_[i], translations[i].text, placed, format_.write);
    }
    for (auto& [name, doc] : parts_) archive_.find(name)->data = write_xml(doc.get());
    return write_zip(archive_);
  }

 private:
  const OfficeFormat& format_;
  ZipArchive archive_;
  std::vector<std::pair<std::string, XmlDoc>> parts_;
  std::vector<InlineParagraph> paragraphs_;
  bool written_ = false;
};

}  // namespace

std::unique_ptr<Document> read_office(const std::string& bytes, const OfficeFormat& format,
                                      const DocumentLimits& limits) {
  return std::make_unique<OfficeDocument>(bytes, format, limits);
}

xmlNode* new_element(xmlDoc* doc, const char* ns, const char* local) {
  xmlNs* declared = xmlSearchNsByHref(doc, xmlDocGetRootElement(doc), BAD_CAST ns);
  return xmlNewDocNode(doc, declared, BAD_CAST local, nullptr);
}

std::string text_of(const xmlNode* node) {
  std::string out;
  for (const xmlNode* c = node->children; c; c = c->next) {
    if ((c->type == XML_TEXT_NODE || c->type == XML_CDATA_SECTION_NODE) && c->content) {
      out += reinterpret_cast<const char*>(c->content);
    }
  }
  return out;
}

std::vector<std::string> numbered_entries(const ZipArchive& archive, const std::string& prefix,
                                          const std::string& suffix) {
  std::vector<std::pair<long, std::string>> found;
  for (const ZipEntry& e : archive.entries) {
    const std::string& n = e.name;
    if (n.size() <= prefix.size() + suffix.size() || n.compare(0, prefix.size(), prefix) != 0 ||
        n.compare(n.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    const std::string digits = n.substr(prefix.size(), n.size() - prefix.size() - suffix.size());
    if (digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c); })) {
      continue;
    }
    found.emplace_back(std::stol(digits), n);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& [number, name] : found) out.push_back(name);
  return out;
}

}  // namespace nmt::server
