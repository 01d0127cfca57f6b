#include "server/http/http_front.h"

#include <microhttpd.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <unordered_set>

#include "server/observability/logging.h"

namespace nmt::server {
namespace {

using Clock = std::chrono::steady_clock;

constexpr unsigned kListenBacklog = 1024;  // a burst of connections waits here, not in SYN retries
constexpr size_t kPostBufferBytes = 16384;  // libmicrohttpd's form parser's window
// How often the watchdog looks for connections past their deadline: the deadlines hold to
// within this.
constexpr auto kWatchdogPeriod = std::chrono::milliseconds(100);

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// The 408 a connection past a deadline gets before it is closed.
std::string timed_out(const std::string& what, double limit, const char* key) {
  char seconds_text[32];
  std::snprintf(seconds_text, sizeof seconds_text, "%g", limit);
  const std::string body = "{\"error\":\"the request's " + what + " did not arrive within " +
                           seconds_text + " s (" + key + ")\"}";
  return "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Type: application/json\r\n"
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// One connection's deadline: armed while its request line and headers, or its body, are
// being read; not while its answer is computed or sent.
struct Watched {
  int fd = -1;
  bool armed = false;
  Clock::time_point deadline;
  const std::string* answer = nullptr;  // the 408 of the phase
};

// The connections and their deadlines, shared by the connection threads and the watchdog.
class Deadlines {
 public:
  void add(Watched* w) {
    std::lock_guard<std::mutex> lock(mutex_);
    all_.insert(w);
  }
  // libmicrohttpd tells of a connection's close before it closes the socket, so the
  // watchdog never touches a descriptor that was reused.
  void remove(Watched* w) {
    std::lock_guard<std::mutex> lock(mutex_);
    all_.erase(w);
  }
  void arm(Watched* w, Clock::duration limit, const std::string* answer) {
    std::lock_guard<std::mutex> lock(mutex_);
    w->armed = true;
    w->deadline = Clock::now() + limit;
    w->answer = answer;
  }
  void disarm(Watched* w) {
    std::lock_guard<std::mutex> lock(mutex_);
    w->armed = false;
  }
  // Each connection past its deadline gets its 408 (nothing of an answer has been sent on
  // it; best effort, never blocking) and is shut down: its thread then reads the end of
  // the connection and closes it.
  void expire(Clock::time_point now) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Watched* w : all_) {
      if (!w->armed || w->deadline > now) continue;
      w->armed = false;
      send(w->fd, w->answer->data(), w->answer->size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      shutdown(w->fd, SHUT_RDWR);
    }
  }

 private:
  std::mutex mutex_;
  std::unordered_set<Watched*> all_;
};

// Requests handed to the handler and not yet ended, and whether answers may still resume
// their connections (not once stop() closes them).
struct Gate {
  std::mutex mutex;
  std::condition_variable changed;
  bool open = true;
  int answering = 0;
};

// One request, from its headers to its end (libmicrohttpd's per-request pointer holds a
// shared_ptr to it; so does its Respond).
struct Exchange {
  MHD_Connection* connection = nullptr;
  HttpRequest request;
  bool dispatched = false;  // handed to the handler
  std::mutex mutex;         // the answer, between Respond and the connection's thread
  std::optional<HttpAnswer> answer;
  bool suspended = false;
};

MHD_Result collect_header(void* cls, MHD_ValueKind, const char* key, const char* value) {
  std::string name(key);
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  static_cast<HttpRequest*>(cls)->headers.emplace(std::move(name), value ? value : "");
  return MHD_YES;
}

MHD_Result collect_argument(void* cls, MHD_ValueKind, const char* key, const char* value) {
  static_cast<HttpRequest*>(cls)->form.emplace(key, value ? value : "");
  return MHD_YES;
}

// A form body's fields as libmicrohttpd's parser hands them over: a value may come in
// pieces (off > 0 continues the field before); a field's later values are dropped.
struct FormFields {
  std::map<std::string, std::string>* form;
  std::map<std::string, std::string>* filenames;
  bool taking = false;
  std::string* value = nullptr;
};

MHD_Result collect_field(void* cls, MHD_ValueKind, const char* key, const char* filename, const char*,
                         const char*, const char* data, uint64_t off, size_t size) {
  auto& fields = *static_cast<FormFields*>(cls);
  // A multipart part without a name: libmicrohttpd hands it over with a null key (found by
  // fuzz_multipart: taken as a string, it ended the server).
  if (key == nullptr) return MHD_YES;
  if (off == 0) {
    const auto [it, inserted] = fields.form->emplace(key, std::string());
    fields.taking = inserted;
    fields.value = &it->second;
    if (inserted && filename) fields.filenames->emplace(key, filename);
  }
  if (fields.taking && size > 0) fields.value->append(data, size);
  return MHD_YES;
}

void log_library(void*, const char* format, va_list args) {
  char text[512];
  std::vsnprintf(text, sizeof text, format, args);
  std::string message(text);
  while (!message.empty() && message.back() == '\n') message.pop_back();
  log_event(spdlog::level::debug, "http connection", {{"detail", message}});
}

}  // namespace

std::string HttpRequest::header(const std::string& lowercase_name) const {
  const auto found = headers.find(lowercase_name);
  return found == headers.end() ? std::string() : found->second;
}

class HttpFront::Impl {
 public:
  Impl(const std::string& host, int port, const HttpLimits& limits, size_t max_body_bytes,
       Handler handler, prometheus::Gauge* connections)
      : limits_(limits),
        connections_(connections),
        max_body_bytes_(max_body_bytes),
        handler_(std::move(handler)),
        head_timed_out_(timed_out("line and headers", limits.header_timeout_seconds,
                                  "http.header_timeout_seconds")),
        body_timed_out_(timed_out("body", limits.body_timeout_seconds, "http.body_timeout_seconds")),
        gate_(std::make_shared<Gate>()) {
    const std::string address = host + ":" + std::to_string(port);
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* found = nullptr;
    if (const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
        rc != 0) {
      throw std::runtime_error("cannot listen on " + address + ": " + gai_strerror(rc));
    }
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ITC | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ERROR_LOG;
    if (found->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    std::vector<MHD_OptionItem> options = {
        {MHD_OPTION_SOCK_ADDR, 0, found->ai_addr},
        {MHD_OPTION_CONNECTION_LIMIT, limits.max_connections, nullptr},
        {MHD_OPTION_PER_IP_CONNECTION_LIMIT, limits.max_connections_per_address, nullptr},
        {MHD_OPTION_CONNECTION_TIMEOUT, limits.idle_timeout_seconds, nullptr},
        {MHD_OPTION_LISTEN_BACKLOG_SIZE, kListenBacklog, nullptr},
        {MHD_OPTION_NOTIFY_CONNECTION, reinterpret_cast<intptr_t>(&on_connection), this},
        {MHD_OPTION_NOTIFY_COMPLETED, reinterpret_cast<intptr_t>(&on_completed), this},
        {MHD_OPTION_EXTERNAL_LOGGER, reinterpret_cast<intptr_t>(&log_library), nullptr},
    };
    if (limits.threads > 1) options.push_back({MHD_OPTION_THREAD_POOL_SIZE, limits.threads, nullptr});
    options.push_back({MHD_OPTION_END, 0, nullptr});
    daemon_ = MHD_start_daemon(flags, 0, nullptr, nullptr, &on_request, this, MHD_OPTION_ARRAY,
                               options.data(), MHD_OPTION_END);
    const int error = errno;
    freeaddrinfo(found);
    if (!daemon_) {
      throw std::runtime_error("cannot listen on " + address + ": " + std::strerror(error));
    }
    const MHD_DaemonInfo* bound = MHD_get_daemon_info(daemon_, MHD_DAEMON_INFO_BIND_PORT);
    port_ = bound ? bound->port : port;
    watchdog_ = std::thread([this] { watch(); });
  }

  int port() const { return port_; }

  ~Impl() { stop(); }

  void stop() {
    if (!daemon_) return;
    const MHD_socket listening = MHD_quiesce_daemon(daemon_);
    {
      std::unique_lock<std::mutex> lock(gate_->mutex);
      // Every request handed to the handler gets its answer (a translation always completes:
      // the decode loops stop after this) and then ends: sent, or its connection closed by
      // the idle limit when its client does not read. The handler's completions may use
      // the HttpApi, so none may come after this returns.
      gate_->changed.wait(lock, [&] { return gate_->answering == 0; });
      gate_->open = false;  // an answer from now on is dropped: its connection is closing
    }
    MHD_stop_daemon(daemon_);
    daemon_ = nullptr;
    if (listening != MHD_INVALID_SOCKET) ::close(listening);
    {
      std::lock_guard<std::mutex> lock(watchdog_mutex_);
      stopping_ = true;
    }
    watchdog_wake_.notify_all();
    watchdog_.join();
  }

 private:
  static Watched* watched(MHD_Connection* connection) {
    const MHD_ConnectionInfo* info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info ? static_cast<Watched*>(info->socket_context) : nullptr;
  }

  static void on_connection(void* cls, MHD_Connection* connection, void** socket_context,
                            MHD_ConnectionNotificationCode code) {
    Impl& self = *static_cast<Impl*>(cls);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
      auto* w = new Watched;
      w->fd = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD)->connect_fd;
      *socket_context = w;
      self.deadlines_.add(w);
      self.deadlines_.arm(w, seconds(self.limits_.header_timeout_seconds), &self.head_timed_out_);
      if (self.connections_) self.connections_->Increment();
      return;
    }
    auto* w = static_cast<Watched*>(*socket_context);
    if (!w) return;
    if (self.connections_) self.connections_->Decrement();
    self.deadlines_.remove(w);
    delete w;
    *socket_context = nullptr;
  }

