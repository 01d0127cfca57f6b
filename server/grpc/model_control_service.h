#pragma once
// nmt.v1.ModelControl: Load, Unload and Reload (a rescan of the model repository, as
// SIGHUP does) over the ModelRegistry. Synchronous: a Load holds its thread while the model
// loads (gRPC's sync threads are capped in main.cc).
#include <grpcpp/grpcpp.h>

#include "nmt/v1/model_control.grpc.pb.h"
#include "server/tenants/auth.h"
#include "server/repository/model_registry.h"

namespace nmt::server {

class ModelControlService final : public v1::ModelControl::Service {
 public:
  ModelControlService(ModelRegistry& models, const BearerAuth& auth) : models_(models), auth_(auth) {}

  grpc::Status Load(grpc::ServerContext* context, const v1::ModelControlRequest* request,
                    v1::ModelControlResponse* response) override;
  grpc::Status Unload(grpc::ServerContext* context, const v1::ModelControlRequest* request,
                      v1::ModelControlResponse* response) override;
  grpc::Status Reload(grpc::ServerContext* context, const v1::ReloadRequest* request,
                      v1::ReloadResponse* response) override;

 private:
  bool allowed(const grpc::ServerContext& context) const;

  ModelRegistry& models_;
  const BearerAuth& auth_;  // main's: SIGHUP reloads its tokens
};

}  // namespace nmt::server
