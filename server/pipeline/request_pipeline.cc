#include "server/pipeline/request_pipeline.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <mutex>
#include <random>
#include <utility>

#include "server/glossary/request_glossary.h"
#include "server/observability/logging.h"
#include "server/observability/trace_context.h"
#include "server/pipeline/request_languages.h"
#include "server/pipeline/status.h"

namespace nmt::server {
namespace {

// gRPC cancels a call when its deadline passes, which races the scheduler's own expiry of
// the job: a job cancelled this close to (or after) its deadline counts as expired, as the
// client sees it.
constexpr auto kDeadlineSlack = std::chrono::milliseconds(5);

std::string random_prefix() {
  std::random_device rd;
  char buf[16];
  snprintf(buf, sizeof buf, "%08x", static_cast<unsigned>(rd()));
  return buf;
}

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double round2(double ms) { return std::round(ms * 100) / 100; }

// "ipv4:1.2.3.4:5678" -> "1.2.3.4", "ipv6:[::1]:5678" -> "::1"; others as they are.
std::string peer_host(const std::string& peer) {
  std::string p = peer;
  for (const char* scheme : {"ipv4:", "ipv6:"}) {
    if (p.rfind(scheme, 0) == 0) {
      p = p.substr(5);
      if (!p.empty() && p.front() == '[') return p.substr(1, p.find(']') - 1);
      const size_t colon = p.rfind(':');
      return colon == std::string::npos ? p : p.substr(0, colon);
    }
  }
  return p;
}

}  // namespace

Caller identify_caller(std::shared_ptr<const ApiKey> key, const std::string& peer, const std::string& x_tenant,
                       bool trust_tenant_header) {
  Caller caller;
  if (key) {
    caller.tenant = key->tenant;
    caller.weight = key->weight;
  } else {
    caller.tenant = "peer:" + peer_host(peer);
  }
  if (trust_tenant_header && !x_tenant.empty()) caller.tenant = "tenant:" + x_tenant;
  caller.key = std::move(key);
  return caller;
}

namespace {

// return_alignments: h's alignments (token indices from the decode loop) with their byte
// ranges, set here from the sentence's text and h's, shifted to where the sentence and its
// translation stand in the whole texts (split_sentences).
void add_alignments(const ServedModel& model, const AdmittedRequest& admitted, size_t index, size_t source_offset,
                    size_t target_offset, int sentence, const Hypothesis& h, v1::Hypothesis* out) {
  Hypothesis spans = h;
  set_alignment_spans(model.tokenizer(), admitted.sources.at(index), admitted.encode_language, &spans);
  for (const TokenAlignment& a : spans.alignments) {
    v1::Hypothesis::Alignment* x = out->add_alignments();
    x->set_target_token(a.target_token);
    x->set_source_token(a.source_token);
    x->set_source_begin(uint32_t(source_offset + a.source_begin));
    x->set_source_end(uint32_t(source_offset + a.source_end));
    x->set_target_begin(uint32_t(target_offset + a.target_begin));
    x->set_target_end(uint32_t(target_offset + a.target_end));
    x->set_sentence(sentence);
  }
}

}  // namespace

bool CallPermit::acquire() {
  if (held_) return true;
  if (pipeline_.calls_.fetch_add(1, std::memory_order_relaxed) >= pipeline_.max_calls_) {
    pipeline_.calls_.fetch_sub(1, std::memory_order_relaxed);
    return false;
  }
  pipeline_.metrics_.inflight_gauge().Increment();
  held_ = true;
  return true;
}

void CallPermit::release() {
  if (!held_) return;
  held_ = false;
  pipeline_.metrics_.inflight_gauge().Decrement();
  pipeline_.calls_.fetch_sub(1, std::memory_order_relaxed);
}

grpc::Status CallPermit::busy() const {
  return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                      "server busy: " + std::to_string(pipeline_.max_calls_) +
                          " calls in flight (server.max_concurrent_calls)");
}

RequestPipeline::RequestPipeline(ModelRegistry& models, const Limits& limits, Metrics& metrics,
                                 int max_concurrent_calls, size_t cache_bytes)
    : models_(models),
      validator_(limits),
      metrics_(metrics),
      id_prefix_(random_prefix()),
      max_calls_(max_concurrent_calls),
      cache_(cache_bytes, &metrics.registry()),
      quotas_(metrics.registry()) {}

