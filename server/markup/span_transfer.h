#pragma once
// Inline markup carried across a translation (docs/server.md, "Markup"): the spans a block's
// markup covered in the source text (an HTML <b>, a Markdown emphasis, a .docx run) are
// placed on the target text through the word alignments, each span kept exactly once and the
// nesting of the source kept. A pure function: the HTML and Markdown paths and the documents
// (POST /translate_file) all call it with the texts and alignments of one block.
//
// The idea is bergamot-translator's (src/translator/html.cpp): every target token takes the
// markup of the source token it is aligned to, and the runs of a tag are then made
// contiguous. Here it is done on a tree of spans, level by level, so that the result always
// nests (server/markup/README.md has the rules).
#include <cstddef>
#include <string_view>
#include <vector>

namespace nmt::markup {

// Bytes [begin, end) of a text; begin == end is a position.
struct ByteRange {
  std::size_t begin = 0;
  std::size_t end = 0;
  bool operator==(const ByteRange& o) const { return begin == o.begin && end == o.end; }
};

// One inline element of a block. `parent` is the index of the enclosing span in the same
// vector (smaller than the span's own index) or -1 at the top; a child's range lies within
// its parent's and siblings do not overlap. An empty range is an element that covers no text
// (a void element such as <br> or <img>, or an element with nothing inside) at that position.
// `id` is the caller's (which element this is); it is carried through untouched.
struct Span {
  ByteRange range;
  int parent = -1;
  int id = 0;
};

// One aligned pair: a target token and the source token it was translated from. The engine
// gives one pair per target token (Hypothesis::alignments, model/translator.h); where a
// target range appears in several pairs the first is used. Target ranges must not overlap
// (distinct tokens); empty target ranges are ignored.
struct AlignmentLink {
  ByteRange source;
  ByteRange target;
};

// The spans on the target text: same size, order, parents and ids as `spans`, each range
// now in `target`. Every child lies within its parent and siblings do not overlap, whatever
// the alignments say. Throws nmt::Error (kInvalidArgument) naming what is wrong when a span
// or link lies outside its text, a parent index is not an earlier span, a child leaves its
// parent, siblings overlap, or target tokens overlap.
std::vector<Span> transfer_spans(std::string_view source, const std::vector<Span>& spans,
                                 std::string_view target,
                                 const std::vector<AlignmentLink>& links);

// Whether a span written as it is (a void element, code, translate="no", an image) stood
// apart from the words beside it in the source: whitespace before it, after it.
struct Apart {
  bool before = false;
  bool after = false;
  bool operator==(const Apart& o) const { return before == o.before && after == o.after; }
};

// The spaces a serializer writes beside such a span placed at `pos` of `target` (an empty
// span of transfer_spans) so that it stays apart where the source had it apart: a space
// before it where the source had whitespace before it and the target has a word right
// before `pos`, likewise after; none before it at the text's start nor after it at its end
// (the block's own leading and trailing whitespace is the serializer's) and none where the
// target already has one, so a space is never lost nor doubled. Placing moves a span to the other side of a word
// ("run <code>ls</code> now" -> "NOW RUN" + code at its end) and this keeps it apart there.
Apart spaces_beside(std::string_view target, std::size_t pos, Apart source);

// Children of a span (or of the top, parent -1) in the order they appear in the target:
// by begin, then end (an empty span before a nonempty one that starts where it is), then
// index. The serializers of markup (server/markup, the documents) write tags in this order.
std::vector<int> children_in_order(const std::vector<Span>& spans, int parent);

}  // namespace nmt::markup
