// The env:// rendezvous (dist/rendezvous.h) without a launcher: threads play the ranks on
// 127.0.0.1, each test on a port of its own that the kernel reported free. Plain sockets play the
// strangers and misbehaving peers; they write the wire format of dist/rendezvous.cpp by hand, so a
// change to it fails here. Every case that waits for a timeout uses one of a second or less, and
// asserts that the call came back within about that time.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <future>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dist/rendezvous.h"
#include "kernels/error.h"

using Catch::Matchers::Contains;
using kiln::dist::EnvRendezvous;
using kiln::dist::rendezvous_broadcast;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A plain socket, closed at scope exit.
struct Sock {
  int fd = -1;
  explicit Sock(int f) : fd(f) {}
  ~Sock() {
    if (fd >= 0) ::close(fd);
  }
  Sock(const Sock&) = delete;
  Sock& operator=(const Sock&) = delete;
};

sockaddr_in loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  return a;
}

// A port nothing listens on: bind port 0 on 127.0.0.1, read the port the kernel chose, close.
int free_port() {
  Sock s(::socket(AF_INET, SOCK_STREAM, 0));
  REQUIRE(s.fd >= 0);
  sockaddr_in a = loopback(0);
  REQUIRE(::bind(s.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(s.fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  return ntohs(a.sin_port);
}

// A socket listening on 127.0.0.1:port.
int listen_on(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a = loopback(port);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(fd, 16) == 0);
  return fd;
}

// A plain connection to 127.0.0.1:port, retried for up to 3 s while nothing listens there yet.
int raw_connect(int port) {
  const auto t0 = Clock::now();
  for (;;) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in a = loopback(port);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
    ::close(fd);
    REQUIRE(seconds_since(t0) < 3.0);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void send_bytes(int fd, const std::vector<uint8_t>& bytes) {
  REQUIRE(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size()));
}
void send_text(int fd, const std::string& text) { send_bytes(fd, std::vector<uint8_t>(text.begin(), text.end())); }

// Everything the peer sends until it closes the connection (or resets it); fails after `max_s`.
std::vector<uint8_t> read_until_closed(int fd, double max_s = 3.0) {
  std::vector<uint8_t> got;
  const auto t0 = Clock::now();
  for (;;) {
    const double left = max_s - seconds_since(t0);
    REQUIRE(left > 0);
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(std::ceil(left * 1000)));
    uint8_t buf[4096];
    const ssize_t k = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (k > 0) {
      got.insert(got.end(), buf, buf + k);
    } else if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      return got;
    }
  }
}

void put_be(std::vector<uint8_t>& out, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// The wire format (dist/rendezvous.cpp): a hello is u32 magic "KILN", u32 version, u32 rank,
// u32 world size; a reply is u32 magic "kiln", u32 status (0: payload, 1: reason), u64 length,
// then the bytes. Big-endian.
constexpr uint32_t kHelloMagic = 0x4B494C4E, kReplyMagic = 0x6B696C6E;
std::vector<uint8_t> hello(uint32_t rank, uint32_t world, uint32_t version = 1, uint32_t magic = kHelloMagic) {
  std::vector<uint8_t> h;
  put_be(h, magic, 4);
  put_be(h, version, 4);
  put_be(h, rank, 4);
  put_be(h, world, 4);
  return h;
}
std::vector<uint8_t> reply(uint32_t status, uint64_t length, const std::string& body = "") {
  std::vector<uint8_t> r;
  put_be(r, kReplyMagic, 4);
  put_be(r, status, 4);
  put_be(r, length, 8);
  r.insert(r.end(), body.begin(), body.end());
  return r;
}
uint64_t get_be(const std::vector<uint8_t>& b, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | b.at(at + static_cast<size_t>(i));
  return v;
}
// The reason in a status-1 reply that a plain socket received (its hello was refused).
std::string refusal_reason(const std::vector<uint8_t>& got) {
  REQUIRE(got.size() >= 16);
  CHECK(get_be(got, 0, 4) == kReplyMagic);
  CHECK(get_be(got, 4, 4) == 1);
  REQUIRE(get_be(got, 8, 8) == got.size() - 16);
  return std::string(got.begin() + 16, got.end());
}

EnvRendezvous at(int port, int rank, int world) {
  EnvRendezvous info;
  info.rank = rank;
  info.world_size = world;
  info.local_rank = rank;
  info.master_addr = "127.0.0.1";
  info.master_port = port;
  return info;
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = static_cast<uint8_t>(gen());
  return b;
}

// What one rank's call gave: the payload, or the kiln::Error's message; and how long it took.
struct Outcome {
  bool ok = false;
  std::vector<uint8_t> payload;
  std::string error;
  double seconds = 0;
};

// Runs one rank on a thread of its own. A non-rank-0 rank passes a payload of its own, which the
// call must ignore.
std::future<Outcome> start_rank(EnvRendezvous info, std::vector<uint8_t> payload, double timeout_s) {
  return std::async(std::launch::async, [info, payload, timeout_s] {
    Outcome o;
    const auto t0 = Clock::now();
    try {
      o.payload = rendezvous_broadcast(info, payload, timeout_s);
      o.ok = true;
    } catch (const kiln::Error& e) {
      o.error = e.what();
    }
    o.seconds = seconds_since(t0);
    return o;
  });
}

// The message of the kiln::Error `f` throws (a test failure if it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const kiln::Error& e) {
    return e.what();
  }
  FAIL("no kiln::Error was thrown");
  return "";
}

