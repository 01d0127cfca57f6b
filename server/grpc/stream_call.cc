// TranslationService's TranslateStream calls (the class TranslationService::StreamCall), apart
// from the unary Translate call of translation_service.cc.
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "server/grpc/call_context.h"
#include "server/grpc/queue_event.h"
#include "server/grpc/translation_service.h"
#include "server/pipeline/status.h"

namespace nmt::server {

// TranslateStream: each message read is admitted at once (or answered with its error), so
// that messages read ahead decode together; answers are written in message order as they
// complete, each with its own status. Reading pauses while max_stream_messages_ messages
// are unanswered or unwritten: a client that stops reading its answers stalls their writes,
// and then the server's reads (flow control: what the client still sends waits in the
// stream's HTTP/2 window), instead of the server buffering without end. A failed write or
// the client's cancellation cancels every pending job, and the stream finishes CANCELLED
// once all their callbacks have come back.
//
// Threads: the queue's threads run the read, write and end events, the scheduler runs the
// job callbacks (holding nothing). State is guarded by mutex_; gRPC operations (Read, Write,
// Finish) are started by one thread at a time, the "actor" (pump()), never under mutex_.
// Finish is the actor's last act: nothing starts an operation after it, and no job callback
// is left to touch the call. The call lives until its end event and every operation it
// started have come back, and the actor is out of Finish() (events_left_).
class TranslationService::StreamCall final {
 public:
  // Requests the next TranslateStream call on the service's queue.
  static void request(TranslationService& service) {
    auto* call = new StreamCall(service);
    call->context_.AsyncNotifyWhenDone(&call->ended_event_);
    handoff(&call->arrived_event_);
    handoff(&call->ended_event_);
    service.RequestTranslateStream(&call->context_, &call->stream_, service.queue_,
                                   service.queue_, &call->arrived_event_);
  }

 private:
  explicit StreamCall(TranslationService& service)
      : service_(service), permit_(service.pipeline_) {}

  // A stream arrived in this place (ok), or the server is shutting down (not ok: no stream
  // came, and no end event will). The end event may come on another thread before or while
  // this runs (a client that cancels at once): the arrival is the stream's first actor
  // (acting_ starts set), so that the end event's pump leaves the stream to it.
  void on_arrival(bool ok) {
    if (!ok) {
      delete this;
      return;
    }
    request(service_);
    service_.call_started();
    deadline_ = steady_deadline(context_);
    // One traceparent for the stream and each of its messages, echoed in the initial
    // metadata (sent with the first answer, or the finish).
    traceparent_ = call_traceparent(context_);
    context_.AddInitialMetadata("traceparent", traceparent_);
    grpc::Status refused = service_.authenticate(context_, "TranslateStream", traceparent_, &caller_);
    if (refused.ok() && !permit_.acquire()) {
      refused = permit_.busy();
      service_.pipeline_.record_refused("TranslateStream", refused, traceparent_);
    }
    if (!refused.ok()) {
      end_stream(refused);  // acting_ stays set: nothing acts on a stream that never read
      return;
    }
    std::unique_lock<std::mutex> lock(mutex_);
    acting_ = false;
    pump(std::move(lock));
  }