RequestRecord RequestPipeline::begin(const char* method, const v1::TranslateRequest& request,
                                     const std::string& traceparent) {
  RequestRecord record;
  record.method = method;
  record.traceparent = accept_traceparent(traceparent);
  record.start = Clock::now();
  record.sentences = size_t(request.texts_size());
  // An id that cannot be echoed is replaced here and refused by the validator.
  record.request_id = valid_request_id(request.request_id())
                          ? request.request_id()
                          : id_prefix_ + "-" + std::to_string(next_id_.fetch_add(1));
  return record;
}

void RequestPipeline::admit(const v1::TranslateRequest& request, Clock::time_point deadline,
                            RequestRecord& record, AdmittedRequest& admitted, JobCallback done,
                            Admission then, Caller caller) {
  record.tenant = caller.tenant;
  models_.acquire_async(
      request.model(), [this, &request, deadline, &record, &admitted, done = std::move(done),
                        then = std::move(then), caller = std::move(caller)](
                           std::shared_ptr<ServedModel> model, std::exception_ptr error) mutable {
        std::shared_ptr<Job> job;
        grpc::Status refused;
        try {
          if (error) std::rethrow_exception(error);
          job = submit(request, std::move(model), deadline, record, admitted, std::move(done), caller);
        } catch (const Error& e) {
          refused = to_grpc_status(e);
        } catch (const std::exception& e) {
          refused = grpc::Status(grpc::StatusCode::INTERNAL, e.what());
        }
        then(std::move(job), refused);
      });
}

std::shared_ptr<Job> RequestPipeline::submit(const v1::TranslateRequest& received,
                                             std::shared_ptr<ServedModel> model,
                                             Clock::time_point deadline, RequestRecord& record,
                                             AdmittedRequest& admitted, JobCallback done,
                                             const Caller& caller) {
  admitted.model = std::move(model);
  record.model = admitted.model->name;
  admitted.scheduler = admitted.model->least_loaded().scheduler.get();
  // format html / markdown: the texts' blocks are translated as plain texts in their place
  // (server/markup); the texts are checked (characters, UTF-8) before anything parses them.
  if (markup::parse_format(received.options().format()) != markup::Format::kText) {
    validator_.check_texts({received.texts().begin(), received.texts().end()});
    admitted.markup = markup::plan_markup(received, {validator_.limits().max_markup_depth});
    if (admitted.markup->inner.texts_size() == 0) {  // only markup: nothing to translate
      const QuotaVerdict quota = quotas_.charge(caller.key.get(), int64_t(count_characters(received)));
      if (!quota.allowed) throw Error(ErrorCode::kResourceExhausted, quota.message);
      JobResult result;
      result.ok = true;
      done(std::move(result));
      return nullptr;
    }
  }
  const v1::TranslateRequest& request = admitted.markup ? admitted.markup->inner : received;
  // The request against its model: its source and target languages resolve against the
  // model's before anything is tokenized; its texts are tokenized in its source language and
  // split by that language's rules, and its options become the DecodeOptions the model
  // decodes with, forcing its target language's token.
  const RequestLanguages languages = resolve_request_languages(request, *admitted.model);
  const Tokenizer& tokenizer = admitted.model->tokenizer();
  const SentenceSplitter* splitter = nullptr;  // looked up when a request splits
  ValidRequest valid = validator_.validate(
      request, [&](const std::string& text) { return tokenizer.encode(text, languages.encode_language); },
      [&](const std::string& text) {
        if (!splitter) splitter = &SentenceSplitter::for_language(languages.split_locale);
        return splitter->split(text);
      },
      [&](const std::string& text) { return tokenizer.encode_target(text); });
  valid.options.forced_bos_id = languages.forced_bos_id;
  // Repetition controls: suppressed texts in the model's target tokens, checked against its
  // target vocabulary (before the quota charge: a refused request costs nothing).
  const ModelConfig& model_config = admitted.model->replicas.front()->translators.front()->config();
  RequestValidator::repetition_controls(
      request.options(), [&](const std::string& text) { return tokenizer.encode_target(text); },
      model_config.target_vocab_size, model_config.eos_id, &valid.options);
  if (!valid.options.target_prefix.empty()) {  // against the model: </s>, the vocabulary, the length
    admitted.model->replicas.front()->translators.front()->check_target_ids(valid.options.target_prefix,
                                                                             "options.target_prefix");
    valid.options.validate_prompt();
  }
  // Glossary (server/glossary): the request's entries and the model's, per sentence the target
  // terms of those whose source occurs in it (the sentences as split, in source_ids' order).
  std::vector<std::vector<std::vector<int>>> phrases = request_phrases(
      request, valid.split, admitted.model->glossary, validator_.limits(),
      [&](const std::string& text) { return tokenizer.encode_target(text); }, valid.options);
  record.input_tokens = valid.input_tokens;
  record.sentences = valid.source_ids.size();
  admitted.return_scores = request.options().return_scores();
  admitted.return_token_ids = request.options().return_token_ids();
  admitted.split = std::move(valid.split);
  if (valid.options.return_alignments) {  // the texts the byte ranges are in
    admitted.return_alignments = true;
    admitted.encode_language = languages.encode_language;
    if (admitted.split.empty()) {
      admitted.sources.assign(request.texts().begin(), request.texts().end());
    } else {
      for (const SplitText& t : admitted.split) admitted.sources.insert(admitted.sources.end(), t.sentences.begin(), t.sentences.end());
    }
  }
  // Charged once the request is known to be valid: a malformed one costs its key nothing.
  const QuotaVerdict quota = quotas_.charge(caller.key.get(), int64_t(count_characters(received)));
  if (!quota.allowed) throw Error(ErrorCode::kResourceExhausted, quota.message);
  return decode(std::move(valid.source_ids), valid.options, *admitted.model, *admitted.scheduler, deadline,
                std::move(done), caller, std::move(phrases));
}

