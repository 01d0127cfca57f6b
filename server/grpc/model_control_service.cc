#include "server/grpc/model_control_service.h"

#include "server/pipeline/status.h"
#include "server/grpc/translation_service.h"
#include "server/observability/logging.h"

namespace nmt::server {
namespace {

const grpc::Status kUnauthenticated(grpc::StatusCode::UNAUTHENTICATED,
                                    "missing or wrong bearer token (metadata 'authorization: Bearer TOKEN')");

// Runs `body`, mapping its nmt::Error to the matching status.
template <typename F>
grpc::Status guarded(F&& body) {
  try {
    body();
    return grpc::Status::OK;
  } catch (const Error& e) {
    return to_grpc_status(e);
  } catch (const std::exception& e) {
    return grpc::Status(grpc::StatusCode::INTERNAL, e.what());
  }
}

}  // namespace

bool ModelControlService::allowed(const grpc::ServerContext& context) const {
  return auth_.allows(context.client_metadata());
}

grpc::Status ModelControlService::Load(grpc::ServerContext* context,
                                       const v1::ModelControlRequest* request,
                                       v1::ModelControlResponse* response) {
  if (!allowed(*context)) return kUnauthenticated;
  log_event(spdlog::level::info, "model control", {{"call", "Load"}, {"model", request->model()}});
  return guarded([&] {
    models_.acquire(request->model());
    fill_model_info(models_.status(request->model()), response->mutable_model());
  });
}

grpc::Status ModelControlService::Unload(grpc::ServerContext* context,
                                         const v1::ModelControlRequest* request,
                                         v1::ModelControlResponse* response) {
  if (!allowed(*context)) return kUnauthenticated;
  log_event(spdlog::level::info, "model control", {{"call", "Unload"}, {"model", request->model()}});
  return guarded([&] {
    models_.unload(request->model());
    fill_model_info(models_.status(request->model()), response->mutable_model());
  });
}

grpc::Status ModelControlService::Reload(grpc::ServerContext* context, const v1::ReloadRequest*,
                                         v1::ReloadResponse* response) {
  if (!allowed(*context)) return kUnauthenticated;
  log_event(spdlog::level::info, "model control", {{"call", "Reload"}});
  const RescanReport report = models_.rescan();
  if (!report.error.empty()) return grpc::Status(grpc::StatusCode::UNAVAILABLE, report.error);
  for (const auto& n : report.added) response->add_added(n);
  for (const auto& n : report.removed) response->add_removed(n);
  for (const auto& n : report.changed) response->add_changed(n);
  for (const auto& n : report.failed) response->add_failed(n);
  return grpc::Status::OK;
}

}  // namespace nmt::server
