#include "server/http/metrics_endpoint.h"

#include <fcntl.h>
#include <httplib.h>
#include <netdb.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <stdexcept>
#include <thread>
#include <unordered_map>

namespace nmt::server {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";
constexpr const char* kTimedOut =
    "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
constexpr int kListenBacklog = 1024;

// The numeric address of a socket's own (local) or peer end.
void socket_address(int fd, bool local, std::string& ip, int& port) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  const int rc = local ? getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length)
                       : getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length);
  char host[NI_MAXHOST] = "", service[NI_MAXSERV] = "0";
  if (rc == 0) {
    getnameinfo(reinterpret_cast<sockaddr*>(&address), length, host, sizeof host, service,
                sizeof service, NI_NUMERICHOST | NI_NUMERICSERV);
  }
  ip = host;
  port = std::atoi(service);
}

// httplib's view of one connection: the request bytes already gathered, and the answer
// collected in memory. Nothing here touches the network, so httplib never blocks.
class GatheredStream final : public httplib::Stream {
 public:
  GatheredStream(int fd, const std::string& request, std::string& answer)
      : fd_(fd), request_(request), answer_(answer) {}

  bool is_readable() const override { return read_ < request_.size(); }
  bool is_writable() const override { return true; }
  // End of input once the gathered bytes are consumed: a request that needs more (a body)
  // is answered as incomplete.
  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, request_.size() - read_);
    std::memcpy(ptr, request_.data() + read_, n);
    read_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    answer_.append(ptr, size);
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    socket_address(fd_, false, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    socket_address(fd_, true, ip, port);
  }
  socket_t socket() const override { return fd_; }

 private:
  const int fd_;
  const std::string& request_;
  std::string& answer_;
  size_t read_ = 0;
};

// httplib's routing and request processing, driven from outside its listen loop.
class Http final : public httplib::Server {
 public:
  explicit Http(std::function<std::string()> body) {
    // httplib's default also sets SO_REUSEPORT, which would let a second server bind the
    // same port and take half the scrapes instead of failing at start.
    set_socket_options([](socket_t sock) {
      const int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });
    // Refused before httplib would read a body: no request here has one.
    set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
      if (req.path != "/metrics") {
        res.status = 404;
        res.set_content("only GET /metrics is served here\n", "text/plain");
        return HandlerResponse::Handled;
      }
      if (req.method != "GET" && req.method != "HEAD") {
        res.status = 405;
        res.set_header("Allow", "GET, HEAD");
        res.set_content("only GET /metrics is served here\n", "text/plain");
        return HandlerResponse::Handled;
      }
      const std::string length = req.get_header_value("Content-Length");
      if (req.has_header("Transfer-Encoding") || (!length.empty() && length != "0")) {
        res.status = 400;
        res.set_content("GET /metrics takes no request body\n", "text/plain");
        return HandlerResponse::Handled;
      }
      return HandlerResponse::Unhandled;
    });
    Get("/metrics", [body = std::move(body)](const httplib::Request&, httplib::Response& res) {
      res.set_content(body(), kContentType);
    });
  }

  // The listening socket (after bind_to_port), which the endpoint closes.
  int listening_socket() const { return svr_sock_; }

  // httplib's answer to one gathered request; empty when there was nothing to answer.
  std::string answer(int fd, const std::string& request) {
    std::string out;
    GatheredStream stream(fd, request, out);
    bool connection_closed = false;
    process_request(stream, /*close_connection=*/true, connection_closed, nullptr);
    return out;
  }
};

}  // namespace

