#include "server/markup/markup_request.h"

#include <algorithm>

#include "model/error.h"

namespace nmt::markup {
namespace {

const char* format_name(Format f) { return f == Format::kHtml ? "html" : "markdown"; }

// A block's translation and its alignments (byte ranges in the block and in the translation,
// model/translator.h), one per target token; tokens of no text and any overlap dropped (a
// target token is one place in the text).
TranslatedBlock translated_block(const v1::Translation& t) {
  TranslatedBlock block;
  if (t.hypotheses_size() == 0) return block;
  const v1::Hypothesis& h = t.hypotheses(0);
  block.text = h.text();
  for (const v1::Hypothesis::Alignment& a : h.alignments()) {
    if (a.target_end() <= a.target_begin() || a.target_end() > block.text.size()) continue;
    block.links.push_back({{a.source_begin(), a.source_end()}, {a.target_begin(), a.target_end()}});
  }
  std::stable_sort(block.links.begin(), block.links.end(), [](const AlignmentLink& x, const AlignmentLink& y) {
    return x.target.begin < y.target.begin;
  });
  std::vector<AlignmentLink> apart;
  for (const AlignmentLink& l : block.links)
    if (apart.empty() || l.target.begin >= apart.back().target.end) apart.push_back(l);
  block.links = std::move(apart);
  return block;
}

}  // namespace

std::unique_ptr<MarkupPlan> plan_markup(const v1::TranslateRequest& request, const MarkupBounds& bounds) {
  const Format format = parse_format(request.options().format());
  if (format == Format::kText) return nullptr;
  const std::string name = format_name(format);
  if (request.options().has_num_hypotheses() && request.options().num_hypotheses() > 1)
    throw Error(ErrorCode::kInvalidArgument, "options.num_hypotheses: format " + name +
                                                 " returns one translation per text (ask for 1)");
  if (request.options().return_alignments())
    throw Error(ErrorCode::kInvalidArgument,
                "options.return_alignments: not with format " + name +
                    " (the alignments would be of the text without its markup)");
  auto plan = std::make_unique<MarkupPlan>();
  plan->inner = request;
  plan->inner.clear_texts();
  plan->inner.mutable_options()->clear_format();
  plan->inner.mutable_options()->set_return_alignments(true);
  for (int i = 0; i < request.texts_size(); ++i) {
    plan->documents.push_back(
        parse_markup(format, request.texts(i), bounds, "texts[" + std::to_string(i) + "]"));
    for (const Block& b : plan->documents.back()->blocks()) plan->inner.add_texts(b.text);
  }
  return plan;
}

void apply_markup(const MarkupPlan& plan, v1::TranslateResponse* response) {
  google::protobuf::RepeatedPtrField<v1::Translation> blocks;
  blocks.Swap(response->mutable_translations());
  int next = 0;
  for (const auto& doc : plan.documents) {
    std::vector<TranslatedBlock> translated;
    for (std::size_t b = 0; b < doc->blocks().size(); ++b) {
      if (next >= blocks.size())
        throw Error(ErrorCode::kInternal, "markup: fewer translations than blocks");
      translated.push_back(translated_block(blocks.Get(next++)));
    }
    response->add_translations()->add_hypotheses()->set_text(doc->render(translated));
  }
}

}  // namespace nmt::markup
