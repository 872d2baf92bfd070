// The env:// rendezvous: how ranks started without MPI (torchrun, a Slurm script, a Kubernetes job
// that sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT) find each other. Its one job is to carry
// a small blob (NCCL's 128-byte unique id) from rank 0 to every rank over TCP; everything after
// that travels on the backend's own transport. The protocol and its decisions are described at the
// top of dist/rendezvous.cpp. Linux only (accept4, SOCK_CLOEXEC, MSG_NOSIGNAL).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::dist {

// Where this process stands in an env:// job: its rank, the number of ranks, its rank on its own
// machine (which GPU it takes), and where rank 0 listens.
struct EnvRendezvous {
  int rank = 0, world_size = 1, local_rank = 0;
  std::string master_addr;  // host name or IP address
  int master_port = 0;
};

// The most ranks the rendezvous takes: every rank connects to rank 0 at once, one socket each.
inline constexpr int kRendezvousMaxWorld = 1 << 16;

// The largest payload rendezvous_broadcast carries (1 MiB, inclusive). The receivers refuse a
// longer announced length, so a corrupt or foreign length field cannot make them allocate gigabytes.
inline constexpr size_t kRendezvousMaxPayload = size_t{1} << 20;

// Whether the launcher set RANK and WORLD_SIZE (then env:// is the way to start). Set to anything,
// the empty string included: a malformed value is then env_rendezvous_from_env's error, rather
// than a silent fall back to another way of starting.
bool env_rendezvous_present();

// Reads RANK, WORLD_SIZE, LOCAL_RANK (default: RANK), MASTER_ADDR (default 127.0.0.1), MASTER_PORT
// (required when WORLD_SIZE > 1; checked whenever it is set). A missing or malformed value (not a
// decimal integer, WORLD_SIZE outside [1, kRendezvousMaxWorld], RANK or LOCAL_RANK outside
// [0, WORLD_SIZE), a port outside
// [1, 65535], an empty MASTER_ADDR) is a kiln::Error naming the variable and quoting its value.
EnvRendezvous env_rendezvous_from_env();

// Sends rank 0's `payload` to every rank and returns it on every rank (the argument of the other
// ranks is ignored). Rank 0 listens on master_addr:master_port and waits for the world_size - 1
// other ranks; they connect (retrying while rank 0 is not up yet), say who they are, and receive
// the payload. World size 1 returns the payload without opening a socket. Every step is bounded
// by one deadline, timeout_s from the call: past it, rank 0's kiln::Error lists the ranks that did
// not join, and another rank's names the address it could not reach (or says that rank 0 accepted
// it but sent nothing). A peer that gives a wrong world size, a rank out of range or a rank that
// already joined fails the rendezvous on rank 0 and on every rank connected to it, with rank 0's
// message; a connection that does not speak the protocol at all is dropped and rank 0 keeps
// waiting (its timeout message then mentions it). The payload is at most kRendezvousMaxPayload
// bytes; the port already in use on rank 0 is an Error saying so.
std::vector<uint8_t> rendezvous_broadcast(const EnvRendezvous& info, const std::vector<uint8_t>& payload,
                                          double timeout_s);

}  // namespace kiln::dist
