// Each bound of an uploaded document refused with its reason, before anything is translated:
// a zip bomb (an entry's ratio, the archive's ratio, the decompressed total), too many
// entries, an entry that holds more than its header declares, deep XML (ours and libxml2's
// own cap), a billion-laughs DTD, an external entity, bytes that are no archive.
#include <gtest/gtest.h>

#include <string>

#include "server/documents/document.h"
#include "server/documents/office/xml_tree.h"
#include "server/documents/office/zip_archive.h"

namespace nmt::server {
namespace {

std::string zip_of(std::vector<ZipEntry> entries) { return write_zip(ZipArchive{std::move(entries)}); }

// The message of the DocumentError `f` throws (fails the test when it throws none).
template <typename F>
std::string refusal(F f, int* status = nullptr) {
  try {
    f();
  } catch (const DocumentError& e) {
    if (status) *status = e.status();
    return e.what();
  }
  ADD_FAILURE() << "no DocumentError";
  return "";
}

// Bytes that deflate little, as a real document's do.
std::string varied(size_t n) {
  std::string s;
  uint32_t x = 12345;
  for (size_t i = 0; i < n; ++i) s += static_cast<char>('a' + ((x = x * 1103515245 + 12345) >> 16) % 26);
  return s;
}

TEST(ArchiveBounds, ReadsWhatItWrote) {
  const std::string bytes = zip_of({{"mimetype", "application/vnd.oasis.opendocument.text", true},
                                    {"content.xml", varied(100000), false}});
  const ZipArchive a = read_zip(bytes, DocumentLimits{});
  ASSERT_EQ(a.entries.size(), 2u);
  EXPECT_EQ(a.entries[0].name, "mimetype");
  EXPECT_TRUE(a.entries[0].stored);
  EXPECT_FALSE(a.entries[1].stored);
  EXPECT_EQ(a.entries[1].data, varied(100000));
}

TEST(ArchiveBounds, ZipBombEntryRatio) {
  // 20 MB of zeros deflate to some 20 KB: 1000:1.
  const std::string bomb = zip_of({{"word/document.xml", std::string(20 << 20, '\0'), false}});
  EXPECT_LT(bomb.size(), 100000u);
  const std::string why = refusal([&] { read_zip(bomb, DocumentLimits{}); });
  EXPECT_NE(why.find("word/document.xml is compressed"), std::string::npos) << why;
  EXPECT_NE(why.find("documents.max_compression_ratio (100)"), std::string::npos) << why;
}

TEST(ArchiveBounds, DecompressedTotal) {
  DocumentLimits limits;
  limits.max_compression_ratio = 1e9;
  limits.max_decompressed_bytes = 1 << 20;
  const std::string bytes = zip_of({{"a.xml", std::string(600000, 'a'), false}, {"b.xml", std::string(600000, 'b'), false}});
  const std::string why = refusal([&] { read_zip(bytes, limits); });
  EXPECT_NE(why.find("documents.max_decompressed_bytes (1048576 bytes)"), std::string::npos) << why;
}

TEST(ArchiveBounds, WholeArchiveRatio) {
  // Many entries each under the per-entry floor, together far over the ratio.
  DocumentLimits limits;
  std::vector<ZipEntry> entries;
  for (int i = 0; i < 200; ++i) entries.push_back({"part" + std::to_string(i) + ".xml", std::string(60000, 'z'), false});
  const std::string why = refusal([&] { read_zip(zip_of(entries), limits); });
  EXPECT_NE(why.find(":1 in all, over documents.max_compression_ratio"), std::string::npos) << why;
}

TEST(ArchiveBounds, TooManyEntries) {
  std::vector<ZipEntry> entries;
  for (int i = 0; i < 1001; ++i) entries.push_back({"e" + std::to_string(i), "x", false});
  const std::string why = refusal([&] { read_zip(zip_of(entries), DocumentLimits{}); });
  EXPECT_NE(why.find("1001 entries, over documents.max_archive_entries (1000)"), std::string::npos) << why;
}

TEST(ArchiveBounds, EntryLargerThanDeclared) {
  // A stored entry's declared sizes patched down from 10 to 4 in both headers: libzip reads
  // the 4 declared bytes, then finds the CRC wrong, or more data than declared.
  std::string bytes = zip_of({{"a.txt", "0123456789", true}});
  size_t patched = 0;
  for (size_t at = bytes.find(std::string("\x0a\0\0\0\x0a\0\0\0", 8)); at != std::string::npos;
       at = bytes.find(std::string("\x0a\0\0\0\x0a\0\0\0", 8), at + 1)) {
    bytes[at] = 4;
    bytes[at + 4] = 4;
    ++patched;
  }
  ASSERT_EQ(patched, 2u);
  const std::string why = refusal([&] { read_zip(bytes, DocumentLimits{}); });
  EXPECT_NE(why.find("a.txt"), std::string::npos) << why;
}

TEST(ArchiveBounds, NotAnArchive) {
  int status = 0;
  const std::string why = refusal([&] { read_document("report.docx", "just some text", DocumentLimits{}); }, &status);
  EXPECT_EQ(status, 400);
  EXPECT_NE(why.find("not a readable zip archive"), std::string::npos) << why;
}

TEST(ArchiveBounds, FileSizeAndExtension) {
  DocumentLimits limits;
  limits.max_file_bytes = 10;
  int status = 0;
  std::string why = refusal([&] { read_document("a.txt", "0123456789A", limits); }, &status);
  EXPECT_EQ(status, 413);
  EXPECT_NE(why.find("11 bytes, over documents.max_file_bytes (10)"), std::string::npos) << why;
  why = refusal([&] { read_document("program.EXE", "MZ", limits); }, &status);
  EXPECT_EQ(status, 400);
  EXPECT_NE(why.find("file format not supported (.exe; supported: .txt, .srt, .html, .htm, .md, .docx, .odt, .pptx)"), std::string::npos) << why;
  why = refusal([&] { read_document("README", "x", limits); });
  EXPECT_NE(why.find("without an extension"), std::string::npos) << why;
}

TEST(XmlBounds, Depth) {
  DocumentLimits limits;
  auto nested = [](int depth) {
    std::string s;
    for (int i = 0; i < depth; ++i) s += "<a>";
    for (int i = 0; i < depth; ++i) s += "</a>";
    return s;
  };
  EXPECT_NO_THROW(parse_xml(nested(128), "ok.xml", limits));
  std::string why = refusal([&] { parse_xml(nested(129), "word/document.xml", limits); });
  EXPECT_NE(why.find("129 deep, over documents.max_xml_depth (128)"), std::string::npos) << why;
  // Past libxml2's own cap (256 without XML_PARSE_HUGE) the parser stops by itself.
  why = refusal([&] { parse_xml(nested(100000), "deep.xml", limits); });
  EXPECT_NE(why.find("deeper than documents.max_xml_depth (128)"), std::string::npos) << why;
}

TEST(XmlBounds, BillionLaughs) {
  std::string dtd = "<?xml version=\"1.0\"?>\n<!DOCTYPE lolz [\n<!ENTITY lol \"lol\">\n";
  for (int i = 1; i <= 9; ++i) {
    dtd += "<!ENTITY lol" + std::to_string(i) + " \"";
    for (int k = 0; k < 10; ++k) dtd += "&lol" + (i == 1 ? std::string() : std::to_string(i - 1)) + ";";
    dtd += "\">\n";
  }
  dtd += "]>\n<lolz>&lol9;</lolz>";
  const std::string why = refusal([&] { parse_xml(dtd, "content.xml", DocumentLimits{}); });
  EXPECT_NE(why.find("content.xml has a document type declaration"), std::string::npos) << why;
}

TEST(XmlBounds, ExternalEntity) {
  const std::string xxe = "<?xml version=\"1.0\"?><!DOCTYPE d [<!ENTITY x SYSTEM \"file:///etc/passwd\">]><d>&x;</d>";
  const std::string why = refusal([&] { parse_xml(xxe, "content.xml", DocumentLimits{}); });
  EXPECT_NE(why.find("document type declaration"), std::string::npos) << why;
  // An entity never declared is not well-formed (no DTD to find it in).
  const std::string undeclared = refusal([&] { parse_xml("<d>&x;</d>", "content.xml", DocumentLimits{}); });
  EXPECT_NE(undeclared.find("not well-formed (line 1"), std::string::npos) << undeclared;
}

TEST(XmlBounds, MalformedPartOfADocument) {
  const std::string bytes = zip_of({{"[Content_Types].xml", "<Types/>", false},
                                    {"word/document.xml", "<w:document xmlns:w=\"x\"><w:body>", false}});
  const std::string why = refusal([&] { read_document("a.docx", bytes, DocumentLimits{}); });
  EXPECT_NE(why.find("XML part word/document.xml is not well-formed"), std::string::npos) << why;
  const std::string missing = refusal([&] { read_document("a.pptx", bytes, DocumentLimits{}); });
  EXPECT_NE(missing.find("not a PowerPoint presentation (it has no ppt/presentation.xml)"), std::string::npos) << missing;
}

}  // namespace
}  // namespace nmt::server