  void on_read(bool ok) {
    read_done(ok);
    event_back();
  }
  void on_written(bool ok) {
    write_done(ok);
    event_back();
  }
  // The call is over: finished, or cancelled by its client or its deadline.
  void on_end(bool) {
    if (context_.IsCancelled()) cancel_all();
    event_back();
  }
  void on_finished(bool) { event_back(); }
  void event_back() {
    if (events_left_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    TranslationService& service = service_;
    delete this;
    service.call_done();
  }

 private:
  struct Entry {
    RequestRecord record;
    AdmittedRequest admitted;
    std::shared_ptr<Job> job;  // while its callback has not come back
    bool done = false;         // answered: `response` is final
    v1::TranslateStreamResponse response;
  };

  // A message, or the end of the client's messages (ok=false).
  void read_done(bool ok) {
    if (!ok) {  // the client half-closed, or the stream broke
      std::unique_lock<std::mutex> lock(mutex_);
      reading_ = false;
      read_done_ = true;
      pump(std::move(lock));
      return;
    }
    auto entry = std::make_shared<Entry>();
    entry->record = service_.pipeline_.begin("TranslateStream", request_, traceparent_);
    entry->response.set_request_id(entry->record.request_id);
    bool cancelled;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      cancelled = cancelled_;
      if (!cancelled) {
        pending_.push_back(entry);
        ++outstanding_;
        admitting_ = true;
      }
    }
    if (cancelled) {  // the stream is going away: recorded, and answered nowhere
      service_.pipeline_.record(entry->record,
                      grpc::Status(grpc::StatusCode::CANCELLED, "the stream was closed"));
      std::unique_lock<std::mutex> lock(mutex_);
      reading_ = false;
      pump(std::move(lock));
      return;
    }
    // Admitted here when the model is loaded, else on the loading thread once it is. Until
    // then reading_ stays set (request_ is in use, the next read waits) and admitting_
    // keeps a cancelled stream from finishing under the admission.
    service_.pipeline_.admit(
        request_, deadline_, entry->record, entry->admitted,
        [this, entry](JobResult result) { completed(*entry, result); },
        [this, entry](std::shared_ptr<Job> job, const grpc::Status& refused) {
          admission(entry, std::move(job), refused);
        },
        caller_);
  }

  // A message's admission came back: its job, or why it is refused.
  void admission(const std::shared_ptr<Entry>& entry, std::shared_ptr<Job> job,
                 const grpc::Status& refused) {
    if (!refused.ok()) {
      answer(*entry, refused);
      service_.pipeline_.record(entry->record, refused);
    }
    bool cancel = false;
    std::unique_lock<std::mutex> lock(mutex_);
    if (!refused.ok()) {
      entry->done = true;
      --outstanding_;
    } else if (!entry->done) {
      entry->job = job;
      cancel = cancelled_;  // OnCancel came while we were submitting
    }
    if (cancel) {
      // Its callback may run here; with reading_ and admitting_ still set its pump neither
      // reads nor finishes the stream under this function.
      lock.unlock();
      entry->admitted.scheduler->cancel(job);
      lock.lock();
    }
    reading_ = false;
    admitting_ = false;
    pump(std::move(lock));
  }

  void write_done(bool ok) {
    std::unique_lock<std::mutex> lock(mutex_);
    writing_ = false;
    if (ok) {
      pending_.pop_front();
      pump(std::move(lock));
      return;
    }
    lock.unlock();
    cancel_all();
  }

  static void answer(Entry& entry, const grpc::Status& status) {
    entry.response.set_status_code(status.error_code());
    entry.response.set_status_message(status.error_message());
  }

  // A job's callback: a scheduler thread, or the thread that cancelled the job.
  void completed(Entry& entry, const JobResult& result) {
    // Nobody else reads an entry before it is done.
    const grpc::Status status = service_.pipeline_.respond(
        entry.admitted, result, deadline_, entry.record, entry.response.mutable_response());
    if (!status.ok()) entry.response.clear_response();
    answer(entry, status);
    service_.pipeline_.record(entry.record, status);
    std::unique_lock<std::mutex> lock(mutex_);
    entry.done = true;
    entry.job.reset();
    --outstanding_;
    pump(std::move(lock));  // the last touch of the reactor unless this thread acts
  }

