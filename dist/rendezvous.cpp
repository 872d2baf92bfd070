// The env:// rendezvous (dist/rendezvous.h): rank 0 carries a small payload (NCCL's unique id) to
// every other rank over TCP. The protocol, version 1, every integer big-endian:
//   rank r -> rank 0, the hello (16 bytes): u32 magic 0x4B494C4E ("KILN"), u32 version 1,
//     u32 rank r, u32 world size.
//   rank 0 -> rank r, the reply: u32 magic 0x6B696C6E ("kiln"), u32 status, u64 length, then
//     `length` bytes: the payload (status 0; at most kRendezvousMaxPayload) or the reason rank 0
//     ended the rendezvous (status 1; text, at most 4 KiB).
// Rank 0 replies once all world_size - 1 ranks have said hello; then both sides close.
// Non-obvious decisions:
// - One deadline bounds the whole call, and every socket is non-blocking: each accept, connect,
//   read and write waits in poll() with the time left (EINTR resumes the wait with what is left),
//   so no step can outlast it. Rank 0 polls the listener and every connection at once, so a
//   connection that sends nothing cannot hold up the ones behind it.
// - The other ranks retry while rank 0 is not up yet (refused, unreachable, a host name that does
//   not resolve yet), sleeping 10 ms, doubling up to 200 ms; one connect waits at most 5 s for its
//   handshake, so an address that drops packets cannot starve the host name's other addresses.
//   Once connected a rank never reconnects: a rank 0 that closed or reset the connection has
//   failed, and a second hello would read as a duplicate rank.
// - A connect to a free port of the same host can connect to itself (TCP simultaneous open, when
//   the kernel picks the destination port as the source port, which the loopback tests with ports
//   in the ephemeral range invite); that rank would read its own hello. Such a connection (local
//   address == peer address) is dropped and retried.
// - Strangers are dropped, not errors: a connection whose first four bytes are not the hello's
//   magic, or that closes before a whole hello (a port scanner, a health check, a browser), is
//   closed and rank 0 keeps waiting; its timeout message reports what it dropped. A connection that
//   speaks the protocol but disagrees (another version, another world size, a rank outside
//   1..N-1, a rank that already joined) is a misconfigured kiln process: the rendezvous fails.
// - When rank 0 fails (a bad hello, a joined rank that left, the timeout) it sends its reason
//   (status 1) to every rank that joined and to the offender before closing them, so those ranks
//   fail at once with rank 0's message instead of at their own timeout. That send never waits
//   (MSG_DONTWAIT: the short message fits in the socket's empty send buffer), so failing is
//   bounded too. Rank 0 also watches the joined connections while it waits for the rest: one that
//   closes (that rank gave up or died) fails the rendezvous then, not when the payload is sent.
// - Lengths are checked against their caps before anything is allocated, so a corrupt or foreign
//   reply cannot ask for gigabytes; the reply's magic differs from the hello's, so an echo server
//   on the port is not taken for rank 0.
// - Where rank 0 listens: on MASTER_ADDR itself when it is a loopback address (one machine; the
//   port is not exposed off it), otherwise on the wildcard address of its family, as PyTorch's
//   TCPStore does: the name the other machines use for rank 0 need not be an address rank 0 can
//   bind or that reaches it (Debian maps the machine's own name to 127.0.1.1 in /etc/hosts; NAT;
//   containers). SO_REUSEADDR lets a restarted job bind the port while the last run's connections
//   are in TIME_WAIT; a port another socket holds is an error saying so (a MASTER_PORT inside the
//   ephemeral range can also be held by any outgoing connection on the machine: 29500, the usual
//   choice, is below Linux's default range).
// - Sends pass MSG_NOSIGNAL (a peer that left is an EPIPE error, not a SIGPIPE that ends the
//   process); sockets are SOCK_CLOEXEC and owned by an RAII Fd, so every path closes them.
// - getaddrinfo cannot be given a deadline: a DNS server that does not answer holds a resolution
//   for the resolver's own timeout (resolv.conf: 5 s a try). Rank 0 resolves MASTER_ADDR once and
//   fails at once if it cannot (a typo); the others retry until the deadline.
#include "dist/rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/error.h"

