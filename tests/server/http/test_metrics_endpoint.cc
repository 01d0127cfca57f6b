// MetricsEndpoint on loopback with small limits: the answers to GET, HEAD, other paths and
// methods, bodies and oversized heads; the header deadline (a head trickled a byte at a time
// is cut at the deadline counted from the connection's opening, not renewed by each byte); a
// peer address at its connection bound is closed at once while another address is served; a
// taken port is an error naming the address; the open-connections gauge.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "server/http/metrics_endpoint.h"

using namespace nmt::server;
using Clock = std::chrono::steady_clock;

namespace {

class Connection {
 public:
  // From `source` (a loopback address: 127.0.0.x), to the endpoint's port.
  explicit Connection(int port, const char* source = "127.0.0.1") : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in local{};
    local.sin_family = AF_INET;
    inet_pton(AF_INET, source, &local.sin_addr);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0) {
      throw std::runtime_error(std::string("bind to ") + source + " failed");
    }
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      throw std::runtime_error("connect failed");
    }
  }
  ~Connection() { close(fd_); }
  bool send_all(const std::string& data) {
    size_t sent = 0;
    while (sent < data.size()) {
      const ssize_t n = ::send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }
  // Everything until the server closes, or until `timeout` (then `closed` stays false).
  std::string receive(std::chrono::milliseconds timeout, bool* closed = nullptr) {
    std::string out;
    const auto end = Clock::now() + timeout;
    if (closed) *closed = false;
    while (Clock::now() < end) {
      pollfd p{fd_, POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
      if (poll(&p, 1, static_cast<int>(std::max<int64_t>(1, left.count()))) <= 0) continue;
      char buf[4096];
      const ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        if (closed) *closed = true;
        break;
      }
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }

 private:
  int fd_;
};

std::string status_line(const std::string& answer) { return answer.substr(0, answer.find("\r\n")); }

struct Endpoint {
  std::atomic<int> renders{0};
  prometheus::Gauge connections{};
  MetricsEndpoint endpoint;
  explicit Endpoint(HttpLimits limits = metrics_endpoint_limits())
      : endpoint("127.0.0.1", 0,
                 [this] {
                   ++renders;
                   return std::string("nmt_up 1\n");
                 },
                 limits, &connections) {}
};

const auto kWait = std::chrono::milliseconds(5000);

}  // namespace