  // A request ended (answered, or its connection closed): a kept-alive connection's next
  // request head is due within the header timeout.
  static void on_completed(void* cls, MHD_Connection* connection, void** req_cls,
                           MHD_RequestTerminationCode code) {
    Impl& self = *static_cast<Impl*>(cls);
    auto* holder = static_cast<std::shared_ptr<Exchange>*>(*req_cls);
    *req_cls = nullptr;
    if (holder) {
      if ((*holder)->dispatched) {
        std::lock_guard<std::mutex> lock(self.gate_->mutex);
        --self.gate_->answering;
        self.gate_->changed.notify_all();
      }
      delete holder;
    }
    if (code != MHD_REQUEST_TERMINATED_COMPLETED_OK) return;
    if (Watched* w = watched(connection)) {
      self.deadlines_.arm(w, seconds(self.limits_.header_timeout_seconds), &self.head_timed_out_);
    }
  }

  static MHD_Result on_request(void* cls, MHD_Connection* connection, const char* url,
                               const char* method, const char*, const char* upload_data,
                               size_t* upload_size, void** req_cls) {
    Impl& self = *static_cast<Impl*>(cls);
    auto* holder = static_cast<std::shared_ptr<Exchange>*>(*req_cls);
    if (!holder) {  // the headers are in: the body is due within its own deadline
      auto exchange = std::make_shared<Exchange>();
      exchange->connection = connection;
      exchange->request.method = method;
      exchange->request.path = url;
      MHD_get_connection_values(connection, MHD_HEADER_KIND, &collect_header, &exchange->request);
      MHD_get_connection_values(connection, MHD_GET_ARGUMENT_KIND, &collect_argument,
                                &exchange->request);
      holder = new std::shared_ptr<Exchange>(std::move(exchange));
      *req_cls = holder;
      if (Watched* w = watched(connection)) {
        self.deadlines_.arm(w, seconds(self.limits_.body_timeout_seconds), &self.body_timed_out_);
      }
      // A declared length over the limit is refused before a byte of the body is read.
      const std::string length = (*holder)->request.header("content-length");
      if (!length.empty() && std::strtoull(length.c_str(), nullptr, 10) > self.max_body_bytes_) {
        (*holder)->request.body_over_limit = true;
        return self.dispatch(connection, *holder);
      }
      return MHD_YES;
    }
    Exchange& exchange = **holder;
    if (*upload_size > 0) {
      HttpRequest& request = exchange.request;
      if (!exchange.dispatched && !request.body_over_limit) {
        if (request.body.size() + *upload_size > self.max_body_bytes_) {
          request.body_over_limit = true;  // the rest is read and dropped (within the deadline)
          std::string().swap(request.body);
        } else {
          request.body.append(upload_data, *upload_size);
        }
      }
      *upload_size = 0;
      return MHD_YES;
    }
    if (!exchange.dispatched) return self.dispatch(connection, *holder);
    return send(connection, exchange);  // resumed: the answer is in
  }