namespace kiln::dist {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kHelloMagic = 0x4B494C4E;  // "KILN"
constexpr uint32_t kReplyMagic = 0x6B696C6E;  // "kiln"
constexpr uint32_t kVersion = 1;
constexpr uint32_t kStatusOk = 0, kStatusRefused = 1;
constexpr size_t kHelloBytes = 16, kReplyHeaderBytes = 16;
constexpr size_t kMaxMessage = 4096;      // the longest reason rank 0 sends with status 1
constexpr double kConnectAttemptS = 5.0;  // the longest one connect waits for its handshake
constexpr size_t kMaxStrangerNotes = 3;   // dropped connections described in the timeout message

std::string seconds_str(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

// strerror_r comes in a GNU form (returns the text) and a POSIX one (fills the buffer); these two
// overloads take whichever this libc has.
[[maybe_unused]] std::string strerror_text(char* result, const char*) { return result; }
[[maybe_unused]] std::string strerror_text(int rc, const char* buf) { return rc == 0 ? buf : "unknown error"; }
std::string errno_text(int e) {
  char buf[256] = {};
  return strerror_text(strerror_r(e, buf, sizeof buf), buf) + " (errno " + std::to_string(e) + ")";
}

// A socket, closed when the holder goes. close() is not retried on EINTR: Linux has released the
// descriptor either way, and a retry could close one another thread just opened.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

class Deadline {
 public:
  explicit Deadline(double seconds)
      : end_(Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds))) {}
  bool passed() const { return Clock::now() >= end_; }
  // The milliseconds left, for poll(): rounded up, so that poll never wakes just before the
  // deadline and spins; 0 once it has passed.
  int ms_left() const {
    const auto left = end_ - Clock::now();
    if (left <= Clock::duration::zero()) return 0;
    return static_cast<int>(std::min<int64_t>(std::chrono::ceil<std::chrono::milliseconds>(left).count(), INT_MAX));
  }
  // This deadline or `seconds` from now, whichever comes first.
  Deadline sooner(double seconds) const {
    Deadline d(seconds);
    d.end_ = std::min(d.end_, end_);
    return d;
  }

 private:
  Clock::time_point end_;
};

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (56 - 8 * i));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | p[i];
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

std::string hex_bytes(const uint8_t* p, size_t n) {
  std::string s;
  char buf[4];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(buf, sizeof buf, i == 0 ? "%02x" : " %02x", p[i]);
    s += buf;
  }
  return s;
}

std::string endpoint(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string sockaddr_str(const sockaddr* sa, socklen_t len) {
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (getnameinfo(sa, len, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "an unknown address";
  }
  return endpoint(host, std::atoi(serv));
}

bool is_loopback(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in*>(sa)->sin_addr.s_addr) >> 24) == 127;
  }
  if (sa->sa_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127);
  }
  return false;
}

// getaddrinfo's result, freed when the holder goes.
struct Resolved {
  addrinfo* list = nullptr;
  int rc = 0;   // getaddrinfo's return; 0: resolved
  int err = 0;  // errno, for EAI_SYSTEM
  Resolved(const std::string& host, int port) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &list);
    err = errno;
  }
  ~Resolved() {
    if (list != nullptr) freeaddrinfo(list);
  }
  Resolved(const Resolved&) = delete;
  Resolved& operator=(const Resolved&) = delete;
  std::string error(const std::string& host) const {
    return "could not resolve MASTER_ADDR '" + host + "': " + (rc == EAI_SYSTEM ? errno_text(err) : gai_strerror(rc));
  }
};

// Waits until `fd` is ready for `events` or the deadline passes; EINTR resumes the wait with the
// time left. Returns poll's revents, 0 at the deadline.
short poll_one(int fd, short events, const Deadline& deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, deadline.ms_left());
    if (rc > 0) return p.revents;
    if (rc == 0) return 0;
    if (errno != EINTR) throw Error("dist rendezvous: poll failed: " + errno_text(errno));
  }
}

enum class Io { Ok, Timeout, Eof, Failed };
struct IoResult {
  Io kind = Io::Ok;
  int err = 0;  // errno, for Failed
};

// Sends all of `data` (partial sends and EINTR continue) before the deadline.
IoResult send_all(int fd, const uint8_t* data, size_t n, const Deadline& deadline) {
  size_t done = 0;
  while (done < n) {
    const ssize_t k = ::send(fd, data + done, n - done, MSG_NOSIGNAL);
    if (k > 0) {
      done += static_cast<size_t>(k);
    } else if (k < 0 && errno == EINTR) {
      continue;
    } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (poll_one(fd, POLLOUT, deadline) == 0) return {Io::Timeout, 0};
      // POLLERR or POLLHUP: the next send reports the error.
    } else {
      return {Io::Failed, k < 0 ? errno : EPIPE};
    }
  }
  return {};
}

