#include "tests/integration/cuttable_link.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

namespace strait::testing {
namespace {

sockaddr_in Loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

}  // namespace

CuttableLink::CuttableLink(int target_port) : target_port_(target_port) { Listen(); }

CuttableLink::~CuttableLink() {
  Cut();
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    threads.swap(threads_);
  }
  for (std::thread& t : threads) t.join();
}

void CuttableLink::Listen() {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in address = Loopback(port_);
  bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t size = sizeof(address);
  getsockname(listener, reinterpret_cast<sockaddr*>(&address), &size);
  port_ = ntohs(address.sin_port);
  listen(listener, 16);
  std::lock_guard<std::mutex> lock(mu_);
  listener_ = listener;
  threads_.emplace_back([this, listener] { Accept(listener); });
}

void CuttableLink::Accept(int listener) {
  while (true) {
    const int client = accept(listener, nullptr, nullptr);
    if (client < 0) return;  // Cut: the listener was shut down.
    const int server = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in target = Loopback(target_port_);
    if (connect(server, reinterpret_cast<sockaddr*>(&target), sizeof(target)) != 0) {
      close(client);
      close(server);
      continue;
    }
    const int one = 1;  // Forward small frames at once, as gRPC's own sockets do.
    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    std::lock_guard<std::mutex> lock(mu_);
    sockets_.push_back(client);
    sockets_.push_back(server);
    threads_.emplace_back([this, client, server] { Pump(client, server); });
  }
}

void CuttableLink::Pump(int a, int b) {
  char buffer[64 << 10];
  pollfd fds[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
  while (poll(fds, 2, -1) > 0) {
    bool open = true;
    for (int i = 0; i < 2 && open; ++i) {
      if (fds[i].revents == 0) continue;
      const ssize_t n = read(fds[i].fd, buffer, sizeof(buffer));
      open = n > 0 && write(fds[1 - i].fd, buffer, static_cast<size_t>(n)) == n;
    }
    if (!open) break;
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (int fd : {a, b}) {
    shutdown(fd, SHUT_RDWR);
    close(fd);
    sockets_.erase(std::remove(sockets_.begin(), sockets_.end(), fd), sockets_.end());
  }
}

void CuttableLink::Cut() {
  std::lock_guard<std::mutex> lock(mu_);
  if (listener_ >= 0) {
    shutdown(listener_, SHUT_RDWR);  // Ends accept().
    close(listener_);
    listener_ = -1;
  }
  for (int fd : sockets_) shutdown(fd, SHUT_RDWR);  // Each pump ends and closes its pair.
}

void CuttableLink::Restore() { Listen(); }

}  // namespace strait::testing
