#include "server/http/file_api.h"

#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>

#include "server/documents/document.h"

namespace nmt::server {
namespace {

constexpr const char* kMethod = "HTTP /translate_file";
constexpr const char* kDownloadPrefix = "/download_file/";

HttpAnswer json_answer(int status, std::string body) {
  HttpAnswer answer;
  answer.status = status;
  answer.body = std::move(body);
  return answer;
}

HttpAnswer error_answer(int status, const std::string& message) {
  return json_answer(status, LibreTranslateApi::error_json(message));
}

// The translation of each text: its best hypothesis and its word alignments (byte ranges
// in the whole text and the whole translation, sentences joined).
std::vector<TranslatedText> translations_of(const v1::TranslateResponse& response) {
  std::vector<TranslatedText> out;
  for (const v1::Translation& t : response.translations()) {
    TranslatedText text;
    if (t.hypotheses_size() > 0) {
      const v1::Hypothesis& best = t.hypotheses(0);
      text.text = best.text();
      for (const v1::Hypothesis::Alignment& a : best.alignments()) {
        text.alignments.push_back({a.source_begin(), a.source_end(), a.target_begin(), a.target_end()});
      }
    }
    out.push_back(std::move(text));
  }
  return out;
}

}  // namespace

FileApi::FileApi(RequestPipeline& pipeline, const LibreTranslateApi& libretranslate, const DocumentLimits& limits,
                 Refusal refusal)
    : pipeline_(pipeline),
      libretranslate_(libretranslate),
      limits_(limits),
      refusal_(std::move(refusal)),
      store_(limits.store_seconds, limits.store_bytes) {}

void FileApi::translate_file(const HttpRequest& http, LibreTranslateRequest request, Caller caller,
                             const std::string& traceparent, HttpFront::Respond respond) {
  // LibreTranslate's order of checks and messages.
  if (request.source.empty()) throw LibreTranslateError{400, "Invalid request: missing source parameter"};
  if (request.target.empty()) throw LibreTranslateError{400, "Invalid request: missing target parameter"};
  const auto file = http.form.find("file");
  const auto filename = http.form_filenames.find("file");
  if (file == http.form.end() || filename == http.form_filenames.end()) {
    throw LibreTranslateError{400, "Invalid request: missing file parameter (a multipart file field)"};
  }
  std::shared_ptr<Document> document;
  try {
    document = read_document(filename->second, file->second, limits_);
  } catch (const DocumentError& e) {
    pipeline_.record_refused(kMethod, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, e.what()), traceparent);
    throw LibreTranslateError{e.status(), e.what()};
  }
  const std::string host = http.header("host").empty() ? std::string("localhost") : http.header("host");
  auto finish = [this, document, name = filename->second, host](const v1::TranslateResponse& response) {
    std::string bytes;
    try {
      bytes = document->write(translations_of(response));
    } catch (const std::exception& e) {
      return error_answer(500, std::string("Cannot translate file: ") + e.what());
    }
    const size_t size = bytes.size();
    const FileStore::Stored stored = store_.put(name, std::move(bytes), FileStore::Clock::now());
    if (stored.never_fits) {
      return error_answer(413, "the translated file is " + std::to_string(size) +
                                   " bytes, over documents.store_bytes (" + std::to_string(limits_.store_bytes) + ")");
    }
    if (stored.name.empty()) {
      const long seconds = std::lround(std::ceil(stored.retry_after));
      HttpAnswer busy = error_answer(429, "Slowdown: the translated files waiting for download fill documents.store_bytes; retry after " +
                                              std::to_string(seconds) + " s");
      busy.headers.emplace_back("Retry-After", std::to_string(seconds));
      return busy;
    }
    return json_answer(200, nlohmann::json{{"translatedFileUrl", "http://" + host + kDownloadPrefix + stored.name}}.dump());
  };
  if (document->texts().empty()) return respond(finish(v1::TranslateResponse()));  // nothing to translate
  request.q = document->texts();
  request.batch = true;
  libretranslate_.detect_source(request);
  v1::TranslateRequest translation = libretranslate_.to_request(request);
  // The formatting runs are placed on the translation through the word alignments.
  translation.mutable_options()->set_return_alignments(true);
  pipeline_.translate(
      kMethod, std::move(translation), Clock::time_point::max(),
      [this, finish, respond](const grpc::Status& status, v1::TranslateResponse response) {
        if (!status.ok()) return respond(refusal_(status));
        respond(finish(response));
      },
      std::move(caller), traceparent);
}

HttpAnswer FileApi::download(const HttpRequest& http) {
  const std::string name = http.path.substr(std::string(kDownloadPrefix).size());
  if (!FileStore::valid_name(name)) return error_answer(400, "Invalid filename");
  const std::optional<FileStore::File> file = store_.get(name, FileStore::Clock::now());
  if (!file) {
    return error_answer(404, "no such translated file, or it has expired (kept documents.store_seconds: " +
                                 std::to_string(static_cast<long>(limits_.store_seconds)) + " s)");
  }
  HttpAnswer answer;
  answer.content_type = content_type_of(name);
  answer.body = file->bytes;
  answer.headers.emplace_back("Content-Disposition", "attachment; filename=\"" + name.substr(name.find('.') + 1) + "\"");
  return answer;
}

}  // namespace nmt::server