// Receives exactly n bytes (partial reads and EINTR continue) before the deadline.
IoResult recv_all(int fd, uint8_t* data, size_t n, const Deadline& deadline) {
  size_t done = 0;
  while (done < n) {
    const ssize_t k = ::recv(fd, data + done, n - done, 0);
    if (k > 0) {
      done += static_cast<size_t>(k);
    } else if (k == 0) {
      return {Io::Eof, 0};
    } else if (errno == EINTR) {
      continue;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (poll_one(fd, POLLIN, deadline) == 0) return {Io::Timeout, 0};
    } else {
      return {Io::Failed, errno};
    }
  }
  return {};
}

// "rank 2", "ranks 2, 3", "ranks 1-4, 7": runs of three or more as ranges, at most 32 items.
std::string rank_list(const std::vector<int>& ranks) {
  if (ranks.empty()) return "no rank";
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  size_t items = 0;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (items == 32) {
      s += ", ... (" + std::to_string(ranks.size()) + " in all)";
      break;
    }
    if (items > 0) s += ", ";
    if (j - i >= 2) {
      s += std::to_string(ranks[i]) + "-" + std::to_string(ranks[j]);
      i = j + 1;
    } else {
      s += std::to_string(ranks[i]);
      i += 1;
    }
    ++items;
  }
  return s;
}