  void cancel_all() {
    std::vector<std::pair<Scheduler*, std::shared_ptr<Job>>> jobs;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!cancelled_) {
        cancelled_ = true;
        for (const auto& e : pending_) {
          if (!e->done && e->job) jobs.emplace_back(e->admitted.scheduler, e->job);
        }
      }
    }
    // Their callbacks may run here, on this thread.
    for (auto& [scheduler, job] : jobs) scheduler->cancel(job);
    pump(std::unique_lock<std::mutex>(mutex_));
  }

  // Starts what the state calls for. Called with mutex_ held; the first caller becomes the
  // actor and loops until nothing changed meanwhile; later callers leave it a note (dirty_).
  void pump(std::unique_lock<std::mutex> lock) {
    if (acting_) {
      dirty_ = true;
      return;
    }
    acting_ = true;
    while (true) {
      dirty_ = false;
      const v1::TranslateStreamResponse* write = nullptr;
      bool read = false;
      std::optional<grpc::Status> finish;
      if (cancelled_) {
        // Reads may be outstanding: they end (ok=false) once the call is finished.
        if (outstanding_ == 0 && !writing_ && !admitting_) {
          finish = grpc::Status(grpc::StatusCode::CANCELLED, "the stream was closed");
        }
      } else {
        if (!writing_ && !pending_.empty() && pending_.front()->done) {
          writing_ = true;
          write = &pending_.front()->response;
        }
        if (!reading_ && !read_done_ && pending_.size() < service_.max_stream_messages_) {
          reading_ = true;
          read = true;
        }
        if (read_done_ && !reading_ && !writing_ && pending_.empty()) finish = grpc::Status::OK;
      }
      if (finish) {
        permit_.release();
        lock.unlock();
        end_stream(*finish);  // acting_ stays set: nothing starts after this
        return;
      }
      lock.unlock();
      if (write) {  // the entry stays at the front until its write is back
        events_left_.fetch_add(1, std::memory_order_relaxed);
        handoff(&written_event_);
        stream_.Write(*write, &written_event_);
      }
      if (read) {
        events_left_.fetch_add(1, std::memory_order_relaxed);
        handoff(&read_event_);
        stream_.Read(&request_, &read_event_);
      }
      lock.lock();
      if (!dirty_) {
        acting_ = false;
        return;
      }
    }
  }

  // The actor's last act (and the refusal's, which is its own actor).
  void end_stream(const grpc::Status& status) {
    events_left_.fetch_add(1, std::memory_order_relaxed);
    handoff(&finished_event_);
    stream_.Finish(status, &finished_event_);
    event_back();  // the actor's hold: the call may be gone after this
  }

  TranslationService& service_;
  grpc::ServerContext context_;
  grpc::ServerAsyncReaderWriter<v1::TranslateStreamResponse, v1::TranslateRequest> stream_{&context_};
  QueueEvent arrived_event_ = queue_event<StreamCall, &StreamCall::on_arrival>(this);
  QueueEvent ended_event_ = queue_event<StreamCall, &StreamCall::on_end>(this);
  QueueEvent read_event_ = queue_event<StreamCall, &StreamCall::on_read>(this);
  QueueEvent written_event_ = queue_event<StreamCall, &StreamCall::on_written>(this);
  QueueEvent finished_event_ = queue_event<StreamCall, &StreamCall::on_finished>(this);
  // The end event, each operation in flight, and the actor's hold until Finish() is started.
  std::atomic<int> events_left_{2};
  CallPermit permit_;
  Caller caller_;  // who the stream is (fair queueing, quotas)
  Clock::time_point deadline_;
  std::string traceparent_;  // the stream's, for each of its messages
  v1::TranslateRequest request_;  // the read in flight

  std::mutex mutex_;
  std::deque<std::shared_ptr<Entry>> pending_;  // message order; the front is written next
  int outstanding_ = 0;   // pending entries whose job callback has not come back
  bool reading_ = false;  // a read in flight, or its event running, or its admission
  bool admitting_ = false;  // a message's admission has not come back
  bool read_done_ = false;
  bool writing_ = false;
  bool cancelled_ = false;
  // Set from the start: until the arrival has run, nothing may act. An end event taken off
  // the queue before the arrival (another thread took it first) would otherwise finish the
  // stream, and the arrival then finish it a second time (gRPC aborts the server:
  // GRPC_CALL_ERROR_TOO_MANY_OPERATIONS).
  bool acting_ = true;
  bool dirty_ = false;
};

void TranslationService::offer_stream_places(int places) {
  for (int i = 0; i < places; ++i) StreamCall::request(*this);
}

}  // namespace nmt::server
