#include "server/http/file_api.h"

#include <cctype>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>

#include "server/documents/document.h"

namespace nmt::server {
namespace {

constexpr const char* kMethod = "HTTP /translate_file";
constexpr const char* kDownloadPrefix = "/download_file/";
// An upload is translated in seconds (its texts are bounded like /translate's): a client
// refused for the uploads in flight tries again after this.
constexpr int kUploadRetrySeconds = 2;

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

// A header's first value (proxies append theirs after a comma), without spaces at its ends.
std::string first_value(const std::string& header) {
  std::string v = header.substr(0, header.find(','));
  const size_t b = v.find_first_not_of(" \t"), e = v.find_last_not_of(" \t");
  return b == std::string::npos ? "" : v.substr(b, e - b + 1);
}

// A host and optional port as a URL's authority may hold them: letters, digits, "-._:",
// and a bracketed IPv6 address; nothing that would change the URL ("/", "@", "?", "#").
bool valid_host(const std::string& host) {
  if (host.empty() || host.size() > 255) return false;
  for (char c : host) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_' ||
                    c == ':' || c == '[' || c == ']';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

std::string download_base(const HttpRequest& http, bool trust_forwarded) {
  std::string scheme = "http";
  std::string host = http.header("host").empty() ? std::string("localhost") : http.header("host");
  if (!trust_forwarded) return scheme + "://" + host;
  if (const std::string proto = first_value(http.header("x-forwarded-proto")); !proto.empty()) {
    std::string lower;
    for (char c : proto) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower != "http" && lower != "https")
      throw LibreTranslateError{400, "Invalid request: X-Forwarded-Proto must be http or https, got \"" + proto +
                                         "\" (server.trust_forwarded_headers is on)"};
    scheme = lower;
  }
  if (const std::string forwarded = first_value(http.header("x-forwarded-host")); !forwarded.empty()) {
    if (!valid_host(forwarded))
      throw LibreTranslateError{400, "Invalid request: X-Forwarded-Host is not a host[:port]: \"" + forwarded +
                                         "\" (server.trust_forwarded_headers is on)"};
    host = forwarded;
  }
  return scheme + "://" + host;
}

FileApi::FileApi(RequestPipeline& pipeline, const LibreTranslateApi& libretranslate, const DocumentLimits& limits,
                 Refusal refusal, bool trust_forwarded)
    : pipeline_(pipeline),
      libretranslate_(libretranslate),
      limits_(limits),
      refusal_(std::move(refusal)),
      trust_forwarded_(trust_forwarded),
      store_(limits.store_seconds, limits.store_bytes),
      uploads_(limits.max_concurrent_bytes) {}

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
  const std::string base = download_base(http, trust_forwarded_);
  // The upload's share of what the uploads in flight may hold, given back when the last
  // copy of `held` goes (the answer written, or a refusal thrown below). A file over
  // documents.max_file_bytes is refused by read_document before anything is inflated, with
  // that bound's name: it is charged nothing.
  const size_t charge = file->second.size() > limits_.max_file_bytes
                            ? 0
                            : upload_charge(filename->second, file->second.size(), limits_);
  const double mib = static_cast<double>(1u << 20);
  if (uploads_.never_fits(charge)) {
    const std::string message = "this file may hold " + std::to_string(std::lround(std::ceil(charge / mib))) +
                                " MiB while it is translated, over documents.max_concurrent_mb (" +
                                std::to_string(uploads_.max_bytes() >> 20) + ")";
    pipeline_.record_refused(kMethod, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message), traceparent);
    throw LibreTranslateError{413, message};
  }
  if (!uploads_.take(charge)) {
    HttpAnswer busy = error_answer(429, "Slowdown: the files being translated hold documents.max_concurrent_mb (" +
                                            std::to_string(uploads_.max_bytes() >> 20) + " MiB); retry after " +
                                            std::to_string(kUploadRetrySeconds) + " s");
    busy.headers.emplace_back("Retry-After", std::to_string(kUploadRetrySeconds));
    pipeline_.record_refused(kMethod, grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, busy.body), traceparent);
    return respond(std::move(busy));
  }
  std::shared_ptr<void> held(nullptr, [this, charge](void*) { uploads_.give_back(charge); });
  std::shared_ptr<Document> document;
  try {
    document = read_document(filename->second, file->second, limits_);
  } catch (const DocumentError& e) {
    pipeline_.record_refused(kMethod, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, e.what()), traceparent);
    throw LibreTranslateError{e.status(), e.what()};
  }
  auto finish = [this, document, held, name = filename->second, base](const v1::TranslateResponse& response) {
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
    return json_answer(200, nlohmann::json{{"translatedFileUrl", base + kDownloadPrefix + stored.name}}.dump());
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
