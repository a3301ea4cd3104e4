#include "ibverbs/fork_service.h"

#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "log/log.h"
#include "service_daemon/server.h"

namespace uroce::ibverbs {
namespace {

// The server logs through spdlog's default logger (uroced's main sets it).
// In a program that has not set one, spdlog's stock logger would print the
// daemon's info lines on the program's stdout: they go where uroce's own
// lines go instead (stderr, or the embedder's sink; UROCE_LOG_LEVEL, warn
// by default). A program's own default logger is left as it is.
void log_like_uroce() {
  if (!spdlog::default_logger_raw()->name().empty()) return;
  spdlog::logger& ours = uroce::logger();
  auto l = std::make_shared<spdlog::logger>("uroce", ours.sinks().begin(), ours.sinks().end());
  l->set_level(ours.level());
  spdlog::set_default_logger(std::move(l));
}

}  // namespace

std::unique_ptr<ForkService> ForkService::start(Context& ctx, std::size_t engines, std::string& why) {
  std::unique_ptr<ForkService> s(new ForkService);
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp != nullptr && *tmp == '/' ? tmp : "/tmp") + "/uroce-fork-XXXXXX";
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  // mkdtemp: a new folder of mode 0700, so only this uid (and root) can
  // reach the socket at all; the server checks the peer's uid as well.
  if (mkdtemp(name.data()) == nullptr) {
    why = "cannot make a folder for the socket (" + pattern + "): " + std::strerror(errno) + " (set TMPDIR)";
    return nullptr;
  }
  s->folder_ = name.data();
  s->socket_ = s->folder_ + "/uroced.sock";
  s->stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s->stop_fd_ < 0) {
    why = std::string("eventfd: ") + std::strerror(errno);
    return nullptr;
  }
  daemon::ServerConfig config;
  config.socket = s->socket_;
  config.socket_mode = 0600;
  config.stop_fd = s->stop_fd_;
  config.own_uid_only = true;
  // Every client is a child of this program, of its uid: the per-uid share
  // of connections (max_clients / 4 by default) would cap the children at
  // 16; the other budgets are uroced's defaults, ample for a test suite.
  config.limits.uid_connections = config.limits.clients;
  log_like_uroce();
  s->server_ = std::make_unique<daemon::Server>(ctx, engines, config);
  if (std::string e = s->server_->listen(); !e.empty()) {
    why = e;
    return nullptr;
  }
  // Born with every signal blocked: the program's handlers run on its own
  // threads (the engines' workers block them too).
  sigset_t all, was;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &was);
  s->loop_ = std::thread([p = s.get()] {
    p->server_->run();
    p->loop_done_.store(true, std::memory_order_release);
  });
  pthread_setname_np(s->loop_.native_handle(), "uroce-serve");
  pthread_sigmask(SIG_SETMASK, &was, nullptr);
  spdlog::info("uroce: serving this process's forked children at {}", s->socket_);
  return s;
}

ForkService::~ForkService() {
  stop();
  server_.reset();  // removes the socket (its destructor), after the loop's clients were dropped
  remove_socket();
  if (stop_fd_ >= 0) close(stop_fd_);
}

Context::WorkerHook ForkService::hook() const {
  return Context::WorkerHook{&daemon::Server::pump_completions, server_.get(), &daemon::Server::pump_requests};
}

bool ForkService::has_clients() const { return server_ && !server_->client_table().empty(); }

void ForkService::stop() {
  if (!loop_.joinable()) return;
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = write(stop_fd_, &one, sizeof one);
  loop_.join();
}

bool ForkService::stop_at_exit(std::chrono::milliseconds wait) {
  remove_socket();  // first: no child attaches from here on
  if (!loop_.joinable()) return true;
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = write(stop_fd_, &one, sizeof one);
  const auto end = std::chrono::steady_clock::now() + wait;
  while (!loop_done_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!loop_done_.load(std::memory_order_acquire)) {
    loop_.detach();  // blocked on what the exiting thread holds: it ends with the process
    return false;
  }
  loop_.join();
  return true;
}

void ForkService::remove_socket() {
  if (socket_.empty()) return;
  // Ours: the folder is 0700 and this uid's, so nobody else put a name there.
  unlink(socket_.c_str());
  rmdir(folder_.c_str());
  socket_.clear();
}

}  // namespace uroce::ibverbs
