#pragma once
// LibreTranslate's document API on the HTTP port:
//   POST /translate_file  multipart `file` (.txt, .srt, .docx, .odt, .pptx), `source` (or
//                         `auto`), `target`, `api_key` -> {"translatedFileUrl": URL}
//   GET  /download_file/NAME  the translated file, while documents.store_seconds lasts
// The document (server/documents/) is read under documents.* bounds, its texts translated
// as one request through the RequestPipeline (the same limits, queue, quotas and metrics
// as /translate: a document over limits.max_characters_per_request is refused whole), the
// file written from their translations and kept in the FileStore. Refusals are
// LibreTranslate's {"error": ...}: 400 naming the bound or the unsupported extension, 413
// over documents.max_file_bytes (or one whose charge is over documents.max_concurrent_mb), 429
// while the store is full or while the uploads in flight hold documents.max_concurrent_mb; a
// refused file is never half translated.
#include <functional>
#include <string>

#include "server/documents/document_limits.h"
#include "server/documents/file_store.h"
#include "server/documents/upload_budget.h"
#include "server/http/http_front.h"
#include "server/http/libretranslate_api.h"
#include "server/pipeline/request_pipeline.h"

namespace nmt::server {

// Where the client reaches this server, for translatedFileUrl: "SCHEME://HOST". Without
// `trust_forwarded` (server.trust_forwarded_headers) http:// and the Host header ("localhost"
// without one); with it, X-Forwarded-Proto (http or https) and X-Forwarded-Host where the
// request carries them, each header's first value (a chain of proxies appends theirs), as a
// TLS-terminating proxy in front sets them. Trusted only when the operator says a proxy sets
// them: a client could otherwise send any. Throws LibreTranslateError 400 naming the header
// when a trusted one is not a scheme or a host ("https", "example.org:8443").
std::string download_base(const HttpRequest& http, bool trust_forwarded);

class FileApi {
 public:
  // `refusal`: the LibreTranslate answer of a pipeline status that is not OK.
  using Refusal = std::function<HttpAnswer(const grpc::Status&)>;
  // `trust_forwarded`: translatedFileUrl from X-Forwarded-Proto/-Host (download_base).
  FileApi(RequestPipeline& pipeline, const LibreTranslateApi& libretranslate, const DocumentLimits& limits,
          Refusal refusal, bool trust_forwarded = false);

  // `request` holds the form's fields and passed the API key check; `caller` sent it.
  // Throws LibreTranslateError for what is refused before translating.
  void translate_file(const HttpRequest& http, LibreTranslateRequest request, Caller caller,
                      const std::string& traceparent, HttpFront::Respond respond);
  // GET /download_file/NAME.
  HttpAnswer download(const HttpRequest& http);

 private:
  RequestPipeline& pipeline_;
  const LibreTranslateApi& libretranslate_;
  const DocumentLimits limits_;
  const Refusal refusal_;
  const bool trust_forwarded_;
  FileStore store_;
  UploadBudget uploads_;
};

}  // namespace nmt::server
