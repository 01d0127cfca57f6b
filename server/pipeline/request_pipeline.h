#pragma once
// What a Translate request goes through, whatever protocol brought it (the gRPC calls in
// server/grpc/, the HTTP API in server/http/): a place among server.max_concurrent_calls
// (CallPermit), its model (ModelRegistry::acquire_async, no thread waits for a load),
// validation, tokenization and sentence splitting (RequestValidator), submission to the
// model's Scheduler, the response from the job's result (n-best, split sentences joined with
// the text's own whitespace, scores, timings), and one metrics update and one log line per
// request (a translated one's also carries `queue_ms`, its sentences' longest wait for
// admission, `decode_ms` from the first admission on, and `steps`, its longest sentence's
// decoder steps). No thread waits on a request: it completes through a callback.
//
// A frontend either hands the pipeline a whole request (translate(), the HTTP API) or runs
// its steps itself (begin, admit, respond, record), when it must interleave them with its
// own events (the gRPC calls: a client's cancellation cancels the admitted job). Either way
// authentication is the frontend's (it knows where the credential travels), and a refusal it
// makes before the pipeline is recorded with record_refused().
#include <grpcpp/support/status.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nmt/v1/translation.pb.h"
#include "server/markup/markup_request.h"
#include "server/observability/metrics.h"
#include "server/pipeline/limits.h"
#include "server/pipeline/request_validator.h"
#include "model/text/sentence_splitter.h"
#include "server/cache/translation_cache.h"
#include "server/repository/model_registry.h"
#include "server/tenants/api_keys.h"
#include "server/tenants/quotas.h"

namespace nmt::server {

// One request's bookkeeping, from its receipt to its log line.
struct RequestRecord {
  const char* method = "";  // "Translate", "HTTP /v1/translate", ...: the log's `method`
  std::string request_id;
  // The request's W3C traceparent (observability/trace_context.h): the one it brought when
  // valid, else a fresh one; logged with request_id and echoed by the frontend.
  std::string traceparent;
  std::string model = "unknown";  // metric label; a known model's name once resolved
  // Its tenant of fair queueing (Caller::tenant: "key:NAME", "line:N", "peer:ADDRESS" or
  // "tenant:X", never a token), on its log line once admission began (absent before).
  std::string tenant;
  Clock::time_point start;
  size_t sentences = 0;
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
  // A translated request's scheduling (its JobResult), for its log line; decode_steps 0: not
  // translated (refused, failed, or no sentence to decode).
  double queue_ms = 0;
  double decode_ms = 0;
  int decode_steps = 0;
};

// Who sent a request, as its frontend identified it (docs/server.md, "Fairness, quotas and
// the cache"): the tenant its sentences queue as (server/scheduling/fair_queue.h) and the API
// key whose quotas it is charged to.
struct Caller {
  std::shared_ptr<const ApiKey> key;  // null: authentication off
  std::string tenant;                 // fair queueing's identity ("" : all one tenant)
  int weight = 1;
};

// The caller of a request: its API key's tenant and weight when it carries one (authentication
// on), else "peer:" + the peer's address without its port (gRPC's "ipv4:1.2.3.4:5678",
// "ipv6:[::1]:5678", or HTTP's bare address). With `trust_tenant_header`
// (server.trust_tenant_header) a non-empty x-tenant value replaces either ("tenant:" + it),
// the key keeping its quotas.
Caller identify_caller(std::shared_ptr<const ApiKey> key, const std::string& peer, const std::string& x_tenant,
                       bool trust_tenant_header);

// A validated request and its model: what the response to its job's result needs.
struct AdmittedRequest {
  // The model version the request was admitted to, held until the request ends: a reload
  // or an eviction meanwhile leaves it serving this request.
  std::shared_ptr<ServedModel> model;
  Scheduler* scheduler = nullptr;  // of its replica: a cancellation goes there
  bool return_scores = false;
  bool return_token_ids = false;
  std::vector<SplitText> split;  // with split_sentences: each text's sentences and whitespace
  // return_alignments: each decoded sentence's text (as split, in order) and the language
  // it was tokenized in, for the alignments' byte ranges (model/translator.h).
  bool return_alignments = false;
  std::vector<std::string> sources;
  std::string encode_language;
  // format html / markdown: the texts' blocks, translated in the request's place
  // (server/markup/markup_request.h); null for plain text.
  std::shared_ptr<const markup::MarkupPlan> markup;
};

class RequestPipeline;

// One of server.max_concurrent_calls places (gRPC calls, streams and HTTP requests
// together), counted in the inflight gauge while held. A frontend releases it just before it
// sends the answer, so that a client that sends its next request on receipt of the answer
// finds the place free.
class CallPermit {
 public:
  explicit CallPermit(RequestPipeline& pipeline) : pipeline_(pipeline) {}
  ~CallPermit() { release(); }
  CallPermit(const CallPermit&) = delete;
  CallPermit& operator=(const CallPermit&) = delete;

