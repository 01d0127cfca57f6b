#pragma once
// grpc.health.v1.Health, the standard health protocol: Check (what Kubernetes' grpc probes
// and grpc-health-probe ask) and Watch (what load balancers and gRPC's client-side health
// checking keep open), served on the server's completion queue (server/grpc/queue_threads.h).
// gRPC's own health service runs on its callback API, whose threads would wait on the
// socket poller beside QueueThreads' lead and cost a lone client the wake-up that
// queue_threads.h describes. Unauthenticated, as probes are.
#include <grpcpp/grpcpp.h>

#include <map>
#include <mutex>
#include <set>
#include <string>

#include "grpc/health/v1/health.grpc.pb.h"

namespace nmt::server {

class HealthService {
 public:
  using Status = grpc::health::v1::HealthCheckResponse::ServingStatus;

  HealthService() = default;
  HealthService(const HealthService&) = delete;
  HealthService& operator=(const HealthService&) = delete;

  // To register on the builder.
  grpc::Service* service() { return &service_; }
  // Once the server has started: offers its calls places on `queue`, which stays until the
  // queue is shut down and drained.
  void start(grpc::ServerCompletionQueue& queue);

  // `name` ("" is the whole server) serving or not; watchers hear of a change at once.
  void set(const std::string& name, bool serving);
  // Every service NOT_SERVING, and set() ignored from now on: the server is going away.
  // Watches are told, then closed (UNAVAILABLE).
  void shutdown();

  // What Check answers for `name` (SERVICE_UNKNOWN: not set).
  Status status(const std::string& name) const;

 private:
  class CheckCall;
  class WatchCall;
  void update(const std::string& name, Status status);  // under mutex_
  Status status_locked(const std::string& name) const;   // under mutex_

  grpc::health::v1::Health::AsyncService service_;
  grpc::ServerCompletionQueue* queue_ = nullptr;
  mutable std::mutex mutex_;  // guards statuses_, watchers_, shut_down_; taken before a call's
  std::map<std::string, Status> statuses_;
  std::set<WatchCall*> watchers_;
  bool shut_down_ = false;
};

}  // namespace nmt::server
