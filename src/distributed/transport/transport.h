// Transports (distributed layer, internal): how a group's ranks get connected. connect_links()
// publishes this rank's addresses in the store, reads its peers', and returns one Link per peer:
//   - shared memory (shm_link.cpp) for peers on the same host: byte rings in a segment owned by the
//     receiver; large messages move in one copy straight from the sender's memory
//     (process_vm_readv) when the kernel allows it;
//   - TCP (tcp_link.cpp) for the others, or for every peer with LOOM_TRANSPORT=tcp: several
//     connections per peer (channels) that split large messages, non-blocking, writing straight
//     from tensor memory.
// Setup is bounded by the deadline; a missing peer is a TimeoutError naming it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "distributed/transport/communicator.h"

namespace loom::dist {

class Store;

struct TransportOptions {
  std::string transport = "auto";  // auto | tcp | shm (LOOM_TRANSPORT)
  int tcp_channels = 2;            // LOOM_TCP_CHANNELS
  size_t shm_ring_bytes = 1u << 20;
  size_t cma_min_bytes = 64u << 10;  // LOOM_SHM_CMA_MIN; messages this large go by process_vm_readv
  std::string bind_host;  // address to listen on (default: the one that reaches the store)
  Clock::time_point deadline;
};

// Reads LOOM_TRANSPORT, LOOM_TCP_CHANNELS, LOOM_SHM_CMA_MIN over the defaults.
TransportOptions transport_options_from_env();

// `store` should be prefixed for the group (keys written: "tp/<rank>/..."). `describe` receives a
// summary such as "shm x3, tcp x4 (2 channels)".
// `local_ranks` receives how many ranks of the group (this one included) share this machine's
// cores (hosts emulated on one machine count together: HostTopology::machine), and
// `host_of` each rank's host index (hosts numbered by first appearance, for Comm::set_host_of).
// Which peers share a host: loom::dist::host_identity() (loom/distributed/topology.h).
std::vector<std::unique_ptr<Link>> connect_links(Store& store, int rank, int size,
                                                 const TransportOptions& opts,
                                                 std::string* describe, int* local_ranks = nullptr,
                                                 std::vector<int>* host_of = nullptr);

// Pieces for the two transports (connect.cpp calls them).
struct TcpPeer {
  int peer;
  std::vector<int> fds;  // one per channel, already connected and handshaken
};
std::unique_ptr<Link> make_tcp_link(int rank, TcpPeer peer);

class ShmSegment;  // this rank's inbox (rings written by local peers)
struct ShmSetup {
  std::shared_ptr<ShmSegment> inbox;                  // mapped here; one ring per local peer
  std::vector<std::shared_ptr<ShmSegment>> outboxes;  // peers' inboxes, by peer
};
std::shared_ptr<ShmSegment> shm_create_inbox(const std::string& name, int size, size_t ring_bytes);
std::shared_ptr<ShmSegment> shm_open_inbox(const std::string& name);
void shm_unlink(const std::string& name);
// coop_writes: this rank may write into the peer's memory (cma_write_probe), so it helps copy the
// large messages it sends (Note [Cooperative copies] in shm_link.cpp).
std::unique_ptr<Link> make_shm_link(int rank, int peer, int peer_pid,
                                    std::shared_ptr<ShmSegment> inbox,
                                    std::shared_ptr<ShmSegment> peer_inbox, size_t cma_min_bytes,
                                    bool coop_writes);
// Single-copy reads (process_vm_readv): each rank publishes cma_probe_address(); a consumer tests
// cma_probe(peer_pid, addr) and records the answer in its inbox with shm_mark_cma before the links
// are made, so the producer knows whether it may send by address.
uint64_t cma_probe_address();
bool cma_probe(int pid, uint64_t addr);
bool cma_write_probe(int pid, uint64_t addr);  // process_vm_writev into the peer works
void shm_mark_cma(ShmSegment& inbox, int peer, bool ok);

}  // namespace loom::dist