TEST(MetricsEndpoint, AnswersGetAndRefusesEverythingElse) {
  Endpoint e;
  const int port = e.endpoint.port();
  ASSERT_GT(port, 0);
  struct Case {
    std::string request, status;
  };
  // Each request closes its connection (Connection: close), so that the answer is whole once
  // the server closes.
  for (const Case& c : std::vector<Case>{
           {"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "HTTP/1.1 200 OK"},
           {"GET /metrics?x=1 HTTP/1.0\r\n\r\n", "HTTP/1.1 200 OK"},
           {"HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "HTTP/1.1 200 OK"},
           {"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "HTTP/1.1 404 Not Found"},
           {"POST /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello",
            "HTTP/1.1 405 Method Not Allowed"},
           {"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello",
            "HTTP/1.1 400 Bad Request"},
           {"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            "HTTP/1.1 400 Bad Request"},
       }) {
    Connection conn(port);
    ASSERT_TRUE(conn.send_all(c.request));
    bool closed = false;
    const std::string answer = conn.receive(kWait, &closed);
    EXPECT_EQ(status_line(answer), c.status) << c.request;
    EXPECT_TRUE(closed) << c.request;
    if (c.status == "HTTP/1.1 200 OK") {
      const bool head = c.request.rfind("HEAD", 0) == 0;
      EXPECT_EQ(answer.find("\r\n\r\nnmt_up 1\n") != std::string::npos, !head) << answer;
      EXPECT_NE(answer.find("text/plain; version=0.0.4"), std::string::npos) << answer;
    }
  }
  EXPECT_EQ(e.renders.load(), 3);  // the two GETs and the HEAD
  // Not a request line: libmicrohttpd closes the connection (with 400 or without a word).
  Connection garbage(port);
  ASSERT_TRUE(garbage.send_all("\x01\x02garbage\r\n\r\n"));
  bool closed = false;
  const std::string answer = garbage.receive(kWait, &closed);
  EXPECT_TRUE(closed);
  EXPECT_TRUE(answer.empty() || status_line(answer) == "HTTP/1.1 400 Bad Request") << answer;
  EXPECT_EQ(e.renders.load(), 3);
}

TEST(MetricsEndpoint, KeptAliveConnectionIsServedAgain) {
  Endpoint e;
  Connection conn(e.endpoint.port());
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(conn.send_all("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"));
    std::string answer;
    const auto end = Clock::now() + kWait;
    while (answer.find("nmt_up 1\n") == std::string::npos && Clock::now() < end) {
      answer += conn.receive(std::chrono::milliseconds(50));
    }
    EXPECT_EQ(status_line(answer), "HTTP/1.1 200 OK") << i;
  }
  EXPECT_EQ(e.renders.load(), 2);
}

TEST(MetricsEndpoint, HeadOverTheLimitIsRefused) {
  Endpoint e;
  Connection conn(e.endpoint.port());
  // 1 MB of header: libmicrohttpd answers once its connection buffer is full (431) and
  // discards the rest.
  const std::string big = "GET /metrics HTTP/1.1\r\nX-Big: " + std::string(1 << 20, 'a') + "\r\n\r\n";
  std::thread sender([&] { conn.send_all(big); });
  bool closed = false;
  const std::string answer = conn.receive(kWait, &closed);
  sender.join();
  EXPECT_EQ(status_line(answer), "HTTP/1.1 431 Request Header Fields Too Large");
  EXPECT_TRUE(closed);
  EXPECT_EQ(e.renders.load(), 0);
}

TEST(MetricsEndpoint, TricklingHeadIsCutAtTheHeaderDeadline) {
  HttpLimits limits = metrics_endpoint_limits();
  limits.header_timeout_seconds = 0.6;
  Endpoint e(limits);
  Connection conn(e.endpoint.port());
  const auto start = Clock::now();
  // A byte every 50 ms renews no per-read timeout: the deadline counts from the opening.
  std::string answer;
  bool closed = false;
  for (char ch : std::string("GET /metrics HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")) {
    if (!conn.send_all(std::string(1, ch))) break;
    answer += conn.receive(std::chrono::milliseconds(50), &closed);
    if (closed) break;
  }
  if (!closed) answer += conn.receive(kWait, &closed);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_TRUE(closed);
  EXPECT_EQ(status_line(answer), "HTTP/1.1 408 Request Timeout");
  // The watchdog looks every 100 ms (http_front.cc); 3 s leaves busy cores their margin.
  EXPECT_GE(seconds, 0.55);
  EXPECT_LT(seconds, 3.0);
}

TEST(MetricsEndpoint, AddressAtItsBoundIsClosedAnotherIsServed) {
  HttpLimits limits = metrics_endpoint_limits();
  limits.max_connections_per_address = 4;
  Endpoint e(limits);
  std::vector<std::unique_ptr<Connection>> idle;
  for (int i = 0; i < 4; ++i) {
    idle.push_back(std::make_unique<Connection>(e.endpoint.port(), "127.0.0.2"));
    idle.back()->send_all("G");  // accepted and waiting for the rest of its head
  }
  const auto end = Clock::now() + kWait;
  while (e.connections.Value() < 4 && Clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(e.connections.Value(), 4);
  Connection fifth(e.endpoint.port(), "127.0.0.2");
  bool closed = false;
  EXPECT_EQ(fifth.receive(kWait, &closed), "");
  EXPECT_TRUE(closed) << "one more from the address is closed at once";
  Connection scraper(e.endpoint.port(), "127.0.0.1");
  ASSERT_TRUE(scraper.send_all("GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  EXPECT_EQ(status_line(scraper.receive(kWait)), "HTTP/1.1 200 OK");
  idle[0]->receive(std::chrono::milliseconds(100), &closed);
  EXPECT_FALSE(closed) << "the address's open connections stay";
}

TEST(MetricsEndpoint, TakenPortIsAnErrorNamingTheAddress) {
  Endpoint first;
  try {
    MetricsEndpoint second("127.0.0.1", first.endpoint.port(), [] { return std::string(); });
    FAIL() << "a second endpoint bound the same port";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("127.0.0.1:" + std::to_string(first.endpoint.port())),
              std::string::npos)
        << error.what();
  }
}