std::shared_ptr<Job> RequestPipeline::decode(std::vector<std::vector<int>> source_ids, const DecodeOptions& options,
                                             const ServedModel& model, Scheduler& scheduler,
                                             Clock::time_point deadline, JobCallback done, const Caller& caller,
                                             std::vector<std::vector<std::vector<int>>> glossary) {
  const QueueTenant tenant{caller.tenant, caller.weight};
  // The queue's refusals (the tenant's share, the queue full) counted by key: nmt_queue_refusals_total.
  auto submit = [&](std::vector<std::vector<int>> ids, JobCallback then,
                    std::vector<std::vector<std::vector<int>>> phrases) {
    try {
      return scheduler.submit(std::move(ids), options, deadline, std::move(then), tenant, std::move(phrases));
    } catch (const Error& e) {
      if (e.code() == ErrorCode::kResourceExhausted) metrics_.queue_refusal(caller.key ? caller.key->label() : "none");
      throw;
    }
  };
  if (!cache_.enabled() || !TranslationCache::cacheable(options))
    return submit(std::move(source_ids), std::move(done), std::move(glossary));
  // Per sentence (after splitting): the hits are answered from the cache, the misses decoded.
  struct Parts {
    std::vector<Translation> translations;  // every sentence's, the hits filled in
    std::vector<size_t> missed;             // the decoded ones' places
    std::vector<std::string> keys;          // theirs
  };
  auto parts = std::make_shared<Parts>();
  parts->translations.resize(source_ids.size());
  std::vector<std::vector<int>> misses;
  std::vector<std::vector<std::vector<int>>> missed_glossary;
  DecodeOptions keyed = options;  // with each sentence's glossary phrases: they are in its key
  for (size_t i = 0; i < source_ids.size(); ++i) {
    if (!glossary.empty()) keyed.glossary_phrases = glossary[i];
    std::string key = TranslationCache::key(model.generation, keyed, source_ids[i]);
    if (std::optional<Translation> hit = cache_.find(model.name, model.generation, key)) {
      parts->translations[i] = std::move(*hit);
      continue;
    }
    parts->missed.push_back(i);
    parts->keys.push_back(std::move(key));
    misses.push_back(std::move(source_ids[i]));
    if (!glossary.empty()) missed_glossary.push_back(std::move(glossary[i]));
  }
  if (misses.empty()) {
    JobResult result;
    result.ok = true;
    result.translations = std::move(parts->translations);
    done(std::move(result));
    return nullptr;
  }
  const std::string name = model.name;
  const uint64_t generation = model.generation;
  return submit(
      std::move(misses),
      [this, parts, name, generation, done = std::move(done)](JobResult result) {
        if (result.ok) {
          for (size_t j = 0; j < parts->missed.size(); ++j) {
            cache_.insert(name, generation, parts->keys[j], result.translations[j]);
            parts->translations[parts->missed[j]] = std::move(result.translations[j]);
          }
          result.translations = std::move(parts->translations);
        }
        done(std::move(result));
      },
      std::move(missed_glossary));
}