// Unsets the launcher's variables for the scope and restores them after.
class EnvGuard {
 public:
  EnvGuard() {
    for (const char* v : kVars) {
      const char* value = std::getenv(v);
      saved_.push_back(value != nullptr ? std::optional<std::string>(value) : std::nullopt);
      ::unsetenv(v);
    }
  }
  ~EnvGuard() {
    for (size_t i = 0; i < saved_.size(); ++i) {
      if (saved_[i]) {
        ::setenv(kVars[i], saved_[i]->c_str(), 1);
      } else {
        ::unsetenv(kVars[i]);
      }
    }
  }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;
  static void set(const char* var, const std::string& value) { ::setenv(var, value.c_str(), 1); }

 private:
  static constexpr const char* kVars[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"};
  std::vector<std::optional<std::string>> saved_;
};

}  // namespace

TEST_CASE("rendezvous: every rank gets rank 0's payload", "[rendezvous]") {
  const std::vector<std::pair<const char*, std::vector<uint8_t>>> payloads = {
      {"128 random bytes", random_bytes(128, 1)},
      {"empty", {}},
      {"1 MiB (the limit)", random_bytes(kiln::dist::kRendezvousMaxPayload, 2)},
  };
  for (const int world : {1, 2, 3, 5}) {
    for (const auto& [name, payload] : payloads) {
      CAPTURE(world, name);
      const int port = free_port();
      std::vector<std::future<Outcome>> ranks;
      for (int r = 0; r < world; ++r) {
        ranks.push_back(start_rank(at(port, r, world), r == 0 ? payload : std::vector<uint8_t>(7, uint8_t(r)), 10.0));
      }
      for (int r = 0; r < world; ++r) {
        CAPTURE(r);
        const Outcome o = ranks[static_cast<size_t>(r)].get();
        REQUIRE(o.error == "");
        REQUIRE(o.ok);
        CHECK(o.payload.size() == payload.size());
        CHECK((o.payload == payload));  // parenthesized: a mismatch prints no megabyte of bytes
      }
    }
  }
}