  // The whole request to the handler; its answer is sent now when it came at once, else
  // the connection waits suspended (no thread waits with it) until Respond resumes it.
  MHD_Result dispatch(MHD_Connection* connection, const std::shared_ptr<Exchange>& exchange) {
    exchange->dispatched = true;
    if (Watched* w = watched(connection)) deadlines_.disarm(w);
    HttpRequest& request = exchange->request;
    request.peer = peer_address(connection);
    if (!request.body_over_limit && !request.body.empty()) parse_form(connection, request);
    {
      std::lock_guard<std::mutex> lock(gate_->mutex);
      ++gate_->answering;
    }
    handler_(request, [gate = gate_, exchange](HttpAnswer answer) {
      std::lock_guard<std::mutex> gate_lock(gate->mutex);
      if (!gate->open) return;
      std::lock_guard<std::mutex> lock(exchange->mutex);
      exchange->answer = std::move(answer);
      if (exchange->suspended) {
        exchange->suspended = false;
        MHD_resume_connection(exchange->connection);
      }
    });
    std::lock_guard<std::mutex> lock(exchange->mutex);
    if (exchange->answer) return queue(connection, *exchange->answer);
    MHD_suspend_connection(connection);
    exchange->suspended = true;
    return MHD_YES;
  }

  static std::string peer_address(MHD_Connection* connection) {
    const MHD_ConnectionInfo* info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (info == nullptr || info->client_addr == nullptr) return "";
    const sockaddr* a = info->client_addr;
    const socklen_t length = a->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
    char host[NI_MAXHOST];
    if (getnameinfo(a, length, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0) return "";
    return host;
  }

  static void parse_form(MHD_Connection* connection, HttpRequest& request) {
    FormFields fields{&request.form, &request.form_filenames};
    // Null unless the body is url-encoded or multipart/form-data.
    MHD_PostProcessor* parser =
        MHD_create_post_processor(connection, kPostBufferBytes, &collect_field, &fields);
    if (!parser) return;
    MHD_post_process(parser, request.body.data(), request.body.size());
    MHD_destroy_post_processor(parser);
  }

  static MHD_Result send(MHD_Connection* connection, Exchange& exchange) {
    std::lock_guard<std::mutex> lock(exchange.mutex);
    if (!exchange.answer) return MHD_NO;  // cannot happen: resumed only once answered
    return queue(connection, *exchange.answer);
  }

  static MHD_Result queue(MHD_Connection* connection, const HttpAnswer& answer) {
    MHD_Response* response = MHD_create_response_from_buffer(
        answer.body.size(), const_cast<char*>(answer.body.data()), MHD_RESPMEM_MUST_COPY);
    if (!response) return MHD_NO;
    if (!answer.body.empty()) {
      MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, answer.content_type.c_str());
    }
    for (const auto& [name, value] : answer.headers) {
      MHD_add_response_header(response, name.c_str(), value.c_str());
    }
    const MHD_Result queued =
        MHD_queue_response(connection, static_cast<unsigned>(answer.status), response);
    MHD_destroy_response(response);
    return queued;
  }

  void watch() {
    std::unique_lock<std::mutex> lock(watchdog_mutex_);
    while (!stopping_) {
      watchdog_wake_.wait_for(lock, kWatchdogPeriod);
      deadlines_.expire(Clock::now());
    }
  }

  const HttpLimits limits_;
  prometheus::Gauge* const connections_;
  int port_ = 0;
  const size_t max_body_bytes_;
  const Handler handler_;
  const std::string head_timed_out_;
  const std::string body_timed_out_;
  std::shared_ptr<Gate> gate_;
  Deadlines deadlines_;
  MHD_Daemon* daemon_ = nullptr;
  std::mutex watchdog_mutex_;
  std::condition_variable watchdog_wake_;
  bool stopping_ = false;
  std::thread watchdog_;
};

HttpFront::HttpFront(const std::string& host, int port, const HttpLimits& limits,
                     size_t max_body_bytes, Handler handler, prometheus::Gauge* connections)
    : impl_(std::make_unique<Impl>(host, port, limits, max_body_bytes, std::move(handler),
                                   connections)) {}

HttpFront::~HttpFront() = default;

void HttpFront::stop() { impl_->stop(); }

int HttpFront::port() const { return impl_->port(); }

}  // namespace nmt::server
