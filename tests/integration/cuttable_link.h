// A loopback TCP proxy for fault tests: forwards every connection to a target, and can cut the link
// (every connection closed, new ones refused) and restore it on the same port, as a WAN link that
// drops would. Test-only; `strait wan` (issue 9) is the real link emulator.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace strait::testing {

class CuttableLink {
 public:
  // Forwards 127.0.0.1:port() to 127.0.0.1:`target_port`.
  explicit CuttableLink(int target_port);
  ~CuttableLink();  // Cuts and joins its threads.

  int port() const { return port_; }
  void Cut();      // Closes every connection and stops listening.
  void Restore();  // Listens again on the same port.

 private:
  void Listen();
  void Accept(int listener);
  void Pump(int a, int b);

  const int target_port_;
  int port_ = 0;
  std::mutex mu_;
  int listener_ = -1;
  std::vector<int> sockets_;         // Open connection sockets, both sides.
  std::vector<std::thread> threads_;
};

}  // namespace strait::testing
