#include "server/grpc/health_service.h"

#include <atomic>
#include <optional>

#include "server/grpc/queue_event.h"

namespace nmt::server {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

// One Check: answered when it arrives. Each call holds one place on the queue until a
// call arrives in it, and then offers the next. It lives until its finish event is back and
// its thread is out of Finish() (which reads the call after handing it to gRPC).
class HealthService::CheckCall {
 public:
  static void request(HealthService& health) {
    auto* call = new CheckCall(health);
    handoff(&call->arrived_);
    health.service_.RequestCheck(&call->context_, &call->request_, &call->responder_,
                                 health.queue_, health.queue_, &call->arrived_);
  }

 private:
  explicit CheckCall(HealthService& health) : health_(health) {}

  void on_arrival(bool ok) {
    if (!ok) {  // the queue is shutting down: no call came
      delete this;
      return;
    }
    request(health_);
    const Status status = health_.status(request_.service());
    HealthCheckResponse response;
    response.set_status(status);
    handoff(&finished_);
    if (status == HealthCheckResponse::SERVICE_UNKNOWN) {
      responder_.FinishWithError(
          grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service: " + request_.service()),
          &finished_);
    } else {
      responder_.Finish(response, grpc::Status::OK, &finished_);
    }
    event_back();
  }
  void on_finished(bool) { event_back(); }
  void event_back() {
    if (events_left_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  HealthService& health_;
  grpc::ServerContext context_;
  HealthCheckRequest request_;
  grpc::ServerAsyncResponseWriter<HealthCheckResponse> responder_{&context_};
  QueueEvent arrived_ = queue_event<CheckCall, &CheckCall::on_arrival>(this);
  QueueEvent finished_ = queue_event<CheckCall, &CheckCall::on_finished>(this);
  std::atomic<int> events_left_{2};  // the finish event, and out of Finish()
};

// One Watch: the status when it arrives, then each change, until the client goes or the
// server shuts down (NOT_SERVING, then UNAVAILABLE: an open watch would otherwise hold the
// server's Shutdown() for its whole grace period). While a write is in flight only the
// latest status waits. The call lives until its end event and every operation it started have come back.
class HealthService::WatchCall {
 public:
  static void request(HealthService& health) {
    auto* call = new WatchCall(health);
    call->context_.AsyncNotifyWhenDone(&call->ended_);
    handoff(&call->arrived_);
    handoff(&call->ended_);
    health.service_.RequestWatch(&call->context_, &call->request_, &call->writer_,
                                 health.queue_, health.queue_, &call->arrived_);
  }

  // Under the service's mutex_.
  const std::string& name() const { return request_.service(); }
  void send(Status status) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status == last_) return;
    last_ = status;
    if (writing_) {
      waiting_ = status;
      return;
    }
    write(status);
  }
  // Under the service's mutex_: the server is shutting down.
  void close() {
    std::lock_guard<std::mutex> lock(mutex_);
    closing_ = true;
    finish_if_quiet();
  }

 private:
  explicit WatchCall(HealthService& health) : health_(health) {}

  // The end event may come on another thread before or while this runs (a client that
  // cancels at once): under the service's mutex_ the two see each other's work.
  void on_arrival(bool ok) {
    if (!ok) {  // the queue is shutting down: no call came, and no end event will
      delete this;
      return;
    }
    request(health_);
    {
      std::lock_guard<std::mutex> lock(health_.mutex_);
      bool ended;
      {
        std::lock_guard<std::mutex> own(mutex_);
        arrived_flag_ = true;
        ended = ended_flag_;
        if (ended) finish_if_quiet();
      }
      if (!ended) {
        health_.watchers_.insert(this);
        send(health_.status_locked(name()));
        if (health_.shut_down_) close();
      }
    }
    event_back();  // the arrival's hold
  }

  void on_written(bool ok) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      writing_ = false;
      if (ok && waiting_) {
        write(*waiting_);
        waiting_.reset();
      } else {
        finish_if_quiet();
      }
    }
    event_back();
  }

  // The call is over: its client went, or the server's shutdown cancelled it.
  void on_end(bool) {
    {
      std::lock_guard<std::mutex> lock(health_.mutex_);
      health_.watchers_.erase(this);
      std::lock_guard<std::mutex> own(mutex_);
      ended_flag_ = true;
      finish_if_quiet();
    }
    event_back();
  }
  void on_finished(bool) {
    // After the thread that finished the call, which held mutex_ through Finish() (gRPC's
    // core, which orders the two, is not seen by ThreadSanitizer).
    { std::lock_guard<std::mutex> lock(mutex_); }
    event_back();
  }

  // Under mutex_.
  void write(Status status) {
    response_.set_status(status);
    writing_ = true;
    events_left_.fetch_add(1, std::memory_order_relaxed);
    handoff(&written_);
    writer_.Write(response_, &written_);
  }
  void finish_if_quiet() {
    if (!arrived_flag_ || !(ended_flag_ || closing_) || writing_ || finishing_) return;
    finishing_ = true;
    events_left_.fetch_add(1, std::memory_order_relaxed);
    handoff(&finished_);
    writer_.Finish(ended_flag_ ? grpc::Status(grpc::StatusCode::CANCELLED, "the watch ended")
                               : grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is shutting down"),
                   &finished_);
  }
  void event_back() {
    if (events_left_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  HealthService& health_;
  grpc::ServerContext context_;
  HealthCheckRequest request_;
  grpc::ServerAsyncWriter<HealthCheckResponse> writer_{&context_};
  HealthCheckResponse response_;  // the write in flight
  QueueEvent arrived_ = queue_event<WatchCall, &WatchCall::on_arrival>(this);
  QueueEvent ended_ = queue_event<WatchCall, &WatchCall::on_end>(this);
  QueueEvent written_ = queue_event<WatchCall, &WatchCall::on_written>(this);
  QueueEvent finished_ = queue_event<WatchCall, &WatchCall::on_finished>(this);
  // The end event, the arrival's work (which the end event may overtake), and each
  // operation in flight.
  std::atomic<int> events_left_{2};
  std::mutex mutex_;
  std::optional<Status> last_;     // the last status written or waiting
  std::optional<Status> waiting_;  // to write once the write in flight is back
  bool writing_ = false;
  bool arrived_flag_ = false;  // the arrival's work is done or under way with mutex_ held
  bool ended_flag_ = false;    // the end event came
  bool closing_ = false;     // the server is shutting down
  bool finishing_ = false;
};

void HealthService::start(grpc::ServerCompletionQueue& queue) {
  queue_ = &queue;
  // A few places each: probes come one at a time, and each call offers the next on arrival.
  for (int i = 0; i < 4; ++i) {
    CheckCall::request(*this);
    WatchCall::request(*this);
  }
}

HealthService::Status HealthService::status(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return status_locked(name);
}

HealthService::Status HealthService::status_locked(const std::string& name) const {
  const auto it = statuses_.find(name);
  return it == statuses_.end() ? HealthCheckResponse::SERVICE_UNKNOWN : it->second;
}

void HealthService::set(const std::string& name, bool serving) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (shut_down_) return;
  update(name, serving ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING);
}

void HealthService::shutdown() {
  std::lock_guard<std::mutex> lock(mutex_);
  shut_down_ = true;
  for (auto& [name, status] : statuses_) update(name, HealthCheckResponse::NOT_SERVING);
  for (WatchCall* watcher : watchers_) watcher->close();
}

void HealthService::update(const std::string& name, Status status) {
  statuses_[name] = status;
  for (WatchCall* watcher : watchers_) {
    if (watcher->name() == name) watcher->send(status);
  }
}

}  // namespace nmt::server
