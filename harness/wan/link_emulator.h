// A userspace TCP link emulator (DESIGN.md §10): listens on one address and forwards every accepted
// connection to another through an emulated WAN link, so that a site and the gateway on one
// machine see the rate, delay, jitter, loss stalls and cuts of a real link between datacenters.
//
//   auto link = LinkEmulator::Start("127.0.0.1:0", "127.0.0.1:7443", *NamedProfile("continent"));
//   if (!link.ok()) return link.status();
//   // ... dial (*link)->address() instead of the gateway; (*link)->Cut(), Restore() ...
//
// The link model. Each direction (up = client -> server, down = server -> client) is one pipe for
// the whole emulator, shared by all its connections, as a WAN link is one pipe:
//  * Bytes read from a connection's source socket (up to 64 KiB per read, one buffer per piece)
//    enter the direction's bottleneck, which serializes them at the profile's rate:
//      transmit_end = max(arrival, link_free_at) + bytes * 8 / rate;  link_free_at = transmit_end.
//  * The bytes waiting for the bottleneck are bounded by max(256 KiB, 2 x rate x 10 ms), the buffer
//    of a bottleneck router; while it is full no connection reads in that direction, so senders get
//    TCP back-pressure. Serialized bytes are "in the pipe" (about rate x delay of them).
//  * A piece is delivered at transmit_end + one_way_delay + U(0, jitter), but never before the
//    previous piece of its connection: a TCP stream keeps its order.
//  * Loss: TCP hides a lost segment as delay (the bytes behind it wait for the retransmission).
//  With
//    a LossBurst set, bursts start at exponentially distributed intervals (mean `mean_interval`) in
//    each direction; a piece serialized during a burst is delivered no earlier than
//    burst_end + one_way_delay, and the pieces behind it wait too (head-of-line blocking).
//  * Each connection holds at most what its pipe can carry (bottleneck buffer + rate x (delay +
//    jitter + loss burst), at least 4 MiB; 64 MiB for an unlimited rate) of read but undelivered
//    bytes per direction; beyond that it stops reading, as a closed receive window would.
//  * A half-close (FIN) is passed on after the bytes before it are delivered; an error or reset on
//    either side closes both sides of that connection.
//
// Threading: the emulator runs on an EmulatorThread, its own or one shared with other emulators;
// every public method is thread-safe and never blocks on the network (Cut/Stall/Restore take effect
// on the I/O thread shortly after they return).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "harness/wan/link_profile.h"

namespace strait::harness {

class EmulatorThread;

class LinkEmulator {
 public:
  // Start's default dial timeout. A forward address that drops SYNs would otherwise hold the
  // client's connection for the kernel's SYN retries (about two minutes).
  static constexpr std::chrono::milliseconds kDialTimeout{10'000};

  // Listens on `listen` ("HOST:PORT", "[::1]:PORT"; port 0 picks a free one) and forwards each
  // accepted connection to `forward` ("HOST:PORT", resolved once here) through the link `profile`.
  // A connection whose forward dial fails, or takes over `dial_timeout`, is closed
  // (Stats::failed_dials). Runs on `thread`, or on a thread of its own when it is null.
  // Errors: InvalidArgument for a malformed address or profile or a dial timeout <= 0, Unavailable
  // when `listen` cannot be bound.
  static absl::StatusOr<std::unique_ptr<LinkEmulator>> Start(
      const std::string& listen, const std::string& forward, LinkProfile profile,
      std::chrono::milliseconds dial_timeout = kDialTimeout,
      std::shared_ptr<EmulatorThread> thread = nullptr);

  // Closes the listener and every connection (bytes still in the emulated pipe are dropped) before
  // it returns; joins the I/O thread when it was the thread's last user. Not from the I/O thread.
  ~LinkEmulator();

  LinkEmulator(const LinkEmulator&) = delete;
  LinkEmulator& operator=(const LinkEmulator&) = delete;

  // The address actually bound, "127.0.0.1:PORT" or "[::1]:PORT".
  std::string address() const;
  int port() const;
  const LinkProfile& profile() const;

  // The link goes down: every open connection is closed (both sides), and new connections are
  // accepted and closed at once, until Restore().
  void Cut();
  // Blackhole: the link loses every packet. Bytes are neither delivered nor dropped; they are held
  // (and reading stops once a connection's pipe is full) until Restore(). New connections are
  // accepted and forwarded but carry nothing either.
  void Stall();
  // Back up. After a stall the held bytes are delivered one one-way delay after Restore() at the
  // earliest (the retransmission crosses the link), in order, none lost.
  void Restore();

  enum class State { kUp, kCut, kStalled };
  struct Stats {
    // Written to the forward side / back to the clients, counted as each write completes (a
    // peer may read bytes a moment before they are counted).
    uint64_t bytes_up = 0;
    uint64_t bytes_down = 0;
    uint64_t connections = 0;  // Accepted and forwarded, in all (not those refused while cut).
    uint64_t open_connections = 0;
    uint64_t failed_dials = 0;  // Accepted, but `forward` refused them or did not answer in time.
    State state = State::kUp;   // As last requested.
  };
  Stats stats() const;

  // EmulatorThread::CpuSeconds of the emulator's I/O thread: what emulating the link costs, or on
  // a shared thread, all the links on it.
  double CpuSeconds() const;

 private:
  struct Impl;
  LinkEmulator(std::shared_ptr<EmulatorThread> thread, std::shared_ptr<Impl> impl);
  std::shared_ptr<EmulatorThread> thread_;  // Declared first: outlives impl_.
  std::shared_ptr<Impl> impl_;
};

// "up", "cut" or "stalled".
const char* StateName(LinkEmulator::State state);

}  // namespace strait::harness