TEST_CASE("rendezvous: rank 0 may start after the others", "[rendezvous]") {
  const int port = free_port();
  const auto payload = random_bytes(128, 3);
  auto r1 = start_rank(at(port, 1, 3), {}, 10.0);
  auto r2 = start_rank(at(port, 2, 3), {}, 10.0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // Still retrying: nothing listens yet.
  REQUIRE(r1.wait_for(std::chrono::seconds(0)) == std::future_status::timeout);
  REQUIRE(r2.wait_for(std::chrono::seconds(0)) == std::future_status::timeout);
  auto r0 = start_rank(at(port, 0, 3), payload, 10.0);
  for (auto* f : {&r0, &r1, &r2}) {
    const Outcome o = f->get();
    REQUIRE(o.error == "");
    CHECK(o.payload == payload);
  }
}

TEST_CASE("rendezvous: the same port twice in a row", "[rendezvous]") {
  // The first run leaves rank 0's side of its connections in TIME_WAIT; SO_REUSEADDR lets the
  // second bind the port anyway.
  const int port = free_port();
  for (int run = 0; run < 2; ++run) {
    CAPTURE(run);
    const auto payload = random_bytes(128, 10 + static_cast<uint32_t>(run));
    auto r0 = start_rank(at(port, 0, 2), payload, 10.0);
    auto r1 = start_rank(at(port, 1, 2), {}, 10.0);
    const Outcome o0 = r0.get(), o1 = r1.get();
    REQUIRE(o0.error == "");
    REQUIRE(o1.error == "");
    CHECK(o1.payload == payload);
  }
}

TEST_CASE("rendezvous: env:// variables", "[rendezvous]") {
  EnvGuard guard;
  CHECK_FALSE(kiln::dist::env_rendezvous_present());
  EnvGuard::set("RANK", "1");
  CHECK_FALSE(kiln::dist::env_rendezvous_present());
  EnvGuard::set("WORLD_SIZE", "4");
  CHECK(kiln::dist::env_rendezvous_present());

  SECTION("all set") {
    EnvGuard::set("LOCAL_RANK", "0");
    EnvGuard::set("MASTER_ADDR", "node-7");
    EnvGuard::set("MASTER_PORT", "29500");
    const EnvRendezvous e = kiln::dist::env_rendezvous_from_env();
    CHECK(e.rank == 1);
    CHECK(e.world_size == 4);
    CHECK(e.local_rank == 0);
    CHECK(e.master_addr == "node-7");
    CHECK(e.master_port == 29500);
  }
  SECTION("defaults") {
    EnvGuard::set("MASTER_PORT", "1");
    const EnvRendezvous e = kiln::dist::env_rendezvous_from_env();
    CHECK(e.local_rank == 1);
    CHECK(e.master_addr == "127.0.0.1");
    CHECK(e.master_port == 1);
  }
  SECTION("one rank needs no port") {
    EnvGuard::set("RANK", "0");
    EnvGuard::set("WORLD_SIZE", "1");
    const EnvRendezvous e = kiln::dist::env_rendezvous_from_env();
    CHECK(e.world_size == 1);
    CHECK(e.master_port == 0);
  }
  SECTION("missing") {
    EnvGuard::set("MASTER_PORT", "29500");
    ::unsetenv("RANK");
    CHECK_THAT(error_of(kiln::dist::env_rendezvous_from_env), Contains("RANK is not set"));
    EnvGuard::set("RANK", "1");
    ::unsetenv("WORLD_SIZE");
    CHECK_THAT(error_of(kiln::dist::env_rendezvous_from_env), Contains("WORLD_SIZE is not set"));
    EnvGuard::set("WORLD_SIZE", "2");
    ::unsetenv("MASTER_PORT");
    CHECK_THAT(error_of(kiln::dist::env_rendezvous_from_env), Contains("MASTER_PORT is not set"));
  }
  SECTION("malformed") {
    struct Case {
      const char* var;
      const char* value;
    };
    const Case cases[] = {
        {"RANK", "abc"},
        {"RANK", ""},
        {"RANK", "1.5"},
        {"RANK", " 1"},
        {"RANK", "1 "},
        {"RANK", "+1"},
        {"RANK", "-1"},
        {"RANK", "4"},
        {"RANK", "0x1"},
        {"WORLD_SIZE", "0"},
        {"WORLD_SIZE", "-3"},
        {"WORLD_SIZE", "four"},
        {"WORLD_SIZE", "99999999999"},
        {"WORLD_SIZE", "2147483647"},  // parses, but rank 0 allocated a slot per rank: std::bad_alloc
        {"WORLD_SIZE", "65537"},
        {"LOCAL_RANK", "-1"},
        {"LOCAL_RANK", "4"},
        {"LOCAL_RANK", "gpu0"},
        {"MASTER_PORT", "0"},
        {"MASTER_PORT", "65536"},
        {"MASTER_PORT", "-1"},
        {"MASTER_PORT", "http"},
        {"MASTER_PORT", ""},
        {"MASTER_ADDR", ""},
    };
    for (const Case& c : cases) {
      CAPTURE(c.var, c.value);
      EnvGuard::set("RANK", "1");
      EnvGuard::set("WORLD_SIZE", "4");
      EnvGuard::set("MASTER_PORT", "29500");
      ::unsetenv("LOCAL_RANK");
      ::unsetenv("MASTER_ADDR");
      EnvGuard::set(c.var, c.value);
      CHECK_THAT(error_of(kiln::dist::env_rendezvous_from_env), Contains(std::string(c.var) + "='" + c.value + "'"));
    }
  }
  SECTION("a whole number past int's range is out of range, not malformed") {
    EnvGuard::set("RANK", "1");
    EnvGuard::set("WORLD_SIZE", "99999999999");
    EnvGuard::set("MASTER_PORT", "29500");
    CHECK_THAT(error_of(kiln::dist::env_rendezvous_from_env), Contains("must be in [1, 65536]"));
    EnvGuard::set("WORLD_SIZE", "99999999999999999999999");  // past int64's
    CHECK_THAT(error_of(kiln::dist::env_rendezvous_from_env), Contains("must be in [1, 65536]"));
    EnvGuard::set("WORLD_SIZE", "4");
    EnvGuard::set("RANK", "-99999999999999999999999");
    CHECK_THAT(error_of(kiln::dist::env_rendezvous_from_env), Contains("is outside [0, 4)"));
    EnvGuard::set("RANK", "4294967297");  // 2^32 + 1: wrapped to 1 through a 32-bit int
    CHECK_THAT(error_of(kiln::dist::env_rendezvous_from_env), Contains("is outside [0, 4)"));
    EnvGuard::set("RANK", "1");
    EnvGuard::set("MASTER_PORT", "4294967297");
    CHECK_THAT(error_of(kiln::dist::env_rendezvous_from_env),
               Contains("MASTER_PORT='4294967297' is outside [1, 65535]"));
  }
}

TEST_CASE("rendezvous: a rank that never joins", "[rendezvous]") {
  const int port = free_port();
  // Rank 1 would wait 5 s: what ends it must be rank 0's message, relayed when rank 0 gives up.
  auto r0 = start_rank(at(port, 0, 3), random_bytes(128, 4), 1.0);
  auto r1 = start_rank(at(port, 1, 3), {}, 5.0);
  const Outcome o0 = r0.get(), o1 = r1.get();
  REQUIRE_FALSE(o0.ok);
  CHECK_THAT(o0.error, Contains("rank 2 of 3 did not join within 1 s") &&
                           Contains("127.0.0.1:" + std::to_string(port)) && Contains("1 joined"));
  CHECK(o0.seconds > 0.9);
  CHECK(o0.seconds < 3.0);
  REQUIRE_FALSE(o1.ok);
  CHECK_THAT(o1.error, Contains("ended the rendezvous") && Contains("rank 2 of 3 did not join"));
  CHECK(o1.seconds < 3.0);
}

TEST_CASE("rendezvous: two ranks that never join", "[rendezvous]") {
  const int port = free_port();
  auto r0 = start_rank(at(port, 0, 4), random_bytes(128, 5), 0.5);
  auto r2 = start_rank(at(port, 2, 4), {}, 5.0);
  const Outcome o0 = r0.get(), o2 = r2.get();
  REQUIRE_FALSE(o0.ok);
  CHECK_THAT(o0.error, Contains("ranks 1, 3 of 4 did not join within 0.5 s"));
  CHECK(o0.seconds < 2.5);
  REQUIRE_FALSE(o2.ok);
  CHECK(o2.seconds < 2.5);
}

TEST_CASE("rendezvous: a run of missing ranks is a range", "[rendezvous]") {
  const int port = free_port();
  auto r0 = start_rank(at(port, 0, 6), {}, 0.3);
  auto r5 = start_rank(at(port, 5, 6), {}, 5.0);
  const Outcome o0 = r0.get(), o5 = r5.get();
  REQUIRE_FALSE(o0.ok);
  CHECK_THAT(o0.error, Contains("ranks 1-4 of 6 did not join within 0.3 s"));
  REQUIRE_FALSE(o5.ok);
  CHECK_THAT(o5.error, Contains("ranks 1-4 of 6 did not join"));
}

TEST_CASE("rendezvous: rank 0 never starts", "[rendezvous]") {
  const int port = free_port();
  const Outcome o = start_rank(at(port, 1, 2), {}, 0.7).get();
  REQUIRE_FALSE(o.ok);
  CHECK_THAT(o.error, Contains("could not reach rank 0 at 127.0.0.1:" + std::to_string(port) + " within 0.7 s") &&
                          Contains("refused"));
  CHECK(o.seconds > 0.65);
  CHECK(o.seconds < 2.7);
}

TEST_CASE("rendezvous: strangers are dropped and the ranks still meet", "[rendezvous]") {
  const int port = free_port();
  const auto payload = random_bytes(128, 6);
  auto r0 = start_rank(at(port, 0, 2), payload, 10.0);
  // One speaks HTTP: rank 0 closes it as soon as it has seen four bytes that are not the magic.
  Sock http(raw_connect(port));
  send_text(http.fd, "GET / HTTP/1.0\r\n\r\n");
  CHECK(read_until_closed(http.fd).empty());
  // One connects and says nothing: it must not hold up the ranks.
  Sock silent(raw_connect(port));
  auto r1 = start_rank(at(port, 1, 2), {}, 10.0);
  const Outcome o0 = r0.get(), o1 = r1.get();
  REQUIRE(o0.error == "");
  REQUIRE(o1.error == "");
  CHECK(o1.payload == payload);
  // ... and is closed when rank 0 is done.
  CHECK(read_until_closed(silent.fd).empty());
}

TEST_CASE("rendezvous: rank 0's timeout names the strangers it dropped", "[rendezvous]") {
  const int port = free_port();
  auto r0 = start_rank(at(port, 0, 2), {}, 0.6);
  Sock stranger(raw_connect(port));
  send_text(stranger.fd, "hello, rank 0!!!");
  const Outcome o0 = r0.get();
  REQUIRE_FALSE(o0.ok);
  CHECK_THAT(o0.error, Contains("rank 1 of 2 did not join") &&
                           Contains("1 connection that did not speak kiln's rendezvous protocol was dropped") &&
                           Contains("68 65 6c 6c"));  // "hell"
}

TEST_CASE("rendezvous: mismatched world sizes", "[rendezvous]") {
  const int port = free_port();
  auto r0 = start_rank(at(port, 0, 3), random_bytes(128, 7), 5.0);
  // Rank 2 (a plain socket) has joined before the offender says hello; it must be told too.
  Sock rank2(raw_connect(port));
  send_bytes(rank2.fd, hello(2, 3));
  auto offender = start_rank(at(port, 1, 2), {}, 5.0);  // rank 1 of 2
  const Outcome o0 = r0.get(), o1 = offender.get();
  REQUIRE_FALSE(o0.ok);
  CHECK_THAT(o0.error, Contains("rank 1 (from 127.0.0.1:") && Contains("says WORLD_SIZE is 2, rank 0's is 3"));
  CHECK(o0.seconds < 2.0);
  REQUIRE_FALSE(o1.ok);
  CHECK_THAT(o1.error, Contains("rank 0 at 127.0.0.1:" + std::to_string(port) + " ended the rendezvous") &&
                           Contains("says WORLD_SIZE is 2, rank 0's is 3"));
  CHECK(o1.seconds < 2.0);
  CHECK_THAT(refusal_reason(read_until_closed(rank2.fd)), Contains("says WORLD_SIZE is 2"));
}

TEST_CASE("rendezvous: the same rank twice", "[rendezvous]") {
  const int port = free_port();
  auto r0 = start_rank(at(port, 0, 3), random_bytes(128, 8), 5.0);
  Sock first(raw_connect(port));
  send_bytes(first.fd, hello(1, 3));
  auto second = start_rank(at(port, 1, 3), {}, 5.0);
  const Outcome o0 = r0.get(), o1 = second.get();
  REQUIRE_FALSE(o0.ok);
  CHECK_THAT(o0.error, Contains("rank 1 joined twice") && Contains("two processes were given RANK=1"));
  REQUIRE_FALSE(o1.ok);
  CHECK_THAT(o1.error, Contains("rank 1 joined twice"));
  CHECK(o1.seconds < 2.0);
  CHECK_THAT(refusal_reason(read_until_closed(first.fd)), Contains("rank 1 joined twice"));
}

TEST_CASE("rendezvous: a hello in pieces joins and gets the reply as specified", "[rendezvous]") {
  const int port = free_port();
  const auto payload = random_bytes(128, 12);
  auto r0 = start_rank(at(port, 0, 2), payload, 5.0);
  Sock peer(raw_connect(port));
  const auto h = hello(1, 2);
  for (const auto& [from, to] : {std::pair<size_t, size_t>{0, 3}, {3, 8}, {8, 16}}) {
    send_bytes(peer.fd, std::vector<uint8_t>(h.begin() + static_cast<long>(from), h.begin() + static_cast<long>(to)));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const Outcome o0 = r0.get();
  REQUIRE(o0.error == "");
  const std::vector<uint8_t> got = read_until_closed(peer.fd);
  REQUIRE(got.size() == 16 + payload.size());
  CHECK(get_be(got, 0, 4) == kReplyMagic);
  CHECK(get_be(got, 4, 4) == 0);
  CHECK(get_be(got, 8, 8) == payload.size());
  CHECK(std::vector<uint8_t>(got.begin() + 16, got.end()) == payload);
}

TEST_CASE("rendezvous: hellos rank 0 refuses", "[rendezvous]") {
  struct Case {
    const char* name;
    std::vector<uint8_t> hello;
    const char* expected;
  };
  const Case cases[] = {
      {"rank out of range", hello(3, 3), "says it is rank 3, outside 1..2"},
      {"a second rank 0", hello(0, 3), "says it is rank 0, outside 1..2"},
      {"a huge rank", hello(0xFFFFFFFFu, 3), "says it is rank 4294967295"},
      {"another protocol version", hello(1, 3, 2), "speaks rendezvous protocol version 2, rank 0 speaks version 1"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const int port = free_port();
    auto r0 = start_rank(at(port, 0, 3), random_bytes(128, 9), 5.0);
    Sock peer(raw_connect(port));
    send_bytes(peer.fd, c.hello);
    const Outcome o0 = r0.get();
    REQUIRE_FALSE(o0.ok);
    CHECK_THAT(o0.error, Contains(c.expected));
    CHECK(o0.seconds < 2.0);
    CHECK_THAT(refusal_reason(read_until_closed(peer.fd)), Contains(c.expected));
  }
}

TEST_CASE("rendezvous: a rank that leaves after joining", "[rendezvous]") {
  const int port = free_port();
  auto r0 = start_rank(at(port, 0, 3), random_bytes(128, 10), 5.0);
  {
    Sock rank1(raw_connect(port));
    send_bytes(rank1.fd, hello(1, 3));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }  // closed: rank 0 must not wait 5 s for rank 2 and then fail sending to rank 1
  const Outcome o0 = r0.get();
  REQUIRE_FALSE(o0.ok);
  CHECK_THAT(o0.error,
             Contains("rank 1 (from 127.0.0.1:") && Contains("closed its connection while rank 0 waited for rank 2"));
  CHECK(o0.seconds < 2.0);
}

TEST_CASE("rendezvous: the port in use", "[rendezvous]") {
  const int port = free_port();
  Sock occupant(listen_on(port));
  const Outcome o0 = start_rank(at(port, 0, 2), random_bytes(128, 11), 5.0).get();
  REQUIRE_FALSE(o0.ok);
  CHECK_THAT(o0.error, Contains("MASTER_PORT " + std::to_string(port) + " on 127.0.0.1 is in use"));
  CHECK(o0.seconds < 1.0);
}

TEST_CASE("rendezvous: MASTER_ADDR that does not resolve", "[rendezvous]") {
  EnvRendezvous info = at(free_port(), 0, 2);
  info.master_addr = "no-such-host.invalid";
  CHECK_THAT(error_of([&] { rendezvous_broadcast(info, {}, 5.0); }),
             Contains("could not resolve MASTER_ADDR 'no-such-host.invalid'"));
}

TEST_CASE("rendezvous: a rank 0 that is not kiln's", "[rendezvous]") {
  struct Case {
    const char* name;
    std::vector<uint8_t> sends;  // after reading the hello; then it closes, or holds the connection
    bool hold;
    const char* expected;
  };
  const std::string http = "HTTP/1.1 400 Bad Request\r\n\r\n";
  const Case cases[] = {
      {"another program", std::vector<uint8_t>(http.begin(), http.end()), false, "is not kiln's rank 0"},
      {"a huge length", reply(0, uint64_t{1} << 40), true, "announced a payload of 1099511627776 bytes"},
      {"an unknown status", reply(7, 0), true, "replied with status 7"},
      {"closes after the hello", {}, false, "closed the connection before receiving the payload finished"},
      {"a short payload, then closes", reply(0, 100, "only this"), false, "closed the connection before"},
      {"silent", {}, true, "accepted this rank but receiving the payload did not finish within 0.5 s"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const int port = free_port();
    Sock listener(listen_on(port));
    auto r1 = start_rank(at(port, 1, 2), {}, 0.5);
    std::vector<uint8_t> got_hello;
    {
      Sock conn(::accept(listener.fd, nullptr, nullptr));
      REQUIRE(conn.fd >= 0);
      uint8_t h[16];
      REQUIRE(::recv(conn.fd, h, sizeof h, MSG_WAITALL) == 16);
      got_hello.assign(h, h + 16);
      if (!c.sends.empty()) send_bytes(conn.fd, c.sends);
      if (c.hold) r1.wait();
    }
    CHECK(got_hello == hello(1, 2));
    const Outcome o1 = r1.get();
    REQUIRE_FALSE(o1.ok);
    CHECK_THAT(o1.error, Contains(c.expected));
    CHECK(o1.seconds < 2.5);
  }
}

TEST_CASE("rendezvous: arguments", "[rendezvous]") {
  const auto call = [](EnvRendezvous info, size_t payload_bytes, double timeout_s) {
    return error_of([&] { rendezvous_broadcast(info, std::vector<uint8_t>(payload_bytes), timeout_s); });
  };
  CHECK_THAT(call(at(1, 0, 0), 0, 1.0), Contains("world_size 0 is outside [1, 65536]"));
  CHECK_THAT(call(at(1, 0, INT32_MAX), 0, 1.0), Contains("world_size 2147483647 is outside [1, 65536]"));
  CHECK_THAT(call(at(1, 2, 2), 0, 1.0), Contains("rank 2 is outside [0, 2)"));
  CHECK_THAT(call(at(1, -1, 2), 0, 1.0), Contains("rank -1 is outside [0, 2)"));
  CHECK_THAT(call(at(0, 1, 2), 0, 1.0), Contains("master_port 0 is outside [1, 65535]"));
  CHECK_THAT(call(at(1, 0, 2), 0, 0.0), Contains("positive number of seconds, got 0"));
  CHECK_THAT(call(at(1, 0, 2), 0, -1.0), Contains("got -1"));
  CHECK_THAT(call(at(1, 0, 2), 0, std::nan("")), Contains("got nan"));
  CHECK_THAT(call(at(1, 0, 1), kiln::dist::kRendezvousMaxPayload + 1, 1.0),
             Contains("the payload has 1048577 bytes, above the limit of 1048576"));
  EnvRendezvous no_addr = at(1, 1, 2);
  no_addr.master_addr = "";
  CHECK_THAT(call(no_addr, 0, 1.0), Contains("master_addr is empty"));
}
