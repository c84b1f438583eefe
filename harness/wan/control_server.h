// The control socket of `strait wan`: a line protocol on TCP that scripts and tests use to cut,
// stall and restore the emulated link and read its counters.
//
//   request (one line)   answer (one line)
//   cut                  ok
//   stall                ok
//   restore              ok
//   stats
//   {"bytes_up":N,"bytes_down":N,"connections":N,"open_connections":N,"state":"up|cut|stalled"}
//   anything else        error: unknown command '...' (cut, stall, restore, stats)
//
// No authentication: bind it to loopback (the default of `strait wan --control`).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "harness/wan/link_emulator.h"

namespace strait::harness {

// The one-line JSON of the `stats` answer.
std::string StatsJson(const LinkEmulator::Stats& stats);

// The answer to one request line (without its newline).
std::string HandleControlLine(LinkEmulator& link, std::string_view line);

class ControlServer {
 public:
  // Listens on `address` ("HOST:PORT", port 0 picks a free one) on an I/O thread of its own and
  // serves any number of clients, each a sequence of lines. `link` is not owned and must outlive
  // the server. Errors: InvalidArgument for a malformed address, Unavailable when it cannot bind.
  static absl::StatusOr<std::unique_ptr<ControlServer>> Start(const std::string& address,
                                                              LinkEmulator* link);
  // Closes the listener and every client, and joins the thread.
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // "127.0.0.1:PORT" actually bound.
  std::string address() const;

 private:
  struct Impl;
  explicit ControlServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace strait::harness
