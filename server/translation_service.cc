#include "server/translation_service.h"

#include <cmath>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "server/logging.h"
#include "server/status.h"

namespace nmt::server {
namespace {

// Stream messages read ahead of the one being answered (they are batched meanwhile).
constexpr size_t kStreamReadAhead = 64;

std::string random_prefix() {
  std::random_device rd;
  char buf[16];
  snprintf(buf, sizeof buf, "%08x", static_cast<unsigned>(rd()));
  return buf;
}

// The call's deadline on the steady clock (max() when the client set none).
Clock::time_point steady_deadline(const grpc::ServerContext& context) {
  const auto deadline = context.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return Clock::time_point::max();
  const auto remaining = deadline - std::chrono::system_clock::now();
  if (remaining > std::chrono::hours(24 * 365)) return Clock::time_point::max();
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(remaining);
}

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace

struct TranslationService::Call {
  const char* method = "";
  std::string request_id;
  std::string model = "unknown";  // metric label; a known model's name once resolved
  Clock::time_point start;
  size_t sentences = 0;
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
};

struct TranslationService::Admitted {
  ServedModel* model = nullptr;
  std::shared_ptr<Job> job;
  bool return_scores = false;
  bool return_token_ids = false;
};

TranslationService::TranslationService(ModelRegistry& models, const Limits& limits,
                                       Metrics& metrics, BearerAuth auth)
    : models_(models), validator_(limits), metrics_(metrics), auth_(std::move(auth)),
      id_prefix_(random_prefix()) {}

grpc::Status TranslationService::authenticate(grpc::ServerContext* context, const char* method) {
  if (auth_.allows(context->client_metadata())) return grpc::Status::OK;
  const grpc::Status status(grpc::StatusCode::UNAUTHENTICATED,
                            "missing or wrong bearer token (metadata 'authorization: Bearer TOKEN')");
  Call call = begin(method, v1::TranslateRequest());
  call.sentences = 0;
  record(call, status);
  return status;
}

TranslationService::Call TranslationService::begin(const char* method,
                                                   const v1::TranslateRequest& request) {
  Call call;
  call.method = method;
  call.start = Clock::now();
  call.sentences = request.texts_size();
  // An id that cannot be echoed is replaced here and refused by the validator.
  call.request_id = valid_request_id(request.request_id())
                        ? request.request_id()
                        : id_prefix_ + "-" + std::to_string(next_id_.fetch_add(1));
  return call;
}

TranslationService::Admitted TranslationService::admit(const v1::TranslateRequest& request,
                                                       Clock::time_point deadline, Call& call) {
  Admitted admitted;
  admitted.model = &models_.find(request.model());
  call.model = admitted.model->name;
  const Tokenizer& tokenizer = admitted.model->tokenizer();
  ValidRequest valid =
      validator_.validate(request, [&](const std::string& text) { return tokenizer.encode(text); });
  call.input_tokens = valid.input_tokens;
  admitted.return_scores = request.options().return_scores();
  admitted.return_token_ids = request.options().return_token_ids();
  admitted.job = admitted.model->batcher->submit(std::move(valid.source_ids), valid.options, deadline);
  return admitted;
}

void TranslationService::respond(const Admitted& admitted, const JobResult& result, Call& call,
                                 v1::TranslateResponse* response) {
  response->set_request_id(call.request_id);
  response->set_model(admitted.model->name);
  for (const Translation& t : result.translations) {
    v1::Translation* out = response->add_translations();
    for (const Hypothesis& h : t.hypotheses) {
      v1::Hypothesis* hyp = out->add_hypotheses();
      hyp->set_text(h.text);
      if (admitted.return_scores) hyp->set_score(h.score);
      if (admitted.return_token_ids) hyp->mutable_token_ids()->Add(h.ids.begin(), h.ids.end());
    }
    if (!t.hypotheses.empty()) call.output_tokens += static_cast<int64_t>(t.hypotheses[0].ids.size());
  }
  response->set_input_tokens(call.input_tokens);
  response->set_output_tokens(call.output_tokens);
  v1::Timings* timings = response->mutable_timings();
  timings->set_queue_ms(result.queue_seconds * 1e3);
  timings->set_encode_ms(result.encode_seconds * 1e3);
  timings->set_decode_ms(result.decode_seconds * 1e3);
  timings->set_total_ms(ms_since(call.start));
  metrics_.queue_wait(call.model, result.queue_seconds);
  metrics_.tokens(call.model, call.input_tokens, call.output_tokens);
}

grpc::Status TranslationService::complete(grpc::ServerContext* context, const Admitted& admitted,
                                          Call& call, v1::TranslateResponse* response) {
  const JobResult result =
      admitted.model->batcher->wait(admitted.job, [context] { return context->IsCancelled(); });
  if (!result.ok) return grpc::Status(to_grpc_code(result.code), result.message);
  respond(admitted, result, call, response);
  return grpc::Status::OK;
}

void TranslationService::record(const Call& call, const grpc::Status& status) {
  const double ms = ms_since(call.start);
  const char* code = status_code_name(status.error_code());
  metrics_.request_done(call.model, code, ms / 1e3);
  nlohmann::ordered_json fields = {{"request_id", call.request_id},
                                   {"method", call.method},
                                   {"model", call.model},
                                   {"sentences", call.sentences},
                                   {"input_tokens", call.input_tokens},
                                   {"output_tokens", call.output_tokens},
                                   {"ms", std::round(ms * 100) / 100},
                                   {"code", code}};
  if (status.ok()) {
    log_event(spdlog::level::info, "request", fields);
    return;
  }
  fields["error"] = status.error_message();
  const bool server_fault = status.error_code() == grpc::StatusCode::INTERNAL ||
                            status.error_code() == grpc::StatusCode::UNKNOWN;
  log_event(server_fault ? spdlog::level::err : spdlog::level::warn, "request failed", fields);
}

grpc::Status TranslationService::Translate(grpc::ServerContext* context,
                                           const v1::TranslateRequest* request,
                                           v1::TranslateResponse* response) {
  if (grpc::Status denied = authenticate(context, "Translate"); !denied.ok()) return denied;
  Metrics::Inflight inflight(metrics_.inflight_gauge());
  Call call = begin("Translate", *request);
  grpc::Status status;
  try {
    const Admitted admitted = admit(*request, steady_deadline(*context), call);
    status = complete(context, admitted, call, response);
  } catch (const Error& e) {
    status = to_grpc_status(e);
  } catch (const std::exception& e) {
    status = grpc::Status(grpc::StatusCode::INTERNAL, e.what());
  }
  context->AddTrailingMetadata("x-request-id", call.request_id);
  record(call, status);
  return status;
}

grpc::Status TranslationService::TranslateStream(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::TranslateStreamResponse, v1::TranslateRequest>* stream) {
  if (grpc::Status denied = authenticate(context, "TranslateStream"); !denied.ok()) return denied;
  Metrics::Inflight inflight(metrics_.inflight_gauge());
  struct Entry {
    Call call;
    std::optional<Admitted> admitted;
    grpc::Status status;  // the admission error, when not admitted
  };
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<Entry> pending;
  bool reading_done = false;
  const Clock::time_point deadline = steady_deadline(*context);

  // The reader admits messages as they arrive so that they batch while earlier ones are
  // answered; the handler thread answers them in order.
  std::thread reader([&] {
    v1::TranslateRequest request;
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mutex);
        changed.wait(lock, [&] { return pending.size() < kStreamReadAhead; });
      }
      if (!stream->Read(&request)) break;
      Entry entry{begin("TranslateStream", request), std::nullopt, grpc::Status::OK};
      try {
        entry.admitted = admit(request, deadline, entry.call);
      } catch (const Error& e) {
        entry.status = to_grpc_status(e);
      } catch (const std::exception& e) {
        entry.status = grpc::Status(grpc::StatusCode::INTERNAL, e.what());
      }
      std::lock_guard<std::mutex> lock(mutex);
      pending.push_back(std::move(entry));
      changed.notify_all();
    }
    std::lock_guard<std::mutex> lock(mutex);
    reading_done = true;
    changed.notify_all();
  });

  bool writable = true;
  while (true) {
    std::optional<Entry> entry;
    {
      std::unique_lock<std::mutex> lock(mutex);
      changed.wait(lock, [&] { return !pending.empty() || reading_done; });
      if (pending.empty()) break;
      entry.emplace(std::move(pending.front()));
      pending.pop_front();
      changed.notify_all();
    }
    v1::TranslateStreamResponse out;
    out.set_request_id(entry->call.request_id);
    if (entry->admitted) {
      if (writable) {
        entry->status = complete(context, *entry->admitted, entry->call, out.mutable_response());
      } else {
        entry->admitted->model->batcher->cancel(entry->admitted->job);
        entry->status = grpc::Status(grpc::StatusCode::CANCELLED, "the stream was closed");
      }
    }
    out.set_status_code(entry->status.error_code());
    out.set_status_message(entry->status.error_message());
    if (writable) writable = stream->Write(out);
    record(entry->call, entry->status);
  }
  reader.join();
  return writable ? grpc::Status::OK : grpc::Status(grpc::StatusCode::CANCELLED, "stream closed");
}

grpc::Status TranslationService::ListModels(grpc::ServerContext* context,
                                            const v1::ListModelsRequest*,
                                            v1::ListModelsResponse* response) {
  if (grpc::Status denied = authenticate(context, "ListModels"); !denied.ok()) return denied;
  for (const auto& m : models_.models()) {
    v1::ModelInfo* info = response->add_models();
    info->set_name(m->name);
    info->set_device(m->device);
    info->set_precision(m->precision);
    info->set_is_default(m->is_default);
    info->set_vocab_size(m->tokenizer().vocab_size());
  }
  return grpc::Status::OK;
}

}  // namespace nmt::server