  // False (and nothing held) when every place is taken.
  bool acquire();
  void release();  // idempotent
  // The RESOURCE_EXHAUSTED a request gets when acquire() failed.
  grpc::Status busy() const;

 private:
  RequestPipeline& pipeline_;
  bool held_ = false;
};

class RequestPipeline {
 public:
  // At most `max_concurrent_calls` CallPermits at once (server.max_concurrent_calls).
  // A translation cache of `cache_bytes` (server.translation_cache_mb; 0 = none).
  RequestPipeline(ModelRegistry& models, const Limits& limits, Metrics& metrics,
                  int max_concurrent_calls = 4096, size_t cache_bytes = 0);

  // A whole request: its CallPermit, admission, response and record. `done` gets the status
  // and, when it is OK, the response; it runs exactly once, on this thread when the request
  // is refused at once or answered before this returns, else on a scheduler thread or the
  // registry's loading thread. The request's permit is released before `done` runs.
  using Completion =
      std::function<void(const grpc::Status& status, v1::TranslateResponse response)>;
  // `traceparent`: the one the request brought ("" = none).
  void translate(const char* method, v1::TranslateRequest request, Clock::time_point deadline,
                 Completion done, Caller caller = {}, const std::string& traceparent = {});

  // A whole Score request (docs/server.md, "Score"), as translate() a Translate one: its
  // CallPermit, its model, validation (RequestValidator::validate_score), one job a pair on
  // the model's scheduler (each pair's target forced with its log-probs in the same decode
  // loops as translations), the response and the record. Never cached.
  using ScoreCompletion = std::function<void(const grpc::Status& status, v1::ScoreResponse response)>;
  void score(const char* method, v1::ScoreRequest request, Clock::time_point deadline, ScoreCompletion done,
             Caller caller = {}, const std::string& traceparent = {});

  // The steps, for a frontend that runs them itself.
  //
  // The record of a request received now; its request_id is the request's own, or one made
  // here when it cannot be echoed (the validator then refuses the request); its traceparent
  // is `traceparent` when valid, else a fresh one.
  RequestRecord begin(const char* method, const v1::TranslateRequest& request,
                      const std::string& traceparent = {});
  // Resolves the request's model without waiting for a load, then validates, tokenizes,
  // charges `caller`'s quotas and submits it as the caller's tenant: `then` gets the job, or
  // the status that refuses the request (and `done` never runs). Sentences found in the
  // translation cache are not submitted; when every one is, `done` runs before `then`, which
  // gets no job. `done` may run before `then` in any case. `then` runs on this thread when the model is
  // loaded, else on the registry's loading thread; `request`, `record` and `admitted` must
  // live until it has run.
  using Admission = std::function<void(std::shared_ptr<Job> job, const grpc::Status& refused)>;
  void admit(const v1::TranslateRequest& request, Clock::time_point deadline, RequestRecord& record,
             AdmittedRequest& admitted, JobCallback done, Admission then, Caller caller = {});
  // The request's status from its job's result; fills `response` when it is OK and adds the
  // result's tokens and times to the metrics.
  grpc::Status respond(const AdmittedRequest& admitted, const JobResult& result,
                       Clock::time_point deadline, RequestRecord& record,
                       v1::TranslateResponse* response);
  // The request's one metrics update and log line.
  void record(const RequestRecord& record, const grpc::Status& status);
  // Records a request refused before the pipeline saw it (authentication, a body that does
  // not parse) as one request of `method`, under `traceparent` as begin() takes it.
  void record_refused(const char* method, const grpc::Status& status,
                      const std::string& traceparent = {});

 private:
  friend class CallPermit;

  // admit()'s work once the model is known: the request's options are resolved against the
  // model here (tokenizer, the splitter's language, DecodeOptions), and so will its source
  // and target languages be (issue 51), before the scheduler sees it.
  std::shared_ptr<Job> submit(const v1::TranslateRequest& request,
                              std::shared_ptr<ServedModel> model, Clock::time_point deadline,
                              RequestRecord& record, AdmittedRequest& admitted, JobCallback done,
                              const Caller& caller);
  // The scheduler's part: the sentences not in the cache, their results put back in order
  // (and kept in the cache) before `done` runs.
  // `glossary`: empty, or per sentence its required phrases (server/glossary).
  std::shared_ptr<Job> decode(std::vector<std::vector<int>> source_ids, const DecodeOptions& options,
                              const ServedModel& model, Scheduler& scheduler, Clock::time_point deadline,
                              JobCallback done, const Caller& caller,
                              std::vector<std::vector<std::vector<int>>> glossary = {});

  ModelRegistry& models_;
  const RequestValidator validator_;
  Metrics& metrics_;
  const std::string id_prefix_;
  std::atomic<uint64_t> next_id_{1};
  const int max_calls_;
  std::atomic<int> calls_{0};  // CallPermits held
  TranslationCache cache_;
  Quotas quotas_;
};

}  // namespace nmt::server
