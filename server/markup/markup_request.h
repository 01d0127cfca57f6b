#pragma once
// A Translate request with TranslateOptions.format "html" or "markdown", as the request
// pipeline (server/pipeline/request_pipeline) runs it: the texts' blocks (markup_document.h)
// become the texts of an inner request, translated like any plain text (split into sentences,
// spread over the decode loops, cached) with return_alignments on; the answer is each text
// written back with its blocks' translations, every inline tag placed through the alignments.
#include <memory>
#include <vector>

#include "nmt/v1/translation.pb.h"
#include "server/markup/markup_document.h"

namespace nmt::markup {

struct MarkupPlan {
  v1::TranslateRequest inner;  // the blocks as texts; format "text", return_alignments on
  std::vector<std::unique_ptr<MarkupDocument>> documents;  // one per text of the request
};

// Null for format "text" (or unset). Throws nmt::Error (kInvalidArgument) naming the option
// or text: an unknown format, num_hypotheses above 1 or return_alignments with markup (one
// translation per text, its alignments those of the blocks), a text that breaks a bound.
std::unique_ptr<MarkupPlan> plan_markup(const v1::TranslateRequest& request, const MarkupBounds& bounds);

// Turns the inner request's response (one translation per block) into the request's: one
// translation per text, its one hypothesis the text written back translated.
void apply_markup(const MarkupPlan& plan, v1::TranslateResponse* response);

}  // namespace nmt::markup