grpc::Status RequestPipeline::respond(const AdmittedRequest& admitted, const JobResult& result,
                                      Clock::time_point deadline, RequestRecord& record,
                                      v1::TranslateResponse* response) {
  if (!result.ok) {
    if (result.code == ErrorCode::kCancelled && Clock::now() + kDeadlineSlack >= deadline) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          "deadline exceeded before the translation finished");
    }
    return grpc::Status(to_grpc_code(result.code), result.message);
  }
  response->set_request_id(record.request_id);
  response->set_model(record.model);
  // return_alignments: sentence `index` of the decoded ones, its source at source_offset of
  // the request's text and its best translation at target_offset of the joined one.
  struct AlignmentPlace {
    size_t index = 0, source_offset = 0, target_offset = 0;
    int sentence = 0;
  };
  auto fill = [&](const Translation& t, google::protobuf::RepeatedPtrField<v1::Hypothesis>* out,
                  const AlignmentPlace& place) {
    for (const Hypothesis& h : t.hypotheses) {
      v1::Hypothesis* hyp = out->Add();
      hyp->set_text(h.text);
      if (admitted.return_scores) {
        hyp->set_score(h.score);
        hyp->mutable_token_scores()->Add(h.token_scores.begin(), h.token_scores.end());
      }
      if (admitted.return_token_ids) hyp->mutable_token_ids()->Add(h.ids.begin(), h.ids.end());
      if (admitted.return_alignments && !h.alignments.empty())
        add_alignments(*admitted.model, admitted, place.index, place.source_offset, place.target_offset,
                       place.sentence, h, hyp);
    }
    if (!t.hypotheses.empty())
      record.output_tokens += static_cast<int64_t>(t.hypotheses[0].ids.size());
  };
  if (admitted.split.empty()) {
    for (size_t i = 0; i < result.translations.size(); ++i) {
      fill(result.translations[i], response->add_translations()->mutable_hypotheses(), {i, 0, 0, 0});
    }
  } else {
    // result.translations holds every text's sentences, in order.
    size_t next = 0;
    for (const SplitText& text : admitted.split) {
      v1::Translation* out = response->add_translations();
      std::vector<std::string> best;
      AlignmentPlace place;
      for (size_t s = 0; s < text.sentences.size(); ++s) {
        const std::string& source = text.sentences[s];
        place.index = next;
        place.source_offset += text.gaps[s].size();
        place.target_offset += text.gaps[s].size();
        place.sentence = int(s);
        const Translation& t = result.translations[next++];
        v1::SentenceTranslation* sentence = out->add_sentences();
        sentence->set_source(source);
        fill(t, sentence->mutable_hypotheses(), place);
        best.push_back(t.hypotheses.empty() ? std::string() : t.hypotheses[0].text);
        place.source_offset += source.size();
        place.target_offset += best.back().size();
      }
      if (text.sentences.size() == 1) {
        // A text of one sentence answers as it would unsplit: its n-best, scores and ids
        // (its whitespace kept around each), so that splitting by default changes nothing
        // for a client that sends sentences.
        for (const v1::Hypothesis& h : out->sentences(0).hypotheses()) {
          v1::Hypothesis* joined = out->add_hypotheses();
          *joined = h;
          joined->set_text(text.join({h.text()}));
        }
      } else {
        v1::Hypothesis* joined = out->add_hypotheses();
        joined->set_text(text.join(best));
        // return_alignments: the sentences' best alignments, in the whole texts already
        for (const v1::SentenceTranslation& s : out->sentences()) {
          if (s.hypotheses_size() > 0) joined->mutable_alignments()->MergeFrom(s.hypotheses(0).alignments());
        }
      }
    }
  }
  if (admitted.markup) {  // the blocks' translations written back into the texts
    try {
      markup::apply_markup(*admitted.markup, response);
    } catch (const Error& e) {
      return to_grpc_status(e);
    }
  }
  response->set_input_tokens(record.input_tokens);
  response->set_output_tokens(record.output_tokens);
  record.queue_ms = result.queue_seconds * 1e3;
  record.decode_ms = result.decode_seconds * 1e3;
  record.decode_steps = result.decode_steps;
  v1::Timings* timings = response->mutable_timings();
  timings->set_queue_ms(record.queue_ms);
  timings->set_decode_ms(record.decode_ms);
  timings->set_total_ms(ms_since(record.start));
  if (result.decode_steps > 0) {  // else every sentence came from the cache: nothing waited or decoded
    metrics_.queue_wait(record.model, result.queue_seconds);
    metrics_.decode_time(record.model, result.decode_seconds);
  }
  metrics_.tokens(record.model, record.input_tokens, record.output_tokens);
  return grpc::Status::OK;
}