class MetricsEndpoint::Impl {
 public:
  Impl(const std::string& host, int port, std::function<std::string()> body,
       MetricsEndpointLimits limits)
      : http_(std::move(body)), limits_(limits),
        timeout_(std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double>(limits.request_timeout_seconds))) {
    const std::string address = host + ":" + std::to_string(port);
    const bool bound = port == 0 ? http_.bind_to_any_port(host) > 0 : http_.bind_to_port(host, port);
    if (!bound) {
      throw std::runtime_error("cannot listen on " + address + ": " + std::strerror(errno));
    }
    listen_fd_ = http_.listening_socket();
    // httplib listens with a backlog of 5: a burst of connections would have the kernel
    // drop a scraper's SYN (retried a second later). Listening again resizes it.
    ::listen(listen_fd_, kListenBacklog);
    set_nonblocking(listen_fd_);
    std::string ip;
    socket_address(listen_fd_, true, ip, port_);
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (epoll_fd_ < 0 || wake_fd_ < 0) {
      close_fds();
      throw std::runtime_error("epoll/eventfd for " + address + ": " + std::strerror(errno));
    }
    watch(listen_fd_, EPOLLIN, EPOLL_CTL_ADD);
    watch(wake_fd_, EPOLLIN, EPOLL_CTL_ADD);
    thread_ = std::thread([this] { run(); });
  }

  ~Impl() {
    const uint64_t one = 1;
    if (write(wake_fd_, &one, sizeof one) != sizeof one) {
      // An eventfd write of 1 cannot fail short of a full counter; nothing else to do.
    }
    thread_.join();
    for (auto& [fd, connection] : connections_) ::close(fd);
    close_fds();
  }

  int port() const { return port_; }

 private:
  enum class Phase { kHead, kAnswer, kDrain };
  struct Connection {
    Phase phase = Phase::kHead;
    Clock::time_point deadline;
    uint64_t order = 0;   // accept order = deadline order (one timeout for all)
    std::string in;       // the request head as gathered
    std::string out;      // the answer, from `sent` on still to send
    size_t sent = 0;
  };

  static void set_nonblocking(int fd) {
    const int flags = fcntl(fd, F_GETFL, 0);
    fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  }
  void watch(int fd, uint32_t events, int op) {
    epoll_event event{};
    event.events = events;
    event.data.fd = fd;
    epoll_ctl(epoll_fd_, op, fd, &event);
  }
  void close_fds() {
    if (listen_fd_ >= 0) ::close(listen_fd_);
    if (epoll_fd_ >= 0) ::close(epoll_fd_);
    if (wake_fd_ >= 0) ::close(wake_fd_);
  }

  void run() {
    epoll_event events[64];
    while (true) {
      int timeout_ms = -1;
      if (!by_order_.empty()) {
        const auto left = connections_.at(by_order_.begin()->second).deadline - Clock::now();
        timeout_ms = std::max<int>(
            0, static_cast<int>(std::ceil(std::chrono::duration<double, std::milli>(left).count())));
      }
      const int n = epoll_wait(epoll_fd_, events, 64, timeout_ms);
      if (n < 0 && errno != EINTR) return;
      for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        if (fd == wake_fd_) return;
        if (fd == listen_fd_) {
          accept_all();
        } else if (connections_.count(fd)) {
          serve(fd, events[i].events);
        }
      }
      expire(Clock::now());
    }
  }

  void accept_all() {
    while (true) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if ((errno == EMFILE || errno == ENFILE) && !by_order_.empty()) {
          drop(by_order_.begin()->second);  // out of descriptors: the oldest makes room
          continue;
        }
        if (errno == EMFILE || errno == ENFILE) {
          // Nothing of ours to close; the connection waits in the backlog meanwhile.
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        return;  // EAGAIN: accepted everything pending
      }
      if (static_cast<int>(connections_.size()) >= limits_.max_connections) {
        drop(by_order_.begin()->second);
      }
      Connection& c = connections_[fd];
      c.deadline = Clock::now() + timeout_;
      c.order = next_order_++;
      by_order_.emplace(c.order, fd);
      watch(fd, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_ADD);
    }
  }

  void serve(int fd, uint32_t events) {
    Connection& c = connections_.at(fd);
    if (c.phase == Phase::kAnswer) {
      if (events & (EPOLLERR | EPOLLHUP)) return drop(fd);
      return flush(fd, c);
    }
    // kHead gathers, kDrain discards what the client still sends after its answer (closing
    // with unread input would reset the connection and could destroy the answer in flight).
    char buf[4096];
    bool ended = false;
    while (true) {
      const ssize_t got = recv(fd, buf, sizeof buf, 0);
      if (got > 0) {
        if (c.phase == Phase::kHead) {
          const size_t room = static_cast<size_t>(limits_.max_head_bytes) + 1 - c.in.size();
          c.in.append(buf, std::min(room, static_cast<size_t>(got)));
          if (head_complete(c.in)) break;
        }
        continue;
      }
      if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (got < 0 && errno == EINTR) continue;
      ended = true;  // end of input, or the connection broke
      break;
    }
    if (c.phase == Phase::kDrain) {
      if (ended) drop(fd);
      return;
    }
    if (head_complete(c.in) || ended) answer(fd, c);
  }

  // The head is in (blank line) or over its limit (httplib answers that 400).
  bool head_complete(const std::string& in) const {
    return in.size() > static_cast<size_t>(limits_.max_head_bytes) ||
           in.find("\r\n\r\n") != std::string::npos;
  }

  void answer(int fd, Connection& c) {
    c.out = http_.answer(fd, c.in);
    c.in.clear();
    c.in.shrink_to_fit();
    if (c.out.empty()) return drop(fd);  // connected and left without a request
    c.phase = Phase::kAnswer;
    watch(fd, EPOLLOUT, EPOLL_CTL_MOD);
    flush(fd, c);
  }

  void flush(int fd, Connection& c) {
    while (c.sent < c.out.size()) {
      const ssize_t n = send(fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
      if (n > 0) {
        c.sent += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;  // EPOLLOUT resumes
      return drop(fd);
    }
    c.out.clear();
    c.out.shrink_to_fit();
    shutdown(fd, SHUT_WR);
    c.phase = Phase::kDrain;
    watch(fd, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_MOD);
  }

  void expire(Clock::time_point now) {
    while (!by_order_.empty()) {
      const int fd = by_order_.begin()->second;
      Connection& c = connections_.at(fd);
      if (c.deadline > now) return;
      if (c.phase == Phase::kHead) {
        // Best effort: the socket's buffer is empty, so this does not block.
        send(fd, kTimedOut, std::strlen(kTimedOut), MSG_NOSIGNAL | MSG_DONTWAIT);
      }
      drop(fd);
    }
  }

  void drop(int fd) {
    auto it = connections_.find(fd);
    by_order_.erase(it->second.order);
    connections_.erase(it);
    ::close(fd);  // also takes it out of the epoll set
  }

  Http http_;
  const MetricsEndpointLimits limits_;
  const Clock::duration timeout_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  int port_ = 0;
  std::unordered_map<int, Connection> connections_;
  std::map<uint64_t, int> by_order_;  // oldest first: the next deadline, the next to evict
  uint64_t next_order_ = 0;
  std::thread thread_;
};

MetricsEndpoint::MetricsEndpoint(const std::string& host, int port,
                                 std::function<std::string()> body, MetricsEndpointLimits limits)
    : impl_(std::make_unique<Impl>(host, port, std::move(body), limits)) {}

MetricsEndpoint::~MetricsEndpoint() = default;

int MetricsEndpoint::port() const { return impl_->port(); }

}  // namespace nmt::server
