// RequestPipeline::score(): a whole Score request (docs/server.md, "Score"), apart from the
// Translate path of request_pipeline.cc: its permit, model, validation, one teacher-forced job
// a pair, and the answer from the last pair's callback.
#include <algorithm>
#include <exception>
#include <mutex>
#include <utility>

#include "server/pipeline/request_languages.h"
#include "server/pipeline/request_pipeline.h"
#include "server/pipeline/status.h"

namespace nmt::server {
namespace {

// A Score request: shared by its admission and its pairs' jobs, the last of which answers it.
struct ScoreState {
  explicit ScoreState(RequestPipeline& pipeline) : permit(pipeline) {}
  v1::ScoreRequest request;
  RequestRecord record;
  CallPermit permit;
  std::shared_ptr<ServedModel> model;  // held until the request ends
  std::vector<std::shared_ptr<Job>> jobs;
  std::mutex mutex;
  size_t left = 0;                     // pairs not answered yet
  grpc::Status failed;                 // the first pair's failure
  std::vector<Hypothesis> results;
  double queue_seconds = 0, decode_seconds = 0;
  int decode_steps = 0;
  RequestPipeline::ScoreCompletion done;
};

}  // namespace

void RequestPipeline::score(const char* method, v1::ScoreRequest request, Clock::time_point deadline,
                            ScoreCompletion done, Caller caller, const std::string& traceparent) {
  auto state = std::make_shared<ScoreState>(*this);
  v1::TranslateRequest as_translate;  // what begin() and the language resolution read
  as_translate.set_model(request.model());
  as_translate.set_request_id(request.request_id());
  *as_translate.mutable_texts() = request.sources();
  *as_translate.mutable_options() = request.options();
  state->record = begin(method, as_translate, traceparent);
  state->request = std::move(request);
  state->done = std::move(done);
  auto complete = [this](ScoreState& s, const grpc::Status& status, v1::ScoreResponse response) {
    record(s.record, status);
    s.permit.release();
    s.done(status, status.ok() ? std::move(response) : v1::ScoreResponse());
  };
  if (!state->permit.acquire()) return complete(*state, state->permit.busy(), {});
  models_.acquire_async(
      state->request.model(),
      [this, state, as_translate = std::move(as_translate), deadline, complete, caller = std::move(caller)](
          std::shared_ptr<ServedModel> model, std::exception_ptr error) mutable {
        try {
          if (error) std::rethrow_exception(error);
          state->model = std::move(model);
          state->record.model = state->model->name;
          const RequestLanguages languages = resolve_request_languages(as_translate, *state->model);
          const Tokenizer& tokenizer = state->model->tokenizer();
          ValidScore valid = validator_.validate_score(
              state->request, [&](const std::string& text) { return tokenizer.encode(text, languages.encode_language); },
              [&](const std::string& text) { return tokenizer.encode_target(text); });
          valid.options.forced_bos_id = languages.forced_bos_id;
          const Translator& translator = *state->model->replicas.front()->translators.front();
          std::vector<DecodeOptions> each(valid.target_ids.size(), valid.options);
          for (size_t i = 0; i < each.size(); ++i) {
            const std::string field = "targets[" + std::to_string(i) + "]";
            translator.check_target_ids(valid.target_ids[i], field);
            each[i].score_target = std::move(valid.target_ids[i]);
            try {
              each[i].validate_prompt();
            } catch (const Error& e) {
              throw Error(ErrorCode::kInvalidArgument, field + ": " + e.what());
            }
          }
          state->record.input_tokens = valid.input_tokens;
          state->record.sentences = each.size();
          const QuotaVerdict quota = quotas_.charge(caller.key.get(), int64_t(count_characters(as_translate)));
          if (!quota.allowed) throw Error(ErrorCode::kResourceExhausted, quota.message);
          state->results.resize(each.size());
          state->left = each.size();
          Scheduler& scheduler = *state->model->least_loaded().scheduler;
          const QueueTenant tenant{caller.tenant, caller.weight};
          // One job a pair: each has its own target. The last to finish answers.
          std::unique_lock<std::mutex> lock(state->mutex);
          for (size_t i = 0; i < each.size(); ++i) {
            std::shared_ptr<Job> job;
            try {
              job = scheduler.submit(
                {std::move(valid.source_ids[i])}, each[i], deadline,
                [this, state, i, complete](JobResult result) {
                  std::unique_lock<std::mutex> l(state->mutex);
                  if (!result.ok && state->failed.ok()) state->failed = grpc::Status(to_grpc_code(result.code), result.message);
                  if (result.ok) state->results[i] = std::move(result.translations.at(0).hypotheses.at(0));
                  state->queue_seconds = std::max(state->queue_seconds, result.queue_seconds);
                  state->decode_seconds = std::max(state->decode_seconds, result.decode_seconds);
                  state->decode_steps = std::max(state->decode_steps, result.decode_steps);
                  if (--state->left > 0) return;
                  l.unlock();
                  if (!state->failed.ok()) return complete(*state, state->failed, {});
                  v1::ScoreResponse response;
                  response.set_request_id(state->record.request_id);
                  response.set_model(state->record.model);
                  for (const Hypothesis& h : state->results) {
                    v1::ScoreResult* r = response.add_results();
                    r->set_score(h.score);
                    r->mutable_token_scores()->Add(h.token_scores.begin(), h.token_scores.end());
                    r->mutable_token_ids()->Add(h.ids.begin(), h.ids.end());
                    state->record.output_tokens += int64_t(h.ids.size());
                  }
                  response.set_input_tokens(state->record.input_tokens);
                  response.set_output_tokens(state->record.output_tokens);
                  state->record.queue_ms = state->queue_seconds * 1e3;
                  state->record.decode_ms = state->decode_seconds * 1e3;
                  state->record.decode_steps = state->decode_steps;
                  metrics_.tokens(state->record.model, state->record.input_tokens, state->record.output_tokens);
                  complete(*state, grpc::Status::OK, std::move(response));
                },
                tenant);
            } catch (const Error& e) {
              // The pairs not submitted answer now; those submitted are cancelled, and the
              // last of their callbacks answers the request with this failure.
              state->failed = to_grpc_status(e);
              state->left -= each.size() - i;
              const bool last = state->left == 0;
              const std::vector<std::shared_ptr<Job>> submitted = state->jobs;
              lock.unlock();  // a cancel may run a callback here, which takes the lock
              if (last) return complete(*state, state->failed, {});
              for (const auto& j : submitted) scheduler.cancel(j);
              return;
            }
            state->jobs.push_back(std::move(job));
          }
        } catch (const Error& e) {
          complete(*state, to_grpc_status(e), {});
        } catch (const std::exception& e) {
          complete(*state, grpc::Status(grpc::StatusCode::INTERNAL, e.what()), {});
        }
      });
}

}  // namespace nmt::server
