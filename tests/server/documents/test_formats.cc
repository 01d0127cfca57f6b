// Each format's texts and the file written from their translations, with hand-written
// translations and word alignments: a formatted run's words stay formatted where the
// alignments put them (reordered included), links and inline objects are kept once, the
// paragraph's properties stay, the rest of the archive is untouched; .srt keeps its
// numbers and timings, .txt its blank lines and line endings.
#include <gtest/gtest.h>

#include <string>

#include "server/documents/document.h"
#include "server/documents/office/xml_tree.h"
#include "server/documents/office/zip_archive.h"

namespace nmt::server {
namespace {

constexpr const char* kW = "xmlns:w=\"http://schemas.openxmlformats.org/wordprocessingml/2006/main\"";

std::string docx_with(const std::string& body) {
  const std::string document = std::string("<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n<w:document ") +
                               kW + "><w:body>" + body + "</w:body></w:document>";
  return write_zip(ZipArchive{{{"[Content_Types].xml", "<Types/>", false},
                               {"word/document.xml", document, false},
                               {"word/media/image1.png", std::string("\x89PNG\0\1\2", 7), true}}});
}

std::string part(const std::string& file, const std::string& name) {
  const ZipArchive a = read_zip(file, DocumentLimits{});
  const ZipEntry* e = a.find(name);
  return e ? e->data : "";
}

// The byte range of `word` in `text` (its first occurrence at or after `from`).
std::pair<size_t, size_t> at(const std::string& text, const std::string& word, size_t from = 0) {
  const size_t b = text.find(word, from);
  EXPECT_NE(b, std::string::npos) << word;
  return {b, b + word.size()};
}

// An alignment of `source_word` in `source` to `target_word` in `target`.
AlignedRange align(const std::string& source, const std::string& source_word, const std::string& target,
                   const std::string& target_word) {
  const auto s = at(source, source_word);
  const auto t = at(target, target_word);
  return {s.first, s.second, t.first, t.second};
}

TEST(DocxFormat, BoldWordStaysBoldWhereTheAlignmentsPutIt) {
  const std::string file = docx_with(
      "<w:p><w:pPr><w:jc w:val=\"center\"/></w:pPr><w:r><w:t xml:space=\"preserve\">A man is riding a </w:t></w:r>"
      "<w:r><w:rPr><w:b/></w:rPr><w:t>red</w:t></w:r><w:r><w:t xml:space=\"preserve\"> bike.</w:t></w:r></w:p>"
      "<w:p><w:r><w:t>   </w:t></w:r></w:p>");
  auto doc = read_document("a.docx", file, DocumentLimits{});
  ASSERT_EQ(doc->texts(), std::vector<std::string>{"A man is riding a red bike."});  // the blank one left alone
  const std::string src = doc->texts()[0];
  // The bold word moves to the front in the translation (made up for the test).
  const std::string tgt = "Rot ist das Fahrrad des Mannes.";
  TranslatedText t{tgt, {align(src, "red", tgt, "Rot"), align(src, "bike", tgt, "Fahrrad"), align(src, "man", tgt, "Mannes")}};
  const std::string xml = part(doc->write({t}), "word/document.xml");
  EXPECT_NE(xml.find("<w:pPr><w:jc w:val=\"center\"/></w:pPr>"), std::string::npos) << xml;
  EXPECT_NE(xml.find("<w:r><w:rPr><w:b/></w:rPr><w:t xml:space=\"preserve\">Rot</w:t></w:r>"), std::string::npos) << xml;
  EXPECT_NE(xml.find("<w:t xml:space=\"preserve\"> ist das Fahrrad des Mannes.</w:t>"), std::string::npos) << xml;
  EXPECT_EQ(xml.find("red"), std::string::npos) << xml;
  EXPECT_NE(xml.find("<w:t>   </w:t>"), std::string::npos) << xml;
}

TEST(DocxFormat, LinksFieldsAndBookmarksKeptOnce) {
  const std::string file = docx_with(
      "<w:p><w:bookmarkStart w:id=\"0\" w:name=\"b\"/><w:r><w:t xml:space=\"preserve\">See </w:t></w:r>"
      "<w:hyperlink r:id=\"rId5\" xmlns:r=\"http://schemas.openxmlformats.org/officeDocument/2006/relationships\">"
      "<w:r><w:rPr><w:i/></w:rPr><w:t>the page</w:t></w:r></w:hyperlink>"
      "<w:r><w:t xml:space=\"preserve\"> now</w:t><w:tab/><w:t>please.</w:t></w:r>"
      "<w:r><w:fldChar w:fldCharType=\"begin\"/></w:r><w:bookmarkEnd w:id=\"0\"/></w:p>");
  auto doc = read_document("a.docx", file, DocumentLimits{});
  ASSERT_EQ(doc->texts(), std::vector<std::string>{"See the page now\tplease."});
  const std::string src = doc->texts()[0];
  const std::string tgt = "Siehe die Seite jetzt\tbitte.";
  TranslatedText t{tgt, {align(src, "See", tgt, "Siehe"), align(src, "the", tgt, "die"), align(src, "page", tgt, "Seite"),
                         align(src, "now", tgt, "jetzt"), align(src, "please", tgt, "bitte"), align(src, ".", tgt, ".")}};
  const std::string out = doc->write({t});
  const std::string xml = part(out, "word/document.xml");
  auto count = [&](const std::string& s) {
    size_t n = 0;
    for (size_t p = xml.find(s); p != std::string::npos; p = xml.find(s, p + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("<w:hyperlink"), 1u) << xml;
  EXPECT_EQ(count("<w:bookmarkStart"), 1u) << xml;
  EXPECT_EQ(count("<w:bookmarkEnd"), 1u) << xml;
  EXPECT_EQ(count("w:fldCharType=\"begin\""), 1u) << xml;
  EXPECT_EQ(count("<w:tab/>"), 1u) << xml;
  EXPECT_NE(xml.find("<w:r><w:rPr><w:i/></w:rPr><w:t xml:space=\"preserve\">die Seite</w:t></w:r></w:hyperlink>"), std::string::npos) << xml;
  EXPECT_LT(xml.find("bookmarkStart"), xml.find("Siehe")) << xml;
  EXPECT_LT(xml.find("bitte."), xml.find("fldChar")) << xml;
  // The other entries as they were.
  EXPECT_EQ(part(out, "word/media/image1.png"), std::string("\x89PNG\0\1\2", 7));
  EXPECT_THROW(doc->write({t}), std::logic_error);  // its paragraphs are rewritten once
}

TEST(OdtFormat, NestedSpansAndNotes) {
  const std::string content =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?><office:document-content "
      "xmlns:office=\"urn:oasis:names:tc:opendocument:xmlns:office:1.0\" "
      "xmlns:text=\"urn:oasis:names:tc:opendocument:xmlns:text:1.0\"><office:body><office:text>"
      "<text:h text:outline-level=\"1\">Two dogs</text:h>"
      "<text:p text:style-name=\"P1\">Two <text:span text:style-name=\"Bold\">black dogs</text:span> play"
      "<text:note><text:note-body><text:p>A note.</text:p></text:note-body></text:note> in the snow.</text:p>"
      "</office:text></office:body></office:document-content>";
  const std::string file = write_zip(ZipArchive{{{"mimetype", "application/vnd.oasis.opendocument.text", true},
                                                 {"content.xml", content, false}}});
  auto doc = read_document("a.odt", file, DocumentLimits{});
  ASSERT_EQ(doc->texts(), (std::vector<std::string>{"Two dogs", "Two black dogs play in the snow.", "A note."}));
  const std::string s = doc->texts()[1];
  const std::string t1 = "Zwei schwarze Hunde spielen im Schnee.";
  const std::string out = doc->write({{"Zwei Hunde", {}},
                                      {t1, {align(s, "Two", t1, "Zwei"), align(s, "black", t1, "schwarze"),
                                            align(s, "dogs", t1, "Hunde"), align(s, "play", t1, "spielen"),
                                            align(s, "snow", t1, "Schnee")}},
                                      {"Eine Notiz.", {}}});
  const ZipArchive a = read_zip(out, DocumentLimits{});
  EXPECT_EQ(a.entries[0].name, "mimetype");  // first and stored, as ODF requires
  EXPECT_TRUE(a.entries[0].stored);
  const std::string xml = a.find("content.xml")->data;
  EXPECT_NE(xml.find("<text:h text:outline-level=\"1\">Zwei Hunde</text:h>"), std::string::npos) << xml;
  EXPECT_NE(xml.find("Zwei <text:span text:style-name=\"Bold\">schwarze Hunde</text:span> spielen"), std::string::npos) << xml;
  EXPECT_NE(xml.find("<text:note><text:note-body><text:p>Eine Notiz.</text:p></text:note-body></text:note>"), std::string::npos) << xml;
}

TEST(PptxFormat, RunsAndEndProperties) {
  const std::string slide =
      "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?><p:sld "
      "xmlns:a=\"http://schemas.openxmlformats.org/drawingml/2006/main\" "
      "xmlns:p=\"http://schemas.openxmlformats.org/presentationml/2006/main\"><p:cSld><p:spTree><p:sp><p:txBody>"
      "<a:p><a:r><a:rPr lang=\"en-US\"/><a:t>A man is riding a </a:t></a:r><a:r><a:rPr lang=\"en-US\" b=\"1\"/>"
      "<a:t>bike</a:t></a:r><a:r><a:rPr lang=\"en-US\"/><a:t>.</a:t></a:r><a:endParaRPr lang=\"en-US\"/></a:p>"
      "</p:txBody></p:sp></p:spTree></p:cSld></p:sld>";
  const std::string file = write_zip(ZipArchive{{{"ppt/presentation.xml", "<p:presentation/>", false},
                                                 {"ppt/slides/slide10.xml", "<p:sld xmlns:a=\"http://schemas.openxmlformats.org/drawingml/2006/main\"><a:p><a:r><a:t>Later.</a:t></a:r></a:p></p:sld>", false},
                                                 {"ppt/slides/slide2.xml", slide, false}}});
  auto doc = read_document("deck.PPTX", file, DocumentLimits{});
  ASSERT_EQ(doc->texts(), (std::vector<std::string>{"A man is riding a bike.", "Later."}));  // slide 2 before 10
  const std::string s = doc->texts()[0];
  const std::string t = "Ein Mann fährt Fahrrad.";
  const std::string out = doc->write({{t, {align(s, "man", t, "Mann"), align(s, "riding", t, "fährt"), align(s, "bike", t, "Fahrrad"), align(s, ".", t, ".")}},
                                      {"Später.", {}}});
  const std::string xml = part(out, "ppt/slides/slide2.xml");
  EXPECT_NE(xml.find("<a:r><a:rPr lang=\"en-US\" b=\"1\"/><a:t>Fahrrad</a:t></a:r>"), std::string::npos) << xml;
  EXPECT_NE(xml.find("</a:r><a:endParaRPr lang=\"en-US\"/></a:p>"), std::string::npos) << xml;
  EXPECT_EQ(xml.find("bike"), std::string::npos) << xml;
  EXPECT_NE(part(out, "ppt/slides/slide10.xml").find("<a:t>Später.</a:t>"), std::string::npos);
}

TEST(SubtitlesFormat, CuesTranslatedTimingKept) {
  const std::string srt =
      "1\r\n00:00:01,000 --> 00:00:02,500\r\nA man is riding\r\na bike.\r\n\r\n"
      "2\r\n00:00:03,000 --> 00:00:04,000\r\nTwo dogs play.\r\n";
  auto doc = read_document("film.srt", srt, DocumentLimits{});
  ASSERT_EQ(doc->texts(), (std::vector<std::string>{"A man is riding a bike.", "Two dogs play."}));
  EXPECT_EQ(doc->write({{"Ein Mann fährt Fahrrad.", {}}, {"Zwei Hunde spielen.", {}}}),
            "1\r\n00:00:01,000 --> 00:00:02,500\r\nEin Mann fährt Fahrrad.\r\n\r\n"
            "2\r\n00:00:03,000 --> 00:00:04,000\r\nZwei Hunde spielen.\r\n");
  try {
    read_document("film.srt", "1\nnot a timing\ntext\n", DocumentLimits{});
    ADD_FAILURE() << "no refusal";
  } catch (const DocumentError& e) {
    EXPECT_NE(std::string(e.what()).find("line 2 should be a cue's timing"), std::string::npos) << e.what();
  }
}

TEST(PlainTextFormat, LinesAndEndingsKept) {
  auto doc = read_document("notes.txt", "A man rides.\r\n\r\n  \nTwo dogs play.", DocumentLimits{});
  ASSERT_EQ(doc->texts(), (std::vector<std::string>{"A man rides.", "Two dogs play."}));
  EXPECT_EQ(doc->write({{"Ein Mann fährt.", {}}, {"Zwei Hunde spielen.", {}}}), "Ein Mann fährt.\r\n\r\n  \nZwei Hunde spielen.");
  try {
    read_document("notes.txt", "ok \xff\xfe", DocumentLimits{});
    ADD_FAILURE() << "no refusal";
  } catch (const DocumentError& e) {
    EXPECT_NE(std::string(e.what()).find("not UTF-8 text (byte 3)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nmt::server