// The reply that ends the rendezvous with `reason` (status 1), sent without waiting: a joined
// peer's send buffer is empty, and a peer that cannot take it sees the connection close instead.
void send_refusal(int fd, const std::string& reason) {
  const size_t n = std::min(reason.size(), kMaxMessage);
  std::vector<uint8_t> buf(kReplyHeaderBytes + n);
  put_u32(buf.data(), kReplyMagic);
  put_u32(buf.data() + 4, kStatusRefused);
  put_u64(buf.data() + 8, n);
  std::memcpy(buf.data() + kReplyHeaderBytes, reason.data(), n);
  [[maybe_unused]] const ssize_t k = ::send(fd, buf.data(), buf.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

// Rank 0: listens, gathers every other rank's hello, sends the payload.
class RankZero {
 public:
  RankZero(const EnvRendezvous& info, double timeout_s, const Deadline& deadline)
      : info_(info),
        timeout_s_(timeout_s),
        deadline_(deadline),
        where_(endpoint(info.master_addr, info.master_port)),
        prefix_("dist rendezvous (rank 0 of " + std::to_string(info.world_size) + "): "),
        joined_(static_cast<size_t>(info.world_size)) {}

  void run(const std::vector<uint8_t>& payload) {
    listen();
    gather();
    send_payload(payload);
  }

 private:
  struct Peer {
    Fd fd;
    std::string from;  // the peer's address:port
    uint8_t hello[kHelloBytes] = {};
    size_t got = 0;  // bytes of the hello read so far
  };

  void listen() {
    const Resolved r(info_.master_addr, info_.master_port);
    if (r.rc != 0) throw Error(prefix_ + r.error(info_.master_addr));
    const addrinfo* chosen = nullptr;
    for (const addrinfo* a = r.list; a != nullptr; a = a->ai_next) {
      if (is_loopback(a->ai_addr)) {
        chosen = a;
        break;
      }
    }
    sockaddr_storage addr{};
    socklen_t len = 0;
    bool wildcard6 = false;
    if (chosen != nullptr) {
      std::memcpy(&addr, chosen->ai_addr, chosen->ai_addrlen);
      len = chosen->ai_addrlen;
    } else if (r.list->ai_family == AF_INET6) {
      auto* a6 = reinterpret_cast<sockaddr_in6*>(&addr);
      a6->sin6_family = AF_INET6;
      a6->sin6_addr = in6addr_any;
      a6->sin6_port = htons(static_cast<uint16_t>(info_.master_port));
      len = sizeof(sockaddr_in6);
      wildcard6 = true;
    } else {
      auto* a4 = reinterpret_cast<sockaddr_in*>(&addr);
      a4->sin_family = AF_INET;
      a4->sin_addr.s_addr = htonl(INADDR_ANY);
      a4->sin_port = htons(static_cast<uint16_t>(info_.master_port));
      len = sizeof(sockaddr_in);
    }
    const std::string bound = sockaddr_str(reinterpret_cast<const sockaddr*>(&addr), len);
    const std::string on = "MASTER_PORT " + std::to_string(info_.master_port) + " on " + info_.master_addr +
                           (chosen != nullptr ? "" : " (rank 0 listens on every interface, " + bound + ")");
    listener_ = Fd(::socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!listener_.valid()) throw Error(prefix_ + "could not open a socket for " + on + ": " + errno_text(errno));
    const int one = 1, zero = 0;
    ::setsockopt(listener_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (wildcard6) ::setsockopt(listener_.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    const bool bound_ok = ::bind(listener_.get(), reinterpret_cast<const sockaddr*>(&addr), len) == 0;
    if (!bound_ok || ::listen(listener_.get(), SOMAXCONN) != 0) {
      const int e = errno;
      if (e == EADDRINUSE) {
        throw Error(prefix_ + on + " is in use: " + errno_text(e) +
                    "; another socket holds it (a process listening there: an earlier job still running, two jobs "
                    "given the same port; or, for a port inside /proc/sys/net/ipv4/ip_local_port_range, some "
                    "connection's local end): choose another MASTER_PORT");
      }
      throw Error(prefix_ + "could not listen on " + on + ": " + errno_text(e) + (bound_ok ? " (listen)" : " (bind)"));
    }
  }

  // Every rank that has not joined, for the timeout message.
  std::vector<int> missing() const {
    std::vector<int> m;
    for (int r = 1; r < info_.world_size; ++r) {
      if (!joined_[static_cast<size_t>(r)].fd.valid()) m.push_back(r);
    }
    return m;
  }

  // Ends the rendezvous: `reason` goes to every joined rank and to `offender` (if any), then Error.
  [[noreturn]] void fail(const std::string& reason, Peer* offender = nullptr) {
    for (Peer& p : joined_) {
      if (p.fd.valid()) send_refusal(p.fd.get(), reason);
      p.fd.reset();
    }
    if (offender != nullptr && offender->fd.valid()) send_refusal(offender->fd.get(), reason);
    throw Error(prefix_ + reason);
  }

  [[noreturn]] void fail_timeout() {
    std::string reason = rank_list(missing()) + " of " + std::to_string(info_.world_size) + " did not join within " +
                         seconds_str(timeout_s_) + " s (rank 0 listened on " + where_ + "; " +
                         std::to_string(joined_count_) + " joined): " +
                         (missing().size() == 1 ? "it failed to start, is still starting, or was"
                                                : "they failed to start, are still starting, or were") +
                         " given another MASTER_ADDR or MASTER_PORT";
    if (strangers_ > 0) {
      reason += "; " + std::to_string(strangers_) + " connection" + (strangers_ == 1 ? "" : "s") +
                " that did not speak kiln's rendezvous protocol " + (strangers_ == 1 ? "was" : "were") + " dropped (";
      for (size_t i = 0; i < stranger_notes_.size(); ++i) reason += (i > 0 ? "; " : "") + stranger_notes_[i];
      reason += strangers_ > stranger_notes_.size() ? "; ...)" : ")";
    }
    fail(reason);
  }

  void drop_stranger(Peer& p, const std::string& what) {
    ++strangers_;
    if (stranger_notes_.size() < kMaxStrangerNotes) stranger_notes_.push_back("from " + p.from + ": " + what);
    p.fd.reset();
  }

  void accept_all() {
    for (;;) {
      sockaddr_storage addr{};
      socklen_t len = sizeof addr;
      const int fd = ::accept4(listener_.get(), reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd >= 0) {
        Peer p;
        p.fd = Fd(fd);
        p.from = sockaddr_str(reinterpret_cast<const sockaddr*>(&addr), len);
        pending_.push_back(std::move(p));
        continue;
      }
      const int e = errno;
      if (e == EAGAIN || e == EWOULDBLOCK) return;
      // A connection that was reset while queued, or a signal: nothing to accept this time.
      if (e == EINTR || e == ECONNABORTED || e == EPROTO || e == ENETDOWN || e == ENOPROTOOPT || e == EHOSTDOWN ||
          e == ENONET || e == EHOSTUNREACH || e == EOPNOTSUPP || e == ENETUNREACH) {
        return;
      }
      fail("accepting a connection on " + where_ + " failed: " + errno_text(e) +
           (e == EMFILE || e == ENFILE ? " (out of file descriptors: raise ulimit -n above the world size)" : ""));
    }
  }

  // Reads what `p` sent of its hello; a whole hello joins it (or fails the rendezvous).
  void read_hello(Peer& p) {
    const ssize_t k = ::recv(p.fd.get(), p.hello + p.got, kHelloBytes - p.got, MSG_DONTWAIT);
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) return;
      drop_stranger(p, "the connection failed before a whole hello: " + errno_text(errno));
      return;
    }
    if (k == 0) {
      drop_stranger(p, p.got == 0
                           ? "closed without sending anything"
                           : "closed after " + std::to_string(p.got) + " bytes (" + hex_bytes(p.hello, p.got) + ")");
      return;
    }
    p.got += static_cast<size_t>(k);
    if (p.got >= 4 && get_u32(p.hello) != kHelloMagic) {
      drop_stranger(p, "sent " + hex_bytes(p.hello, p.got) + ", not kiln's hello (magic 4b 49 4c 4e)");
      return;
    }
    if (p.got == kHelloBytes) join(p);
  }

  void join(Peer& p) {
    const uint32_t version = get_u32(p.hello + 4), rank = get_u32(p.hello + 8), world = get_u32(p.hello + 12);
    const uint32_t n = static_cast<uint32_t>(info_.world_size);
    if (version != kVersion) {
      fail("a rank from " + p.from + " speaks rendezvous protocol version " + std::to_string(version) +
               ", rank 0 speaks version " + std::to_string(kVersion) + ": every rank must run the same kiln",
           &p);
    }
    if (world != n) {
      fail("rank " + std::to_string(rank) + " (from " + p.from + ") says WORLD_SIZE is " + std::to_string(world) +
               ", rank 0's is " + std::to_string(n) + ": every rank must be given the same WORLD_SIZE",
           &p);
    }
    if (rank == 0 || rank >= n) {
      fail("a rank from " + p.from + " says it is rank " + std::to_string(rank) + ", outside 1.." +
               std::to_string(n - 1) + " (this process is rank 0): its RANK is wrong",
           &p);
    }
    Peer& slot = joined_[rank];
    if (slot.fd.valid()) {
      fail("rank " + std::to_string(rank) + " joined twice, from " + slot.from + " and from " + p.from +
               ": two processes were given RANK=" + std::to_string(rank),
           &p);
    }
    slot = std::move(p);  // leaves p's fd invalid: gather() forgets it
    ++joined_count_;
  }

  // A joined connection became readable: the peer closed it (or sent more than its hello).
  void check_joined(int rank) {
    Peer& p = joined_[static_cast<size_t>(rank)];
    uint8_t byte = 0;
    const ssize_t k = ::recv(p.fd.get(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) return;
    const std::string who = "rank " + std::to_string(rank) + " (from " + p.from + ")";
    const std::string waiting = "while rank 0 waited for " + rank_list(missing());
    if (k > 0) fail(who + " sent bytes after its hello " + waiting + ": not kiln's rendezvous protocol");
    const std::string how = k == 0 ? "closed its connection" : "lost its connection (" + errno_text(errno) + ")";
    p.fd.reset();
    fail(who + " " + how + " " + waiting + ": it gave up (a shorter timeout?) or exited");
  }

  void gather() {
    std::vector<pollfd> fds;
    std::vector<int> joined_ranks;  // the rank of each joined connection polled, in order
    while (joined_count_ < info_.world_size - 1) {
      if (deadline_.passed()) fail_timeout();
      fds.assign(1, pollfd{listener_.get(), POLLIN, 0});
      for (const Peer& p : pending_) fds.push_back(pollfd{p.fd.get(), POLLIN, 0});
      joined_ranks.clear();
      for (int r = 1; r < info_.world_size; ++r) {
        if (!joined_[static_cast<size_t>(r)].fd.valid()) continue;
        fds.push_back(pollfd{joined_[static_cast<size_t>(r)].fd.get(), POLLIN, 0});
        joined_ranks.push_back(r);
      }
      const int rc = ::poll(fds.data(), fds.size(), deadline_.ms_left());
      if (rc < 0) {
        if (errno == EINTR) continue;
        fail("poll failed: " + errno_text(errno));
      }
      if (rc == 0) continue;  // the deadline, seen at the top
      const size_t n_pending = pending_.size();
      for (size_t i = 0; i < joined_ranks.size(); ++i) {
        if (fds[1 + n_pending + i].revents != 0) check_joined(joined_ranks[i]);
      }
      for (size_t i = 0; i < n_pending; ++i) {
        if (fds[1 + i].revents != 0) read_hello(pending_[i]);
      }
      pending_.erase(std::remove_if(pending_.begin(), pending_.end(), [](const Peer& p) { return !p.fd.valid(); }),
                     pending_.end());
      if (fds[0].revents != 0) accept_all();
    }
  }

  void send_payload(const std::vector<uint8_t>& payload) {
    std::vector<uint8_t> reply(kReplyHeaderBytes + payload.size());
    put_u32(reply.data(), kReplyMagic);
    put_u32(reply.data() + 4, kStatusOk);
    put_u64(reply.data() + 8, payload.size());
    if (!payload.empty()) std::memcpy(reply.data() + kReplyHeaderBytes, payload.data(), payload.size());
    for (int r = 1; r < info_.world_size; ++r) {
      Peer& p = joined_[static_cast<size_t>(r)];
      const IoResult res = send_all(p.fd.get(), reply.data(), reply.size(), deadline_);
      if (res.kind != Io::Ok) {
        p.fd.reset();
        fail("could not send the payload to rank " + std::to_string(r) + " (from " + p.from + "): " +
             (res.kind == Io::Timeout ? "it did not take it within " + seconds_str(timeout_s_) + " s"
                                      : errno_text(res.err) + " (it gave up or exited)"));
      }
      p.fd.reset();  // the kernel still delivers what is queued
    }
  }

  const EnvRendezvous& info_;
  double timeout_s_;
  Deadline deadline_;
  std::string where_, prefix_;
  Fd listener_;
  std::vector<Peer> pending_;  // accepted, hello not yet whole
  std::vector<Peer> joined_;   // by rank; an invalid fd: not joined
  int joined_count_ = 0;
  size_t strangers_ = 0;
  std::vector<std::string> stranger_notes_;
};

// Whether a connected socket is connected to itself (local address == peer address).
bool self_connected(int fd) {
  sockaddr_storage local{}, peer{};
  socklen_t llen = sizeof local, plen = sizeof peer;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &llen) != 0) return false;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) != 0) return false;
  return llen == plen && std::memcmp(&local, &peer, llen) == 0;
}

