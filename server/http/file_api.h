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
// over documents.max_file_bytes, 429 while the store is full; a refused file is never half
// translated.
#include <functional>
#include <string>

#include "server/documents/document_limits.h"
#include "server/documents/file_store.h"
#include "server/http/http_front.h"
#include "server/http/libretranslate_api.h"
#include "server/pipeline/request_pipeline.h"

namespace nmt::server {

class FileApi {
 public:
  // `refusal`: the LibreTranslate answer of a pipeline status that is not OK.
  using Refusal = std::function<HttpAnswer(const grpc::Status&)>;
  FileApi(RequestPipeline& pipeline, const LibreTranslateApi& libretranslate, const DocumentLimits& limits,
          Refusal refusal);

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
  FileStore store_;
};

}  // namespace nmt::server