void RequestPipeline::record(const RequestRecord& record, const grpc::Status& status) {
  const double ms = ms_since(record.start);
  const char* code = status_code_name(status.error_code());
  metrics_.request_done(record.model, code, ms / 1e3);
  nlohmann::ordered_json fields = {{"request_id", record.request_id},
                                   {"traceparent", record.traceparent},
                                   {"method", record.method},
                                   {"model", record.model},
                                   {"sentences", record.sentences},
                                   {"input_tokens", record.input_tokens},
                                   {"output_tokens", record.output_tokens},
                                   {"ms", round2(ms)},
                                   {"code", code}};
  // Last, known once admission began (a request refused before it has none).
  const auto with_tenant = [&record](nlohmann::ordered_json& f) {
    if (!record.tenant.empty()) f["tenant"] = record.tenant;
  };
  if (status.ok()) {
    // Where a translated request's time went: the wait for admission, the decode (from the
    // first admission on), and the most decoder steps one of its sentences took.
    if (record.decode_steps > 0) {
      fields["queue_ms"] = round2(record.queue_ms);
      fields["decode_ms"] = round2(record.decode_ms);
      fields["steps"] = record.decode_steps;
    }
    with_tenant(fields);
    log_event(spdlog::level::info, "request", fields);
    return;
  }
  fields["error"] = status.error_message();
  with_tenant(fields);
  const bool server_fault = status.error_code() == grpc::StatusCode::INTERNAL ||
                            status.error_code() == grpc::StatusCode::UNKNOWN;
  log_event(server_fault ? spdlog::level::err : spdlog::level::warn, "request failed", fields);
}

void RequestPipeline::record_refused(const char* method, const grpc::Status& status,
                                     const std::string& traceparent) {
  RequestRecord refused = begin(method, v1::TranslateRequest(), traceparent);
  record(refused, status);
}

namespace {

// A request translate() runs: shared by its admission and its job's callback, either of
// which may be the last to hold it.
struct PipelineRequest {
  explicit PipelineRequest(RequestPipeline& pipeline) : permit(pipeline) {}
  v1::TranslateRequest request;
  RequestRecord record;
  AdmittedRequest admitted;
  CallPermit permit;
  v1::TranslateResponse response;
  RequestPipeline::Completion done;
};

}  // namespace

void RequestPipeline::translate(const char* method, v1::TranslateRequest request,
                                Clock::time_point deadline, Completion done, Caller caller,
                                const std::string& traceparent) {
  auto state = std::make_shared<PipelineRequest>(*this);
  state->record = begin(method, request, traceparent);
  state->request = std::move(request);
  state->done = std::move(done);
  auto complete = [this](PipelineRequest& s, const grpc::Status& status) {
    record(s.record, status);
    s.permit.release();
    s.done(status, status.ok() ? std::move(s.response) : v1::TranslateResponse());
  };
  if (!state->permit.acquire()) {
    complete(*state, state->permit.busy());
    return;
  }
  // Exactly one of the two completes the request: the job's callback once admitted, the
  // admission when it refuses (then the job, and its callback, never exist).
  admit(
      state->request, deadline, state->record, state->admitted,
      [this, state, deadline, complete](JobResult result) {
        complete(*state,
                 respond(state->admitted, result, deadline, state->record, &state->response));
      },
      [state, complete](std::shared_ptr<Job>, const grpc::Status& refused) {
        if (!refused.ok()) complete(*state, refused);
      },
      std::move(caller));
}

}  // namespace nmt::server