// Another rank: connects to rank 0 (retrying until the deadline), says hello, reads the payload.
std::vector<uint8_t> join_rank_zero(const EnvRendezvous& info, double timeout_s, const Deadline& deadline) {
  const std::string where = endpoint(info.master_addr, info.master_port);
  const std::string prefix =
      "dist rendezvous (rank " + std::to_string(info.rank) + " of " + std::to_string(info.world_size) + "): ";
  const std::string within = " within " + seconds_str(timeout_s) + " s";

  Fd fd;
  std::string last = "no attempt finished";  // why the last attempt failed
  auto nap = std::chrono::milliseconds(10);
  while (!fd.valid()) {
    if (deadline.passed()) {
      throw Error(prefix + "could not reach rank 0 at " + where + within + " (last attempt: " + last +
                  "): is rank 0 running, and were all ranks given the same MASTER_ADDR and MASTER_PORT?");
    }
    const Resolved r(info.master_addr, info.master_port);
    if (r.rc != 0) last = r.error(info.master_addr);
    for (const addrinfo* a = r.rc == 0 ? r.list : nullptr; a != nullptr && !deadline.passed(); a = a->ai_next) {
      Fd s(::socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
      if (!s.valid()) {
        last = "socket: " + errno_text(errno);
        continue;
      }
      int err = ::connect(s.get(), a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
      if (err == EINPROGRESS || err == EINTR) {  // after EINTR the connect goes on in the background
        if (poll_one(s.get(), POLLOUT, deadline.sooner(kConnectAttemptS)) == 0) {
          err = ETIMEDOUT;
        } else {
          socklen_t len = sizeof err;
          if (::getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        }
      }
      const std::string to = sockaddr_str(a->ai_addr, a->ai_addrlen);
      if (err == 0 && self_connected(s.get())) {
        last = "connected to itself at " + to + ": nothing listened there yet";
        continue;
      }
      if (err == 0) {
        fd = std::move(s);
        break;
      }
      last = "connecting to " + to + ": " + errno_text(err);
    }
    if (fd.valid()) break;
    std::this_thread::sleep_for(
        std::min<std::chrono::milliseconds>(nap, std::chrono::milliseconds(deadline.ms_left())));
    nap = std::min(nap * 2, std::chrono::milliseconds(200));
  }

  // Explains a failed read or write on the connection to rank 0.
  auto broken = [&](const IoResult& res, const std::string& doing) -> Error {
    switch (res.kind) {
      case Io::Timeout:
        return Error(prefix + "rank 0 at " + where + " accepted this rank but " + doing + " did not finish" + within +
                     ": rank 0 waits for every rank to join, and its error lists those that did not");
      case Io::Eof:
        return Error(prefix + "rank 0 at " + where + " closed the connection before " + doing +
                     " finished: rank 0 failed or exited (see its error)");
      default:
        return Error(prefix + "the connection to rank 0 at " + where + " failed before " + doing +
                     " finished: " + errno_text(res.err) + "; rank 0 failed or exited (see its error)");
    }
  };

  uint8_t hello[kHelloBytes];
  put_u32(hello, kHelloMagic);
  put_u32(hello + 4, kVersion);
  put_u32(hello + 8, static_cast<uint32_t>(info.rank));
  put_u32(hello + 12, static_cast<uint32_t>(info.world_size));
  IoResult res = send_all(fd.get(), hello, sizeof hello, deadline);
  if (res.kind != Io::Ok) throw broken(res, "sending this rank's hello");

  uint8_t header[kReplyHeaderBytes];
  res = recv_all(fd.get(), header, sizeof header, deadline);
  if (res.kind != Io::Ok) throw broken(res, "receiving the payload");
  const uint32_t magic = get_u32(header), status = get_u32(header + 4);
  const uint64_t length = get_u64(header + 8);
  if (magic != kReplyMagic) {
    throw Error(prefix + "the process at " + where + " is not kiln's rank 0: its reply began " + hex_bytes(header, 4) +
                " where kiln's begins 6b 69 6c 6e (another program on MASTER_PORT " + std::to_string(info.master_port) +
                "?)");
  }
  if (status == kStatusRefused && length <= kMaxMessage) {
    std::string reason(static_cast<size_t>(length), '\0');
    res = recv_all(fd.get(), reinterpret_cast<uint8_t*>(reason.data()), reason.size(), deadline);
    if (res.kind != Io::Ok) reason = "(its reason did not arrive)";
    throw Error(prefix + "rank 0 at " + where + " ended the rendezvous: " + reason);
  }
  if (status != kStatusOk) {
    throw Error(prefix + "rank 0 at " + where + " replied with status " + std::to_string(status) + " and length " +
                std::to_string(length) + ", which this rank does not understand (another kiln version?)");
  }
  if (length > kRendezvousMaxPayload) {
    throw Error(prefix + "rank 0 at " + where + " announced a payload of " + std::to_string(length) +
                " bytes, above the limit of " + std::to_string(kRendezvousMaxPayload));
  }
  std::vector<uint8_t> payload(static_cast<size_t>(length));
  res = recv_all(fd.get(), payload.data(), payload.size(), deadline);
  if (res.kind != Io::Ok) throw broken(res, "receiving the payload");
  return payload;
}

// Parses a whole decimal integer (an optional '-', digits, nothing else); one past int64's range
// reads as its nearest end, so that the caller's range check names it.
bool parse_int(const char* text, int64_t& out) {
  const char* end = text + std::strlen(text);
  const auto [ptr, ec] = std::from_chars(text, end, out);
  if (ec == std::errc::result_out_of_range && ptr == end) {
    out = text[0] == '-' ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max();
    return true;
  }
  return ec == std::errc() && ptr == end && ptr != text;
}

[[noreturn]] void env_error(const char* var, const char* value, const std::string& why) {
  throw Error(std::string("env:// rendezvous: ") + var + "='" + value + "' " + why);
}

int64_t env_int(const char* var, const char* value) {
  int64_t v = 0;
  if (!parse_int(value, v)) env_error(var, value, "is not a decimal integer");
  return v;
}

}  // namespace

bool env_rendezvous_present() { return std::getenv("RANK") != nullptr && std::getenv("WORLD_SIZE") != nullptr; }

EnvRendezvous env_rendezvous_from_env() {
  EnvRendezvous info;
  const char* rank = std::getenv("RANK");
  const char* world = std::getenv("WORLD_SIZE");
  if (world == nullptr) throw Error("env:// rendezvous: WORLD_SIZE is not set (the launcher sets RANK and WORLD_SIZE)");
  if (rank == nullptr) throw Error("env:// rendezvous: RANK is not set (the launcher sets RANK and WORLD_SIZE)");
  // Read as int64 and checked against the ranges before they narrow to int.
  const int64_t world_size = env_int("WORLD_SIZE", world);
  if (world_size < 1 || world_size > kRendezvousMaxWorld) {
    env_error("WORLD_SIZE", world, "must be in [1, " + std::to_string(kRendezvousMaxWorld) + "]");
  }
  info.world_size = static_cast<int>(world_size);
  const int64_t rank_value = env_int("RANK", rank);
  if (rank_value < 0 || rank_value >= world_size) {
    env_error("RANK", rank, "is outside [0, " + std::to_string(info.world_size) + ") (WORLD_SIZE=" + world + ")");
  }
  info.rank = static_cast<int>(rank_value);
  info.local_rank = info.rank;
  if (const char* local = std::getenv("LOCAL_RANK")) {
    const int64_t local_value = env_int("LOCAL_RANK", local);
    if (local_value < 0 || local_value >= world_size) {
      env_error("LOCAL_RANK", local,
                "is outside [0, " + std::to_string(info.world_size) + ") (WORLD_SIZE=" + world + ")");
    }
    info.local_rank = static_cast<int>(local_value);
  }
  info.master_addr = "127.0.0.1";
  if (const char* addr = std::getenv("MASTER_ADDR")) {
    if (*addr == 0)
      env_error("MASTER_ADDR", addr, "is empty: unset it for 127.0.0.1, or give rank 0's host name or address");
    info.master_addr = addr;
  }
  if (const char* port = std::getenv("MASTER_PORT")) {
    const int64_t port_value = env_int("MASTER_PORT", port);
    if (port_value < 1 || port_value > 65535) env_error("MASTER_PORT", port, "is outside [1, 65535]");
    info.master_port = static_cast<int>(port_value);
  } else if (info.world_size > 1) {
    throw Error(std::string("env:// rendezvous: MASTER_PORT is not set; WORLD_SIZE=") + world +
                " needs it (the port rank 0 listens on)");
  }
  return info;
}

std::vector<uint8_t> rendezvous_broadcast(const EnvRendezvous& info, const std::vector<uint8_t>& payload,
                                          double timeout_s) {
  const std::string op = "rendezvous_broadcast";
  if (info.world_size < 1 || info.world_size > kRendezvousMaxWorld) {
    throw Error(op + ": world_size " + std::to_string(info.world_size) + " is outside [1, " +
                std::to_string(kRendezvousMaxWorld) + "]");
  }
  if (info.rank < 0 || info.rank >= info.world_size) {
    throw Error(op + ": rank " + std::to_string(info.rank) + " is outside [0, " + std::to_string(info.world_size) +
                ")");
  }
  if (!(timeout_s > 0) || !std::isfinite(timeout_s) || timeout_s > 1e9) {
    throw Error(op + ": the timeout must be a positive number of seconds, got " + seconds_str(timeout_s));
  }
  if (info.rank == 0 && payload.size() > kRendezvousMaxPayload) {
    throw Error(op + ": the payload has " + std::to_string(payload.size()) + " bytes, above the limit of " +
                std::to_string(kRendezvousMaxPayload));
  }
  if (info.world_size == 1) return payload;
  if (info.master_port < 1 || info.master_port > 65535) {
    throw Error(op + ": master_port " + std::to_string(info.master_port) + " is outside [1, 65535]");
  }
  if (info.master_addr.empty()) throw Error(op + ": master_addr is empty");

  const Deadline deadline(timeout_s);
  if (info.rank != 0) return join_rank_zero(info, timeout_s, deadline);
  RankZero(info, timeout_s, deadline).run(payload);
  return payload;
}

}  // namespace kiln::dist
